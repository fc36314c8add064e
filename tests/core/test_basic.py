"""Database: opening and its options, the single-key reads and writes, batches, values through
the buffer protocol, closing, pickling, and the maintenance calls (checkpoint, journal mode,
integrity check, vacuum, backup, pragma, plain SQL)."""

from __future__ import annotations

import array
import copy
import mmap
import os
import pickle
import subprocess
import sys
import threading
import time
from urllib.parse import quote

import numpy as np
import pytest

from zarrdb import errors
from zarrdb._core import Database

from . import writes
from .helpers import LockHolder, make_db_file, needs_test_hooks, sqlite_rows

# --- opening -------------------------------------------------------------------------------


def test_mode_c_creates_a_missing_file(tmp_path):
    path = tmp_path / "new.zarrdb"
    with Database(path, mode="c") as db:
        assert path.exists()
        assert not db.readonly
        assert not db.closed
        db.executescript("CREATE TABLE zarr(k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)")
        writes.set(db, "k", b"v")
    assert sqlite_rows(path, "SELECT k, v FROM zarr") == [("k", b"v")]


def test_default_mode_is_read_write_create(tmp_path):
    path = tmp_path / "default.zarrdb"
    with Database(path) as db:
        assert not db.readonly
        db.executescript("CREATE TABLE zarr(k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)")
        writes.set(db, "a", b"1")
    assert path.exists()


def test_mode_w_opens_an_existing_file_for_writing(db_path):
    with Database(db_path, mode="w") as db:
        assert not db.readonly
        writes.set(db, "k", b"written")
    assert sqlite_rows(db_path, "SELECT v FROM zarr WHERE k = 'k'") == [(b"written",)]


def test_mode_r_reads_and_refuses_writes(tmp_path):
    path = make_db_file(tmp_path / "ro.zarrdb", rows=[("k", b"value")])
    with Database(path, mode="r") as db:
        assert db.readonly
        assert db.get("k") == b"value"
        with pytest.raises(errors.ReadOnlyError):
            writes.set(db, "k", b"other")
    assert sqlite_rows(path, "SELECT v FROM zarr") == [(b"value",)]


def test_invalid_mode_is_rejected(db_path):
    with pytest.raises(ValueError):
        Database(db_path, mode="x")


def test_path_property_accepts_pathlike_str_and_bytes(db_path):
    for given in (db_path, str(db_path), os.fsencode(db_path)):
        with Database(given) as db:
            assert db.path == str(db_path)
            assert isinstance(db.path, str)


def test_uri_read_only(tmp_path):
    path = make_db_file(tmp_path / "u r%i #é.zarrdb", rows=[("k", b"1")])
    uri = "file:" + quote(str(path)) + "?mode=ro"
    with Database(uri, uri=True) as db:
        assert db.get("k") == b"1"
        with pytest.raises(errors.ReadOnlyError):
            writes.set(db, "k", b"2")
    assert sqlite_rows(path, "SELECT v FROM zarr") == [(b"1",)]


def test_uri_mode_rwc_creates_the_file(tmp_path):
    path = tmp_path / "from-uri.zarrdb"
    with Database("file:" + quote(str(path)) + "?mode=rwc", uri=True) as db:
        db.executescript("CREATE TABLE zarr(k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)")
        writes.set(db, "x", b"y")
    assert sqlite_rows(path, "SELECT k, v FROM zarr") == [("x", b"y")]


def test_without_uri_flag_a_file_uri_is_not_interpreted(tmp_path, monkeypatch):
    # With uri=False the string is a plain (relative) file name, even if it looks like a URI.
    monkeypatch.chdir(tmp_path)
    with Database("file:plain.zarrdb?mode=ro", mode="c") as db:
        assert not db.readonly
    assert (tmp_path / "file:plain.zarrdb?mode=ro").exists()


@pytest.mark.parametrize("name", ["imm.zarrdb", "with space %20 ?x=1 #frag é.zarrdb"])
def test_immutable_reads_without_locking(tmp_path, name):
    path = make_db_file(tmp_path / name, rows=[("k", b"immutable")])
    with LockHolder(path, "EXCLUSIVE"):
        # An ordinary reader is locked out by the exclusive lock; an immutable one takes no lock.
        # (The schema is read at open, so the ordinary reader fails there already.)
        with pytest.raises(errors.DatabaseLockedError):
            with Database(path, busy_timeout=0.05) as locked_out:
                locked_out.get("k")
        with Database(path, immutable=True, busy_timeout=0.05) as db:
            assert db.readonly
            assert db.get("k") == b"immutable"
            assert db.list_keys() == ["k"]
            with pytest.raises(errors.ReadOnlyError):
                writes.set(db, "k", b"no")


def test_immutable_implies_read_only_even_with_mode_c(tmp_path):
    path = make_db_file(tmp_path / "imm.zarrdb", rows=[("k", b"1")])
    with Database(path, mode="c", immutable=True) as db:
        assert db.readonly
        with pytest.raises(errors.ReadOnlyError):
            writes.delete(db, "k")
    assert sqlite_rows(path, "SELECT k FROM zarr") == [("k",)]


def test_busy_timeout_property(db_path):
    with Database(db_path) as db:
        assert db.busy_timeout == 5.0
    with Database(db_path, busy_timeout=0.25) as db:
        # (the wait itself is zarrdb's own busy handler, measured in tests/core/test_errors.py)
        assert db.busy_timeout == 0.25


def test_page_size_applies_to_a_new_file(tmp_path):
    path = tmp_path / "p.zarrdb"
    with Database(path, page_size=8192) as db:
        db.executescript("CREATE TABLE zarr(k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)")
        writes.set(db, "k", b"v")
    assert sqlite_rows(path, "PRAGMA page_size") == [(8192,)]


def test_page_size_applies_to_a_new_file_in_wal_mode(tmp_path):
    path = tmp_path / "pw.zarrdb"
    with Database(path, page_size=16384, journal_mode="wal") as db:
        db.executescript("CREATE TABLE zarr(k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)")
        writes.set(db, "k", b"v")
        assert db.pragma("page_size") == 16384
    assert sqlite_rows(path, "PRAGMA page_size") == [(16384,)]


def test_page_size_leaves_an_existing_file_alone(db_path):
    assert sqlite_rows(db_path, "PRAGMA page_size") == [(4096,)]
    with Database(db_path, page_size=1024) as db:
        writes.set(db, "k", b"v" * 10_000)
    assert sqlite_rows(db_path, "PRAGMA page_size") == [(4096,)]
    assert sqlite_rows(db_path, "SELECT length(v) FROM zarr") == [(10_000,)]


@pytest.mark.parametrize("bad", [0, 256, 1000, 3000, 131072])
def test_invalid_page_size_is_rejected(tmp_path, bad):
    with pytest.raises(ValueError):
        Database(tmp_path / "bad.zarrdb", page_size=bad)


def test_cache_size_is_in_kib(db_path):
    with Database(db_path, cache_size=4096) as db:
        assert db.pragma("cache_size") == -4096


def test_mmap_size(db_path):
    with Database(db_path, mmap_size=1 << 20) as db:
        assert db.pragma("mmap_size") == 1 << 20
        writes.set(db, "k", b"x" * 5000)
        assert db.get("k") == b"x" * 5000
    with Database(db_path, mmap_size=0) as db:
        assert db.pragma("mmap_size") == 0


@pytest.mark.parametrize(
    "level, number", [("off", 0), ("normal", 1), ("full", 2), ("extra", 3), ("NORMAL", 1)]
)
def test_synchronous_level(db_path, level, number):
    with Database(db_path, synchronous=level) as db:
        assert db.pragma("synchronous") == number


def test_invalid_synchronous_level_is_rejected(db_path):
    with pytest.raises(ValueError):
        Database(db_path, synchronous="sometimes")


@pytest.mark.parametrize("mode", ["delete", "truncate", "persist", "memory", "wal", "off"])
def test_journal_mode_at_open(db_path, mode):
    with Database(db_path, journal_mode=mode) as db:
        assert db.journal_mode() == mode
        assert str(db.pragma("journal_mode")).lower() == mode
        writes.set(db, "k", b"v")
        assert db.get("k") == b"v"


def test_wal_journal_mode_at_open_is_persistent(db_path):
    with Database(db_path, journal_mode="wal") as db:
        writes.set(db, "k", b"v")
    assert sqlite_rows(db_path, "PRAGMA journal_mode") == [("wal",)]


def test_invalid_journal_mode_is_rejected(db_path):
    with pytest.raises(ValueError):
        Database(db_path, journal_mode="sideways")


# --- closing, context manager, pickling --------------------------------------------------


def test_close_is_idempotent(db_path):
    db = Database(db_path)
    assert not db.closed
    db.close()
    assert db.closed
    db.close()
    assert db.closed
    assert not db.in_transaction


def test_context_manager_closes(db_path):
    with Database(db_path) as db:
        assert not db.closed
        writes.set(db, "k", b"1")
    assert db.closed


def test_context_manager_closes_on_exception(db_path):
    with pytest.raises(KeyError):
        with Database(db_path) as db:
            raise KeyError("boom")
    assert db.closed


def test_close_leaves_no_journal_files_in_delete_mode(db_path):
    with Database(db_path) as db:
        writes.set(db, "k", b"v")
    leftovers = sorted(p.name for p in db_path.parent.iterdir())
    assert leftovers == [db_path.name]


@pytest.mark.parametrize(
    "call",
    [
        lambda db: db.get("k"),
        pytest.param(lambda db: db.get_into("k", bytearray(4)), marks=needs_test_hooks),
        lambda db: db.get_range("k", 0, 1),
        lambda db: db.get_many(["k"]),
        lambda db: db.get_ranges([("k", 0, None)]),
        lambda db: db.exists("k"),
        lambda db: db.length("k"),
        lambda db: writes.set(db, "k", b"v"),
        lambda db: writes.set_many(db, [("k", b"v")]),
        lambda db: writes.set_if_absent(db, "k", b"v"),
        lambda db: writes.delete(db, "k"),
        lambda db: writes.delete_many(db, ["k"]),
        lambda db: writes.delete_prefix(db, ""),
        lambda db: db.list_keys(),
        lambda db: db.list_prefix("a"),
        lambda db: db.list_dir(""),
        lambda db: db.size_prefix(""),
        lambda db: db.count_prefix(""),
        lambda db: db._atomic().__enter__(),
        lambda db: db.checkpoint(),
        lambda db: db.journal_mode(),
        lambda db: db.integrity_check(),
        lambda db: db.vacuum(),
        lambda db: db.pragma("user_version"),
        lambda db: db.execute("SELECT 1"),
        lambda db: db.executescript("SELECT 1"),
    ],
)
def test_every_call_after_close_raises_closed_error(db_path, call):
    db = Database(db_path)
    db.close()
    with pytest.raises(errors.ClosedError) as info:
        call(db)
    assert isinstance(info.value, ValueError)


def test_backup_after_close_raises_closed_error(db_path, tmp_path):
    db = Database(db_path)
    db.close()
    with pytest.raises(errors.ClosedError):
        db.backup_to(tmp_path / "copy.zarrdb")


def test_repr_says_state(db_path):
    db = Database(db_path)
    assert str(db_path) in repr(db)
    db.close()
    assert "closed" in repr(db)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickling_raises_type_error(db, protocol):
    with pytest.raises(TypeError):
        pickle.dumps(db, protocol=protocol)


def test_copying_raises_type_error(db):
    with pytest.raises(TypeError):
        copy.copy(db)
    with pytest.raises(TypeError):
        copy.deepcopy(db)


# --- single-key reads and writes --------------------------------------------------------------


def test_get_missing_is_none(any_db):
    assert any_db.get("missing") is None
    assert any_db.length("missing") is None
    assert any_db.exists("missing") is False


def test_set_get_roundtrip(any_db):
    writes.set(any_db, "a/b/c", b"\x00\x01\x02value\xff")
    assert any_db.get("a/b/c") == b"\x00\x01\x02value\xff"
    assert type(any_db.get("a/b/c")) is bytes
    assert any_db.exists("a/b/c") is True
    assert any_db.length("a/b/c") == 9


def test_get_of_values_of_changing_sizes(any_db):
    """get() prepares its result at the size of the previous value read; every other size,
    below, above, empty, and long enough for the blob API, still reads back exactly."""
    sizes = [16384, 16384, 16383, 16385, 0, 1, 65534, 65535, 65536, 200_000, 16384, 0, 0, 7]
    values = {f"v/{i}": bytes((i * 7 + j) % 251 for j in range(n)) for i, n in enumerate(sizes)}
    for key, value in values.items():
        writes.set(any_db, key, value)
    for _ in range(2):
        for key, value in values.items():
            got = any_db.get(key)
            assert type(got) is bytes
            assert got == value
    assert any_db.get("v/missing") is None
    assert any_db.get_limited("v/9", 65536) == 200_000
    assert any_db.get_limited("v/0", 16384) == values["v/0"]
    assert any_db.get_limited("v/0", 16383) == 16384


def test_set_replaces(any_db):
    writes.set(any_db, "k", b"first value, long")
    writes.set(any_db, "k", b"2nd")
    assert any_db.get("k") == b"2nd"
    assert any_db.length("k") == 3
    assert any_db.count_prefix("") == 1


def test_set_is_visible_to_another_process(db):
    writes.set(db, "k", b"committed")
    assert sqlite_rows(db.path, "SELECT k, v, typeof(v) FROM zarr") == [("k", b"committed", "blob")]


def test_value_written_by_another_program_is_read(tmp_path):
    path = make_db_file(tmp_path / "other.zarrdb", rows=[("zarr.json", b'{"zarr_format": 3}')])
    with Database(path) as db:
        assert db.get("zarr.json") == b'{"zarr_format": 3}'


def test_empty_value(any_db):
    writes.set(any_db, "empty", b"")
    assert any_db.get("empty") == b""
    assert any_db.length("empty") == 0
    assert any_db.exists("empty")
    assert any_db.get_range("empty", 0, None) == b""
    assert any_db.get_many(["empty"]) == [b""]


def test_large_value_roundtrip(any_db):
    # Large enough for overflow pages and for the copy made without the GIL.
    value = np.random.default_rng(1).integers(0, 256, 3_000_000, dtype=np.uint8).tobytes()
    writes.set(any_db, "big", value)
    assert any_db.get("big") == value
    assert any_db.length("big") == len(value)
    assert any_db.get_many(["big", "none"]) == [value, None]


def test_set_if_absent(any_db):
    assert writes.set_if_absent(any_db, "k", b"first") is True
    assert writes.set_if_absent(any_db, "k", b"second") is False
    assert any_db.get("k") == b"first"
    writes.delete(any_db, "k")
    assert writes.set_if_absent(any_db, "k", b"third") is True
    assert any_db.get("k") == b"third"


def test_set_if_absent_keeps_an_empty_value(any_db):
    writes.set(any_db, "k", b"")
    assert writes.set_if_absent(any_db, "k", b"x") is False
    assert any_db.get("k") == b""


def test_delete(any_db):
    writes.set(any_db, "k", b"1")
    assert writes.delete(any_db, "k") is True
    assert any_db.get("k") is None
    assert writes.delete(any_db, "k") is False


def test_delete_many_counts_the_keys_that_existed(any_db):
    writes.set_many(any_db, [("a", b"1"), ("b", b"2"), ("c", b"3")])
    assert writes.delete_many(any_db, ["a", "missing", "c", "a"]) == 2
    assert any_db.list_keys() == ["b"]
    assert writes.delete_many(any_db, []) == 0
    assert writes.delete_many(any_db, iter(["b"])) == 1
    assert any_db.list_keys() == []


def test_delete_prefix(any_db):
    keys = ["a/b", "a/b-c", "a/b/c", "a/b/d/e", "a/b0", "b/c"]
    writes.set_many(any_db, [(k, b"v") for k in keys])
    assert writes.delete_prefix(any_db, "a/b/") == 2
    assert any_db.list_keys() == ["a/b", "a/b-c", "a/b0", "b/c"]
    assert writes.delete_prefix(any_db, "a/b") == 3
    assert any_db.list_keys() == ["b/c"]
    assert writes.delete_prefix(any_db, "zzz") == 0
    assert writes.delete_prefix(any_db, "") == 1
    assert any_db.list_keys() == []
    assert writes.delete_prefix(any_db, "") == 0


def test_keys_must_be_str(any_db):
    for bad in (b"k", 1, None):
        with pytest.raises(TypeError):
            any_db.get(bad)
        with pytest.raises(TypeError):
            writes.set(any_db, bad, b"v")
    assert any_db.count_prefix("") == 0


# --- values through the buffer protocol ---------------------------------------------------


def _buffers():
    raw = bytes(range(256)) * 3
    arr2d = np.arange(24, dtype="<i4").reshape(4, 6)
    return [
        ("bytes", raw, raw),
        ("bytearray", bytearray(raw), raw),
        ("memoryview", memoryview(raw), raw),
        ("memoryview-slice", memoryview(raw)[10:500], raw[10:500]),
        ("numpy-u1", np.frombuffer(raw, dtype=np.uint8), raw),
        ("numpy-f8", np.linspace(0, 1, 17), np.linspace(0, 1, 17).tobytes()),
        ("numpy-2d-c", arr2d, arr2d.tobytes()),
        ("numpy-contiguous-slice", arr2d[1:3], arr2d[1:3].tobytes()),
        ("numpy-structured", np.zeros(3, dtype=[("a", "<u2"), ("b", "<f4")]), bytes(18)),
        ("array", array.array("h", [1, -2, 3]), array.array("h", [1, -2, 3]).tobytes()),
    ]


@pytest.mark.parametrize("name, value, expected", _buffers(), ids=[b[0] for b in _buffers()])
def test_values_via_buffer_protocol(db, name, value, expected):
    writes.set(db, "single", value)
    writes.set_many(db, [("many", value)])
    assert writes.set_if_absent(db, "absent", value) is True
    for key in ("single", "many", "absent"):
        assert db.get(key) == expected
    rows = sqlite_rows(db.path, "SELECT k, typeof(v), v FROM zarr ORDER BY k")
    assert rows == [(k, "blob", expected) for k in ("absent", "many", "single")]


@pytest.mark.parametrize(
    "empty",
    [b"", bytearray(), memoryview(b""), np.empty(0, dtype=np.uint8), array.array("b")],
    ids=["bytes", "bytearray", "memoryview", "numpy", "array"],
)
def test_empty_values_are_empty_blobs_not_null(db, empty):
    writes.set(db, "one", empty)
    writes.set_many(db, [("many", empty)])
    writes.set_if_absent(db, "absent", empty)
    for key in ("one", "many", "absent"):
        assert db.get(key) == b""
    assert sqlite_rows(db.path, "SELECT typeof(v), length(v) FROM zarr") == [("blob", 0)] * 3


def test_mmap_value(db, tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"mapped bytes" * 1000)
    with open(src, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        writes.set(db, "m", mapping)
    finally:
        mapping.close()  # would raise BufferError if the engine kept the buffer
    assert db.get("m") == b"mapped bytes" * 1000


def test_value_is_copied_at_the_call(db):
    value = bytearray(b"before")
    writes.set(db, "k", value)
    value[:] = b"after!"
    assert db.get("k") == b"before"
    value.extend(b"more")  # the engine released its export of the buffer


@pytest.mark.parametrize(
    "bad",
    [
        np.arange(20, dtype=np.uint8)[::2],
        np.asfortranarray(np.arange(12, dtype=np.uint8).reshape(3, 4)),
        np.arange(12, dtype=np.uint8).reshape(3, 4)[:, 1:3],
        memoryview(b"abcdefgh")[::2],
    ],
    ids=["strided", "fortran", "sliced-2d", "memoryview-strided"],
)
def test_non_contiguous_array_is_refused_and_nothing_written(db, bad):
    writes.set(db, "keep", b"old")
    with pytest.raises((BufferError, ValueError, TypeError)):
        writes.set(db, "keep", bad)
    with pytest.raises((BufferError, ValueError, TypeError)):
        writes.set_if_absent(db, "new", bad)
    with pytest.raises((BufferError, ValueError, TypeError)):
        writes.set_many(db, [("a", b"1"), ("keep", b"new"), ("b", bad), ("c", b"3")])
    assert db.list_keys() == ["keep"]
    assert db.get("keep") == b"old"


@pytest.mark.parametrize("bad", ["text", 12, None, [1, 2]], ids=["str", "int", "None", "list"])
def test_non_buffer_value_is_refused_and_nothing_written(db, bad):
    with pytest.raises(TypeError):
        writes.set(db, "k", bad)
    with pytest.raises(TypeError):
        writes.set_many(db, [("a", b"1"), ("k", bad)])
    assert db.list_keys() == []


# --- get_into -----------------------------------------------------------------------------


@needs_test_hooks
def test_get_into(any_db):
    writes.set(any_db, "k", b"hello")
    out = bytearray(b"..........")
    assert any_db.get_into("k", out) == 5
    assert out == b"hello....."


@needs_test_hooks
def test_get_into_exact_size_and_numpy(any_db):
    value = np.arange(100, dtype="<u4")
    writes.set(any_db, "k", value)
    out = np.zeros(100, dtype="<u4")
    assert any_db.get_into("k", out) == 400
    np.testing.assert_array_equal(out, value)
    view = memoryview(bytearray(1000))[100:500]
    assert any_db.get_into("k", view) == 400
    assert bytes(view) == value.tobytes()


@needs_test_hooks
def test_get_into_missing_key_leaves_the_buffer(any_db):
    out = bytearray(b"untouched")
    assert any_db.get_into("missing", out) is None
    assert out == b"untouched"


@needs_test_hooks
def test_get_into_empty_value(any_db):
    writes.set(any_db, "e", b"")
    out = bytearray(b"xyz")
    assert any_db.get_into("e", out) == 0
    assert out == b"xyz"
    assert any_db.get_into("e", bytearray()) == 0


@needs_test_hooks
def test_get_into_too_small_copies_nothing(any_db):
    writes.set(any_db, "k", b"0123456789")
    out = bytearray(b"abcdefghi")
    with pytest.raises(ValueError):
        any_db.get_into("k", out)
    assert out == b"abcdefghi"
    assert any_db.get("k") == b"0123456789"  # still usable


@needs_test_hooks
def test_get_into_needs_a_writable_buffer(any_db):
    writes.set(any_db, "k", b"v")
    with pytest.raises((BufferError, TypeError)):
        any_db.get_into("k", b"readonly")


@needs_test_hooks
def test_get_into_releases_the_buffer_when_the_database_is_closed(db_path):
    # A failed call must not keep an export of the caller's buffer (a bytearray with a live
    # export cannot be resized any more).
    db = Database(db_path)
    db.close()
    out = bytearray(16)
    with pytest.raises(errors.ClosedError):
        db.get_into("k", out)
    out.extend(b"more")
    assert len(out) == 20


@needs_test_hooks
def test_get_into_releases_the_buffer_on_an_invalid_key(db):
    out = bytearray(16)
    with pytest.raises(errors.InvalidKeyError):
        db.get_into("\ud800", out)
    out.extend(b"more")
    assert len(out) == 20


# --- batches ------------------------------------------------------------------------------


def test_get_many_in_input_order_with_none_for_missing(any_db):
    writes.set_many(any_db, [("b", b"2"), ("a", b"1"), ("c", b"")])
    assert any_db.get_many(["c", "missing", "a", "b", "a", "zzz"]) == [
        b"",
        None,
        b"1",
        b"2",
        b"1",
        None,
    ]
    assert any_db.get_many([]) == []
    assert any_db.get_many(("a",)) == [b"1"]


def test_get_many_large_batch(any_db):
    pairs = [(f"c/{i}", i.to_bytes(4, "little") * (i % 7)) for i in range(3000)]
    writes.set_many(any_db, pairs)
    keys = [f"c/{i}" for i in range(2999, -1, -1)] + ["c/none"]
    expected = [i.to_bytes(4, "little") * (i % 7) for i in range(2999, -1, -1)] + [None]
    assert any_db.get_many(keys) == expected


def test_set_many(any_db):
    writes.set_many(any_db, [("a", b"1"), ("b", bytearray(b"2")), ("c", memoryview(b"3"))])
    assert any_db.get_many(["a", "b", "c"]) == [b"1", b"2", b"3"]
    assert sqlite_rows(any_db.path, "SELECT k, v FROM zarr ORDER BY k") == [
        ("a", b"1"),
        ("b", b"2"),
        ("c", b"3"),
    ]


def test_set_many_from_a_generator_and_empty(any_db):
    writes.set_many(any_db, ((f"g{i}", bytes([i])) for i in range(10)))
    assert any_db.count_prefix("g") == 10
    writes.set_many(any_db, [])
    writes.set_many(any_db, iter([]))
    assert any_db.count_prefix("") == 10


def test_set_many_later_duplicate_wins(any_db):
    writes.set_many(any_db, [("k", b"1"), ("j", b"x"), ("k", b"2")])
    assert any_db.get("k") == b"2"
    assert any_db.count_prefix("") == 2


def test_set_many_invalid_key_writes_nothing(any_db):
    writes.set(any_db, "keep", b"old")
    with pytest.raises(errors.InvalidKeyError):
        writes.set_many(any_db, [("a", b"1"), ("keep", b"new"), ("\udc80", b"2")])
    with pytest.raises(TypeError):
        writes.set_many(any_db, [("a", b"1"), (b"bytes-key", b"2")])
    assert any_db.list_keys() == ["keep"]
    assert any_db.get("keep") == b"old"


def test_set_many_sqlite_failure_midway_writes_nothing(any_db):
    # A trigger makes SQLite itself refuse the third row, after two rows went in.
    any_db.set_limit("TRIGGER_DEPTH", 1)  # no engine connection runs a trigger unless told to
    any_db.executescript(
        "CREATE TRIGGER no_bad BEFORE INSERT ON zarr WHEN new.k = 'bad' "
        "BEGIN SELECT RAISE(ABORT, 'bad key refused'); END"
    )
    writes.set(any_db, "keep", b"old")
    with pytest.raises(errors.ConstraintError):
        writes.set_many(any_db, [("a", b"1"), ("keep", b"new"), ("bad", b"x"), ("b", b"2")])
    assert not any_db.in_transaction
    assert any_db.list_keys() == ["keep"]
    assert any_db.get("keep") == b"old"
    assert sqlite_rows(any_db.path, "SELECT k, v FROM zarr") == [("keep", b"old")]


def test_delete_many_sqlite_failure_midway_deletes_nothing(any_db):
    any_db.set_limit("TRIGGER_DEPTH", 1)  # no engine connection runs a trigger unless told to
    any_db.executescript(
        "CREATE TRIGGER keep_x BEFORE DELETE ON zarr WHEN old.k = 'x' "
        "BEGIN SELECT RAISE(ABORT, 'x stays'); END"
    )
    writes.set_many(any_db, [("a", b"1"), ("x", b"2"), ("b", b"3")])
    with pytest.raises(errors.ConstraintError):
        writes.delete_many(any_db, ["a", "x", "b"])
    assert not any_db.in_transaction
    assert any_db.list_keys() == ["a", "b", "x"]


# --- maintenance ----------------------------------------------------------------------------


def test_checkpoint_in_wal_mode(wal_db, wal_path):
    for i in range(50):
        writes.set(wal_db, f"k{i}", bytes(3000))
    wal_file = wal_path.with_name(wal_path.name + "-wal")
    assert wal_file.stat().st_size > 0
    log, done = wal_db.checkpoint("passive")
    assert log > 0 and done == log
    log, done = wal_db.checkpoint("truncate")
    assert (log, done) == (0, 0)
    assert wal_file.stat().st_size == 0
    # Everything is in the main file now: an immutable reader (which ignores the WAL) sees it.
    with Database(wal_path, immutable=True) as reader:
        assert reader.count_prefix("k") == 50


@pytest.mark.parametrize("mode", ["passive", "full", "restart", "truncate"])
def test_checkpoint_modes(wal_db, mode):
    writes.set(wal_db, "k", b"v")
    log, done = wal_db.checkpoint(mode)
    assert isinstance(log, int) and isinstance(done, int)
    assert done <= log or log == 0
    assert wal_db.get("k") == b"v"


def test_checkpoint_invalid_mode(wal_db):
    with pytest.raises(ValueError):
        wal_db.checkpoint("sometimes")


def test_journal_mode_switch(db, db_path):
    assert db.journal_mode() == "delete"
    assert db.journal_mode("wal") == "wal"
    writes.set(db, "k", b"v")
    assert db_path.with_name(db_path.name + "-wal").exists()
    assert db.journal_mode() == "wal"
    assert db.journal_mode("DELETE") == "delete"
    assert not db_path.with_name(db_path.name + "-wal").exists()
    assert db.get("k") == b"v"
    assert sqlite_rows(db_path, "PRAGMA journal_mode") == [("delete",)]
    with pytest.raises(ValueError):
        db.journal_mode("bogus")


def test_integrity_check_of_a_sound_file(any_db):
    writes.set_many(any_db, [(f"k{i}", bytes(i)) for i in range(200)])
    assert any_db.integrity_check() == []


def test_integrity_check_reports_damage(tmp_path):
    path = make_db_file(
        tmp_path / "damaged.zarrdb",
        rows=[(f"key/{i:05d}", (b"%05d" % i) * 20) for i in range(2000)],
    )
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 10 * page
    for offset in range(3 * page + 200, 3 * page + 800):  # inside a b-tree page
        data[offset] ^= 0x5A
    path.write_bytes(bytes(data))
    with Database(path) as db:
        problems = db.integrity_check()
    assert problems, "damage went unnoticed"
    assert all(isinstance(p, str) for p in problems)


def test_vacuum_shrinks_the_file(db, db_path):
    writes.set_many(db, [(f"k/{i}", bytes(10_000)) for i in range(100)])
    writes.set(db, "keep", b"kept")
    before = db_path.stat().st_size
    assert writes.delete_prefix(db, "k/") == 100
    db.vacuum()
    after = db_path.stat().st_size
    assert after < before / 10
    assert db.list_keys() == ["keep"]
    assert db.get("keep") == b"kept"
    assert sqlite_rows(db_path, "PRAGMA freelist_count") == [(0,)]


def test_backup_to_makes_a_complete_copy_in_delete_mode(wal_db, wal_path, tmp_path):
    pairs = [(f"a/{i}", bytes([i % 256]) * (i * 37 % 5000)) for i in range(300)]
    writes.set_many(wal_db, pairs)
    writes.set(wal_db, "last", b"still in the WAL")
    assert wal_path.with_name(wal_path.name + "-wal").stat().st_size > 0
    copy_path = tmp_path / "copy.zarrdb"
    wal_db.backup_to(copy_path)
    assert not copy_path.with_name(copy_path.name + "-wal").exists()
    assert sqlite_rows(copy_path, "PRAGMA journal_mode") == [("delete",)]
    assert sqlite_rows(copy_path, "PRAGMA integrity_check") == [("ok",)]
    rows = sqlite_rows(copy_path, "SELECT k, v FROM zarr")
    assert dict(rows) == dict(pairs) | {"last": b"still in the WAL"}
    # The source is untouched and still usable.
    assert wal_db.journal_mode() == "wal"
    writes.set(wal_db, "after", b"1")
    assert sqlite_rows(copy_path, "SELECT count(*) FROM zarr WHERE k = 'after'") == [(0,)]


def test_backup_to_in_small_steps(db, tmp_path):
    writes.set_many(db, [(f"k{i}", bytes(5000)) for i in range(50)])
    copy_path = tmp_path / "stepped.zarrdb"
    db.backup_to(str(copy_path), pages_per_step=1)
    assert sqlite_rows(copy_path, "SELECT count(*), sum(length(v)) FROM zarr") == [(50, 250_000)]
    assert sqlite_rows(copy_path, "PRAGMA journal_mode") == [("delete",)]


def test_backup_to_replaces_an_existing_database(db, tmp_path):
    old = make_db_file(tmp_path / "old.zarrdb", rows=[("stale", b"x")])
    writes.set(db, "fresh", b"y")
    db.backup_to(old)
    assert sqlite_rows(old, "SELECT k, v FROM zarr") == [("fresh", b"y")]


def test_backup_to_an_impossible_path(db, tmp_path):
    with pytest.raises(errors.CantOpenError):
        db.backup_to(tmp_path / "no such folder" / "copy.zarrdb")
    writes.set(db, "k", b"still usable")
    assert db.get("k") == b"still usable"


def test_backup_while_another_process_writes(wal_db, wal_path, tmp_path):
    writes.set(wal_db, "k", b"committed")
    with LockHolder(wal_path, "IMMEDIATE") as holder:
        copy_path = tmp_path / "copy.zarrdb"
        wal_db.backup_to(copy_path)
        holder.release("commit-write")
    # The copy is the snapshot taken before the other process committed.
    assert sqlite_rows(copy_path, "SELECT k, v FROM zarr") == [("k", b"committed")]
    assert wal_db.get("from-holder") == b"\x01"


def _backup_in_thread(db, target, seconds):
    """Run db.backup_to(target) in a thread; (finished in time, outcome, elapsed)."""
    box = {}

    def run():
        started = time.monotonic()
        try:
            db.backup_to(target)
            box["outcome"] = "done"
        except BaseException as e:
            box["outcome"] = e
        box["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return thread, box


@pytest.mark.parametrize("locked", ["destination", "source"])
def test_backup_gives_up_after_the_busy_timeout(tmp_path, locked):
    # busy_timeout bounds every wait for a lock, the backup's included.
    source = make_db_file(tmp_path / "source.zarrdb", rows=[("k", b"v")])
    target = make_db_file(tmp_path / "target.zarrdb", rows=[("old", b"x")])
    db = Database(source, busy_timeout=0.2)
    thread = None
    try:
        with LockHolder(target if locked == "destination" else source, "EXCLUSIVE") as holder:
            thread, box = _backup_in_thread(db, target, 2.0)
            hung = thread.is_alive()
            holder.release()  # lets a hanging backup finish, so that the test can clean up
            thread.join(30)
        assert not hung, (
            f"backup_to still waiting after 2 s with busy_timeout=0.2 ({locked} locked)"
        )
        assert isinstance(box["outcome"], errors.DatabaseLockedError), box
        assert box["elapsed"] < 2
    finally:
        if thread is None or not thread.is_alive():
            db.close()


def _child_outcome(script: str, *args: str, timeout: float = 4.0) -> list[str]:
    """Run a script in a child process (so that a hang can be cut short); its output lines."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        proc = None
    if proc is None:
        pytest.fail(f"hung for {timeout} s (busy_timeout was 0.2 s)")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


_BACKUP_SCRIPT = """
import sys
from zarrdb._core import Database, Writer
source, target, in_transaction = sys.argv[1], sys.argv[2], sys.argv[3] == "yes"
db = Database(source, busy_timeout=0.2)
writer = Writer(db)
writer.write([("set", "k", b"committed")])
if in_transaction:
    token = writer.begin(0, [])
    writer.write([("set", "pending", b"not committed")])
try:
    with writer.holding() as held:  # the connection reads inside a transaction use
        held.backup_to(target)
    print("no error")
except Exception as e:
    print(type(e).__name__)
if in_transaction:
    writer.end(token, False)
writer.close()
print(db.get("k"))
"""


def test_backup_to_its_own_file_does_not_hang(db_path):
    # Copying a database onto itself cannot work; it must fail, not wait forever.
    outcome, value = _child_outcome(_BACKUP_SCRIPT, str(db_path), str(db_path), "no")
    assert outcome != "no error"
    assert value == "b'committed'"
    assert sqlite_rows(db_path, "PRAGMA integrity_check") == [("ok",)]
    assert sqlite_rows(db_path, "SELECT k, v FROM zarr") == [("k", b"committed")]


def test_backup_inside_an_open_write_transaction_does_not_hang(db_path, tmp_path):
    # SQLite refuses to back up a source that its own connection is writing (SQLITE_BUSY at
    # once); that must come back as an error (or a copy), not as an endless wait.
    target = tmp_path / "copy.zarrdb"
    outcome, value = _child_outcome(_BACKUP_SCRIPT, str(db_path), str(target), "yes")
    assert value == "b'committed'"
    if outcome == "no error":
        assert sqlite_rows(target, "PRAGMA integrity_check") == [("ok",)]
    assert sqlite_rows(db_path, "SELECT k, v FROM zarr") == [("k", b"committed")]


def test_pragma_get_and_set(db, db_path):
    assert db.pragma("user_version") == 0
    assert db.pragma("user_version", 42) is None
    assert db.pragma("user_version") == 42
    assert db.pragma("application_id", 0x10B50760) is None
    assert sqlite_rows(db_path, "PRAGMA user_version") == [(42,)]
    assert sqlite_rows(db_path, "PRAGMA application_id") == [(0x10B50760,)]
    assert db.pragma("journal_mode", "wal") == "wal"
    assert db.pragma("foreign_keys", True) is None
    assert db.pragma("foreign_keys") == 1


@pytest.mark.parametrize("name", ["user_version; DROP TABLE zarr", "a b", "", "x=1", "ü"])
def test_pragma_refuses_bad_names(db, name):
    with pytest.raises(ValueError):
        db.pragma(name)
    assert db.list_keys() == []


@pytest.mark.parametrize("value", ["1; DROP TABLE zarr", "a b", 1.5, b"x"])
def test_pragma_refuses_bad_values(db, value):
    with pytest.raises(ValueError):
        db.pragma("user_version", value)
    assert db.pragma("user_version") == 0


def test_execute_binds_and_returns_rows(db):
    rows = db.execute(
        "SELECT ?, ?, ?, ?, ?, ?, ?, typeof(?)",
        [7, 2.5, "t\x00é\U0001f600", b"\x00\xff", None, True, memoryview(b"mv"), b""],
    )
    assert rows == [(7, 2.5, "t\x00é\U0001f600", b"\x00\xff", None, 1, b"mv", "blob")]


def test_execute_writes_and_reads_the_table(db, db_path):
    assert db.execute("INSERT INTO zarr(k, v) VALUES (?, ?)", ("k", b"v")) == []
    assert db.get("k") == b"v"
    assert db.execute("SELECT k, v, typeof(v) FROM zarr") == [("k", b"v", "blob")]
    assert db.execute("SELECT x''") == [(b"",)]
    assert db.execute("") == []
    assert sqlite_rows(db_path, "SELECT k, v FROM zarr") == [("k", b"v")]


def test_execute_runs_only_one_statement(db):
    with pytest.raises(ValueError):
        db.execute("INSERT INTO zarr VALUES ('a', x'00'); INSERT INTO zarr VALUES ('b', x'00')")
    assert db.list_keys() == []
    assert db.execute("SELECT 1;  ") == [(1,)]


def test_executescript(db):
    db.executescript("INSERT INTO zarr VALUES ('a', x'01'); INSERT INTO zarr VALUES ('b', x'02');")
    assert db.get_many(["a", "b"]) == [b"\x01", b"\x02"]
    with pytest.raises(errors.SQLiteError):
        db.executescript("INSERT INTO zarr VALUES ('c', x'03'); THIS IS NOT SQL;")


# --- get_limited ---------------------------------------------------------------------------


def test_get_limited(any_db):
    writes.set_many(any_db, [("small", b"12345"), ("empty", b""), ("big", bytes(200_000))])
    assert any_db.get_limited("missing", 100) is None
    assert any_db.get_limited("small", 5) == b"12345"  # exactly the limit: read
    assert type(any_db.get_limited("small", 5)) is bytes
    assert any_db.get_limited("small", 100) == b"12345"
    assert any_db.get_limited("small", 4) == 5  # over the limit: its length, not the value
    assert type(any_db.get_limited("small", 4)) is int
    assert any_db.get_limited("small", 0) == 5
    assert any_db.get_limited("empty", 0) == b""
    assert any_db.get_limited("big", 200_000) == bytes(200_000)
    assert any_db.get_limited("big", 199_999) == 200_000


@needs_test_hooks
def test_get_limited_sees_own_transaction(any_db):
    writes.set(any_db, "k", b"old")
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        writer.write([("set", "k", b"newer value")])
        with writer.holding() as db:
            assert db.get_limited("k", 100) == b"newer value"
            assert db.get_limited("k", 3) == 11
        writer.end(token, True)
    assert any_db.get_limited("k", 100) == b"newer value"


def test_get_limited_invalid_key(any_db):
    with pytest.raises(errors.InvalidKeyError):
        any_db.get_limited("\udc00", 10)
    with pytest.raises(TypeError):
        any_db.get_limited(b"k", 10)
