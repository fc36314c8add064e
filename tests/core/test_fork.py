"""fork(): a Database opened in the parent raises ForkedProcessError in the child; close() in
the child only forgets the handle, so the parent's connection (and its locks, its WAL) stays
intact. The child reports through a pipe and always leaves with os._exit."""

from __future__ import annotations

import gc
import os

import pytest

from zarrdb import errors
from zarrdb._core import Database, Writer

from . import writes
from .helpers import make_db_file, run_in_child, sqlite_rows

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def outcome(call, *args) -> str:
    """The name of the exception call(*args) raises, or "no error"."""
    try:
        call(*args)
    except Exception as e:
        return type(e).__name__
    return "no error"


CHILD_CALLS = {
    "get": lambda db: db.get("k"),
    "get_many": lambda db: db.get_many(["k"]),
    "get_range": lambda db: db.get_range("k", 0, 1),
    "exists": lambda db: db.exists("k"),
    "set": lambda db: writes.set(db, "k", b"from the child"),
    "set_many": lambda db: writes.set_many(db, [("child", b"1")]),
    "delete": lambda db: writes.delete(db, "k"),
    "delete_prefix": lambda db: writes.delete_prefix(db, ""),
    "list_keys": lambda db: db.list_keys(),
    "list_dir": lambda db: db.list_dir(""),
    "count_prefix": lambda db: db.count_prefix(""),
    "_atomic": lambda db: db._atomic().__enter__(),
    "checkpoint": lambda db: db.checkpoint(),
    "execute": lambda db: db.execute("SELECT 1"),
}


def test_use_after_fork_raises_forked_process_error(any_db):
    writes.set(any_db, "k", b"parent")

    def child():
        return {name: outcome(call, any_db) for name, call in CHILD_CALLS.items()}

    report = run_in_child(child)
    assert report == {name: "ForkedProcessError" for name in CHILD_CALLS}
    assert issubclass(errors.ForkedProcessError, RuntimeError)
    # nothing the child tried reached the file
    assert any_db.list_keys() == ["k"]
    assert any_db.get("k") == b"parent"


def test_close_in_child_then_closed_error(any_db):
    def child():
        any_db.close()
        return {
            "closed": any_db.closed,
            "second close": outcome(any_db.close),
            "get": outcome(lambda: any_db.get("k")),
        }

    assert run_in_child(child) == {"closed": True, "second close": "no error", "get": "ClosedError"}
    assert not any_db.closed


@pytest.mark.parametrize("journal_mode", ["delete", "wal"])
@pytest.mark.parametrize("how", ["close", "garbage-collect"])
def test_child_close_leaves_the_parent_connection_working(tmp_path, journal_mode, how):
    path = make_db_file(tmp_path / "forked.zarrdb", journal_mode)
    box = [Database(path)]  # the only reference, so that the child can drop it
    writes.set_many(box[0], [(f"before/{i}", bytes(3000)) for i in range(30)])  # WAL: in -wal

    def child():
        if how == "close":
            box[0].close()
        else:
            box.clear()  # the Database is deallocated here, in the child
            gc.collect()
        return {}

    run_in_child(child)
    db = box[0]
    try:
        assert db.count_prefix("before/") == 30
        writes.set(db, "after", b"parent still writes")
        with writes.open_writer(db) as writer:
            token = writer.begin(0, [])
            writer.write([("set", "in-transaction", b"1")])
            writer.end(token, True)
        assert db.get("after") == b"parent still writes"
        assert db.integrity_check() == []
        assert db.journal_mode() == journal_mode
        # another process sees all of it
        assert sqlite_rows(path, "SELECT count(*) FROM zarr") == [(32,)]
    finally:
        db.close()
    assert sqlite_rows(path, "PRAGMA integrity_check") == [("ok",)]
    assert sqlite_rows(path, "SELECT count(*) FROM zarr") == [(32,)]


# The writer's thread runs while the process forks, as it does under a store.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_child_close_keeps_the_parents_write_lock_and_transaction(wal_db, wal_path):
    writes.set(wal_db, "committed", b"1")
    writer = Writer(wal_db)
    token = writer.begin(0, [])
    writer.write([("set", "pending", b"2")])

    def child():
        writer.close()  # the thread and the connection are the parent's: touches nothing
        # A new connection in the child must still find the parent's write lock held.
        with Database(wal_path, busy_timeout=0.1) as fresh:
            seen = fresh.list_keys()
            locked = outcome(lambda: writes.set(fresh, "child", b"x"))
        return {"seen": seen, "locked": locked}

    try:
        report = run_in_child(child)
        assert report == {"seen": ["committed"], "locked": "DatabaseLockedError"}
        assert writer.in_transaction
        writer.end(token, True)
    finally:
        writer.close()
    assert sqlite_rows(wal_path, "SELECT k FROM zarr ORDER BY k") == [("committed",), ("pending",)]


def test_child_can_open_its_own_database(any_db):
    writes.set(any_db, "k", b"parent")
    path = any_db.path

    def child():
        with Database(path) as own:
            value = own.get("k")
            writes.set(own, "from-child", b"hello")
        return {"value": value.decode()}

    assert run_in_child(child) == {"value": "parent"}
    assert any_db.get("from-child") == b"hello"
