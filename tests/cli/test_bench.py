"""`zarrdb bench` end to end on a tiny configuration: every workload runs against every store
asked for, checks what it reads, and reports finite, positive figures; the targets table
compares each target's store with the reference it names; the run shows progress, prints the
tables and writes the chart whose path it prints."""

from __future__ import annotations

import json
import math

import pytest

from zarrdb.cli import bench
from zarrdb.cli.bench import harness, report, workloads

from .helpers import assert_ok, run

TINY = workloads.Config(
    size=256, small=32, large=128, cube=64, cube_chunk=32, repeat=1, windows=5,
    list_children=5, list_keys_per_child=10, hierarchy_arrays=5, threads=(2,),
    shard_sizes=(128,), single_calls=200,
)  # fmt: skip
TINY_ARGS = ["--size", "256", "--chunks", "32,128", "--cube", "64,32", "--repeat", "1"]


def kinds(*names):
    known = {k.name: k for k in harness.all_store_kinds()}
    return [known[n] for n in names]


STORES = ("zarrdb", "zarrdb-txn", "zarrdb-off", "local", "local-fsync", "memory")


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    """One run of every workload on the tiny configuration, for the tests that read it."""
    return bench.run_workloads(TINY, kinds(*STORES), tmp_path_factory.mktemp("bench"), False)


def test_bench_runs_every_workload_for_every_store(ctx):
    out = json.loads(json.dumps(report.to_json(ctx)))
    got = {(r["workload"], r["store"]): r for r in out["results"]}
    names = {w for w, _ in got}
    for expected in ("ingest small-raw", "read small-raw", "read large-zstd", "ingest cube-raw",
                     "window small", "window shard-64KiB", "async get 1 KiB",
                     "gathered set 1 KiB", "open 5 arrays"):  # fmt: skip
        assert expected in names, sorted(names)
    for (workload, store), result in got.items():
        assert result["samples"], (workload, store)
        assert all(math.isfinite(x) and x > 0 for x in result["samples"]), result
    # The variants run only the ingests they are for, and every ingest runs on every base store.
    assert {w for w, s in got if s == "zarrdb-txn"} == {"ingest small-raw", "ingest small-zstd"}
    assert {w for w, s in got if s == "zarrdb-off"} == {
        "ingest large-raw", "ingest large-zstd", "ingest cube-raw",
    }  # fmt: skip
    assert {w for w, s in got if s == "local-fsync"} == {w for w in names if w.startswith("ingest")}
    for store in ("zarrdb", "local", "memory"):
        assert {w for w, s in got if s == store} == names, store


def test_targets_use_the_reference_each_names(ctx):
    """Each target's ratio is its store's speed over its own reference, from the medians."""
    found = {(t["workload"], t["store"]): t for t in report.to_json(ctx)["targets"]}
    median = {(r.workload, r.store): r.median for r in ctx.results.values()}
    expected = {  # (workload, store): (reference, what the ratio must reach)
        ("ingest small-raw", "zarrdb"): ("memory", 0.85),
        ("ingest small-raw", "zarrdb-txn"): ("memory", 0.9),
        ("ingest large-raw", "zarrdb"): ("local-fsync", 0.8),
        ("ingest cube-raw", "zarrdb"): ("local-fsync", 0.8),
        ("ingest large-raw", "zarrdb-off"): ("local", 0.8),
        ("ingest cube-raw", "zarrdb-off"): ("local", 0.8),
        ("gathered set 1 KiB", "zarrdb"): ("memory", 0.8),
        ("window shard-64KiB", "zarrdb"): ("local", 0.7),  # a time ratio: at most
    }
    assert set(found) == set(expected)
    for (workload, store), (reference, need) in expected.items():
        target = found[(workload, store)]
        assert target["reference"] == reference
        speed = median[(workload, reference)] / median[(workload, store)]
        if workload.startswith("window"):
            assert target["ratio"] == pytest.approx(1 / speed)
            assert target["met"] == (1 / speed <= need)
        else:
            assert target["ratio"] == pytest.approx(speed)
            assert target["met"] == (speed >= need)


def test_tables_and_markdown(ctx, capsys):
    report.print_tables(ctx)
    table = capsys.readouterr().out
    assert "read small-raw" in table and "ingest variants" in table and "targets" in table
    blocks = report.markdown_tables(ctx).split("\n\n")
    main = blocks[1].splitlines()
    assert main[0] == "| workload | zarrdb | local | memory |"
    assert len(main) == 2 + len(ctx.results.workloads())
    row = next(line for line in main if line.startswith("| read small-raw |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].endswith(")") and "MB/s" in cells[1]  # zarrdb: throughput (vs local)
    assert cells[2].endswith("MB/s")  # local: the baseline, no ratio
    assert blocks[2].startswith("ingest variants: zarrdb-txn = ")
    variants = blocks[3].splitlines()
    assert variants[0] == "| workload | zarrdb | local | zarrdb-txn | zarrdb-off | local-fsync |"
    assert [line.split(" |")[0][2:] for line in variants[2:]] == [
        w for w in ctx.results.workloads() if w.startswith("ingest")
    ]
    assert "| ingest large-raw | zarrdb-off / local |" in blocks[5]


def test_bench_notices_wrong_data(tmp_path):
    """The full read compares what comes back with what was written: a store that hands back
    a changed chunk fails the run instead of producing a figure."""
    from zarr.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    backing: dict = {}

    def make(path, read_only):
        if read_only:
            chunk = backing["c/0/0"].as_numpy_array().copy()
            chunk[:8] ^= 0xFF
            backing["c/0/0"] = default_buffer_prototype().buffer.from_bytes(chunk.tobytes())
        return MemoryStore(backing, read_only=read_only)

    kind = harness.StoreKind("flaky", make, "", "changes a chunk")
    ctx = workloads.Context(TINY, tmp_path, [kind])
    with pytest.raises(AssertionError, match="differs from what was written"):
        workloads.ingest_and_read(ctx, kind, "small", False)


def test_demo_run_shows_progress_tables_and_chart(tmp_path):
    """What `make demo` runs, on a tiny configuration in a real process: a progress line per
    step on stderr, both tables, and a PNG whose path it prints."""
    pytest.importorskip("matplotlib")
    chart = tmp_path / "bench.png"
    proc = run("bench", *TINY_ARGS, "--stores", "zarrdb,local,memory", "--plot", chart, timeout=300)
    assert_ok(proc)
    steps = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    assert steps and steps[-1].startswith(f"[{len(steps)}/{len(steps)}] hierarchy")
    assert "ingest small-raw" in proc.stdout and "targets" in proc.stdout
    assert f"chart written to {chart}" in proc.stdout
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_default_is_quick_and_full_is_one_flag_away():
    """The default run is the quick one (small data sets, listings of a few thousand keys, one
    repetition); --full is the complete benchmark of the documentation."""
    parser = bench_parser()
    quick = bench.config_from_args(parser.parse_args([]))
    full = bench.config_from_args(parser.parse_args(["--full"]))
    assert quick == bench.QUICK and full == bench.FULL
    assert (full.size, full.cube, full.cube_chunk, full.repeat) == (4096, 512, 256, 3)
    assert full.list_children * full.list_keys_per_child == 100_000
    assert quick.list_children * quick.list_keys_per_child <= 10_000
    assert quick.repeat == 1 and quick.size * quick.size * 4 <= 4 * 2**20
    assert quick.cube**3 * 2 <= 32 * 2**20
    assert bench.config_from_args(parser.parse_args(["--full", "--repeat", "1"])).repeat == 1


def bench_parser():
    import argparse

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser


def test_targets_option_runs_only_what_the_targets_compare(tmp_path):
    """`--targets`: the raw ingests, sharded windows and gathered sets, for zarrdb, its
    variants and the references; every target of the table gets a ratio."""
    parser = bench_parser()
    args = parser.parse_args(["--targets"])
    names = [k.name for k in bench._kinds(args)]
    assert set(names) == set(bench.TARGET_STORES)
    ctx = bench.run_workloads(TINY, bench._kinds(args), tmp_path, False, only=bench.TARGET_WORKLOADS)
    workloads_run = set(ctx.results.workloads())
    assert {"ingest small-raw", "ingest large-raw", "ingest cube-raw", "gathered set 1 KiB"} <= (
        workloads_run
    )
    assert not any(w.startswith(("ingest small-zstd", "open ", "list")) for w in workloads_run)
    assert len(report.targets(ctx.results)) == 7 + len(TINY.shard_sizes)
