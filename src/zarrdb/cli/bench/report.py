"""What a benchmark run shows: the table of every workload against every store (medians, and
each store's speed relative to LocalStore), the table of the project's targets (each ratio
against the reference that target names), as text, Markdown, JSON and a chart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarrdb.cli.bench.harness import MAX_SPREAD, Results, environment
from zarrdb.cli.bench.context import WINDOW, Config, Context, size_label

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


PAIRS = ("zarrdb", "local-fsync", "zarrdb-off", "local")  # the main table's columns

# What each store of the main table keeps (docs/guide/durability.md), printed under it.
DURABILITY = (
    "After a crash of the process all four keep every write that returned. After a power "
    "loss: zarrdb (default) keeps an intact file, less perhaps its last commits in WAL mode; "
    "LocalStore + fsync keeps everything once its fsync has returned; zarrdb "
    'durability="off" is likely to leave a corrupt file; LocalStore can lose or tear any '
    "file written since the system last wrote its cache back."
)


def pair_reference(results: Results, workload: str, store: str) -> str:
    """The store `store` is compared with on `workload`: its durable counterpart in an ingest
    (LocalStore + fsync for zarrdb's default, LocalStore for durability="off"), LocalStore
    otherwise."""
    if store == "zarrdb" and (workload, "local-fsync") in results:
        return "local-fsync"
    return BASELINE


def flagged(results: Results, workload: str, *stores: str) -> bool:
    """Whether any of these stores' figures for `workload` spread more than MAX_SPREAD."""
    return any(r.flagged for s in stores if (r := results.get((workload, s))) is not None)


def _figure(results: Results, workload: str, store: str) -> str:
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
    return cell


def _cell(results: Results, workload: str, store: str, reference: str = BASELINE) -> str:
    """The median, its speed relative to `reference` in brackets, and the spread of its
    samples where that is over MAX_SPREAD."""
    cell = _figure(results, workload, store)
    if cell == "-":
        return cell
    if store != reference:
        ratio = speed_ratio(results, workload, store, reference)
        if ratio is not None:
            cell += f" ({ratio:.2f})"
    r = results[(workload, store)]
    if r.flagged and r.spread is not None:
        cell += f" [spread {r.spread:.0%}]"
    return cell


def _main_cell(results: Results, workload: str, store: str) -> str:
    """A cell of the main table: zarrdb's figures with their ratio to their counterpart, the
    LocalStores' without one."""
    if store in ("zarrdb", "zarrdb-off"):
        return _cell(results, workload, store, pair_reference(results, workload, store))
    return _cell(results, workload, store, store)


def _titles(ctx: Context) -> dict[str, str]:
    return {k.name: k.title or k.name for k in ctx.kinds}


def main_columns(ctx: Context) -> list[str]:
    present = {k.name for k in ctx.kinds}
    return [s for s in PAIRS if s in present]


def tables(
    ctx: Context, with_targets: bool = False
) -> list[tuple[str, list[str], list[list[str]], str]]:
    """(title, columns, rows, caption) of the tables of a run: zarrdb's two durabilities
    beside LocalStore with and without an fsync; the other stores against LocalStore; with
    `with_targets`, the project's targets."""
    results = ctx.results
    titles = _titles(ctx)
    out = []
    pairs = main_columns(ctx)
    names = [w for w in results.workloads() if any((w, s) in results for s in pairs)]
    if names:
        rows = []
        for w in names:
            rows.append([w] + [_main_cell(results, w, s) for s in pairs])
        title = (
            f"median of {ctx.config.repeat} run(s); (n) = speed relative to the store "
            "zarrdb is paired with, >1 faster: for writes, zarrdb (default) against LocalStore "
            '+ fsync and durability="off" against LocalStore; otherwise against LocalStore'
        )
        out.append((title, [titles[s] for s in pairs], rows, caption(ctx)))
    others = [k.name for k in ctx.kinds if k.name not in PAIRS]
    names = [w for w in results.workloads() if any((w, s) in results for s in others)]
    if names:
        columns = [s for s in ("zarrdb", BASELINE) if s in pairs] + others
        title = "other stores, speed relative to LocalStore: " + "; ".join(
            f"{k.name} = {k.summary}" for k in ctx.kinds if k.name in others
        )
        rows = [[w] + [_cell(results, w, s) for s in columns] for w in names]
        out.append((title, columns, rows, ""))
    rows = target_rows(ctx) if with_targets else []
    if rows:
        out.append(
            (
                "targets: each ratio against the reference the target names",
                TARGET_COLUMNS[1:],
                rows,
                "",
            )
        )
    return out


def caption(ctx: Context) -> str:
    """The lines under the main table: the data sets, what each store keeps after a crash and
    a power loss, how widely the samples spread, and where the reads read from."""
    lines = [legend(ctx.config, ctx.results.workloads()) + ".", DURABILITY]
    if ctx.config.repeat < 2:
        lines.append("One repetition: no spread is known, the figures vary from run to run.")
    else:
        lines.append(
            f"[spread n%] = the samples of a figure span more than {MAX_SPREAD:.0%} of their "
            "median (largest - smallest): not a figure to quote alone."
        )
    status = ctx.page_cache.status()
    if status is not None:
        lines.append(status + ".")
    if not ctx.config.cold:
        lines.append(
            "Reads (read, window, get) are from a warm OS page cache; --cold drops it before "
            "each full read (as root)."
        )
    return "\n".join(lines)


def legend(cfg: Config, names: list[str] | None = None) -> str:
    """What the data sets of the row names are (with `names`, those the rows use)."""
    field = f"{cfg.size}x{cfg.size} float32"
    cube = f"{cfg.cube}^3 uint16"
    sets = {
        "small": f"{field} in {cfg.small}x{cfg.small} chunks",
        "large": f"{field} in {cfg.large}x{cfg.large} chunks",
        "shard": f"{field} in {cfg.shard}x{cfg.shard} shards of {WINDOW}x{WINDOW} chunks",
        "cube": f"{cube} in {cfg.cube_chunk}^3 chunks",
        "cube-shard": f"{cube} in {cfg.cube_chunk}^3 shards of {cfg.cube_inner}^3 chunks",
    }
    parts = []
    for data, text in sets.items():
        if data.startswith("cube") and not cfg.cube:
            continue
        if names is None or any(f" {data}-" in f" {n}" for n in names):
            parts.append(f"{data} = {text} ({size_label(cfg.chunk_bytes(data))} values)")
    if cfg.cube and (names is None or any("value-" in n for n in names)):
        parts.append(f"value-N = {cube} in values of N (stacks of whole planes)")
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
    """The project's targets, for the rows this run measured: small-chunk ingest against
    MemoryStore; values of 1 to 128 MiB (raw and zstd) and sharded ingests at each durability
    against the LocalStore of the same durability; sharded reads (cold, and windows) against
    LocalStore's time; gathered 1 KiB sets against MemoryStore."""
    out = [
        Target("ingest small-raw", "zarrdb", "memory", 0.85),
        Target("ingest small-raw", "zarrdb-txn", "memory", 0.9),
    ]
    names = results.workloads()
    for w in names:
        if w.startswith("ingest value-"):
            out.append(Target(w, "zarrdb", "local-fsync", 0.9))
            out.append(Target(w, "zarrdb-off", "local", 0.9))
        elif w in ("ingest shard-raw", "ingest cube-shard-raw"):
            out.append(Target(w, "zarrdb", "local-fsync", 0.9))
        elif w.startswith("cold read") and "cube-shard-" in w:
            out.append(Target(w, "zarrdb", "local", 1.0, by_time=True))
        elif w == "round trip cube-raw":
            out.append(Target(w, "zarrdb", "local", 1.5, by_time=True))
        elif w.startswith("window shard-"):
            out.append(Target(w, "zarrdb", "local", 1.0, by_time=True))
    out.append(Target("gathered set 1 KiB", "zarrdb", "memory", 0.6))
    return [t for t in out if t.ratio(results) is not None]


def target_rows(ctx: Context) -> list[list[str]]:
    rows = []
    for t in targets(ctx.results):
        ratio = t.ratio(ctx.results)
        note = " [spread > 20%]" if flagged(ctx.results, t.workload, t.store, t.reference) else ""
        rows.append(
            [
                t.workload,
                f"{t.store} / {t.reference}",
                f"{ratio:.2f}x{note}",
                t.wanted(),
                "yes" if t.met(ctx.results) else "no",
            ]
        )
    return rows


TARGET_COLUMNS = ["workload", "store / reference", "ratio", "target", "met"]


# --- output --------------------------------------------------------------------------------------


def print_tables(ctx: Context, with_targets: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: no terminal to fit
    for title, columns, rows, below in tables(ctx, with_targets):
        table = Table(title=escape(title), caption=escape(below) or None, caption_justify="left")
        table.add_column("workload")
        for name in columns:
            table.add_column(escape(name), justify="right")
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)


def markdown_tables(ctx: Context, with_targets: bool = False) -> str:
    """The tables as Markdown (for a README or an issue), each under its title and followed
    by its caption."""
    lines: list[str] = []
    for title, columns, rows, below in tables(ctx, with_targets):
        lines += [f"{title}:", "", "| workload | " + " | ".join(columns) + " |"]
        lines.append("| --- | " + " | ".join("---:" for _ in columns) + " |")
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
        if below:
            lines += [below.replace("\n", "\n\n"), ""]
    return "\n".join(lines)


def markdown_report(
    ctx: Context,
    conditions: dict[str, Any] | None = None,
    full: bool = False,
    with_targets: bool = False,
) -> str:
    """What `--markdown` writes: where and how the run measured (versions, machine, length,
    the load of other processes), then the tables with the data sets under the first."""
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
        markdown_tables(ctx, with_targets),
    ]
    return "\n".join(lines)


def to_json(ctx: Context, conditions: dict[str, Any] | None = None) -> dict[str, Any]:
    results = ctx.results
    return {
        "config": dict(vars(ctx.config)),
        "environment": environment(),
        "conditions": conditions or {},
        "page_cache": ctx.page_cache.status(),
        "stores": {k.name: k.summary for k in ctx.kinds},
        "results": [
            {
                "workload": r.workload,
                "store": r.store,
                "unit": r.unit,
                "nbytes": r.nbytes,
                "samples": r.samples,
                "median": r.median,
                "spread": r.spread,
                "flagged": r.flagged,
                "ratio_to_local": speed_ratio(results, r.workload, r.store, BASELINE),
                "paired_with": pair_reference(results, r.workload, r.store),
                "ratio_to_pair": speed_ratio(
                    results, r.workload, r.store, pair_reference(results, r.workload, r.store)
                ),
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


TICKS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
MAX_HEIGHT_PX = 1200  # the chart fits a screen at its default size
DPI = 110


def plot(ctx: Context, path: Path, with_targets: bool = False) -> None:
    """zarrdb against LocalStore per workload, each durability against its counterpart
    (zarrdb's default against LocalStore + fsync for writes, durability="off" against
    LocalStore, reads against LocalStore); bars whose figures spread too widely are hatched.
    With `with_targets`, a second panel to the right: each target's ratio and its mark. At
    most MAX_HEIGHT_PX tall: the rows get closer as there are more of them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = ctx.results
    titles = _titles(ctx)
    pairs = main_columns(ctx)
    names = [w for w in results.workloads() if any((w, s) in results for s in pairs)]
    series = [s for s in ("zarrdb", "zarrdb-off") if s in pairs and BASELINE in pairs]
    goals = targets(results) if with_targets else []
    rows = max(len(names), len(goals), 1)
    height = min(MAX_HEIGHT_PX / DPI, 2.0 + 0.3 * rows)
    font = max(5.0, min(9.0, (height - 2.0) * 72 / rows * 0.55))
    if goals:
        fig, (ax, gx) = plt.subplots(
            1, 2, figsize=(17, height), width_ratios=[3, 2], layout="constrained"
        )
    else:
        fig, ax = plt.subplots(figsize=(11, height), layout="constrained")
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    colours = {"zarrdb": "tab:blue", "zarrdb-off": "tab:orange"}
    # Per row, the bars of the series that measured it, centred on the row.
    measured = {
        w: [s for s in series if speed_ratio(results, w, s, pair_reference(results, w, s))]
        for w in names
    }
    bar = 0.8 / max(1, len(series))
    for store in series:
        ys, ratios, hatches = [], [], []
        for y, w in enumerate(names):
            if store not in measured[w]:
                continue
            reference = pair_reference(results, w, store)
            ratios.append(speed_ratio(results, w, store, reference) or 0.0)
            ys.append(y + (measured[w].index(store) - (len(measured[w]) - 1) / 2) * bar)
            hatches.append("///" if flagged(results, w, store, reference) else "")
        bars = ax.barh(ys, ratios, bar, color=colours[store])
        for patch, hatch in zip(bars, hatches, strict=True):
            patch.set_hatch(hatch)
        ax.bar_label(bars, labels=[f"{r:.2f}" for r in ratios], fontsize=font * 0.85, padding=2)
    handles = [
        Patch(
            color=colours[store],
            label=titles[store]
            + (
                " / LocalStore + fsync (writes), / LocalStore (reads)"
                if store == "zarrdb" and "local-fsync" in pairs
                else " / LocalStore"
            ),
        )
        for store in series
    ]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="///",
                         label="samples spread > 20%: not to quote alone"))  # fmt: skip
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(range(len(names)), names, fontsize=font)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xscale("log")  # before the ticks: it sets its own
    ax.xaxis.set_major_locator(FixedLocator(TICKS))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", which="both", labelsize=font * 0.85)
    ax.set_xlabel(
        "speed relative to the LocalStore of the same durability (log scale, >1 = faster)",
        fontsize="small",
    )
    ax.legend(
        handles=handles, fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.0),
        ncols=2, frameon=False,
    )  # fmt: skip
    if goals:
        labels = [f"{t.workload}: {t.store} / {t.reference}" for t in goals]
        values = [t.ratio(results) or 0 for t in goals]
        met = ["tab:green" if t.met(results) else "tab:red" for t in goals]
        gx.barh(range(len(goals)), values, color=met)
        gx.scatter([t.need for t in goals], range(len(goals)), marker="|", s=200, color="black")
        gx.set_yticks(range(len(goals)), labels, fontsize=font)
        gx.set_ylim(len(goals) - 0.5, -0.5)
        gx.set_xlabel(
            "targets: speed ratio (time ratio where marked <=); black mark = target",
            fontsize="small",
        )
    fig.suptitle(legend(ctx.config, names), fontsize="small", wrap=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
