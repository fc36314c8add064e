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

from zarrdb import _core, _pause, errors
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


class _HeldLock:
    """Another process holding the file's write lock (_HOLD_LOCK) until let_go()."""

    def __init__(self, path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "locked"

    def let_go(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.proc.communicate(timeout=10)


class _BeganBehindALock:
    """A transaction whose begin() waits for another process's lock while the test queues
    writes: `queue_while_waiting(fn)` runs fn with begin() holding the connection, then lets
    the lock go and waits for the transaction to open (its token is then `token[0]`)."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.token: list[int] = []
        self.holder = _HeldLock(writer.path)

    def queue_while_waiting(self, fn):
        opener = threading.Thread(target=self.writer.begin, args=(0, self.token), daemon=True)
        opener.start()
        _wait_for(lambda: self.writer.stats()["held"] == 1, "begin() holding the connection")
        queued = fn()
        self.let_go()
        opener.join(10)
        assert self.token, "the transaction did not begin"
        return queued

    def let_go(self) -> None:
        self.holder.let_go()


def test_writes_queued_while_a_transaction_began_keep_their_order(writer_db):
    """A write queued while begin() waited for another process's lock is committed before the
    transaction opens, so a write of the same key made once it is open (which joins it) wins.
    (Left for after the transaction's end, it landed after that later write.)"""
    writer = Writer(writer_db)
    began = _BeganBehindALock(writer)
    try:
        early = began.queue_while_waiting(
            lambda: writer.submit([("set", "k", b"early"), ("set", "e", b"1")], block=False)
        )
        assert early is not None and not early.joined  # its caller waits for it
        later = writer.submit([("set", "k", b"later")])
        assert later.joined
        writer.end(began.token[0], True, began.token)
        early.wait()
    finally:
        began.let_go()
        writer.close()
    assert dict(sqlite_rows(writer_db.path, "SELECT k, v FROM zarr")) == {
        "k": b"later", "e": b"1"
    }


def test_writes_queued_while_a_transaction_began_are_committed_before_it(writer_db):
    """They are committed on their own, whatever becomes of the transaction: its rollback
    keeps them (their callers were told they are committed)."""
    writer = Writer(writer_db)
    began = _BeganBehindALock(writer)
    try:
        early = began.queue_while_waiting(
            lambda: writer.submit([("set", "early", b"1")], block=False)
        )
        assert early.done and not early.joined  # before begin() returned
        early.wait()
        writer.submit([("set", "inside", b"2")])
        writer.end(began.token[0], False, began.token)
    finally:
        began.let_go()
        writer.close()
    assert dict(sqlite_rows(writer_db.path, "SELECT k, v FROM zarr")) == {"early": b"1"}


@pytest.mark.skipif(not _core._PAUSE_POINTS, reason="pause points: test builds only")
def test_a_begin_tries_again_once_and_what_comes_meanwhile_joins(writer_db):
    """Writes that keep coming cannot keep a transaction from opening: once BEGIN has had the
    lock, what is queued joins the transaction (it is open from that moment), so begin() lets
    what came before be committed and begins again once at most."""
    writer = Writer(writer_db)
    subs = []

    def hook(name: str) -> None:
        if name == "txn.retry":  # as writers that resubmit at once would
            subs.append(writer.submit([("set", f"again/{len(subs)}", b"x")], block=False))

    began = _BeganBehindALock(writer)
    _pause.arm(hook)
    try:
        first = began.queue_while_waiting(
            lambda: writer.submit([("set", "first", b"1")], block=False)
        )
        _pause.disarm()
        assert first.done
        assert len(subs) == 1 and subs[0].joined
        writer.end(began.token[0], False, began.token)  # rolled back: what joined it too
    finally:
        _pause.disarm()
        began.let_go()
        writer.close()
    assert {k for (k,) in sqlite_rows(writer_db.path, "SELECT k FROM zarr")} == {"first"}


@pytest.mark.skipif(not _core._PAUSE_POINTS, reason="pause points: test builds only")
def test_a_transaction_that_cannot_begin_again_leaves_what_joined_it_committed(tmp_path):
    """Between begin()'s two BEGINs another process takes the lock and keeps it past the busy
    timeout: begin() fails with DatabaseLockedError, and the write that joined the transaction
    meanwhile (its caller returned at once) is committed on its own after all."""
    db = Database(make_db_file(tmp_path / "again.zarrdb", "wal"), busy_timeout=0.5)
    writer = Writer(db)
    joined = []
    second = []

    def hook(name: str) -> None:
        if name == "txn.retry" and not second:
            joined.append(writer.submit([("set", "joined", b"2")], block=False))
            second.append(_HeldLock(db.path))

    began = _BeganBehindALock(writer)
    failure: list[BaseException] = []

    def begin() -> None:
        try:
            writer.begin(0, began.token)
        except BaseException as exc:  # noqa: BLE001 - checked below
            failure.append(exc)

    _pause.arm(hook)
    try:
        opener = threading.Thread(target=begin, daemon=True)
        opener.start()
        _wait_for(lambda: writer.stats()["held"] == 1, "begin() holding the connection")
        early = writer.submit([("set", "early", b"1")], block=False)
        began.let_go()
        opener.join(10)
        _pause.disarm()
        assert not opener.is_alive() and not began.token
        assert failure and isinstance(failure[0], errors.DatabaseLockedError), failure
        assert early.done and joined and joined[0].joined
        second[0].let_go()
        writer.write([("set", "after", b"3")])  # the writer works on; "joined" went before it
    finally:
        _pause.disarm()
        began.let_go()
        for held in second:
            held.let_go()
        writer.close()
        db.close()
    assert dict(sqlite_rows(db.path, "SELECT k, v FROM zarr")) == {
        "early": b"1", "joined": b"2", "after": b"3"
    }


def test_a_write_of_a_transaction_is_admitted_beside_what_queued_while_it_began(writer_db):
    """Writes queued while begin() waited fill the queue; a write of the transaction then waits
    only until the writer has written them in the transaction (it never waits for the
    transaction's end, which its block has to reach first)."""
    writer = Writer(writer_db, queue_bytes=1 << 20)
    began = _BeganBehindALock(writer)
    outcome: list[object] = []
    try:
        early = began.queue_while_waiting(
            lambda: [writer.submit([("set", f"d{i}", bytes(300_000))]) for i in range(3)]
        )
        # (In a thread: on a defect it would wait for good.)
        joiner = threading.Thread(
            target=lambda: outcome.append(writer.submit([("set", "t", bytes(600_000))])),
            daemon=True,
        )
        joiner.start()
        joiner.join(10)
        assert outcome, "a write of the transaction waited for room only its end makes"
        assert outcome[0].joined
        writer.end(began.token[0], True, began.token)
        for sub in early:
            sub.wait()
    finally:
        began.let_go()
        writer.close()
    keys = {k for (k,) in sqlite_rows(writer_db.path, "SELECT k FROM zarr")}
    assert keys == {"d0", "d1", "d2", "t"}
