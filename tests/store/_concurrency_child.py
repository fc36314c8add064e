"""Helpers of test_concurrency.py, also run as a script in a separate process.

    python _concurrency_child.py reader PATH      read the pair of keys until stdin closes,
                                                   then print the reader's stats as JSON
    python _concurrency_child.py ingest PATH MIB PIPELINE
                                                   write a MIB MiB float32 array with
                                                   `arr[:] = data`, print memory facts as JSON

Kept free of pytest and of relative imports, so the child imports only numpy, zarr and zarrdb.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import threading
import time
from typing import Any

import numpy as np
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype

# --- the pair of keys that must agree ----------------------------------------------------------

KEY_A = "pair/a"
KEY_B = "pair/b"
SIZE_A = 160 * 1024  # a chain of overflow pages, read with blob I/O
SIZE_B = 24 * 1024


def pair_value(generation: int, size: int) -> bytes:
    """`size` bytes: the generation as little-endian 64-bit words, repeated."""
    return np.full(size // 8, generation, dtype="<u8").tobytes()


def generation_of(value: bytes | None, what: str) -> int:
    """The generation a value (or an 8-byte-aligned piece of one) holds; ValueError if the
    value is missing or mixes generations (a torn value)."""
    if value is None:
        raise ValueError(f"{what}: missing")
    if not value or len(value) % 8:
        raise ValueError(f"{what}: {len(value)} bytes, not a whole number of words")
    words = np.frombuffer(value, dtype="<u8")
    first = int(words[0])
    if not (words == first).all():
        raise ValueError(f"{what}: torn value, generations {sorted(set(words.tolist()))[:5]}")
    return first


class PairReader:
    """Reads the pair in one call per read (a batch read is one snapshot) and checks that
    both keys, and every range of them, hold the same generation; and that the generation a
    reader sees never goes back."""

    def __init__(self, store: Any, name: str) -> None:
        self.store = store
        self.name = name
        self.reads = 0
        self.generations: set[int] = set()
        self.failures: list[str] = []
        self.last = -1
        self.proto = default_buffer_prototype()

    def _check(self, method: str, labelled: list[tuple[str, Any]]) -> None:
        self.reads += 1
        try:
            gens = {
                label: generation_of(None if buf is None else buf.to_bytes(), label)
                for label, buf in labelled
            }
        except ValueError as exc:
            self.failures.append(f"{self.name} {method}: {exc}")
            return
        distinct = set(gens.values())
        if len(distinct) != 1:
            self.failures.append(f"{self.name} {method}: one call saw several generations {gens}")
            return
        (gen,) = distinct
        if gen < self.last:
            self.failures.append(
                f"{self.name} {method}: generation went back from {self.last} to {gen}"
            )
        self.last = max(self.last, gen)
        self.generations.add(gen)

    async def read_once(self) -> None:
        store, proto = self.store, self.proto
        # _get_many with two keys: inline on this thread (the store's <= 4 requests path)
        got = [
            (key, buf)
            async for key, buf in store._get_many([(KEY_A, proto, None), (KEY_B, proto, None)])
        ]
        self._check("_get_many", got)
        # get_partial_values with six ranges: the store hands them to a worker thread
        ranges = [
            (KEY_A, None),
            (KEY_B, None),
            (KEY_A, RangeByteRequest(8 * 1000, 8 * 1000 + 4096)),
            (KEY_B, RangeByteRequest(8 * 100, 8 * 100 + 4096)),
            (KEY_A, SuffixByteRequest(4096)),
            (KEY_B, OffsetByteRequest(SIZE_B - 8192)),
        ]
        bufs = await store.get_partial_values(proto, ranges)
        self._check(
            "get_partial_values", [(f"{k} {r}", b) for (k, r), b in zip(ranges, bufs, strict=True)]
        )

    async def run_until(self, stop: threading.Event, ready: threading.Event | None = None) -> None:
        while not stop.is_set():
            await self.read_once()
            if ready is not None:
                ready.set()
            if len(self.failures) > 20:
                return

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reads": self.reads,
            "distinct_generations": len(self.generations),
            "failures": self.failures[:10],
        }


# --- child process modes -----------------------------------------------------------------------


def _reader(path: str) -> None:
    from zarrdb import SQLiteStore

    store = SQLiteStore(path, read_only=True)
    reader = PairReader(store, "other process")
    stop, ready = threading.Event(), threading.Event()
    errors: list[str] = []

    def run() -> None:
        try:
            asyncio.run(reader.run_until(stop, ready))
        except BaseException as exc:  # reported to the parent
            errors.append(repr(exc))
            ready.set()

    thread = threading.Thread(target=run)
    thread.start()
    ready.wait(60)
    print("ready", flush=True)
    sys.stdin.read()  # the parent closes stdin when its writer is done
    stop.set()
    thread.join()
    store.close()
    out = reader.summary()
    out["failures"] += errors
    print(json.dumps(out), flush=True)


def _maxrss_bytes() -> int:
    """This process's peak RSS. On Linux VmHWM, which starts afresh at exec: ru_maxrss does
    not (a child started from a large pytest process reports the parent's peak)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _ingest(path: str, mib: int, pipeline: str) -> None:
    import zarr

    import zarrdb._tunables
    from zarrdb import SQLiteStore

    rss_start = _maxrss_bytes()
    rows = mib * 1024 * 1024 // (4 * 4096)
    data = np.arange(rows * 4096, dtype=np.float32).reshape(rows, 4096)  # no float64 temporary
    rss_data = _maxrss_bytes()

    config = {} if pipeline == "-" else {"codec_pipeline.path": pipeline}
    store = SQLiteStore(path)
    with zarr.config.set(config):
        arr = zarr.create_array(
            store,
            name="big",
            shape=data.shape,
            dtype=data.dtype,
            chunks=(256, 1024),
            compressors=None,
        )
        t0 = time.perf_counter()
        arr[:] = data  # 1 MiB chunks
        seconds = time.perf_counter() - t0
    stats = store._open_file.submitter.writer.stats()
    rss_written = _maxrss_bytes()
    store.close()
    rss_closed = _maxrss_bytes()

    ro = SQLiteStore(path, read_only=True)
    check = zarr.open_array(ro, path="big", mode="r")
    equal = all(
        np.array_equal(check[lo : lo + 512], data[lo : lo + 512]) for lo in range(0, rows, 512)
    )
    ro.close()
    print(
        json.dumps(
            {
                "source_bytes": data.nbytes,
                "rss_start": rss_start,
                "rss_data": rss_data,
                "rss_written": rss_written,
                "rss_closed": rss_closed,
                "queued_high_water": stats["max_queued_bytes"],
                "queue_max_bytes": zarrdb._tunables.QUEUE_MAX_BYTES,
                "seconds": seconds,
                "equal": equal,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    if sys.argv[1] == "reader":
        _reader(sys.argv[2])
    elif sys.argv[1] == "ingest":
        _ingest(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]!r}")
