"""What a benchmark run shows: the table of every workload against every store (medians, and
each store's speed relative to LocalStore), the table of the project's targets (each ratio
against the reference that target names), as text, Markdown, JSON and a chart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarrdb.cli.bench.harness import Results, environment
from zarrdb.cli.bench.workloads import Config, Context, size_label

BASELINE = "local"


def speed_ratio(results: Results, workload: str, store: str, reference: str) -> float | None:
    """How many times faster `store` ran `workload` than `reference` (>1: faster); for
    speed-up rows ("x"), the ratio of the speed-ups."""
    mine = results.get((workload, store))
    base = results.get((workload, reference))
    if mine is None or base is None or not mine.samples or not base.samples:
        return None
    if mine.unit == "x":
        return mine.median / base.median
    return base.median / mine.median


def _cell(results: Results, workload: str, store: str) -> str:
    r = results.get((workload, store))
    if r is None:
        return "-"
    med = r.median
    if r.unit == "s" and r.nbytes:
        cell = f"{r.nbytes / med / 1e6:,.0f} MB/s"
    elif r.unit == "s":
        cell = f"{med * 1e3:,.1f} ms"
    elif r.unit == "x":
        cell = f"{med:.2f}x"
    else:
        cell = f"{med:,.1f} us"
    ratio = speed_ratio(results, workload, store, BASELINE)
    if ratio is not None and store != BASELINE:
        cell += f" ({ratio:.2f})"
    return cell


def tables(ctx: Context) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, columns, rows) of the tables of a run: every workload against the stores, then
    the ingests of the variants (kinds that only ingest) beside zarrdb and LocalStore."""
    results = ctx.results
    main = [k.name for k in ctx.kinds if k.ingest_only is None]
    variants = [k.name for k in ctx.kinds if k.ingest_only is not None]
    out = []
    names = [w for w in results.workloads() if any((w, s) in results for s in main)]
    if names:
        title = (
            f"median of {ctx.config.repeat} run(s); (n) = speed relative to LocalStore, >1 faster"
        )
        out.append((title, main, [[w] + [_cell(results, w, s) for s in main] for w in names]))
    names = [w for w in results.workloads() if any((w, s) in results for s in variants)]
    if names:
        columns = [s for s in ("zarrdb", BASELINE) if s in main] + variants
        title = "ingest variants: " + "; ".join(
            f"{k.name} = {k.summary}" for k in ctx.kinds if k.ingest_only is not None
        )
        out.append((title, columns, [[w] + [_cell(results, w, s) for s in columns] for w in names]))
    rows = target_rows(ctx)
    if rows:
        out.append(
            ("targets: each ratio against the reference the target names", TARGET_COLUMNS[1:], rows)
        )
    return out


def legend(cfg: Config) -> str:
    """What the data sets of the row names are."""
    parts = [
        f"small = {cfg.size}x{cfg.size} float32 in {cfg.small}x{cfg.small} chunks "
        f"({size_label(cfg.chunk_bytes('small'))})",
        f"large = the same in {cfg.large}x{cfg.large} chunks "
        f"({size_label(cfg.chunk_bytes('large'))})",
    ]
    if cfg.cube:
        parts.append(
            f"cube = {cfg.cube}^3 uint16 in {cfg.cube_chunk}^3 chunks "
            f"({size_label(cfg.chunk_bytes('cube'))})"
        )
    return "; ".join(parts)


# --- targets -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """`store` must reach `need` times the speed of `reference` on `workload` (or, with
    `by_time`, take at most `need` times its time)."""

    workload: str
    store: str
    reference: str
    need: float
    by_time: bool = False

    def ratio(self, results: Results) -> float | None:
        speed = speed_ratio(results, self.workload, self.store, self.reference)
        if speed is None or not self.by_time:
            return speed
        return 1 / speed

    def met(self, results: Results) -> bool | None:
        r = self.ratio(results)
        if r is None:
            return None
        return r <= self.need if self.by_time else r >= self.need

    def wanted(self) -> str:
        return f"<= {self.need:.2f}x time" if self.by_time else f">= {self.need:.2f}x speed"


def targets(results: Results) -> list[Target]:
    """The project's targets, for the rows this run measured."""
    out = [
        Target("ingest small-raw", "zarrdb", "memory", 0.85),
        Target("ingest small-raw", "zarrdb-txn", "memory", 0.9),
        Target("ingest large-raw", "zarrdb", "local-fsync", 0.8),
        Target("ingest cube-raw", "zarrdb", "local-fsync", 0.8),
        Target("ingest large-raw", "zarrdb-off", "local", 0.8),
        Target("ingest cube-raw", "zarrdb-off", "local", 0.8),
        Target("gathered set 1 KiB", "zarrdb", "memory", 0.8),
    ]
    out += [
        Target(w, "zarrdb", "local", 0.7, by_time=True)
        for w in results.workloads()
        if w.startswith("window shard-")
    ]
    return [t for t in out if t.ratio(results) is not None]


def target_rows(ctx: Context) -> list[list[str]]:
    rows = []
    for t in targets(ctx.results):
        ratio = t.ratio(ctx.results)
        rows.append(
            [
                t.workload,
                f"{t.store} / {t.reference}",
                f"{ratio:.2f}x",
                t.wanted(),
                "yes" if t.met(ctx.results) else "no",
            ]
        )
    return rows


TARGET_COLUMNS = ["workload", "store / reference", "ratio", "target", "met"]


# --- output --------------------------------------------------------------------------------------


def print_tables(ctx: Context) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: no terminal to fit
    for i, (title, columns, rows) in enumerate(tables(ctx)):
        table = Table(title=title, caption=legend(ctx.config) if i == 0 else None)
        table.add_column("workload")
        for name in columns:
            table.add_column(name, justify="right")
        for row in rows:
            table.add_row(*row)
        console.print(table)


def markdown_tables(ctx: Context) -> str:
    """The tables as Markdown (for a README or an issue), each under its title."""
    lines: list[str] = []
    for title, columns, rows in tables(ctx):
        lines += [f"{title}:", "", "| workload | " + " | ".join(columns) + " |"]
        lines.append("| --- | " + " | ".join("---:" for _ in columns) + " |")
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def markdown_report(
    ctx: Context, conditions: dict[str, Any] | None = None, full: bool = False
) -> str:
    """What `--markdown` writes: where and how the run measured (versions, machine, length,
    the load of other processes), what the data sets are, then the tables."""
    env = environment()
    conditions = conditions or {}
    cfg = ctx.config
    run = f"{'full' if full else 'quick'} run, {cfg.repeat} repetition(s)"
    if conditions.get("seconds") is not None:
        run += f", {conditions['seconds']:.0f} s"
    share = conditions.get("others_cpu_share")
    if share is not None:
        run += f"; other processes used {share:.0%} of the machine's CPU meanwhile"
    python = env["python"].split()[0]
    lines = [
        f"zarrdb {env['zarrdb']} (SQLite {env['sqlite_version']}), zarr {env['zarr']}, "
        f"numpy {env['numpy']}, numcodecs {env['numcodecs']}, Python {python}; "
        f"{env['platform']}, {env['cpu']}, {env['cpus']} logical CPUs; {run}.",
        "",
        f"Data: {legend(cfg)}.",
        "",
        markdown_tables(ctx),
    ]
    return "\n".join(lines)


def to_json(ctx: Context, conditions: dict[str, Any] | None = None) -> dict[str, Any]:
    results = ctx.results
    return {
        "config": dict(vars(ctx.config)),
        "environment": environment(),
        "conditions": conditions or {},
        "stores": {k.name: k.summary for k in ctx.kinds},
        "results": [
            {
                "workload": r.workload,
                "store": r.store,
                "unit": r.unit,
                "nbytes": r.nbytes,
                "samples": r.samples,
                "median": r.median,
                "ratio_to_local": speed_ratio(results, r.workload, r.store, BASELINE),
            }
            for r in results.values()
        ],
        "targets": [
            {
                "workload": t.workload,
                "store": t.store,
                "reference": t.reference,
                "ratio": t.ratio(results),
                "target": t.wanted(),
                "met": t.met(results),
            }
            for t in targets(results)
        ],
    }


def plot(ctx: Context, path: Path) -> None:
    """Two panels: every store's speed relative to LocalStore per workload, and the targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = ctx.results
    names = results.workloads()
    stores = [k.name for k in ctx.kinds if k.name != BASELINE]
    goals = targets(results)
    fig, (ax, gx) = plt.subplots(
        2, 1, figsize=(11, 0.28 * len(names) * max(2, len(stores)) / 2 + 0.4 * len(goals) + 3),
        height_ratios=[max(1, len(names)), max(1, len(goals))], layout="constrained",
    )  # fmt: skip
    height = 0.8 / max(1, len(stores))
    for i, store in enumerate(stores):
        ratios = [speed_ratio(results, w, store, BASELINE) or 0 for w in names]
        ax.barh([y + i * height for y in range(len(names))], ratios, height, label=store)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([y + 0.4 - height / 2 for y in range(len(names))], names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("speed relative to LocalStore (log scale, >1 = faster)")
    # Above the bars, in one or two rows: inside the axes it would cover the first workloads.
    ax.legend(
        fontsize="small", ncols=min(4, max(1, len(stores))), loc="lower center",
        bbox_to_anchor=(0.5, 1.0), frameon=False,
    )  # fmt: skip
    labels = [f"{t.workload}: {t.store} / {t.reference}" for t in goals]
    values = [t.ratio(results) or 0 for t in goals]
    colours = ["tab:green" if t.met(results) else "tab:red" for t in goals]
    gx.barh(range(len(goals)), values, color=colours)
    gx.scatter([t.need for t in goals], range(len(goals)), marker="|", s=300, color="black")
    gx.set_yticks(range(len(goals)), labels)
    gx.invert_yaxis()
    gx.set_xlabel("targets: speed ratio (time ratio for windows); black mark = target")
    fig.suptitle(legend(ctx.config), fontsize="small")
    fig.savefig(path, dpi=110)
    plt.close(fig)
