"""zarrdb._core.Writer: the C thread that owns a write connection.

What is stored is checked with the standard-library sqlite3 in a child process (helpers), so
these tests do not take the engine's word for it.
"""

from __future__ import annotations

import os
import select
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from zarrdb import errors
from zarrdb._core import Database, Port, Writer

from .helpers import make_db_file, needs_test_hooks, sqlite_rows


@pytest.fixture
def writer_db(tmp_path):
    path = make_db_file(tmp_path / "writer.zarrdb", "wal")
    db = Database(path)
    yield db
    db.close()


def _drain_all(port: Port, count: int, timeout: float = 10.0) -> list:
    done: list = []
    deadline = time.monotonic() + timeout
    while len(done) < count and time.monotonic() < deadline:
        if port.has_fd:
            select.select([port.fileno()], [], [], 0.5)
        else:
            port.wait(0.5)
        done += port.drain()
    return done


def test_submissions_are_written_and_reported_done(writer_db):
    writer = Writer(writer_db)
    try:
        sub = writer.submit([("set", "a", b"x" * 10), ("set", "big", os.urandom(300_000))])
        sub.wait()
        assert sub.done and sub.changes == 2
        writer.submit([("delete", "a", None)]).wait()
    finally:
        writer.close()
    rows = dict(sqlite_rows(writer_db.path, "SELECT k, length(v) FROM zarr"))
    assert rows == {"big": 300_000}


def test_large_values_written_through_the_blob_api_are_exact(writer_db):
    """Values over blob_min go in as a zero-filled value written in place: the bytes stored
    must be exactly the caller's, and set_if_absent must not overwrite."""
    values = {f"v{i}": os.urandom(n) for i, n in enumerate((128 * 1024, 1_000_003, 5 << 20))}
    writer = Writer(writer_db, blob_min=128 * 1024)
    try:
        writer.submit([("set", k, v) for k, v in values.items()]).wait()
        sub = writer.submit([("set_if_absent", "v0", b"other"), ("set_if_absent", "new", b"n")])
        sub.wait()
        assert sub.changes == 1
    finally:
        writer.close()
    stored = dict(sqlite_rows(writer_db.path, "SELECT k, v FROM zarr"))
    assert stored == {**values, "new": b"n"}
    types = set(sqlite_rows(writer_db.path, "SELECT typeof(v) FROM zarr"))
    assert types == {("blob",)}


def _bytes_written() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux's /proc/self/io")
@pytest.mark.parametrize(("journal", "copies"), [("delete", 1), ("wal", 2)])
def test_values_larger_than_the_page_cache_are_written_once(tmp_path, journal, copies):
    """A value larger than the writer's page cache is not spilled to the file zero-filled and
    then written again: the process writes about one byte per byte of value with a rollback
    journal (it wrote two, and read one back), two in WAL mode (the log, then SQLite's own
    checkpoint into the file; it wrote three). Smaller values around it are stored exactly,
    and once the value is written the page cache spills again as usual."""
    path = make_db_file(tmp_path / "spill.zarrdb", journal)
    db = Database(path, cache_size=1024)  # KiB: a 1 MiB page cache
    big = os.urandom(8 << 20)
    small = {f"s{i}": os.urandom(200_000) for i in range(8)}
    writer = Writer(db, blob_min=128 * 1024)
    try:
        before = _bytes_written()
        writer.submit([("set", "big", big)]).wait()
        written = _bytes_written() - before
        writer.submit([("set", k, v) for k, v in small.items()]).wait()
    finally:
        writer.close()
    assert written < (copies + 0.25) * len(big), f"{written / len(big):.2f} bytes per byte"
    # the effective spill threshold: the cache's pages again (suspended, it reads 2**31 - 1)
    assert db.pragma("cache_spill") < 1 << 20
    db.close()
    stored = dict(sqlite_rows(path, "SELECT k, v FROM zarr"))
    assert stored == {"big": big, **small}


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux's /proc/self/io")
def test_a_commit_over_the_hold_limit_spills_as_usual(tmp_path):
    """Past hold_spill_max (512 MiB by default) a commit's pages are not held in memory until
    it ends: the value is written as before, its zero-filled pages spilled and written again
    (about two bytes per byte), rather than kept twice in memory."""
    path = make_db_file(tmp_path / "spill.zarrdb", "delete")
    db = Database(path, cache_size=1024)  # KiB: a 1 MiB page cache
    big = os.urandom(8 << 20)
    writer = Writer(db, blob_min=128 * 1024, hold_spill_max=4 << 20)
    try:
        before = _bytes_written()
        writer.submit([("set", "big", big)]).wait()
        written = _bytes_written() - before
    finally:
        writer.close()
    assert written > 1.5 * len(big), f"{written / len(big):.2f} bytes per byte"
    db.close()
    assert dict(sqlite_rows(path, "SELECT k, v FROM zarr")) == {"big": big}


def _refusing_bad(tmp_path) -> Path:
    """A file in WAL mode whose trigger (written with the standard-library sqlite3) refuses
    the key "bad"."""
    path = make_db_file(tmp_path / "trigger.zarrdb", "wal")
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON zarr WHEN NEW.k = 'bad' "
        "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
    )
    con.commit()
    con.close()
    return path


def test_a_failing_write_fails_only_its_caller(tmp_path):
    """A trigger (written with the standard-library sqlite3) refuses one key: in a batch with
    other callers' writes, only the caller of that write gets the error; the others are
    stored. The batch is made while the writer waits for a lock another connection holds."""
    path = _refusing_bad(tmp_path)
    db = Database(path, busy_timeout=10)
    db.set_limit("TRIGGER_DEPTH", 1)  # no engine connection runs a trigger unless told to
    holder = Database(path)
    writer = Writer(db)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the writer's first batch waits for this lock
        first = writer.submit([("set", "first", b"1")])
        time.sleep(0.2)
        subs = [writer.submit([("set", f"ok{i}", b"v")]) for i in range(3)]
        bad = writer.submit([("set", "fine-too", b"f"), ("set", "bad", b"b")])
        subs += [writer.submit([("set", "ok3", b"v")])]
        holder.execute("ROLLBACK")
        first.wait()
        for sub in subs:
            sub.wait()
        with pytest.raises(errors.ConstraintError, match="refused by a trigger") as excinfo:
            bad.wait()
        assert "'bad'" in str(excinfo.value)
        assert writer.stats()["retried_batches"] >= 1
    finally:
        writer.close()
        holder.close()
        db.close()
    keys = {k for (k,) in sqlite_rows(path, "SELECT k FROM zarr")}
    assert keys == {"first", "ok0", "ok1", "ok2", "ok3"}  # nothing of the failed submission


def test_ordering_of_writes_to_one_key_is_kept(writer_db):
    writer = Writer(writer_db)
    try:
        subs = [writer.submit([("set", "k", str(i).encode())]) for i in range(500)]
        subs.append(writer.submit([("delete", "k", None)]))
        subs.append(writer.submit([("set", "k", b"last")]))
        for sub in subs:
            sub.wait()
    finally:
        writer.close()
    assert sqlite_rows(writer_db.path, "SELECT v FROM zarr WHERE k = 'k'") == [(b"last",)]


def test_port_reports_every_submission_once(writer_db):
    writer = Writer(writer_db)
    port = Port(writer)
    try:
        subs = [writer.submit([("set", f"p/{i}", b"v")], port=port) for i in range(200)]
        writer.flush()
        done = _drain_all(port, len(subs))
        assert sorted(map(id, done)) == sorted(map(id, subs))
        assert port.pending == 0 and all(s.done and s.error() is None for s in done)
        assert port.drain() == []
    finally:
        writer.close()


@needs_test_hooks
def test_queue_bound_makes_submitters_wait(writer_db):
    """With a queue bound of 1 MiB, a non-blocking submit of more is refused while the
    writer is held; once released, it goes in."""
    writer = Writer(writer_db, queue_bytes=1 << 20)
    try:
        with writer.holding():
            assert writer.submit([("set", "a", bytes(600_000))], block=False) is not None
            assert writer.submit([("set", "b", bytes(600_000))], block=False) is None
            assert writer.stats()["queued_bytes"] > 600_000
        writer.wait_for_room(600_000)
        writer.submit([("set", "b", bytes(600_000))]).wait()
        assert writer.stats()["max_queued_bytes"] <= 1 << 20
    finally:
        writer.close()


def _write_returns(writer: Writer, key: str) -> bool:
    """A write from another thread commits within 10 s (it hangs while the connection is
    held)."""
    sub = writer.submit([("set", key, b"v")])
    waiter = threading.Thread(target=sub.wait, daemon=True)
    waiter.start()
    waiter.join(10)
    return not waiter.is_alive()


def test_call_holding_runs_fn_on_the_connection_and_gives_it_back(writer_db):
    """call_holding(fn): fn gets the connection once what is queued is written, its result is
    returned, and the connection goes back to the thread whether fn returns or raises (a
    KeyboardInterrupt too, as a signal handler raises it)."""
    writer = Writer(writer_db)
    try:
        for i in range(20):
            writer.submit([("set", f"c/{i}", b"v")])
        assert writer.call_holding(lambda db: db.count_prefix("c/")) == 20

        def interrupted(db):
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            writer.call_holding(interrupted)
        assert _write_returns(writer, "after-interrupt")
        with pytest.raises(ZeroDivisionError):
            writer.call_holding(lambda db: 1 / 0)
        assert _write_returns(writer, "after-error")
    finally:
        writer.close()
    assert sqlite_rows(writer_db.path, "SELECT count(*) FROM zarr WHERE k LIKE 'after-%'") == [
        (2,)
    ]


@needs_test_hooks
def test_a_holder_whose_exit_never_runs_gives_the_connection_back_when_dropped(writer_db):
    """holding()'s __enter__ took the connection and __exit__ never ran (as when a signal's
    exception is raised as a compiled __enter__ returns, on CPython 3.14): dropping the holder
    gives the connection back."""
    writer = Writer(writer_db)
    try:
        holder = writer.holding()
        holder.__enter__()
        del holder
        assert _write_returns(writer, "after-drop")
    finally:
        writer.close()


def test_end_empties_the_list_begin_filled(writer_db):
    """begin() puts the token in the caller's list the moment the level opens; end() with the
    list empties it the moment the level is over, so a caller interrupted around either call
    knows whether a level is still open."""
    writer = Writer(writer_db)
    try:
        opened: list[int] = []
        token = writer.begin(0, opened)
        assert opened == [token]
        nested: list[int] = []
        assert writer.begin(token, nested) == token
        writer.end(token, False, nested)
        assert nested == [] and opened == [token]
        writer.end(token, True, opened)
        assert opened == []
        assert not writer.in_transaction
        opened.append(token)
        with pytest.raises(errors.MisuseError):
            writer.end(token, True, opened)  # over already
        assert opened == []
    finally:
        writer.close()


@needs_test_hooks
def test_hold_waits_for_what_is_queued_and_stops_the_thread(writer_db):
    writer = Writer(writer_db)
    try:
        for i in range(50):
            writer.submit([("set", f"h/{i}", b"v")])
        with writer.holding() as db:  # drain: all 50 are written before it is entered
            assert db.count_prefix("h/") == 50
            later = writer.submit([("set", "later", b"v")])
            time.sleep(0.1)
            assert not later.done  # the thread does not touch the connection meanwhile
            assert db.get("later") is None
        later.wait()
    finally:
        writer.close()


def test_database_is_refused_to_python_while_the_thread_owns_it(writer_db):
    writer = Writer(writer_db)
    try:
        with pytest.raises(errors.ConcurrentUseError):
            writer_db.get("x")
    finally:
        writer.close()
    assert writer_db.get("x") is None  # Python's again after close


def test_every_write_queued_while_a_transaction_is_open_joins_it(writer_db):
    """The writer is the session: a write queued after begin() joins the transaction (it is
    not waited for, and goes with a rollback); one queued after end() is a write of its own."""
    writer = Writer(writer_db)
    try:
        opened: list[int] = []
        token = writer.begin(0, opened)
        assert opened == [token] and writer.in_transaction and writer.transaction == token
        inside = writer.submit([("set", "inside", b"i")])
        assert inside.joined
        writer.end(token, False)  # rolled back
        assert not writer.in_transaction and writer.transaction == 0
        outside = writer.submit([("set", "outside", b"o")])
        assert not outside.joined
        outside.wait()
        token = writer.begin(0, [])
        writer.submit([("set", "committed", b"c")])
        writer.end(token, True)
    finally:
        writer.close()
    assert dict(sqlite_rows(writer_db.path, "SELECT k, v FROM zarr")) == {
        "outside": b"o",
        "committed": b"c",
    }


def test_a_failed_write_of_the_transaction_fails_its_end(tmp_path):
    """Nobody waits for a write that joined the transaction: its error ends the transaction
    (rolled back), raised by end(), with the key that failed."""
    path = _refusing_bad(tmp_path)
    db = Database(path)
    db.set_limit("TRIGGER_DEPTH", 1)  # no engine connection runs a trigger unless told to
    writer = Writer(db)
    try:
        token = writer.begin(0, [])
        writer.submit([("set", "fine", b"f")])
        writer.submit([("set", "bad", b"b")])
        with pytest.raises(errors.ConstraintError, match="refused by a trigger") as excinfo:
            writer.end(token, True)
        assert "'bad'" in str(excinfo.value)
        assert not writer.in_transaction
    finally:
        writer.close()
        db.close()
    assert sqlite_rows(path, "SELECT count(*) FROM zarr") == [(0,)]


@needs_test_hooks
def test_close_writes_everything_queued_and_refuses_what_comes_after(writer_db):
    writer = Writer(writer_db)
    token = writer.begin(0, [])
    queued = [writer.submit([("set", f"q/{i}", b"v")]) for i in range(20)]
    writer.close()
    assert all(s.done and s.joined for s in queued)
    with pytest.raises(errors.ClosedError):
        writer.submit([("set", "after", b"a")])
    with pytest.raises(errors.ClosedError):
        with writer.holding():
            pass
    with pytest.raises(errors.ClosedError):
        writer.end(token, True)
    # The transaction's block never ended: closing discarded it with everything it wrote.
    assert not writer_db.in_transaction
    assert writer_db.count_prefix("q/") == 0
    assert sqlite_rows(writer_db.path, "SELECT count(*) FROM zarr") == [(0,)]


def test_many_threads_submit_at_once(writer_db):
    writer = Writer(writer_db)
    errors_seen = []

    def run(t):
        try:
            for i in range(100):
                writer.submit([("set", f"t{t}/{i}", os.urandom(2000))]).wait()
        except BaseException as exc:  # reported below
            errors_seen.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = writer.stats()
    writer.close()
    assert not errors_seen
    assert writer_db.count_prefix("t") == 800
    assert stats["batches"] < 800  # some were committed together


def test_checkpointer_keeps_the_log_bounded(tmp_path):
    path = make_db_file(tmp_path / "ckpt.zarrdb", "wal")
    db = Database(path)
    writer = Writer(db, checkpoint=True, checkpoint_pages=64, wal_limit_pages=256)
    try:
        for i in range(400):
            writer.submit([("set", f"c/{i}", os.urandom(20_000))]).wait()
        stats = writer.stats()
    finally:
        writer.close()
        db.close()
    assert stats["checkpoints"] > 0
    # The log is started over once the checkpointer has copied it: far below 400 commits'
    # worth of frames (and within the limit plus what one commit writes).
    assert stats["max_wal_frames"] <= 256 + 16, stats
    assert sqlite_rows(path, "SELECT count(*) FROM zarr") == [(400,)]


def test_auto_journal_moves_to_wal_after_small_commits(tmp_path):
    path = make_db_file(tmp_path / "auto.zarrdb", "delete")
    db = Database(path)
    db.journal_mode("truncate")
    writer = Writer(db, checkpoint=True, wal_after=5, small_bytes=10_000)
    try:
        writer.submit([("set", "big", bytes(50_000))]).wait()
        for i in range(4):
            writer.submit([("set", f"s{i}", b"x")]).wait()
        assert not writer.in_wal
        writer.submit([("set", "s4", b"x")]).wait()
        assert writer.in_wal and writer.stats()["switches_to_wal"] == 1
    finally:
        writer.close()
    assert db.journal_mode() == "wal"
    db.close()


def _blocked_signals(tid: int) -> set[int]:
    """The signals a thread of this process blocks (Linux: SigBlk in /proc)."""
    with open(f"/proc/self/task/{tid}/status") as f:
        mask = int(next(line for line in f if line.startswith("SigBlk:")).split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")
def test_writer_and_checkpointer_threads_block_signals(tmp_path):
    """The engine's C threads start with every signal blocked, so Ctrl-C and SIGTERM sent to
    the process go to a thread that runs Python; the threads Python starts, and the caller's,
    keep their masks."""
    import signal

    db = Database(make_db_file(tmp_path / "masks.zarrdb", "wal"))
    before = set(os.listdir("/proc/self/task"))
    writer = Writer(db, checkpoint=True)
    try:
        writer.submit([("set", "a", b"x")]).wait()
        new = [int(t) for t in set(os.listdir("/proc/self/task")) - before]
        wanted = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1}
        masks = {tid: _blocked_signals(tid) for tid in new}
        # the writer and its checkpointer (another thread started meanwhile may be among them)
        assert sum(wanted <= blocked for blocked in masks.values()) >= 2, masks
        assert signal.SIGINT not in _blocked_signals(threading.get_native_id())
    finally:
        writer.close()
        db.close()


def test_submissions_dropped_by_their_waiters_at_once(writer_db):
    """Completion is published last (issue 24, defect 8): a waiter that sees a submission done
    may free it at once, while the writer thread is still finishing its batch. Eight threads
    each drop every submission the moment its wait returns, half of them through a port
    drained by another thread. A use after free here is a memory error under the
    AddressSanitizer step (scripts/memcheck.sh --asan); on x86 without it, the ordering cannot
    be observed, so this run checks that nothing is lost or reported twice."""
    writer = Writer(writer_db)
    port = Port(writer)
    drained: list = []
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set() or port.pending:
            if port.wait(0.05):
                drained.extend(1 for _ in port.drain())

    def run(t: int) -> None:
        for i in range(300):
            if t % 2:
                writer.submit([("set", f"d{t}/{i}", b"v" * (i % 64))], port=port)
            else:
                writer.submit([("set", f"d{t}/{i}", b"v" * (i % 64))]).wait()

    drainer = threading.Thread(target=drain)
    drainer.start()
    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    writer.flush()
    stop.set()
    drainer.join(60)
    try:
        assert not drainer.is_alive() and not any(t.is_alive() for t in threads)
        assert len(drained) == 4 * 300 and port.pending == 0
    finally:
        writer.close()
    assert writer_db.count_prefix("d") == 8 * 300
