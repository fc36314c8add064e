"""fork() while the parent holds the file's write lock (issue 24, defect 4).

SQLite keeps the locks of a process's connections in memory, per file; a child forked while a
parent's connection held the write lock inherited that record, and a store the child opened
itself then saw the lock as held by another connection of its own process, for good: every
write raised DatabaseLockedError, even after the parent had committed. (Python 3.13 and older
still fork by default on Linux: multiprocessing, concurrent.futures.)

The parent forks inside an explicit transaction, so the lock is held at the fork for certain,
and commits half a second later. The child must write through a store it opens itself and
through the store it inherited (which reopens in the new process); the engine objects it
inherited refuse with ForkedProcessError.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest
from zarr.core.buffer import cpu

from core.helpers import child_report, fork_child
from zarrdb import SQLiteStore, errors

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    # The store's writer is a thread: forking with it is what this tests.
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]

CHILD_TIMEOUT = 30


def buf(data: bytes) -> cpu.Buffer:
    return cpu.Buffer.from_bytes(data)


def _child(store: SQLiteStore, path: Path) -> dict[str, object]:
    report: dict[str, object] = {}
    try:  # the parent's writer, inherited
        store._session.current.writing.writer.submit([("set", "x", b"x")])  # type: ignore[union-attr]
    except errors.ForkedProcessError:
        report["inherited writer"] = "ForkedProcessError"
    own = SQLiteStore(path, busy_timeout=10)
    own.set_sync("child/own", buf(b"o"))  # waits for the parent's commit, then writes
    own.close()
    store.set_sync("child/inherited", buf(b"i"))  # reopens in this process
    store.close()
    return report


def _fork(store: SQLiteStore, path: Path) -> tuple[int, int]:
    return fork_child(lambda: _child(store, path))


def _report(pid: int, read_end: int) -> dict[str, object]:
    return child_report(pid, read_end, CHILD_TIMEOUT)


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_child_forked_inside_a_transaction_opens_and_writes_its_own_store(
    tmp_path: Path, journal: str
) -> None:
    path = tmp_path / "forked.zarrdb"
    store = SQLiteStore(path, journal=journal, busy_timeout=CHILD_TIMEOUT)
    store.set_sync("before", buf(b"b"))
    with store.transaction():
        store.set_sync("parent/txn", buf(b"t"))
        store.get_sync("parent/txn")  # written: the transaction holds the write lock
        pid, read_end = _fork(store, path)
        time.sleep(0.5)  # the child waits for the lock meanwhile
    report = _report(pid, read_end)
    assert report["inherited writer"] == "ForkedProcessError"
    store.set_sync("parent/after", buf(b"a"))
    store.close()
    con = sqlite3.connect(path)
    try:
        keys = {k for (k,) in con.execute("SELECT k FROM zarr")}
    finally:
        con.close()
    assert keys == {"before", "parent/txn", "child/own", "child/inherited", "parent/after"}
