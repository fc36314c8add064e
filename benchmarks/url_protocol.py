"""What `zarrdb::PATH` costs against a SQLiteStore passed to zarr directly: the same file, the
same engine, reached through zarr's FsspecStore and zarrdb's fsspec filesystem
(zarrdb.filesystem) instead.

    python benchmarks/url_protocol.py [--reps 5] [--side 4096] [--chunk 64] [--dir DIR]

Workloads, on a side x side float32 array in chunk x chunk chunks (default 4096^2 in 64^2:
4,096 chunks of 16 KiB, 64 MiB, uncompressed):

    ingest   create the array in a new file, `arr[:] = data`, close the store
    read     open the file, `arr[:]`, close the store

Method: the two ways run in turn within each repetition (odd repetitions in reverse), each on
a file of its own, so a slow spell of the shared machine hits both; `sync` before each timed
run. Prints each run, then per workload the median wall time of each way and the median of
the per-repetition ratios (url / direct), and the same for the process's CPU time (all its
threads), which a busy machine disturbs less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

import zarrdb.filesystem
from zarrdb import SQLiteStore

WAYS = ("direct", "url")


def ingest(way: str, path: Path, data: np.ndarray, chunk: int) -> tuple[float, float]:
    os.sync()
    cpu, started = time.process_time(), time.perf_counter()
    if way == "direct":
        with SQLiteStore(path) as store:
            arr = zarr.create_array(
                store, name="a", shape=data.shape, chunks=(chunk, chunk), dtype="f4",
                compressors=None,
            )
            arr[:] = data
    else:
        arr = zarr.create_array(
            f"zarrdb::{path}", name="a", shape=data.shape, chunks=(chunk, chunk), dtype="f4",
            compressors=None,
        )
        arr[:] = data
        zarrdb.filesystem.close(path)
    return time.perf_counter() - started, time.process_time() - cpu


def read(way: str, path: Path, expected: np.ndarray) -> tuple[float, float]:
    os.sync()
    cpu, started = time.process_time(), time.perf_counter()
    if way == "direct":
        with SQLiteStore(path, read_only=True) as store:
            got = zarr.open_array(store, path="a", mode="r")[:]
    else:
        got = zarr.open_array(f"zarrdb::{path}", path="a", mode="r")[:]
        zarrdb.filesystem.close(path)
    elapsed = time.perf_counter() - started, time.process_time() - cpu
    assert np.array_equal(got, expected)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--side", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary one)")
    args = parser.parse_args()
    data = np.random.default_rng(0).random((args.side, args.side), dtype="f4")
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    ratios: dict[str, list[float]] = {"ingest": [], "read": []}
    cpu_ratios: dict[str, list[float]] = {"ingest": [], "read": []}
    print(
        f"zarr {zarr.__version__}, {args.side}^2 float32 in {args.chunk}^2 chunks "
        f"({args.chunk * args.chunk * 4 // 1024} KiB, {(args.side // args.chunk) ** 2} chunks)"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for rep in range(args.reps):
            order = WAYS if rep % 2 == 0 else WAYS[::-1]
            run: dict[tuple[str, str], tuple[float, float]] = {}
            for way in order:
                path = Path(folder) / f"{way}-{rep}.zarrdb"
                run["ingest", way] = ingest(way, path, data, args.chunk)
            for way in order:
                run["read", way] = read(way, Path(folder) / f"{way}-{rep}.zarrdb", data)
            for (workload, way), seconds in run.items():
                times.setdefault((workload, way), []).append(seconds)
            for workload in ratios:
                ratios[workload].append(run[workload, "url"][0] / run[workload, "direct"][0])
                cpu_ratios[workload].append(run[workload, "url"][1] / run[workload, "direct"][1])
            print(
                f"rep {rep}: "
                + ", ".join(
                    f"{w} {way} {run[w, way][0] * 1000:.0f} ms (CPU {run[w, way][1] * 1000:.0f})"
                    for w, way in sorted(run)
                )
            )
            for way in WAYS:
                os.remove(Path(folder) / f"{way}-{rep}.zarrdb")
    print(
        "\n| workload | direct (SQLiteStore) | zarrdb:: URL | url / direct | CPU time: direct, "
        "URL, url / direct |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for workload in ratios:
        direct, url = (
            statistics.median(t[0] for t in times[workload, way]) * 1000 for way in WAYS
        )
        cpu_direct, cpu_url = (
            statistics.median(t[1] for t in times[workload, way]) * 1000 for way in WAYS
        )
        print(
            f"| {workload} | {direct:.0f} ms | {url:.0f} ms | {_ratio(ratios[workload])} | "
            f"{cpu_direct:.0f} ms, {cpu_url:.0f} ms, {_ratio(cpu_ratios[workload])} |"
        )


def _ratio(ratios: list[float]) -> str:
    """The median of the per-repetition ratios, and their spread (max / min - 1)."""
    spread = max(ratios) / min(ratios) - 1
    return f"{statistics.median(ratios):.2f}x (spread {spread:.0%})"


if __name__ == "__main__":
    main()
