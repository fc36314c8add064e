"""zarr's own store test suite, run against SQLiteStore.

The `get`/`set` helpers bypass the store: they read and write the file with Python's standard
`sqlite3` module. Two SQLite libraries in one process do not share their file locks, so the
helpers close the store first (it reopens by itself on its next use): the pattern docs/guide/interop.md
documents for using the standard `sqlite3` module on a file zarrdb also has open.
"""

import sqlite3

import pytest
from zarr.core.buffer import cpu
from zarr.testing.store import StoreTests

from zarrdb import SQLiteStore


def _stdlib(store: SQLiteStore) -> sqlite3.Connection:
    store.close()
    return sqlite3.connect(store.path, timeout=10, isolation_level=None)


class TestSQLiteStore(StoreTests[SQLiteStore, cpu.Buffer]):
    store_cls = SQLiteStore
    buffer_cls = cpu.Buffer

    @pytest.fixture
    def store_kwargs(self, tmp_path):
        path = tmp_path / "contract.zarrdb"
        # The file must exist for the read-only variants of the contract tests.
        _create(path)
        return {"path": str(path)}

    async def set(self, store, key, value):
        con = _stdlib(store)
        try:
            con.execute(
                "INSERT INTO zarr(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
                (key, value.to_bytes()),
            )
        finally:
            con.close()

    async def get(self, store, key):
        con = _stdlib(store)
        try:
            row = con.execute("SELECT v FROM zarr WHERE k = ?", (key,)).fetchone()
        finally:
            con.close()
        if row is None:
            raise KeyError(key)
        return self.buffer_cls.from_bytes(row[0])

    def test_store_repr(self, store):
        assert repr(store) == f"SQLiteStore({store.path!r})"

    def test_store_supports_writes(self, store):
        assert store.supports_writes

    def test_store_supports_listing(self, store):
        assert store.supports_listing

    def test_store_supports_consolidated_metadata(self, store):
        assert store.supports_consolidated_metadata


def _create(path):
    SQLiteStore(path).ensure_open()


def test_rollback_journal_option(tmp_path):
    """journal="delete" (for bulk loads) stores and reads the same, and leaves one file."""
    import numpy as np
    import zarr

    path = tmp_path / "bulk.zarrdb"
    data = np.arange(64 * 64, dtype="f4").reshape(64, 64)
    with SQLiteStore(path, journal="delete") as store:
        arr = zarr.create_array(store, shape=data.shape, chunks=(16, 16), dtype="f4")
        arr[:] = data
        con_mode = store.file_info()["journal_mode"]
    assert con_mode == "delete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bulk.zarrdb"]
    with SQLiteStore(path, read_only=True) as store:
        np.testing.assert_array_equal(zarr.open_array(store, mode="r")[:], data)
    with pytest.raises(ValueError, match="journal"):
        SQLiteStore(path, journal="memory")
