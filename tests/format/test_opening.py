"""Opening validation: which files a reader or writer must refuse, with which zarrdb.errors
exception, and which it must accept. Each bad file is real, made with the stdlib sqlite3 by
tests/format/builders.py. A refused open must leave the file exactly as it was."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype

from zarrdb import SQLiteStore
from zarrdb.errors import (
    CantOpenError,
    FormatError,
    IncompatibleFlagError,
    NotADatabaseError,
    NotAZarrDBError,
    UnsupportedVersionError,
)

from . import builders
from .builders import STORE_ARRAY_VALUES, STORE_GROUP_ATTRS
from .sqlite_checks import (
    assert_conforming,
    assert_only_allowed_metadata_written,
    file_state,
    metadata,
    query,
    sidecars,
    zarr_rows,
)

MODES = pytest.mark.parametrize("read_only", [True, False], ids=["read", "write"])


async def _refused(path, read_only, exc_type, *, match_path=True):
    """Open `path`, expect `exc_type` naming the file, and check the file was not touched."""
    before = file_state(path)
    with pytest.raises(exc_type) as excinfo:
        store = await SQLiteStore.open(path, read_only=read_only)
        store.close()  # not reached when the open is refused
    if match_path:
        assert str(path) in str(excinfo.value), str(excinfo.value)
    assert file_state(path) == before, "a refused open modified the file"
    return excinfo.value


def _read_hand_written(path, read_only=True):
    """The builders' hand-written hierarchy reads back through zarr on zarrdb."""
    store = SQLiteStore(path, read_only=read_only)
    try:
        root = zarr.open_group(store, mode="r" if store.read_only else "r+")
        assert dict(root.attrs) == STORE_GROUP_ATTRS
        np.testing.assert_array_equal(root["a"][:], np.array(STORE_ARRAY_VALUES, dtype="i4"))
    finally:
        store.close()


async def _keys(path, read_only=True):
    store = await SQLiteStore.open(path, read_only=read_only)
    try:
        return sorted([key async for key in store.list()])
    finally:
        store.close()


# --- not SQLiteStore files ------------------------------------------------------------------------


@MODES
async def test_random_bytes_are_not_a_database(tmp_path, read_only):
    path = builders.make_not_sqlite(tmp_path / "noise.zarrdb")
    await _refused(path, read_only, NotADatabaseError)
    assert sidecars(path) == []


@MODES
async def test_another_applications_database(tmp_path, read_only):
    path = builders.make_foreign_db(tmp_path / "shop.db", tables=("customers", "orders"))
    error = await _refused(path, read_only, NotAZarrDBError)
    message = str(error)
    assert "customers" in message and "orders" in message, message
    # the other application's data is intact and no SQLiteStore table was added
    tables = {n for (n,) in query(path, "SELECT name FROM sqlite_schema WHERE type='table'")}
    assert tables == {"customers", "orders"}
    assert query(path, "PRAGMA application_id") == [(0,)]


@MODES
async def test_a_damaged_schema_with_a_table_name_that_is_not_text(tmp_path, read_only):
    """A schema row whose name is a blob (a damaged file, or one edited by hand) is reported
    in the refusal rather than breaking it."""
    import sqlite3

    path = builders.make_foreign_db(tmp_path / "odd.db", tables=("customers",))
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA writable_schema = ON")
        db.execute("UPDATE sqlite_schema SET name = CAST(name AS BLOB) WHERE name = 'customers'")
    assert query(path, "SELECT typeof(name) FROM sqlite_schema WHERE type='table'") == [("blob",)]
    error = await _refused(path, read_only, NotAZarrDBError)
    assert "customers" in str(error), str(error)


@MODES
async def test_only_the_zarr_table(tmp_path, read_only):
    path = builders.make_zarr_table_only(tmp_path / "half.zarrdb")
    error = await _refused(path, read_only, NotAZarrDBError)
    assert "zarr_sqlitestore_metadata" in str(error)


@MODES
async def test_missing_required_metadata(tmp_path, read_only):
    path = builders.make_store_file(
        tmp_path / "no-version.zarrdb", metadata={"sqlitestore_version": None}
    )
    error = await _refused(path, read_only, FormatError)
    assert "sqlitestore_version" in str(error)


# --- versions ---------------------------------------------------------------------------------


@MODES
@pytest.mark.parametrize("version", ["2.0", "3.1", "10.0"])
async def test_unsupported_major_version(tmp_path, read_only, version):
    path = builders.make_version(tmp_path / "future.zarrdb", version)
    error = await _refused(path, read_only, UnsupportedVersionError)
    assert version in str(error)


@MODES
@pytest.mark.parametrize("version", ["not-a-version", ""])
async def test_unparsable_version_is_refused(tmp_path, read_only, version):
    path = builders.make_version(tmp_path / "garbled.zarrdb", version)
    await _refused(path, read_only, FormatError)


@MODES
@pytest.mark.parametrize("version", ["1.0", "1.7", "1.12"])
async def test_newer_minor_version_is_read(tmp_path, read_only, version):
    path = builders.make_version(tmp_path / "minor.zarrdb", version)
    assert await _keys(path, read_only) == sorted(builders.hand_written_entries())
    _read_hand_written(path, read_only)


# --- flags -------------------------------------------------------------------------------------


@MODES
@pytest.mark.parametrize("flags", ["some_future_feature", "a,b", " spaced ", ",x,"])
async def test_unknown_incompatible_flag_is_refused(tmp_path, read_only, flags):
    path = builders.make_flags(tmp_path / "incompatible.zarrdb", incompatible=flags)
    error = await _refused(path, read_only, IncompatibleFlagError)
    first = [f.strip() for f in flags.split(",") if f.strip()][0]
    assert first in str(error)


@MODES
@pytest.mark.parametrize("flags", ["some_future_feature", "a,b", " x , y "])
async def test_unknown_compatible_flags_are_ignored(tmp_path, read_only, flags):
    path = builders.make_flags(tmp_path / "compatible.zarrdb", compatible=flags)
    assert await _keys(path, read_only) == sorted(builders.hand_written_entries())
    _read_hand_written(path, read_only)


@MODES
async def test_unknown_metadata_keys_are_ignored(tmp_path, read_only):
    extra = {"comment": "made by hand", "sqlitestore_future_option": "42"}
    path = builders.make_extra_metadata(tmp_path / "extra.zarrdb", extra)
    _read_hand_written(path, read_only)


@MODES
@pytest.mark.parametrize(
    "records",
    [
        {"created_by": None, "modified_at": None},  # both optional records absent
        {"created_by": "zarrdb 999.0 (says another tool)"},  # must not be interpreted
        {"modified_at": "yesterday afternoon"},  # not RFC 3339: may be treated as absent
        {"modified_at": "2024-01-02T03:04:05"},  # no timezone: UTC
    ],
    ids=["no-optional", "created_by", "bad-modified_at", "naive-modified_at"],
)
async def test_optional_records_do_not_affect_opening(tmp_path, read_only, records):
    path = builders.make_store_file(tmp_path / "optional.zarrdb", metadata=records)
    _read_hand_written(path, read_only)


async def test_writing_to_a_file_with_unknown_records_adds_only_known_ones(tmp_path):
    extra = {"comment": "made by hand"}
    path = builders.make_store_file(
        tmp_path / "extra.zarrdb",
        metadata={**extra, "created_by": None, "modified_at": None, "compatible_flags": "zz"},
    )
    before = metadata(path)
    store = await SQLiteStore.open(path)
    await store.set("b", default_buffer_prototype().buffer.from_bytes(b"new"))
    store.close()
    after = metadata(path)
    assert_only_allowed_metadata_written(before, after)
    for key in ("sqlitestore_version", "compatible_flags", "incompatible_flags", "comment"):
        assert after[key] == before[key], key
    assert zarr_rows(path)["b"] == b"new"


# --- application id ------------------------------------------------------------------------------


@pytest.mark.parametrize("application_id", [0, 0x12345678, 0x10B50761])
async def test_wrong_application_id_refused_for_writing(tmp_path, application_id):
    path = builders.make_wrong_application_id(tmp_path / "appid.zarrdb", application_id)
    error = await _refused(path, False, FormatError)
    assert f"{application_id:#010x}" in str(error), str(error)


@pytest.mark.parametrize("application_id", [0, 0x12345678])
async def test_wrong_application_id_read_with_a_warning(tmp_path, application_id):
    path = builders.make_wrong_application_id(tmp_path / "appid.zarrdb", application_id)
    before = file_state(path)
    with pytest.warns(UserWarning, match="application id") as record:
        store = await SQLiteStore.open(path, read_only=True)
    assert any(str(path) in str(w.message) for w in record)
    try:
        keys = sorted([key async for key in store.list()])
    finally:
        store.close()
    assert keys == sorted(builders.hand_written_entries())
    assert file_state(path) == before


async def test_right_application_id_opens_without_warning(tmp_path):
    path = builders.make_store_file(tmp_path / "good.zarrdb")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for read_only in (True, False):
            store = await SQLiteStore.open(path, read_only=read_only)
            store.close()


# --- empty, missing and odd paths -------------------------------------------------------------------


async def test_empty_file_is_initialised_for_writing(tmp_path):
    path = builders.make_empty_file(tmp_path / "empty.zarrdb")
    store = await SQLiteStore.open(path)
    await store.set("k", default_buffer_prototype().buffer.from_bytes(b"v"))
    store.close()
    meta = assert_conforming(path)
    assert set(meta) >= {"sqlitestore_version", "compatible_flags", "incompatible_flags"}
    assert zarr_rows(path) == {"k": b"v"}


async def test_empty_file_is_initialised_by_zarr(tmp_path):
    path = builders.make_empty_file(tmp_path / "empty.zarrdb")
    store = SQLiteStore(path)
    zarr.open_group(store, mode="w").attrs["x"] = 1
    store.close()
    assert_conforming(path)
    store = SQLiteStore(path, read_only=True)
    assert dict(zarr.open_group(store, mode="r").attrs) == {"x": 1}
    store.close()


async def test_empty_file_is_refused_read_only_and_left_alone(tmp_path):
    """A 0-byte file has no SQLiteStore tables: a reader rejects it, and must not write to it."""
    path = builders.make_empty_file(tmp_path / "empty.zarrdb")
    await _refused(path, True, NotAZarrDBError)
    assert path.stat().st_size == 0
    assert sidecars(path) == []


async def test_empty_sqlite_database_is_refused_read_only(tmp_path):
    path = builders.make_empty_sqlite(tmp_path / "blank.zarrdb")
    await _refused(path, True, NotAZarrDBError)


async def test_missing_file_read_only(tmp_path):
    path = tmp_path / "missing.zarrdb"
    with pytest.raises(FileNotFoundError) as excinfo:
        await SQLiteStore.open(path, read_only=True)
    assert str(path) in str(excinfo.value)
    assert os.listdir(tmp_path) == []


async def test_missing_file_is_created_for_writing(tmp_path):
    path = tmp_path / "new.zarrdb"
    store = await SQLiteStore.open(path)
    store.close()
    assert_conforming(path)
    assert zarr_rows(path) == {}


@MODES
async def test_directory_is_refused(tmp_path, read_only):
    path = tmp_path / "a-directory.zarrdb"
    path.mkdir()
    (path / "zarr.json").write_text("{}")
    with pytest.raises(CantOpenError) as excinfo:
        await SQLiteStore.open(path, read_only=read_only)
    message = str(excinfo.value)
    assert str(path) in message and "directory" in message, message
    assert sorted(os.listdir(path)) == ["zarr.json"]
    assert sorted(os.listdir(tmp_path)) == ["a-directory.zarrdb"]


async def test_read_only_open_and_reads_leave_the_file_untouched(tmp_path):
    path = builders.make_store_file(tmp_path / "pristine.zarrdb")
    before = file_state(path)
    _read_hand_written(path, read_only=True)
    assert await _keys(path, True) == sorted(builders.hand_written_entries())
    assert file_state(path) == before
