"""The defaults that exist for speed, measured (issue 6): prints one table per tunable.

    python benchmarks/tunables.py [--quick] [--reps N] [--only SECTION ...] [--json out.json]

Sections (each a default in src/zarrdb/_tunables.py):

    page      page size (4 .. 64 KiB) x journal mode while ingesting (WAL vs DELETE), on ingest
              of 16 KiB and 1 MiB values (the engine's writer thread, transactions of ~8 MiB, as
              group commits are)
    deep      page size x auto_vacuum (none vs incremental: the pointer map) on random 16 KiB
              byte ranges from the second half of 1, 4 and 16 MiB values (engine)
    cache     cache_size 2 MiB vs 32 MiB x mmap_size 0 vs 256 MiB on random reads (engine, the
              store's file layout: 64 KiB pages, incremental auto-vacuum)
    commit    the writer thread's group commit: GROUP_COMMIT_MAX_BYTES (8 / 64 / 256 MiB),
              GROUP_COMMIT_MAX_AGE (0.5 / 2 / 8 ms), BLOB_WRITE_MIN (incremental blob writes
              from 128 KiB, or never) and CHECKPOINT_PAGES (256 / 1024) on zarr `arr[:] = data`
    inline    INLINE_READ_MAX: `await store.get()` inline vs through asyncio.to_thread, for
              values of 1 KiB .. 4 MiB, one at a time and 8 gathered

Method: every measurement is repeated (--reps, default 3) and the variants of a section are
run round-robin within each repetition (odd repetitions in reverse order), so a slow spell of
the shared machine hits all variants; tables show medians. Files live in a temporary folder,
written just before they are read, so reads are served from the OS page cache (warm). Store
constants are monkeypatched in this process only. `--quick` shrinks every data set (a smoke
test: the numbers mean little).

benchmarks/test_tunables.py runs the same workloads under pytest-benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import zarrdb
import zarrdb._tunables as ztunables
from zarrdb import SQLiteStore
from zarrdb._core import Database, Writer
from zarrdb.cli.bench.harness import machine_counters, others_cpu_share, round_robin

KIB = 1024
MIB = 1024 * KIB
PAGE_SIZES = [4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB]
TABLE = "CREATE TABLE zarr(k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)"
RANGE = 16 * KIB


# The modules whose constants a section varies: zarrdb has one home for them.
_TUNED_MODULES = (ztunables,)


def _home(name: str) -> Any:
    for module in _TUNED_MODULES:
        if hasattr(module, name):
            return module
    raise KeyError(f"no zarrdb module defines {name}")


def store_default(name: str, fallback: Any = None) -> Any:
    """A tunable constant as zarrdb defines it now (`fallback` if no module defines it)."""
    try:
        return getattr(_home(name), name)
    except KeyError:
        if fallback is None:
            raise
        return fallback


def cache_kib() -> int:
    return store_default("DEFAULT_CACHE_KIB", 2000)


def autocheckpoint_pages() -> int:
    return store_default("WAL_LIMIT_PAGES", 1000)


@dataclass
class Scale:
    """Data set sizes; --quick divides them."""

    ingest_16k: int = 32 * MIB
    ingest_1m: int = 64 * MIB
    deep_counts: dict[int, int] = field(
        default_factory=lambda: {1 * MIB: 8, 4 * MIB: 4, 16 * MIB: 2}
    )
    deep_reads: int = 300
    cache_16k_values: int = 4096  # 64 MiB of 16 KiB values
    cache_4m_values: int = 16  # 64 MiB of 4 MiB values
    cache_reads: int = 1500
    zarr_mib: int = 128
    inline_calls: int = 200

    @classmethod
    def quick(cls) -> Scale:
        return cls(
            ingest_16k=4 * MIB,
            ingest_1m=8 * MIB,
            deep_counts={1 * MIB: 2, 4 * MIB: 1, 16 * MIB: 1},
            deep_reads=20,
            cache_16k_values=256,
            cache_4m_values=2,
            cache_reads=100,
            zarr_mib=16,
            inline_calls=20,
        )


# --- helpers ----------------------------------------------------------------------------------


def fresh(path: Path) -> Path:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")
    return path


def random_values(n: int, size: int, seed: int) -> list[bytes]:
    """At most 32 distinct random values, repeated (enough: SQLite does not deduplicate)."""
    rng = random.Random(seed)
    pool = [rng.randbytes(size) for _ in range(min(n, 32))]
    return [pool[i % len(pool)] for i in range(n)]


def new_engine_file(
    path: Path,
    *,
    page_size: int,
    auto_vacuum: bool,
    journal: str = "wal",
    synchronous: str = "normal",
) -> Database:
    """A new file with the zarr table. The page size is given to the constructor, which sets
    it before the cache size (so a negative cache size is converted with the real page size)."""
    db = Database(
        fresh(path), mode="c", page_size=page_size, cache_size=cache_kib(), synchronous=synchronous
    )
    if auto_vacuum:
        db.pragma("auto_vacuum", "incremental")
    db.executescript(TABLE)
    db.journal_mode(journal)
    if journal == "wal":
        db.pragma("wal_autocheckpoint", autocheckpoint_pages())
    return db


def write_file(
    path: Path, items: list[tuple[str, bytes]], *, page_size: int, auto_vacuum: bool
) -> None:
    """A finished file (DELETE mode, no WAL) holding `items`; not timed."""
    db = new_engine_file(
        path, page_size=page_size, auto_vacuum=auto_vacuum, journal="delete", synchronous="off"
    )
    try:
        write_batches(db, [items[i : i + 64] for i in range(0, len(items), 64)])
    finally:
        db.close()


def write_batches(db: Database, batches: list[list[tuple[str, bytes]]]) -> None:
    """Each batch as one submission to a writer thread on `db` (the path SQLiteStore's writes
    take), committed before the next is queued."""
    writer = Writer(db)
    try:
        for batch in batches:
            writer.write([("set", key, value) for key, value in batch])
    finally:
        writer.close()


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


@contextlib.contextmanager
def patched(**constants: Any) -> Iterator[None]:
    """Set zarrdb's module constants for the block (this process only; stores opened inside
    it read them when they start their writer)."""
    homes = {name: _home(name) for name in constants}
    old = {name: getattr(homes[name], name) for name in constants}
    try:
        for name, value in constants.items():
            setattr(homes[name], name, value)
        yield
    finally:
        for name, value in old.items():
            setattr(homes[name], name, value)


# --- page size x journal mode on ingest (engine) ---------------------------------------------


def ingest_items(values: list[bytes]) -> list[list[tuple[str, bytes]]]:
    """`values` as keyed transactions of ~8 MiB (what a group commit takes from zarr)."""
    per_txn = max(1, (8 * MIB) // len(values[0]))
    items = [(f"a/c/{i // 64}/{i % 64}", v) for i, v in enumerate(values)]
    return [items[i : i + per_txn] for i in range(0, len(items), per_txn)]


def run_ingest(
    db: Database, transactions: list[list[tuple[str, bytes]]], journal: str
) -> tuple[float, float]:
    """Write the transactions, then leave the file finished as the store's close does (WAL:
    checkpoint, back to DELETE mode), and close it. Returns (seconds until the last commit,
    seconds until the file is finished)."""
    try:
        batches = [[("set", key, value) for key, value in txn] for txn in transactions]
        writer = Writer(db)
        try:
            t0 = time.perf_counter()
            for ops in batches:
                writer.write(ops)
            t1 = time.perf_counter()
        finally:
            writer.close()
        if journal == "wal":
            db.checkpoint("truncate")
            db.journal_mode("delete")
        t2 = time.perf_counter()
    finally:
        db.close()
    return t1 - t0, t2 - t0


def page_variants() -> list[tuple[int, str, bool]]:
    out = [(p, j, True) for p in PAGE_SIZES for j in ("wal", "delete")]
    out.append((64 * KIB, "wal", False))  # what the pointer map costs on ingest
    return out


def section_page(root: Path, scale: Scale, reps: int) -> dict[str, Any]:
    loads = {
        "16KiB": ingest_items(random_values(scale.ingest_16k // (16 * KIB), 16 * KIB, 1)),
        "1MiB": ingest_items(random_values(scale.ingest_1m // MIB, MIB, 2)),
    }
    nbytes = {name: sum(len(v) for txn in load for _, v in txn) for name, load in loads.items()}
    results: dict[tuple, list[tuple[float, float]]] = {}
    for _, (page, journal, av) in round_robin(page_variants(), reps):
        for name, load in loads.items():
            db = new_engine_file(
                root / "ingest.db", page_size=page, auto_vacuum=av, journal=journal
            )
            commits, total = run_ingest(db, load, journal)
            results.setdefault((page, journal, av, name), []).append(
                (nbytes[name] / commits / MIB, nbytes[name] / total / MIB)
            )
    rows = []
    for page, journal, av in page_variants():
        row: dict[str, Any] = {
            "page": page // KIB,
            "journal": journal,
            "auto_vacuum": "incremental" if av else "none",
        }
        for name in loads:
            got = results[(page, journal, av, name)]
            row[f"{name} commits MB/s"] = median([g[0] for g in got])
            row[f"{name} finished MB/s"] = median([g[1] for g in got])
        rows.append(row)
    fresh(root / "ingest.db")
    return {
        "rows": rows,
        "note": f"MiB/s, median of {reps}; transactions of ~8 MiB, synchronous=NORMAL, "
        f"wal_autocheckpoint={autocheckpoint_pages()} pages; 'commits': until the last commit "
        "returned, 'finished': until the file is one file again (WAL checkpointed, as at close)",
    }


# --- deep byte ranges: page size x auto_vacuum (engine) ---------------------------------------


def deep_items(scale: Scale) -> list[tuple[str, bytes, int]]:
    items = []
    for size, count in scale.deep_counts.items():
        for i, v in enumerate(random_values(count, size, size)):
            items.append((f"v{size // MIB}m/{i}", v, size))
    return items


def deep_read_micros(
    path: Path, keys: list[str], size: int, n: int, *, mmap: int = 0, seed: int = 0
) -> list[float]:
    """Per-read µs of `n` random 16 KiB ranges from the second half of values of `size`
    (a fresh connection with the store's cache size; 10 warm-up reads first)."""
    rng = random.Random(seed)
    reqs = [(rng.choice(keys), rng.randrange(size // 2, size - RANGE)) for _ in range(n + 10)]
    db = Database(path, mode="r", cache_size=cache_kib(), mmap_size=mmap)
    try:
        get_range = db.get_range
        out = []
        for i, (k, start) in enumerate(reqs):
            t0 = time.perf_counter()
            data = get_range(k, start, RANGE)
            dt = time.perf_counter() - t0
            assert len(data) == RANGE
            if i >= 10:
                out.append(dt * 1e6)
    finally:
        db.close()
    return out


def section_deep(root: Path, scale: Scale, reps: int) -> dict[str, Any]:
    items = deep_items(scale)
    variants = [(p, av) for p in PAGE_SIZES for av in (False, True)]
    files = {}
    for page, av in variants:
        path = root / f"deep-{page // KIB}k-{'av' if av else 'noav'}.db"
        write_file(fresh(path), [(k, v) for k, v, _ in items], page_size=page, auto_vacuum=av)
        files[(page, av)] = path
    sizes = sorted(scale.deep_counts)
    results: dict[tuple, list[float]] = {}
    for rep, (page, av) in round_robin(variants, reps):
        for size in sizes:
            keys = [k for k, _, s in items if s == size]
            micros = deep_read_micros(files[(page, av)], keys, size, scale.deep_reads, seed=rep)
            results.setdefault((page, av, size), []).append(median(micros))
    rows = []
    for page, av in variants:
        rows.append(
            {
                "page": page // KIB,
                "auto_vacuum": "incremental" if av else "none",
                **{f"{s // MIB} MiB µs": median(results[(page, av, s)]) for s in sizes},
            }
        )
    for path in files.values():
        fresh(path)
    return {
        "rows": rows,
        "note": f"µs per 16 KiB range from the second half of a value (median over "
        f"{scale.deep_reads} reads, median of {reps}); cache_size={cache_kib()} KiB, mmap off",
    }


# --- cache_size x mmap_size on random reads (engine) --------------------------------------------


def section_cache(root: Path, scale: Scale, reps: int) -> dict[str, Any]:
    small = random_values(scale.cache_16k_values, 16 * KIB, 16)
    big = random_values(scale.cache_4m_values, 4 * MIB, 4)
    items = [(f"s/c/{i // 64}/{i % 64}", v) for i, v in enumerate(small)]
    items += [(f"b/c/{i}", v) for i, v in enumerate(big)]
    path = root / "cache.db"
    write_file(fresh(path), items, page_size=64 * KIB, auto_vacuum=True)
    small_keys = [k for k, _ in items[: len(small)]]
    big_keys = [k for k, _ in items[len(small) :]]
    hot_keys = small_keys[:256]  # 4 MiB: fits either cache
    n = scale.cache_reads
    mmap_big = 256 * MIB

    def workloads(seed: int) -> dict[str, Callable[[Database], int]]:
        rng = random.Random(seed)
        gets = [rng.choice(small_keys) for _ in range(n)]
        hots = [rng.choice(hot_keys) for _ in range(n)]
        whole = [rng.choice(big_keys) for _ in range(max(4, n // 50))]
        ranges = [(rng.choice(big_keys), rng.randrange(0, 4 * MIB - RANGE)) for _ in range(n)]
        return {
            "get 16 KiB, 64 MiB set": lambda db: sum(len(db.get(k)) for k in gets),
            "get 16 KiB, 4 MiB hot set": lambda db: sum(len(db.get(k)) for k in hots),
            "16 KiB range of 4 MiB": lambda db: sum(
                len(db.get_range(k, s, RANGE)) for k, s in ranges
            ),
            "get 4 MiB": lambda db: sum(len(db.get(k)) for k in whole),
        }

    counts = {
        "get 16 KiB, 64 MiB set": n,
        "get 16 KiB, 4 MiB hot set": n,
        "16 KiB range of 4 MiB": n,
        "get 4 MiB": max(4, n // 50),
    }
    variants = [(c, m) for c in (2048, 32768) for m in (0, mmap_big)]
    results: dict[tuple, list[float]] = {}
    for rep, (cache, mmap) in round_robin(variants, reps):
        db = Database(path, mode="r", cache_size=cache, mmap_size=mmap)
        try:
            for name, run in workloads(rep).items():
                run(db)  # warm this connection's cache the same way for every variant
                t0 = time.perf_counter()
                run(db)
                results.setdefault((cache, mmap, name), []).append(
                    (time.perf_counter() - t0) / counts[name] * 1e6
                )
        finally:
            db.close()
    rows = []
    for cache, mmap in variants:
        rows.append(
            {
                "cache": f"{cache // 1024} MiB",
                "mmap": f"{mmap // MIB} MiB",
                **{f"{name} µs": median(results[(cache, mmap, name)]) for name in counts},
            }
        )
    fresh(path)
    return {
        "rows": rows,
        "note": f"µs per read, second of two identical passes on one connection "
        f"(median of {reps}); 64 KiB pages, incremental auto-vacuum",
    }


# --- group commit cap and inline commits on zarr ingest (store) ---------------------------------


def prepare_zarr_ingest(
    path: Path,
    data: np.ndarray,
    chunks: tuple[int, ...],
    *,
    new_file: bool = False,
    zstd: bool = False,
) -> tuple[SQLiteStore, Any]:
    """(store, empty zarr array) for `data`; the file is created and closed first (so the
    writer opens an existing file) unless `new_file`."""
    import zarr
    from zarr.codecs import ZstdCodec

    fresh(path)
    if not new_file:
        first = SQLiteStore(path)
        first.ensure_open()
        first.close()
    store = SQLiteStore(path)
    arr = zarr.create_array(
        store,
        name="a",
        shape=data.shape,
        dtype=data.dtype,
        chunks=chunks,
        compressors=ZstdCodec(level=1) if zstd else None,
    )
    return store, arr


def zarr_ingest_seconds(
    path: Path,
    data: np.ndarray,
    chunks: tuple[int, ...],
    *,
    new_file: bool = False,
    zstd: bool = False,
) -> float:
    """Seconds of `arr[:] = data` (every chunk committed when it returns)."""
    store, arr = prepare_zarr_ingest(path, data, chunks, new_file=new_file, zstd=zstd)
    try:
        t0 = time.perf_counter()
        arr[:] = data
        return time.perf_counter() - t0
    finally:
        store.close()


def commit_variants() -> list[tuple[str, dict[str, Any], bool]]:
    """(label, constants, new file) for the commit section: each variant moves one constant
    of the writer thread away from its default."""
    out: list[tuple[str, dict[str, Any], bool]] = [("defaults", {}, False)]
    for cap in (8 * MIB, 256 * MIB):
        out.append((f"cap {cap // MIB} MiB", {"GROUP_COMMIT_MAX_BYTES": cap}, False))
    for age in (0.5e-3, 8e-3):
        out.append((f"max age {age * 1e3:g} ms", {"GROUP_COMMIT_MAX_AGE": age}, False))
    out.append(("blob writes never", {"BLOB_WRITE_MIN": 1 << 62}, False))
    out.append(("checkpoint 1024 pages", {"CHECKPOINT_PAGES": 1024}, False))
    out.append(("defaults, new file", {}, True))
    return out


def section_commit(root: Path, scale: Scale, reps: int) -> dict[str, Any]:
    rows_1m = scale.zarr_mib * MIB // (4 * 4096)
    data = np.random.default_rng(0).standard_normal((rows_1m, 4096), dtype=np.float32)
    loads = {
        "16 KiB chunks": ((64, 64), data[: max(64, rows_1m // 4)], False),  # a quarter of the data
        "1 MiB chunks": ((64, 4096), data, False),
        "1 MiB zstd": ((64, 4096), data, True),
        "4 MiB chunks": ((256, 4096), data, False),
    }
    variants = commit_variants()
    results: dict[tuple, list[float]] = {}
    for _, (label, constants, new_file) in round_robin(variants, reps):
        with patched(**constants):
            for name, (chunks, arr, zstd) in loads.items():
                s = zarr_ingest_seconds(
                    root / "zarr.zarrdb", arr, chunks, new_file=new_file, zstd=zstd
                )
                results.setdefault((label, name), []).append(arr.nbytes / s / MIB)
    rows = []
    for label, _constants, _ in variants:
        rows.append({"variant": label, **{f"{n} MB/s": median(results[(label, n)]) for n in loads}})
    fresh(root / "zarr.zarrdb")
    defaults = (
        f"defaults: GROUP_COMMIT_MAX_BYTES={store_default('GROUP_COMMIT_MAX_BYTES') // MIB} MiB, "
        f"GROUP_COMMIT_MAX_AGE={store_default('GROUP_COMMIT_MAX_AGE') * 1e3:g} ms, "
        f"BLOB_WRITE_MIN={store_default('BLOB_WRITE_MIN') // KIB} KiB, "
        f"CHECKPOINT_PAGES={store_default('CHECKPOINT_PAGES')}"
    )
    return {
        "rows": rows,
        "note": f"MiB/s of `arr[:] = data` (float32 noise, no compressor unless zstd "
        f"level 1; zarr's default pipeline, async.concurrency=10), median of {reps}; file "
        f"created beforehand unless 'new file'; {defaults}",
    }


# --- inline read threshold (store) ------------------------------------------------------------

INLINE_SIZES = [1 * KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB]
# Chunk sizes of the zarr full-array reads (smaller chunks make too many for a quick run).
ZARR_READ_SIZES = [64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB]


async def _get_latencies(store: SQLiteStore, keys: list[str], calls: int) -> tuple[float, float]:
    """(median µs of one `await store.get()`, median µs of 8 gathered gets), after a warm-up
    in the same event loop (so its executor's threads have their read connections open)."""
    for _ in range(2):
        await asyncio.gather(*(store.get(k) for k in keys[:8]))
    for k in keys:
        await store.get(k)
    one, eight = [], []
    for i in range(calls):
        key = keys[i % len(keys)]
        t0 = time.perf_counter()
        value = await store.get(key)
        one.append(time.perf_counter() - t0)
        assert value is not None
    for _ in range(max(3, calls // 8)):
        t0 = time.perf_counter()
        await asyncio.gather(*(store.get(k) for k in keys[:8]))
        eight.append(time.perf_counter() - t0)
    return median(one) * 1e6, median(eight) * 1e6


def section_inline(root: Path, scale: Scale, reps: int) -> dict[str, Any]:
    path = fresh(root / "inline.zarrdb")
    from zarr.core.buffer import cpu

    store = SQLiteStore(path)
    keys: dict[int, list[str]] = {}
    for size in INLINE_SIZES:
        keys[size] = [f"v{size}/{i}" for i in range(8)]
        for key, value in zip(keys[size], random_values(8, size, size), strict=True):
            store.set_sync(key, cpu.Buffer.from_bytes(value))
    store.close()
    # zarr's own pattern too: `arr[:]` of a whole array gathers `async.concurrency` gets at a
    # time, of values that are not in the CPU caches, and copies each into the result.
    import zarr

    zarr_path = fresh(root / "inline-zarr.zarrdb")
    n_floats = scale.zarr_mib * MIB // 4
    data = np.random.default_rng(0).random(n_floats, dtype=np.float32)
    with SQLiteStore(zarr_path) as writer:
        for size in ZARR_READ_SIZES:
            arr = zarr.create_array(
                writer, name=f"s{size}", shape=data.shape, dtype=data.dtype,
                chunks=(size // 4,), compressors=None,
            )  # fmt: skip
            arr[:] = data
    variants = [("inline", 1 << 62), ("to_thread", 0)]
    results: dict[tuple, list[tuple[float, float]]] = {}
    zarr_reads: dict[tuple, list[float]] = {}
    for _, (label, limit) in round_robin(variants, reps):
        reader = SQLiteStore(path, read_only=True)
        try:
            with patched(INLINE_READ_MAX=limit):
                for size in INLINE_SIZES:
                    calls = max(
                        20, min(scale.inline_calls, int(scale.inline_calls * 64 * KIB / size))
                    )
                    results.setdefault((label, size), []).append(
                        asyncio.run(_get_latencies(reader, keys[size], calls))
                    )
        finally:
            reader.close()
        with patched(INLINE_READ_MAX=limit):
            for size in ZARR_READ_SIZES:
                # A new store each time: its connection maps the file afresh, as a new reader's.
                with SQLiteStore(zarr_path, read_only=True) as reader:
                    arr = zarr.open_array(reader, path=f"s{size}", mode="r")
                    t0 = time.perf_counter()
                    arr[:]
                    zarr_reads.setdefault((label, size), []).append(time.perf_counter() - t0)
    fresh(path)
    fresh(zarr_path)
    rows = []
    for size in INLINE_SIZES:
        inline = (
            [r[0] for r in results[("inline", size)]],
            [r[1] for r in results[("inline", size)]],
        )
        thread = (
            [r[0] for r in results[("to_thread", size)]],
            [r[1] for r in results[("to_thread", size)]],
        )
        rows.append(
            {
                "value": f"{size // KIB} KiB" if size < MIB else f"{size // MIB} MiB",
                "inline µs": median(inline[0]),
                "to_thread µs": median(thread[0]),
                "hop µs": median(thread[0]) - median(inline[0]),
                "8 gathered inline µs": median(inline[1]),
                "8 gathered to_thread µs": median(thread[1]),
                f"zarr arr[:] of {scale.zarr_mib} MiB inline ms": (
                    median(zarr_reads[("inline", size)]) * 1e3
                    if size in ZARR_READ_SIZES
                    else float("nan")
                ),
                "to_thread ms": (
                    median(zarr_reads[("to_thread", size)]) * 1e3
                    if size in ZARR_READ_SIZES
                    else float("nan")
                ),
            }
        )
    return {
        "rows": rows,
        "note": f"one `await store.get()` at a time (its latency = how long the event "
        f"loop is blocked when inline), 8 gathered, and zarr reading a whole 1-D float32 "
        f"array in chunks of that size through a new store; median of {reps}; "
        f"INLINE_READ_MAX default = {store_default('INLINE_READ_MAX', 0) // KIB} KiB",
    }


SECTIONS: dict[str, Callable[[Path, Scale, int], dict[str, Any]]] = {
    "page": section_page,
    "deep": section_deep,
    "cache": section_cache,
    "commit": section_commit,
    "inline": section_inline,
}
TITLES = {
    "page": "page size x journal mode: ingest",
    "deep": "page size x auto_vacuum: 16 KiB ranges deep inside large values",
    "cache": "cache_size x mmap_size: random reads",
    "commit": "the writer's group commit: zarr ingest",
    "inline": "INLINE_READ_MAX: async get inline vs in a worker thread",
}


# --- output -------------------------------------------------------------------------------------


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"
    return str(value)


def print_table(title: str, result: dict[str, Any], out=sys.stdout) -> None:
    rows = result["rows"]
    cols = list(rows[0])
    cells = [[fmt(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print(f"\n## {title}", file=out)
    print(result["note"], file=out)
    if result.get("others_cpu") is not None:
        print(
            f"(other processes used {result['others_cpu']:.0%} of the machine meanwhile; "
            f"{result['seconds']:.0f} s)",
            file=out,
        )
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True)), file=out)
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)), file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny data sets (a smoke test)")
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--dir", type=Path, help="folder for the files (default: a temporary one)")
    args = parser.parse_args(argv)
    scale = Scale.quick() if args.quick else Scale()
    print(
        f"zarrdb {zarrdb.__version__}, SQLite {zarrdb.sqlite_version}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.platform()}"
    )
    root = Path(tempfile.mkdtemp(prefix="zarrdb-tunables-", dir=args.dir))
    report = {}
    try:
        for name in args.only:
            since = machine_counters()
            t0 = time.monotonic()
            result = SECTIONS[name](root, scale, args.reps)
            result["seconds"] = time.monotonic() - t0
            result["others_cpu"] = others_cpu_share(since)
            report[name] = result
            print_table(TITLES[name], result)
            sys.stdout.flush()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
