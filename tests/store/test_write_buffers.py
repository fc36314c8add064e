"""The callers' buffers the store keeps while writing (issue 24, defects 5 and 6).

The writer takes each value's buffer without a copy, so the values it holds on to are the
memory a write costs. They are tracked here through weak references to the numpy arrays the
values are views of: an array still alive is a buffer the store pins.

- The queue's byte bound holds inside a transaction: writes that joined it are let go once
  written, not kept until the transaction ends (or a multiple of 4096 writes).
- A write that waited for room in the queue leaves nothing behind once it is done.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import numpy as np
import pytest
from zarr.core.buffer import cpu

from zarrdb import SQLiteStore, _tunables

BOUND = 1024 * 1024  # the queue's byte bound in these tests
VALUE = 64 * 1024


class Tracked:
    """Values whose arrays are watched: `alive_bytes()` is what the store still holds."""

    def __init__(self) -> None:
        self.refs: list[weakref.ref] = []

    def value(self, i: int, size: int = VALUE) -> cpu.Buffer:
        array = np.full(size, i % 251, dtype="u1")
        self.refs.append(weakref.ref(array))
        return cpu.Buffer.from_array_like(array)

    def alive_bytes(self) -> int:
        return sum(r().nbytes for r in self.refs if r() is not None)


@pytest.fixture
def small_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores opened from now on bound their queue at BOUND bytes."""
    monkeypatch.setattr(_tunables, "QUEUE_MAX_BYTES", BOUND)


def test_writes_joined_to_a_transaction_are_let_go_once_written(
    small_queue: None, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "bound.zarrdb")
    tracked = Tracked()
    peak = 0
    try:
        with store.transaction():
            for i in range(200):  # 12.5 MiB through a 1 MiB bound
                store.set_sync(f"k/{i}", tracked.value(i))
                peak = max(peak, tracked.alive_bytes())
        assert tracked.alive_bytes() == 0
    finally:
        store.close()
    # What was queued (at most the bound) and what was written since the last write.
    assert peak <= 2 * BOUND + VALUE, f"{peak / 2**20:.1f} MiB of values pinned at once"


async def test_async_writes_joined_to_a_transaction_are_let_go_once_written(
    small_queue: None, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "bound-async.zarrdb")
    tracked = Tracked()
    peak = 0
    try:
        async with store.transaction():
            for i in range(200):
                await store.set(f"k/{i}", tracked.value(i))
                peak = max(peak, tracked.alive_bytes())
        gc.collect()
        assert tracked.alive_bytes() == 0
    finally:
        store.close()
    assert peak <= 2 * BOUND + VALUE, f"{peak / 2**20:.1f} MiB of values pinned at once"


async def test_writes_that_waited_for_room_leave_nothing_behind(
    small_queue: None, tmp_path: Path
) -> None:
    """Each value is half the bound, so most writes wait for room in a worker thread. A task
    keeps the event loop (and the GIL) busy meanwhile, so the writer often finishes a write
    and the loop drains its port before the worker thread gets the GIL back from queueing it:
    the window in which a write registered after queueing was never let go."""
    store = SQLiteStore(tmp_path / "room.zarrdb", durability="off")
    tracked = Tracked()
    stop = False

    async def spin() -> None:
        while not stop:
            sum(range(20_000))  # holds the GIL for a while, then lets the loop turn
            await asyncio.sleep(0)

    spinner = asyncio.create_task(spin())
    try:
        for round_ in range(10):
            await asyncio.gather(
                *(
                    store.set(f"r{round_}/{i}", tracked.value(i, BOUND // 2))
                    for i in range(40)
                )
            )
        stop = True
        await spinner
        await asyncio.sleep(0.05)  # the loop drains what finished last
        gc.collect()
        alive = tracked.alive_bytes()
    finally:
        stop = True
        store.close()
    assert alive == 0, f"{alive // (BOUND // 2)} finished writes still hold their buffers"
