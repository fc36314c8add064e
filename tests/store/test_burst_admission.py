"""Room in the writer's queue, and the writes that wait for it: none waits for room only its
own transaction's end could make, each is committed without waiting for a later write, they
keep the order they were made in, and a bad value fails only its own caller.

Each scenario is made deterministic by another process holding the file's write lock (nothing
can commit until it lets go) and a small bound on the queue; every wait has a deadline, so a
write that never returns fails the test in seconds."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from zarr.core.buffer import cpu

from store._lock_holder import LockHolder
from zarrdb import SQLiteStore, _core, _pause, _tunables


DEADLINE = 10.0  # seconds: far more than any of these writes needs once the lock is let go


def value(i: int, size: int = 1024) -> cpu.Buffer:
    return cpu.Buffer.from_bytes(bytes([i % 251]) * size)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll for a state the test then relies on (not a guess at how long it takes)."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.005)


def stored_sync(store: SQLiteStore, key: str) -> bytes | None:
    got = store.get_sync(key, prototype=cpu.buffer_prototype)
    return None if got is None else got.to_bytes()


async def stored(store: SQLiteStore, key: str) -> bytes | None:
    got = await store.get(key, cpu.buffer_prototype)
    return None if got is None else got.to_bytes()


@pytest.mark.parametrize("form", ["with", "async with"])
def test_a_transaction_is_not_stuck_behind_the_writes_queued_while_it_began(
    form: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """While the transaction's begin() waits for another process's lock, other threads queue
    writes that fill the queue (they are committed before it opens). The block's own writes
    must still be queued (not wait for room that only the block's end makes)."""
    bound = 1024 * 1024
    size = 300 * 1024  # three fill the queue; a fourth does not fit beside them
    monkeypatch.setattr(_tunables, "QUEUE_MAX_BYTES", bound)
    path = tmp_path / "deferred.zarrdb"
    store = SQLiteStore(path)
    holder = None
    outcomes: dict[str, BaseException | None] = {}

    def run(name: str, fn: Callable[[], None]) -> threading.Thread:
        def target() -> None:
            try:
                fn()
                outcomes[name] = None
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                outcomes[name] = exc

        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    def block() -> None:
        if form == "with":
            with store.transaction():
                store.set_sync("txn/a", value(1, size))
                store.set_sync("txn/b", value(2, size))
        else:
            asyncio.run(async_block())

    async def async_block() -> None:
        async with store.transaction():
            await store.set("txn/a", value(1, size))
            await store.set("txn/b", value(2, size))

    try:
        store.set_sync("first", value(0))  # opens the writer
        writer = store._submitter().writer
        holder = LockHolder(path)
        owner = run("block", block)
        # begin() holds the connection while it waits for the lock.
        wait_until(lambda: writer.stats()["held"] == 1, "begin() holding the connection")
        others = [
            run(f"other/{i}", lambda i=i: store.set_sync(f"other/{i}", value(10 + i, size)))
            for i in range(3)
        ]
        wait_until(lambda: writer.stats()["queued_bytes"] >= 3 * size, "the others queued")
        holder.let_go()  # the others' writes are committed, then the transaction begins
        owner.join(DEADLINE)
        assert not owner.is_alive(), "the transaction's block waits for room for good"
        assert outcomes["block"] is None, outcomes["block"]
        for thread in others:
            thread.join(DEADLINE)
            assert not thread.is_alive(), f"{thread.name} was never written"
            assert outcomes[thread.name] is None, outcomes[thread.name]
        assert stored_sync(store, "txn/a") == value(1, size).to_bytes()
        assert stored_sync(store, "txn/b") == value(2, size).to_bytes()
        for i in range(3):
            assert stored_sync(store, f"other/{i}") == value(10 + i, size).to_bytes()
    finally:
        if holder is not None:
            holder.release()
        store.close()


async def test_a_small_write_that_waited_for_room_is_committed_without_another_write(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A burst that found the queue full is queued once there is room, after its turn has
    ended: the writer must hear that it is all there is, not wait for a flush that ran."""
    monkeypatch.setattr(_tunables, "QUEUE_MAX_BYTES", _tunables.BURST_MAX_BYTES)
    path = tmp_path / "room.zarrdb"
    store = SQLiteStore(path)
    size = _tunables.BURST_MAX_BYTES // 4  # four make a burst, queued at once: the queue is full
    holder = None
    try:
        await store.set("first", value(0))
        holder = LockHolder(path)
        full = [asyncio.ensure_future(store.set(f"full/{i}", value(i, size))) for i in range(4)]
        small = asyncio.ensure_future(store.set("small", value(9)))
        await asyncio.sleep(0.1)  # the small write's burst found the queue full
        assert not small.done()
        holder.let_go()
        done, _ = await asyncio.wait([small, *full], timeout=DEADLINE)
        assert small in done, "the small write waited for room and was never committed"
        await asyncio.gather(small, *full)
        assert await stored(store, "small") == value(9).to_bytes()
    finally:
        if holder is not None:
            holder.release()
        store.close()


async def test_a_synchronous_write_on_the_loop_comes_after_the_bursts_waiting_for_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`set()` then `set_sync()` of the same key from the loop's thread: the later one stays,
    also when the earlier one's burst is waiting for room and the later one would fit."""
    burst = _tunables.BURST_MAX_BYTES
    # One burst fits, two do not; a small write fits beside one.
    monkeypatch.setattr(_tunables, "QUEUE_MAX_BYTES", 2 * burst - 1024)
    path = tmp_path / "order.zarrdb"
    store = SQLiteStore(path)
    size = burst // 4
    holder = None
    try:
        await store.set("first", value(0))
        holder = LockHolder(path)
        keys = [f"k/{i}" for i in range(4)] + ["k/4", "same", "k/5", "k/6"]  # two bursts
        tasks = [asyncio.ensure_future(store.set(k, value(i, size))) for i, k in enumerate(keys)]
        await asyncio.sleep(0.1)  # the second burst waits for room
        assert not any(task.done() for task in tasks)
        timer = threading.Timer(0.3, holder.let_go)  # set_sync blocks this thread until then
        timer.start()
        try:
            store.set_sync("same", value(99))
        finally:
            timer.join()
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE)
        assert await stored(store, "same") == value(99).to_bytes()
        assert await stored(store, "k/6") == value(7, size).to_bytes()
    finally:
        if holder is not None:
            holder.release()
        store.close()


def test_closing_on_the_loop_writes_the_bursts_waiting_for_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """close() from a coroutine while a burst of its loop waits for room: closing queues it
    first (as it queues the turn's burst), so its callers are written, not failed."""
    monkeypatch.setattr(_tunables, "QUEUE_MAX_BYTES", _tunables.BURST_MAX_BYTES)
    path = tmp_path / "close.zarrdb"
    size = _tunables.BURST_MAX_BYTES // 4
    holders = []

    async def main() -> list[object]:
        store = SQLiteStore(path)
        await store.set("first", value(0))
        holders.append(LockHolder(path))
        tasks = [asyncio.ensure_future(store.set(f"k/{i}", value(i, size))) for i in range(8)]
        await asyncio.sleep(0.1)  # the first burst is queued, the second waits for room
        assert not any(task.done() for task in tasks)
        timer = threading.Timer(0.3, holders[0].let_go)  # close() waits for the lock
        timer.start()
        try:
            store.close()
        finally:
            timer.join()
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), DEADLINE)

    try:
        assert asyncio.run(main()) == [None] * 8
    finally:
        for holder in holders:
            holder.release()
    store = SQLiteStore(path, read_only=True)
    try:
        for i in range(8):
            assert stored_sync(store, f"k/{i}") == value(i, size).to_bytes()
    finally:
        store.close()


@pytest.mark.parametrize("where", [0, 3, 5])
async def test_a_value_that_cannot_be_taken_fails_only_its_own_caller(
    where: int, tmp_path: Path
) -> None:
    """Six small writes of one turn, one of a buffer that is not contiguous: that caller gets
    the error, the five others are stored."""
    store = SQLiteStore(tmp_path / "bad.zarrdb")
    strided = cpu.Buffer.from_array_like(np.arange(2048, dtype="u1")[::2])
    try:
        await store.set("first", value(0))
        values = [value(i) for i in range(6)]
        values[where] = strided
        results = await asyncio.wait_for(
            asyncio.gather(
                *(store.set(f"k/{i}", v) for i, v in enumerate(values)), return_exceptions=True
            ),
            DEADLINE,
        )
        assert isinstance(results[where], (ValueError, BufferError)), results[where]
        assert [r for i, r in enumerate(results) if i != where] == [None] * 5
        for i in range(6):
            want = None if i == where else value(i).to_bytes()
            assert await stored(store, f"k/{i}") == want
    finally:
        store.close()


@pytest.mark.skipif(not _core._PAUSE_POINTS, reason="pause points: test builds only")
@pytest.mark.parametrize("waiting", ["a burst", "a burst and a larger write"])
def test_a_synchronous_write_on_the_loop_does_not_wait_for_the_loops_next_turn(
    waiting: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A burst that waited for room is queued, and its flush is left to the loop's next turn;
    a callback that runs before that flush calls `set_sync()` of a value that needs the whole
    queue (and, with a larger write waiting behind the burst, first waits for room for that
    one). The loop cannot turn while it waits: the writer must hear that the burst is all
    there is from the synchronous caller, else the burst is never written, the room never
    made, and the caller (and its loop) wait for good."""
    large = 96 * 1024  # fits only in an empty queue: waits for the burst to be written
    monkeypatch.setattr(_tunables, "QUEUE_MAX_BYTES", large)
    path = tmp_path / "turn.zarrdb"
    store = SQLiteStore(path)
    loop = asyncio.new_event_loop()
    holders = []
    outcome: list[BaseException | None] = []
    scheduled: list[asyncio.Handle] = []

    def write_after() -> None:  # a callback on the loop's thread, before the burst's flush
        try:
            store.set_sync("after", value(3, large))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            outcome.append(exc)

    def hook(name: str) -> None:
        # The backlog's burst has just been queued on the loop's thread (hinted, too small to
        # wake the writer): the next callback queued runs before its flush.
        if name == "submit.queued" and threading.current_thread() is runner and not scheduled:
            scheduled.append(loop.call_soon(write_after))

    async def main() -> None:
        await store.set("first", value(0))
        holders.append(LockHolder(path))
        big = asyncio.ensure_future(store.set("big", value(1, large)))  # the queue is full
        waiters = [asyncio.ensure_future(store.set("small", value(2)))]
        if waiting != "a burst":  # fits only once the burst is written
            waiters.append(asyncio.ensure_future(store.set("medium", value(4, large - 50))))
        watch = store._submitter().watches[id(asyncio.get_running_loop())]
        for _ in range(int(DEADLINE / 0.005)):
            if len(watch.backlog) == len(waiters):
                break
            await asyncio.sleep(0.005)
        assert len(watch.backlog) == len(waiters), "the writes never waited for room"
        _pause.arm(hook)
        holders[0].let_go()
        await asyncio.gather(big, *waiters)

    runner = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    try:
        runner.start()
        runner.join(DEADLINE)
        stuck = runner.is_alive()
        if stuck:  # unstick it (the writer hears what the loop's flush would have said)
            store._submitter().writer.flush()
            runner.join(DEADLINE)
        assert not stuck, "set_sync on the loop's thread waited for its loop's next turn"
        assert scheduled and outcome == [None]
        assert stored_sync(store, "after") == value(3, large).to_bytes()
        assert stored_sync(store, "small") == value(2).to_bytes()
        if waiting != "a burst":
            assert stored_sync(store, "medium") == value(4, large - 50).to_bytes()
    finally:
        _pause.disarm()
        for holder in holders:
            holder.release()
        loop.close()
        store.close()


@pytest.mark.skipif(not _core._PAUSE_POINTS, reason="pause points: test builds only")
async def test_a_callers_writes_keep_their_order_across_a_transactions_start(
    tmp_path: Path,
) -> None:
    """A task fires a write of "k" while another thread's transaction waits for the file's lock
    (another process holds it), then writes "k" again once the transaction is open: the second
    value is the one stored: the first is committed before the transaction opens. (It used to
    wait for the transaction's end, and land after the second, which had joined it.)"""
    path = tmp_path / "order.zarrdb"
    store = SQLiteStore(path)
    holder = None
    opened, finish = threading.Event(), threading.Event()

    def block() -> None:
        with store.transaction():
            opened.set()
            finish.wait(DEADLINE)

    owner = threading.Thread(target=block, daemon=True)
    try:
        await store.set("first", value(0))  # opens the writer
        writer = store._submitter().writer
        holder = LockHolder(path)
        owner.start()
        await asyncio.to_thread(
            wait_until, lambda: writer.stats()["held"] == 1, "begin() holding the connection"
        )
        early = asyncio.ensure_future(store.set("k", value(1)))
        await asyncio.sleep(0)  # the write's burst is queued as this turn ends
        await asyncio.to_thread(
            wait_until, lambda: writer.stats()["queued_bytes"] > 0, "the first write queued"
        )
        holder.let_go()
        assert await asyncio.to_thread(opened.wait, DEADLINE), "the transaction never opened"
        await store.set("k", value(2))  # joins the open transaction
        finish.set()
        await asyncio.to_thread(owner.join, DEADLINE)
        assert not owner.is_alive()
        await asyncio.wait_for(early, DEADLINE)
        assert await stored(store, "k") == value(2).to_bytes()
    finally:
        finish.set()
        if holder is not None:
            holder.release()
        store.close()


def test_a_synchronous_write_on_the_loop_joins_a_transaction_its_loop_is_beginning(
    tmp_path: Path,
) -> None:
    """A task begins a transaction (in a worker thread); while the begin holds the connection,
    before the transaction is open, a coroutine of the same loop calls `set_sync()`. Left to
    wait for the transaction's end, the write would wait for good: only the loop it blocks can
    end that block. It waits for the begin and joins the transaction, as any write made while
    one is open."""
    path = tmp_path / "beginning.zarrdb"
    store = SQLiteStore(path)
    loop = asyncio.new_event_loop()
    beginning = threading.Event()
    queued = threading.Event()

    def hook(name: str) -> None:
        if name == "txn.begin" and not beginning.is_set():
            beginning.set()
            queued.wait(0.5)  # until the write is queued, if it may be queued now
        elif name == "submit.queued" and threading.current_thread() is runner:
            queued.set()

    async def block() -> None:
        async with store.transaction():
            await store.set("inside", value(1))

    async def main() -> None:
        await store.set("first", value(0))
        _pause.arm(hook)
        txn = asyncio.ensure_future(block())
        for _ in range(int(DEADLINE / 0.005)):
            if beginning.is_set():
                break
            await asyncio.sleep(0.005)
        assert beginning.is_set(), "the transaction never began"
        store.set_sync("sync", value(2))  # on the loop's thread, blocking it
        await txn

    runner = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    try:
        runner.start()
        runner.join(DEADLINE)
        stuck = runner.is_alive()
        if stuck:  # unstick it: closing rolls the transaction back and fails the write
            store.close()
            runner.join(DEADLINE)
        assert not stuck, "set_sync on the loop's thread waited for its own loop's transaction"
        assert stored_sync(store, "sync") == value(2).to_bytes()
        assert stored_sync(store, "inside") == value(1).to_bytes()
    finally:
        _pause.disarm()
        loop.close()
        store.close()
