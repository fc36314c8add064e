"""Threads: one Database per thread on the same WAL file (parallel readers, one writer, only
committed data visible), atomic set_if_absent across connections, and ConcurrentUseError when
one Database is used by two threads at once."""

from __future__ import annotations

import threading
import time

import pytest

from zarrdb import errors
from zarrdb._core import Database

from . import writes
from .helpers import LockHolder

READERS = 4
RUN_SECONDS = 1.5


def _version(value: bytes) -> int:
    return int.from_bytes(value[:8], "little")


def _value(version: int, tag: bytes = b"") -> bytes:
    # 8 bytes of version, then a body long enough to span pages, so torn reads would show.
    return version.to_bytes(8, "little") + tag + bytes([version % 251]) * 9000


def test_parallel_readers_see_only_committed_consistent_pairs(wal_path):
    errors_seen: list[BaseException] = []
    stop = threading.Event()
    committed = [0]  # highest committed version, as the writer knows it
    reads = [0] * READERS

    with Database(wal_path) as setup:
        writes.set_many(setup, [("pair/a", _value(0)), ("pair/b", _value(0)), ("solo", _value(0))])

    def writer():
        try:
            with Database(wal_path) as db, writes.open_writer(db) as w:
                version = 0
                while not stop.is_set():
                    version += 1
                    if version % 5 == 0:
                        # A transaction that is rolled back: nobody may ever see its values.
                        token = w.begin(0, [])
                        w.write([("set", "pair/a", _value(10**9 + version, b"ROLLED-BACK"))])
                        w.write([("set", "pair/b", _value(10**9 + version, b"ROLLED-BACK"))])
                        w.end(token, False)
                        continue
                    pair = [("set", "pair/a", _value(version)), ("set", "pair/b", _value(version))]
                    if version % 7 == 0:
                        # An open transaction held for a while: its values are not committed.
                        token = w.begin(0, [])
                        w.write(pair)
                        time.sleep(0.005)
                        w.end(token, True)
                    else:
                        w.write(pair)
                    committed[0] = version
                    w.write([("set", "solo", _value(version))])
        except BaseException as e:  # pragma: no cover - reported below
            errors_seen.append(e)
            stop.set()

    def reader(n):
        try:
            with Database(wal_path, mode="r") as db:
                last = 0
                while not stop.is_set():
                    floor = committed[0]
                    a, b = db.get_many(["pair/a", "pair/b"])
                    assert a == b, "a pair written in one transaction was read torn"
                    assert b"ROLLED-BACK" not in a
                    version = _version(a)
                    assert a == _value(version)
                    assert version >= last, "went back in time"
                    assert version >= floor, "missed a committed write"
                    last = version
                    ranges = db.get_ranges([("pair/a", 0, 8), ("pair/b", 0, 8)])
                    assert ranges[0] == ranges[1], "get_ranges is one snapshot"
                    solo = db.get("solo")
                    assert solo == _value(_version(solo))
                    reads[n] += 1
        except BaseException as e:
            errors_seen.append(e)
            stop.set()

    threads = [threading.Thread(target=writer)]
    threads += [threading.Thread(target=reader, args=(n,)) for n in range(READERS)]
    for t in threads:
        t.start()
    time.sleep(RUN_SECONDS)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    if errors_seen:
        raise errors_seen[0]
    assert all(r > 0 for r in reads), reads
    assert committed[0] > 5


def test_readers_in_parallel_with_large_values(wal_path):
    value = bytes(range(256)) * 8192  # 2 MiB
    with Database(wal_path) as db:
        writes.set_many(db, [(f"big/{i}", value) for i in range(4)])
    results: list[object] = []

    def reader(i):
        try:
            with Database(wal_path, mode="r") as db:
                for _ in range(20):
                    assert db.get(f"big/{i}") == value
                    assert db.get_range(f"big/{i}", 1000, 300) == value[1000:1300]
                results.append(True)
        except BaseException as e:
            results.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [True] * 4


def test_set_if_absent_is_atomic_across_connections(wal_path):
    contenders = 8
    barrier = threading.Barrier(contenders)
    outcome: dict[int, object] = {}

    def contend(n):
        with Database(wal_path, busy_timeout=30) as db:
            barrier.wait()
            try:
                outcome[n] = writes.set_if_absent(db, "lock", f"owner {n}".encode())
            except BaseException as e:
                outcome[n] = e

    for _round in range(3):
        outcome.clear()
        with Database(wal_path) as db:
            writes.delete(db, "lock")
        threads = [threading.Thread(target=contend, args=(n,)) for n in range(contenders)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert all(v is True or v is False for v in outcome.values()), outcome
        winners = [n for n, won in outcome.items() if won is True]
        assert len(winners) == 1, outcome
        with Database(wal_path) as db:
            assert db.get("lock") == f"owner {winners[0]}".encode()


def test_a_database_may_move_between_threads(db):
    writes.set(db, "k", b"main")
    box = []

    def other():
        writes.set(db, "k", b"other")
        box.append(db.get("k"))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert box == [b"other"]
    assert db.get("k") == b"other"


def test_concurrent_use_of_one_database_raises(db_path):
    # Deterministic overlap: the worker's get() waits (GIL released) for a lock that another
    # process holds, while the main thread calls into the same Database.
    db = Database(db_path, busy_timeout=10)
    writes.set(db, "k", b"value")
    result: dict[str, object] = {}
    entering = threading.Event()

    def worker():
        entering.set()
        try:
            result["value"] = db.get("k")
        except BaseException as e:
            result["error"] = e

    try:
        with LockHolder(db_path, "EXCLUSIVE") as holder:
            t = threading.Thread(target=worker)
            t.start()
            entering.wait()
            # Wait until the worker is inside get() (waiting for the lock). Leaving an atomic
            # block that raised, with no transaction open, only looks at the connection's
            # state and holds the GIL throughout, so it cannot overlap the worker's entry: it
            # either passes (worker not in yet) or sees the worker inside.
            deadline = time.monotonic() + 10
            while True:
                try:
                    db._atomic().__exit__(RuntimeError, None, None)
                except errors.ConcurrentUseError:
                    break
                assert time.monotonic() < deadline, "the worker never entered get()"
                time.sleep(0.01)
            assert t.is_alive()
            for call in (
                lambda: db.get("k"),
                lambda: writes.set(db, "k", b"other"),
                lambda: db.get_many(["k"]),
                lambda: db.list_dir(""),
                lambda: db._atomic().__enter__(),
                lambda: db.execute("SELECT 1"),
            ):
                with pytest.raises(errors.ConcurrentUseError) as info:
                    call()
                assert isinstance(info.value, RuntimeError)
            with pytest.raises(errors.ConcurrentUseError):
                db.close()
            assert not db.closed
            holder.release()
            t.join(timeout=30)
        # The worker's call was not disturbed, and the Database is free again.
        assert result == {"value": b"value"}
        assert db.get("k") == b"value"
        writes.set(db, "k", b"after")
        assert db.get("k") == b"after"
    finally:
        db.close()


def test_concurrent_use_detected_under_load(any_db):
    # Two threads hammer the same Database with big batches. Each call either returns the
    # right answer or raises ConcurrentUseError; at least one overlap must be seen.
    keys = [f"k/{i}" for i in range(20_000)]
    writes.set_many(any_db, [(k, k.encode()) for k in keys])
    expected = [k.encode() for k in keys]
    stop = threading.Event()
    seen = {"overlaps": 0, "ok": 0}
    failures: list[BaseException] = []

    def hammer():
        while not stop.is_set():
            try:
                assert any_db.get_many(keys) == expected
                seen["ok"] += 1
            except errors.ConcurrentUseError:
                seen["overlaps"] += 1
                stop.set()
            except BaseException as e:
                failures.append(e)
                stop.set()

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while not stop.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    if failures:
        raise failures[0]
    assert seen["overlaps"] >= 1, seen
    assert any_db.get_many(keys[:3]) == expected[:3]  # usable afterwards
