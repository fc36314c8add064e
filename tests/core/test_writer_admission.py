"""zarrdb._core.Writer: submissions made apart from being queued (prepare/enqueue), the
operations prepare() leaves out, and the room a transaction's writes are admitted into.

What is stored is checked with the standard-library sqlite3 (helpers)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from zarrdb._core import Database, Writer

from .helpers import make_db_file, needs_test_hooks, sqlite_rows


@pytest.fixture
def writer_db(tmp_path):
    path = make_db_file(tmp_path / "admission.zarrdb", "wal")
    db = Database(path)
    yield db
    db.close()


def test_prepare_leaves_out_the_values_it_cannot_take(writer_db):
    """One operation's buffer is not contiguous: with a list to report it in, that one is left
    out (its index and error reported), the others make the submission."""
    strided = np.arange(64, dtype="u1")[::2]
    ops = [("set", "a", b"1"), ("set", "bad", strided), ("delete", "gone", None),
           ("set", "b", b"2")]
    writer = Writer(writer_db)
    try:
        with pytest.raises((ValueError, BufferError)):
            writer.prepare(ops)  # without the list: the error is the caller's
        bad: list = []
        sub = writer.prepare(ops, bad=bad)
        assert [index for index, _ in bad] == [1]
        assert isinstance(bad[0][1], (ValueError, BufferError))
        assert writer.enqueue(sub)
        sub.wait()
        assert writer.prepare([("set", "bad", strided)], bad=bad) is None  # nothing left
    finally:
        writer.close()
    assert dict(sqlite_rows(writer_db.path, "SELECT k, v FROM zarr")) == {"a": b"1", "b": b"2"}


@needs_test_hooks
def test_a_submission_is_queued_once_when_there_is_room(writer_db):
    writer = Writer(writer_db, queue_bytes=1 << 20)
    try:
        with writer.holding():
            first = writer.prepare([("set", "a", bytes(600_000))])
            second = writer.prepare([("set", "b", bytes(600_000))])
            assert second.nbytes == 600_001
            assert writer.enqueue(first, block=False)
            assert not writer.enqueue(second, block=False)  # no room while held
            with pytest.raises(ValueError):
                writer.enqueue(first)
        writer.wait_for_room(second.nbytes)
        assert writer.enqueue(second, block=False)
        second.wait()
    finally:
        writer.close()


_HOLD_LOCK = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
con.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
con.execute("COMMIT")
"""


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.005)


def test_writes_joining_a_transaction_are_not_counted_against_the_ones_it_deferred(writer_db):
    """Writes queued while begin() waited for another process's lock are deferred until the
    transaction ends and still fill the queue; a write joining the transaction is admitted
    all the same (only the transaction's end could make that room)."""
    writer = Writer(writer_db, queue_bytes=1 << 20)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(writer_db.path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    token: list[int] = []
    try:
        assert holder.stdout.readline().strip() == "locked"
        opener = threading.Thread(target=writer.begin, args=(0, token), daemon=True)
        opener.start()
        _wait_for(lambda: writer.stats()["held"] == 1, "begin() holding the connection")
        deferred = [writer.submit([("set", f"d{i}", bytes(300_000))]) for i in range(3)]
        holder.stdin.write("\n")
        holder.stdin.flush()
        opener.join(10)
        assert token, "the transaction did not begin"
        assert not any(sub.done for sub in deferred)  # deferred until its end
        joined = writer.submit([("set", "t", bytes(600_000))], block=False)
        assert joined is not None, "a write of the transaction waits for the deferred ones"
        assert joined.joined
        writer.end(token[0], True, token)
        for sub in deferred:
            sub.wait()
    finally:
        if holder.poll() is None:
            holder.stdin.write("\n")
            holder.stdin.flush()
        holder.communicate(timeout=10)
        writer.close()
    keys = {k for (k,) in sqlite_rows(writer_db.path, "SELECT k FROM zarr")}
    assert keys == {"d0", "d1", "d2", "t"}
