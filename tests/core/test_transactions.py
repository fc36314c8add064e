"""Explicit transactions of the writer thread (Writer.begin/end, what `store.transaction()` runs):
BEGIN IMMEDIATE .. COMMIT at the outermost level, savepoints inside; every write queued while one
is open joins it, and reads inside it go through the connection the writer hands over.

What is committed is checked with the standard-library sqlite3 in another process (helpers).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from zarrdb import errors
from zarrdb._core import Database

from . import writes
from .helpers import LockHolder, make_db_file, needs_test_hooks, sqlite_rows


def committed_keys(path):
    """The keys another process sees: only committed data."""
    return [r[0] for r in sqlite_rows(path, "SELECT k FROM zarr ORDER BY k")]


def _other_process_write(path, timeout):
    """Insert ('other', x'00') from another process (stdlib sqlite3); AssertionError with
    its message if that fails."""
    script = (
        "import sqlite3, sys\n"
        "con = sqlite3.connect(sys.argv[1], timeout=float(sys.argv[2]))\n"
        "con.execute(\"INSERT OR REPLACE INTO zarr(k, v) VALUES ('other', x'00')\")\n"
        "con.commit()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(path), str(timeout)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise AssertionError(proc.stderr)


# --- one level ---------------------------------------------------------------------------------


@needs_test_hooks
def test_commit(wal_db, wal_path):
    with writes.open_writer(wal_db) as writer:
        assert not writer.in_transaction
        opened: list[int] = []
        token = writer.begin(0, opened)
        assert opened == [token] and writer.in_transaction
        writer.write([("set", "a", b"1")])
        writer.write([("set", "b", b"2"), ("set", "c", b"3")])
        writer.write([("delete", "c", None)])
        with writer.holding() as db:
            assert db.in_transaction
            assert db.get_many(["a", "b", "c"]) == [b"1", b"2", None]  # visible to itself
        assert committed_keys(wal_path) == []  # but not committed
        writer.end(token, True)
        assert not writer.in_transaction
    assert committed_keys(wal_path) == ["a", "b"]


@needs_test_hooks
def test_rollback(any_db):
    writes.set(any_db, "keep", b"old")
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        writer.write([("set", "keep", b"new"), ("set", "gone", b"x")])
        writer.write([("delete_prefix", "", None)])
        with writer.holding() as db:
            assert db.list_keys() == []
        writer.end(token, False)
        assert not writer.in_transaction
    assert not any_db.in_transaction
    assert any_db.list_keys() == ["keep"]
    assert any_db.get("keep") == b"old"
    assert committed_keys(any_db.path) == ["keep"]


@needs_test_hooks
def test_every_kind_of_write_joins_it_and_goes_with_its_rollback(any_db):
    writes.set_many(any_db, [("a/1", b"1"), ("a/2", b"2"), ("b", b"3")])
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        subs = [
            writer.submit([("set", "c", b"4"), ("set", "d", b"5")]),
            writer.submit([("delete", "b", None), ("delete", "c", None)]),
            writer.submit([("delete_prefix", "a/", None)]),
            writer.submit([("set_if_absent", "e", b"6")]),
        ]
        assert all(sub.joined for sub in subs)  # not waited for: the transaction's
        with writer.holding() as db:
            assert db.list_keys() == ["d", "e"]
        writer.end(token, False)
    assert any_db.list_keys() == ["a/1", "a/2", "b"]


def test_usable_again_after_rollbacks(any_db):
    with writes.open_writer(any_db) as writer:
        for _ in range(3):
            token = writer.begin(0, [])
            writer.write([("set", "x", b"1")])
            writer.end(token, False)
        token = writer.begin(0, [])
        writer.write([("set", "y", b"2")])
        writer.end(token, True)
    assert any_db.list_keys() == ["y"]


def test_writes_after_the_end_are_committed_on_their_own(any_db):
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        writer.write([("set", "inside", b"1")])
        writer.end(token, False)
        sub = writer.submit([("set", "after", b"2")])
        assert not sub.joined
        sub.wait()
        assert committed_keys(any_db.path) == ["after"]


@needs_test_hooks
def test_reads_inside_see_its_writes(any_db):
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        writer.write([("set", "a/x", b"12345")])
        with writer.holding() as db:
            assert db.get("a/x") == b"12345"
            assert db.exists("a/x")
            assert db.length("a/x") == 5
            assert db.list_prefix("a/") == ["a/x"]
            assert db.list_dir("") == ["a/"]
            assert db.count_prefix("a") == 1
            assert db.size_prefix("a") == 5
            assert db.get_many(["a/x", "nope"]) == [b"12345", None]
        writer.end(token, True)


def test_close_with_an_open_transaction_discards_it(db_path):
    db = Database(db_path)
    writes.set(db, "committed", b"1")
    with writes.open_writer(db) as writer:
        writer.begin(0, [])
        writer.write([("set", "uncommitted", b"2")])
    assert not db.in_transaction
    db.close()
    assert committed_keys(db_path) == ["committed"]
    with Database(db_path) as again:
        assert again.list_keys() == ["committed"]


# --- the write lock ------------------------------------------------------------------------------


def test_begin_takes_the_write_lock_at_once(any_db):
    # BEGIN IMMEDIATE: another process cannot start writing while the transaction is open,
    # even before anything was written in it.
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        try:
            with pytest.raises(AssertionError, match="database is locked"):
                _other_process_write(any_db.path, timeout=0.1)
        finally:
            writer.end(token, False)
        _other_process_write(any_db.path, timeout=5)
    assert any_db.get("other") == b"\x00"


@needs_test_hooks
def test_begin_when_another_process_writes(wal_path):
    db = Database(wal_path, busy_timeout=0.1)
    try:
        with writes.open_writer(db) as writer:
            with LockHolder(wal_path, "IMMEDIATE"):
                with pytest.raises(errors.DatabaseLockedError):
                    writer.begin(0, [])
                assert not writer.in_transaction
                with writer.holding() as held:
                    assert not held.in_transaction
                    assert held.get("anything") is None  # reads still work in WAL mode
            # The failed attempt left nothing behind: this is an outermost level again.
            token = writer.begin(0, [])
            writer.write([("set", "k", b"v")])
            writer.end(token, True)
        assert committed_keys(wal_path) == ["k"]
    finally:
        db.close()


def test_other_writers_wait_until_it_ends(wal_db, wal_path):
    with writes.open_writer(wal_db) as writer:
        token = writer.begin(0, [])
        writer.write([("set", "mine", b"1")])
        with pytest.raises(AssertionError, match="database is locked"):
            _other_process_write(wal_path, timeout=0.1)
        writer.end(token, True)
    _other_process_write(wal_path, timeout=5)
    assert committed_keys(wal_path) == ["mine", "other"]


def test_a_commit_a_reader_blocks_rolls_back_and_raises(db_path):
    # DELETE mode: COMMIT needs the exclusive lock, which a reader in another process keeps
    # from us. The end fails loudly with DatabaseLockedError and nothing of the transaction
    # is stored (never reported committed and then lost); the writer goes on.
    db = Database(db_path, busy_timeout=0.2)
    try:
        with writes.open_writer(db) as writer:
            token = writer.begin(0, [])
            writer.write([("set", "a", b"1")])
            with LockHolder(db_path, "DEFERRED"):
                with pytest.raises(errors.DatabaseLockedError):
                    writer.end(token, True)
                assert not writer.in_transaction
            assert committed_keys(db_path) == []
            token = writer.begin(0, [])
            writer.write([("set", "a", b"1")])
            writer.end(token, True)
        assert committed_keys(db_path) == ["a"]
    finally:
        db.close()


def test_a_group_commit_a_reader_blocks_writes_nothing_and_can_be_retried(db_path):
    db = Database(db_path, busy_timeout=0.2)
    try:
        with writes.open_writer(db) as writer:
            with LockHolder(db_path, "DEFERRED"):
                with pytest.raises(errors.DatabaseLockedError):
                    writer.write([("set", "a", b"1"), ("set", "b", b"2")])
            assert committed_keys(db_path) == []
            writer.write([("set", "a", b"1"), ("set", "b", b"2")])
        assert committed_keys(db_path) == ["a", "b"]
    finally:
        db.close()


# --- levels (savepoints) -------------------------------------------------------------------------


@needs_test_hooks
def test_an_inner_level_that_fails_rolls_back_only_itself(any_db):
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        writer.write([("set", "outer-before", b"1")])
        assert writer.begin(token, []) == token  # inside the open one: a savepoint
        writer.write([("set", "inner", b"2"), ("set", "outer-before", b"changed")])
        writer.end(token, False)
        assert writer.in_transaction
        with writer.holding() as db:
            assert db.get("inner") is None
            assert db.get("outer-before") == b"1"
        writer.write([("set", "outer-after", b"3")])
        writer.end(token, True)
    assert committed_keys(any_db.path) == ["outer-after", "outer-before"]
    assert any_db.get("outer-before") == b"1"


@needs_test_hooks
def test_an_inner_level_that_succeeds_goes_with_the_outer_rollback(any_db):
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        writer.write([("set", "a", b"1")])
        writer.begin(token, [])
        writer.write([("set", "b", b"2")])
        writer.end(token, True)
        with writer.holding() as db:
            assert db.get("b") == b"2"
        writer.end(token, False)
    assert any_db.list_keys() == []


def test_three_levels(any_db):
    with writes.open_writer(any_db) as writer:

        def level(ok, *keys, inner=()):
            writer.begin(token, [])
            writer.write([("set", k, b"") for k in keys])
            for run in inner:
                run()
            writer.end(token, ok)

        token = writer.begin(0, [])
        writer.write([("set", "l1", b"")])
        level(
            True,
            "l2",
            inner=[lambda: level(False, "l3"), lambda: level(True, "l3-again")],
        )
        level(False, "l2-failed", inner=[lambda: level(True, "l3-under-failed")])
        writer.end(token, True)
    assert any_db.list_keys() == ["l1", "l2", "l3-again"]


def test_sequential_inner_levels(any_db):
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        for i in range(5):
            writer.begin(token, [])
            writer.write([("set", f"k{i}", b"")])
            writer.end(token, i % 2 == 0)
        writer.end(token, True)
        assert not writer.in_transaction
        # The depth went back to zero: a new outermost level is a transaction of its own.
        token = writer.begin(0, [])
        writer.write([("set", "x", b"")])
        writer.end(token, False)
    assert any_db.list_keys() == ["k0", "k2", "k4"]


# --- a write of the transaction that fails -------------------------------------------------------


def _with_trigger(path, sql):
    con = sqlite3.connect(path)
    try:
        con.execute(sql)
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize("kind", ["set", "delete"])
def test_a_failed_batch_fails_the_whole_transaction(tmp_path, kind):
    # SQLite refuses one row of a batch (a trigger) after others of it went in: nobody waits
    # for a write of the transaction, so its error ends the transaction, rolled back
    # whole, and end() raises it.
    path = make_db_file(tmp_path / "trigger.zarrdb", "wal", rows=[("a", b"1"), ("x", b"2")])
    _with_trigger(
        path,
        "CREATE TRIGGER refuse BEFORE INSERT ON zarr WHEN new.k = 'bad' "
        "BEGIN SELECT RAISE(ABORT, 'bad key refused'); END"
        if kind == "set"
        else "CREATE TRIGGER refuse BEFORE DELETE ON zarr WHEN old.k = 'x' "
        "BEGIN SELECT RAISE(ABORT, 'x stays'); END",
    )
    batch = (
        [("set", "y", b"3"), ("set", "bad", b"4")]
        if kind == "set"
        else [("delete", "a", None), ("delete", "x", None)]
    )
    with Database(path) as db:
        db.set_limit("TRIGGER_DEPTH", 1)  # no engine connection runs a trigger unless told to
        with writes.open_writer(db) as writer:
            token = writer.begin(0, [])
            writer.write([("set", "before", b"0")])
            writer.write(batch)
            writer.write([("set", "after", b"5")])
            with pytest.raises(errors.ConstraintError):
                writer.end(token, True)
            assert not writer.in_transaction
    assert committed_keys(path) == ["a", "x"]
