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

import contextvars
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from zarr.core.buffer import cpu

from core.helpers import child_report, fork_child
from store._lock_holder import LockHolder
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
        store._open_file.submitter.writer.submit([("set", "x", b"x")])  # type: ignore[union-attr]
    except errors.ForkedProcessError:
        report["inherited writer"] = "ForkedProcessError"
    own = SQLiteStore(path, busy_timeout=10)
    own.set_sync("child/own", buf(b"o"))  # waits for the parent's commit, then writes
    own.close()
    # Reopens in this process, from code that is not the parent's block (a context of its
    # own): the block's own writes belong to the parent's transaction and raise ClosedError.
    contextvars.Context().run(store.set_sync, "child/inherited", buf(b"i"))
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


def test_child_forked_while_a_parent_thread_closes_the_store_uses_it(tmp_path: Path) -> None:
    """fork() while another thread of the parent is inside close(), holding the store's own
    lock while its writer commits a write that waits for a third process's lock (issue 36,
    defect 7). The child inherits that lock held by a thread it does not have: its first use
    of the store blocked for good. Every lock of the store's state starts afresh in a child."""
    path = tmp_path / "fork-during-close.zarrdb"
    store = SQLiteStore(path, busy_timeout=CHILD_TIMEOUT)
    store.set_sync("before", buf(b"b"))
    writer = store._file().submitter.writer
    holder = LockHolder(path, timeout=CHILD_TIMEOUT)
    threads = [threading.Thread(target=store.set_sync, args=("queued", buf(b"q")), daemon=True)]
    try:
        threads[0].start()
        _wait_for(lambda: writer.stats()["queued_bytes"] > 0 or writer.stats()["batches"] > 1)
        threads.append(threading.Thread(target=store.close, daemon=True))
        threads[1].start()
        _wait_for(lambda: writer.stats()["closing"] == 1)  # close() holds the store's lock

        def child() -> dict[str, object]:
            value = store.get_sync("before")
            return {"before": None if value is None else value.to_bytes().decode()}

        pid, read_end = fork_child(child)
        report = _report(pid, read_end)
    finally:
        holder.release()
        for t in threads:
            t.join(CHILD_TIMEOUT)
    assert not any(t.is_alive() for t in threads)
    assert report == {"before": "b"}
    con = sqlite3.connect(path)
    try:
        assert {k for (k,) in con.execute("SELECT k FROM zarr")} == {"before", "queued"}
    finally:
        con.close()


def _wait_for(condition) -> None:
    deadline = time.monotonic() + CHILD_TIMEOUT
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)
