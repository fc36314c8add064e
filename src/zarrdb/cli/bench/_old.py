"""`zarrdb bench`: zarrdb against LocalStore (the FileSystemStore) and the other zarr stores.

Every workload runs against every store in one process, alternating the stores between
repetitions so that a slow phase of a noisy machine hits all of them alike; the table shows
medians and each store's speed relative to LocalStore (>1 = faster than LocalStore).

The data is generated on the fly: a smooth two-dimensional field with noise (float32), so
compressed workloads compress the way real gridded data does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import LocalStore, MemoryStore, ZipStore

import zarrdb
from zarrdb import SQLiteStore

# --- stores -------------------------------------------------------------------------------------


def _zarr_sqlite_class() -> type | None:
    try:
        from zarr_sqlite import SQLiteStore as ReferenceStore
    except Exception:  # not installed, or this Python/zarr cannot run it
        return None
    return ReferenceStore


@dataclass
class StoreKind:
    """How to make a store of one kind at a path, for writing and for reading."""

    name: str
    make: Callable[[Path, bool], Any]  # (path, read_only) -> store
    suffix: str

    def path(self, root: Path, label: str) -> Path:
        return root / f"{self.name}-{label}{self.suffix}"


def _memory_kind() -> StoreKind:
    stores: dict[Path, dict[str, Any]] = {}

    def make(path: Path, read_only: bool) -> Any:
        # A new dictionary for each writer (like a new file), the same one for its readers.
        if not read_only:
            stores[path] = {}
        backing = stores.setdefault(path, {})
        return MemoryStore(backing, read_only=read_only)

    return StoreKind("memory", make, "")


def store_kinds(names: list[str] | None = None) -> list[StoreKind]:
    kinds = [
        StoreKind("zarrdb", lambda p, ro: SQLiteStore(p, read_only=ro), ".zarrdb"),
        StoreKind("local", lambda p, ro: LocalStore(p, read_only=ro), ".zarr"),
        StoreKind("zip", lambda p, ro: ZipStore(p, mode="r" if ro else "w"), ".zip"),
        _memory_kind(),
    ]
    reference = _zarr_sqlite_class()
    if reference is not None:
        kinds.append(
            StoreKind("zarr-sqlite", lambda p, ro: reference(p, read_only=ro), ".ref.zarrdb")
        )
    if names:
        known = {k.name: k for k in kinds}
        missing = [n for n in names if n not in known]
        if missing:
            raise SystemExit(
                f"unknown or unavailable store(s): {', '.join(missing)}; "
                f"available here: {', '.join(known)}"
            )
        kinds = [known[n] for n in names]
    return kinds


def _close(store: Any) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        close()


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


# --- data ------------------------------------------------------------------------------------------


def synthetic_field(size: int, seed: int = 0) -> np.ndarray:
    """A smooth field (a few waves) plus noise, float32, size x size."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 8 * np.pi, size, dtype=np.float32)[:, None]
    x = np.linspace(0, 6 * np.pi, size, dtype=np.float32)[None, :]
    field_ = 280 + 15 * np.sin(x) * np.cos(y) + 5 * np.sin(0.3 * x + 0.7 * y)
    field_ = field_ + rng.normal(0, 0.25, (size, size)).astype(np.float32)
    return field_.astype(np.float32)


# --- results -----------------------------------------------------------------------------------


@dataclass
class Result:
    workload: str
    store: str
    unit: str  # what one sample measures: "s" (time for the whole workload) or "us/op"
    samples: list[float] = field(default_factory=list)
    nbytes: int = 0  # bytes moved per sample, for throughput

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


# --- workloads -------------------------------------------------------------------------------------


@dataclass
class Config:
    size: int = 4096
    small: int = 64
    large: int = 512
    repeat: int = 3
    windows: int = 200
    list_children: int = 200
    list_keys_per_child: int = 500
    hierarchy_arrays: int = 200
    threads: tuple[int, ...] = (2, 4)
    shard_sizes: tuple[int, ...] = (512, 1024, 2048)  # shard edge, 64x64 chunks inside


@dataclass
class Context:
    config: Config
    root: Path
    data: np.ndarray
    kinds: list[StoreKind]
    results: dict[tuple[str, str], Result] = field(default_factory=dict)
    prepared: set[tuple[str, str]] = field(default_factory=set)  # (store, data set) written

    def record(self, workload: str, store: str, unit: str, value: float, nbytes: int = 0) -> None:
        key = (workload, store)
        if key not in self.results:
            self.results[key] = Result(workload, store, unit, nbytes=nbytes)
        self.results[key].samples.append(value)


READS_PER_SAMPLE = 3


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _create(store: Any, shape: tuple[int, ...], chunks: int, compressed: bool, shards: int | None = None):
    kwargs: dict[str, Any] = {}
    if shards:
        kwargs["shards"] = (shards, shards)
    return zarr.create_array(
        store,
        shape=shape,
        chunks=(chunks, chunks),
        dtype="float32",
        compressors=zarr.codecs.ZstdCodec(level=1) if compressed else None,
        fill_value=0,
        **kwargs,
    )


def ingest_and_read(ctx: Context, kind: StoreKind, chunks: int, compressed: bool, label: str) -> None:
    """`arr[:] = data` into a new store and closing it, then `arr[:]` from the store opened
    read-only (timed after a first read, from a warm OS page cache: the median of three)."""
    path = kind.path(ctx.root, label)
    _remove(path)
    store = kind.make(path, False)
    arr = _create(store, ctx.data.shape, chunks, compressed)

    def ingest() -> None:
        arr[:] = ctx.data
        _close(store)  # a store may defer work to close(): it counts

    elapsed = _timed(ingest)
    ctx.prepared.add((kind.name, label))
    ctx.record(f"ingest {label}", kind.name, "s", elapsed, ctx.data.nbytes)
    # Reads are timed from a warm OS page cache: a first, untimed read (which also checks the
    # data) brings the file in, then a new read-only store reads it again. Otherwise the
    # figure depends on how much of the just-written data the OS still caches, which differs
    # between stores that fsync (their pages are clean and may be dropped at once) and stores
    # that do not (dirty pages stay until written back).
    store = kind.make(path, True)
    arr = zarr.open_array(store, mode="r")
    if not np.array_equal(arr[:], ctx.data):
        raise AssertionError(f"{kind.name}: {label} read back differs from what was written")
    _close(store)
    # One sample is the median of three reads, each by a newly opened store: a full read takes
    # well under a second, short enough for one slow spell of a shared machine to double it.
    times = []
    for _ in range(READS_PER_SAMPLE):
        store = kind.make(path, True)
        arr = zarr.open_array(store, mode="r")
        times.append(_timed(lambda arr=arr: arr[:]))
        _close(store)
    ctx.record(f"read {label}", kind.name, "s", statistics.median(times), ctx.data.nbytes)


def random_windows(ctx: Context, kind: StoreKind, label: str, chunks: int, shards: int | None) -> None:
    """Random 64x64 windows (at any offset) read one by one, from a warm OS page cache: time
    per window."""
    path = kind.path(ctx.root, f"win-{label}")
    if (kind.name, f"win-{label}") not in ctx.prepared:
        _remove(path)
        store = kind.make(path, False)
        arr = _create(store, ctx.data.shape, chunks, False, shards)
        arr[:] = ctx.data
        _close(store)
        ctx.prepared.add((kind.name, f"win-{label}"))
    # From a warm OS page cache, as the full reads: one untimed pass over the whole array.
    store = kind.make(path, True)
    zarr.open_array(store, mode="r")[:]
    _close(store)
    store = kind.make(path, True)
    arr = zarr.open_array(store, mode="r")
    rng = np.random.default_rng(1)
    n = ctx.config.size - 64
    corners = rng.integers(0, n, size=(ctx.config.windows, 2))

    def run() -> None:
        for i, j in corners:
            window = arr[i : i + 64, j : j + 64]
            if window[0, 0] != ctx.data[i, j]:
                raise AssertionError(f"{kind.name}: wrong window at {i},{j}")

    elapsed = _timed(run)
    _close(store)
    ctx.record(f"window {label}", kind.name, "us/op", elapsed / len(corners) * 1e6)


def reader_threads(ctx: Context, kind: StoreKind, nthreads: int) -> None:
    """Reading the large-chunk array with 1 and with `nthreads` threads; the sample is the
    speed-up of `nthreads` threads over one. Two levels: whole chunks through the store's
    synchronous `get_sync` (what zarr's codec worker threads call), and `arr[rows]` through
    zarr, each thread with its own Array handle (zarr funnels these through one event loop)."""
    path = kind.path(ctx.root, "large-raw")
    if (kind.name, "large-raw") not in ctx.prepared:
        return
    store = kind.make(path, True)
    try:
        if hasattr(store, "get_sync"):
            n = ctx.config.size // ctx.config.large
            keys = [f"c/{i}/{j}" for i in range(n) for j in range(n)] * 2
            proto = default_buffer_prototype()
            store.get_sync(keys[0], prototype=proto)  # open the store before timing

            def get_all(part: list[str]) -> None:
                for key in part:
                    if store.get_sync(key, prototype=proto) is None:
                        raise AssertionError(f"{kind.name}: {key} missing")

            parts = [keys[t::nthreads] for t in range(nthreads)]
            one = _timed(lambda: get_all(keys))
            many = _timed(lambda: _in_threads(get_all, [(p,) for p in parts]))
            ctx.record(f"{nthreads} threads get_sync (speed-up)", kind.name, "x", one / many)

        rows = ctx.config.size // nthreads

        def read_rows(lo: int, hi: int) -> None:
            arr = zarr.open_array(store, mode="r")
            arr[lo:hi]

        spans = [(t * rows, (t + 1) * rows) for t in range(nthreads)]
        one = _timed(lambda: [read_rows(lo, hi) for lo, hi in spans])
        many = _timed(lambda: _in_threads(read_rows, spans))
        ctx.record(f"{nthreads} threads zarr read (speed-up)", kind.name, "x", one / many)
    finally:
        _close(store)


def _in_threads(fn: Callable[..., None], args: list[tuple[Any, ...]]) -> None:
    errors: list[BaseException] = []

    def run(*a: Any) -> None:
        try:
            fn(*a)
        except BaseException as exc:  # reported below, in the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=a) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def raw_get_set(ctx: Context, kind: StoreKind) -> None:
    """Latency of single store calls, async and sync, on 1 KiB and 16 KiB values."""
    path = kind.path(ctx.root, "raw")
    _remove(path)
    store = kind.make(path, False)
    proto = default_buffer_prototype()
    n = 2000
    values = {size: proto.buffer.from_bytes(os.urandom(size)) for size in (1024, 16384)}

    async def async_ops(size: int) -> tuple[float, float]:
        buf = values[size]
        t0 = time.perf_counter()
        for i in range(n):
            await store.set(f"raw{size}/{i}", buf)
        t1 = time.perf_counter()
        for i in range(n):
            await store.get(f"raw{size}/{i}", prototype=proto)
        t2 = time.perf_counter()
        return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6

    for size in (1024, 16384):
        set_us, get_us = zarr.core.sync.sync(async_ops(size))
        ctx.record(f"async set {size // 1024} KiB", kind.name, "us/op", set_us)
        ctx.record(f"async get {size // 1024} KiB", kind.name, "us/op", get_us)
        if hasattr(store, "get_sync") and hasattr(store, "set_sync"):
            buf = values[size]
            t0 = time.perf_counter()
            for i in range(n):
                store.set_sync(f"sync{size}/{i}", buf)
            t1 = time.perf_counter()
            for i in range(n):
                store.get_sync(f"sync{size}/{i}", prototype=proto)
            t2 = time.perf_counter()
            ctx.record(f"sync set {size // 1024} KiB", kind.name, "us/op", (t1 - t0) / n * 1e6)
            ctx.record(f"sync get {size // 1024} KiB", kind.name, "us/op", (t2 - t1) / n * 1e6)
    _close(store)


def listing(ctx: Context, kind: StoreKind) -> None:
    """list_dir of a group with many children, list_prefix of one child, among 100,000 keys."""
    cfg = ctx.config
    path = kind.path(ctx.root, "listing")
    if (kind.name, "listing") not in ctx.prepared:
        ctx.prepared.add((kind.name, "listing"))
        _remove(path)
        store = kind.make(path, False)
        proto = default_buffer_prototype()
        empty = proto.buffer.from_bytes(b"x")
        items = [
            (f"g/a{c:03d}/c/{k}", empty)
            for c in range(cfg.list_children)
            for k in range(cfg.list_keys_per_child)
        ]

        async def fill() -> None:
            step = 5000
            for i in range(0, len(items), step):
                await store._set_many(items[i : i + step])

        zarr.core.sync.sync(fill())
        _close(store)
    store = kind.make(path, True)

    async def list_dir() -> int:
        return len([k async for k in store.list_dir("g")])

    child = f"g/a{min(7, cfg.list_children - 1):03d}/"

    async def list_prefix() -> int:
        return len([k async for k in store.list_prefix(child)])

    found: dict[str, int] = {}
    t = _timed(lambda: found.setdefault("dir", zarr.core.sync.sync(list_dir())))
    ctx.record("list_dir 200 of 100k keys", kind.name, "s", t)
    t = _timed(lambda: found.setdefault("prefix", zarr.core.sync.sync(list_prefix())))
    ctx.record("list_prefix 500 of 100k keys", kind.name, "s", t)
    _close(store)
    if found["dir"] != cfg.list_children or found["prefix"] != cfg.list_keys_per_child:
        raise AssertionError(f"{kind.name}: listing returned {found}")


def open_hierarchy(ctx: Context, kind: StoreKind) -> None:
    """Open a group of many small arrays and read every array's metadata."""
    cfg = ctx.config
    path = kind.path(ctx.root, "hierarchy")
    if (kind.name, "hierarchy") not in ctx.prepared:
        ctx.prepared.add((kind.name, "hierarchy"))
        _remove(path)
        store = kind.make(path, False)
        root = zarr.open_group(store, mode="w")
        for i in range(cfg.hierarchy_arrays):
            root.create_array(f"v{i:03d}", shape=(100,), chunks=(100,), dtype="i4")
        _close(store)
    store = kind.make(path, True)

    def run() -> None:
        members = list(zarr.open_group(store, mode="r").arrays())
        if len(members) != cfg.hierarchy_arrays:
            raise AssertionError(f"{kind.name}: {len(members)} arrays")

    ctx.record("open 200 arrays", kind.name, "s", _timed(run))
    _close(store)


def workloads(cfg: Config) -> list[tuple[str, Callable[[Context, StoreKind], None]]]:
    out: list[tuple[str, Callable[[Context, StoreKind], None]]] = []
    for chunks, size_label in ((cfg.small, "small"), (cfg.large, "large")):
        for compressed in (False, True):
            label = f"{size_label}-{'zstd' if compressed else 'raw'}"
            out.append(
                (f"ingest/read {label}", lambda c, k, ch=chunks, z=compressed, lb=label: ingest_and_read(c, k, ch, z, lb))
            )
    out.append(("windows", lambda c, k: random_windows(c, k, "small", c.config.small, None)))
    for shard in cfg.shard_sizes:
        nbytes = shard * shard * 4
        size = f"{nbytes >> 20}MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KiB"
        out.append(
            (f"windows sharded {size}", lambda c, k, s=shard, z=size: random_windows(c, k, f"shard-{z}", 64, s))
        )
    for n in cfg.threads:
        out.append((f"{n} threads", lambda c, k, n=n: reader_threads(c, k, n)))
    out.append(("raw get/set", raw_get_set))
    out.append(("listing", listing))
    out.append(("hierarchy", open_hierarchy))
    return out


# --- running and reporting -------------------------------------------------------------------------


def run(cfg: Config, kinds: list[StoreKind], root: Path, progress: bool = True) -> Context:
    ctx = Context(cfg, root, synthetic_field(cfg.size), kinds)
    plan = workloads(cfg)
    steps = [(name, fn, rep, kind) for name, fn in plan for rep in range(cfg.repeat) for kind in kinds]
    with _progress(progress, len(steps)) as advance:
        for name, fn, rep, kind in steps:
            advance(f"{name} [{kind.name}] {rep + 1}/{cfg.repeat}")
            fn(ctx, kind)
    return ctx


@contextlib.contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[str], None]]:
    if not enabled:
        yield lambda _: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task("benchmark", total=total)
        first = [True]

        def advance(description: str) -> None:
            if not first[0]:
                bar.advance(task)
            first[0] = False
            bar.update(task, description=description)

        yield advance
        bar.advance(task)


def ratio_to_local(ctx: Context, workload: str, store: str) -> float | None:
    """How many times faster than LocalStore (>1 faster); for "x" rows the ratio of speed-ups."""
    mine = ctx.results.get((workload, store))
    base = ctx.results.get((workload, "local"))
    if mine is None or base is None or not mine.samples or not base.samples:
        return None
    if mine.unit == "x":
        return mine.median / base.median
    return base.median / mine.median


def table_rows(ctx: Context) -> list[list[str]]:
    workload_names = list(dict.fromkeys(w for w, _ in ctx.results))
    stores = [k.name for k in ctx.kinds]
    rows = []
    for w in workload_names:
        row = [w]
        unit = next(r.unit for (ww, _), r in ctx.results.items() if ww == w)
        for s in stores:
            r = ctx.results.get((w, s))
            if r is None:
                row.append("-")
                continue
            med = r.median
            if unit == "s" and r.nbytes:
                cell = f"{r.nbytes / med / 1e6:,.0f} MB/s"
            elif unit == "s":
                cell = f"{med * 1e3:,.1f} ms"
            elif unit == "x":
                cell = f"{med:.2f}x"
            else:
                cell = f"{med:,.1f} us"
            ratio = ratio_to_local(ctx, w, s)
            if ratio is not None and s != "local":
                cell += f" ({ratio:.2f})"
            row.append(cell)
        rows.append(row)
    return rows


def print_table(ctx: Context) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="median of %d runs; (n) = speed relative to LocalStore" % ctx.config.repeat)
    table.add_column("workload")
    for kind in ctx.kinds:
        table.add_column(kind.name, justify="right")
    for row in table_rows(ctx):
        table.add_row(*row)
    Console().print(table)


def markdown_table(ctx: Context) -> str:
    """The table as Markdown (for a README or an issue)."""
    stores = [k.name for k in ctx.kinds]
    lines = [
        "| workload | " + " | ".join(stores) + " |",
        "| --- | " + " | ".join("---:" for _ in stores) + " |",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(ctx)]
    return "\n".join(lines) + "\n"


def environment() -> dict[str, Any]:
    import numcodecs

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "python": sys.version,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "zarr": zarr.__version__,
        "numpy": np.__version__,
        "numcodecs": numcodecs.__version__,
        "zarrdb": zarrdb.__version__,
        "sqlite_version": zarrdb.sqlite_version,
        "sqlite_compile_options": list(zarrdb.compile_options),
    }


def to_json(ctx: Context) -> dict[str, Any]:
    return {
        "config": {k: v for k, v in vars(ctx.config).items()},
        "environment": environment(),
        "results": [
            {
                "workload": r.workload,
                "store": r.store,
                "unit": r.unit,
                "nbytes": r.nbytes,
                "samples": r.samples,
                "median": r.median,
                "ratio_to_local": ratio_to_local(ctx, r.workload, r.store),
            }
            for r in ctx.results.values()
        ],
    }


def plot(ctx: Context, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'zarrdb[plot]'") from None
    workload_names = [w for w in dict.fromkeys(w for w, _ in ctx.results)]
    stores = [k.name for k in ctx.kinds if k.name != "local"]
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(workload_names) * len(stores) / 2 + 2))
    height = 0.8 / max(1, len(stores))
    for i, s in enumerate(stores):
        ratios = [ratio_to_local(ctx, w, s) or 0 for w in workload_names]
        ax.barh([y + i * height for y in range(len(workload_names))], ratios, height, label=s)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([y + 0.4 - height / 2 for y in range(len(workload_names))], workload_names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("speed relative to LocalStore (log scale, >1 = faster)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="zarrdb bench",
        description="Benchmark zarrdb against LocalStore and the other zarr stores on a "
        "synthetic field generated on the fly.",
    )
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--size", type=int, default=2048, help="array edge (size x size float32; default 2048)"
    )
    parser.add_argument(
        "--chunks", default="64,512", help="small and large chunk edges, comma-separated"
    )
    parser.add_argument(
        "--stores",
        default=None,
        help="comma-separated: zarrdb,local,zip,memory,zarr-sqlite (default: all available)",
    )
    parser.add_argument(
        "--repeat", type=int, default=2, help="repetitions of each workload (default 2)"
    )
    parser.add_argument("--json", type=Path, help="write every sample and the environment here")
    parser.add_argument("--markdown", type=Path, help="write the table as Markdown here")
    parser.add_argument("--plot", type=Path, help="draw the ratios as a bar chart (PNG)")
    parser.add_argument("--dir", type=Path, help="scratch folder (default: a temporary one)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run_from_args(args: argparse.Namespace) -> int:
    small, large = (int(x) for x in args.chunks.split(","))
    cfg = Config(size=args.size, small=small, large=large, repeat=args.repeat)
    if args.size < 1024:
        cfg.shard_sizes = tuple(s for s in cfg.shard_sizes if s <= args.size)
    kinds = store_kinds(args.stores.split(",") if args.stores else None)
    names = ", ".join(k.name for k in kinds)
    print(
        f"zarrdb {zarrdb.__version__} (SQLite {zarrdb.sqlite_version}), zarr {zarr.__version__}, "
        f"Python {platform.python_version()}; stores: {names}; "
        f"{args.size}x{args.size} float32, chunks {small} and {large}, {args.repeat} runs"
    )
    with contextlib.ExitStack() as stack:
        if args.dir:
            root = args.dir
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="zarrdb-bench-")))
        start = time.perf_counter()
        ctx = run(cfg, kinds, root, progress=not args.quiet)
        print_table(ctx)
        print(f"({time.perf_counter() - start:.0f} s)")
        if args.json:
            args.json.write_text(json.dumps(to_json(ctx), indent=1))
            print(f"samples and environment written to {args.json}")
        if args.markdown:
            args.markdown.write_text(markdown_table(ctx))
            print(f"Markdown table written to {args.markdown}")
        if args.plot:
            plot(ctx, args.plot)
            print(f"chart written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
