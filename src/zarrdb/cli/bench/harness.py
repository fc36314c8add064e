"""The benchmark harness shared by `zarrdb bench` and the pytest-benchmark suites in
`benchmarks/`: the stores compared, the data, how one sample is timed and recorded, and the
conditions of a run (the environment, how busy the machine was).

A workload is a `Case`: `setup()` prepares what is not timed (a new store, an array, a warm
OS page cache), `run()` is the timed part, `check()` verifies what it wrote or read. `zarrdb
bench` times `run()` itself; pytest-benchmark passes `setup` and `run` to `pedantic`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import platform
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

# --- stores -------------------------------------------------------------------------------------


@dataclass
class StoreKind:
    """How to make a store of one kind at a path, for writing and for reading.

    `writing(store)` wraps the timed writes of an ingest (a transaction, say); `finish(path)`
    runs after the store is closed and is timed with the ingest (an fsync, say). A kind with
    `ingest_only` set runs only the ingests of those data sets ("small", "large", ...; `ALL`:
    every ingest): a variant of another kind whose reads would be the same. `title` names
    the kind in tables and charts."""

    name: str
    make: Callable[[Path, bool], Any]  # (path, read_only) -> store
    suffix: str
    summary: str
    writing: Callable[[Any], contextlib.AbstractContextManager[Any]] = lambda store: (
        contextlib.nullcontext()
    )
    finish: Callable[[Path], None] | None = None
    ingest_only: frozenset[str] | None = None
    title: str = ""

    def path(self, root: Path, label: str) -> Path:
        return root / f"{self.name}-{label}{self.suffix}"

    def runs(self, family: str, data: str | None = None) -> bool:
        """Whether this kind takes part in a workload of `family` on the data set `data`."""
        if self.ingest_only is None:
            return True
        return family == "ingest" and (ALL in self.ingest_only or data in self.ingest_only)


ALL = "*"  # in StoreKind.ingest_only: the ingests of every data set


def fsync_tree(root: Path) -> None:
    """fsync every file and directory below `root`, `root` itself and the folder holding it:
    what makes a directory store durable (LocalStore does not sync). Windows cannot open a
    directory to sync it; there the files alone are synced."""
    folders = sys.platform != "win32"
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync(os.path.join(folder, name), os.O_RDONLY)
        if folders:
            _fsync(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    if folders:
        _fsync(str(Path(root).parent), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags | getattr(os, "O_BINARY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _memory(name: str) -> StoreKind:
    from zarr.storage import MemoryStore

    backings: dict[Path, dict[str, Any]] = {}

    def make(path: Path, read_only: bool) -> Any:
        # A new dictionary for each writer (like a new file), the same one for its readers.
        if not read_only:
            backings[path] = {}
        return MemoryStore(backings.setdefault(path, {}), read_only=read_only)

    return StoreKind(name, make, "", "zarr's MemoryStore (a dict in this process)")


def _zarr_sqlite_class() -> type | None:
    try:
        from zarr_sqlite import SQLiteStore as ReferenceStore
    except Exception:  # not installed, or this Python/zarr cannot run it
        return None
    return ReferenceStore


def all_store_kinds() -> list[StoreKind]:
    """Every store kind this installation can run, in the order of the table's columns."""
    from zarr.storage import LocalStore, ZipStore

    from zarrdb import SQLiteStore

    kinds = [
        StoreKind(
            "zarrdb",
            lambda p, ro: SQLiteStore(p, read_only=ro),
            ".zarrdb",
            "SQLiteStore, defaults",
            title="zarrdb (default)",
        ),
        StoreKind(
            "zarrdb-txn",
            lambda p, ro: SQLiteStore(p, read_only=ro),
            ".zarrdb",
            "SQLiteStore, the small-chunk ingest inside store.transaction()",
            writing=lambda store: store.transaction(),
            ingest_only=frozenset({"small"}),
        ),
        StoreKind(
            "zarrdb-off",
            lambda p, ro: SQLiteStore(p, read_only=ro, durability="off"),
            ".zarrdb",
            'SQLiteStore(durability="off"), the ingests',
            ingest_only=frozenset({ALL}),
            title='zarrdb durability="off"',
        ),
        StoreKind(
            "local",
            lambda p, ro: LocalStore(p, read_only=ro),
            ".zarr",
            "zarr's LocalStore (no fsync)",
            title="LocalStore",
        ),
        StoreKind(
            "local-fsync",
            lambda p, ro: LocalStore(p, read_only=ro),
            ".zarr",
            "LocalStore, then fsync of every file and directory it wrote (timed with the ingest)",
            finish=fsync_tree,
            ingest_only=frozenset({ALL}),
            title="LocalStore + fsync",
        ),
        StoreKind(
            "zip", lambda p, ro: ZipStore(p, mode="r" if ro else "w"), ".zip", "zarr's ZipStore"
        ),
        _memory("memory"),
    ]
    reference = _zarr_sqlite_class()
    if reference is not None:
        kinds.append(
            StoreKind(
                "zarr-sqlite",
                lambda p, ro: reference(p, read_only=ro),
                ".ref.zarrdb",
                "zarr-sqlite, the pure-Python SQLiteStore 1.0",
            )
        )
    return kinds


def close(store: Any) -> None:
    closer = getattr(store, "close", None)
    if closer is not None:
        closer()


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


# --- data ----------------------------------------------------------------------------------------


def synthetic_field(size: int, seed: int = 0) -> np.ndarray:
    """A smooth field (a few waves) plus noise, float32, size x size."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 8 * np.pi, size, dtype=np.float32)[:, None]
    x = np.linspace(0, 6 * np.pi, size, dtype=np.float32)[None, :]
    field_ = 280 + 15 * np.sin(x) * np.cos(y) + 5 * np.sin(0.3 * x + 0.7 * y)
    field_ = field_ + rng.normal(0, 0.25, (size, size)).astype(np.float32)
    return np.asarray(field_, dtype=np.float32)


def synthetic_cube(edge: int, seed: int = 0) -> np.ndarray:
    """A smooth volume plus noise, uint16, edge x edge x edge (a scanned volume, a model
    field in counts)."""
    rng = np.random.default_rng(seed)
    z = np.linspace(0, 4 * np.pi, edge, dtype=np.float32)[:, None, None]
    y = np.linspace(0, 3 * np.pi, edge, dtype=np.float32)[None, :, None]
    x = np.linspace(0, 2 * np.pi, edge, dtype=np.float32)[None, None, :]
    out = np.empty((edge, edge, edge), dtype=np.uint16)
    for i in range(edge):  # one plane at a time: no float copy of the whole cube
        plane = 30000 + 8000 * np.sin(x[0] + z[i]) * np.cos(y[0]) + rng.normal(0, 200, (edge, edge))
        out[i] = plane.astype(np.uint16)
    return out


# --- results -------------------------------------------------------------------------------------


@dataclass
class Result:
    workload: str
    store: str
    unit: str  # what one sample is: "s" (the whole workload), "us/op", or "x" (a speed-up)
    samples: list[float] = field(default_factory=list)
    nbytes: int = 0  # bytes moved per sample, for throughput

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float | None:
        """(largest - smallest sample) / median; None with fewer than two samples."""
        if len(self.samples) < 2 or self.median == 0:
            return None
        return (max(self.samples) - min(self.samples)) / self.median

    @property
    def flagged(self) -> bool:
        """Whether the samples spread too widely for the median to be quoted alone."""
        spread = self.spread
        return spread is not None and spread > MAX_SPREAD


MAX_SPREAD = 0.2  # a figure whose samples spread more than this is flagged


class Results(dict[tuple[str, str], Result]):
    """Results by (workload, store), in the order they were first recorded."""

    def record(self, workload: str, store: str, unit: str, value: float, nbytes: int = 0) -> None:
        if (workload, store) not in self:
            self[(workload, store)] = Result(workload, store, unit, nbytes=nbytes)
        self[(workload, store)].samples.append(value)

    def workloads(self) -> list[str]:
        return list(dict.fromkeys(w for w, _ in self))


# --- timing --------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> float:
    """Seconds `fn()` takes, after a `sync` (so no write-back of what ran before lands inside
    the sample) and a garbage collection (nor a collection of earlier garbage)."""
    settle()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def settle() -> None:
    """What every measured repetition starts from: dirty pages written back (`sync`, where the
    system has it) and earlier garbage collected."""
    if hasattr(os, "sync"):
        os.sync()
    gc.collect()


class PageCache:
    """Dropping the OS page cache before a cold read: `sync`, then writing 3 to
    /proc/sys/vm/drop_caches, which only root can do, on Linux. The first attempt decides:
    where it fails, cold reads read what the cache holds, and `status` says so. With
    ZARRDB_BENCH_KEEP_PAGE_CACHE=1 in the environment it is never dropped (the test suite sets
    it: a drop slows every other program on the machine)."""

    PATH = "/proc/sys/vm/drop_caches"

    def __init__(self, path: str = PATH) -> None:
        self.path = path
        self.works: bool | None = None
        self.why = ""

    def drop(self) -> bool:
        """Drop the cache; whether it was dropped."""
        if self.works is False:
            return False
        if os.environ.get("ZARRDB_BENCH_KEEP_PAGE_CACHE", "") not in ("", "0"):
            self.works, self.why = False, "ZARRDB_BENCH_KEEP_PAGE_CACHE is set"
            return False
        if not hasattr(os, "geteuid") or not os.path.exists(self.path):
            self.works, self.why = False, f"no {self.path} on this system"
            return False
        if os.geteuid() != 0:
            self.works, self.why = False, "not running as root"
            return False
        os.sync()
        try:
            with open(self.path, "w") as f:
                f.write("3\n")
        except OSError as exc:
            self.works, self.why = False, f"{self.path}: {exc.strerror or exc}"
            return False
        self.works = True
        return True

    def status(self) -> str | None:
        """A sentence on what the cold reads read from; None if none ran."""
        if self.works is None:
            return None
        if self.works:
            return "cold reads: the OS page cache was dropped before each (sync, then " \
                f"{self.path})"
        return f"cold reads: the OS page cache was NOT dropped ({self.why}); they read " \
            "whatever the cache held"


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a new event loop (in this thread)."""
    return asyncio.run(coroutine)


def in_threads(fn: Callable[..., None], args: list[tuple[Any, ...]]) -> None:
    """`fn(*a)` for each `a` in its own thread, all at once; the first error is raised here."""
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


def round_robin(variants: list[T], reps: int) -> Iterator[tuple[int, T]]:
    """(repetition, variant) with the variants in turn, reversed on odd repetitions, so that
    no variant always runs first after a slow phase of a shared machine."""
    for rep in range(reps):
        for v in variants if rep % 2 == 0 else reversed(variants):
            yield rep, v


# --- conditions of a run ------------------------------------------------------------------------


def machine_counters() -> tuple[float | None, float, float]:
    """(CPU seconds all processes used since boot (Linux; None elsewhere), CPU seconds this
    process used, a monotonic clock)."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
        # user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
        busy: float | None = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        busy = None
    t = os.times()
    return busy, t.user + t.system, time.monotonic()


def others_cpu_share(since: tuple[float | None, float, float]) -> float | None:
    """The share of the machine's CPU (0.5 = one of two cores) other processes used since
    `since` (from machine_counters); None where it cannot be told or the span is too short
    for the clock ticks to mean anything."""
    busy0, own0, wall0 = since
    busy1, own1, wall1 = machine_counters()
    if busy0 is None or busy1 is None or wall1 - wall0 < 0.25:
        return None
    others = max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall1 - wall0) / (os.cpu_count() or 1)
    return round(min(others, 1.0), 3)


def environment() -> dict[str, Any]:
    """The versions and the machine a run measured."""
    import numcodecs
    import zarr

    import zarrdb

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
