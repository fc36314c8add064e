"""Two processes closing the same file at once leave it in DELETE mode (issue 36: the schedule
explorer's programs/wal_left_after_exit.json, a forked child's close beside its parent's).

Closing switches the file from WAL to DELETE mode, which needs the file to itself. Each of two
closers found the other still open and left the switch to it; the last to close its connection
deleted the -wal, and the file stayed whole but in WAL mode. A close whose switch found another
connection open now tries again on a fresh connection once its own is closed.

Deterministic, with the pause points (test builds only): the child is held inside its close,
after its switch was refused (the parent still open) and before its connection closes, while
the parent closes (its switch refused: the child still open); then the child's close ends, the
last.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

import pytest

from format import builders
from store.helpers import buf
from zarrdb import SQLiteStore, _core, _file_setup, _pause, _tunables
from zarrdb._core import Database

from .helpers import ReportingChild, header_journal_mode, sidecars

pytestmark = pytest.mark.skipif(
    not _core._PAUSE_POINTS, reason="the pause points are in test builds only (ZARRDB_TEST_VFS=1)"
)

_CHILD = r"""
import faulthandler, sys
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore, _pause

faulthandler.dump_traceback_later(30, exit=True)


def hook(name):
    if name == "close.switched":
        print("held", flush=True)
        sys.stdin.readline()  # until the parent has closed


store = SQLiteStore(sys.argv[1], journal=sys.argv[2])  # "auto" keeps the WAL mode it finds
store.set_sync("child", cpu.Buffer.from_bytes(b"c"))
_pause.arm(hook)
store.close()
print("closed", flush=True)
"""


@pytest.mark.parametrize("child_journal", ["wal", "auto"])
def test_two_processes_closing_at_once_leave_one_file_in_delete_mode(tmp_path, child_journal):
    path = tmp_path / "together.zarrdb"
    parent = SQLiteStore(str(path), journal="wal")
    parent.set_sync("parent", buf(b"p"))
    child = ReportingChild(["-c", _CHILD, str(path), child_journal], tmp_path / "child.err", stdin=True)
    try:
        assert child.wait_for("held", 30), child.stderr_path.read_text()
        started = time.monotonic()
        parent.close()  # refused (the child is open), and so are its tries after closing
        took = time.monotonic() - started
        # The window: the file is in WAL mode, the child's connection the one left open.
        assert sidecars(path) == ["-wal", "-shm"]
        child.send("go")
        assert child.wait_for("closed", 30), child.stderr_path.read_text()
        assert child.proc.wait(30) == 0, child.stderr_path.read_text()
    finally:
        child.kill()
    # The child closed last: it left one file, in DELETE mode, with both writes.
    assert sidecars(path) == []
    assert header_journal_mode(path) == "delete"
    con = sqlite3.connect(path)
    try:
        assert dict(con.execute("SELECT k, v FROM zarr")) == {"parent": b"p", "child": b"c"}
    finally:
        con.close()
    # A close beside a connection that stays open pays every pause of its tries, no more.
    assert took < 2 * sum(_tunables.LAST_OUT_PAUSES) + 2.0


def test_a_close_beside_a_store_that_stays_open_leaves_the_switch_to_it(tmp_path):
    path = tmp_path / "beside.zarrdb"
    staying = SQLiteStore(str(path), journal="wal")
    staying.set_sync("a", buf(b"1"))
    with SQLiteStore(str(path), journal="wal") as closing:
        closing.set_sync("b", buf(b"2"))
    # Still open beside the closed store: the file is in WAL mode, and stays readable.
    assert header_journal_mode(path) == "wal"
    db = Database(str(path), mode="r")
    try:
        assert db.journal_mode() == "wal"
    finally:
        db.close()
    got = staying.get_sync("b")
    assert got is not None and got.to_bytes() == b"2"
    staying.close()
    assert sidecars(path) == []
    assert header_journal_mode(path) == "delete"


def _planted_empty_log(path) -> None:
    """What a connection opening during another's switch out of WAL mode leaves: an empty
    -wal and -shm beside a file whose header says DELETE (SQLite's switch lets go of its
    exclusive lock between deleting the log and writing the header; the opener found the
    header in WAL mode and no log, and made one)."""
    for suffix in ("-wal", "-shm"):
        with open(f"{path}{suffix}", "wb"):
            pass


def test_a_close_removes_the_empty_log_an_opener_left_during_a_switch(tmp_path):
    path = tmp_path / "left.zarrdb"
    with SQLiteStore(str(path)) as store:
        store.set_sync("a", buf(b"1"))
    _planted_empty_log(path)
    # Opening takes no notice of it (SQLite does not open an empty log beside a file in
    # DELETE mode), and neither does reading.
    with SQLiteStore(str(path), read_only=True) as store:
        assert store.get_sync("a").to_bytes() == b"1"
    assert sidecars(path) == ["-wal", "-shm"]
    # A writer's close removes it.
    with SQLiteStore(str(path)) as store:
        store.set_sync("b", buf(b"2"))
    assert sidecars(path) == []
    assert header_journal_mode(path) == "delete"


def test_a_log_that_holds_anything_is_not_removed(tmp_path):
    path = tmp_path / "kept.zarrdb"
    log = tmp_path / "kept.zarrdb-wal"
    with SQLiteStore(str(path)) as store:
        store.set_sync("a", buf(b"1"))
    for held, removed in ((b"\0" * 32, False), (b"", True)):
        _planted_empty_log(path)
        db = Database(str(path), mode="w")  # (opening refuses a log that is not empty)
        try:
            log.write_bytes(held)
            assert _file_setup._remove_empty_log(db, str(path)) is removed
        finally:
            db.close()
    assert sidecars(path) == []


_CLOSER = r"""
import faulthandler, sys, threading
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore, _pause

faulthandler.dump_traceback_later(60, exit=True)
held = threading.Event()


def hook(name):
    if name == "vfs.relock_after_wal" and not held.is_set():
        held.set()
        # The switch deleted the log and asks for the write lock to write the header, which
        # still says WAL mode.
        print("held", flush=True)
        sys.stdin.readline()


if sys.argv[2] == "close":  # a store in WAL mode closes (the switch in close())
    store = SQLiteStore(sys.argv[1], journal="wal")
    store.set_sync("closer", cpu.Buffer.from_bytes(b"c"))
    _pause.arm(hook)
    print("ready", flush=True)
    sys.stdin.readline()
    store.close()
else:  # a store opens with journal="delete" a file in WAL mode (the switch in opening)
    _pause.arm(hook)
    print("ready", flush=True)
    sys.stdin.readline()
    with SQLiteStore(sys.argv[1], journal="delete") as store:
        store.set_sync("closer", cpu.Buffer.from_bytes(b"c"))
print("closed", flush=True)
"""


@pytest.mark.parametrize("switching", ["close", "open"])
def test_a_writer_opening_while_a_store_leaves_wal_mode_does_not_damage_the_file(
    tmp_path, switching
):
    """SQLite's switch out of WAL mode deletes the log, then (outside exclusive locking mode)
    lets its exclusive lock down to a shared one before writing the header's new mode. A writer
    opening then found the header in WAL mode and no log, made a new log, and committed and
    checkpointed pages into the file; the switch then wrote its old first page over the file
    (whose page count cut the new pages off: "invalid page number"). The close now switches in
    exclusive locking mode, so the writer waits for it; so does an open with journal="delete"
    of a file in WAL mode."""
    path = tmp_path / "switching.zarrdb"
    with SQLiteStore(str(path)) as store:
        store.set_sync("before", buf(b"b"))
    if switching == "open":  # a connection that closed last in WAL mode left it so
        builders.set_wal_mode(path)
    closer = ReportingChild(
        ["-c", _CLOSER, str(path), switching], tmp_path / "closer.err", stdin=True
    )
    outcome: list[object] = []

    def write() -> None:
        try:
            with SQLiteStore(str(path), journal="wal", busy_timeout=30) as opener:
                opener.set_sync("opener", buf(b"o" * 300_000))  # pages past the old end
            outcome.append("written")
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcome.append(exc)

    try:
        assert closer.wait_for("ready", 30), closer.stderr_path.read_text()
        closer.send("close")
        # Held inside the switch where it let its exclusive lock go (before the fix), or closed.
        assert closer.wait_for("held", 30) or closer.wait_for("closed", 1), (
            closer.stderr_path.read_text()
        )
        window = "held" in closer.lines
        writer = threading.Thread(target=write)
        writer.start()
        writer.join(1.0)  # (in that time the writer finished inside the window, before the fix)
        if window:
            closer.send("go")
        assert closer.wait_for("closed", 30), closer.stderr_path.read_text()
        assert closer.proc.wait(30) == 0, closer.stderr_path.read_text()
        writer.join(30)
    finally:
        closer.kill()
    assert outcome == ["written"]
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert {k for (k,) in con.execute("SELECT k FROM zarr")} == {"before", "closer", "opener"}
    finally:
        con.close()
    # The switch kept its exclusive lock until the header said DELETE: there was no window.
    assert not window
    assert sidecars(path) == []
    assert header_journal_mode(path) == "delete"


def test_a_log_that_is_a_link_is_not_removed(tmp_path):
    """A -wal put beside the file as a link (to an empty file, which SQLite's check of the log
    follows) after the connection that tidies opened: the link and its target stay."""
    path = tmp_path / "linked.zarrdb"
    target = tmp_path / "elsewhere"
    with SQLiteStore(str(path)) as store:
        store.set_sync("a", buf(b"1"))
    target.write_bytes(b"")
    db = Database(str(path), mode="w")
    try:
        (tmp_path / "linked.zarrdb-wal").symlink_to(target)
        assert not _file_setup._remove_empty_log(db, str(path))
    finally:
        db.close()
    assert (tmp_path / "linked.zarrdb-wal").is_symlink() and target.exists()


_LOGGER = r"""
import faulthandler, sys
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore

faulthandler.dump_traceback_later(60, exit=True)
store = SQLiteStore(sys.argv[1], journal="wal")
store.set_sync("logger", cpu.Buffer.from_bytes(b"l" * 50_000))  # in its log, not the file yet
print("wrote", flush=True)
sys.stdin.readline()
store.close()  # the last out: leaves WAL mode, deleting the log before it rewrites the header
print("closed", flush=True)
"""


def test_an_open_that_sized_a_log_before_its_writer_left_wal_mode_opens(tmp_path):
    """An open sizes the files beside the database before SQLite opens it, and reads the header
    after. A process in WAL mode closing (the last out, leaving WAL mode) between the two made
    the open see a log that holds pages beside a header in rollback mode, and refuse the file
    with SidecarError (the schedule explorer's shape free, once in 300 programs). The open now
    looks at the log again before it refuses: the writer's log has gone.

    Deterministic: this process's open is held after the sizing while the other process
    closes."""
    path = tmp_path / "sized.zarrdb"
    with SQLiteStore(str(path)) as store:
        store.set_sync("before", buf(b"b"))
    logger = ReportingChild(["-c", _LOGGER, str(path)], tmp_path / "logger.err", stdin=True)
    seen: list[int] = []

    def hook(name: str) -> None:
        if name == "open.beside" and not seen:
            seen.append(os.path.getsize(f"{path}-wal"))
            logger.send("close")
            assert logger.wait_for("closed", 30), logger.stderr_path.read_text()

    try:
        assert logger.wait_for("wrote", 30), logger.stderr_path.read_text()
        _pause.arm(hook)
        try:
            with SQLiteStore(str(path)) as store:
                store.ensure_open()
                _pause.disarm()
                store.set_sync("opener", buf(b"o"))
        finally:
            _pause.disarm()
        assert logger.proc.wait(30) == 0, logger.stderr_path.read_text()
    finally:
        logger.kill()
    assert seen and seen[0] > 0  # the open sized the other's log while it held pages
    with SQLiteStore(str(path), read_only=True) as store:
        assert {k: len(store.get_sync(k).to_bytes()) for k in ("before", "logger", "opener")} == {
            "before": 1, "logger": 50_000, "opener": 1}
    assert header_journal_mode(path) == "delete"
