"""Fixtures of the engine benchmarks (issue 3): data sets written once per session, and
connections closed at the end of each test. Nothing here needs pytest-benchmark."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from zarrdb.cli.bench.harness import machine_counters, others_cpu_share

from ._common import (
    KIB,
    MIB,
    N_1M,
    N_16K,
    PAGE_SIZE,
    TREE_CHILDREN,
    TREE_GROUP,
    TREE_KEYS_PER_CHILD,
    open_stdlib,
    open_zarrdb,
    random_values,
    write_source,
)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """pytest-benchmark creates its storage folder (default ./.benchmarks) at start-up even when
    nothing is saved: unless a --benchmark-storage is given, point it at a temporary folder so
    that runs leave nothing in the repository."""
    try:
        storage = config.getoption("benchmark_storage")
    except ValueError:  # pytest-benchmark is not installed
        return
    if storage == "file://./.benchmarks":
        folder = os.path.join(tempfile.gettempdir(), "zarrdb-benchmarks")
        config.option.benchmark_storage = "file://" + folder


def pytest_collection_modifyitems(config, items):
    """Interleave the blocks of the benchmarks of a group: the tests of one group stay together
    (in the order the groups first appear), ordered by block first, so each variant's block k
    runs next to the other variants' block k."""
    here = os.path.dirname(__file__)
    order = {}
    keyed = []
    for index, item in enumerate(items):
        marker = item.get_closest_marker("benchmark")
        callspec = getattr(item, "callspec", None)
        if (
            marker is None
            or callspec is None
            or "block" not in callspec.params
            or not str(item.path).startswith(here)
        ):
            keyed.append(((index, 0, index), item))
            continue
        group = marker.kwargs.get("group", item.originalname)
        first = order.setdefault(group, index)
        block = callspec.params["block"]
        # Odd blocks run the variants in reverse order, so no variant always goes first.
        keyed.append(((first, block, -index if block % 2 else index), item))
    items[:] = [item for _, item in sorted(keyed, key=lambda pair: pair[0])]


@dataclass
class DataSet:
    name: str
    keys: list[str]
    zarrdb_path: Path  # the file zarrdb reads
    stdlib_path: Path  # a byte-for-byte copy that the standard module reads
    value_size: int = 0
    extra: dict = field(default_factory=dict)


def _make_dataset(tmp_path_factory, name: str, items: list[tuple[str, bytes]], **kw) -> DataSet:
    base = tmp_path_factory.mktemp(f"bench-{name}")
    source = base / "source.zarrdb"
    write_source(source, items)
    zpath = base / "zarrdb.zarrdb"
    spath = base / "stdlib.zarrdb"
    shutil.copyfile(source, zpath)
    shutil.copyfile(source, spath)
    source.unlink()
    return DataSet(name, [k for k, _ in items], zpath, spath, **kw)


@pytest.fixture(scope="session")
def data_16k(tmp_path_factory) -> DataSet:
    items = random_values(N_16K, 16 * KIB, seed=16)
    return _make_dataset(tmp_path_factory, "16k", items, value_size=16 * KIB)


@pytest.fixture(scope="session")
def data_1m(tmp_path_factory) -> DataSet:
    return _make_dataset(tmp_path_factory, "1m", random_values(N_1M, MIB, seed=1), value_size=MIB)


@pytest.fixture(scope="session")
def data_tree(tmp_path_factory) -> DataSet:
    """A group of 200 arrays with 500 keys each (metadata and chunks two levels down), plus a
    few keys before and after the group so that the range bounds matter."""
    value = b"\x00" * 16
    items = [("aaa/zarr.json", value), ("grp.json", value), ("zarr.json", value)]
    for child in range(TREE_CHILDREN):
        base = f"{TREE_GROUP}arr{child:03d}/"
        items.append((base + "zarr.json", value))
        for j in range(TREE_KEYS_PER_CHILD - 1):
            items.append((f"{base}c/{j // 50}/{j % 50}", value))
    items += [("grp0/zarr.json", value), ("zzz/c/0", value)]
    ds = _make_dataset(tmp_path_factory, "tree", items)
    ds.extra["expected"] = [f"arr{c:03d}/" for c in range(TREE_CHILDREN)]
    return ds


@pytest.fixture(scope="session")
def set_many_pairs() -> list[tuple[str, bytes]]:
    """4096 (key, 16 KiB value) pairs, written by both engines."""
    return random_values(4096, 16 * KIB, seed=4096)


class Connections:
    """Opens connections configured alike for both engines; closes them at the end of a test."""

    def __init__(self):
        self._open = []

    def zarrdb(self, path, **kwargs):
        db = open_zarrdb(path, **kwargs)
        self._open.append(db)
        return db

    def stdlib(self, path, **kwargs):
        con = open_stdlib(path, **kwargs)
        self._open.append(con)
        return con

    def close_all(self):
        while self._open:
            self._open.pop().close()


@pytest.fixture
def conns():
    c = Connections()
    try:
        yield c
    finally:
        c.close_all()


@pytest.fixture(autouse=True)
def _record_conditions(request):
    """In every benchmark's extra_info: the SQLite each engine runs on, the page size, and how
    busy the machine was with other processes during the test (0.5 = one of two cores), which
    is what a two-thread measurement cannot survive."""
    if "benchmark" not in request.fixturenames:
        yield
        return
    import zarrdb

    bench = request.getfixturevalue("benchmark")
    bench.extra_info["zarrdb_sqlite"] = zarrdb.sqlite_version
    bench.extra_info["stdlib_sqlite"] = sqlite3.sqlite_version
    bench.extra_info["page_size"] = PAGE_SIZE
    since = machine_counters()
    yield
    share = others_cpu_share(since)
    if share is not None:
        bench.extra_info["others_cpu_share"] = share
