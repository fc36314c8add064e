"""Independent helpers for the tests of zarrdb._core.Database (no zarrdb code in here).

The standard-library `sqlite3` is used to create files and to check what the engine stored.
zarrdb carries its own copy of SQLite; two SQLite libraries in one process do not see each
other's POSIX locks (and closing one's file descriptor drops the other's locks), so whenever a
zarrdb connection may be open on the same file, the checking connection runs in a child
process (`sqlite_rows`, `LockHolder`). That keeps the checks honest and the files intact.
"""

from __future__ import annotations

import atexit
import json
import mmap
import os
import pickle
import sqlite3
import struct
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

from zarrdb import _core

CREATE_TABLE = "CREATE TABLE zarr(k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)"


def utf8_order(keys):
    """Keys sorted the way SQLite's BINARY collation sorts them: by their UTF-8 bytes."""
    return sorted(keys, key=lambda k: k.encode("utf-8"))


def make_db_file(path, journal_mode: str = "delete", rows=()) -> Path:
    """A new file with the zarr table, made with the standard-library sqlite3 (then closed)."""
    path = Path(path)
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA synchronous = OFF")  # setting up only: no need to wait for fsync
        mode = con.execute(f"PRAGMA journal_mode = {journal_mode}").fetchone()[0]
        assert mode == journal_mode
        con.execute(CREATE_TABLE)
        con.executemany("INSERT INTO zarr(k, v) VALUES (?, ?)", list(rows))
        con.commit()
    finally:
        con.close()
    return path


_ROWS_SERVER = textwrap.dedent(
    """
    import pickle, sqlite3, struct, sys
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = inp.read(4)
        if len(head) < 4:
            break
        path, sql, params, uri = pickle.loads(inp.read(struct.unpack("<I", head)[0]))
        try:
            con = sqlite3.connect(path, uri=uri, timeout=10)
            try:
                reply = ("ok", con.execute(sql, params).fetchall())
                con.commit()
            finally:
                con.close()  # no connection outlives the request: no lock is kept
        except Exception as e:
            reply = ("error", f"{type(e).__name__}: {e}")
        data = pickle.dumps(reply)
        out.write(struct.pack("<I", len(data)) + data)
        out.flush()
    """
)


class _RowsServer:
    """One long-lived child process running stdlib sqlite3 for sqlite_rows (no start-up cost
    per query). It is replaced if it dies, and restarted in a forked child of ours."""

    def __init__(self):
        self.proc = None
        self.pid = None
        self.lock = threading.Lock()

    def query(self, request) -> list[tuple]:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None or self.pid != os.getpid():
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", _ROWS_SERVER],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                self.pid = os.getpid()
            data = pickle.dumps(request)
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            self.proc.stdin.flush()
            head = self.proc.stdout.read(4)
            if len(head) < 4:
                self.proc = None
                raise AssertionError("the sqlite3 helper process died")
            status, payload = pickle.loads(self.proc.stdout.read(struct.unpack("<I", head)[0]))
        if status != "ok":
            raise AssertionError(f"stdlib sqlite3 failed: {payload}")
        return payload

    def close(self) -> None:
        if self.proc is not None and self.pid == os.getpid():
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
            self.proc.stdout.close()
        self.proc = None


_rows_server = _RowsServer()
atexit.register(_rows_server.close)


def sqlite_rows(path, sql: str, params=(), *, readonly: bool = True) -> list[tuple]:
    """Run one statement with the standard-library sqlite3 in another process; its rows."""
    target = f"file:{quote(os.path.abspath(path))}?mode=ro" if readonly else os.fspath(path)
    return _rows_server.query((target, sql, tuple(params), readonly))


_HOLDER_SCRIPT = textwrap.dedent(
    """
    import sqlite3, sys
    path, how = sys.argv[1], sys.argv[2]
    con = sqlite3.connect(path, isolation_level=None, timeout=10)
    con.execute("BEGIN " + how)
    if how == "DEFERRED":
        con.execute("SELECT count(*) FROM zarr").fetchall()  # take a read lock/snapshot
    print("locked", flush=True)
    line = sys.stdin.readline().strip()
    if line == "commit-write":
        con.execute("INSERT OR REPLACE INTO zarr(k, v) VALUES ('from-holder', x'01')")
    con.execute("COMMIT")
    con.close()
    print("released", flush=True)
    """
)


class LockHolder:
    """Another process holding `BEGIN <how>` on a file (stdlib sqlite3) until released."""

    def __init__(self, path, how: str = "EXCLUSIVE"):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER_SCRIPT, os.fspath(path), how],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline().strip()
        if line != "locked":
            self.proc.kill()
            raise AssertionError(f"lock holder did not start: {self.proc.stderr.read()}")
        self.released = False

    def release(self, action: str = "") -> None:
        if self.released:
            return
        self.released = True
        self.proc.stdin.write(action + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "released"
        assert self.proc.wait(timeout=30) == 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.release()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def sparse_buffer(path, size: int):
    """A read-only buffer of `size` zero bytes backed by a sparse file: costs neither disk nor
    RAM, whatever its size (an mmap supports the buffer protocol)."""
    with open(path, "wb") as f:
        f.truncate(size)
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    try:
        yield mapping
    finally:
        mapping.close()  # BufferError here would mean someone kept an export of it
        os.remove(path)


def fork_child(child) -> tuple[int, int]:
    """Fork; run child() in the child, which returns a JSON-able dict written to a pipe; the
    parent gets (pid, the pipe's read end) at once, for child_report. The child always leaves
    with os._exit (never through pytest's own exit)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        status = 1
        try:
            os.close(read_end)
            try:
                report = {"ok": True, **child()}
            except BaseException:
                report = {"ok": False, "traceback": traceback.format_exc()}
            with os.fdopen(write_end, "w") as out:
                json.dump(report, out)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    return pid, read_end


def child_report(pid: int, read_end: int, timeout: float | None = None) -> dict:
    """What the child of fork_child returned, once it has exited; a child still running after
    `timeout` seconds is killed and the test fails (a hang)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
    while not done:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"the child hangs after {timeout} s")
        time.sleep(0.05)
        done, status = os.waitpid(pid, os.WNOHANG)
    with os.fdopen(read_end) as inp:
        data = inp.read()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (status, data)
    report = json.loads(data)
    assert report.pop("ok"), report.get("traceback")
    return report


def run_in_child(child) -> dict:
    """Fork; run child() in the child, which returns a JSON-able dict; the parent gets it."""
    return child_report(*fork_child(child))


# The engine's test hooks (Writer.holding, Database.get_into, Database.length_limit) are
# compiled into test builds only (ZARRDB_TEST_VFS=1: scripts/dev.sh, and so every test step of
# CI); against a release wheel the tests that use them are skipped, saying why.
# tests/test_build.py checks that a test build has them, so that they never skip there.
needs_test_hooks = pytest.mark.skipif(
    not _core._TEST_HOOKS,
    reason="uses the engine's test hooks, built into test builds only (ZARRDB_TEST_VFS=1)",
)
