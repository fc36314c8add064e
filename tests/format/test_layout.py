"""The physical layout of the files SQLiteStore creates (not part of the format: any layout is
a conforming file, and files of other layouts open the same): page size and pointer map."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest
from zarr.core.buffer import cpu

from zarrdb import SQLiteStore
from zarrdb import _tunables

from .builders import make_store_file


def _pragma(path, name):
    # Only after the store is closed: see "Python's `sqlite3` and zarrdb in one process" in
    # docs/guide/interop.md.
    with closing(sqlite3.connect(path)) as con:
        return con.execute(f"PRAGMA {name}").fetchone()[0]


@pytest.mark.parametrize("page_size", [None, 4096, 16384])
def test_new_file_layout(tmp_path, page_size):
    path = tmp_path / "layout.zarrdb"
    with SQLiteStore(path, page_size=page_size) as store:
        store.set_sync("big", cpu.Buffer.from_bytes(bytes(range(256)) * 4096))  # 1 MiB
    assert _pragma(path, "page_size") == (page_size or _tunables.DEFAULT_PAGE_SIZE)
    assert _pragma(path, "auto_vacuum") == 2  # incremental: the pointer map is kept
    assert _pragma(path, "integrity_check") == "ok"


def test_an_existing_file_keeps_its_layout(tmp_path):
    path = make_store_file(tmp_path / "plain.zarrdb", entries={}, page_size=4096)
    with SQLiteStore(path) as store:
        store.set_sync("k", cpu.Buffer.from_bytes(b"v" * 100_000))
    assert _pragma(path, "page_size") == 4096
    assert _pragma(path, "auto_vacuum") == 0
    with SQLiteStore(path, read_only=True) as store:
        assert store.get_sync("k", prototype=cpu.buffer_prototype).to_bytes() == b"v" * 100_000
