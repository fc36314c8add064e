"""Ingest and partial reads: zarrdb's writer pipeline against zarr's other stores.

    python benchmarks/ingest.py [--repeat N] [--only small,large,...] [--json FILE] [--markdown FILE]

Every workload runs each store in turn, repetition after repetition (A B C A B C ...), so a
slow spell of a shared machine hits all of them; the figures are medians and the ratios come
from the same run. Ingest is `arr[:] = data` into a new store plus closing it (zarrdb's close
commits and syncs; "local+fsync" is LocalStore followed by an fsync of every file and folder
it wrote, the durable equivalent of zarrdb's default).

Workloads and what each is compared with:
- small: 4096x4096 float32 in 64x64 chunks (16 KiB), uncompressed: vs MemoryStore (zarr's own
  ceiling), with default settings and inside `store.transaction()`.
- large: the same array in 512x512 chunks (1 MiB): default settings vs LocalStore + fsync,
  durability="off" vs LocalStore.
- huge: uint16 512^3 in 256^3 chunks (32 MiB): as large.
- gathered: `store.set` of 1 KiB values, 100 at a time with asyncio.gather: rate vs MemoryStore.
- windows: random 64x64 windows out of shards of 1, 4 and 16 MiB (64x64 chunks inside): time
  vs LocalStore.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import LocalStore, MemoryStore

from zarrdb import SQLiteStore

MIB = 1 << 20


def fsync_tree(path: Path) -> None:
    """fsync every file and folder below `path` (what a durable LocalStore write needs)."""
    for folder, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = Path(str(path) + suffix)
        if candidate.is_file():
            candidate.unlink()


class Stores:
    """Makes each store kind of the benchmark at a path."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def make(self, kind: str, label: str, read_only: bool = False) -> tuple[Any, Path]:
        path = self.root / f"{kind}-{label}"
        if kind == "memory":
            return MemoryStore(), path
        if kind.startswith("local"):
            return LocalStore(path, read_only=read_only), path
        options: dict[str, Any] = {}
        if kind == "zarrdb-off":
            options["durability"] = "off"
        return SQLiteStore(path, read_only=read_only, **options), path


def ingest_once(stores: Stores, kind: str, label: str, data: np.ndarray, chunks: tuple[int, ...]) -> float:
    base = kind.removesuffix("-transaction")
    remove(stores.root / f"{base}-{label}")
    store, path = stores.make(base, label)
    arr = zarr.create_array(
        store, shape=data.shape, chunks=chunks, dtype=data.dtype, compressors=None, fill_value=0
    )
    gc.collect()
    start = time.perf_counter()
    if kind.endswith("-transaction"):
        with store.transaction():
            arr[:] = data
    else:
        arr[:] = data
    if kind == "local+fsync":
        fsync_tree(path)
    store.close()
    elapsed = time.perf_counter() - start
    if base != "memory":  # the data is there (a corner of it: the full check is the tests')
        arr = zarr.open_array(stores.make(base, label, read_only=True)[0], mode="r")
    if not np.array_equal(arr[:8, :8], data[:8, :8]):
        raise AssertionError(f"{kind}: {label} read back differs")
    remove(path)
    return elapsed


def gathered_sets_once(stores: Stores, kind: str) -> float:
    """Seconds per 1 KiB set, 100 sets gathered at a time, 2000 sets."""
    remove(stores.root / f"{kind}-gathered")
    store, path = stores.make(kind, "gathered")
    value = default_buffer_prototype().buffer.from_bytes(os.urandom(1024))

    async def run() -> float:
        await store.set("warm-up", value)
        start = time.perf_counter()
        for block in range(20):
            await asyncio.gather(*(store.set(f"k/{block}/{i}", value) for i in range(100)))
        return (time.perf_counter() - start) / 2000

    per_set = asyncio.run(run())
    store.close()
    remove(path)
    return per_set


def windows_once(stores: Stores, kind: str, shard: int, data: np.ndarray, windows: int = 200) -> float:
    """Seconds per random 64x64 window out of a sharded array (warm OS page cache)."""
    label = f"shard{shard}"
    store, path = stores.make(kind, label)
    if not path.exists():
        arr = zarr.create_array(
            store, shape=data.shape, chunks=(64, 64), shards=(shard, shard), dtype=data.dtype,
            compressors=None, fill_value=0,
        )
        arr[:] = data
        store.close()
    store, _ = stores.make(kind, label, read_only=True)
    arr = zarr.open_array(store, mode="r")
    arr[:]  # warm the OS page cache
    rng = np.random.default_rng(1)
    corners = rng.integers(0, data.shape[0] - 64, size=(windows, 2))
    start = time.perf_counter()
    for i, j in corners:
        window = arr[i : i + 64, j : j + 64]
        if window[0, 0] != data[i, j]:
            raise AssertionError(f"{kind}: wrong window at {i},{j}")
    elapsed = (time.perf_counter() - start) / windows
    store.close()
    return elapsed


# (workload, store kind, reference kind, target ratio, what the ratio means)
TARGETS = [
    ("small", "zarrdb", "memory", 0.85, "speed"),
    ("small", "zarrdb-transaction", "memory", 0.90, "speed"),
    ("large", "zarrdb", "local+fsync", 0.80, "speed"),
    ("large", "zarrdb-off", "local", 0.80, "speed"),
    ("huge", "zarrdb", "local+fsync", 0.80, "speed"),
    ("huge", "zarrdb-off", "local", 0.80, "speed"),
    ("gathered", "zarrdb", "memory", 0.80, "speed"),
    ("windows 1MiB", "zarrdb", "local", 0.70, "time"),
    ("windows 4MiB", "zarrdb", "local", 0.70, "time"),
    ("windows 16MiB", "zarrdb", "local", 0.70, "time"),
]


def run(root: Path, repeat: int, only: set[str] | None) -> dict[tuple[str, str], list[float]]:
    stores = Stores(root)
    field = np.random.default_rng(0).random((4096, 4096), dtype="f4")
    volume = np.random.default_rng(0).integers(0, 60000, (512, 512, 512), dtype="u2")
    plan: list[tuple[str, list[str], Callable[[str], float]]] = [
        ("small", ["memory", "zarrdb", "zarrdb-transaction"],
         lambda k: ingest_once(stores, k, "small", field, (64, 64))),
        ("large", ["local", "local+fsync", "zarrdb", "zarrdb-off"],
         lambda k: ingest_once(stores, k, "large", field, (512, 512))),
        ("huge", ["local", "local+fsync", "zarrdb", "zarrdb-off"],
         lambda k: ingest_once(stores, k, "huge", volume, (256, 256, 256))),
        ("gathered", ["memory", "zarrdb"], lambda k: gathered_sets_once(stores, k)),
    ]
    for shard, size in ((512, "1MiB"), (1024, "4MiB"), (2048, "16MiB")):
        plan.append(
            (f"windows {size}", ["local", "zarrdb"],
             lambda k, s=shard: windows_once(stores, k, s, field))
        )
    samples: dict[tuple[str, str], list[float]] = {}
    for workload, kinds, fn in plan:
        if only and workload.split()[0] not in only:
            continue
        for _ in range(repeat):
            for kind in kinds:
                samples.setdefault((workload, kind), []).append(fn(kind))
        print(".", end="", flush=True, file=sys.stderr)
    print(file=sys.stderr)
    return samples


def report(samples: dict[tuple[str, str], list[float]]) -> list[dict[str, Any]]:
    rows = []
    for workload, kind, reference, target, meaning in TARGETS:
        mine, ref = samples.get((workload, kind)), samples.get((workload, reference))
        if not mine or not ref:
            continue
        ratio = statistics.median(ref) / statistics.median(mine)  # >1: zarrdb faster
        if meaning == "time":
            ratio = 1 / ratio  # zarrdb's time over the reference's (<1: faster)
            met = ratio <= target
        else:
            met = ratio >= target
        rows.append({
            "workload": workload, "store": kind, "reference": reference,
            "median_s": statistics.median(mine), "reference_median_s": statistics.median(ref),
            "ratio": ratio, "meaning": meaning, "target": target, "met": met,
        })
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| workload | zarrdb | reference | zarrdb | reference | ratio | target |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        unit, scale = ("us", 1e6) if r["median_s"] < 0.01 else ("ms", 1e3)
        sign = "<=" if r["meaning"] == "time" else ">="
        label = "time" if r["meaning"] == "time" else "speed"
        lines.append(
            f"| {r['workload']} | {r['store']} | {r['reference']} | {r['median_s'] * scale:,.1f} {unit} "
            f"| {r['reference_median_s'] * scale:,.1f} {unit} | {r['ratio']:.2f} ({label}) "
            f"| {sign} {r['target']:.2f} {'met' if r['met'] else 'MISSED'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--only", help="comma-separated workloads: small,large,huge,gathered,windows")
    parser.add_argument("--dir", type=Path, help="scratch folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    only = set(args.only.split(",")) if args.only else None
    with tempfile.TemporaryDirectory(prefix="zarrdb-ingest-", dir=args.dir) as tmp:
        samples = run(Path(tmp), args.repeat, only)
    rows = report(samples)
    table = markdown(rows)
    print(table)
    if args.json:
        args.json.write_text(json.dumps({
            "samples": {f"{w}|{k}": v for (w, k), v in samples.items()}, "rows": rows,
        }, indent=1))
    if args.markdown:
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
