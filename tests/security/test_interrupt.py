"""Ctrl-C and SIGTERM stop a long SQLite statement within a fraction of a second (issue 23,
item 5): a hostile file can make `zarrdb check`'s integrity check run for minutes (here a
generated NOT NULL column in a table of its own, which the spec lets a file hold and which
Python's sqlite3 computes for every row), and before this a signal waited for the statement
to end; so did a statement of zarrdb's own engine.

Each test starts the long statement in a child process, waits until the child is provably
inside it, signals it, and expects it gone with the command line's interrupt exit code."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cli.helpers import CLI
from format import builders

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROWS = 40_000  # each costs SQLite's integrity check a 200 KB string: half a minute or more
PROMPT = 2.0  # seconds a signalled child may take to end


def _slow_to_check(path: Path) -> Path:
    """A sound SQLiteStore file plus a table whose integrity check takes a minute or more. The
    rows go in under a cheap expression, then the schema is edited (writable_schema, as an
    attacker may): a VIRTUAL column is not stored, so the rows stay valid."""
    builders.make_store_file(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute(
            "CREATE TABLE notes (a INTEGER, b TEXT GENERATED ALWAYS AS (a) VIRTUAL NOT NULL)"
        )
        con.execute("BEGIN")
        con.executemany("INSERT INTO notes(a) VALUES (?)", [(i,) for i in range(ROWS)])
        con.execute("COMMIT")
        con.execute("PRAGMA writable_schema = ON")
        con.execute(
            "UPDATE sqlite_schema SET sql = replace(sql, 'AS (a)', "
            "'AS (printf(''%.*c'', 200000 + a, ''x''))') WHERE name = 'notes'"
        )
    finally:
        con.close()
    return path


@pytest.fixture(scope="module")
def slow_file(tmp_path_factory) -> Path:
    return _slow_to_check(tmp_path_factory.mktemp("slow") / "slow.zarrdb")


def _ends_promptly(child: subprocess.Popen, signum: int) -> tuple[float, str, str]:
    """Send `signum`; (seconds until the child ended, its stdout, its stderr). Kills it and
    fails the test if it outlives PROMPT."""
    assert child.poll() is None, "the child ended before it was signalled"
    sent = time.monotonic()
    child.send_signal(signum)
    try:
        out, err = child.communicate(timeout=PROMPT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail(f"still running {PROMPT} s after signal {signum}")
    return time.monotonic() - sent, out, err


def _holds_open(pid: int, path: Path) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.path.realpath(fd) == str(path.resolve()) for fd in fds.iterdir())
    except OSError:  # the child ended, or a descriptor closed while we looked
        return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_check_ends_promptly_on_a_signal(slow_file, signum):
    """`zarrdb check` (its full integrity check, through Python's sqlite3)."""
    child = subprocess.Popen(
        [*CLI, "check", str(slow_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not _holds_open(child.pid, slow_file):  # the check has opened the file
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(1.0)  # reading the schema and the rows takes milliseconds; then the long part
        took, out, err = _ends_promptly(child, signum)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, out + err
    assert err.strip() == "zarrdb check: error: interrupted"
    assert took < PROMPT


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_engine_statement_ends_promptly_on_a_signal(tmp_path, signum):
    """A statement of zarrdb's engine that would never end (a recursive CTE), run by the main
    thread, with SIGTERM turned into KeyboardInterrupt as the command line does."""
    path = builders.make_store_file(tmp_path / "plain.zarrdb")
    script = textwrap.dedent(
        """
        import signal, sys
        from zarrdb._core import Database

        def stop(signum, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, stop)
        db = Database(sys.argv[1], mode="r")
        print("started", flush=True)
        try:
            db.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                       "SELECT count(*) FROM c")
        except KeyboardInterrupt:
            db.close()
            print("interrupted", flush=True)
            sys.exit(130)
        print("finished", flush=True)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "started"
        time.sleep(0.5)  # inside the statement, which never ends by itself
        took, out, err = _ends_promptly(child, signum)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, out + err
    assert out.strip() == "interrupted"
    assert took < PROMPT


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_writer_statement_ends_promptly_on_a_signal(tmp_path, signum):
    """A statement the writer thread runs, which would never end (an endless trigger, let run
    on this connection for the test: zarrdb refuses such files and runs no trigger otherwise),
    while the main thread waits for the write (issue 37): the signal stops it."""
    path = builders.make_store_file(tmp_path / "plain.zarrdb")
    script = textwrap.dedent(
        """
        import signal, sys
        from zarrdb._core import Database, Writer

        def stop(signum, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, stop)
        db = Database(sys.argv[1])
        if hasattr(db, "set_limit"):
            db.set_limit("TRIGGER_DEPTH", 1)
        db.execute(
            "CREATE TRIGGER forever AFTER INSERT ON zarr BEGIN SELECT count(*) FROM "
            "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c); END"
        )
        writer = Writer(db)
        print("started", flush=True)
        try:
            writer.write([("set", "a/c/9", b"never")])
        except KeyboardInterrupt:
            writer.close()
            db.close()
            print("interrupted", flush=True)
            sys.exit(130)
        print("finished", flush=True)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "started"
        time.sleep(0.5)  # inside the statement, which never ends by itself
        took, out, err = _ends_promptly(child, signum)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, out + err
    assert out.strip() == "interrupted"
    assert took < PROMPT
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT count(*) FROM zarr WHERE k = 'a/c/9'").fetchone() == (0,)
    finally:
        con.close()
