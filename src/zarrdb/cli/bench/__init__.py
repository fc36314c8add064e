"""`zarrdb bench`: zarrdb against LocalStore (the FileSystemStore) and the other zarr stores.

Every workload runs against every store in one process, the stores in turn within each
repetition (reversed on odd ones) so that a slow phase of a noisy machine hits all of them
alike, each measured repetition after a `sync`. The main table shows zarrdb's two
durabilities beside LocalStore with and without an fsync (medians, the speed relative to the
counterpart of the same durability, the spread of the samples where it is too wide to quote
the median alone); a second table the other stores against LocalStore; with `--targets`, a
third each of the project's targets against the reference it names.

Without options a quick default runs the comparisons a user makes (about a minute on two
cores); `--full` is the complete benchmark the documentation quotes. Every argument is
checked before anything runs.

The harness (`harness`, `workloads`, `cold`, `report`) is shared with `benchmarks/test_store.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from zarrdb.cli.bench import report
from zarrdb.cli.bench.harness import (
    StoreKind,
    all_store_kinds,
    machine_counters,
    others_cpu_share,
    round_robin,
)
from zarrdb.cli.bench.catalog import PAIRS, Workload, all_workloads
from zarrdb.cli.bench.context import Config, Context
from zarrdb.cli.common import new_file
from zarrdb.cli.framework import EXIT_OK, BadInput

# The quick default: the comparisons a user makes (Workload.demo), on data sets small enough
# for about a minute; its sizes serve --targets too.
QUICK = Config(
    size=1024, shard=512, cube=256, cube_chunk=128, cube_inner=32, values_mib=(1, 4, 32),
    repeat=3, windows=100, list_children=200, list_keys_per_child=25, hierarchy_arrays=100,
    threads=(2,), shard_sizes=(512, 1024), single_calls=300,
)  # fmt: skip
FULL = Config()  # 4096^2 float32, a 512^3 uint16 cube in 32 MiB chunks, 3 repetitions


def _positive(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def _pair(text: str) -> tuple[int, int]:
    parts = text.split(",")
    try:
        a, b = (int(p) for p in parts)
    except ValueError:
        a = b = 0
    if a < 1 or b < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not two whole numbers >= 1, as in 64,512")
    return a, b


def _cube(text: str) -> tuple[int, int]:
    if text.strip() == "0":
        return 0, 0
    try:
        return _pair(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not EDGE,CHUNK (two whole numbers >= 1, as in 512,256) or 0"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--full",
        action="store_true",
        help="every workload and store: 4096x4096 float32, a 512^3 uint16 cube in 256^3 "
        "chunks and shards, values of 1 to 128 MiB, cold reads, 3 repetitions (about half an "
        "hour on two shared cores); the options below change it further",
    )
    parser.add_argument(
        "--size", type=_positive("size"), metavar="N",
        help=f"edge of the float32 field, a multiple of the large chunk edge "
        f"(default {QUICK.size}; --full {FULL.size})",
    )  # fmt: skip
    parser.add_argument(
        "--chunks", type=_pair, metavar="SMALL,LARGE",
        help=f"small and large chunk edges, SMALL < LARGE (default {QUICK.small},{QUICK.large})",
    )  # fmt: skip
    parser.add_argument(
        "--cube", type=_cube, metavar="EDGE,CHUNK",
        help=f"the uint16 volume and its chunk edge, CHUNK dividing EDGE; 0 leaves it out "
        f"(default {QUICK.cube},{QUICK.cube_chunk}; --full {FULL.cube},{FULL.cube_chunk})",
    )  # fmt: skip
    parser.add_argument(
        "--stores", metavar="NAME,...",
        help="comma-separated, of: " + ", ".join(k.name for k in all_store_kinds())
        + " (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--repeat", type=_positive("repeat"), metavar="N",
        help=f"repetitions of each workload (default {QUICK.repeat}; --full {FULL.repeat})",
    )  # fmt: skip
    parser.add_argument(
        "--json",
        type=new_file(),
        metavar="FILE",
        help="write every sample and the environment here",
    )
    parser.add_argument(
        "--markdown", type=new_file(), metavar="FILE",
        help="write the tables as Markdown here, after a line on the versions, the machine "
        "and the run, and one on the data sets (the documentation's benchmark page includes "
        "such a file)",
    )  # fmt: skip
    parser.add_argument(
        "--plot", type=new_file(".png", ".svg", ".pdf"), metavar="FILE.png",
        help="draw the ratios and the targets (PNG, SVG or PDF; needs matplotlib: "
        "pip install 'zarrdb[plot]')",
    )  # fmt: skip
    parser.add_argument(
        "--targets", action="store_true",
        help="the project's targets: only the workloads and stores they compare (small-chunk "
        "ingest, values of 1 to 128 MiB, sharded ingest and reads, gathered sets), and a "
        "table and chart panel of each target's ratio",
    )  # fmt: skip
    parser.add_argument(
        "--cold", action="store_true",
        help="drop the OS page cache before each full read (needs root; said so otherwise); "
        "the cold reads of --full always try",
    )  # fmt: skip
    parser.add_argument("--dir", type=Path, help="scratch folder (default: a temporary one)")
    parser.add_argument("--quiet", action="store_true", help="no progress")


def config_from_args(args: argparse.Namespace) -> Config:
    """The configuration the arguments ask for; BadInput naming the argument if they do not
    fit together."""
    base = FULL if args.full else QUICK
    cfg = dataclasses.replace(base)
    if args.chunks:
        cfg.small, cfg.large = args.chunks
        if cfg.small >= cfg.large:
            raise BadInput(f"argument --chunks: SMALL must be less than LARGE, not {args.chunks}")
    if args.size:
        cfg.size = args.size
    if cfg.size % cfg.large or cfg.size <= 64:
        raise BadInput(
            f"argument --size: {cfg.size} is not a multiple of the large chunk edge {cfg.large} "
            f"(accepted: {cfg.large}, {2 * cfg.large}, {4 * cfg.large}, ...; at least 128)"
        )
    if args.cube:
        cfg.cube, cfg.cube_chunk = args.cube
        if cfg.cube and cfg.cube % cfg.cube_chunk:
            raise BadInput(
                f"argument --cube: the chunk edge {cfg.cube_chunk} does not divide the edge "
                f"{cfg.cube} (accepted: EDGE,CHUNK with EDGE a multiple of CHUNK, e.g. 512,256)"
            )
    if args.repeat:
        cfg.repeat = args.repeat
    cfg.shard_sizes = tuple(s for s in base.shard_sizes if s <= cfg.size)
    if cfg.size % cfg.shard:
        cfg.shard = cfg.large
    if cfg.cube and cfg.cube_chunk % cfg.cube_inner:
        cfg.cube_inner = cfg.cube_chunk
    cfg.cold = bool(getattr(args, "cold", False))
    return cfg


# What --targets runs: the workloads the targets name (report.targets) and their stores.
TARGET_WORKLOADS = (
    "ingest/read small-raw", "ingest/read shard-raw", "ingest/read cube-", "cold reads cube",
    "ingest value-", "windows shard-", "gathered set",
)  # fmt: skip
TARGET_STORES = ("zarrdb", "zarrdb-txn", "zarrdb-off", "local", "local-fsync", "memory")


def _kinds(args: argparse.Namespace) -> list[StoreKind]:
    kinds = all_store_kinds()
    if args.stores is None:
        if args.targets:
            return [k for k in kinds if k.name in TARGET_STORES]
        if not args.full:
            return [k for k in kinds if k.name in PAIRS]
        return kinds
    known = {k.name: k for k in kinds}
    names = [n.strip() for n in args.stores.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise BadInput(
            f"argument --stores: unknown or unavailable store(s) {', '.join(unknown) or '(none)'}"
            f" (accepted: {', '.join(known)})"
        )
    return [known[n] for n in dict.fromkeys(names)]


def _check_plotting(args: argparse.Namespace) -> None:
    if args.plot is None:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BadInput(
            "argument --plot: needs matplotlib, which is not installed (pip install 'zarrdb[plot]')"
        ) from None


def _scratch(args: argparse.Namespace, stack: contextlib.ExitStack) -> Path:
    if args.dir is None:
        return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="zarrdb-bench-")))
    if args.dir.exists() and not args.dir.is_dir():
        raise BadInput(f"argument --dir: {args.dir} is not a directory (accepted: a folder)")
    if not args.dir.parent.is_dir():
        raise BadInput(
            f"argument --dir: the folder {args.dir.parent} does not exist; create it first"
        )
    folder: Path = args.dir
    folder.mkdir(exist_ok=True)
    return folder


def run(args: argparse.Namespace) -> int:
    import zarr

    import zarrdb

    cfg = config_from_args(args)
    kinds = _kinds(args)
    _check_plotting(args)
    with contextlib.ExitStack() as stack:
        root = _scratch(args, stack)
        print(
            f"zarrdb {zarrdb.__version__} (SQLite {zarrdb.sqlite_version}), zarr "
            f"{zarr.__version__}, Python {platform.python_version()}; "
            f"{'full' if args.full else 'quick'} run, {cfg.repeat} repetition(s); stores: "
            f"{', '.join(k.name for k in kinds)}",
            flush=True,
        )
        started = time.perf_counter()
        since = machine_counters()
        only = TARGET_WORKLOADS if args.targets else None
        demo = not (args.full or args.targets)
        ctx = run_workloads(cfg, kinds, root, progress=not args.quiet, only=only, demo=demo)
        conditions = {
            "seconds": round(time.perf_counter() - started, 1),
            "others_cpu_share": others_cpu_share(since),
        }
    report.print_tables(ctx, args.targets)
    print(f"({conditions['seconds']:.0f} s)")
    if demo:
        print("`zarrdb bench --full` runs every workload and store; `--targets`, the targets")
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(ctx, conditions), indent=1))
        print(f"samples and environment written to {args.json}")
    if args.markdown:
        text = report.markdown_report(ctx, conditions, args.full, args.targets)
        Path(args.markdown).write_text(text)
        print(f"Markdown tables written to {args.markdown}")
    if args.plot:
        report.plot(ctx, Path(args.plot), args.targets)
        print(f"chart written to {args.plot}")
    return EXIT_OK


def run_workloads(
    cfg: Config,
    kinds: list[StoreKind],
    root: Path,
    progress: bool = True,
    only: tuple[str, ...] | None = None,
    demo: bool = False,
) -> Context:
    """Every workload (or those whose names start with one of `only`; with `demo`, those of
    the default run), each repetition running the stores that take part in turn."""
    ctx = Context(cfg, root, kinds)
    steps: list[tuple[Workload, int, StoreKind]] = []
    for workload in all_workloads(cfg):
        if only is not None and not workload.name.startswith(only):
            continue
        if demo and not workload.demo:
            continue
        taking_part = [k for k in kinds if workload.takes(k)]
        steps += [(workload, rep, kind) for rep, kind in round_robin(taking_part, cfg.repeat)]
    with _progress(progress, len(steps)) as advance:
        for workload, rep, kind in steps:
            advance(f"{workload.name} [{kind.name}] {rep + 1}/{cfg.repeat}")
            workload.run(ctx, kind)
    return ctx


@contextlib.contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[str], None]]:
    """A progress bar on a terminal, one line per step elsewhere (a log, `make demo | tee`)."""
    if not enabled:
        yield lambda _: None
        return
    if not sys.stderr.isatty():
        count = iter(range(1, total + 1))
        yield lambda text: print(f"[{next(count)}/{total}] {text}", file=sys.stderr, flush=True)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("benchmark", total=total)
        started = [False]

        def advance(description: str) -> None:
            if started[0]:
                bar.advance(task)
            started[0] = True
            bar.update(task, description=description)

        yield advance
        bar.advance(task)
