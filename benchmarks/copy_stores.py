"""`zarrdb.copy` against a plain list/get/set loop over zarr's store API, and, for a directory to
a directory, against `cp -r`: the same hierarchy, the same run, interleaved.

    python benchmarks/copy_stores.py [--reps 5] [--chunks 4096] [--kib 16] [--dir DIR] [--sync]

The source hierarchy is one array of --chunks chunks of --kib KiB (random bytes, so nothing
compresses), written once as a directory and once as a .zarrdb file. Each pair (directory ->
.zarrdb, .zarrdb -> directory, .zarrdb -> .zarrdb, .zarrdb -> .ozx, directory -> directory) is
copied by each method into a new destination; the loop is what a user writes without a copy
function:

    async for key in src.list_prefix(""):
        await dst.set(key, await src.get(key, prototype))

with zarrdb's SQLiteStore and zarr's LocalStore as the stores (for a zip, zarr's ZipStore in
mode "w"). Methods run round-robin within each repetition (odd repetitions in reverse), with a
`sync` before each (untimed). With --sync each copy's time includes an fsync of every file and
folder it made (not a `sync`, which would also wait for other programs' writes); on a shared
machine thousands of fsyncs vary more than the copies do, so by default the copies are timed
into the page cache. The source stays in the page cache (dropping it would disturb other work
on the machine). Printed: per pair and method, the median seconds and MiB/s, and the ratio of
the loop's (or cp's) median to zarrdb.copy's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

MIB = 1 << 20


def make_sources(folder: Path, chunks: int, kib: int) -> tuple[Path, Path]:
    import zarr

    import zarrdb

    directory = folder / "src.zarr"
    group = zarr.open_group(str(directory), mode="w")
    per_row = 64
    array = group.create_array(
        "data", shape=(chunks // per_row, per_row * kib * 1024), chunks=(1, kib * 1024),
        dtype="u1", compressors=None,
    )  # fmt: skip
    rng = __import__("numpy").random.default_rng(0)
    for row in range(chunks // per_row):
        array[row] = rng.integers(0, 256, size=per_row * kib * 1024, dtype="u1")
    path = folder / "src.zarrdb"
    zarrdb.copy(directory, path)
    return directory, path


def open_store(path: Path, *, write: bool):
    from zarr.storage import LocalStore, ZipStore

    from zarrdb import SQLiteStore

    if path.suffix == ".zarrdb":
        return SQLiteStore(path, read_only=not write)
    if path.suffix in (".zip", ".ozx"):
        return ZipStore(path, mode="w" if write else "r")
    return LocalStore(path, read_only=not write)


async def plain_loop(source: Path, dest: Path) -> None:
    from zarr.core.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    src, dst = open_store(source, write=False), open_store(dest, write=True)
    try:
        async for key in src.list_prefix(""):
            value = await src.get(key, proto)
            assert value is not None
            await dst.set(key, value)
    finally:
        src.close()
        dst.close()


def run_one(method: str, source: Path, dest: Path, sync: bool) -> float:
    import zarrdb

    os.sync()
    started = time.perf_counter()
    if method == "zarrdb.copy":
        zarrdb.copy(source, dest)
    elif method == "loop":
        asyncio.run(plain_loop(source, dest))
    elif method == "cp -r":
        subprocess.run(["cp", "-r", str(source), str(dest)], check=True)
    if sync:  # the copy is complete when it is on disk, for every method alike
        sync_tree(dest)
    return time.perf_counter() - started


def sync_tree(path: Path) -> None:
    """fsync every file and folder of the copy (os.sync would also wait for the writes of
    everything else running on the machine)."""
    paths = [path] if path.is_file() else [path, *path.rglob("*")]
    for item in paths:
        fd = os.open(item, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=4096)
    parser.add_argument("--kib", type=int, default=16)
    parser.add_argument("--dir", default=None)
    parser.add_argument(
        "--sync", action="store_true", help="time an fsync of every file the copy made too"
    )
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="zarrdb-copy-bench-", dir=args.dir))
    try:
        directory, path = make_sources(folder, args.chunks, args.kib)
        total = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
        pairs = {
            "dir -> .zarrdb": (directory, ".zarrdb", ["zarrdb.copy", "loop"]),
            ".zarrdb -> dir": (path, ".zarr", ["zarrdb.copy", "loop"]),
            ".zarrdb -> .zarrdb": (path, ".zarrdb", ["zarrdb.copy", "loop"]),
            ".zarrdb -> .ozx": (path, ".ozx", ["zarrdb.copy", "loop"]),
            "dir -> dir": (directory, ".zarr", ["zarrdb.copy", "loop", "cp -r"]),
        }
        times: dict[tuple[str, str], list[float]] = defaultdict(list)
        for rep in range(args.reps):
            for pair, (source, suffix, methods) in pairs.items():
                order = methods if rep % 2 == 0 else methods[::-1]
                for method in order:
                    dest = folder / f"out{suffix}"
                    times[pair, method].append(run_one(method, source, dest, args.sync))
                    if dest.is_dir():
                        shutil.rmtree(dest)
                    else:
                        dest.unlink()
        print(
            f"{args.chunks} chunks of {args.kib} KiB ({total / MIB:.0f} MiB), median of "
            f"{args.reps}, {'each copy fsynced' if args.sync else 'in the page cache'}; Python {sys.version.split()[0]}"
        )
        print(f"{'pair':<20} {'method':<12} {'seconds':>8} {'MiB/s':>8} {'vs copy':>8}")
        for pair, (_, _, methods) in pairs.items():
            ours = statistics.median(times[pair, "zarrdb.copy"])
            for method in methods:
                median = statistics.median(times[pair, method])
                print(
                    f"{pair:<20} {method:<12} {median:8.3f} {total / MIB / median:8.0f} "
                    f"{median / ours:7.2f}x"
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
