"""Functions run in `spawn` child processes by test_processes.py (kept out of the test module so a
child imports only numpy, zarr and zarrdb). Each takes a pickled SQLiteStore, which arrives
unopened and opens lazily in the child, and closes it before returning."""

from __future__ import annotations

import os
import time
import traceback

import numpy as np

ARRAY = "arr"
SHAPE = (256, 256)
CHUNK = 32
REGIONS = 4  # row bands of SHAPE[0] // REGIONS rows, one writer each
FILL = -1


def region_rows(region: int) -> slice:
    rows = SHAPE[0] // REGIONS
    return slice(region * rows, (region + 1) * rows)


def final_value(region: int) -> np.ndarray:
    """What the writer of `region` leaves there (never FILL)."""
    rows = SHAPE[0] // REGIONS
    return np.arange(rows * SHAPE[1], dtype=np.int32).reshape(rows, SHAPE[1]) + region * 1_000_000


def chunk_slices() -> list[tuple[slice, slice]]:
    return [
        (slice(r, r + CHUNK), slice(c, c + CHUNK))
        for r in range(0, SHAPE[0], CHUNK)
        for c in range(0, SHAPE[1], CHUNK)
    ]


def expected_chunk(rows: slice, cols: slice) -> np.ndarray:
    band = SHAPE[0] // REGIONS
    region = rows.start // band
    start = rows.start - region * band
    return final_value(region)[start : start + (rows.stop - rows.start), cols]


def write_region(store, region: int, rounds: int, queue) -> None:
    """Write the final values of `region` `rounds` times: chunk by chunk for even regions,
    the whole band in one call (a gather of 16 sets: group commit) for odd ones."""
    import zarr

    try:
        arr = zarr.open_array(store, path=ARRAY, mode="r+")
        rows = region_rows(region)
        value = final_value(region)
        calls = 0
        for _ in range(rounds):
            if region % 2:
                arr[rows, :] = value
                calls += 1
            else:
                for r in range(0, value.shape[0], CHUNK):
                    for c in range(0, SHAPE[1], CHUNK):
                        arr[rows.start + r : rows.start + r + CHUNK, c : c + CHUNK] = value[
                            r : r + CHUNK, c : c + CHUNK
                        ]
                        calls += 1
        store.close()
        queue.put(("writer", region, os.getpid(), {"calls": calls}))
    except BaseException:
        queue.put(("writer", region, os.getpid(), {"error": traceback.format_exc()}))


def read_until(store, reader: int, done, queue) -> None:
    """Read every chunk over and over until `done` is set, then once more: each chunk read must
    be all FILL or exactly its region's final value, never a mixture or anything else."""
    import zarr

    try:
        arr = zarr.open_array(store, path=ARRAY, mode="r")
        counts = {"fill": 0, "final": 0, "passes": 0}
        bad: list[str] = []
        last = False
        while True:
            finished = done.is_set()
            for rows, cols in chunk_slices():
                got = arr[rows, cols]
                if np.array_equal(got, expected_chunk(rows, cols)):
                    counts["final"] += 1
                elif not last and (got == FILL).all():
                    counts["fill"] += 1
                else:
                    bad.append(
                        f"chunk at rows {rows.start} cols {cols.start}: {got[:2, :4].tolist()}"
                    )
            counts["passes"] += 1
            if last or bad:
                break
            last = finished  # one complete pass after the writers are done: all final
            if not finished:
                time.sleep(0.001)
        store.close()
        queue.put(("reader", reader, os.getpid(), {**counts, "bad": bad[:10]}))
    except BaseException:
        queue.put(("reader", reader, os.getpid(), {"error": traceback.format_exc()}))
