"""The store's defaults that exist for speed, under pytest-benchmark (issue 6).

    python -m pytest benchmarks/test_tunables.py --benchmark-enable [--benchmark-json=out.json]

The workloads are those of benchmarks/tunables.py (which prints them as tables, with the
variants run round-robin); here each variant is one benchmark, grouped per tunable so that
pytest-benchmark's own table compares them:

    page size x journal mode      ingest of 16 KiB and 1 MiB values (engine)
    page size x auto_vacuum       random 16 KiB ranges deep inside 1 / 4 / 16 MiB values (engine)
    cache_size x mmap_size        random reads (engine, the store's file layout)
    the writer's group commit     zarr `arr[:] = data` through SQLiteStore (constants patched:
                                  GROUP_COMMIT_MAX_BYTES, _AGE, BLOB_WRITE_MIN, CHECKPOINT_PAGES)
    INLINE_READ_MAX               `await store.get()` inline vs through asyncio.to_thread

ZARRDB_TUNABLES_QUICK=1 shrinks the data sets (a smoke test of the benchmarks themselves).
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytest_benchmark", reason="pytest-benchmark is not installed")

from . import tunables as T  # noqa: E402  (after the skip)
from ._common import rounds  # noqa: E402

KIB, MIB = T.KIB, T.MIB
SCALE = T.Scale.quick() if os.environ.get("ZARRDB_TUNABLES_QUICK") else T.Scale()


def kib(n: int) -> str:
    return f"{n // KIB}KiB" if n < MIB else f"{n // MIB}MiB"


# --- page size x journal mode: ingest ---------------------------------------------------------


@pytest.fixture(scope="module")
def ingest_loads() -> dict[str, list[list[tuple[str, bytes]]]]:
    return {
        "16KiB": T.ingest_items(T.random_values(SCALE.ingest_16k // (16 * KIB), 16 * KIB, 1)),
        "1MiB": T.ingest_items(T.random_values(SCALE.ingest_1m // MIB, MIB, 2)),
    }


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(s, marks=pytest.mark.benchmark(group=f"ingest {s}: page size x journal"), id=s)
        for s in ("16KiB", "1MiB")
    ],
)
@pytest.mark.parametrize("journal", ["wal", "delete"])
@pytest.mark.parametrize("page_size", T.PAGE_SIZES, ids=kib)
def test_ingest_page_size_journal(benchmark, tmp_path, ingest_loads, size, journal, page_size):
    load = ingest_loads[size]
    path = tmp_path / "ingest.db"

    def setup():
        db = T.new_engine_file(path, page_size=page_size, auto_vacuum=True, journal=journal)
        return (db, load, journal), {}

    benchmark.extra_info.update(id=f"ingest-{size}:{kib(page_size)}-{journal}", page=page_size)
    benchmark.pedantic(T.run_ingest, setup=setup, rounds=rounds(3), iterations=1)


# --- page size x auto_vacuum: deep byte ranges -------------------------------------------------


@pytest.fixture(scope="module")
def deep_files(
    tmp_path_factory,
) -> tuple[dict[tuple[int, bool], Path], list[tuple[str, bytes, int]]]:
    items = T.deep_items(SCALE)
    root = tmp_path_factory.mktemp("deep")
    files = {}
    for page in T.PAGE_SIZES:
        for av in (False, True):
            path = root / f"{page}-{av}.db"
            T.write_file(path, [(k, v) for k, v, _ in items], page_size=page, auto_vacuum=av)
            files[(page, av)] = path
    return files, items


@pytest.mark.parametrize(
    "value_size",
    [
        pytest.param(
            s, marks=pytest.mark.benchmark(group=f"16KiB ranges deep in {kib(s)} values"), id=kib(s)
        )
        for s in (MIB, 4 * MIB, 16 * MIB)
    ],
)
@pytest.mark.parametrize("auto_vacuum", [False, True], ids=["none", "incremental"])
@pytest.mark.parametrize("page_size", T.PAGE_SIZES, ids=kib)
def test_deep_ranges_page_size_auto_vacuum(
    benchmark, deep_files, value_size, auto_vacuum, page_size
):
    files, items = deep_files
    path = files[(page_size, auto_vacuum)]
    keys = [k for k, _, s in items if s == value_size]
    rng = random.Random(value_size)
    reqs = [
        (rng.choice(keys), rng.randrange(value_size // 2, value_size - T.RANGE)) for _ in range(100)
    ]
    db = T.Database(path, mode="r", cache_size=T.cache_kib(), mmap_size=0)
    try:
        get_range = db.get_range

        def run():
            for k, start in reqs:
                get_range(k, start, T.RANGE)

        benchmark.extra_info.update(
            id=f"deep-{kib(value_size)}:{kib(page_size)}-{'av' if auto_vacuum else 'noav'}",
            reads=len(reqs),
        )
        benchmark.pedantic(run, rounds=rounds(5), iterations=1, warmup_rounds=1)
    finally:
        db.close()


# --- cache_size x mmap_size: random reads ------------------------------------------------------


@pytest.fixture(scope="module")
def cache_file(tmp_path_factory) -> tuple[Path, list[str], list[str]]:
    small = T.random_values(SCALE.cache_16k_values, 16 * KIB, 16)
    big = T.random_values(SCALE.cache_4m_values, 4 * MIB, 4)
    items = [(f"s/c/{i // 64}/{i % 64}", v) for i, v in enumerate(small)]
    items += [(f"b/c/{i}", v) for i, v in enumerate(big)]
    path = tmp_path_factory.mktemp("cache") / "cache.db"
    T.write_file(path, items, page_size=64 * KIB, auto_vacuum=True)
    return path, [k for k, _ in items[: len(small)]], [k for k, _ in items[len(small) :]]


@pytest.mark.parametrize(
    "workload",
    [
        pytest.param(w, marks=pytest.mark.benchmark(group=f"random reads: {w}"), id=w)
        for w in ("get-16KiB", "range-16KiB-of-4MiB", "get-4MiB")
    ],
)
@pytest.mark.parametrize("mmap", [0, 256 * MIB], ids=["mmap0", "mmap256MiB"])
@pytest.mark.parametrize("cache", [2048, 32768], ids=["cache2MiB", "cache32MiB"])
def test_random_reads_cache_mmap(benchmark, cache_file, workload, mmap, cache):
    path, small_keys, big_keys = cache_file
    rng = random.Random(7)
    n = 500
    db = T.Database(path, mode="r", cache_size=cache, mmap_size=mmap)
    try:
        if workload == "get-16KiB":
            keys = [rng.choice(small_keys) for _ in range(n)]

            def run():
                for k in keys:
                    db.get(k)

        elif workload == "range-16KiB-of-4MiB":
            reqs = [(rng.choice(big_keys), rng.randrange(0, 4 * MIB - T.RANGE)) for _ in range(n)]

            def run():
                for k, s in reqs:
                    db.get_range(k, s, T.RANGE)

        else:
            keys = [rng.choice(big_keys) for _ in range(16)]

            def run():
                for k in keys:
                    db.get(k)

        benchmark.extra_info.update(id=f"{workload}:cache{cache // 1024}MiB-mmap{mmap // MIB}MiB")
        benchmark.pedantic(run, rounds=rounds(5), iterations=1, warmup_rounds=1)
    finally:
        db.close()


# --- group commit cap and inline commits: zarr ingest -------------------------------------------


@pytest.fixture(scope="module")
def zarr_data() -> np.ndarray:
    rows = SCALE.zarr_mib * MIB // (4 * 4096)
    return np.random.default_rng(0).standard_normal((rows, 4096), dtype=np.float32)


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param(
            c, marks=pytest.mark.benchmark(group=f"zarr ingest {n}: commit tunables"), id=n
        )
        for n, c in (("1MiB-chunks", (64, 4096)), ("4MiB-chunks", (256, 4096)))
    ],
)
@pytest.mark.parametrize(
    "label,constants,new_file",
    T.commit_variants(),
    ids=[v[0].replace(" ", "-") for v in T.commit_variants()],
)
def test_zarr_ingest_commit_tunables(
    benchmark, tmp_path, zarr_data, chunks, label, constants, new_file
):
    path = tmp_path / "zarr.zarrdb"
    opened: list[T.SQLiteStore] = []

    def setup():
        while opened:  # the previous round's store: its close (checkpoint) is not timed
            opened.pop().close()
        store, arr = T.prepare_zarr_ingest(path, zarr_data, chunks, new_file=new_file)
        opened.append(store)
        return (arr,), {}

    def run(arr):
        arr[:] = zarr_data

    benchmark.extra_info.update(id=f"zarr-ingest-{chunks}:{label}", **constants)
    try:
        with T.patched(**constants):
            benchmark.pedantic(run, setup=setup, rounds=rounds(3), iterations=1)
    finally:
        while opened:
            opened.pop().close()


# --- INLINE_READ_MAX: inline vs asyncio.to_thread ---------------------------------------------


@pytest.fixture(scope="module")
def inline_store(tmp_path_factory):
    from zarr.core.buffer import cpu

    path = tmp_path_factory.mktemp("inline") / "inline.zarrdb"
    store = T.SQLiteStore(path)
    for size in T.INLINE_SIZES:
        for i, value in enumerate(T.random_values(8, size, size)):
            store.set_sync(f"v{size}/{i}", cpu.Buffer.from_bytes(value))
    store.close()
    reader = T.SQLiteStore(path, read_only=True)
    yield reader
    reader.close()


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(s, marks=pytest.mark.benchmark(group=f"await store.get() {kib(s)}"), id=kib(s))
        for s in T.INLINE_SIZES
    ],
)
@pytest.mark.parametrize("path_taken", ["inline", "to_thread"])
def test_async_get_inline_vs_thread(benchmark, inline_store, size, path_taken):
    keys = [f"v{size}/{i}" for i in range(8)]
    calls = 32
    loop = asyncio.new_event_loop()

    async def sequential():
        for i in range(calls):
            await inline_store.get(keys[i % 8])

    try:
        with T.patched(INLINE_READ_MAX=(1 << 62) if path_taken == "inline" else 0):
            loop.run_until_complete(sequential())  # the executor's threads open their connections

            def run():
                loop.run_until_complete(sequential())

            benchmark.extra_info.update(id=f"get-{kib(size)}:{path_taken}", calls=calls)
            benchmark.pedantic(run, rounds=rounds(10), iterations=1, warmup_rounds=1)
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
