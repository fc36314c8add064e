"""The rule of explicit transactions: the store object is the session (issue 24).

While `store.transaction()` is open, every write through that store object joins it, from any
thread, event loop, zarr worker or dask task; a second transaction() from outside the block
waits for it; one inside the block nests as a savepoint. The moment a transaction starts is
marked atomically with taking the write lock: a write queued before it is committed on its own
and acknowledged only after its commit, whatever becomes of the transaction.

Windows are widened deterministically by another process holding the file's write lock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr

from store._lock_holder import LockHolder
from store.helpers import buf
from zarrdb import SQLiteStore, _core, _pause

JOIN_TIMEOUT = 30  # seconds; a thread still alive after it is a hang, reported as a failure



class Boom(Exception):
    pass


def reopened(path: Path) -> dict[str, bytes]:
    """The committed data, read with the standard library's sqlite3 (the store is closed)."""
    con = sqlite3.connect(path)
    try:
        return {k: bytes(v) for k, v in con.execute("SELECT k, v FROM zarr")}
    finally:
        con.close()


def run_threads(targets: list[Callable[[], None]]) -> None:
    errors: list[BaseException] = []

    def guard(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guard(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    if errors:
        raise errors[0]


# --- defect 1: a write queued before the transaction began is never rolled back with it ------


class LoopTicks:
    """`async with LoopTicks(interval) as loop:` counts the event loop's turns (loop.count)
    while the block runs: a wait that blocks the loop's thread stops the count."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.count = 0
        self._stop = asyncio.Event()

    async def _tick(self) -> None:
        while not self._stop.is_set():
            self.count += 1
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> LoopTicks:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await self._task


def test_write_queued_while_a_transaction_waits_for_the_lock_is_committed_on_its_own(
    tmp_path: Path,
) -> None:
    """A transaction's BEGIN IMMEDIATE waits behind another process's lock; a set_sync from
    another thread meanwhile is queued before the transaction began. It must be committed on
    its own, not written into the transaction as a savepoint, reported committed and erased
    when the block fails."""
    path = tmp_path / "window.zarrdb"
    store = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT)
    store.set_sync("before", buf(b"0"))
    holder = LockHolder(path)
    acknowledged: list[str] = []
    entered = threading.Event()

    def transaction() -> None:
        with pytest.raises(Boom):
            with store.transaction():  # waits for the lock in BEGIN IMMEDIATE
                entered.set()
                store.set_sync("txn/x", buf(b"rolled back"))
                time.sleep(0.3)  # the other write, if it joined, is written meanwhile
                raise Boom

    def other() -> None:
        time.sleep(0.3)  # the transaction holds the connection, waiting for the lock
        assert not entered.is_set()
        store.set_sync("acknowledged", buf(b"committed on its own"))
        acknowledged.append("acknowledged")

    def release() -> None:
        time.sleep(0.8)  # both are waiting now
        holder.release()

    try:
        run_threads([transaction, other, release])
        assert acknowledged == ["acknowledged"]
    finally:
        holder.release()
        store.close()
    got = reopened(path)
    assert "txn/x" not in got
    assert got.get("acknowledged") == b"committed on its own", (
        "set_sync returned, then its write was rolled back with a transaction it was queued "
        "before"
    )


@pytest.mark.parametrize("block", ["read", "nothing"])
def test_the_block_does_not_wait_for_writes_queued_before_it(tmp_path: Path, block: str) -> None:
    """As above, a write from another thread is queued while the transaction's BEGIN waits for
    another process's lock; it is committed on its own before the transaction opens. Neither a
    read inside the block (the session sees its writes: it waits for the transaction's queued
    writes) nor the block's end waits for anything of it (it once waited for the transaction's
    end, and such a wait would wait for the block's own end)."""
    path = tmp_path / "read-in-block.zarrdb"
    store = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT)
    store.set_sync("before", buf(b"0"))
    writer = store._file().submitter.writer
    holder = LockHolder(path)
    seen: dict[str, object] = {}

    def transaction() -> None:
        with store.transaction():  # waits for the lock in BEGIN IMMEDIATE
            if block == "read":
                seen["sizes"] = dict(store.key_sizes())
                store.set_sync("txn/x", buf(b"in the block"))
                value = store.get_sync("txn/x")
                seen["value"] = None if value is None else value.to_bytes()
        seen["committed"] = True

    def other() -> None:
        store.set_sync("outside", buf(b"queued before the transaction began"))
        seen["outside"] = True

    deadline = time.monotonic() + JOIN_TIMEOUT
    threads = [threading.Thread(target=transaction, daemon=True)]
    try:
        threads[0].start()
        while not writer.stats()["held"]:  # the transaction's BEGIN waits for the lock
            assert time.monotonic() < deadline
            time.sleep(0.005)
        threads.append(threading.Thread(target=other, daemon=True))
        threads[1].start()
        while writer.stats()["queued_bytes"] == 0:  # the other write is queued
            assert time.monotonic() < deadline
            time.sleep(0.005)
        holder.release()
        for t in threads:
            t.join(JOIN_TIMEOUT)
        assert not any(t.is_alive() for t in threads), (
            f"hung: the block waited for a write queued before the transaction began {seen}"
        )
    finally:
        holder.release()
    store.close()
    assert seen["committed"] and seen["outside"]
    got = reopened(path)
    assert got["outside"] == b"queued before the transaction began"
    if block == "read":
        assert seen["sizes"] == {"before": 1, "outside": 35}  # committed before it opened
        assert seen["value"] == b"in the block"
        assert got["txn/x"] == b"in the block"


@pytest.mark.skipif(
    not _core._PAUSE_POINTS or not hasattr(signal, "setitimer"),
    reason="pause points (test builds only) and POSIX interval timers",
)
def test_ctrl_c_as_a_transaction_begins_again_keeps_the_writes_that_joined_it(
    tmp_path: Path,
) -> None:
    """The block's BEGIN has had the lock, found a write queued while it waited, and begins
    again once that is committed; meanwhile other threads' writes join the transaction and
    return, and another process takes the lock, so the second BEGIN waits; Ctrl-C comes then.
    The block is never entered: the KeyboardInterrupt must come before the transaction opens,
    and the joined writes be committed on their own (raised once it was open, its rollback
    took them: acknowledged, then lost)."""
    path = tmp_path / "interrupted-begin.zarrdb"
    store = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT)
    store.set_sync("before", buf(b"0"))
    writer = store._file().submitter.writer
    first = LockHolder(path)
    second: list[LockHolder] = []
    outcome: dict[str, object] = {}
    entered: list[bool] = []

    def write(key: str) -> None:
        try:
            store.set_sync(key, buf(key.encode()))
            outcome[key] = "ok"
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome[key] = exc

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    def hook(name: str) -> None:
        if name != "txn.retry" or second:
            return
        _pause.disarm()
        second.append(LockHolder(path))  # the second BEGIN waits for this one
        run_threads([lambda i=i: write(f"joined/{i}") for i in range(3)])  # they return at once
        threading.Timer(0.6, second[0].let_go).start()
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # Ctrl-C during that wait

    early = threading.Thread(target=write, args=("early",), daemon=True)
    previous = signal.signal(signal.SIGALRM, interrupt)
    _pause.arm(hook)
    try:
        opener = threading.Timer(0.3, first.let_go)
        opener.start()
        early_starter = threading.Timer(0.1, early.start)
        early_starter.start()
        with pytest.raises(KeyboardInterrupt):
            with store.transaction():  # waits for `first`, then for `second`
                entered.append(True)
        early.join(JOIN_TIMEOUT)
    finally:
        _pause.disarm()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        first.release()
        for holder in second:
            holder.release()
    assert writer.stats()["held"] == 0
    store.close()
    assert second, "the transaction never began again"
    assert not entered
    assert all(outcome[k] == "ok" for k in ("early", "joined/0", "joined/1", "joined/2")), outcome
    got = reopened(path)
    for key in ("early", "joined/0", "joined/1", "joined/2"):
        assert got.get(key) == key.encode(), f"{key} was acknowledged, then lost: {got}"


# --- the rule -------------------------------------------------------------------------------


def test_a_write_from_another_thread_joins_the_open_transaction(tmp_path: Path) -> None:
    """The store object is the session: another thread's write through it during the block
    is the transaction's (it does not wait for the block, and goes with its rollback)."""
    path = tmp_path / "session.zarrdb"
    store = SQLiteStore(path)
    try:
        with pytest.raises(Boom):
            with store.transaction():
                run_threads([lambda: store.set_sync("from/thread", buf(b"t"))])
                assert store.get_sync("from/thread").to_bytes() == b"t"
                raise Boom
        assert store.get_sync("from/thread") is None
        with store.transaction():
            run_threads([lambda: store.set_sync("from/thread", buf(b"t"))])
        assert store.get_sync("from/thread").to_bytes() == b"t"
    finally:
        store.close()
    assert reopened(path) == {"from/thread": b"t"}


def test_a_writer_that_stays_out_uses_its_own_store(tmp_path: Path) -> None:
    """A second store object on the file is another session: its write waits for the lock
    and is committed whatever the transaction does."""
    path = tmp_path / "outside.zarrdb"
    store = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT)
    other = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT)
    try:
        store.ensure_open()
        other.ensure_open()
        with pytest.raises(Boom):
            with store.transaction():
                store.set_sync("inside", buf(b"i"))
                outside = threading.Thread(
                    target=other.set_sync, args=("outside", buf(b"o")), daemon=True
                )
                outside.start()
                time.sleep(0.2)
                assert outside.is_alive(), "the other store wrote through the open transaction"
                raise Boom
        outside.join(JOIN_TIMEOUT)
        assert not outside.is_alive()
    finally:
        other.close()
        store.close()
    assert reopened(path) == {"outside": b"o"}


def test_a_transaction_from_another_thread_waits_for_the_open_one(tmp_path: Path) -> None:
    path = tmp_path / "second.zarrdb"
    store = SQLiteStore(path)
    order: list[str] = []
    opened = threading.Event()

    def first() -> None:
        with store.transaction():
            opened.set()
            time.sleep(0.3)
            store.set_sync("k", buf(b"first"))
            order.append("first ends")

    def second() -> None:
        assert opened.wait(JOIN_TIMEOUT)
        with store.transaction():
            order.append("second begins")
            assert store.get_sync("k").to_bytes() == b"first"
            store.set_sync("k", buf(b"second"))

    try:
        run_threads([first, second])
    finally:
        store.close()
    assert order == ["first ends", "second begins"]
    assert reopened(path) == {"k": b"second"}


async def test_a_task_started_inside_the_block_nests(tmp_path: Path) -> None:
    """A transaction() entered by a task the block started (it carries the block's context)
    nests as a savepoint instead of waiting for the block (which waits for the task)."""
    path = tmp_path / "nested.zarrdb"
    store = SQLiteStore(path)

    async def inner(fail: bool) -> None:
        async with store.transaction():
            await store.set(f"inner/{fail}", buf(b"i"))
            if fail:
                raise Boom

    try:
        async with store.transaction():
            await store.set("outer", buf(b"o"))
            await asyncio.wait_for(asyncio.create_task(inner(False)), JOIN_TIMEOUT)
            with pytest.raises(Boom):
                await asyncio.wait_for(asyncio.create_task(inner(True)), JOIN_TIMEOUT)
            assert (await store.get("inner/True")) is None
    finally:
        store.close()
    assert reopened(path) == {"outer": b"o", "inner/False": b"i"}


async def test_async_with_waits_for_the_lock_off_the_event_loop(tmp_path: Path) -> None:
    """`async with store.transaction()` waiting for another process's lock must not stop the
    event loop's thread: a ticker task goes on meanwhile."""
    path = tmp_path / "loop.zarrdb"
    store = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT)
    await store.set("before", buf(b"0"))
    holder = LockHolder(path)
    release = asyncio.get_running_loop().call_later(0.5, holder.release)
    try:
        async with LoopTicks(0.01) as loop:
            async with store.transaction():
                waited_ticks = loop.count
                await store.set("inside", buf(b"i"))
                assert (await store.get("inside")).to_bytes() == b"i"
        assert waited_ticks >= 10, f"the loop turned {waited_ticks} times in 0.5 s of waiting"
    finally:
        release.cancel()
        holder.release()
        store.close()
    assert reopened(path) == {"before": b"0", "inside": b"i"}


async def test_a_read_inside_async_with_waits_off_the_event_loop(tmp_path: Path) -> None:
    """A read inside the block waits for the writes queued before it (64 MiB here) in a worker
    thread: the event loop goes on meanwhile."""
    store = SQLiteStore(tmp_path / "read.zarrdb", durability="off")
    await store.set("before", buf(b"0"))
    values = [os.urandom(16 << 20) for _ in range(4)]
    try:
        async with LoopTicks(0.002) as loop, store.transaction():
            for i, value in enumerate(values):
                await store.set(f"big/{i}", buf(value))  # joined: returns at once
            before = loop.count
            assert (await store.get("big/3")).to_bytes() == values[3]
            during = loop.count - before
        assert during >= 3, f"the loop turned {during} times while the read waited"
    finally:
        store.close()


# --- zarr and dask inside the block ------------------------------------------------------------


def _array(store: SQLiteStore) -> zarr.Array:
    root = zarr.open_group(store, mode="a")
    return root.require_array("a", shape=(64, 64), chunks=(8, 8), dtype="i4", fill_value=0)


def test_zarr_sync_api_inside_a_transaction(tmp_path: Path) -> None:
    """zarr's sync API writes from its own event-loop thread and codec workers: through the
    same store object, so the writes are the transaction's."""
    path = tmp_path / "zarr-sync.zarrdb"
    store = SQLiteStore(path)
    data = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    try:
        arr = _array(store)
        with pytest.raises(Boom):
            with store.transaction():
                arr[:] = data
                np.testing.assert_array_equal(arr[:], data)
                raise Boom
        np.testing.assert_array_equal(arr[:], 0)
        with store.transaction():
            arr[:] = data
    finally:
        store.close()
    again = SQLiteStore(path, read_only=True)
    try:
        np.testing.assert_array_equal(zarr.open_array(again, path="a", mode="r")[:], data)
    finally:
        again.close()


async def test_zarr_async_api_inside_a_transaction(tmp_path: Path) -> None:
    path = tmp_path / "zarr-async.zarrdb"
    store = SQLiteStore(path)
    data = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    try:
        root = await zarr.api.asynchronous.open_group(store=store, mode="a")
        arr = await root.create_array("a", shape=(64, 64), chunks=(8, 8), dtype="i4")
        with pytest.raises(Boom):
            async with store.transaction():
                await arr.setitem(slice(None), data)
                np.testing.assert_array_equal(await arr.getitem(slice(None)), data)
                raise Boom
        assert not [k async for k in store.list_prefix("a/c")]
        async with store.transaction():
            await arr.setitem(slice(None), data)
        np.testing.assert_array_equal(await arr.getitem(slice(None)), data)
    finally:
        store.close()


def test_dask_threaded_store_inside_a_transaction(tmp_path: Path) -> None:
    da = pytest.importorskip("dask.array")
    path = tmp_path / "dask.zarrdb"
    store = SQLiteStore(path)
    data = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    try:
        arr = _array(store)
        source = da.from_array(data, chunks=(8, 8))
        with pytest.raises(Boom):
            with store.transaction():
                da.store(source, arr, lock=False, scheduler="threads")
                raise Boom
        np.testing.assert_array_equal(arr[:], 0)
        with store.transaction():
            da.store(source, arr, lock=False, scheduler="threads")
        np.testing.assert_array_equal(arr[:], data)
    finally:
        store.close()
