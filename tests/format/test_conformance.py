"""Every "must" of the SQLiteStore 1.0 spec, checked with the standard-library sqlite3 on files
zarrdb wrote through zarr (and then closed)."""

from __future__ import annotations

import time
import unicodedata
from contextlib import closing
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import MemoryStore

import zarrdb
from zarrdb import SQLiteStore
from zarrdb.errors import InvalidKeyError

from .builders import ALLOWED_METADATA_KEYS, APPLICATION_ID
from .hierarchy import check_hierarchy, write_hierarchy
from .sqlite_checks import (
    assert_conforming,
    connect_ro,
    header,
    metadata,
    parse_rfc3339_utc,
    query,
    sidecars,
    valid_key,
    zarr_rows,
)

METADATA = "zarr_sqlitestore_metadata"


def _buf(data: bytes):
    return default_buffer_prototype().buffer.from_bytes(data)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A file zarrdb wrote through zarr (sample hierarchy), closed; the same hierarchy written
    to a zarr MemoryStore (what zarr hands to a store); and the UTC time window of the writes."""
    path = tmp_path_factory.mktemp("written") / "sample.zarrdb"
    before = datetime.now(timezone.utc)
    store = SQLiteStore(path)
    write_hierarchy(store)
    store.close()
    after = datetime.now(timezone.utc)
    memory: dict = {}
    write_hierarchy(MemoryStore(memory))
    oracle = {key: buf.to_bytes() for key, buf in memory.items()}
    return path, oracle, before, after


# --- the file and its schema -------------------------------------------------------------------


def test_is_an_sqlite3_file(written):
    path, *_ = written
    assert header(path)[:16] == b"SQLite format 3\x00"


def test_application_id(written):
    path, *_ = written
    assert query(path, "PRAGMA application_id") == [(0x10B50760,)]
    assert int.from_bytes(header(path)[68:72], "big") == 0x10B50760 == APPLICATION_ID


def test_exactly_two_tables(written):
    path, *_ = written
    objects = query(path, "SELECT type, name, tbl_name, sql FROM sqlite_schema")
    tables = sorted(name for kind, name, _, _ in objects if kind == "table")
    assert tables == ["zarr", METADATA]
    # Anything else may only be the indices SQLite makes for the PRIMARY KEYs.
    for kind, name, table, sql in objects:
        if kind != "table":
            assert kind == "index" and name.startswith("sqlite_autoindex_"), (kind, name)
            assert sql is None and table in ("zarr", METADATA)


@pytest.mark.parametrize("table, value_type", [(METADATA, "TEXT"), ("zarr", "BLOB")])
def test_columns_types_not_null_primary_key(written, table, value_type):
    path, *_ = written
    # cid, name, type, notnull, dflt_value, pk
    info = query(path, f"PRAGMA table_info({table})")
    assert [(name, kind.upper(), notnull, pk) for _, name, kind, notnull, _, pk in info] == [
        ("k", "TEXT", 1, 1),
        ("v", value_type, 1, 0),
    ]


def test_keys_use_binary_collation(written):
    """Key comparisons follow the zarr spec: the primary key index uses BINARY collation."""
    path, *_ = written
    indexes = query(path, "PRAGMA index_list(zarr)")  # seq, name, unique, origin, partial
    pk = [row[1] for row in indexes if row[3] == "pk"]
    assert len(pk) == 1
    key_columns = [row for row in query(path, f"PRAGMA index_xinfo({pk[0]})") if row[5]]
    assert [(row[2], row[4]) for row in key_columns] == [("k", "BINARY")]


# --- metadata records ---------------------------------------------------------------------------


def test_metadata_records(written):
    path, *_ = written
    meta = metadata(path)
    assert set(meta) <= ALLOWED_METADATA_KEYS, f"unknown metadata keys {set(meta) - ALLOWED_METADATA_KEYS}"
    assert meta["sqlitestore_version"] == "1.0"
    assert meta["compatible_flags"] == ""
    assert meta["incompatible_flags"] == ""
    assert meta["created_by"] == f"zarrdb {zarrdb.__version__}"
    assert "modified_at" in meta


def test_metadata_values_are_text_not_null(written):
    path, *_ = written
    assert query(path, f"SELECT count(*) FROM {METADATA} WHERE k IS NULL OR v IS NULL") == [(0,)]
    assert {t for (t,) in query(path, f"SELECT DISTINCT typeof(v) FROM {METADATA}")} == {"text"}
    assert {t for (t,) in query(path, f"SELECT DISTINCT typeof(k) FROM {METADATA}")} == {"text"}


def test_modified_at_is_rfc3339_utc(written):
    path, _, before, after = written
    text = metadata(path)["modified_at"]
    moment = parse_rfc3339_utc(text)  # regex: YYYY-MM-DDTHH:MM:SS[.fff]Z
    # milliseconds are truncated: allow a little slack on both sides
    assert before - timedelta(milliseconds=2) <= moment <= after + timedelta(milliseconds=2), (
        text,
        before,
        after,
    )
    # SQLite itself understands it as a time-value (the spec's appendix relies on that)
    assert query(path, "SELECT julianday(?) IS NOT NULL", (text,)) == [(1,)]


def _modified_at(path) -> datetime:
    return parse_rfc3339_utc(metadata(path)["modified_at"])


async def _set_then_close(path, key, data):
    store = await SQLiteStore.open(path)
    await store.set(key, _buf(data))
    store.close()


async def _delete_then_close(path, key):
    store = await SQLiteStore.open(path)
    await store.delete(key)
    store.close()


async def _transaction_then_close(path, key, data):
    store = await SQLiteStore.open(path)
    with store.transaction():
        store.set_sync(key, _buf(data))
    store.close()


def _zarr_write_then_close(path):
    store = SQLiteStore(path)
    arr = zarr.open_array(store, path="x", mode="r+")
    arr[:] = np.arange(4, dtype="i4") + 100
    store.close()


@pytest.mark.parametrize("how", ["zarr", "set", "delete", "transaction"])
async def test_modified_at_advances_with_each_committed_write(tmp_path, how):
    path = tmp_path / "touched.zarrdb"
    store = SQLiteStore(path)
    root = zarr.open_group(store, mode="w")
    root.create_array("x", shape=(4,), chunks=(2,), dtype="i4")[:] = np.arange(4, dtype="i4")
    store.close()
    first = _modified_at(path)
    time.sleep(0.02)  # timestamps have millisecond resolution

    if how == "zarr":
        _zarr_write_then_close(path)
    elif how == "set":
        await _set_then_close(path, "x/c/0", b"\0" * 8)
    elif how == "delete":
        await _delete_then_close(path, "x/c/1")
    else:
        await _transaction_then_close(path, "x/c/1", b"\1" * 8)

    second = _modified_at(path)
    assert second > first, (first, second)
    assert second <= datetime.now(timezone.utc) + timedelta(milliseconds=2)
    assert_conforming(path)


async def test_modified_at_after_close_covers_the_last_of_many_commits(tmp_path):
    """Group commits in quick succession do not all write modified_at, but once the store is
    closed it is no older than the last committed write."""
    path = tmp_path / "burst.zarrdb"
    store = await SQLiteStore.open(path)
    await store.set("first", _buf(b"1"))
    time.sleep(0.05)
    for i in range(20):
        await store.set(f"k{i}", _buf(b"x" * 100))
    before_last = datetime.now(timezone.utc) - timedelta(milliseconds=2)
    await store.set("last", _buf(b"2"))
    store.close()
    assert _modified_at(path) >= before_last, (_modified_at(path), before_last)
    assert_conforming(path)


async def test_read_only_use_changes_nothing(written):
    path, *_ = written
    before = metadata(path)
    stat = path.stat()
    content = path.read_bytes()
    store = await SQLiteStore.open(path, read_only=True)
    check_hierarchy(zarr.open_group(store, mode="r"))
    store.close()
    assert metadata(path) == before
    assert path.read_bytes() == content
    assert path.stat().st_mtime_ns == stat.st_mtime_ns
    assert sidecars(path) == []


# --- the zarr table -------------------------------------------------------------------------


def test_values_are_blobs_exactly_as_zarr_wrote_them(written):
    path, oracle, *_ = written
    assert query(path, "SELECT DISTINCT typeof(v) FROM zarr") == [("blob",)]
    rows = zarr_rows(path)
    assert sorted(rows) == sorted(oracle)
    for key, value in oracle.items():
        assert rows[key] == value, key


def test_no_null_keys_or_values(written):
    path, *_ = written
    assert query(path, "SELECT count(*) FROM zarr WHERE k IS NULL OR v IS NULL") == [(0,)]
    assert query(path, "SELECT DISTINCT typeof(k) FROM zarr") == [("text",)]


def test_keys_are_valid(written):
    path, *_ = written
    keys = [k for (k,) in query(path, "SELECT k FROM zarr")]
    assert keys
    for key in keys:
        assert valid_key(key), key
        assert not key.startswith("/") and not key.endswith("/") and "//" not in key


def test_written_hierarchy_reads_back_through_zarrdb(written):
    path, *_ = written
    store = SQLiteStore(path, read_only=True)
    check_hierarchy(zarr.open_group(store, mode="r"))
    store.close()


# --- after close: one self-contained file ---------------------------------------------------------


def test_closed_file_is_delete_mode_without_sidecars(written):
    path, *_ = written
    assert sidecars(path) == []
    assert query(path, "PRAGMA journal_mode") == [("delete",)]
    # file format write/read versions: 1 = rollback journal (2 would be WAL)
    head = header(path)
    assert (head[18], head[19]) == (1, 1)


def test_integrity_check(written):
    path, *_ = written
    assert query(path, "PRAGMA integrity_check") == [("ok",)]


def test_conforming_after_overwrites_and_deletes(tmp_path):
    """Many small commits, overwrites, deletions and a deleted subtree leave a sound file."""
    path = tmp_path / "churn.zarrdb"
    store = SQLiteStore(path)
    root = zarr.open_group(store, mode="w")
    arr = root.create_array("a", shape=(100,), chunks=(3,), dtype="f8")
    for i in range(5):
        arr[:] = np.arange(100) * i
    root.create_array("gone/b", shape=(10,), chunks=(1,), dtype="i1")[:] = 1
    del root["gone"]
    store.close()
    assert_conforming(path)
    assert not [k for k in zarr_rows(path) if k.startswith("gone")]
    store = SQLiteStore(path, read_only=True)
    np.testing.assert_array_equal(zarr.open_array(store, path="a", mode="r")[:], np.arange(100) * 4)
    store.close()


# --- keys stored exactly --------------------------------------------------------------------------


def _hex_key(key: str, encoding: str) -> str:
    codec = {"UTF-8": "utf-8", "UTF-16le": "utf-16-le", "UTF-16be": "utf-16-be"}[encoding]
    return key.encode(codec).hex().upper()


def test_unicode_keys_are_stored_byte_exact(tmp_path):
    path = tmp_path / "unicode.zarrdb"
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    store = SQLiteStore(path)
    root = zarr.open_group(store, mode="w")
    root.create_group("données").create_array("Ωμέγα", shape=(2,), chunks=(2,), dtype="i4")[
        :
    ] = [7, 8]
    root.create_array(nfc, shape=(1,), chunks=(1,), dtype="i4")[:] = [1]
    root.create_array(nfd, shape=(1,), chunks=(1,), dtype="i4")[:] = [2]
    store.close()

    encoding = query(path, "PRAGMA encoding")[0][0]
    stored_hex = {h for (h,) in query(path, "SELECT hex(k) FROM zarr")}
    expected_keys = [
        "données/zarr.json",
        "données/Ωμέγα/zarr.json",
        "données/Ωμέγα/c/0",
        f"{nfc}/zarr.json",
        f"{nfc}/c/0",
        f"{nfd}/zarr.json",
        f"{nfd}/c/0",
    ]
    for key in expected_keys:
        assert _hex_key(key, encoding) in stored_hex, key
    # the NFC and NFD names are two distinct keys
    assert _hex_key(f"{nfc}/c/0", encoding) != _hex_key(f"{nfd}/c/0", encoding)
    assert query(path, "SELECT count(*) FROM zarr WHERE k IN (?, ?)", (f"{nfc}/c/0", f"{nfd}/c/0")) == [(2,)]
    # and the keys come back as the same str through the stdlib
    assert set(expected_keys) <= set(zarr_rows(path))

    store = SQLiteStore(path, read_only=True)
    root = zarr.open_group(store, mode="r")
    assert root["données/Ωμέγα"][:].tolist() == [7, 8]
    assert root[nfc][:].tolist() == [1]
    assert root[nfd][:].tolist() == [2]
    assert nfc in set(root.array_keys()) and nfd in set(root.array_keys())
    store.close()


# --- invalid keys are never written ---------------------------------------------------------------


@pytest.mark.parametrize("key", ["/a", "a/", "a//b", "/", "//", "/a/b", "a/b/"])
@pytest.mark.parametrize("method", ["set", "set_if_not_exists"])
async def test_invalid_keys_are_refused(tmp_path, key, method):
    path = tmp_path / "keys.zarrdb"
    store = await SQLiteStore.open(path)
    await store.set("ok", _buf(b"fine"))
    with pytest.raises(InvalidKeyError):
        await getattr(store, method)(key, _buf(b"bad"))
    store.close()
    assert zarr_rows(path) == {"ok": b"fine"}


async def test_empty_key_is_valid(tmp_path):
    path = tmp_path / "empty-key.zarrdb"
    store = await SQLiteStore.open(path)
    await store.set("", _buf(b"root blob"))
    got = await store.get("", prototype=default_buffer_prototype())
    assert got is not None and got.to_bytes() == b"root blob"
    store.close()
    assert zarr_rows(path) == {"": b"root blob"}
    assert query(path, "SELECT typeof(k), typeof(v), hex(k) FROM zarr") == [("text", "blob", "")]


async def test_values_stored_exactly_including_empty_and_binary(tmp_path):
    path = tmp_path / "values.zarrdb"
    values = {
        "empty": b"",
        "nul": b"\x00" * 17,
        "all-bytes": bytes(range(256)),
        "text-like": "héllo\x00wörld".encode("utf-8"),
        "big": bytes(np.random.default_rng(1).integers(0, 256, 300_000, dtype="u1")),
    }
    store = await SQLiteStore.open(path)
    for key, value in values.items():
        await store.set(key, _buf(value))
    store.close()
    with closing(connect_ro(path)) as con:
        rows = con.execute("SELECT k, typeof(v), length(v), v FROM zarr").fetchall()
    assert {k: (t, n, v) for k, t, n, v in rows} == {
        k: ("blob", len(v), v) for k, v in values.items()
    }
