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
    `ingest_only` set runs only the ingests of those data sets ("small", "large", "cube"): a
    variant of another kind whose reads would be the same."""

    name: str
    make: Callable[[Path, bool], Any]  # (path, read_only) -> store
    suffix: str
    summary: str
    writing: Callable[[Any], contextlib.AbstractContextManager[Any]] = lambda store: (
        contextlib.nullcontext()
    )
    finish: Callable[[Path], None] | None = None
    ingest_only: frozenset[str] | None = None

    def path(self, root: Path, label: str) -> Path:
        return root / f"{self.name}-{label}{self.suffix}"

    def runs(self, family: str, data: str | None = None) -> bool:
        """Whether this kind takes part in a workload of `family` on the data set `data`."""
        if self.ingest_only is None:
            return True
        return family == "ingest" and data in self.ingest_only


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
            "zarrdb", lambda p, ro: SQLiteStore(p, read_only=ro), ".zarrdb", "SQLiteStore, defaults"
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
            'SQLiteStore(durability="off"), the large-chunk ingests',
            ingest_only=frozenset({"large", "cube"}),
        ),
        StoreKind(
            "local",
            lambda p, ro: LocalStore(p, read_only=ro),
            ".zarr",
            "zarr's LocalStore (no fsync)",
        ),
        StoreKind(
            "local-fsync",
            lambda p, ro: LocalStore(p, read_only=ro),
            ".zarr",
            "LocalStore, then fsync of every file and directory it wrote (timed with the ingest)",
            finish=fsync_tree,
            ingest_only=frozenset({"small", "large", "cube"}),
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
    """Seconds `fn()` takes, after a garbage collection (so no collection of earlier garbage
    lands inside the sample)."""
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


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
