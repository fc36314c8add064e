"""Engine benchmarks (issue 3): zarrdb._core.Database against the standard `sqlite3` module.

Run (not part of the default test run; the repository's testpaths is tests/):

    python -m pytest benchmarks/test_core.py --benchmark-enable --benchmark-json=out.json
    python benchmarks/report.py out.json

Both engines read files of identical layout (byte-for-byte copies of one source file: same page
size, WAL) with the same synchronous setting (NORMAL), and do the same work; the standard module
does it as efficiently as it can: one connection in autocommit mode, explicit single transactions
for writes and batches, executemany, Connection.blobopen for byte ranges, its automatic
statement cache, parameter tuples built in advance.

Noise: every benchmark is split into BLOCKS blocks (parameter `block`), and conftest.py orders
the tests so that within a benchmark group the blocks of the variants alternate (zarrdb block 0,
stdlib block 0, zarrdb block 1, ...): a slow spell of a shared machine then hits both sides of a
ratio instead of one. Each block times its rounds with pedantic (fixed rounds, one iteration,
warm-up rounds first), so a run takes a predictable time. Each benchmark records
extra_info["id"] ("<workload>:<variant>"); benchmarks/report.py pools the rounds of all blocks
of an id and pairs ids into the ratios of the issue's targets.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pytest_benchmark", reason="pytest-benchmark is not installed")

from zarrdb._core import Writer  # noqa: E402
from zarrdb.cli.bench.harness import in_threads  # noqa: E402

from ._common import (  # noqa: E402  (after the skip)
    BLOCKS,
    KIB,
    MIB,
    PAGE_SIZE,
    SCAN_KEYS,
    SCHEMA,
    SELECT_ROWID,
    SELECT_V,
    TREE_GROUP,
    UPSERT,
    children_of,
    children_of_rows,
    open_stdlib,
    open_zarrdb,
    rounds,
)

ENGINES = ["zarrdb", "stdlib"]

blocks = pytest.mark.parametrize("block", range(BLOCKS), ids=lambda b: f"b{b}")


def sized(workload: str, *, rounds_16k: int, rounds_1m: int):
    """Parametrize over the two value sizes, each in its own benchmark group."""
    return pytest.mark.parametrize(
        "size,n_rounds",
        [
            pytest.param(
                "16KiB",
                rounds_16k,
                marks=pytest.mark.benchmark(group=f"{workload} 16KiB"),
                id="16KiB",
            ),
            pytest.param(
                "1MiB", rounds_1m, marks=pytest.mark.benchmark(group=f"{workload} 1MiB"), id="1MiB"
            ),
        ],
    )


def data_for(request, size):
    return request.getfixturevalue("data_16k" if size == "16KiB" else "data_1m")


def measure(
    benchmark, run, *, workload, variant, block, total_rounds, warmup=1, setup=None, **info
):
    """Time `run` for this block's share of `total_rounds`; returns run's last result."""
    benchmark.extra_info["id"] = f"{workload}:{variant}"
    benchmark.extra_info["block"] = block
    benchmark.extra_info.update(info)
    n = max(2, -(-rounds(total_rounds) // BLOCKS))
    return benchmark.pedantic(run, setup=setup, rounds=n, iterations=1, warmup_rounds=warmup)


# --- get: one call per key --------------------------------------------------------------------


@sized("get", rounds_16k=45, rounds_1m=30)
@blocks
@pytest.mark.parametrize("engine", ENGINES)
def test_get(benchmark, request, conns, engine, block, size, n_rounds):
    ds = data_for(request, size)
    keys = ds.keys
    if engine == "zarrdb":
        get = conns.zarrdb(ds.zarrdb_path).get

        def run():
            for k in keys:
                get(k)

        check = get
    else:
        execute = conns.stdlib(ds.stdlib_path).execute
        params = [(k,) for k in keys]

        def run():
            for p in params:
                execute(SELECT_V, p).fetchone()

        def check(k):
            return execute(SELECT_V, (k,)).fetchone()[0]

    assert len(check(keys[-1])) == ds.value_size
    measure(
        benchmark, run, workload=f"get-{size}", variant=engine, block=block,
        total_rounds=n_rounds, warmup=2, calls=len(keys),
    )  # fmt: skip


# --- get_many: all keys in one call (one snapshot) --------------------------------------------


@sized("get_many", rounds_16k=24, rounds_1m=21)
@blocks
@pytest.mark.parametrize("engine", ENGINES)
def test_get_many(benchmark, request, conns, engine, block, size, n_rounds):
    ds = data_for(request, size)
    keys = ds.keys
    if engine == "zarrdb":
        db = conns.zarrdb(ds.zarrdb_path)

        def run():
            return db.get_many(keys)

    else:
        execute = conns.stdlib(ds.stdlib_path).execute
        params = [(k,) for k in keys]

        def run():
            # The same guarantee as get_many: every value from one snapshot.
            execute("BEGIN")
            try:
                return [execute(SELECT_V, p).fetchone()[0] for p in params]
            finally:
                execute("COMMIT")

    values = measure(
        benchmark, run, workload=f"get_many-{size}", variant=engine, block=block,
        total_rounds=n_rounds, keys=len(keys),
    )  # fmt: skip
    assert len(values) == len(keys) and all(len(v) == ds.value_size for v in values)


# --- get_range: 4 KiB out of 1 MiB values -----------------------------------------------------

RANGE = 4 * KIB


def range_requests(keys, per_key=2, seed=3):
    """Each key `per_key` times, each at an offset spread uniformly over the value."""
    rng = random.Random(seed)
    return [(k, rng.randrange(0, MIB - RANGE + 1)) for _ in range(per_key) for k in keys]


@pytest.mark.benchmark(group="get_range 4KiB of 1MiB")
@blocks
@pytest.mark.parametrize("variant", ["zarrdb", "stdlib-full", "stdlib-blob", "zarrdb-suffix"])
def test_get_range(benchmark, conns, data_1m, variant, block):
    requests = range_requests(data_1m.keys)
    if variant.startswith("zarrdb"):
        get_range = conns.zarrdb(data_1m.zarrdb_path).get_range
        if variant == "zarrdb":

            def run():
                for k, start in requests:
                    get_range(k, start, RANGE)

        else:  # the last 4 KiB (where a shard keeps its index)

            def run():
                for k, _ in requests:
                    get_range(k, -RANGE, None)

        def read(k, start):
            return get_range(k, start, RANGE)

    else:
        con = conns.stdlib(data_1m.stdlib_path)
        execute = con.execute
        blobopen = con.blobopen
        if variant == "stdlib-full":
            # Read the whole value, keep the slice.
            def read(k, start):
                return execute(SELECT_V, (k,)).fetchone()[0][start : start + RANGE]

        else:
            # The rowid, then an incremental blob read of just the range.
            def read(k, start):
                rowid = execute(SELECT_ROWID, (k,)).fetchone()[0]
                with blobopen("zarr", "v", rowid, readonly=True) as blob:
                    return blob[start : start + RANGE]

        def run():
            for k, start in requests:
                read(k, start)

    k, start = requests[5]
    ref = open_stdlib(data_1m.stdlib_path)  # a third connection, for the expected bytes
    try:
        expected = ref.execute(SELECT_V, (k,)).fetchone()[0][start : start + RANGE]
    finally:
        ref.close()
    assert read(k, start) == expected
    measure(
        benchmark, run, workload="get_range-1MiB", variant=variant, block=block,
        total_rounds=21, calls=len(requests), range_bytes=RANGE,
    )  # fmt: skip


# --- set_many: 4096 x 16 KiB in one transaction, into a fresh file each round -----------------
# (zarrdb: one submission to the writer thread, the path every store write takes)


@pytest.mark.benchmark(group="set_many 4096x16KiB")
@blocks
@pytest.mark.parametrize("engine", ENGINES)
def test_set_many(benchmark, tmp_path, set_many_pairs, engine, block):
    pairs = set_many_pairs
    ops = [("set", key, value) for key, value in pairs]  # built in advance, as the tuples are
    state = {"round": 0, "con": None, "writer": None}

    def close():
        if state["writer"] is not None:
            state["writer"].close()
            state["writer"] = None
        state["con"].close()
        state["con"] = None

    def fresh():
        # Untimed: close the previous round's connection, delete its files, and create a new
        # file with an empty table through the engine under test. zarrdb writes keys through
        # its writer thread (as SQLiteStore does): one submission, one transaction.
        if state["con"] is not None:
            close()
            for path in tmp_path.glob("round*"):
                path.unlink()
        state["round"] += 1
        path = tmp_path / f"round{state['round']}.zarrdb"
        if engine == "zarrdb":
            db = open_zarrdb(path)
            db.executescript(SCHEMA)
            state["con"] = db
            state["writer"] = Writer(db)
            return (state["writer"],), {}
        db = open_stdlib(path)
        db.execute(SCHEMA)
        state["con"] = db
        return (db,), {}

    if engine == "zarrdb":

        def run(writer):
            writer.write(ops)

    else:

        def run(con):
            con.execute("BEGIN IMMEDIATE")
            con.executemany(UPSERT, pairs)
            con.execute("COMMIT")

    try:
        measure(
            benchmark, run, workload="set_many-16KiB", variant=engine, block=block,
            total_rounds=12, setup=fresh, pairs=len(pairs),
        )  # fmt: skip
        close()
        check = open_stdlib(tmp_path / f"round{state['round']}.zarrdb")
        try:
            count, total = check.execute("SELECT count(*), sum(length(v)) FROM zarr").fetchone()
            assert (count, total) == (len(pairs), len(pairs) * 16 * KIB)
            assert check.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE
        finally:
            check.close()
    finally:
        if state["con"] is not None:
            close()


# --- list_dir: a group of 200 children with 500 keys each ------------------------------------


@pytest.mark.benchmark(group="list_dir 200x500")
@blocks
@pytest.mark.parametrize("variant", ["zarrdb", "stdlib-scan", "zarrdb-list_prefix"])
def test_list_dir(benchmark, conns, data_tree, variant, block):
    prefix = TREE_GROUP
    plen = len(prefix)
    if variant.startswith("zarrdb"):
        db = conns.zarrdb(data_tree.zarrdb_path)
        if variant == "zarrdb":

            def run():
                return db.list_dir(prefix)

        else:

            def run():
                return children_of(db.list_prefix(prefix), plen)

    else:
        execute = conns.stdlib(data_tree.stdlib_path).execute
        bounds = (prefix, prefix[:-1] + chr(ord("/") + 1))  # "grp/" < k < "grp0"

        def run():
            return children_of_rows(execute(SCAN_KEYS, bounds), plen)

    assert run() == data_tree.extra["expected"]
    measure(
        benchmark, run, workload="list_dir-200x500", variant=variant, block=block,
        total_rounds=90 if variant == "zarrdb" else 24, keys_below=200 * 500,
    )  # fmt: skip


# --- threads: the same reads by one thread, or split over two (each its own connection) ------


def run_threads(jobs):
    in_threads(lambda job: job(), [(job,) for job in jobs])


@sized("threads", rounds_16k=30, rounds_1m=30)
@blocks
@pytest.mark.parametrize(
    "engine,nthreads", [("zarrdb", 1), ("zarrdb", 2), ("stdlib", 1), ("stdlib", 2)]
)
def test_threads(benchmark, request, conns, engine, nthreads, block, size, n_rounds):
    ds = data_for(request, size)
    reads = ds.keys * 2  # 4000 x 16 KiB or 128 x 1 MiB in all, whatever the number of threads
    jobs = []
    for i in range(nthreads):
        mine = reads[i::nthreads]
        if engine == "zarrdb":
            get = conns.zarrdb(ds.zarrdb_path).get

            def job(get=get, mine=mine):
                for k in mine:
                    get(k)

        else:
            execute = conns.stdlib(ds.stdlib_path, check_same_thread=False).execute
            params = [(k,) for k in mine]

            def job(execute=execute, params=params):
                for p in params:
                    execute(SELECT_V, p).fetchone()

        jobs.append(job)

    def run():
        # One thread is a worker thread too, so both cases pay the same thread start-up.
        run_threads(jobs)

    measure(
        benchmark, run, workload=f"threads-{size}", variant=f"{engine}-{nthreads}", block=block,
        total_rounds=n_rounds, reads=len(reads), threads=nthreads,
    )  # fmt: skip
