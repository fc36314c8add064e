"""`zarrdb bench` end to end on a tiny configuration: every workload runs against every store
asked for, checks what it reads, and reports finite, positive figures; the default run is the
comparisons a user makes, zarrdb's two durabilities beside LocalStore with and without an
fsync, with what each keeps after a crash and a power loss; figures whose samples spread too
widely are flagged; the targets table compares each target's store with the reference it
names, and appears only with --targets; the run shows progress, prints the tables and writes
a chart that fits a screen."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct

import pytest

from zarrdb.cli import bench
from zarrdb.cli.bench import context, harness, report, workloads

from .helpers import assert_ok, run

TINY = context.Config(
    size=256, small=32, large=128, shard=128, cube=128, cube_chunk=64, cube_inner=16,
    values_mib=(1, 2), repeat=1, windows=5, list_children=5, list_keys_per_child=10,
    hierarchy_arrays=5, threads=(2,), shard_sizes=(128,), single_calls=200,
)  # fmt: skip
TINY_ARGS = ["--size", "256", "--chunks", "32,128", "--cube", "128,64", "--repeat", "1"]
PAIRS = ("zarrdb", "zarrdb-off", "local", "local-fsync")


def png_size(path):
    """(width, height) in pixels, from the PNG's header."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


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
                     "ingest shard-raw", "read shard-raw", "ingest cube-shard-blosc",
                     "cold read all cube-shard-raw", "cold read by block cube-raw",
                     "cold read blocks at once cube-shard-blosc", "round trip cube-raw",
                     "ingest value-1MiB-raw", "ingest value-2MiB-zstd", "window small",
                     "window shard-64KiB", "get 16 KiB", "async get 1 KiB",
                     "gathered set 1 KiB", "open 5 arrays"):  # fmt: skip
        assert expected in names, sorted(names)
    for (workload, store), result in got.items():
        assert result["samples"], (workload, store)
        assert all(math.isfinite(x) and x > 0 for x in result["samples"]), result
    ingests = {w for w in names if w.startswith("ingest")}
    # The variants run only the ingests they are for; both durabilities and both LocalStores
    # run every ingest; values only the four of the comparison, the cold reads zarrdb and
    # LocalStore.
    assert {w for w, s in got if s == "zarrdb-txn"} == {"ingest small-raw", "ingest small-zstd"}
    for store in ("zarrdb-off", "local-fsync"):
        assert {w for w, s in got if s == store} == ingests, store
    only_pairs = ("ingest value-", "ingest cube-shard-", "read cube-shard-")
    for prefix in only_pairs:
        assert {s for w, s in got if w.startswith(prefix)} == {
            s for s in PAIRS if prefix.startswith("ingest") or s in ("zarrdb", "local")
        }, prefix
    assert {s for w, s in got if w.startswith(("cold read", "round trip"))} == {"zarrdb", "local"}
    for store in ("zarrdb", "local"):
        assert {w for w, s in got if s == store} == names, store
    assert {w for w, s in got if s == "memory"} == {
        w for w in names if not w.startswith((*only_pairs, "cold read", "round trip"))
    }
    # Each result says what its figure is paired with: zarrdb's default ingests with
    # LocalStore + fsync, everything else with LocalStore.
    assert got[("ingest large-raw", "zarrdb")]["paired_with"] == "local-fsync"
    assert got[("ingest large-raw", "zarrdb-off")]["paired_with"] == "local"
    assert got[("read large-raw", "zarrdb")]["paired_with"] == "local"


def test_targets_use_the_reference_each_names(ctx):
    """Each target's ratio is its store's speed over its own reference, from the medians."""
    found = {(t["workload"], t["store"]): t for t in report.to_json(ctx)["targets"]}
    median = {(r.workload, r.store): r.median for r in ctx.results.values()}
    expected = {  # (workload, store): (reference, what the ratio must reach)
        ("ingest small-raw", "zarrdb"): ("memory", 0.85),
        ("ingest small-raw", "zarrdb-txn"): ("memory", 0.9),
        ("ingest shard-raw", "zarrdb"): ("local-fsync", 0.9),
        ("ingest cube-shard-raw", "zarrdb"): ("local-fsync", 0.9),
        ("gathered set 1 KiB", "zarrdb"): ("memory", 0.6),
        # time ratios: at most
        ("window shard-64KiB", "zarrdb"): ("local", 1.0),
        ("round trip cube-raw", "zarrdb"): ("local", 1.5),
    }
    for mib in (1, 2):
        for codec in ("raw", "zstd"):
            expected[(f"ingest value-{mib}MiB-{codec}", "zarrdb")] = ("local-fsync", 0.9)
            expected[(f"ingest value-{mib}MiB-{codec}", "zarrdb-off")] = ("local", 0.9)
    for read in ("cold read all", "cold read by block", "cold read blocks at once"):
        for codec in ("raw", "blosc"):
            expected[(f"{read} cube-shard-{codec}", "zarrdb")] = ("local", 1.0)
    assert set(found) == set(expected)
    for (workload, store), (reference, need) in expected.items():
        target = found[(workload, store)]
        assert target["reference"] == reference
        speed = median[(workload, reference)] / median[(workload, store)]
        if workload.startswith(("window", "cold", "round")):
            assert target["ratio"] == pytest.approx(1 / speed)
            assert target["met"] == (1 / speed <= need)
        else:
            assert target["ratio"] == pytest.approx(speed)
            assert target["met"] == (speed >= need)


def test_tables_and_markdown(ctx, capsys):
    """The main table pairs each durability with its counterpart, the other stores come
    second, and the targets table only when asked for."""
    report.print_tables(ctx)
    table = capsys.readouterr().out
    assert "read small-raw" in table and "other stores" in table and "targets" not in table
    assert report.DURABILITY.split(".")[0] in " ".join(table.split())
    report.print_tables(ctx, with_targets=True)
    assert "targets" in capsys.readouterr().out
    blocks = report.markdown_tables(ctx).split("\n\n")
    main = blocks[1].splitlines()
    assert main[0] == (
        "| workload | zarrdb (default) | LocalStore + fsync "
        '| zarrdb durability="off" | LocalStore |'
    )
    assert len(main) == 2 + len(ctx.results.workloads())
    median = {(r.workload, r.store): r.median for r in ctx.results.values()}

    def cells(workload):
        row = next(line for line in main if line.startswith(f"| {workload} |"))
        return [c.strip() for c in row.strip("|").split("|")]

    # An ingest: zarrdb against LocalStore + fsync, durability="off" against LocalStore, the
    # LocalStores without a ratio.
    ingest = cells("ingest large-raw")
    ratio = median[("ingest large-raw", "local-fsync")] / median[("ingest large-raw", "zarrdb")]
    assert ingest[1].split("(")[1].startswith(f"{ratio:.2f})") and "MB/s" in ingest[1]
    ratio = median[("ingest large-raw", "local")] / median[("ingest large-raw", "zarrdb-off")]
    assert ingest[3].split("(")[1].startswith(f"{ratio:.2f})")
    assert "(" not in ingest[2] and "(" not in ingest[4]
    # A read: zarrdb against LocalStore; the variants only ingest.
    read = cells("read large-raw")
    ratio = median[("read large-raw", "local")] / median[("read large-raw", "zarrdb")]
    assert read[1].split("(")[1].startswith(f"{ratio:.2f})")
    assert read[2] == read[3] == "-" and read[4].endswith("MB/s")
    # The caption, under it: the data sets, then what each store keeps.
    assert blocks[2].startswith("small = ") and blocks[3].startswith("After a crash of the process")
    other = next(b for b in blocks if b.startswith("other stores"))
    header = blocks[blocks.index(other) + 1].splitlines()[0]
    assert header == "| workload | zarrdb | local | zarrdb-txn | memory |"
    assert "targets" not in report.markdown_tables(ctx)
    assert "| ingest value-1MiB-raw | zarrdb-off / local |" in report.markdown_tables(ctx, True)


def test_a_figure_whose_samples_spread_widely_is_flagged():
    """A figure whose samples span more than 20% of their median is marked with its spread in
    the table; one within 20%, or with one sample, is not."""
    results = harness.Results()
    for value in (1.0, 1.1, 1.05):
        results.record("ingest x", "local", "s", value, nbytes=10**6)
    for value in (1.0, 1.3, 1.1):
        results.record("ingest x", "zarrdb", "s", value, nbytes=10**6)
    results.record("ingest x", "local-fsync", "s", 2.0, nbytes=10**6)
    assert results[("ingest x", "local")].spread == pytest.approx(0.1 / 1.05)
    assert not results[("ingest x", "local")].flagged
    assert results[("ingest x", "zarrdb")].flagged
    assert results[("ingest x", "local-fsync")].spread is None
    assert "spread" not in report._cell(results, "ingest x", "local")
    cell = report._cell(results, "ingest x", "zarrdb", "local-fsync")
    assert cell.endswith("(1.82) [spread 27%]")
    assert report.flagged(results, "ingest x", "zarrdb", "local")
    assert not report.flagged(results, "ingest x", "local", "local-fsync")


def test_default_run_is_the_comparison_a_user_makes(tmp_path):
    """Without --full: ingest and read at small and large chunks and with sharding, a random
    window, listing and one get, by zarrdb's two durabilities and LocalStore with and without
    an fsync; one table, no targets; a chart at most 1,200 pixels tall."""
    pytest.importorskip("matplotlib")
    args = bench_parser().parse_args([])
    names = [k.name for k in bench._kinds(args)]
    assert names == ["zarrdb", "zarrdb-off", "local", "local-fsync"]
    ctx = bench.run_workloads(TINY, bench._kinds(args), tmp_path, False, demo=True)
    assert ctx.results.workloads() == [
        "ingest small-raw", "read small-raw", "ingest large-raw", "read large-raw",
        "ingest shard-raw", "read shard-raw", "ingest cube-raw", "read cube-raw",
        "window small", "get 16 KiB", "list_dir 5 of 50 keys", "list_prefix 10 of 50 keys",
    ]  # fmt: skip
    for workload in ctx.results.workloads():
        stores = {s for w, s in ctx.results if w == workload}
        assert stores == (set(PAIRS) if workload.startswith("ingest") else {"zarrdb", "local"})
    assert len(report.tables(ctx)) == 1
    chart = tmp_path / "demo.png"
    report.plot(ctx, chart)
    assert png_size(chart)[1] <= 1200


def test_full_chart_fits_a_screen_too(ctx, tmp_path):
    """Every workload, with the targets panel beside it: still at most 1,200 pixels tall."""
    pytest.importorskip("matplotlib")
    chart = tmp_path / "full.png"
    report.plot(ctx, chart, with_targets=True)
    width, height = png_size(chart)
    assert height <= 1200 and width > height


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="no user ids on this system")
def test_page_cache_left_alone_is_said_so(tmp_path, monkeypatch):
    """Where the cache cannot be dropped (another user than root; a control file that cannot be
    written; the test suite's setting), a drop returns False, is not tried again, and the
    status says the cold reads read what the cache held and why."""
    kept = harness.PageCache()
    assert kept.drop() is False  # the suite's own setting (tests/conftest.py)
    assert "ZARRDB_BENCH_KEEP_PAGE_CACHE is set" in (kept.status() or "")
    monkeypatch.delenv("ZARRDB_BENCH_KEEP_PAGE_CACHE")
    if os.geteuid() == 0:
        cache = harness.PageCache(str(tmp_path))  # a folder: opening it to write fails
        reason = f"{tmp_path}: Is a directory"
    else:
        cache = harness.PageCache()
        reason = "not running as root"
    assert cache.status() is None  # no cold read yet: nothing to say
    assert cache.drop() is False and cache.drop() is False
    status = cache.status()
    assert status is not None and "NOT dropped" in status and reason in status
    missing = harness.PageCache(str(tmp_path / "missing"))
    assert missing.drop() is False and "no " in (missing.status() or "")


def test_cold_option_drops_the_cache_before_each_full_read_or_says_why_not(tmp_path):
    """With --cold the full reads start from a dropped page cache where that can be done, and
    the caption says which it was; without it, that the reads were warm."""
    args = bench_parser().parse_args(["--cold"])
    assert bench.config_from_args(args).cold
    cfg = dataclasses.replace(TINY, cold=True)
    kind = kinds("zarrdb")[0]
    ctx = context.Context(cfg, tmp_path, [kind])
    workloads.ingest_and_read(ctx, kind, "large", False)
    assert ("read large-raw", "zarrdb") in ctx.results
    status = ctx.page_cache.status()
    assert status is not None and status.startswith("cold reads: the OS page cache was")
    assert status in report.caption(ctx) and "warm OS page cache" not in report.caption(ctx)
    warm = context.Context(TINY, tmp_path / "warm", [kind])
    assert warm.page_cache.status() is None and "warm OS page cache" in report.caption(warm)


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
    ctx = context.Context(TINY, tmp_path, [kind])
    with pytest.raises(AssertionError, match="differs from what was written"):
        workloads.ingest_and_read(ctx, kind, "small", False)


def test_demo_run_shows_progress_tables_and_chart(tmp_path):
    """What `make demo` runs, on a tiny configuration in a real process: a progress line per
    step on stderr, the table with what each durability keeps, no targets, and a PNG whose
    path it prints."""
    pytest.importorskip("matplotlib")
    chart = tmp_path / "bench.png"
    proc = run("bench", *TINY_ARGS, "--plot", chart, timeout=300)
    assert_ok(proc)
    steps = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    assert steps and steps[-1].startswith(f"[{len(steps)}/{len(steps)}] listing")
    out = " ".join(proc.stdout.split())
    assert "ingest small-raw" in out and "LocalStore + fsync" in out and "targets:" not in out
    assert report.DURABILITY in out
    assert "warm OS page cache" in out
    assert f"chart written to {chart}" in proc.stdout
    assert png_size(chart)[1] <= 1200


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
    assert quick.repeat == 3 and quick.size * quick.size * 4 <= 4 * 2**20
    assert quick.cube**3 * 2 <= 32 * 2**20
    assert bench.config_from_args(parser.parse_args(["--full", "--repeat", "1"])).repeat == 1


def bench_parser():
    import argparse

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser


def test_targets_option_runs_only_what_the_targets_compare(tmp_path):
    """`--targets`: the small-chunk ingests, values, sharded ingests and reads and gathered
    sets, for zarrdb, its variants and the references; every target of the table gets a
    ratio."""
    parser = bench_parser()
    args = parser.parse_args(["--targets"])
    names = [k.name for k in bench._kinds(args)]
    assert set(names) == set(bench.TARGET_STORES)
    only = bench.TARGET_WORKLOADS
    ctx = bench.run_workloads(TINY, bench._kinds(args), tmp_path, False, only=only)
    workloads_run = set(ctx.results.workloads())
    assert {"ingest small-raw", "ingest value-1MiB-raw", "ingest cube-shard-raw",
            "cold read all cube-shard-blosc", "round trip cube-raw",
            "gathered set 1 KiB"} <= workloads_run  # fmt: skip
    assert not any(w.startswith(("ingest small-zstd", "open ", "list")) for w in workloads_run)
    measured = {(t.workload, t.store) for t in report.targets(ctx.results)}
    assert len(measured) == 2 + 8 + 2 + 6 + 1 + len(TINY.shard_sizes) + 1
