"""The workloads of the benchmark, each run against every store kind that takes part.

Ingest, full reads, random windows and gathered small writes are `Case`s (setup, a timed
run, a check), shared with the pytest-benchmark suite in `benchmarks/test_store.py`; the
others (threads, single calls, listings, opening a hierarchy) time their parts themselves.
Every workload checks what it reads or writes: a store that hands back other data fails the
run instead of producing a figure.
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.codecs
from zarr.buffer import default_buffer_prototype

from zarrdb.cli.bench.harness import (
    PageCache,
    Results,
    StoreKind,
    close,
    in_threads,
    remove,
    run_async,
    settle,
    synthetic_cube,
    synthetic_field,
    timed,
)

READS_PER_SAMPLE = 3  # a full-read sample is the median of this many reads
WINDOW = 64  # edge of a random window, and of the chunks inside shards


@dataclass
class Config:
    size: int = 4096  # edge of the float32 field
    small: int = 64  # small chunk edge (64: 16 KiB)
    large: int = 512  # large chunk edge (512: 1 MiB)
    shard: int = 1024  # edge of the field's shards (of 64x64 chunks) in the sharded ingest
    cube: int = 512  # edge of the uint16 volume (0: none)
    cube_chunk: int = 256  # its chunk edge (256: 32 MiB), and its shards' edge
    cube_inner: int = 32  # the edge of the chunks inside the cube's shards
    values_mib: tuple[int, ...] = (1, 4, 32, 128)  # values of these sizes, cut from the cube
    cold: bool = False  # drop the OS page cache before each full read (root only)
    repeat: int = 3
    windows: int = 200
    list_children: int = 200
    list_keys_per_child: int = 500
    hierarchy_arrays: int = 200
    threads: tuple[int, ...] = (2, 4)
    shard_sizes: tuple[int, ...] = (512, 1024, 2048)  # shard edges, 64x64 chunks inside
    single_calls: int = 2000  # store.get/set calls per sample

    def chunk_bytes(self, data: str) -> int:
        """Bytes of one value (a chunk, or a shard) of the data set `data`."""
        layout = self.layouts()[data]
        item = 2 if layout.cube else 4
        return int(np.prod(layout.shards or layout.chunks)) * item

    def layouts(self) -> dict[str, Layout]:
        """The data sets an ingest writes, by name: the float32 field in small and large
        chunks and in shards, the uint16 cube in chunks and in shards, and the cube in values
        of each of `values_mib` (stacks of whole planes)."""
        out = {
            "small": Layout(False, (self.small, self.small)),
            "large": Layout(False, (self.large, self.large)),
            "shard": Layout(False, (WINDOW, WINDOW), (self.shard, self.shard)),
        }
        if self.cube:
            edge, inner = self.cube_chunk, self.cube_inner
            out["cube"] = Layout(True, (edge,) * 3)
            out["cube-shard"] = Layout(True, (inner,) * 3, (edge,) * 3)
            plane = self.cube * self.cube * 2
            for mib in self.values_mib:
                planes, rest = divmod(mib << 20, plane)
                if planes and not rest and planes <= self.cube:
                    out[f"value-{mib}MiB"] = Layout(True, (planes, self.cube, self.cube))
        return out


@dataclass(frozen=True)
class Layout:
    """How a data set is cut: the field (float32, 2-D) or the cube (uint16, 3-D), its chunks,
    and the shards holding them (None: every chunk is a value of its own)."""

    cube: bool
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None = None


def size_label(nbytes: int) -> str:
    return f"{nbytes >> 20}MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KiB"


@dataclass
class Context:
    config: Config
    root: Path
    kinds: list[StoreKind]
    results: Results = field(default_factory=Results)
    prepared: set[tuple[str, str]] = field(default_factory=set)  # (store, data set) written
    page_cache: PageCache = field(default_factory=PageCache)

    @functools.cached_property
    def field(self) -> np.ndarray:
        return synthetic_field(self.config.size)

    @functools.cached_property
    def cube(self) -> np.ndarray:
        return synthetic_cube(self.config.cube)

    def data(self, name: str) -> np.ndarray:
        return self.cube if self.config.layouts()[name].cube else self.field

    def written(self, kind: StoreKind, label: str, fill: Callable[[Any], None]) -> Path:
        """The path of the data set `label` of `kind`, written by `fill(store)` the first time
        it is asked for (later repetitions read the same one)."""
        path = kind.path(self.root, label)
        if (kind.name, label) not in self.prepared:
            remove(path)
            store = kind.make(path, False)
            try:
                fill(store)
            finally:
                close(store)
            self.prepared.add((kind.name, label))
        return path


CODECS = ("raw", "zstd", "blosc")


def create_array(
    store: Any,
    data: np.ndarray,
    chunks: int | tuple[int, ...],
    compressed: bool | str,
    shards: int | tuple[int, ...] | None = None,
) -> zarr.Array[Any]:
    """A new array for `data`; `compressed` is True (zstd), False (raw) or a name of CODECS
    (blosc: zstd level 1 with bit shuffling)."""
    ndim = data.ndim
    codec = compressed if isinstance(compressed, str) else ("zstd" if compressed else "raw")
    compressors: Any = {
        "raw": None,
        "zstd": zarr.codecs.ZstdCodec(level=1),
        "blosc": zarr.codecs.BloscCodec(cname="zstd", clevel=1, shuffle="bitshuffle"),
    }[codec]
    return zarr.create_array(
        store,
        shape=data.shape,
        chunks=(chunks,) * ndim if isinstance(chunks, int) else chunks,
        shards=(shards,) * ndim if isinstance(shards, int) else shards,
        dtype=data.dtype,
        compressors=compressors,
        fill_value=0,
    )


# --- cases: setup, a timed run, a check ----------------------------------------------------------


class Ingest:
    """`arr[:] = data` into a new store, then closing it (a store may defer work to close: it
    counts), then the kind's finish (an fsync)."""

    def __init__(
        self, ctx: Context, kind: StoreKind, data: str, compressed: bool | str = False
    ) -> None:
        self.ctx, self.kind, self.data_name = ctx, kind, data
        self.codec = compressed if isinstance(compressed, str) else (
            "zstd" if compressed else "raw"
        )  # fmt: skip
        self.label = f"{data}-{self.codec}"
        self.path = kind.path(ctx.root, self.label)
        self.layout = ctx.config.layouts()[data]

    @property
    def data(self) -> np.ndarray:
        return self.ctx.cube if self.layout.cube else self.ctx.field

    def setup(self) -> None:
        remove(self.path)
        self.store = self.kind.make(self.path, False)
        self.arr = create_array(
            self.store, self.data, self.layout.chunks, self.codec, self.layout.shards
        )

    def run(self) -> None:
        with self.kind.writing(self.store):
            self.arr[:] = self.data
        close(self.store)
        if self.kind.finish is not None:
            self.kind.finish(self.path)

    def check(self) -> None:
        """Read everything back (this also brings the file into the OS page cache)."""
        store = self.kind.make(self.path, True)
        try:
            if not np.array_equal(zarr.open_array(store, mode="r")[:], self.data):
                raise AssertionError(
                    f"{self.kind.name}: {self.label} read back differs from what was written"
                )
        finally:
            close(store)
        self.ctx.prepared.add((self.kind.name, self.label))


class FullRead:
    """`arr[:]` by a newly opened read-only store, from a warm OS page cache (or, with
    `cold`, after dropping it where that can be done)."""

    def __init__(self, ctx: Context, kind: StoreKind, label: str, cold: bool = False) -> None:
        self.kind, self.path = kind, kind.path(ctx.root, label)
        self.page_cache = ctx.page_cache if cold else None

    store: Any = None

    def setup(self) -> None:
        self.teardown()  # the store of the round before
        if self.page_cache is not None:
            self.page_cache.drop()
        self.store = self.kind.make(self.path, True)
        self.arr = zarr.open_array(self.store, mode="r")

    def run(self) -> None:
        self.arr[:]

    def teardown(self) -> None:
        if self.store is not None:
            close(self.store)
            self.store = None


class Windows:
    """Random 64x64 windows (at any offset) read one by one from a warm OS page cache."""

    def __init__(self, ctx: Context, kind: StoreKind, label: str, chunks: int, shards: int | None):
        self.ctx, self.kind, self.label = ctx, kind, f"win-{label}"
        self.chunks, self.shards = chunks, shards
        rng = np.random.default_rng(1)
        self.corners = rng.integers(0, ctx.config.size - WINDOW, size=(ctx.config.windows, 2))

    store: Any = None

    def setup(self) -> None:
        self.teardown()  # the store of the round before

        def fill(store: Any) -> None:
            create_array(store, self.ctx.field, self.chunks, False, self.shards)[:] = self.ctx.field

        self.path = self.ctx.written(self.kind, self.label, fill)
        store = self.kind.make(self.path, True)  # a warm OS page cache: one pass over it all
        zarr.open_array(store, mode="r")[:]
        close(store)
        self.store = self.kind.make(self.path, True)
        self.arr = zarr.open_array(self.store, mode="r")

    def run(self) -> None:
        for i, j in self.corners:
            window = np.asarray(self.arr[i : i + WINDOW, j : j + WINDOW])
            if window[0, 0] != self.ctx.field[i, j]:
                raise AssertionError(f"{self.kind.name}: wrong window at {i},{j}")

    def teardown(self) -> None:
        if self.store is not None:
            close(self.store)
            self.store = None


class GatheredSet:
    """`store.set` of 1 KiB values, 100 at a time under asyncio.gather (as zarr writes the
    chunks of one selection)."""

    BATCH = 100
    SIZE = 1024

    def __init__(self, ctx: Context, kind: StoreKind) -> None:
        self.kind, self.path = kind, kind.path(ctx.root, "gathered")
        self.n = max(self.BATCH, ctx.config.single_calls // self.BATCH * self.BATCH)
        self.value = default_buffer_prototype().buffer.from_bytes(os.urandom(self.SIZE))

    store: Any = None

    def setup(self) -> None:
        if self.store is not None:  # the store of the round before
            close(self.store)
        remove(self.path)
        self.store = self.kind.make(self.path, False)

    async def _writes(self) -> None:
        for start in range(0, self.n, self.BATCH):
            keys = [f"g/{i}" for i in range(start, start + self.BATCH)]
            await asyncio.gather(*(self.store.set(key, self.value) for key in keys))

    def run(self) -> None:
        run_async(self._writes())

    def check(self) -> None:
        async def count() -> int:
            return len([k async for k in self.store.list_prefix("g/")])

        found = run_async(count())
        close(self.store)
        if found != self.n:
            raise AssertionError(f"{self.kind.name}: {found} of {self.n} gathered writes stored")


# --- the workloads of `zarrdb bench` -------------------------------------------------------------


def ingest_and_read(
    ctx: Context, kind: StoreKind, data: str, compressed: bool | str, reads: bool = True
) -> None:
    """The ingest, its check (which warms the OS page cache) and, unless the kind only
    ingests or `reads` is false, full reads: a read sample is the median of three, each by a
    new store (a full read is short enough for one slow spell of a shared machine to double
    it). With `Config.cold` each read starts from a dropped page cache."""
    case = Ingest(ctx, kind, data, compressed)
    nbytes = case.data.nbytes
    case.setup()
    ctx.results.record(f"ingest {case.label}", kind.name, "s", timed(case.run), nbytes)
    case.check()
    if not reads:  # nothing reads it again: the scratch folder need not hold it
        remove(case.path)
        ctx.prepared.discard((kind.name, case.label))
    if kind.ingest_only is not None or not reads:
        return
    times = []
    for _ in range(READS_PER_SAMPLE):
        read = FullRead(ctx, kind, case.label, cold=ctx.config.cold)
        read.setup()
        times.append(timed(read.run))
        read.teardown()
    ctx.results.record(f"read {case.label}", kind.name, "s", statistics.median(times), nbytes)


def random_windows(
    ctx: Context, kind: StoreKind, label: str, chunks: int, shards: int | None
) -> None:
    case = Windows(ctx, kind, label, chunks, shards)
    case.setup()
    elapsed = timed(case.run)
    case.teardown()
    ctx.results.record(f"window {label}", kind.name, "us/op", elapsed / len(case.corners) * 1e6)


def gathered_set(ctx: Context, kind: StoreKind) -> None:
    case = GatheredSet(ctx, kind)
    case.setup()
    elapsed = timed(case.run)
    case.check()
    ctx.results.record("gathered set 1 KiB", kind.name, "us/op", elapsed / case.n * 1e6)


def reader_threads(ctx: Context, kind: StoreKind, nthreads: int) -> None:
    """Reading the large-chunk array with 1 and with `nthreads` threads; the sample is the
    speed-up of `nthreads` threads over one. Two levels: whole chunks through the store's
    synchronous `get_sync` (what zarr's codec worker threads call), and `arr[rows]` through
    zarr, each thread with its own Array handle (zarr funnels these through one event loop)."""
    if (kind.name, "large-raw") not in ctx.prepared:
        return
    store = kind.make(kind.path(ctx.root, "large-raw"), True)
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
            one = timed(lambda: get_all(keys))
            many = timed(lambda: in_threads(get_all, [(p,) for p in parts]))
            ctx.results.record(
                f"{nthreads} threads get_sync (speed-up)", kind.name, "x", one / many
            )

        rows = ctx.config.size // nthreads

        def read_rows(lo: int, hi: int) -> None:
            zarr.open_array(store, mode="r")[lo:hi]

        spans = [(t * rows, (t + 1) * rows) for t in range(nthreads)]
        def read_all() -> None:
            for lo, hi in spans:
                read_rows(lo, hi)

        one = timed(read_all)
        many = timed(lambda: in_threads(read_rows, spans))
        ctx.results.record(f"{nthreads} threads zarr read (speed-up)", kind.name, "x", one / many)
    finally:
        close(store)


def single_calls(ctx: Context, kind: StoreKind) -> None:
    """Latency of single store calls, async and sync, on 1 KiB and 16 KiB values."""
    path = kind.path(ctx.root, "raw")
    remove(path)
    store = kind.make(path, False)
    proto = default_buffer_prototype()
    n = ctx.config.single_calls
    record = ctx.results.record
    for size in (1024, 16384):
        buf = proto.buffer.from_bytes(os.urandom(size))
        name = f"{size // 1024} KiB"

        async def calls() -> tuple[float, float]:
            set_s = await _async_loop(lambda i: store.set(f"raw{size}/{i}", buf), n)
            get_s = await _async_loop(lambda i: store.get(f"raw{size}/{i}", prototype=proto), n)
            return set_s, get_s

        settle()
        set_s, get_s = run_async(calls())
        record(f"async set {name}", kind.name, "us/op", set_s / n * 1e6)
        record(f"async get {name}", kind.name, "us/op", get_s / n * 1e6)
        if hasattr(store, "get_sync") and hasattr(store, "set_sync"):
            set_s = timed(lambda: [store.set_sync(f"sync{size}/{i}", buf) for i in range(n)])
            get_s = timed(
                lambda: [store.get_sync(f"sync{size}/{i}", prototype=proto) for i in range(n)]
            )
            record(f"sync set {name}", kind.name, "us/op", set_s / n * 1e6)
            record(f"sync get {name}", kind.name, "us/op", get_s / n * 1e6)
    close(store)


async def _async_loop(call: Callable[[int], Any], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        await call(i)
    return time.perf_counter() - start


def listing(ctx: Context, kind: StoreKind) -> None:
    """list_dir of a group with many children, list_prefix of one child."""
    cfg = ctx.config
    one = default_buffer_prototype().buffer.from_bytes(b"x")
    keys = [
        f"g/a{c:03d}/c/{k}"
        for c in range(cfg.list_children)
        for k in range(cfg.list_keys_per_child)
    ]

    async def fill(store: Any) -> None:
        for i in range(0, len(keys), 5000):
            await asyncio.gather(*(store.set(key, one) for key in keys[i : i + 5000]))

    store = kind.make(ctx.written(kind, "listing", lambda s: run_async(fill(s))), True)
    child = f"g/a{min(7, cfg.list_children - 1):03d}/"

    async def count(listed: Any) -> int:
        return len([k async for k in listed])

    found: dict[str, int] = {}
    n = cfg.list_children * cfg.list_keys_per_child
    total = f"{n // 1000}k" if n >= 1000 else f"{n}"
    t = timed(lambda: found.setdefault("dir", run_async(count(store.list_dir("g")))))
    ctx.results.record(f"list_dir {cfg.list_children} of {total} keys", kind.name, "s", t)
    t = timed(lambda: found.setdefault("prefix", run_async(count(store.list_prefix(child)))))
    ctx.results.record(f"list_prefix {cfg.list_keys_per_child} of {total} keys", kind.name, "s", t)
    close(store)
    if found["dir"] != cfg.list_children or found["prefix"] != cfg.list_keys_per_child:
        raise AssertionError(f"{kind.name}: listing returned {found}")


def open_hierarchy(ctx: Context, kind: StoreKind) -> None:
    """Open a group of many small arrays and read every array's metadata."""
    cfg = ctx.config

    def fill(store: Any) -> None:
        root = zarr.open_group(store, mode="w")
        for i in range(cfg.hierarchy_arrays):
            root.create_array(f"v{i:03d}", shape=(100,), chunks=(100,), dtype="i4")

    store = kind.make(ctx.written(kind, "hierarchy", fill), True)

    def run() -> None:
        members = list(zarr.open_group(store, mode="r").arrays())
        if len(members) != cfg.hierarchy_arrays:
            raise AssertionError(f"{kind.name}: {len(members)} arrays")

    ctx.results.record(f"open {cfg.hierarchy_arrays} arrays", kind.name, "s", timed(run))
    close(store)


def one_get(ctx: Context, kind: StoreKind) -> None:
    """One `store.get` of a 16 KiB value through zarr's async API, on a store opened for
    reading: the latency of a call, the median over `single_calls` distinct keys."""
    n = ctx.config.single_calls
    value = default_buffer_prototype().buffer.from_bytes(os.urandom(16384))

    async def fill(store: Any) -> None:
        for i in range(0, n, 500):
            await asyncio.gather(*(store.set(f"v/{k}", value) for k in range(i, min(n, i + 500))))

    store = kind.make(ctx.written(kind, "get", lambda s: run_async(fill(s))), True)
    proto = default_buffer_prototype()

    async def gets() -> list[float]:
        out = []
        for i in range(n):
            start = time.perf_counter()
            got = await store.get(f"v/{i}", prototype=proto)
            out.append(time.perf_counter() - start)
            if got is None or len(got) != len(value):
                raise AssertionError(f"{kind.name}: v/{i} missing or cut")
        return out

    try:
        settle()
        latencies = run_async(gets())
    finally:
        close(store)
    ctx.results.record("get 16 KiB", kind.name, "us/op", statistics.median(latencies) * 1e6)


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
    from zarrdb.cli.bench.cold import cold_reads  # it builds on this module

    if (kind.name, f"{data}-{codec}") in ctx.prepared:
        cold_reads(ctx, kind, data, codec)


def _windows(ctx: Context, kind: StoreKind, *, label: str, shard: int) -> None:
    random_windows(ctx, kind, label, WINDOW, shard)


def _threads(ctx: Context, kind: StoreKind, *, n: int) -> None:
    reader_threads(ctx, kind, n)
