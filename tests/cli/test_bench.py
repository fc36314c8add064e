"""`zarrdb bench` end to end on a tiny configuration: every workload runs against every store
asked for, checks what it reads, and reports finite, positive figures."""

from __future__ import annotations

import json
import math

import pytest

from zarrdb import bench


def test_bench_runs_every_workload_for_every_store(tmp_path, capsys):
    cfg = bench.Config(
        size=256, small=32, large=128, repeat=1, windows=5, list_children=5,
        list_keys_per_child=10, hierarchy_arrays=5, threads=(2,), shard_sizes=(128,),
    )  # fmt: skip
    kinds = bench.store_kinds(["zarrdb", "local", "memory"])
    ctx = bench.run(cfg, kinds, tmp_path, progress=False)
    report = json.loads(json.dumps(bench.to_json(ctx)))
    got = {(r["workload"], r["store"]): r for r in report["results"]}
    workloads = {w for w, _ in got}
    for expected in ("ingest small-raw", "read small-raw", "read large-zstd", "window small",
                     "window shard-64KiB", "async get 1 KiB", "open 200 arrays"):  # fmt: skip
        assert expected in workloads, sorted(workloads)
    for workload in workloads:
        for store in ("zarrdb", "local", "memory"):
            if workload.endswith("(speed-up)") or "sync" in workload:
                continue  # not every store has the synchronous surface
            result = got[(workload, store)]
            assert result["samples"], (workload, store)
            assert all(math.isfinite(x) and x > 0 for x in result["samples"]), result
    bench.print_table(ctx)
    table = capsys.readouterr().out
    assert "read small-raw" in table and "zarrdb" in table
    markdown = bench.markdown_table(ctx).splitlines()
    assert markdown[0] == "| workload | zarrdb | local | memory |"
    assert len(markdown) == 2 + len(workloads)
    row = next(line for line in markdown if line.startswith("| read small-raw |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].endswith(")") and "MB/s" in cells[1]  # zarrdb: throughput (vs local)
    assert cells[2].endswith("MB/s")  # local: the baseline, no ratio


def test_bench_notices_wrong_data(tmp_path):
    """The full read compares what comes back with what was written: a store that hands back
    a changed chunk fails the run instead of producing a figure."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    backing: dict = {}

    def make(path, read_only):
        if read_only:
            chunk = backing["c/0/0"].as_numpy_array().copy()
            chunk[:8] ^= 0xFF
            backing["c/0/0"] = default_buffer_prototype().buffer.from_bytes(chunk.tobytes())
        return MemoryStore(backing, read_only=read_only)

    kind = bench.StoreKind("flaky", make, "")
    cfg = bench.Config(size=256, small=32, large=128, repeat=1)
    ctx = bench.Context(cfg, tmp_path, bench.synthetic_field(256), [kind])
    with pytest.raises(AssertionError, match="differs from what was written"):
        bench.ingest_and_read(ctx, kind, 32, False, "small-raw")
