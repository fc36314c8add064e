"""The workloads of the benchmark, each run against every store kind that takes part.

Ingest, full reads, random windows and gathered small writes are `Case`s (setup, a timed
run, a check), shared with the pytest-benchmark suite in `benchmarks/test_store.py`; the
others (threads, single calls, listings, opening a hierarchy) time their parts themselves.
Every workload checks what it reads or writes: a store that hands back other data fails the
run instead of producing a figure.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zarr
import zarr.codecs
from zarr.buffer import default_buffer_prototype

from zarrdb import _compat
from zarrdb.cli.bench.context import (
    WINDOW,
    Context,
    create_array,
)
from zarrdb.cli.bench.harness import (
    StoreKind,
    close,
    in_threads,
    remove,
    run_async,
    settle,
    timed,
)

READS_PER_SAMPLE = 3  # a full-read sample is the median of this many reads

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
    chunks of one selection), into a new store opened before the clock starts."""

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
        # Opened here, untimed, as zarr opens a store before it writes: the timed part is the
        # sets (for zarrdb, making the file is a few synced writes of its own).
        run_async(_compat.ensure_open(self.store))

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
