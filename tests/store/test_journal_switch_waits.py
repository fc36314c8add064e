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

import threading
import time

import pytest

from format import builders
from reliability.helpers import ReportingChild
from store._lock_holder import LockHolder
from store.helpers import buf
from zarrdb import SQLiteStore, _core, errors

HOLD = 0.5  # seconds the other process keeps its write lock


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_an_open_switching_the_journal_waits_for_another_writer(tmp_path, journal):
    path = tmp_path / "switch.zarrdb"
    start = "delete" if journal == "wal" else "wal"
    with SQLiteStore(str(path), journal=start) as store:
        store.set_sync("a", buf(b"1"))
    if start == "wal":
        builders.set_wal_mode(path)  # (closing left it in DELETE mode)
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


_OPENER = r"""
import faulthandler, sys
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore, _pause

faulthandler.dump_traceback_later(60, exit=True)


def hook(name):
    if name == "open.switch":
        _pause.disarm()
        print("held", flush=True)  # it read the header (WAL mode): a shared lock, kept
        sys.stdin.readline()


_pause.arm(hook)
with SQLiteStore(sys.argv[1], journal="delete", busy_timeout=20) as store:
    store.set_sync("child", cpu.Buffer.from_bytes(b"c"))
print("done", flush=True)
"""


@pytest.mark.skipif(not _core._PAUSE_POINTS, reason="pause points: test builds only")
def test_two_opens_leaving_wal_mode_at_once_do_not_wait_for_each_other(tmp_path):
    """Each of two opens asking for journal="delete" had read the header of a file in WAL mode
    (a shared lock, kept in WAL mode) and tried its switch again and again on that connection,
    each waiting for the other's shared lock until both timed out. The open now lets its
    connection go between tries."""
    path = tmp_path / "both.zarrdb"
    with SQLiteStore(str(path)) as store:
        store.set_sync("a", buf(b"1"))
    builders.set_wal_mode(path)
    child = ReportingChild(["-c", _OPENER, str(path)], tmp_path / "child.err", stdin=True)
    try:
        assert child.wait_for("held", 30), child.stderr_path.read_text()
        # The child holds its shared lock while this open tries its switch; it goes on a while
        # later, and tries its own while this one may still be trying.
        timer = threading.Timer(0.3, child.send, args=("go",))
        timer.start()
        started = time.monotonic()
        with SQLiteStore(str(path), journal="delete", busy_timeout=20) as store:
            store.set_sync("parent", buf(b"p"))
        took = time.monotonic() - started
        timer.join()
        assert child.wait_for("done", 30), child.stderr_path.read_text()
        assert child.proc.wait(30) == 0
    finally:
        child.kill()
    assert 0.25 <= took < 10, took
    with SQLiteStore(str(path), read_only=True) as store:
        assert {k: store.get_sync(k).to_bytes() for k in ("a", "child", "parent")} == {
            "a": b"1", "child": b"c", "parent": b"p"}
