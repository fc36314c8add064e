"""The simulated disk of the power-loss tests (zarrdb._core._powerloss_*), checked on its own:
synced writes stay, unsynced ones are kept, lost or torn as asked, directory entries follow
POSIX, and the power goes out exactly where it is told to. Each case runs in a forked child,
which the power cut ends; the parent then reads the files with the real engine or byte by byte.
"""

from __future__ import annotations

import os
import sqlite3
import sys

import pytest

from zarrdb import _core
from zarrdb._core import Database

from .helpers import needs_powerloss_vfs

pytestmark = [
    pytest.mark.skipif(
        sys.platform == "win32" or not hasattr(os, "fork"),
        reason="the power-loss simulation is POSIX-only",
    ),
    needs_powerloss_vfs,
]

CUT = 77
SECTOR = 512


def in_child(fn) -> int:
    """Run fn() in a forked child; its exit code (CUT when the power went out)."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            os._exit(0)
        except BaseException:
            import traceback

            traceback.print_exc()
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def rows(path) -> list[str]:
    with Database(path, mode="w") as db:  # a writer: rolls a hot journal back
        assert db.integrity_check() == []
        return [row[0] for row in db.execute("SELECT k FROM zarr ORDER BY k")]


def new_file(path, journal_mode="delete", page_size=4096) -> None:
    with Database(path, mode="c", page_size=page_size, journal_mode=journal_mode) as db:
        db.execute("CREATE TABLE zarr(k TEXT PRIMARY KEY, v BLOB)")


@pytest.mark.parametrize("keep, survivors", [(0.0, ["synced"]), (1.0, ["synced", "unsynced"])])
def test_synced_writes_stay_and_unsynced_ones_are_kept_or_lost(tmp_path, keep, survivors):
    path = tmp_path / "f.db"
    new_file(path, journal_mode="wal")

    def child() -> None:
        _core._powerloss_enable(1, keep=keep, tear=0.0, exit_code=CUT)
        db = Database(path, mode="w", synchronous="full")
        db.execute("INSERT INTO zarr VALUES ('synced', x'01')")  # the WAL is synced at commit
        db.pragma("synchronous", "off")
        db.execute("INSERT INTO zarr VALUES ('unsynced', x'02')")
        _core._powerloss_cut()

    assert in_child(child) == CUT
    assert rows(path) == survivors


def test_a_torn_write_is_written_sector_by_sector(tmp_path):
    """Without a journal, an UPDATE overwrites the pages in place: after a cut that tears every
    write, each 512-byte sector holds its old bytes or its new ones, and both kinds are there."""
    before = tmp_path / "before.db"
    new_file(before, journal_mode="off", page_size=65536)
    with Database(before, mode="w", journal_mode="off") as db:
        db.execute("INSERT INTO zarr VALUES ('k', ?)", (b"\xaa" * 200_000,))
    copies = {}
    for name, keep, tear in (("after", 1.0, 0.0), ("torn", 0.0, 1.0)):
        copies[name] = tmp_path / f"{name}.db"
        copies[name].write_bytes(before.read_bytes())

        def child(path=copies[name], keep=keep, tear=tear) -> None:
            _core._powerloss_enable(2, keep=keep, tear=tear, sector=SECTOR, exit_code=CUT)
            db = Database(path, mode="w", synchronous="off", journal_mode="off")
            db.execute("UPDATE zarr SET v = ? WHERE k = 'k'", (b"\x55" * 200_000,))
            _core._powerloss_cut()

        assert in_child(child) == CUT
    old, new, torn = (p.read_bytes() for p in (before, copies["after"], copies["torn"]))
    assert len(new) == len(old) and len(torn) == len(old)
    kinds = {"old": 0, "new": 0}
    for at in range(0, len(old), SECTOR):
        sector = torn[at : at + SECTOR]
        if old[at : at + SECTOR] == new[at : at + SECTOR]:
            assert sector == old[at : at + SECTOR], at
        elif sector == old[at : at + SECTOR]:
            kinds["old"] += 1
        else:
            assert sector == new[at : at + SECTOR], f"sector at {at} is neither old nor new"
            kinds["new"] += 1
    assert kinds["old"] > 10 and kinds["new"] > 10, kinds


@pytest.mark.parametrize("synchronous, journal_back, survivors", [
    ("full", True, []),  # the journal's deletion was not synced: it comes back, rolls back
    ("extra", False, ["a"]),  # EXTRA syncs the directory after deleting it
])
def test_a_deleted_file_comes_back_unless_its_directory_was_synced(
    tmp_path, synchronous, journal_back, survivors
):
    path = tmp_path / "f.db"
    new_file(path, journal_mode="delete")

    def child() -> None:
        _core._powerloss_enable(3, keep=0.0, tear=0.0, exit_code=CUT)
        db = Database(path, mode="w", synchronous=synchronous)
        db.execute("INSERT INTO zarr VALUES ('a', x'01')")  # returns: committed
        _core._powerloss_cut()

    assert in_child(child) == CUT
    assert os.path.exists(f"{path}-journal") == journal_back
    assert rows(path) == survivors
    assert [p.name for p in tmp_path.iterdir() if "powerloss" in p.name] == []


@pytest.mark.parametrize("journal_mode, stays", [
    ("off", False),  # nothing ever syncs the directory: the new file's entry is lost
    ("delete", True),  # the unix VFS syncs the directory at the new journal's first sync
])
def test_a_created_file_stays_only_once_its_directory_was_synced(tmp_path, journal_mode, stays):
    path = tmp_path / "new.db"

    def child() -> None:
        _core._powerloss_enable(4, keep=0.0, tear=0.0, exit_code=CUT)
        with Database(path, mode="c", journal_mode=journal_mode, synchronous="full") as db:
            db.execute("CREATE TABLE zarr(k TEXT PRIMARY KEY, v BLOB)")
        _core._powerloss_cut()

    assert in_child(child) == CUT
    assert path.exists() == stays


def test_the_power_goes_out_at_the_chosen_event(tmp_path):
    """_powerloss_cut(after=n): the n-th file operation from now is the last; nothing after it
    runs. Here the first write of the INSERT's commit."""
    path = tmp_path / "f.db"
    new_file(path, journal_mode="wal")
    read_end, write_end = os.pipe()

    def child() -> None:
        _core._powerloss_enable(5, keep=1.0, tear=0.0, exit_code=CUT)
        db = Database(path, mode="w", synchronous="full")
        db.execute("INSERT INTO zarr VALUES ('a', x'01')")
        before = _core._powerloss_events()
        os.write(write_end, f"{before}\n".encode())
        _core._powerloss_cut(after=1)
        db.execute("INSERT INTO zarr VALUES ('b', x'02')")
        os.write(write_end, b"returned\n")

    code = in_child(child)
    os.close(write_end)
    with os.fdopen(read_end) as reports:
        lines = reports.read().split()
    assert code == CUT
    assert len(lines) == 1 and int(lines[0]) > 0, lines  # the second INSERT never returned
    assert rows(path) == ["a"]  # its first write was kept, its commit never happened


def test_off_unless_enabled():
    """In this process the simulation was never turned on: nothing counts, and a cut is a
    no-op (the process goes on)."""
    assert _core._powerloss_events() == 0
    _core._powerloss_cut()
    _core._powerloss_cut(after=3)
    assert _core._powerloss_events() == 0


@pytest.mark.parametrize("kwargs", [
    {"keep": 1.5}, {"keep": 0.7, "tear": 0.4}, {"tear": -0.1}, {"sector": 0}, {"exit_code": 0},
])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        _core._powerloss_enable(1, **kwargs)
    assert _core._powerloss_events() == 0  # and nothing was turned on


def test_enabling_twice_is_refused(tmp_path):
    def child() -> None:
        _core._powerloss_enable(6)
        try:
            _core._powerloss_enable(7)
        except RuntimeError:
            os._exit(10)

    assert in_child(child) == 10


@pytest.mark.skipif(
    not _core.BUNDLED_SQLITE,
    reason="built against the system SQLite, which Python's sqlite3 shares (and its VFS list)",
)
def test_files_written_outside_the_simulation_are_untouched(tmp_path):
    """A database another library writes (Python's sqlite3, not zarrdb's SQLite) is not on the
    simulated disk: its unsynced writes survive the cut."""
    path = tmp_path / "other.db"

    def child() -> None:
        _core._powerloss_enable(8, keep=0.0, tear=0.0, exit_code=CUT)
        con = sqlite3.connect(path)
        con.execute("PRAGMA synchronous = OFF")
        con.execute("CREATE TABLE zarr(k TEXT PRIMARY KEY, v BLOB)")
        con.execute("INSERT INTO zarr VALUES ('a', x'01')")
        con.commit()
        con.close()
        _core._powerloss_cut()

    assert in_child(child) == CUT
    assert rows(path) == ["a"]
