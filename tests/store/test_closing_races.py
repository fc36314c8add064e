"""close() racing other threads (issue 24, defects 3 and 7).

- A thread still waiting for the write connection when close() starts gets ClosedError: it is
  never handed the connection that close() goes on to checkpoint and close.
- close() is exception-safe: a reader busy in another thread does not keep it from closing the
  writer and leaving the file in DELETE mode.
- A transaction whose end is refused because close() has started stays open until close()
  rolls it back: a write queued before it began (waiting for its end) is never put on the
  connection while it is still inside the transaction.
- close() waits for a connection another thread is opening and closes it too: none is left open
  beside the one the store opens next (two write connections of one store could each wait for
  the other's lock, a transaction open on one and its block's writes queued on the other).

Windows are widened deterministically: another process holds the write lock, or a reader runs
a query that never ends by itself.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from store._lock_holder import LockHolder
from store.helpers import buf
from zarrdb import SQLiteStore, errors
from zarrdb._live_stores import open_in_this_process

JOIN_TIMEOUT = 30



def wait_for(condition: Callable[[], bool], what: object = "") -> None:
    """Wait until `condition()` holds (at most JOIN_TIMEOUT seconds)."""
    deadline = time.monotonic() + JOIN_TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def record_write(
    store: SQLiteStore, key: str, value: bytes, outcome: dict[str, object], name: str
) -> None:
    """set_sync, recording "committed" or the exception under `name`."""
    try:
        store.set_sync(key, buf(value))
        outcome[name] = "committed"
    except BaseException as exc:  # noqa: BLE001 - checked by the caller
        outcome[name] = exc


def file_state(path: Path) -> tuple[str, set[str]]:
    """The journal mode and the keys of a closed file (standard library sqlite3)."""
    con = sqlite3.connect(path)
    try:
        mode = con.execute("PRAGMA journal_mode").fetchone()[0]
        return mode, {k for (k,) in con.execute("SELECT k FROM zarr")}
    finally:
        con.close()


def test_close_refuses_a_hold_still_waiting(tmp_path: Path) -> None:
    """A rename waits for the connection while the writer waits for another process's lock;
    close() starts meanwhile. The rename must fail with ClosedError (not run on the connection
    close() is checkpointing), and close() must finish cleanly."""
    path = tmp_path / "race.zarrdb"
    store = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT, journal="wal")
    store.set_sync("dir/x", buf(b"x"))
    holder = LockHolder(path, timeout=JOIN_TIMEOUT)
    outcome: dict[str, object] = {}
    try:
        busy = threading.Thread(target=store.set_sync, args=("busy", buf(b"b")), daemon=True)
        busy.start()
        time.sleep(0.3)  # the writer thread waits for the lock with this write

        def rename() -> None:
            try:
                outcome["rename"] = store.rename("dir", "renamed")
            except BaseException as exc:  # noqa: BLE001 - checked below
                outcome["rename"] = exc

        waiting = threading.Thread(target=rename, daemon=True)
        waiting.start()
        time.sleep(0.3)  # the rename waits for the connection

        def release() -> None:
            time.sleep(0.5)  # close() has started
            holder.let_go()

        threading.Thread(target=release, daemon=True).start()
        store.close()
        waiting.join(JOIN_TIMEOUT)
        busy.join(JOIN_TIMEOUT)
        assert not waiting.is_alive() and not busy.is_alive()
    finally:
        holder.release()
    assert isinstance(outcome["rename"], errors.ClosedError), outcome
    mode, keys = file_state(path)
    assert mode == "delete"
    assert keys == {"dir/x", "busy"}
    assert not Path(f"{path}-wal").exists()


def test_close_with_a_reader_busy_in_another_thread_still_closes_the_writer(
    tmp_path: Path,
) -> None:
    """A read that does not end (a query running on the store's reader connection in another
    thread) must not keep close() from closing the writer and leaving the file in DELETE
    mode; the read is interrupted."""
    path = tmp_path / "busy-reader.zarrdb"
    store = SQLiteStore(path, journal="wal")
    store.set_sync("k", buf(b"v"))
    started = threading.Event()
    outcome: dict[str, object] = {}

    def endless_read() -> None:
        db = store._file().reader()
        started.set()
        try:
            db.execute(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                "SELECT count(*) FROM c"
            )
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome["read"] = exc

    reader = threading.Thread(target=endless_read, daemon=True)
    reader.start()
    assert started.wait(JOIN_TIMEOUT)
    time.sleep(0.2)  # the query runs
    try:
        store.close()
    except errors.ZarrDBError as exc:
        outcome["close"] = exc
    assert "close" not in outcome, f"close() raised before closing the writer: {outcome}"
    reader.join(JOIN_TIMEOUT)
    assert not reader.is_alive(), "the endless read was not interrupted"
    assert isinstance(outcome.get("read"), errors.OperationInterruptedError), outcome
    mode, keys = file_state(path)
    assert mode == "delete", "close() left the file in WAL mode"
    assert keys == {"k"}
    assert not Path(f"{path}-wal").exists()


def test_close_waits_for_a_connection_being_opened_and_closes_it(tmp_path: Path) -> None:
    """A write opens the store in one thread while another process keeps the file from being
    read; close() is called meanwhile. close() must not return before that opening is over,
    and must close what it opened: after both, no connection of this process has the file
    open, and the file is whole."""
    path = tmp_path / "opening.zarrdb"
    with SQLiteStore(path) as store:
        store.set_sync("before", buf(b"b"))
    holder = LockHolder(path, timeout=JOIN_TIMEOUT, exclusive=True)
    outcome: dict[str, object] = {}
    try:
        store = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT)

        writer = threading.Thread(
            target=record_write, args=(store, "during", b"d", outcome, "write"), daemon=True
        )
        writer.start()
        wait_for(store._open_file.lock.locked, outcome)  # the write is opening the store
        closer = threading.Thread(target=store.close, daemon=True)
        closer.start()
        closer.join(0.5)
        assert closer.is_alive(), "close() returned while a connection was still being opened"
        holder.let_go()
        closer.join(JOIN_TIMEOUT)
        writer.join(JOIN_TIMEOUT)
        assert not closer.is_alive() and not writer.is_alive()
    finally:
        holder.release()
    # The write either committed before close() took the store or was refused as closed.
    assert outcome["write"] == "committed" or isinstance(
        outcome["write"], errors.ClosedError
    ), outcome
    assert not open_in_this_process(str(path)), "a connection opened during close() is open"
    mode, keys = file_state(path)
    assert mode == "delete"
    assert keys == ({"before", "during"} if outcome["write"] == "committed" else {"before"})


def test_a_write_waiting_for_a_transaction_closed_under_it(tmp_path: Path) -> None:
    """A write queued while a transaction's BEGIN waited for another process's lock (committed
    on its own before the transaction opens). A reader holds the connection; the block ends and
    waits for it; close() starts and refuses that wait (ClosedError). The block fails with
    ClosedError, nothing is put on the connection still inside the transaction ("cannot start
    a transaction within a transaction"), and the file keeps what was committed: the write
    from before the transaction, not the block's. (The write once waited for the
    transaction's end, and close() had to fail it.)"""
    path = tmp_path / "refused-end.zarrdb"
    store = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT)
    store.set_sync("before", buf(b"0"))
    writer = store._file().submitter.writer
    outcome: dict[str, object] = {}
    entered, leave, holding, let_go = (threading.Event() for _ in range(4))

    def transaction() -> None:
        try:
            with store.transaction():  # BEGIN waits for the other process's lock
                store.set_sync("txn/x", buf(b"rolled back"))
                entered.set()
                leave.wait(JOIN_TIMEOUT)
            outcome["txn"] = "committed"
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome["txn"] = exc

    def reader() -> None:
        def hold(db: object) -> None:
            holding.set()
            let_go.wait(JOIN_TIMEOUT)

        store._file().submitter.call_holding(hold)

    holder = LockHolder(path, timeout=JOIN_TIMEOUT)
    threads = [threading.Thread(target=transaction, daemon=True)]
    try:
        threads[0].start()
        wait_for(lambda: writer.stats()["held"] == 1)  # the BEGIN waits for the lock
        args = (store, "waiting", b"queued before the transaction began", outcome, "waiting")
        threads.append(threading.Thread(target=record_write, args=args, daemon=True))
        threads[-1].start()
        wait_for(lambda: writer.stats()["queued_bytes"] > 0)
        holder.release()
        assert entered.wait(JOIN_TIMEOUT)
        threads.append(threading.Thread(target=reader, daemon=True))
        threads[-1].start()
        assert holding.wait(JOIN_TIMEOUT)
        leave.set()  # the block ends: its commit waits for the reader
        wait_for(lambda: writer.stats()["hold_waiters"] == 1)
        threads.append(threading.Thread(target=store.close, daemon=True))
        threads[-1].start()
        wait_for(lambda: "txn" in outcome)  # close() refused the commit's wait
        let_go.set()
        for t in threads:
            t.join(JOIN_TIMEOUT)
        assert not any(t.is_alive() for t in threads), outcome
    finally:
        holder.release()
        leave.set()
        let_go.set()
    assert isinstance(outcome["txn"], errors.ClosedError), outcome
    assert outcome["waiting"] == "committed", outcome
    mode, keys = file_state(path)
    assert mode == "delete"
    assert keys == {"before", "waiting"}
