"""Many processes and threads on one file, with real processes and real locks.

- four `spawn` processes write disjoint row bands of one zarr array at the same time while two
  others read it: every chunk a reader sees is either the fill value or the final value of its
  band, and at the end every band is there;
- a lock held by another process (a zarrdb Database in `BEGIN EXCLUSIVE`, or a store in
  `store.transaction()`) makes a store with busy_timeout=0.3 raise DatabaseLockedError naming
  the file and the wait; nothing anybody wrote is lost, and the same call succeeds once the lock
  is released;
- fork(): a store opened and used before fork() works in the child with its own connections,
  never the parent's, and the parent keeps working after the child exits (however it exits);
- the same file, Python's sqlite3 and zarrdb: the safe ways (close the store before using the
  stdlib in this process; use the stdlib from another process).
"""

from __future__ import annotations

import atexit
import contextvars
import json
import multiprocessing
import os
import subprocess
import textwrap
import time

import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype

from zarrdb import SQLiteStore
from zarrdb.errors import ClosedError, DatabaseLockedError

from core.helpers import run_in_child  # tests/ is on sys.path (pytest's rootdir)

from . import _workers as workers
from .helpers import (
    PYTHON,
    ReportingChild,
    child_env,
    header_journal_mode,
    opened,
    read_all,
    sidecars,
)

buf = default_buffer_prototype().buffer


# --- four writers and two readers at once ---------------------------------------------------------


def test_four_writer_processes_and_two_readers(tmp_path):
    path = tmp_path / "shared.zarrdb"
    with opened(path) as store:
        zarr.create_array(
            store,
            name=workers.ARRAY,
            shape=workers.SHAPE,
            chunks=(workers.CHUNK, workers.CHUNK),
            dtype="int32",
            fill_value=workers.FILL,
        )
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    done = ctx.Event()
    writers = [
        ctx.Process(target=workers.write_region, args=(SQLiteStore(path), region, 6, queue))
        for region in range(workers.REGIONS)
    ]
    readers = [
        ctx.Process(
            target=workers.read_until,
            args=(SQLiteStore(path, read_only=True), reader, done, queue),
        )
        for reader in range(2)
    ]
    for proc in readers + writers:
        proc.start()
    results = []
    try:
        for _ in writers:
            results.append(queue.get(timeout=180))
        done.set()
        for _ in readers:
            results.append(queue.get(timeout=180))
    finally:
        done.set()
        for proc in readers + writers:
            proc.join(60)
            if proc.is_alive():
                proc.kill()
    errors = [r for r in results if "error" in r[3]]
    assert not errors, "\n".join(f"{kind} {i}:\n{r['error']}" for kind, i, _, r in errors)
    assert all(proc.exitcode == 0 for proc in readers + writers), [
        p.exitcode for p in readers + writers
    ]
    pids = {pid for _, _, pid, _ in results}
    assert len(pids) == 6 and os.getpid() not in pids
    for kind, i, _, report in results:
        if kind == "reader":
            assert report["bad"] == [], f"reader {i} saw: {report['bad']}"
            assert report["passes"] >= 2, report

    with opened(path) as store:
        assert store.check() == []
        data = zarr.open_array(store, path=workers.ARRAY, mode="r")[...]
    for region in range(workers.REGIONS):
        np.testing.assert_array_equal(
            data[workers.region_rows(region)], workers.final_value(region)
        )
    assert sidecars(path) == []
    assert header_journal_mode(path) == "delete"


# --- the busy timeout ---------------------------------------------------------------------------

LOCK_HOLDERS = {
    # A zarrdb Database takes SQLite's strongest lock and writes inside it.
    "database-exclusive": """
        from zarrdb._core import Database
        db = Database(PATH)
        db.execute("BEGIN EXCLUSIVE")
        db.execute("INSERT INTO zarr(k, v) VALUES ('held/by-child', ?)",
                   (b"written while holding the lock",))
        print("locked", flush=True)
        sys.stdin.readline()
        db.execute("COMMIT")
        db.close()
        print("released", flush=True)
    """,
    # A store transaction in another process (BEGIN IMMEDIATE on its writer connection).
    "store-transaction": """
        from zarrdb import SQLiteStore
        from zarr.core.buffer import default_buffer_prototype
        store = SQLiteStore(PATH)
        with store.transaction():
            store.set_sync("held/by-child", default_buffer_prototype().buffer.from_bytes(
                b"written while holding the lock"))
            print("locked", flush=True)
            sys.stdin.readline()
        store.close()
        print("released", flush=True)
    """,
}


def _lock_holder(tmp_path, path, holder: str) -> ReportingChild:
    script = "import sys\nPATH = sys.argv[1]\n" + textwrap.dedent(LOCK_HOLDERS[holder])
    child = ReportingChild(["-c", script, str(path)], tmp_path / f"{holder}.stderr", stdin=True)
    assert child.wait_for("locked", timeout=60), child.stderr()
    return child


def _release(child: ReportingChild) -> None:
    child.send("go")
    assert child.wait_for("released", timeout=60), child.stderr()
    child.finish()
    assert child.proc.returncode == 0, child.stderr()


def _assert_locked(exc: DatabaseLockedError, path, elapsed: float) -> None:
    message = str(exc)
    assert str(path) in message, message
    assert "0.3 s" in message, message  # how long it waited
    assert exc.filename == str(path)
    assert 0.25 <= elapsed < 5, elapsed


@pytest.mark.parametrize("holder", sorted(LOCK_HOLDERS))
def test_busy_timeout_while_another_process_writes(tmp_path, holder):
    """The store is open in WAL mode (readers are not blocked by a writer) when another
    process takes the write lock."""
    path = tmp_path / "locked.zarrdb"
    store = SQLiteStore(path, busy_timeout=0.3, journal="wal")
    try:
        arr = zarr.create_array(
            store, name="a", shape=(8,), chunks=(4,), dtype="int32", fill_value=0
        )
        arr[:] = 1
        store.set_sync("before", buf.from_bytes(b"committed before the lock"))
        child = _lock_holder(tmp_path, path, holder)
        try:
            # set_sync: one caller
            started = time.monotonic()
            with pytest.raises(DatabaseLockedError) as excinfo:
                store.set_sync("mine", buf.from_bytes(b"retried"))
            _assert_locked(excinfo.value, path, time.monotonic() - started)
            # zarr's own writes (a gather of sets, one group commit)
            started = time.monotonic()
            with pytest.raises(DatabaseLockedError) as excinfo:
                arr[:] = 2
            _assert_locked(excinfo.value, path, time.monotonic() - started)
            # readers are not blocked by a writer in WAL mode, and see only committed data
            assert store.get_sync("before").to_bytes() == b"committed before the lock"
            assert store.get_sync("held/by-child") is None
            assert (arr[:] == 1).all()
        finally:
            _release(child)
        # the same calls, retried, now succeed
        store.set_sync("mine", buf.from_bytes(b"retried"))
        arr[:] = 2
        contents = read_all(store)
    finally:
        store.close()
    assert contents["before"] == b"committed before the lock"
    assert contents["held/by-child"] == b"written while holding the lock"
    assert contents["mine"] == b"retried"
    with opened(path, read_only=True) as reopened:
        assert reopened.check() == []
        np.testing.assert_array_equal(
            zarr.open_array(reopened, path="a", mode="r")[:], np.full(8, 2)
        )
    assert sidecars(path) == []


def test_busy_timeout_opening_a_file_locked_exclusively(tmp_path):
    """A file in DELETE mode held in BEGIN EXCLUSIVE by another process: even opening it (to
    read, or to write) gives up after the busy timeout, naming the file."""
    path = tmp_path / "exclusive.zarrdb"
    with opened(path) as store:
        store.set_sync("before", buf.from_bytes(b"1"))
    assert header_journal_mode(path) == "delete"
    child = _lock_holder(tmp_path, path, "database-exclusive")
    try:
        for read_only in (True, False):
            store = SQLiteStore(path, read_only=read_only, busy_timeout=0.3)
            started = time.monotonic()
            with pytest.raises(DatabaseLockedError) as excinfo:
                store.get_sync("before")
            _assert_locked(excinfo.value, path, time.monotonic() - started)
            store.close()
    finally:
        _release(child)
    with opened(path, busy_timeout=0.3) as store:
        assert store.get_sync("before").to_bytes() == b"1"
        assert store.get_sync("held/by-child").to_bytes() == b"written while holding the lock"
        store.set_sync("after", buf.from_bytes(b"2"))
        assert store.check() == []
    assert sidecars(path) == []


# --- fork() -----------------------------------------------------------------------------------------


pytestmark_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytestmark_fork
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.parametrize("exit_how", ["close", "atexit", "abandon"])
def test_store_used_before_fork_works_in_the_child(tmp_path, exit_how):
    """exit_how: the child closes the store; or leaves through the interpreter's exit handlers
    (zarrdb closes stores still open at exit); or just ends without closing anything."""
    path = tmp_path / "forked.zarrdb"
    store = SQLiteStore(path)
    arr = zarr.create_array(
        store, name="a", shape=(100,), chunks=(10,), dtype="int32", fill_value=0
    )
    arr[:50] = 1
    store.set_sync("parent/before", buf.from_bytes(b"p"))
    assert store.get_sync("parent/before") is not None  # the parent's reader exists
    parent_conns = store._open_file
    parent_writer, parent_readers = parent_conns.submitter, list(parent_conns.readers.readers)
    assert parent_writer is not None and parent_readers

    def child():
        values = arr[:]
        before = store.get_sync("parent/before").to_bytes().decode()
        store.set_sync("child/key", buf.from_bytes(b"c"))
        arr[50:60] = 2
        conns = store._open_file
        report = {
            "values": values.tolist(),
            "before": before,
            "own_pid": conns.pid == os.getpid(),
            "new_writer": conns.submitter is not parent_writer,
            "new_readers": not any(r is p for r in conns.readers.readers for p in parent_readers),
        }
        if exit_how == "close":
            store.close()
        elif exit_how == "atexit":
            atexit._run_exitfuncs()  # what a normal interpreter exit runs
        return report

    report = run_in_child(child)
    assert report["values"] == [1] * 50 + [0] * 50
    assert report["before"] == "p"
    assert report["own_pid"] and report["new_writer"] and report["new_readers"], report
    # The parent's connections are the ones it had, and they work.
    assert store._open_file is parent_conns and parent_conns.submitter is parent_writer
    assert store.get_sync("child/key").to_bytes() == b"c"
    np.testing.assert_array_equal(arr[:], np.array([1] * 50 + [2] * 10 + [0] * 40))
    arr[60:70] = 3
    store.set_sync("parent/after", buf.from_bytes(b"p2"))
    with store.transaction():
        store.set_sync("parent/in-transaction", buf.from_bytes(b"t"))
    assert store.check() == []
    store.close()
    assert sidecars(path) == [], "the parent's close must leave one file"
    assert header_journal_mode(path) == "delete"
    with opened(path, read_only=True) as again:
        keys = read_all(again)
    assert {"child/key", "parent/before", "parent/after", "parent/in-transaction"} <= set(keys)


@pytestmark_fork
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_inside_a_transaction_never_uses_the_parents_connection(tmp_path):
    """The parent forks with a transaction open. Had the child used the parent's writer, it
    would see the uncommitted write and could commit it; it must see only committed data and
    wait for the parent's lock like any other process. A write of the block's own code is the
    parent's transaction's: in the child it raises ClosedError (issue 36, defect 3)."""
    path = tmp_path / "forked-in-transaction.zarrdb"
    store = SQLiteStore(path, busy_timeout=0.3)
    store.set_sync("committed", buf.from_bytes(b"1"))
    with store.transaction():
        store.set_sync("uncommitted", buf.from_bytes(b"2"))

        def child():
            seen = store.get_sync("uncommitted")
            try:
                store.set_sync("from-child/in-block", buf.from_bytes(b"3"))
                in_block = "written"
            except ClosedError:
                in_block = "ClosedError"
            try:  # from code of its own (a context of its own), not the parent's block
                contextvars.Context().run(store.set_sync, "from-child", buf.from_bytes(b"3"))
                write = "written"
            except DatabaseLockedError as exc:
                write = f"DatabaseLockedError: {exc}"
            store.close()
            return {
                "seen": None if seen is None else seen.to_bytes().decode(),
                "in block": in_block,
                "write": write,
                "committed": store.get_sync("committed").to_bytes().decode(),
            }

        report = run_in_child(child)
        assert store.get_sync("uncommitted").to_bytes() == b"2"  # the parent's transaction lives
    assert report["seen"] is None, "the child saw the parent's uncommitted write"
    assert report["in block"] == "ClosedError", report
    assert report["write"].startswith("DatabaseLockedError") and str(path) in report["write"], (
        report
    )
    assert report["committed"] == "1"
    contents = read_all(store)
    store.close()
    assert contents == {"committed": b"1", "uncommitted": b"2"}


# --- the same file, Python's sqlite3 and zarrdb -------------------------------------------------------


def _stdlib_in_subprocess(path, code: str) -> dict:
    """Run `code` with Python's sqlite3 in another process; it sets `result` (JSON-able)."""
    script = (
        "import json, sqlite3, sys\npath = sys.argv[1]\n"
        + textwrap.dedent(code)
        + "\nprint(json.dumps(result))\n"
    )
    out = subprocess.run(
        [PYTHON, "-c", script, str(path)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_stdlib_sqlite3_in_this_process_after_closing_the_store(tmp_path):
    """Safe pattern 1: close the SQLiteStore, then use Python's sqlite3 in the same process; the
    store reopens by itself when it is used again (after the stdlib connection is closed)."""
    import sqlite3

    path = tmp_path / "both.zarrdb"
    store = SQLiteStore(path)
    store.set_sync("from/zarrdb", buf.from_bytes(b"z"))
    store.close()
    assert sidecars(path) == []  # one file, in DELETE mode: nothing of zarrdb's is open
    con = sqlite3.connect(path, isolation_level=None)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert con.execute("SELECT v FROM zarr WHERE k = 'from/zarrdb'").fetchall() == [(b"z",)]
        con.execute("INSERT INTO zarr(k, v) VALUES ('from/stdlib', x'73')")
    finally:
        con.close()
    # the same store object, used again
    assert store.get_sync("from/stdlib").to_bytes() == b"s"
    store.set_sync("from/zarrdb-again", buf.from_bytes(b"z2"))
    assert store.check() == []
    store.close()
    assert sidecars(path) == []
    with opened(path, read_only=True) as reader:
        assert sorted(read_all(reader)) == ["from/stdlib", "from/zarrdb", "from/zarrdb-again"]


@pytest.mark.parametrize("journal", ["wal", "auto"])
def test_stdlib_sqlite3_in_another_process_while_the_store_is_open(tmp_path, journal):
    """Safe pattern 2: the store stays open (in WAL mode, or in the rollback journal "auto"
    starts with) and writing in this process; another process reads and writes the file with
    Python's sqlite3. SQLite's locks work across processes, so both see each other's commits
    and nothing breaks."""
    path = tmp_path / "shared-with-stdlib.zarrdb"
    store = SQLiteStore(path, journal=journal)
    try:
        arr = zarr.create_array(
            store, name="a", shape=(64,), chunks=(8,), dtype="int32", fill_value=0
        )
        arr[:] = np.arange(64)
        store.set_sync("from/zarrdb", buf.from_bytes(b"z"))
        # (No look at the file's header from this process here: open() + close() of any file
        # descriptor on the database drops every POSIX lock this process holds on it, zarrdb's
        # included. That is the very hazard of a second SQLite library.)
        result = _stdlib_in_subprocess(
            path,
            """
            ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            seen = ro.execute("SELECT v FROM zarr WHERE k = 'from/zarrdb'").fetchone()[0].decode()
            check = ro.execute("PRAGMA quick_check").fetchall()
            ro.close()
            rw = sqlite3.connect(path, isolation_level=None, timeout=10)
            rw.execute("BEGIN IMMEDIATE")
            rw.execute("INSERT INTO zarr(k, v) VALUES ('from/stdlib', x'73')")
            rw.execute("COMMIT")
            mode = rw.execute("PRAGMA journal_mode").fetchone()[0]
            rw.close()
            result = {"seen": seen, "check": check, "mode": mode}
            """,
        )
        expected_mode = "wal" if journal == "wal" else "delete"
        assert result == {"seen": "z", "check": [["ok"]], "mode": expected_mode}
        if journal == "wal":
            # zarrdb still has its WAL (the other process's close did not remove it)
            assert os.path.exists(f"{path}-wal")
        assert store.get_sync("from/stdlib").to_bytes() == b"s"
        arr[:8] = -1
        store.set_sync("from/zarrdb-after", buf.from_bytes(b"z2"))
        assert store.check() == []
    finally:
        store.close()
    assert sidecars(path) == []
    assert header_journal_mode(path) == "delete"
    result = _stdlib_in_subprocess(
        path,
        """
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        result = {"keys": [k for (k,) in con.execute("SELECT k FROM zarr WHERE k LIKE 'from/%' ORDER BY k")],
                  "check": con.execute("PRAGMA integrity_check").fetchall()}
        con.close()
        """,
    )
    assert result == {
        "keys": ["from/stdlib", "from/zarrdb", "from/zarrdb-after"],
        "check": [["ok"]],
    }
    with opened(path, read_only=True) as reader:
        np.testing.assert_array_equal(
            zarr.open_array(reader, path="a", mode="r")[:], np.r_[np.full(8, -1), np.arange(8, 64)]
        )
