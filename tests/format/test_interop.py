"""Interoperability with zarr-sqlite, the pure-Python reference implementation of SQLiteStore
1.0 (PyPI zarr-sqlite 1.0.1, Python >= 3.12): files written by either read back equal through
the other.

zarr-sqlite runs on the standard-library sqlite3 in this process, so a file is never open in
both at once: each side closes its store before the other opens the file.
"""

from __future__ import annotations

import unicodedata
import warnings

import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype

from zarrdb import SQLiteStore

from .hierarchy import ARRAYS, check_hierarchy, write_hierarchy
from .sqlite_checks import assert_conforming, metadata, zarr_rows

zarr_sqlite = pytest.importorskip(
    "zarr_sqlite",
    reason="zarr-sqlite (the reference implementation) is not installed; it needs Python >= 3.12",
)
RefStore = zarr_sqlite.SQLiteStore

MODES = pytest.mark.parametrize("read_only", [True, False], ids=["read", "write"])


def _buf(data: bytes):
    return default_buffer_prototype().buffer.from_bytes(data)




@pytest.mark.parametrize("journal_mode", ["WAL", "DELETE"])
@MODES
def test_written_by_zarr_sqlite_read_by_zarrdb(tmp_path, journal_mode, read_only):
    path = tmp_path / "ref.zarrdb"
    ref = RefStore(path, journal_mode=journal_mode)
    write_hierarchy(ref)
    ref.close()

    store = SQLiteStore(path, read_only=read_only)
    # (mode "r" on a writable store would make zarr read through a read-only copy of it, which
    # nobody closes; "r+" reads through this store itself)
    check_hierarchy(zarr.open_group(store, mode="r" if store.read_only else "r+"))
    store.close()
    if not read_only:
        assert_conforming(path)  # zarrdb's writer leaves it one file in DELETE mode


@MODES
def test_written_by_zarrdb_read_by_zarr_sqlite(tmp_path, read_only):
    path = tmp_path / "zarrdb.zarrdb"
    store = SQLiteStore(path)
    write_hierarchy(store)
    store.close()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. zarr-sqlite's warning about the application id
        ref = RefStore(path, read_only=read_only)
        try:
            check_hierarchy(zarr.open_group(ref, mode="r" if ref.read_only else "r+"))
        finally:
            ref.close()


def test_both_write_the_same_rows(tmp_path):
    """The same zarr calls give the same zarr table in both implementations."""
    ref_path, our_path = tmp_path / "ref.zarrdb", tmp_path / "ours.zarrdb"
    ref = RefStore(ref_path, journal_mode="DELETE")
    write_hierarchy(ref)
    ref.close()
    store = SQLiteStore(our_path)
    write_hierarchy(store)
    store.close()

    assert zarr_rows(our_path) == zarr_rows(ref_path)
    ref_meta, our_meta = metadata(ref_path), metadata(our_path)
    for key in ("sqlitestore_version", "compatible_flags", "incompatible_flags"):
        assert our_meta[key] == ref_meta[key], key


def test_modified_back_and_forth(tmp_path):
    path = tmp_path / "shared.zarrdb"
    ref = RefStore(path)
    write_hierarchy(ref)
    ref.close()

    # zarrdb changes a zarr-sqlite file ...
    store = SQLiteStore(path)
    root = zarr.open_group(store, mode="r+")
    root["int32"][:] = np.arange(48, dtype="i4").reshape(6, 8) + 1000
    root.create_array("added", shape=(7,), chunks=(3,), dtype="u1")[:] = np.arange(7) * 2
    root["sub"].attrs["changed_by"] = "zarrdb"
    del root["partial"]
    store.close()
    assert_conforming(path)

    # ... zarr-sqlite reads the changes and makes its own ...
    ref = RefStore(path)
    root = zarr.open_group(ref, mode="r+")
    np.testing.assert_array_equal(root["int32"][:], np.arange(48).reshape(6, 8) + 1000)
    np.testing.assert_array_equal(root["added"][:], np.arange(7) * 2)
    assert root["sub"].attrs["changed_by"] == "zarrdb"
    assert "partial" not in root
    root["sub/float64"][:] = np.arange(10, dtype="f8") * 10
    root.create_array("from_ref", shape=(2, 2), chunks=(1, 2), dtype="f4")[:] = [[1, 2], [3, 4]]
    ref.close()

    # ... which zarrdb reads back.
    store = SQLiteStore(path, read_only=True)
    root = zarr.open_group(store, mode="r")
    np.testing.assert_array_equal(root["sub/float64"][:], np.arange(10) * 10.0)
    np.testing.assert_array_equal(root["from_ref"][:], np.array([[1, 2], [3, 4]], "f4"))
    np.testing.assert_array_equal(root["int8"][:], ARRAYS["int8"][0])
    store.close()


def _unicode_names():
    return [
        "données/Ωμέγα",
        unicodedata.normalize("NFC", "café"),
        unicodedata.normalize("NFD", "café"),
        "emoji-🧪",
    ]


def _write_unicode(store):
    root = zarr.open_group(store, mode="w")
    for i, name in enumerate(_unicode_names()):
        root.create_array(name, shape=(2,), chunks=(2,), dtype="i4")[:] = [i, i + 10]


def _check_unicode(store):
    root = zarr.open_group(store, mode="r")
    for i, name in enumerate(_unicode_names()):
        assert root[name][:].tolist() == [i, i + 10], name


@pytest.mark.parametrize("writer", ["zarr-sqlite", "zarrdb"])
def test_unicode_names_both_ways(tmp_path, writer):
    path = tmp_path / "unicode.zarrdb"
    write_store = RefStore(path) if writer == "zarr-sqlite" else SQLiteStore(path)
    _write_unicode(write_store)
    write_store.close()
    keys = set(zarr_rows(path))
    for name in _unicode_names():
        assert f"{name}/c/0" in keys, name

    read_store = SQLiteStore(path, read_only=True) if writer == "zarr-sqlite" else RefStore(
        path, read_only=True
    )
    _check_unicode(read_store)
    read_store.close()


async def test_raw_keys_and_values_both_ways(tmp_path):
    """Store-level: keys including the empty key, and arbitrary bytes, exactly as given."""
    values = {"": b"root", "a": b"", "a/b": bytes(range(256)), "x/ü/ÿ": b"\x00\xff" * 100}
    proto = default_buffer_prototype()

    ours = tmp_path / "ours.zarrdb"
    store = await SQLiteStore.open(ours)
    for key, value in values.items():
        await store.set(key, _buf(value))
    store.close()
    ref = RefStore(ours, read_only=True)
    try:
        for key, value in values.items():
            got = await ref.get(key, proto)
            assert got is not None and got.to_bytes() == value, key
        assert sorted([k async for k in ref.list()]) == sorted(values)
    finally:
        ref.close()

    theirs = tmp_path / "theirs.zarrdb"
    ref = RefStore(theirs)
    try:
        for key, value in values.items():
            await ref.set(key, _buf(value))
    finally:
        ref.close()
    store = await SQLiteStore.open(theirs, read_only=True)
    try:
        for key, value in values.items():
            got = await store.get(key, proto)
            assert got is not None and got.to_bytes() == value, key
        assert sorted([k async for k in store.list()]) == sorted(values)
    finally:
        store.close()
