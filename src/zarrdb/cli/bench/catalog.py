"""The catalogue of the benchmark's workloads: each `Workload` names a measurement from
`workloads` or `cold`, which store kinds take part, and whether the default run has it; the
order of `all_workloads` is the order they run in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from zarrdb.cli.bench.cold import cold_reads
from zarrdb.cli.bench.context import WINDOW, Config, Context, size_label
from zarrdb.cli.bench.harness import StoreKind
from zarrdb.cli.bench.workloads import (
    gathered_set,
    ingest_and_read,
    listing,
    one_get,
    open_hierarchy,
    random_windows,
    reader_threads,
    single_calls,
)

# The stores of the comparisons a user makes: zarrdb's two durabilities and LocalStore with
# and without an fsync.
PAIRS = ("zarrdb", "zarrdb-off", "local", "local-fsync")


@dataclass(frozen=True)
class Workload:
    name: str
    family: str  # "ingest" or "other": which kinds take part (StoreKind.runs)
    data: str | None
    run: Callable[[Context, StoreKind], None]
    stores: tuple[str, ...] | None = None  # only these kinds (None: all that take part)
    demo: bool = False  # part of the default run (the comparisons a user makes)

    def takes(self, kind: StoreKind) -> bool:
        """Whether `kind` takes part in this workload."""
        if self.stores is not None and kind.name not in self.stores:
            return False
        return kind.runs(self.family, self.data)


def all_workloads(cfg: Config) -> list[Workload]:
    """Every workload of `--full`, in the order they run (those marked `demo` are the
    default run's)."""
    layouts = cfg.layouts()
    out: list[Workload] = []

    def ingest(data: str, codec: str, demo: bool = False, reads: bool = True,
               stores: tuple[str, ...] | None = None) -> None:  # fmt: skip
        run = functools.partial(_ingest_and_read, data=data, compressed=codec, reads=reads)
        what = "ingest/read" if reads else "ingest"
        out.append(Workload(f"{what} {data}-{codec}", "ingest", data, run, stores, demo))

    ingest("small", "raw", demo=True)
    ingest("small", "zstd")
    ingest("large", "raw", demo=True)
    ingest("large", "zstd")
    ingest("shard", "raw", demo=True)
    if "cube" in layouts:
        ingest("cube", "raw", demo=True)
        # 32,768 inner chunks a run, zarr's encoding dominates: the four stores compared only
        ingest("cube-shard", "raw", stores=PAIRS)
        ingest("cube-shard", "blosc", stores=PAIRS)
        for data in ("cube", "cube-shard"):
            for codec in ("raw", "blosc") if data == "cube-shard" else ("raw",):
                run = functools.partial(_cold_reads, data=data, codec=codec)
                name = f"cold reads {data}-{codec}"
                out.append(Workload(name, "other", data, run, ("zarrdb", "local")))
        for data in (d for d in layouts if d.startswith("value-")):
            for codec in ("raw", "zstd"):
                ingest(data, codec, reads=False, stores=PAIRS)
    out.append(
        Workload(
            "windows",
            "other",
            None,
            lambda c, k: random_windows(c, k, "small", c.config.small, None),
            demo=True,
        )
    )
    for shard in cfg.shard_sizes:
        label = f"shard-{size_label(shard * shard * 4)}"
        run = functools.partial(_windows, label=label, shard=shard)
        out.append(Workload(f"windows {label}", "other", None, run))
    for n in cfg.threads:
        out.append(Workload(f"{n} threads", "other", None, functools.partial(_threads, n=n)))
    out.append(Workload("get", "other", None, one_get, demo=True))
    out.append(Workload("single calls", "other", None, single_calls))
    out.append(Workload("gathered set", "other", None, gathered_set))
    out.append(Workload("listing", "other", None, listing, demo=True))
    out.append(Workload("hierarchy", "other", None, open_hierarchy))
    return out


def _ingest_and_read(
    ctx: Context, kind: StoreKind, *, data: str, compressed: str, reads: bool
) -> None:
    ingest_and_read(ctx, kind, data, compressed, reads)


def _cold_reads(ctx: Context, kind: StoreKind, *, data: str, codec: str) -> None:
    if (kind.name, f"{data}-{codec}") in ctx.prepared:
        cold_reads(ctx, kind, data, codec)


def _windows(ctx: Context, kind: StoreKind, *, label: str, shard: int) -> None:
    random_windows(ctx, kind, label, WINDOW, shard)


def _threads(ctx: Context, kind: StoreKind, *, n: int) -> None:
    reader_threads(ctx, kind, n)
