"""The issue-3 targets from a pytest-benchmark JSON file: a table of ratios with PASS/MISS.

    python -m pytest benchmarks/test_core.py --benchmark-enable --benchmark-json=out.json
    python benchmarks/report.py out.json [--fail-on-miss]

Each ratio compares two benchmarks of the same run that do the same amount of work: the median
round time of the baseline divided by the median round time of the candidate (2.0 = twice the
throughput). The rounds of all blocks of a benchmark (see test_core.py) are pooled. Columns:

    x (median)   the ratio of the pooled medians; the targets are judged on it
    x (min)      the same ratio of the fastest rounds, a check on noise
    per block    the lowest and highest ratio of the medians of matching blocks
    others       the share of the machine's CPU that other processes used while the two
                 benchmarks ran (50% on two cores = a whole core gone); a two-thread
                 measurement means little when it is high

Rows without a target are for information.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Ratio:
    label: str
    baseline: str  # extra_info["id"] of the benchmark whose time is divided ...
    candidate: str  # ... by the time of this one
    target: float | None = None


TARGETS = [
    Ratio("get 16 KiB: zarrdb vs stdlib", "get-16KiB:stdlib", "get-16KiB:zarrdb", 2.0),
    Ratio(
        "set_many 4096 x 16 KiB, 1 txn: zarrdb vs stdlib executemany",
        "set_many-16KiB:stdlib",
        "set_many-16KiB:zarrdb",
        1.5,
    ),
    Ratio(
        "get_range 4 KiB of 1 MiB: zarrdb vs stdlib full read",
        "get_range-1MiB:stdlib-full",
        "get_range-1MiB:zarrdb",
        5.0,
    ),
    Ratio(
        "list_dir 200 x 500 keys: zarrdb vs stdlib range scan",
        "list_dir-200x500:stdlib-scan",
        "list_dir-200x500:zarrdb",
        20.0,
    ),
    Ratio(
        "2 threads vs 1, zarrdb, 1 MiB values",
        "threads-1MiB:zarrdb-1",
        "threads-1MiB:zarrdb-2",
        1.6,
    ),
    Ratio(
        "2 threads vs 1, zarrdb, 16 KiB values",
        "threads-16KiB:zarrdb-1",
        "threads-16KiB:zarrdb-2",
        1.6,
    ),
]

INFO = [
    Ratio("get 1 MiB: zarrdb vs stdlib", "get-1MiB:stdlib", "get-1MiB:zarrdb"),
    Ratio(
        "get_many 16 KiB: zarrdb vs stdlib (1 txn)",
        "get_many-16KiB:stdlib",
        "get_many-16KiB:zarrdb",
    ),
    Ratio(
        "get_many 1 MiB: zarrdb vs stdlib (1 txn)",
        "get_many-1MiB:stdlib",
        "get_many-1MiB:zarrdb",
    ),
    # get_many returns all 2000 values (31 MiB of new memory to fault in); the get loop drops
    # each value before the next, so the allocator hands back the same warm block every time.
    Ratio(
        "get_many 16 KiB (keeps 2000 values) vs a get loop (drops each), zarrdb",
        "get-16KiB:zarrdb",
        "get_many-16KiB:zarrdb",
    ),
    Ratio(
        "get_range 4 KiB of 1 MiB: zarrdb vs stdlib blobopen",
        "get_range-1MiB:stdlib-blob",
        "get_range-1MiB:zarrdb",
    ),
    Ratio(
        "get_range last 4 KiB of 1 MiB: zarrdb vs stdlib full read",
        "get_range-1MiB:stdlib-full",
        "get_range-1MiB:zarrdb-suffix",
    ),
    Ratio(
        "list_dir: zarrdb vs zarrdb list_prefix + Python",
        "list_dir-200x500:zarrdb-list_prefix",
        "list_dir-200x500:zarrdb",
    ),
    Ratio(
        "list_dir: zarrdb list_prefix + Python vs stdlib scan",
        "list_dir-200x500:stdlib-scan",
        "list_dir-200x500:zarrdb-list_prefix",
    ),
    Ratio(
        "2 threads vs 1, stdlib, 1 MiB values", "threads-1MiB:stdlib-1", "threads-1MiB:stdlib-2"
    ),
    Ratio(
        "2 threads vs 1, stdlib, 16 KiB values",
        "threads-16KiB:stdlib-1",
        "threads-16KiB:stdlib-2",
    ),
    Ratio(
        "1 thread: zarrdb vs stdlib, 16 KiB", "threads-16KiB:stdlib-1", "threads-16KiB:zarrdb-1"
    ),
    Ratio(
        "2 threads: zarrdb vs stdlib, 16 KiB", "threads-16KiB:stdlib-2", "threads-16KiB:zarrdb-2"
    ),
    Ratio("2 threads: zarrdb vs stdlib, 1 MiB", "threads-1MiB:stdlib-2", "threads-1MiB:zarrdb-2"),
]

# Above this share of the machine used by other processes a ratio is flagged.
BUSY = 0.10


@dataclass
class Pooled:
    """The rounds of every block of one benchmark id."""

    times: list[float]  # seconds per round, all blocks
    block_medians: dict[int, float]
    others: float | None  # the largest share of the machine other processes used

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)


def load(path: str) -> dict[str, Pooled]:
    """The benchmarks of a --benchmark-json file, pooled by extra_info["id"]."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    parts: dict[str, list[dict]] = defaultdict(list)
    for bench in data.get("benchmarks", []):
        bid = bench.get("extra_info", {}).get("id")
        if bid:
            parts[bid].append(bench)
    pooled = {}
    for bid, benches in parts.items():
        times: list[float] = []
        medians = {}
        shares = []
        for i, bench in enumerate(benches):
            stats = bench["stats"]
            iterations = stats.get("iterations", 1) or 1
            data_points = stats.get("data")
            if data_points:
                times += [t / iterations for t in data_points]
            else:  # saved without the raw rounds: weigh the block's median by its rounds
                times += [stats["median"]] * stats["rounds"]
            medians[bench["extra_info"].get("block", i)] = stats["median"]
            if "others_cpu_share" in bench["extra_info"]:
                shares.append(bench["extra_info"]["others_cpu_share"])
        pooled[bid] = Pooled(times, medians, max(shares) if shares else None)
    return pooled


def conditions(path: str) -> dict:
    """extra_info common to the run (SQLite versions, page size) from the first benchmark."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    for bench in data.get("benchmarks", []):
        return bench.get("extra_info", {})
    return {}


@dataclass
class Row:
    ratio: Ratio
    candidate_ms: float | None = None
    baseline_ms: float | None = None
    median_ratio: float | None = None
    min_ratio: float | None = None
    block_range: tuple[float, float] | None = None
    rounds: int = 0
    others: float | None = None

    @property
    def status(self) -> str:
        if self.median_ratio is None:
            return "n/a"
        if self.ratio.target is None:
            return "info"
        return "PASS" if self.median_ratio >= self.ratio.target else "MISS"


def evaluate(pooled: dict[str, Pooled], ratios=None) -> list[Row]:
    rows = []
    for r in TARGETS + INFO if ratios is None else ratios:
        base = pooled.get(r.baseline)
        cand = pooled.get(r.candidate)
        if base is None or cand is None:
            rows.append(Row(r))
            continue
        per_block = [
            base.block_medians[b] / cand.block_medians[b]
            for b in base.block_medians
            if b in cand.block_medians
        ]
        shares = [s for s in (base.others, cand.others) if s is not None]
        rows.append(
            Row(
                r,
                cand.median * 1e3,
                base.median * 1e3,
                base.median / cand.median,
                base.min / cand.min,
                (min(per_block), max(per_block)) if per_block else None,
                min(len(base.times), len(cand.times)),
                max(shares) if shares else None,
            )
        )
    return rows


def format_table(rows: list[Row]) -> str:
    header = (
        "ratio",
        "candidate ms",
        "baseline ms",
        "x (median)",
        "x (min)",
        "per block",
        "target",
        "result",
        "others",
    )
    lines = []
    for row in rows:
        lo_hi = row.block_range
        lines.append(
            (
                row.ratio.label,
                "-" if row.candidate_ms is None else f"{row.candidate_ms:.3f}",
                "-" if row.baseline_ms is None else f"{row.baseline_ms:.3f}",
                "-" if row.median_ratio is None else f"{row.median_ratio:.2f}",
                "-" if row.min_ratio is None else f"{row.min_ratio:.2f}",
                "-" if lo_hi is None else f"{lo_hi[0]:.2f}-{lo_hi[1]:.2f}",
                "-" if row.ratio.target is None else f">= {row.ratio.target:g}",
                row.status,
                "-" if row.others is None else f"{row.others:.0%}",
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]

    def fmt(cells):
        first, *rest = cells
        return "  ".join([first.ljust(widths[0])] + [c.rjust(w) for c, w in zip(rest, widths[1:])])

    out = [fmt(header), fmt(["-" * w for w in widths])]
    targets = sum(1 for r in rows if r.ratio.target is not None)
    for i, line in enumerate(lines):
        if i == targets and targets < len(lines):
            out.append("")
        out.append(fmt(line))
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="the file written by pytest --benchmark-json")
    parser.add_argument("--fail-on-miss", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    pooled = load(args.json)
    if not pooled:
        print(f"{args.json}: no zarrdb benchmarks (was the run made with --benchmark-enable?)")
        return 2
    rows = evaluate(pooled)
    info = conditions(args.json)
    print(
        f"zarrdb (SQLite {info.get('zarrdb_sqlite', '?')}) vs Python sqlite3 "
        f"(SQLite {info.get('stdlib_sqlite', '?')}), page size {info.get('page_size', '?')}, "
        "WAL, synchronous=NORMAL; x = baseline time / candidate time (throughput ratio)"
    )
    print(format_table(rows))
    targets = [r for r in rows if r.ratio.target is not None]
    passed = sum(r.status == "PASS" for r in targets)
    print(f"\n{passed}/{len(targets)} targets met")
    busy = [r for r in rows if r.others is not None and r.others > BUSY]
    if busy:
        worst = max(r.others for r in busy)
        print(
            f"warning: other processes used more than {BUSY:.0%} of the machine (up to "
            f"{worst:.0%}) during {len(busy)} of the {len(rows)} comparisons (column 'others'); "
            "their ratios are noisy, the two-thread ones above all"
        )
    missing = [r.ratio.label for r in rows if r.status == "n/a"]
    if missing:
        print("not in this run: " + "; ".join(missing))
    if args.fail_on_miss and passed < len(targets):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
