"""Store benchmarks under pytest-benchmark: the workloads of the project's targets, run by the
harness `zarrdb bench` uses (zarrdb.cli.bench), so both measure exactly the same thing.

    python -m pytest benchmarks/test_store.py --benchmark-enable --benchmark-json=out.json

Each benchmark records extra_info["workload"] and ["store"], the row and column of the
`zarrdb bench` table. Sizes are those of `zarrdb bench --full` (4096x4096 float32 in 64x64 and
512x512 chunks, a 512^3 uint16 cube in 256^3 chunks); ZARRDB_BENCH_QUICK=1 uses the quick
default instead. Every round is set up anew (a new store) outside the timed part; each case
checks what it wrote or read after its rounds.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pytest_benchmark", reason="pytest-benchmark is not installed")

from zarrdb.cli.bench import FULL, QUICK  # noqa: E402  (after the skip)
from zarrdb.cli.bench.harness import all_store_kinds  # noqa: E402
from zarrdb.cli.bench.context import WINDOW, Context, size_label  # noqa: E402
from zarrdb.cli.bench.workloads import FullRead, GatheredSet, Ingest, Windows  # noqa: E402

CONFIG = QUICK if os.environ.get("ZARRDB_BENCH_QUICK") else FULL
ROUNDS = 3
KINDS = {k.name: k for k in all_store_kinds()}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> Context:
    return Context(CONFIG, tmp_path_factory.mktemp("store-bench"), list(KINDS.values()))


def _pedantic(benchmark, case, workload, store, rounds=ROUNDS):
    benchmark.extra_info.update(workload=workload, store=store)
    benchmark.pedantic(case.run, setup=case.setup, rounds=rounds, iterations=1)


INGESTS = [
    (data, store)
    for data in ("small", "large", "cube")
    for store in ("zarrdb", "zarrdb-txn", "zarrdb-off", "local", "local-fsync", "memory")
    if KINDS[store].runs("ingest", data)
]


@pytest.mark.parametrize("data,store", INGESTS, ids=[f"{d}-{s}" for d, s in INGESTS])
def test_ingest(benchmark, ctx, data, store):
    """`arr[:] = data` into a new store, closed (and synced, for local-fsync)."""
    benchmark.group = f"ingest {data}-raw"
    case = Ingest(ctx, KINDS[store], data, compressed=False)
    _pedantic(benchmark, case, f"ingest {case.label}", store)
    case.check()


@pytest.mark.parametrize("store", ["zarrdb", "local", "memory"])
def test_full_read(benchmark, ctx, store):
    benchmark.group = "read large-raw"
    ingest = Ingest(ctx, KINDS[store], "large", compressed=False)
    ingest.setup()
    ingest.run()
    ingest.check()  # also warms the OS page cache
    case = FullRead(ctx, KINDS[store], ingest.label)
    _pedantic(benchmark, case, f"read {ingest.label}", store)
    case.teardown()


@pytest.mark.parametrize("store", ["zarrdb", "memory"])
def test_gathered_set(benchmark, ctx, store):
    """`store.set` of 1 KiB values, 100 at a time under asyncio.gather."""
    benchmark.group = "gathered set 1 KiB"
    case = GatheredSet(ctx, KINDS[store])
    _pedantic(benchmark, case, "gathered set 1 KiB", store)
    case.check()


SHARDS = [s for s in CONFIG.shard_sizes]


@pytest.mark.parametrize("shard", SHARDS, ids=[size_label(s * s * 4) for s in SHARDS])
@pytest.mark.parametrize("store", ["zarrdb", "local"])
def test_windows_from_shards(benchmark, ctx, store, shard):
    """Random 64x64 windows out of shards of 1, 4 and 16 MiB, from a warm OS page cache."""
    label = f"shard-{size_label(shard * shard * 4)}"
    benchmark.group = f"window {label}"
    case = Windows(ctx, KINDS[store], label, WINDOW, shard)
    _pedantic(benchmark, case, f"window {label}", store)
    case.teardown()
