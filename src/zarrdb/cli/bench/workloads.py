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
    Results,
    StoreKind,
    close,
    in_threads,
    remove,
    run_async,
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
    cube: int = 512  # edge of the uint16 volume (0: none)
    cube_chunk: int = 256  # its chunk edge (256: 32 MiB)
    repeat: int = 3
    windows: int = 200
    list_children: int = 200
    list_keys_per_child: int = 500
    hierarchy_arrays: int = 200
    threads: tuple[int, ...] = (2, 4)
    shard_sizes: tuple[int, ...] = (512, 1024, 2048)  # shard edges, 64x64 chunks inside
    single_calls: int = 2000  # store.get/set calls per sample

    def chunk_bytes(self, data: str) -> int:
        edge = {"small": self.small, "large": self.large, "cube": self.cube_chunk}[data]
        return edge**3 * 2 if data == "cube" else edge * edge * 4


def size_label(nbytes: int) -> str:
    return f"{nbytes >> 20}MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KiB"


@dataclass
class Context:
    config: Config
    root: Path
    kinds: list[StoreKind]
    results: Results = field(default_factory=Results)
    prepared: set[tuple[str, str]] = field(default_factory=set)  # (store, data set) written

    @functools.cached_property
    def field(self) -> np.ndarray:
        return synthetic_field(self.config.size)

    @functools.cached_property
    def cube(self) -> np.ndarray:
        return synthetic_cube(self.config.cube)

    def data(self, name: str) -> np.ndarray:
        return self.cube if name == "cube" else self.field

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


def create_array(
    store: Any, data: np.ndarray, chunks: int, compressed: bool, shards: int | None = None
) -> zarr.Array[Any]:
    ndim = data.ndim
    return zarr.create_array(
        store,
        shape=data.shape,
        chunks=(chunks,) * ndim,
        shards=None if not shards else (shards,) * ndim,
        dtype=data.dtype,
        compressors=zarr.codecs.ZstdCodec(level=1) if compressed else None,
        fill_value=0,
    )


# --- cases: setup, a timed run, a check ----------------------------------------------------------


class Ingest:
    """`arr[:] = data` into a new store, then closing it (a store may defer work to close: it
    counts), then the kind's finish (an fsync)."""

    def __init__(self, ctx: Context, kind: StoreKind, data: str, compressed: bool) -> None:
        self.ctx, self.kind, self.data_name = ctx, kind, data
        self.compressed = compressed
        self.label = f"{data}-{'zstd' if compressed else 'raw'}"
        self.path = kind.path(ctx.root, self.label)
        cfg = ctx.config
        self.chunks = {"small": cfg.small, "large": cfg.large, "cube": cfg.cube_chunk}[data]

    def setup(self) -> None:
        remove(self.path)
        self.store = self.kind.make(self.path, False)
        self.arr = create_array(
            self.store, self.ctx.data(self.data_name), self.chunks, self.compressed
        )

    def run(self) -> None:
        with self.kind.writing(self.store):
            self.arr[:] = self.ctx.data(self.data_name)
        close(self.store)
        if self.kind.finish is not None:
            self.kind.finish(self.path)

    def check(self) -> None:
        """Read everything back (this also brings the file into the OS page cache)."""
        store = self.kind.make(self.path, True)
        try:
            if not np.array_equal(
                zarr.open_array(store, mode="r")[:], self.ctx.data(self.data_name)
            ):
                raise AssertionError(
                    f"{self.kind.name}: {self.label} read back differs from what was written"
                )
        finally:
            close(store)
        self.ctx.prepared.add((self.kind.name, self.label))


class FullRead:
    """`arr[:]` by a newly opened read-only store, from a warm OS page cache."""

    def __init__(self, ctx: Context, kind: StoreKind, label: str) -> None:
        self.kind, self.path = kind, kind.path(ctx.root, label)

    store: Any = None

    def setup(self) -> None:
        self.teardown()  # the store of the round before
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


def ingest_and_read(ctx: Context, kind: StoreKind, data: str, compressed: bool) -> None:
    """The ingest, its check (which warms the OS page cache) and, unless the kind only
    ingests, full reads: a read sample is the median of three, each by a new store (a full
    read is short enough for one slow spell of a shared machine to double it)."""
    case = Ingest(ctx, kind, data, compressed)
    nbytes = ctx.data(data).nbytes
    case.setup()
    ctx.results.record(f"ingest {case.label}", kind.name, "s", timed(case.run), nbytes)
    case.check()
    if kind.ingest_only is not None:
        return
    times = []
    for _ in range(READS_PER_SAMPLE):
        read = FullRead(ctx, kind, case.label)
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


@dataclass(frozen=True)
class Workload:
    name: str
    family: str  # "ingest" or "other": which kinds take part (StoreKind.runs)
    data: str | None
    run: Callable[[Context, StoreKind], None]


def all_workloads(cfg: Config) -> list[Workload]:
    out: list[Workload] = []
    sets = [("small", cfg.small), ("large", cfg.large)] + (
        [("cube", cfg.cube_chunk)] if cfg.cube else []
    )
    for data, _ in sets:
        for compressed in (False, True) if data != "cube" else (False,):
            label = f"{data}-{'zstd' if compressed else 'raw'}"
            run = functools.partial(_ingest_and_read, data=data, compressed=compressed)
            out.append(Workload(f"ingest/read {label}", "ingest", data, run))
    out.append(
        Workload(
            "windows",
            "other",
            None,
            lambda c, k: random_windows(c, k, "small", c.config.small, None),
        )
    )
    for shard in cfg.shard_sizes:
        label = f"shard-{size_label(shard * shard * 4)}"
        run = functools.partial(_windows, label=label, shard=shard)
        out.append(Workload(f"windows {label}", "other", None, run))
    for n in cfg.threads:
        out.append(Workload(f"{n} threads", "other", None, functools.partial(_threads, n=n)))
    out.append(Workload("single calls", "other", None, single_calls))
    out.append(Workload("gathered set", "other", None, gathered_set))
    out.append(Workload("listing", "other", None, listing))
    out.append(Workload("hierarchy", "other", None, open_hierarchy))
    return out


def _ingest_and_read(ctx: Context, kind: StoreKind, *, data: str, compressed: bool) -> None:
    ingest_and_read(ctx, kind, data, compressed)


def _windows(ctx: Context, kind: StoreKind, *, label: str, shard: int) -> None:
    random_windows(ctx, kind, label, WINDOW, shard)


def _threads(ctx: Context, kind: StoreKind, *, n: int) -> None:
    reader_threads(ctx, kind, n)
