"""What the store tells `logging` (the logger "zarrdb" and its children): the journal switching
to WAL, checkpoints that failed, and waits for another process's lock, counted by the engine's
writer thread without the GIL and logged from Python once a commit has settled or at close.
(Remote requests: tests/remote/test_store.py.)"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from zarr.core.buffer import cpu

from store._lock_holder import LockHolder
from zarrdb import SQLiteStore, _tunables


def value(i: int, size: int = 1024) -> cpu.Buffer:
    return cpu.Buffer.from_bytes(bytes([i % 251]) * size)


def records(caplog: pytest.LogCaptureFixture, name: str, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name and r.levelno == level]


def test_the_package_logger_has_a_null_handler_and_children():
    """Without logging configured, nothing is printed (not even warnings, through logging's
    last-resort handler); the children propagate to "zarrdb"."""
    import zarrdb._log

    logger = logging.getLogger("zarrdb")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    assert zarrdb._log.writer_logger.parent is logger
    assert zarrdb._log.locks_logger.propagate and zarrdb._log.remote_logger.propagate


@pytest.mark.parametrize("how", ["sync", "async"])
def test_switching_the_journal_to_wal_is_logged_once(tmp_path: Path, caplog, how):
    caplog.set_level(logging.INFO, logger="zarrdb")
    path = tmp_path / "switch.zarrdb"
    store = SQLiteStore(path)
    n = 3 * _tunables.AUTO_WAL_AFTER
    if how == "sync":
        for i in range(n):
            store.set_sync(f"k{i}", value(i))
    else:

        async def one_by_one() -> None:
            for i in range(n):
                await store.set(f"k{i}", value(i))  # a commit each: the loop waits for it

        asyncio.run(one_by_one())
    switched = records(caplog, "zarrdb.writer", logging.INFO)
    assert len(switched) == 1, switched
    assert "to WAL" in switched[0] and str(path) in switched[0]
    store.close()
    assert len(records(caplog, "zarrdb.writer", logging.INFO)) == 1


def test_a_file_that_stays_in_its_rollback_journal_logs_no_switch(tmp_path: Path, caplog):
    caplog.set_level(logging.DEBUG, logger="zarrdb")
    with SQLiteStore(tmp_path / "delete.zarrdb", journal="delete") as store:
        for i in range(3 * _tunables.AUTO_WAL_AFTER):
            store.set_sync(f"k{i}", value(i))
    assert [r for r in caplog.records if r.name.startswith("zarrdb")] == []


def test_a_write_waiting_for_another_process_s_lock_is_logged(tmp_path: Path, caplog):
    caplog.set_level(logging.DEBUG, logger="zarrdb")
    path = tmp_path / "locked.zarrdb"
    store = SQLiteStore(path, journal="delete")
    store.set_sync("first", value(1))  # the file exists, the writer is running
    holder = LockHolder(path)
    timer = threading.Timer(0.5, holder.let_go)
    timer.start()
    try:
        store.set_sync("second", value(2))  # waits for the holder's lock, then commits
    finally:
        timer.cancel()
        holder.release()
    waits = records(caplog, "zarrdb.locks", logging.DEBUG)
    assert len(waits) == 1, waits
    assert "lock on" in waits[0] and str(path) in waits[0]
    seconds = float(waits[0].split("waited ", 1)[1].split(" s ", 1)[0])
    assert 0.1 <= seconds <= 30
    store.close()


def test_a_read_waiting_for_another_process_s_lock_is_logged(tmp_path: Path, caplog):
    path = tmp_path / "exclusive.zarrdb"
    with SQLiteStore(path, journal="delete") as store:
        store.set_sync("k", value(1))
    caplog.set_level(logging.DEBUG, logger="zarrdb")
    reader = SQLiteStore(path, read_only=True)
    reader.ensure_open()
    holder = LockHolder(path, exclusive=True)  # in a rollback journal nothing reads now
    timer = threading.Timer(0.5, holder.let_go)
    timer.start()
    try:
        got = reader.get_sync("k")
    finally:
        timer.cancel()
        holder.release()
    assert got is not None and got.to_bytes() == value(1).to_bytes()
    # The main thread's wait is logged as its next call on the connection starts (where a
    # signal's exception, raised while logging runs, reaches the caller).
    assert reader.get_sync("k") is not None
    waits = records(caplog, "zarrdb.locks", logging.DEBUG)
    assert len(waits) == 1 and str(path) in waits[0], waits
    reader.close()


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_ctrl_c_during_a_lock_wait_reaches_the_caller_though_the_wait_is_logged(tmp_path: Path):
    """Logging a wait runs Python code, where the handler of a signal that came during the wait
    runs and raises: that exception is the caller's (logged as the call left, it was
    swallowed, and a Ctrl-C during a wait for a lock was lost)."""
    path = tmp_path / "interrupted.zarrdb"
    with SQLiteStore(path, journal="delete") as store:
        store.set_sync("k", value(1))
    reader = SQLiteStore(path, read_only=True)
    reader.ensure_open()
    holder = LockHolder(path, exclusive=True)
    timer = threading.Timer(1.0, holder.let_go)  # the read waits for the lock until then

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    timer.start()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)  # during the wait
        with pytest.raises(KeyboardInterrupt):
            reader.get_sync("k")
            reader.get_sync("k")  # the wait's log, and the handler's exception, at the latest here
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        timer.cancel()
        holder.release()
        reader.close()


def _lowest_free_descriptor() -> int:
    fd = os.dup(0)  # the lowest number free: below it, every descriptor is in use
    os.close(fd)
    return fd


@pytest.mark.skipif(sys.platform == "win32", reason="limits descriptors with RLIMIT_NOFILE (POSIX)")
def test_a_failed_checkpoint_is_logged_as_a_warning(tmp_path: Path, caplog):
    """The checkpointer opens its own connection at its first checkpoint; with no file
    descriptor left to the process (RLIMIT_NOFILE at the lowest free number) it cannot
    (SQLITE_CANTOPEN), the log grows past its limit, and the failure is logged from Python."""
    import resource

    caplog.set_level(logging.INFO, logger="zarrdb")
    path = tmp_path / "checkpoint.zarrdb"
    store = SQLiteStore(path, journal="wal")
    store.set_sync("first", value(0))  # the writer has the file, its log and shared memory
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (_lowest_free_descriptor(), hard))
    try:
        pages = _tunables.CHECKPOINT_PAGES + 64
        for i in range(pages):  # a 64 KiB page each, a commit each
            store.set_sync(f"k{i}", value(i, 60 * 1024))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    store.close()  # copies the log itself, through the writer's connection
    failures = records(caplog, "zarrdb.writer", logging.WARNING)
    assert failures, caplog.records
    assert "checkpoint" in failures[0] and "CantOpenError" in failures[0]
    assert str(path) in failures[0]
    assert not os.path.exists(f"{path}-wal")  # closing still leaves one file
