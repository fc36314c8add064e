"""`zarrdb.zarr2.upgrade` is all or nothing: a process killed at any moment of an upgrade
(checks, the transaction that moves the rows, the VACUUM after) leaves the file of zarr-python
2's SQLiteStore as it was, or a whole SQLiteStore 1.0 file with the same rows; never a mix.
Checked with Python's own sqlite3, which also rolls back what the killed process left."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import pytest

from zarrdb import conformance

CHILD = (
    "import sys\n"
    "from zarrdb.zarr2 import upgrade\n"
    "print('start', flush=True)\n"
    "upgrade(sys.argv[1])\n"
    "print('done', flush=True)\n"
)


def make_zarr2_file(path, chunks: int = 2500, size: int = 4096) -> dict[str, bytes]:
    """A file in zarr 2's SQLiteStore layout, large enough that an upgrade takes a while."""
    rows = {".zgroup": b'{"zarr_format": 2}'}
    rows["a/.zarray"] = (
        b'{"chunks": [1024], "compressor": null, "dtype": "|u1", "fill_value": 0, "filters": '
        b'null, "order": "C", "shape": [%d], "zarr_format": 2}' % (chunks * 1024)
    )
    for i in range(chunks):
        rows[f"a/{i}"] = os.urandom(size)
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE zarr(k TEXT PRIMARY KEY, v BLOB)")
        con.executemany("INSERT INTO zarr VALUES (?, ?)", rows.items())
    con.close()
    return rows


def state_after(path) -> tuple[str, dict[str, bytes]]:
    """('zarr2' or 'upgraded', the rows) once what a killed writer left is rolled back."""
    con = sqlite3.connect(path)  # may write: rolls back a hot journal
    try:
        tables = {n for (n,) in con.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
        rows = {k: bytes(v) for k, v in con.execute("SELECT k, v FROM zarr")}
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        con.close()
    if tables == {"zarr"}:
        return "zarr2", rows
    assert tables == {"zarr", "zarr_sqlitestore_metadata"}, tables
    return "upgraded", rows


def _journal(path) -> str:
    return f"{path}-journal"


def _wait_for(condition, what: str, child: subprocess.Popen[str], limit: float = 30.0) -> None:
    """Polls `condition` until it holds; fails if the child ends first or `limit` passes."""
    deadline = time.monotonic() + limit
    while not condition():
        if child.poll() is not None:
            pytest.fail(f"the upgrade ended (exit {child.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {limit:.0f} s")
        time.sleep(0.0005)


def _hold_shared_lock(path) -> sqlite3.Connection:
    """A read transaction on `path` (SQLite's SHARED lock), taken as soon as it can be: no
    writer in a rollback-journal file can commit while it is held. Retried without SQLite's
    busy handler, whose sleeps would leave the writer free to go on."""
    con = sqlite3.connect(path, timeout=0, isolation_level=None)
    deadline = time.monotonic() + 30
    while True:
        try:
            con.execute("BEGIN")
            con.execute("SELECT count(*) FROM sqlite_schema").fetchone()
            return con
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if con.in_transaction:
                con.execute("ROLLBACK")
            if time.monotonic() > deadline:
                raise
            time.sleep(0.0002)


PROBE = (
    "import sqlite3, sys\n"
    "con = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
    "try:\n"
    "    con.execute('BEGIN')\n"
    "    con.execute('SELECT count(*) FROM sqlite_schema').fetchone()\n"
    "except sqlite3.OperationalError as exc:\n"
    "    sys.exit(3 if 'locked' in str(exc) or 'busy' in str(exc) else 1)\n"
)


def _waits_to_commit(path) -> bool:
    """Whether a writer holds SQLite's PENDING lock (it waits for readers to let it commit),
    so that no new reader can begin. Asked from a process of its own: a connection of this
    process would share the lock its reader holds and never ask the system."""
    probe = subprocess.run([sys.executable, "-c", PROBE, str(path)], timeout=60)
    assert probe.returncode in (0, 3), probe
    return probe.returncode == 3


def _tables(con: sqlite3.Connection) -> set[str]:
    return {n for (n,) in con.execute("SELECT name FROM sqlite_schema WHERE type='table'")}


def test_an_upgrade_killed_at_any_moment_leaves_one_whole_state(tmp_path):
    path = tmp_path / "old.sqlite"
    original = make_zarr2_file(path)
    pristine = path.read_bytes()

    def reset() -> None:
        # (before a reader takes its lock: closing a file releases every lock the process
        # holds on it)
        path.write_bytes(pristine)
        for suffix in ("-journal", "-wal"):
            if os.path.exists(f"{path}{suffix}"):
                os.remove(f"{path}{suffix}")

    def start() -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "start"
        return child

    def outcome(child: subprocess.Popen[str]) -> str:
        child.communicate(timeout=60)
        state, rows = state_after(path)
        assert rows == original, state  # every key and value, whichever state
        if state == "upgraded":
            report = conformance.check_file(path)
            assert [f.message for f in report.findings if f.level == "problem"] == []
        return state

    # Killed inside the transaction that moves the rows: a reader holds its lock from before
    # the upgrade starts, so the upgrade writes its journal and then waits to commit; it is
    # killed while it waits.
    reset()
    reader = _hold_shared_lock(path)
    child = start()
    try:
        _wait_for(lambda: _waits_to_commit(path), "it waited to commit", child)
        assert os.path.exists(_journal(path))
        child.kill()
    finally:
        reader.close()
    assert outcome(child) == "zarr2"

    # Killed once the rows are committed: when the upgrade waits to commit, the reader lets
    # it and takes its lock again at once. The upgrade holds SQLite's PENDING lock until its
    # commit is done, so the reader cannot come back before; and the VACUUM that follows takes
    # an exclusive lock from its first step, so the reader comes back before it begins (which
    # it then waits for) or after it has ended. Either way the file is upgraded and whole.
    reset()
    reader = _hold_shared_lock(path)
    child = start()
    try:
        _wait_for(lambda: _waits_to_commit(path), "it waited to commit", child)
        reader.close()
        reader = _hold_shared_lock(path)
        assert _tables(reader) == {"zarr", "zarr_sqlitestore_metadata"}
        child.kill()
    finally:
        reader.close()
    assert outcome(child) == "upgraded"

    # And at moments spread over a whole upgrade with nothing held (inside its VACUUM, where
    # the timing falls there): whatever the moment, one whole state.
    reset()
    child = start()
    started = time.perf_counter()
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "done"
    whole = time.perf_counter() - started
    assert outcome(child) == "upgraded"
    for fraction in (0.3, 0.7, 0.9):
        reset()
        child = start()
        time.sleep(whole * fraction)
        child.kill()
        outcome(child)
