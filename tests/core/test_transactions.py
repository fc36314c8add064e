"""Transactions: begin_write (BEGIN IMMEDIATE), commit, rollback, and the nested-safe context
manager transaction() whose inner levels are savepoints."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zarrdb import errors
from zarrdb._core import Database

from .helpers import LockHolder, sqlite_rows


class Boom(Exception):
    pass


def committed_keys(path):
    """The keys another process sees: only committed data."""
    return [r[0] for r in sqlite_rows(path, "SELECT k FROM zarr ORDER BY k")]


# --- begin_write / commit / rollback -----------------------------------------------------------


def test_begin_write_commit(wal_db, wal_path):
    assert not wal_db.in_transaction
    wal_db.begin_write()
    assert wal_db.in_transaction
    wal_db.set("a", b"1")
    wal_db.set_many([("b", b"2"), ("c", b"3")])
    wal_db.delete("c")
    assert committed_keys(wal_path) == []  # not visible before commit
    assert wal_db.get_many(["a", "b", "c"]) == [b"1", b"2", None]  # but to itself, yes
    wal_db.commit()
    assert not wal_db.in_transaction
    assert committed_keys(wal_path) == ["a", "b"]


def test_begin_write_rollback(any_db):
    any_db.set("keep", b"old")
    any_db.begin_write()
    any_db.set("keep", b"new")
    any_db.set("gone", b"x")
    any_db.delete_prefix("")
    assert any_db.list_keys() == []
    any_db.rollback()
    assert not any_db.in_transaction
    assert any_db.list_keys() == ["keep"]
    assert any_db.get("keep") == b"old"
    assert committed_keys(any_db.path) == ["keep"]


def test_begin_write_takes_the_write_lock_at_once(any_db):
    # BEGIN IMMEDIATE: another process cannot start writing while we hold the transaction,
    # even before we wrote anything.
    any_db.begin_write()
    try:
        with pytest.raises(AssertionError, match="database is locked"):
            _other_process_write(any_db.path, timeout=0.1)
    finally:
        any_db.rollback()
    _other_process_write(any_db.path, timeout=5)
    assert any_db.get("other") == b"\x00"


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


def test_begin_write_when_another_process_writes(wal_db, wal_path):
    slow = Database(wal_path, busy_timeout=0.1)
    try:
        with LockHolder(wal_path, "IMMEDIATE"):
            with pytest.raises(errors.DatabaseLockedError):
                slow.begin_write()
            assert not slow.in_transaction
            assert slow.get("anything") is None  # reads still work in WAL mode
        slow.begin_write()
        slow.set("k", b"v")
        slow.commit()
    finally:
        slow.close()
    assert wal_db.get("k") == b"v"


def test_begin_write_twice_is_misuse(any_db):
    any_db.begin_write()
    with pytest.raises(errors.MisuseError):
        any_db.begin_write()
    assert any_db.in_transaction
    any_db.set("k", b"v")
    any_db.commit()
    assert any_db.get("k") == b"v"


def test_rollback_without_transaction_is_a_no_op(any_db):
    any_db.set("k", b"v")
    any_db.rollback()
    assert not any_db.in_transaction
    assert any_db.get("k") == b"v"


def test_commit_without_transaction_changes_nothing(any_db):
    any_db.set("k", b"v")
    any_db.commit()
    assert not any_db.in_transaction
    assert any_db.get("k") == b"v"


def test_writes_inside_begin_write_are_not_separately_committed(any_db):
    any_db.begin_write()
    any_db.set_many([("a", b"1"), ("b", b"2")])
    assert any_db.in_transaction  # set_many joined the open transaction
    any_db.delete_many(["a", "x"])
    assert any_db.in_transaction
    assert any_db.set_if_absent("c", b"3")
    any_db.rollback()
    assert any_db.list_keys() == []


def test_close_with_an_open_transaction_discards_it(db_path):
    db = Database(db_path)
    db.set("committed", b"1")
    db.begin_write()
    db.set("uncommitted", b"2")
    db.close()
    assert committed_keys(db_path) == ["committed"]
    with Database(db_path) as again:
        assert again.list_keys() == ["committed"]
        assert not again.in_transaction


# --- transaction() ---------------------------------------------------------------------------


def test_transaction_commits(wal_db, wal_path):
    with wal_db.transaction() as t:
        assert t is wal_db
        assert wal_db.in_transaction
        wal_db.set("a", b"1")
        wal_db.set("b", b"2")
        assert committed_keys(wal_path) == []
    assert not wal_db.in_transaction
    assert committed_keys(wal_path) == ["a", "b"]


def test_transaction_rolls_back_on_exception(any_db):
    any_db.set("keep", b"old")
    with pytest.raises(Boom):
        with any_db.transaction():
            any_db.set("keep", b"new")
            any_db.set("gone", b"x")
            raise Boom
    assert not any_db.in_transaction
    assert any_db.list_keys() == ["keep"]
    assert any_db.get("keep") == b"old"
    assert committed_keys(any_db.path) == ["keep"]


def test_transaction_rolls_back_on_base_exception(any_db):
    with pytest.raises(KeyboardInterrupt):
        with any_db.transaction():
            any_db.set("k", b"v")
            raise KeyboardInterrupt
    assert not any_db.in_transaction
    assert any_db.list_keys() == []


def test_transaction_usable_again_after_rollback(any_db):
    for _ in range(3):
        with pytest.raises(Boom):
            with any_db.transaction():
                any_db.set("x", b"1")
                raise Boom
    with any_db.transaction():
        any_db.set("y", b"2")
    assert any_db.list_keys() == ["y"]


def test_inner_exception_caught_rolls_back_only_the_inner_level(any_db):
    with any_db.transaction():
        any_db.set("outer-before", b"1")
        try:
            with any_db.transaction() as inner:
                assert inner is any_db
                any_db.set("inner", b"2")
                any_db.set("outer-before", b"changed")
                raise Boom
        except Boom:
            pass
        assert any_db.in_transaction
        assert any_db.get("inner") is None
        assert any_db.get("outer-before") == b"1"
        any_db.set("outer-after", b"3")
    assert any_db.list_keys() == ["outer-after", "outer-before"]
    assert any_db.get("outer-before") == b"1"
    assert committed_keys(any_db.path) == ["outer-after", "outer-before"]


def test_inner_success_outer_failure_rolls_back_everything(any_db):
    with pytest.raises(Boom):
        with any_db.transaction():
            any_db.set("a", b"1")
            with any_db.transaction():
                any_db.set("b", b"2")
            assert any_db.get("b") == b"2"
            raise Boom
    assert any_db.list_keys() == []


def test_uncaught_inner_exception_rolls_back_all_levels(any_db):
    with pytest.raises(Boom):
        with any_db.transaction():
            any_db.set("a", b"1")
            with any_db.transaction():
                any_db.set("b", b"2")
                raise Boom
    assert not any_db.in_transaction
    assert any_db.list_keys() == []


def test_three_levels(any_db):
    with any_db.transaction():
        any_db.set("l1", b"")
        with any_db.transaction():
            any_db.set("l2", b"")
            try:
                with any_db.transaction():
                    any_db.set("l3", b"")
                    raise Boom
            except Boom:
                pass
            with any_db.transaction():
                any_db.set("l3-again", b"")
        try:
            with any_db.transaction():
                any_db.set("l2-failed", b"")
                with any_db.transaction():
                    any_db.set("l3-under-failed", b"")
                raise Boom
        except Boom:
            pass
    assert any_db.list_keys() == ["l1", "l2", "l3-again"]


def test_sequential_inner_levels(any_db):
    with any_db.transaction():
        for i in range(5):
            try:
                with any_db.transaction():
                    any_db.set(f"k{i}", b"")
                    if i % 2:
                        raise Boom
            except Boom:
                pass
    assert any_db.list_keys() == ["k0", "k2", "k4"]
    # and the nesting depth went back to zero: a new outer level is a real transaction
    with pytest.raises(Boom):
        with any_db.transaction():
            any_db.set("x", b"")
            raise Boom
    assert any_db.list_keys() == ["k0", "k2", "k4"]


def test_batches_inside_transaction_are_part_of_it(any_db):
    any_db.set_many([("a/1", b"1"), ("a/2", b"2"), ("b", b"3")])
    with pytest.raises(Boom):
        with any_db.transaction():
            any_db.set_many([("c", b"4"), ("d", b"5")])
            assert any_db.delete_many(["b", "c"]) == 2
            assert any_db.delete_prefix("a/") == 2
            assert any_db.set_if_absent("e", b"6")
            assert any_db.list_keys() == ["d", "e"]
            raise Boom
    assert any_db.list_keys() == ["a/1", "a/2", "b"]


def test_reads_in_transaction_see_own_writes(any_db):
    with any_db.transaction():
        any_db.set("a/x", b"12345")
        assert any_db.get("a/x") == b"12345"
        assert any_db.exists("a/x")
        assert any_db.length("a/x") == 5
        assert any_db.list_prefix("a/") == ["a/x"]
        assert any_db.list_dir("") == ["a/"]
        assert any_db.count_prefix("a") == 1
        assert any_db.size_prefix("a") == 5
        assert any_db.get_many(["a/x", "nope"]) == [b"12345", None]


def test_transaction_when_locked_by_another_process(wal_path):
    db = Database(wal_path, busy_timeout=0.1)
    try:
        with LockHolder(wal_path, "IMMEDIATE"):
            with pytest.raises(errors.DatabaseLockedError):
                with db.transaction():
                    db.set("never", b"")
            assert not db.in_transaction
        # The failed attempt left no nesting behind: this is an outermost level again.
        with db.transaction():
            db.set("k", b"v")
        assert not db.in_transaction
        assert committed_keys(wal_path) == ["k"]
    finally:
        db.close()


def test_transaction_blocks_other_writers_until_done(wal_db, wal_path):
    with wal_db.transaction():
        wal_db.set("mine", b"1")
        with pytest.raises(AssertionError, match="database is locked"):
            _other_process_write(wal_path, timeout=0.1)
    _other_process_write(wal_path, timeout=5)
    assert committed_keys(wal_path) == ["mine", "other"]


def test_set_many_failure_inside_a_transaction_writes_nothing_of_the_batch(any_db):
    # set_many is atomic: when SQLite refuses one of its rows inside an open transaction,
    # none of the batch may stay in the transaction (the transaction itself goes on).
    any_db.executescript(
        "CREATE TRIGGER no_bad BEFORE INSERT ON zarr WHEN new.k = 'bad' "
        "BEGIN SELECT RAISE(ABORT, 'bad key refused'); END"
    )
    with any_db.transaction():
        any_db.set("before", b"1")
        with pytest.raises(errors.ConstraintError):
            any_db.set_many([("x", b"2"), ("y", b"3"), ("bad", b"4")])
        assert any_db.in_transaction
        any_db.set("after", b"5")
    assert any_db.list_keys() == ["after", "before"]


def test_delete_many_failure_inside_a_transaction_deletes_nothing_of_the_batch(any_db):
    any_db.executescript(
        "CREATE TRIGGER keep_x BEFORE DELETE ON zarr WHEN old.k = 'x' "
        "BEGIN SELECT RAISE(ABORT, 'x stays'); END"
    )
    any_db.set_many([("a", b"1"), ("b", b"2"), ("x", b"3")])
    with any_db.transaction():
        with pytest.raises(errors.ConstraintError):
            any_db.delete_many(["a", "b", "x"])
    assert any_db.list_keys() == ["a", "b", "x"]


def test_explicit_rollback_inside_transaction_then_a_new_transaction(any_db):
    # rollback() ends the whole transaction; leaving the block afterwards must not break
    # the next transaction().
    with any_db.transaction():
        any_db.set("discarded", b"1")
        any_db.rollback()
        assert not any_db.in_transaction
    assert any_db.list_keys() == []
    with any_db.transaction():
        any_db.set("kept", b"2")
    assert not any_db.in_transaction
    assert any_db.list_keys() == ["kept"]
    with pytest.raises(Boom):
        with any_db.transaction():
            any_db.set("discarded-too", b"3")
            raise Boom
    assert any_db.list_keys() == ["kept"]


def test_explicit_commit_inside_transaction_then_a_new_transaction(any_db):
    with any_db.transaction():
        any_db.set("a", b"1")
        any_db.commit()
        assert not any_db.in_transaction
    assert committed_keys(any_db.path) == ["a"]
    with pytest.raises(Boom):
        with any_db.transaction():
            any_db.set("b", b"2")
            raise Boom
    assert any_db.list_keys() == ["a"]


def test_failed_commit_is_not_silently_lost(db_path):
    # DELETE mode: COMMIT needs the exclusive lock, which a reader in another process keeps
    # from us. The commit fails with DatabaseLockedError ("it can be retried"). Retrying it
    # once the reader is gone must either store the data or fail loudly, never report
    # success for a transaction that was thrown away.
    db = Database(db_path, busy_timeout=0.2)
    try:
        db.begin_write()
        db.set("k", b"v")
        with LockHolder(db_path, "DEFERRED"):
            with pytest.raises(errors.DatabaseLockedError):
                db.commit()
        try:
            db.commit()
        except errors.ZarrDBError:
            return  # a loud failure is acceptable
        assert db.get("k") == b"v", "commit() reported success but the data is gone"
        assert committed_keys(db_path) == ["k"]
    finally:
        db.close()


def test_set_many_whose_commit_is_blocked_writes_nothing_and_can_be_retried(db_path):
    db = Database(db_path, busy_timeout=0.2)
    try:
        with LockHolder(db_path, "DEFERRED"):
            with pytest.raises(errors.DatabaseLockedError):
                db.set_many([("a", b"1"), ("b", b"2")])
            assert not db.in_transaction
        assert committed_keys(db_path) == []
        db.set_many([("a", b"1"), ("b", b"2")])
        assert committed_keys(db_path) == ["a", "b"]
    finally:
        db.close()


def test_transaction_whose_commit_is_blocked_rolls_back_and_raises(db_path):
    db = Database(db_path, busy_timeout=0.2)
    try:
        with LockHolder(db_path, "DEFERRED"):
            with pytest.raises(errors.DatabaseLockedError):
                with db.transaction():
                    db.set("a", b"1")
            assert not db.in_transaction
        assert committed_keys(db_path) == []
        with db.transaction():
            db.set("a", b"1")
        assert committed_keys(db_path) == ["a"]
    finally:
        db.close()
