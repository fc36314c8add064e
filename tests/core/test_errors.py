"""SQLite result codes become zarrdb.errors exceptions carrying the codes, SQLite's message and
the file name; plus the errors zarrdb raises itself (too large, closed, misuse)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from urllib.parse import quote

import pytest

from zarrdb import errors
from zarrdb._core import MAX_VALUE_SIZE, Database

from . import writes
from .helpers import LockHolder, make_db_file, needs_test_hooks, sparse_buffer, sqlite_rows

# SQLite's result codes (sqlite.org/rescode.html), written out here rather than imported.
SQLITE_ERROR = 1
SQLITE_BUSY = 5
SQLITE_READONLY = 8
SQLITE_CANTOPEN = 14
SQLITE_TOOBIG = 18
SQLITE_CONSTRAINT = 19
SQLITE_NOTADB = 26
SQLITE_CONSTRAINT_TRIGGER = 19 | (7 << 8)  # 1811
SQLITE_CONSTRAINT_NOTNULL = 19 | (5 << 8)  # 1299
SQLITE_CONSTRAINT_PRIMARYKEY = 19 | (6 << 8)  # 1555


# --- read-only ---------------------------------------------------------------------------------

READ_ONLY_WRITES = [
    ("set", lambda db: writes.set(db, "k", b"new")),
    ("set_many", lambda db: writes.set_many(db, [("k", b"new"), ("j", b"x")])),
    ("set_if_absent", lambda db: writes.set_if_absent(db, "j", b"x")),
    ("delete", lambda db: writes.delete(db, "k")),
    ("delete_many", lambda db: writes.delete_many(db, ["k", "j"])),
    ("delete_prefix", lambda db: writes.delete_prefix(db, "")),
]


@pytest.mark.parametrize("name, write", READ_ONLY_WRITES, ids=[w[0] for w in READ_ONLY_WRITES])
def test_writer_refuses_a_database_opened_read_only(tmp_path, name, write):
    path = make_db_file(tmp_path / "ro.zarrdb", rows=[("k", b"old")])
    with Database(path, mode="r") as db:
        with pytest.raises(errors.ReadOnlyError) as info:
            write(db)
        err = info.value
        assert isinstance(err, PermissionError)
        assert err.code == SQLITE_READONLY
        assert err.filename == str(path)
        assert str(path) in str(err)
        assert not db.in_transaction
        assert db.get("k") == b"old"  # still usable for reading
    assert sqlite_rows(path, "SELECT k, v FROM zarr") == [("k", b"old")]


@pytest.mark.parametrize(
    "name, write",
    [*READ_ONLY_WRITES, ("execute", lambda db: db.execute("DELETE FROM zarr"))],
    ids=[w[0] for w in READ_ONLY_WRITES] + ["execute"],
)
def test_write_to_a_file_sqlite_opened_read_only(tmp_path, name, write):
    # The URI makes SQLite open the file read-only behind a read-write Database: the writer
    # starts, and SQLite refuses the write itself.
    path = make_db_file(tmp_path / "ro.zarrdb", rows=[("k", b"old")])
    with Database(f"file:{quote(str(path))}?mode=ro", uri=True) as db:
        with pytest.raises(errors.ReadOnlyError) as info:
            write(db)
        err = info.value
        assert isinstance(err, PermissionError)
        assert isinstance(err, errors.SQLiteError)
        assert err.code == SQLITE_READONLY
        assert err.extended_code & 0xFF == SQLITE_READONLY
        assert err.sqlite_message == "attempt to write a readonly database"
        assert err.sqlite_message in str(err)
        assert not db.in_transaction
        assert db.get("k") == b"old"  # still usable for reading
    assert sqlite_rows(path, "SELECT k, v FROM zarr") == [("k", b"old")]


# --- files that cannot be opened -----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["c", "w", "r"])
def test_not_a_database(tmp_path, mode):
    path = tmp_path / "notes.txt"
    text = b"This is a text file, not an SQLite database.\n" * 200
    path.write_bytes(text)
    with pytest.raises(errors.NotADatabaseError) as info:
        Database(path, mode=mode)
    err = info.value
    assert isinstance(err, errors.DatabaseCorruptError)
    assert err.code == SQLITE_NOTADB
    assert err.extended_code == SQLITE_NOTADB
    assert err.sqlite_message == "file is not a database"
    assert err.filename == str(path)
    assert str(path) in str(err)
    assert path.read_bytes() == text  # untouched


@pytest.mark.parametrize("mode", ["r", "w"])
def test_missing_file(tmp_path, mode):
    path = tmp_path / "missing.zarrdb"
    with pytest.raises(errors.CantOpenError) as info:
        Database(path, mode=mode)
    err = info.value
    assert isinstance(err, OSError)
    assert err.code == SQLITE_CANTOPEN
    assert err.extended_code & 0xFF == SQLITE_CANTOPEN
    assert err.sqlite_message == "unable to open database file"
    assert err.filename == str(path)
    assert str(path) in str(err)
    assert not path.exists()


def test_missing_folder(tmp_path):
    path = tmp_path / "no such folder" / "x.zarrdb"
    with pytest.raises(errors.CantOpenError) as info:
        Database(path, mode="c")
    assert info.value.filename == str(path)
    assert not path.parent.exists()


@pytest.mark.parametrize("mode", ["c", "w"])
def test_directory_for_writing(tmp_path, mode):
    with pytest.raises(errors.CantOpenError) as info:
        Database(tmp_path, mode=mode)
    err = info.value
    assert err.code == SQLITE_CANTOPEN
    assert err.filename == str(tmp_path)
    assert "directory" in str(err)


def test_directory_for_reading(tmp_path):
    # SQLite can open a directory read-only and fails at the first read; whichever code it
    # reports, it is an OSError-like SQLiteError that names the path.
    with pytest.raises(errors.SQLiteError) as info:
        Database(tmp_path, mode="r")
    err = info.value
    assert isinstance(err, OSError)
    assert err.filename == str(tmp_path)
    assert err.sqlite_message and err.sqlite_message in str(err)


def test_file_without_the_zarr_table(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    with Database(path) as db:
        with pytest.raises(errors.SQLiteError) as info:
            db.get("k")
    err = info.value
    assert type(err) is errors.SQLiteError
    assert err.code == SQLITE_ERROR
    assert err.sqlite_message == "no such table: zarr"
    assert err.filename == str(path)


def test_failed_open_leaves_a_closed_object(tmp_path):
    path = tmp_path / "junk"
    path.write_bytes(b"junk" * 1000)
    db = Database.__new__(Database)
    with pytest.raises(errors.NotADatabaseError):
        db.__init__(path)
    assert db.closed
    with pytest.raises(errors.ClosedError):
        db.get("k")


# --- locks -------------------------------------------------------------------------------------


def _check_locked(err, path, timeout_text):
    assert isinstance(err, errors.DatabaseLockedError)
    assert err.code == SQLITE_BUSY
    assert err.extended_code & 0xFF == SQLITE_BUSY
    assert err.sqlite_message == "database is locked"
    assert err.filename == str(path)
    message = str(err)
    assert str(path) in message  # names the file
    assert timeout_text in message  # and how long it waited
    assert "database is locked" in message


LOCKED_CALLS = [
    ("get", lambda db: db.get("k")),
    ("get_many", lambda db: db.get_many(["k", "j"])),
    ("get_range", lambda db: db.get_range("k", 0, 1)),
    ("exists", lambda db: db.exists("k")),
    ("length", lambda db: db.length("k")),
    ("list_keys", lambda db: db.list_keys()),
    ("list_dir", lambda db: db.list_dir("")),
    ("count_prefix", lambda db: db.count_prefix("")),
    ("size_prefix", lambda db: db.size_prefix("k")),
    ("set", lambda db: writes.set(db, "k", b"new")),
    ("set_many", lambda db: writes.set_many(db, [("k", b"new")])),
    ("delete", lambda db: writes.delete(db, "k")),
    ("delete_prefix", lambda db: writes.delete_prefix(db, "")),
    ("begin", lambda db: _begin_and_roll_back(db)),
]


def _begin_and_roll_back(db):
    """An explicit transaction on a writer of `db` (BEGIN IMMEDIATE), rolled back."""
    with writes.open_writer(db) as writer:
        writer.end(writer.begin(0, []), False)


@pytest.mark.parametrize("name, call", LOCKED_CALLS, ids=[c[0] for c in LOCKED_CALLS])
def test_locked_database(db_path, name, call):
    db = Database(db_path, busy_timeout=0.2)
    writes.set(db, "k", b"old")
    try:
        with LockHolder(db_path, "EXCLUSIVE"):
            started = time.monotonic()
            with pytest.raises(errors.DatabaseLockedError) as info:
                call(db)
            waited = time.monotonic() - started
            _check_locked(info.value, db_path, "0.2 s")
            assert waited >= 0.15  # it did wait for the lock
            assert not db.in_transaction
        # The lock is gone: the same connection works again.
        assert db.get("k") == b"old"
        writes.set(db, "k", b"after")
        assert db.get("k") == b"after"
    finally:
        db.close()


def test_locked_at_open(db_path):
    with LockHolder(db_path, "EXCLUSIVE"):
        with pytest.raises(errors.DatabaseLockedError) as info:
            Database(db_path, busy_timeout=0.1)
        _check_locked(info.value, db_path, "0.1 s")


def test_wal_writer_locked_out_but_readers_go_on(wal_path):
    db = Database(wal_path, busy_timeout=0.15)
    writes.set(db, "k", b"old")
    try:
        with LockHolder(wal_path, "IMMEDIATE") as holder:
            assert db.get("k") == b"old"
            assert db.list_keys() == ["k"]
            with pytest.raises(errors.DatabaseLockedError) as info:
                writes.set(db, "k", b"new")
            _check_locked(info.value, wal_path, "0.15 s")
            with pytest.raises(errors.DatabaseLockedError):
                writes.set_many(db, [("a", b"1"), ("b", b"2")])
            holder.release("commit-write")
        assert db.list_keys() == ["from-holder", "k"]
        assert db.get("k") == b"old"
    finally:
        db.close()


@pytest.mark.parametrize("timeout", [10, 3_000_000, 1e7], ids=["10s", "35days", "116days"])
def test_busy_timeout_waits_for_a_short_lock(db_path, timeout):
    # With a timeout longer than the lock is held, the call waits and succeeds (also for
    # timeouts beyond 2**31 milliseconds).
    db = Database(db_path, busy_timeout=timeout)
    assert db.busy_timeout == timeout
    try:
        holder = LockHolder(db_path, "EXCLUSIVE")
        timer = threading.Timer(0.3, holder.release)
        timer.start()
        try:
            writes.set(db, "k", b"v")
        finally:
            timer.join()
            holder.__exit__(None, None, None)
        assert db.get("k") == b"v"
    finally:
        db.close()


# --- values over the limit ------------------------------------------------------------------


def test_max_value_size_is_the_spec_limit():
    assert MAX_VALUE_SIZE == 2_147_483_645


TOO_LARGE_WRITES = [
    ("set", lambda db, big: writes.set(db, "big", big)),
    ("set_if_absent", lambda db, big: writes.set_if_absent(db, "big", big)),
    (
        "set_many",
        lambda db, big: writes.set_many(db, [("a", b"1"), ("keep", b"new"), ("big", big)]),
    ),
    ("set_many-first", lambda db, big: writes.set_many(db, [("big", big), ("a", b"1")])),
]


@pytest.mark.parametrize("name, write", TOO_LARGE_WRITES, ids=[w[0] for w in TOO_LARGE_WRITES])
def test_value_too_large_writes_nothing(any_db, tmp_path, name, write):
    writes.set(any_db, "keep", b"old")
    with sparse_buffer(tmp_path / "sparse.bin", MAX_VALUE_SIZE + 1) as big:
        assert len(memoryview(big)) == MAX_VALUE_SIZE + 1
        with pytest.raises(errors.ValueTooLargeError) as info:
            write(any_db, big)
    err = info.value
    assert isinstance(err, ValueError)
    assert isinstance(err, errors.SQLiteError)
    assert err.code == SQLITE_TOOBIG
    assert err.extended_code == SQLITE_TOOBIG
    assert "2,147,483,645" in str(err) or "2147483645" in str(err)  # says the limit
    assert not any_db.in_transaction
    assert any_db.list_keys() == ["keep"]
    assert any_db.get("keep") == b"old"
    assert sqlite_rows(any_db.path, "SELECT k, v FROM zarr") == [("keep", b"old")]


@pytest.mark.parametrize(
    "name, write", TOO_LARGE_WRITES[:3], ids=[w[0] for w in TOO_LARGE_WRITES[:3]]
)
def test_value_too_large_names_the_file(db, tmp_path, name, write):
    # Like every SQLiteError raised by a Database, it carries the database file name.
    with sparse_buffer(tmp_path / "sparse.bin", MAX_VALUE_SIZE + 1) as big:
        with pytest.raises(errors.ValueTooLargeError) as info:
            write(db, big)
    assert info.value.filename == db.path


def test_value_too_large_inside_a_transaction(any_db, tmp_path):
    # Refused as it is submitted: the transaction goes on without it.
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        writer.write([("set", "before", b"1")])
        with sparse_buffer(tmp_path / "sparse.bin", MAX_VALUE_SIZE + 1) as big:
            with pytest.raises(errors.ValueTooLargeError):
                writer.write([("set", "x", b"2"), ("set", "big", big)])
        writer.write([("set", "after", b"3")])
        writer.end(token, True)
    assert any_db.list_keys() == ["after", "before"]


# --- constraint and SQL errors ------------------------------------------------------------


def test_not_null_constraint(db):
    with pytest.raises(errors.ConstraintError) as info:
        db.execute("INSERT INTO zarr(k, v) VALUES (?, ?)", ["k", None])
    err = info.value
    assert err.code == SQLITE_CONSTRAINT
    assert err.extended_code == SQLITE_CONSTRAINT_NOTNULL
    assert err.sqlite_message == "NOT NULL constraint failed: zarr.v"
    assert err.filename == db.path
    assert db.list_keys() == []


def test_primary_key_constraint(db):
    writes.set(db, "k", b"1")
    with pytest.raises(errors.ConstraintError) as info:
        db.execute("INSERT INTO zarr(k, v) VALUES (?, ?)", ["k", b"2"])
    assert info.value.extended_code == SQLITE_CONSTRAINT_PRIMARYKEY
    assert info.value.sqlite_message == "UNIQUE constraint failed: zarr.k"
    assert db.get("k") == b"1"


def test_trigger_abort_carries_its_message(any_db):
    any_db.set_limit("TRIGGER_DEPTH", 1)  # no engine connection runs a trigger unless told to
    any_db.executescript(
        "CREATE TRIGGER guard BEFORE INSERT ON zarr WHEN new.k = 'forbidden' "
        "BEGIN SELECT RAISE(ABORT, 'this key is forbidden'); END"
    )
    for write in (
        lambda: writes.set(any_db, "forbidden", b"x"),
        lambda: writes.set_if_absent(any_db, "forbidden", b"x"),
        lambda: writes.set_many(any_db, [("fine", b"1"), ("forbidden", b"x")]),
    ):
        with pytest.raises(errors.ConstraintError) as info:
            write()
        err = info.value
        assert err.code == SQLITE_CONSTRAINT
        assert err.extended_code == SQLITE_CONSTRAINT_TRIGGER
        assert err.sqlite_message == "this key is forbidden"
        assert "this key is forbidden" in str(err)
        assert err.filename == any_db.path
        assert not any_db.in_transaction
    assert any_db.list_keys() == []


def test_syntax_error(db):
    with pytest.raises(errors.SQLiteError) as info:
        db.execute("SELEKT 1")
    err = info.value
    assert type(err) is errors.SQLiteError
    assert err.code == SQLITE_ERROR
    assert err.extended_code == SQLITE_ERROR
    assert err.sqlite_message == 'near "SELEKT": syntax error'
    assert err.filename == db.path
    assert db.execute("SELECT 1") == [(1,)]  # usable afterwards


def test_missing_table_in_sql(db):
    with pytest.raises(errors.SQLiteError) as info:
        db.execute("SELECT * FROM nope")
    assert info.value.sqlite_message == "no such table: nope"


def test_ending_a_transaction_that_is_not_open_is_misuse(db):
    with writes.open_writer(db) as writer:
        with pytest.raises(errors.MisuseError):
            writer.end(12345, True)
        token = writer.begin(0, [])
        with pytest.raises(errors.MisuseError):
            writer.end(token + 1, True)
        assert writer.in_transaction
        writer.end(token, False)
        with pytest.raises(errors.MisuseError):
            writer.end(token, False)  # ended already


def test_error_classes_follow_the_primary_code():
    # The mapping, written out from the SQLite documentation.
    expected = {
        1: errors.SQLiteError,
        2: errors.SQLiteError,  # SQLITE_INTERNAL
        3: errors.CantOpenError,
        4: errors.SQLiteError,  # SQLITE_ABORT
        5: errors.DatabaseLockedError,
        6: errors.DatabaseLockedError,
        7: errors.OutOfMemoryError,  # SQLITE_NOMEM (a MemoryError)
        8: errors.ReadOnlyError,
        9: errors.OperationInterruptedError,
        10: errors.DiskIOError,
        11: errors.DatabaseCorruptError,
        13: errors.DiskFullError,
        14: errors.CantOpenError,
        18: errors.ValueTooLargeError,
        19: errors.ConstraintError,
        21: errors.MisuseError,
        22: errors.DiskIOError,
        23: errors.CantOpenError,
        25: errors.MisuseError,
        26: errors.NotADatabaseError,
    }
    for code, cls in expected.items():
        extended = code | (3 << 8)
        err = errors.sqlite_error(extended, extended, "msg", filename="/f.zarrdb", context="ctx")
        assert type(err) is cls, code
        assert err.code == code
        assert err.extended_code == extended
        assert err.sqlite_message == "msg"
        assert err.filename == "/f.zarrdb"
        assert "msg" in str(err) and "/f.zarrdb" in str(err) and "ctx" in str(err)


def test_exception_hierarchy():
    assert issubclass(errors.ReadOnlyError, PermissionError)
    assert issubclass(errors.CantOpenError, OSError)
    assert issubclass(errors.DiskIOError, OSError)
    assert issubclass(errors.DiskFullError, OSError)
    assert issubclass(errors.ValueTooLargeError, ValueError)
    assert issubclass(errors.InvalidKeyError, ValueError)
    assert issubclass(errors.ClosedError, ValueError)
    assert issubclass(errors.ConcurrentUseError, RuntimeError)
    assert issubclass(errors.ForkedProcessError, RuntimeError)
    assert issubclass(errors.NotADatabaseError, errors.DatabaseCorruptError)
    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type):
            assert issubclass(obj, errors.ZarrDBError)


def test_os_error_subclasses_print_their_message():
    err = errors.sqlite_error(14, 14, "unable to open database file", filename="/x")
    assert str(err).startswith("'/x': unable to open database file")
    assert not str(err).startswith("[Errno")
    assert os.fspath("/x") == err.filename


# --- every bind's result is checked ------------------------------------------------------------

# With the connection's length limit lowered below it, binding this key fails (SQLITE_TOOBIG).
# An unchecked bind leaves the parameter NULL and runs the statement anyway: a lookup finds
# nothing, a delete deletes nothing, an insert fails on the NOT NULL constraint instead.
LIMIT = 200
LONG = "k" * (LIMIT + 100)

BOUND = [
    ("get", lambda db: db.get(LONG)),
    ("get_range", lambda db: db.get_range(LONG, 0, 1)),
    ("get_ranges", lambda db: db.get_ranges([("k", 0, None), (LONG, 0, None)])),
    ("exists", lambda db: db.exists(LONG)),
    ("length", lambda db: db.length(LONG)),
    ("list_prefix", lambda db: db.list_prefix(LONG + "/")),
    ("list_dir", lambda db: db.list_dir(LONG + "/")),
    ("count_prefix", lambda db: db.count_prefix(LONG + "/")),
    ("set key", lambda db: writes.set(db, LONG, b"v")),
    ("set value", lambda db: writes.set(db, "k", b"v" * (LIMIT + 100))),
    ("set large value key", lambda db: writes.set(db, LONG, b"v" * (4 << 20))),
    ("set large value", lambda db: writes.set(db, "k", b"v" * (4 << 20))),
    ("delete", lambda db: writes.delete(db, LONG)),
    ("delete_prefix", lambda db: writes.delete_prefix(db, LONG + "/")),
]


@needs_test_hooks
@pytest.mark.parametrize("name, call", BOUND, ids=[b[0] for b in BOUND])
def test_a_failed_bind_raises_rather_than_running_the_statement_without_it(tmp_path, name, call):
    path = make_db_file(tmp_path / "bind.zarrdb", rows=[("k", b"old"), (LONG, b"long")])
    with Database(path) as db:
        db.length_limit(LIMIT)
        with pytest.raises(errors.ValueTooLargeError) as info:
            call(db)
        assert info.value.code == SQLITE_TOOBIG
        db.length_limit(MAX_VALUE_SIZE + 2)
        assert db.get("k") == b"old" and db.get(LONG) == b"long"  # nothing written or deleted


@needs_test_hooks
def test_length_limit_reports_and_sets_the_connections_limit(tmp_path):
    path = make_db_file(tmp_path / "limit.zarrdb")
    with Database(path) as db:
        compiled = db.length_limit()
        assert compiled >= MAX_VALUE_SIZE
        assert db.length_limit(LIMIT) == compiled
        assert db.length_limit() == LIMIT


# --- SQLITE_NOMEM is a MemoryError, through the error table -------------------------------------

_NOMEM_CHILD = r"""
import resource, sys
from zarrdb import errors
from zarrdb._core import Database

db = Database(sys.argv[1])
with open("/proc/self/statm") as f:
    mapped = int(f.read().split()[0]) * resource.getpagesize()
# Room for what the process maps now and a little more, not for a 1 GB value.
resource.setrlimit(resource.RLIMIT_AS, (mapped + (256 << 20), resource.RLIM_INFINITY))
try:
    db.execute("SELECT randomblob(1000000000)")
except MemoryError as exc:
    print(type(exc).__name__, isinstance(exc, errors.OutOfMemoryError), exc.code, flush=True)
else:
    print("no error", flush=True)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc (Linux)")
def test_sqlite_out_of_memory_raises_memory_error_from_the_table(tmp_path):
    """SQLite's SQLITE_NOMEM, for real (an allocation refused under an address-space limit),
    becomes errors.OutOfMemoryError, a MemoryError, like every other code: by the table."""
    path = make_db_file(tmp_path / "nomem.zarrdb")
    env = dict(os.environ)
    # An AddressSanitizer build (scripts/memcheck.sh --asan) returns NULL rather than aborting.
    env["ASAN_OPTIONS"] = ":".join(
        filter(None, [env.get("ASAN_OPTIONS"), "allocator_may_return_null=1"])
    )
    proc = subprocess.run(
        [sys.executable, "-c", _NOMEM_CHILD, str(path)],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["OutOfMemoryError", "True", "7"], proc.stdout + proc.stderr


def test_nomem_code_maps_to_out_of_memory_error():
    err = errors.sqlite_error(7, 7, "out of memory", filename="f.zarrdb", context="cannot read")
    assert type(err) is errors.OutOfMemoryError
    assert isinstance(err, MemoryError) and isinstance(err, errors.SQLiteError)
