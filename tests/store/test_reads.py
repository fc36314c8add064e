"""Whole-value reads of a local file on either side of the bound below which they run on the
event loop's thread (zarrdb._tunables.INLINE_READ_MAX)."""

from __future__ import annotations

import asyncio
import os
import threading

from zarr.core.buffer import cpu, default_buffer_prototype

from zarrdb import SQLiteStore, _tunables

BOUND = _tunables.INLINE_READ_MAX


def test_values_either_side_of_the_inline_bound_read_in_turn_come_back_whole(tmp_path):
    sizes = [10, BOUND, BOUND + 1, 3 * BOUND, 3 * BOUND, 100, BOUND + 1, 0]
    values = {f"a/c/{i}": os.urandom(n) for i, n in enumerate(sizes)}
    with SQLiteStore(tmp_path / "x.zarrdb") as store:
        for key, value in values.items():
            store.set_sync(key, cpu.Buffer.from_bytes(value))

        async def read_all() -> list[tuple[str, bytes | None, bool]]:
            out = []
            prototype = default_buffer_prototype()
            for key in [*values, "a/c/missing"]:
                got = await store.get(key, prototype)
                # after each read: whether the next is expected to be large
                out.append((key, None if got is None else got.to_bytes(), store._large_values))
            return out

        seen = asyncio.run(read_all())
    for (key, got, _), size in zip(seen, sizes, strict=False):
        assert got == values[key], (key, size)
    assert seen[-1][1] is None
    # the guess follows the last value found: large after a large one, small after a small one
    assert [large for _, _, large in seen[:-1]] == [n > BOUND for n in sizes]
    assert seen[-1][2] == seen[-2][2]  # a missing key leaves it


def test_a_large_value_is_read_off_the_event_loops_thread(tmp_path):
    value = os.urandom(4 * BOUND)
    with SQLiteStore(tmp_path / "x.zarrdb") as store:
        store.set_sync("a/c/0", cpu.Buffer.from_bytes(value))
        store.set_sync("a/c/1", cpu.Buffer.from_bytes(value[::-1]))
        readers: list[str] = []
        loop_thread: list[int] = []

        async def main() -> list[bytes]:
            loop_thread.append(threading.get_ident())
            prototype = default_buffer_prototype()
            got = []
            for key in ("a/c/0", "a/c/1"):  # the second after the guess says large
                buffer = await store.get(key, prototype)
                assert buffer is not None
                got.append(buffer.to_bytes())
            return got

        original = store._get_in_thread

        def recording(key: str) -> bytes | None:
            readers.append(key)
            assert threading.get_ident() != loop_thread[0]
            return original(key)

        store._get_in_thread = recording  # type: ignore[method-assign]
        got = asyncio.run(main())
    assert got == [value, value[::-1]]
    assert readers == ["a/c/0", "a/c/1"]
