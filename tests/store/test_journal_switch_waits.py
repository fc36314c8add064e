"""Opening waits for the lock that a switch into or out of WAL mode needs, for up to the store's
busy timeout, as every other lock wait does.

SQLite's switch of journal mode takes an exclusive lock without calling the busy handler: an
open asking for journal="wal" while another process wrote the file (or was closing it, leaving
WAL mode) failed at once with DatabaseLockedError, whose message said it had waited the whole
busy timeout. Processes that open, write and close one file in turn hit it (several failed opens
in a few thousand cycles), more often once closes began to leave WAL mode more eagerly.

Deterministic: another process holds the write lock of a file in DELETE mode for a while.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from store._lock_holder import LockHolder
from store.helpers import buf
from zarrdb import SQLiteStore, errors

HOLD = 0.5  # seconds the other process keeps its write lock


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_an_open_switching_the_journal_waits_for_another_writer(tmp_path, journal):
    path = tmp_path / "switch.zarrdb"
    start = "delete" if journal == "wal" else "wal"
    with SQLiteStore(str(path), journal=start) as store:
        store.set_sync("a", buf(b"1"))
    if start == "wal":
        # (closing left it in DELETE mode; the header keeps WAL mode once set)
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA journal_mode = wal").fetchone() == ("wal",)
        con.close()
    holder = LockHolder(path)
    timer = threading.Timer(HOLD, holder.let_go)
    timer.start()
    try:
        started = time.monotonic()
        with SQLiteStore(str(path), journal=journal, busy_timeout=30) as store:
            store.ensure_open()
            waited = time.monotonic() - started
            store.set_sync("b", buf(b"2"))
            assert store.get_sync("a").to_bytes() == b"1"
    finally:
        timer.join()
        holder.release()
    assert waited >= HOLD * 0.8, waited  # it waited for the holder, and then opened


def test_an_open_that_cannot_switch_in_time_says_so(tmp_path):
    path = tmp_path / "stuck.zarrdb"
    with SQLiteStore(str(path)) as store:
        store.set_sync("a", buf(b"1"))
    holder = LockHolder(path)
    try:
        started = time.monotonic()
        with pytest.raises(errors.DatabaseLockedError):
            SQLiteStore(str(path), journal="wal", busy_timeout=0.3).ensure_open()
        assert 0.25 <= time.monotonic() - started < 10
    finally:
        holder.release()
