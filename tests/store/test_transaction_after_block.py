"""The code of a level that its block does not wait for (a task or thread started in it, with its
context) around and after the block's end: the rule of docs/guide/transactions.md.

A write made in a level is written inside it, and committed or rolled back with it, or refused:
once the block has ended (or is ending), a write of its code raises NestingError and nothing
of it is written, neither in the level around nor on its own. Without the rule, such a write
was kept after its level had been rolled back (written in the level around, or committed on
its own after the transaction).

Each case is made deterministic with events and the write path's pause points (test builds
only); every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import pytest

from store.helpers import buf, committed, in_context
from zarrdb import SQLiteStore, _core, _pause, errors

DEADLINE = 20  # seconds


class Boom(Exception):
    pass


def wait(event: threading.Event) -> None:
    assert event.wait(DEADLINE), "a step did not come within the deadline"


@pytest.mark.parametrize("ends", ["commit", "rollback"])
def test_a_write_after_its_level_ended_is_refused(tmp_path: Path, ends: str) -> None:
    """A thread started in a nested level writes after that level's block has ended: refused,
    not written in the level around (where it outlived a rollback of its own level)."""
    path = tmp_path / "after-level.zarrdb"
    store = SQLiteStore(path)
    outcome: dict[str, object] = {}
    ended = threading.Event()

    def late() -> None:
        wait(ended)
        store.set_sync("late", buf(b"l"))

    try:
        with store.transaction():
            store.set_sync("outer", buf(b"o"))
            with contextlib.suppress(Boom), store.transaction():
                store.set_sync("level", buf(b"n"))
                thread = in_context(late, outcome, "late")
                if ends == "rollback":
                    raise Boom
            ended.set()
            thread.join(DEADLINE)
            assert not thread.is_alive()
            store.set_sync("outer/after", buf(b"a"))  # the block itself goes on
    finally:
        ended.set()
        store.close()
    assert isinstance(outcome["late"], errors.NestingError), outcome
    kept = {"level"} if ends == "commit" else set()
    assert committed(path) == {"outer", "outer/after", *kept}


async def test_a_task_the_block_does_not_wait_for_cannot_write_after_it(tmp_path: Path) -> None:
    """`async with store.transaction(): asyncio.create_task(...)` and the block ends first: the
    task's write, and a level it enters, raise NestingError; nothing of them is written (the
    write was committed on its own, outside the transaction it was made in)."""
    path = tmp_path / "after-block.zarrdb"
    store = SQLiteStore(path)
    ended = asyncio.Event()
    outcome: dict[str, object] = {}

    async def late() -> None:
        await ended.wait()
        for name, write in (("set", store.set), ("set_sync", None)):
            try:
                if write is not None:
                    await write("late", buf(b"l"))
                else:
                    store.set_sync("late-sync", buf(b"s"))
                outcome[name] = "done"
            except BaseException as exc:  # noqa: BLE001 - checked below
                outcome[name] = exc
        try:
            async with store.transaction():
                await store.set("late-level", buf(b"t"))
            outcome["level"] = "done"
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome["level"] = exc

    try:
        async with asyncio.timeout(DEADLINE):
            async with store.transaction():
                await store.set("block", buf(b"b"))
                task = asyncio.create_task(late())
            ended.set()
            await task
            await store.set("after", buf(b"a"))  # the block's own code, after it: no level
    finally:
        store.close()
    for name in ("set", "set_sync", "level"):
        assert isinstance(outcome[name], errors.NestingError), outcome
    assert committed(path) == {"block", "after"}


@pytest.mark.skipif(
    not _core._PAUSE_POINTS, reason="the pause points are in test builds only (ZARRDB_TEST_VFS=1)"
)
@pytest.mark.parametrize("ends", ["commit", "rollback"])
@pytest.mark.parametrize("level", ["outermost", "nested"])
def test_a_write_while_its_level_ends_is_refused(tmp_path: Path, level: str, ends: str) -> None:
    """The block has ended and its level's end holds the connection (held at the point
    `txn.end`) when a thread started in the level writes: refused, never acknowledged, and not
    written after the level (on its own, or in the level around) whatever the level's outcome."""
    path = tmp_path / f"while-ending-{level}-{ends}.zarrdb"
    store = SQLiteStore(path)
    store.ensure_open()
    outcome: dict[str, object] = {}
    at_end, tried = threading.Event(), threading.Event()
    writer: list[threading.Thread] = []
    held = [False]

    def hook(name: str) -> None:
        if name == "txn.end" and not held[0] and writer:
            held[0] = True  # the level's end, the first one once the thread runs
            at_end.set()
            wait(tried)
        elif name == "submit.queued" and writer and threading.current_thread() is writer[0]:
            tried.set()  # queued: the end may go on (the write, if acknowledged, waits for it)

    def late() -> None:
        wait(at_end)
        try:
            store.set_sync("late", buf(b"l"))
        finally:
            tried.set()

    def block() -> None:
        with contextlib.suppress(Boom), store.transaction():
            store.set_sync("level", buf(b"n"))
            writer.append(in_context(late, outcome, "late"))
            if ends == "rollback":
                raise Boom

    _pause.arm(hook)
    try:
        if level == "outermost":
            block()
        else:
            with store.transaction():
                store.set_sync("outer", buf(b"o"))
                block()
        writer[0].join(DEADLINE)
        assert not writer[0].is_alive()
    finally:
        _pause.disarm()
        at_end.set()
        tried.set()
        store.close()
    assert held[0]
    assert isinstance(outcome["late"], errors.NestingError), outcome
    expected = {"outer"} if level == "nested" else set()
    if ends == "commit":
        expected.add("level")
    assert committed(path) == expected


@pytest.mark.skipif(
    not _core._PAUSE_POINTS, reason="the pause points are in test builds only (ZARRDB_TEST_VFS=1)"
)
@pytest.mark.parametrize("ends", ["commit", "rollback"])
def test_a_level_ending_as_the_level_around_ends_first_raises(tmp_path: Path, ends: str) -> None:
    """A nested level's end has begun (held at the point `txn.ending`, before it has the
    connection) when the level around it ends, and rolls it back with everything: the nested
    level's end, going on after, raises NestingError (it returned as if committed, though
    nothing of it was written), and the store writes again once both have ended."""
    path = tmp_path / f"ending-{ends}.zarrdb"
    store = SQLiteStore(path)
    store.ensure_open()
    outcome: dict[str, object] = {}
    inside, go, ending, outer_over = (threading.Event() for _ in range(4))
    nested: list[threading.Thread] = []

    def hook(name: str) -> None:
        if name == "txn.ending" and nested and threading.current_thread() is nested[0]:
            ending.set()
            wait(outer_over)

    def level() -> None:
        with store.transaction():
            store.set_sync("level", buf(b"n"))
            inside.set()
            wait(go)
            if ends == "rollback":
                raise Boom

    _pause.arm(hook)
    try:
        with pytest.raises(errors.NestingError), store.transaction():
            store.set_sync("outer", buf(b"o"))
            nested.append(in_context(level, outcome, "level"))
            wait(inside)
            go.set()
            wait(ending)
        outer_over.set()
        nested[0].join(DEADLINE)
        assert not nested[0].is_alive()
        store.set_sync("after", buf(b"a"))
    finally:
        _pause.disarm()
        for event in (go, outer_over):
            event.set()
        store.close()
    assert isinstance(outcome["level"], errors.NestingError), outcome
    assert committed(path) == {"after"}
