"""Small writes from an event loop in one turn of it go to the writer as one submission (a
burst, see `_tunables.BURST_VALUE_MAX`): what that must keep of the one-write-per-submission
behaviour. Each caller still waits until its own write is committed and gets its own error,
writes keep the order they were made in, and an explicit transaction opened in the same turn
gets none of the writes made before it."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import numpy as np
import pytest
from zarr.core.buffer import cpu

from zarrdb import SQLiteStore, _tunables
from store._lock_holder import LockHolder
from zarrdb.errors import DatabaseLockedError



def value(i: int, size: int = 1024) -> cpu.Buffer:
    return cpu.Buffer.from_bytes(bytes([i % 251]) * size)


async def stored(store: SQLiteStore, key: str) -> bytes | None:
    got = await store.get(key, cpu.buffer_prototype)
    return None if got is None else got.to_bytes()


async def test_a_turn_of_small_writes_is_one_submission(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "burst.zarrdb")
    try:
        await store.set("first", value(0))  # opens the file and its writer
        writer = store._submitter().writer
        n = _tunables.BURST_MAX_BYTES // 1024 // 2  # a burst holds them all
        before = writer.stats()["submissions"]
        for round_ in range(3):
            await asyncio.gather(*(store.set(f"r{round_}/{i}", value(i)) for i in range(n)))
        assert writer.stats()["submissions"] - before == 3
        for round_ in range(3):
            for i in (0, n // 2, n - 1):
                assert await stored(store, f"r{round_}/{i}") == value(i).to_bytes()
        # A turn of more: a burst is queued each time one holds BURST_MAX_BYTES (the writer
        # starts on it while the turn goes on), the rest when the turn ends.
        n = 5 * n + 1
        before = writer.stats()["submissions"]
        await asyncio.gather(*(store.set(f"more/{i}", value(i)) for i in range(n)))
        assert writer.stats()["submissions"] - before == 3
        for i in (0, n // 2, n - 1):
            assert await stored(store, f"more/{i}") == value(i).to_bytes()
    finally:
        store.close()


async def test_large_values_and_other_kinds_of_write_are_queued_on_their_own(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "alone.zarrdb")
    try:
        await store.set("first", value(0))
        writer = store._submitter().writer
        before = writer.stats()["submissions"]
        large = _tunables.BURST_VALUE_MAX + 1
        await asyncio.gather(
            store.set("small/0", value(1)),
            store.set("large", value(2, large)),
            store.set_if_not_exists("absent", value(3)),
            store.set("small/1", value(4)),
        )
        # small/0 (a burst, queued before the large value to keep the order), the large
        # value, set_if_not_exists, and small/1 (the turn's second burst).
        assert writer.stats()["submissions"] - before == 4
        assert await stored(store, "large") == value(2, large).to_bytes()
        assert await stored(store, "absent") == value(3).to_bytes()
    finally:
        store.close()


async def test_writes_in_one_turn_keep_their_order(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "order.zarrdb")
    large = _tunables.BURST_VALUE_MAX * 2
    try:
        await asyncio.gather(
            store.set("a", value(1)),
            store.delete("a"),  # both in the burst: deleted
            store.set("b", value(1)),
            store.set("b", value(2)),  # the later one stays
            store.set("c", value(3, large)),  # on its own, after the burst so far
            store.set("c", value(4)),  # a new burst, after the large value
            store.set("d/x", value(5)),
            store.delete_dir("d"),  # another kind of write: after the burst before it
        )
        assert await stored(store, "a") is None
        assert await stored(store, "b") == value(2).to_bytes()
        assert await stored(store, "c") == value(4).to_bytes()
        assert await stored(store, "d/x") is None
    finally:
        store.close()


async def test_a_transaction_opened_in_the_same_turn_does_not_take_earlier_writes(
    tmp_path: Path,
) -> None:
    """The burst of the turn is queued before a transaction begins: the transaction's
    rollback must not take a write made before it, which its caller is waiting for. (Here the
    block lets the loop turn while it is open, so a burst queued at the turn's end would be
    queued inside the transaction.)"""
    store = SQLiteStore(tmp_path / "txn.zarrdb")
    try:
        await store.set("first", value(0))
        before = asyncio.ensure_future(store.set("before", value(1)))
        await asyncio.sleep(0)  # `before` has joined the turn's burst
        with pytest.raises(RuntimeError, match="undo"):
            with store.transaction():
                await store.set("inside", value(9))
                await asyncio.sleep(0.01)
                raise RuntimeError("undo")
        await before
        assert await stored(store, "before") == value(1).to_bytes()
        assert await stored(store, "inside") is None
    finally:
        store.close()


async def test_each_caller_of_a_failed_burst_gets_an_error_naming_its_own_key(
    tmp_path: Path,
) -> None:
    """Another process holds the write lock longer than the store waits for it: the burst
    fails, nothing of it is stored, and every caller's error names the key it wrote."""
    path = tmp_path / "locked.zarrdb"
    store = SQLiteStore(path, busy_timeout=0.2)
    try:
        await store.set("first", value(0))
        holder = LockHolder(path)
        try:
            results = await asyncio.gather(
                *(store.set(f"k/{i}", value(i)) for i in range(20)), return_exceptions=True
            )
        finally:
            holder.let_go()
        for i, result in enumerate(results):
            assert isinstance(result, DatabaseLockedError), result
            assert f"'k/{i}'" in str(result)
        assert [k async for k in store.list_prefix("k/")] == []
        await store.set("after", value(1))  # the store works on
        assert await stored(store, "after") == value(1).to_bytes()
    finally:
        store.close()


async def test_a_cancelled_caller_does_not_stop_the_others(tmp_path: Path) -> None:
    path = tmp_path / "cancel.zarrdb"
    store = SQLiteStore(path)
    try:
        await store.set("first", value(0))
        holder = LockHolder(path)  # nothing commits until it lets go: a window to cancel in
        tasks = [asyncio.ensure_future(store.set(f"k/{i}", value(i))) for i in range(10)]
        await asyncio.sleep(0.05)  # the burst is queued; the writer waits for the lock
        tasks[3].cancel()
        holder.let_go()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[3], asyncio.CancelledError)
        assert [r for i, r in enumerate(results) if i != 3] == [None] * 9
        for i in range(10):  # queued before the cancel: written all the same
            assert await stored(store, f"k/{i}") == value(i).to_bytes()
    finally:
        store.close()


async def test_a_burst_that_finds_the_queue_full_waits_for_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A burst is queued early once it holds BURST_MAX_BYTES; while another process holds the
    lock, the first fills the queue, and the next ones wait for room in a worker thread, one
    after the other."""
    monkeypatch.setattr(_tunables, "QUEUE_MAX_BYTES", _tunables.BURST_MAX_BYTES)
    path = tmp_path / "room.zarrdb"
    store = SQLiteStore(path)
    size = _tunables.BURST_MAX_BYTES // 4  # four values a burst
    try:
        await store.set("first", value(0))
        holder = LockHolder(path)
        n = 3 * _tunables.BURST_MAX_BYTES // size  # three bursts
        keys = [f"k/{i}" for i in range(n)]
        keys[n // 2] = keys[n - 1] = "same"  # in the second burst and in the third
        writes = asyncio.gather(*(store.set(key, value(i, size)) for i, key in enumerate(keys)))
        await asyncio.sleep(0.2)
        assert not writes.done()
        queued = store._submitter().writer.stats()["queued_bytes"]
        assert queued < 2 * _tunables.BURST_MAX_BYTES  # one burst (values and keys)
        holder.let_go()
        await writes
        for i in (0, n // 2 - 1, n - 2):
            assert await stored(store, f"k/{i}") == value(i, size).to_bytes()
        # The bursts that waited for room were queued in order: the later write stays.
        assert await stored(store, "same") == value(n - 1, size).to_bytes()
    finally:
        store.close()


def test_closing_queues_the_burst_of_its_own_loop(tmp_path: Path) -> None:
    """close() from a coroutine of the loop whose writes are in a burst not queued yet: they
    are written, and their callers are told so."""
    path = tmp_path / "close.zarrdb"

    async def main() -> list[object]:
        store = SQLiteStore(path)
        await store.set("first", value(0))
        tasks = [asyncio.ensure_future(store.set(f"k/{i}", value(i))) for i in range(5)]
        await asyncio.sleep(0)  # the tasks have joined the burst; its turn has not ended
        store.close()
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)

    assert asyncio.run(main()) == [None] * 5
    store = SQLiteStore(path, read_only=True)
    try:
        for i in range(5):
            got = store.get_sync(f"k/{i}", prototype=cpu.buffer_prototype)
            assert got is not None and got.to_bytes() == value(i).to_bytes()
    finally:
        store.close()


def test_the_values_are_the_callers_buffers_until_written(tmp_path: Path) -> None:
    """A burst holds the callers' arrays (no copy) and lets them go once written."""
    store = SQLiteStore(tmp_path / "refs.zarrdb")
    arrays = [np.full(1024, i, dtype="u1") for i in range(50)]
    refs = [weakref.ref(a) for a in arrays]

    async def main() -> None:
        await asyncio.gather(
            *(store.set(f"k/{i}", cpu.Buffer.from_array_like(a)) for i, a in enumerate(arrays))
        )

    try:
        asyncio.run(main())
        arrays.clear()
        gc.collect()
        assert [r for r in refs if r() is not None] == []
    finally:
        store.close()
