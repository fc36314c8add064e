"""Nested transaction levels: the rule of docs/guide/transactions.md, case by case (issue 36,
defects 4 and 5).

SQLite's savepoints are one stack per connection, and every write through the store object is
part of its one history. The rule: levels of one transaction nest one inside the other, one
open at each depth; a level entered beside an open one (a sibling task or thread), or a level
that ends while a level inside it is still open, raises NestingError, and in the second case
that level is rolled back with what is inside it. While a level is open, a write from code in
no level is part of it, and one from the code of a level around it raises NestingError.

Each case is made deterministic with events between tasks or threads; every wait has a
deadline, so a hang fails in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path

import pytest

from store.helpers import buf, committed, in_context
from zarrdb import SQLiteStore, errors

DEADLINE = 20  # seconds


class Boom(Exception):
    pass


def wait(event: threading.Event) -> None:
    assert event.wait(DEADLINE), "a step did not come within the deadline"


# --- defect 4: sibling levels -------------------------------------------------------------------


async def test_a_sibling_level_beside_an_open_one_is_refused(tmp_path: Path) -> None:
    """Two tasks inside one block, each in its own nested transaction(): the second is refused
    (NestingError) instead of sharing SQLite's savepoint stack with the first, where the first
    one's rollback undid the second one's write and kept its own."""
    path = tmp_path / "siblings.zarrdb"
    store = SQLiteStore(path)
    a_inside, b_tried = asyncio.Event(), asyncio.Event()
    outcome: dict[str, object] = {}

    async def a() -> None:
        async with store.transaction():
            await store.set("a", buf(b"a"))
            a_inside.set()
            await b_tried.wait()
            raise Boom

    async def b() -> None:
        await a_inside.wait()
        try:
            async with store.transaction():
                await store.set("b", buf(b"b"))
            outcome["b"] = "done"
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome["b"] = exc
        finally:
            b_tried.set()

    try:
        async with asyncio.timeout(DEADLINE):
            async with store.transaction():
                await store.set("outer", buf(b"o"))
                results = await asyncio.gather(a(), b(), return_exceptions=True)
    finally:
        store.close()
    assert isinstance(results[0], Boom)
    assert isinstance(outcome["b"], errors.NestingError), outcome
    assert committed(path) == {"outer"}


def test_a_sibling_level_from_a_thread_is_refused_and_the_open_one_is_intact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sibling-threads.zarrdb"
    store = SQLiteStore(path)
    outcome: dict[str, object] = {}
    inside, tried = threading.Event(), threading.Event()

    def first() -> None:
        with store.transaction():
            store.set_sync("first", buf(b"1"))
            inside.set()
            wait(tried)

    def second() -> None:
        wait(inside)
        try:
            with store.transaction():
                store.set_sync("second", buf(b"2"))
        finally:
            tried.set()

    try:
        with store.transaction():
            threads = [in_context(first, outcome, "first"), in_context(second, outcome, "second")]
            for t in threads:
                t.join(DEADLINE)
            assert not any(t.is_alive() for t in threads)
    finally:
        store.close()
    assert outcome["first"] == "done"
    assert isinstance(outcome["second"], errors.NestingError), outcome
    assert committed(path) == {"first"}


async def test_sibling_levels_one_after_the_other_are_independent(tmp_path: Path) -> None:
    path = tmp_path / "sequential.zarrdb"
    store = SQLiteStore(path)

    async def level(name: str, fail: bool) -> None:
        async with store.transaction():
            await store.set(name, buf(b"x"))
            if fail:
                raise Boom

    try:
        async with asyncio.timeout(DEADLINE):
            async with store.transaction():
                for i in range(4):
                    task = asyncio.create_task(level(f"k{i}", fail=i % 2 == 1))
                    with pytest.raises(Boom) if i % 2 else contextlib.nullcontext():
                        await task
    finally:
        store.close()
    assert committed(path) == {"k0", "k2"}


def test_three_levels_each_rolls_back_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "three.zarrdb"
    store = SQLiteStore(path)
    try:
        with store.transaction():
            store.set_sync("l1", buf(b""))
            with store.transaction():
                store.set_sync("l2", buf(b""))
                with pytest.raises(Boom), store.transaction():
                    store.set_sync("l3", buf(b""))
                    raise Boom
                with store.transaction():
                    store.set_sync("l3-again", buf(b""))
            with pytest.raises(Boom), store.transaction():
                store.set_sync("l2-failed", buf(b""))
                with store.transaction():
                    store.set_sync("l3-under-failed", buf(b""))
                raise Boom
    finally:
        store.close()
    assert committed(path) == {"l1", "l2", "l3-again"}


def test_a_write_from_the_level_around_an_open_level_is_refused(tmp_path: Path) -> None:
    """While a level entered by a thread started in the block is open, a write from the block's
    own code would be written inside that level's savepoint and undone with its rollback, though
    its caller is outside it: it raises NestingError and is not written; once the inner level
    has ended, the block writes again."""
    path = tmp_path / "around.zarrdb"
    store = SQLiteStore(path)
    outcome: dict[str, object] = {}
    inside, tried = threading.Event(), threading.Event()

    def level() -> None:
        with store.transaction():
            store.set_sync("level", buf(b"l"))
            inside.set()
            wait(tried)
            raise Boom

    try:
        with store.transaction():
            thread = in_context(level, outcome, "level")
            wait(inside)
            with pytest.raises(errors.NestingError):
                store.set_sync("outer/while-the-level-is-open", buf(b"o"))
            tried.set()
            thread.join(DEADLINE)
            assert not thread.is_alive()
            store.set_sync("outer/after", buf(b"a"))
    finally:
        store.close()
    assert isinstance(outcome["level"], Boom)
    assert committed(path) == {"outer/after"}


def test_a_write_from_code_in_no_level_is_part_of_the_open_level(tmp_path: Path) -> None:
    """The store object is the session: a write from code that is in no level (a thread not
    started with the block's context, as zarr's own event-loop thread and codec workers) is part
    of the innermost open level, and goes with its rollback."""
    path = tmp_path / "outside.zarrdb"
    store = SQLiteStore(path)
    outcome: dict[str, object] = {}

    def plain() -> None:
        store.set_sync("plain/while-the-level-is-open", buf(b"p"))
        outcome["plain"] = "done"

    try:
        with store.transaction():
            store.set_sync("outer", buf(b"o"))
            with pytest.raises(Boom), store.transaction():
                thread = threading.Thread(target=plain, daemon=True)  # a context of its own
                thread.start()
                thread.join(DEADLINE)
                assert outcome == {"plain": "done"}
                raise Boom
    finally:
        store.close()
    assert committed(path) == {"outer"}


def test_a_transaction_from_outside_waits_for_the_whole_transaction(tmp_path: Path) -> None:
    path = tmp_path / "outsider.zarrdb"
    store = SQLiteStore(path)
    outcome: dict[str, object] = {}
    started = threading.Event()

    def outsider() -> None:  # a thread of its own context: not inside the block
        started.set()
        with store.transaction():
            store.set_sync("outsider", buf(b"x"))
        outcome["committed while the block was open"] = "block" not in outcome

    try:
        with store.transaction():
            with store.transaction():
                thread = threading.Thread(target=outsider, daemon=True)
                thread.start()
                wait(started)
                store.set_sync("nested", buf(b"n"))
            store.set_sync("outer", buf(b"o"))
            outcome["block"] = "ended"
        thread.join(DEADLINE)
        assert not thread.is_alive()
    finally:
        store.close()
    assert outcome["committed while the block was open"] is False
    assert committed(path) == {"nested", "outer", "outsider"}


# --- defect 5: a level ending while one inside it is open ---------------------------------------


def test_the_outer_block_never_commits_while_a_nested_level_is_open(tmp_path: Path) -> None:
    """The outer block ends while a nested level (a thread started with its context) is still
    open: the transaction is rolled back and the block raises NestingError; a later write is
    committed on its own; the nested level's end raises NestingError. (The outer block used to
    release only the nested savepoint and 'commit'; the later write joined the still-open
    transaction, and the nested level's failure lost all of them.)"""
    path = tmp_path / "outer-first.zarrdb"
    store = SQLiteStore(path)
    outcome: dict[str, object] = {}
    inside, outer_over = threading.Event(), threading.Event()

    def nested() -> None:
        with store.transaction():
            store.set_sync("nested", buf(b"n"))
            inside.set()
            wait(outer_over)
            raise Boom

    try:
        thread = None
        try:
            with store.transaction():
                store.set_sync("outer", buf(b"o"))
                thread = in_context(nested, outcome, "nested")
                wait(inside)
        except errors.NestingError as exc:
            outcome["outer"] = exc
        store.set_sync("later", buf(b"l"))
        outer_over.set()
        assert thread is not None
        thread.join(DEADLINE)
        assert not thread.is_alive()
    finally:
        outer_over.set()
        store.close()
    assert isinstance(outcome.get("outer"), errors.NestingError), outcome
    assert isinstance(outcome["nested"], errors.NestingError), outcome
    assert committed(path) == {"later"}


def test_a_middle_level_ending_first_is_rolled_back_and_the_outer_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "middle-first.zarrdb"
    store = SQLiteStore(path)
    outcome: dict[str, object] = {}
    inside, middle_over = threading.Event(), threading.Event()

    def deepest() -> None:
        with store.transaction():
            store.set_sync("deepest", buf(b"d"))
            inside.set()
            wait(middle_over)

    try:
        with store.transaction():
            store.set_sync("outer", buf(b"o"))
            with pytest.raises(errors.NestingError):
                with store.transaction():
                    store.set_sync("middle", buf(b"m"))
                    thread = in_context(deepest, outcome, "deepest")
                    wait(inside)
            middle_over.set()
            thread.join(DEADLINE)
            assert not thread.is_alive()
            store.set_sync("outer/after", buf(b"a"))
    finally:
        middle_over.set()
        store.close()
    assert isinstance(outcome["deepest"], errors.NestingError), outcome
    assert committed(path) == {"outer", "outer/after"}


def test_a_write_from_a_level_rolled_back_by_the_one_around_it_is_refused(
    tmp_path: Path,
) -> None:
    """After the level around it ended and rolled it back, the code of a nested level must not
    go on writing as if nothing happened: each write raises NestingError until its block
    ends."""
    path = tmp_path / "orphan.zarrdb"
    store = SQLiteStore(path)
    outcome: dict[str, object] = {}
    inside, outer_over = threading.Event(), threading.Event()

    def nested() -> None:
        with store.transaction():
            inside.set()
            wait(outer_over)
            try:
                store.set_sync("orphan", buf(b"x"))
                outcome["write"] = "done"
            except errors.NestingError as exc:
                outcome["write"] = exc

    try:
        with pytest.raises(errors.NestingError), store.transaction():
            thread = in_context(nested, outcome, "nested")
            wait(inside)
        outer_over.set()
        thread.join(DEADLINE)
        assert not thread.is_alive()
    finally:
        outer_over.set()
        store.close()
    assert isinstance(outcome["write"], errors.NestingError), outcome
    assert isinstance(outcome["nested"], errors.NestingError), outcome
    assert committed(path) == set()



def test_a_nested_level_is_undone_while_the_outer_end_waits_for_the_connection(
    tmp_path: Path,
) -> None:
    """The outermost level's end marks the transaction over as soon as it asks for the
    connection, then waits for it (here: another thread holds it). A write of the still-open
    nested level's code during that wait must raise NestingError, not be committed on its own
    after the rollback."""
    path = tmp_path / "undone-while-waiting.zarrdb"
    store = SQLiteStore(path)
    writer = store._file().submitter.writer
    outcome: dict[str, object] = {}
    inside, leave, go, holding, let_go, wrote = (threading.Event() for _ in range(6))

    def nested() -> None:
        with store.transaction():
            store.set_sync("inner/1", buf(b"1"))
            inside.set()
            wait(go)
            try:
                store.set_sync("inner/2", buf(b"2"))
                outcome["inner/2"] = "done"
            except errors.NestingError as exc:
                outcome["inner/2"] = exc
            finally:
                wrote.set()

    def outer() -> None:
        with store.transaction():
            store.set_sync("outer", buf(b"o"))
            in_context(nested, outcome, "nested")
            wait(leave)

    def hold_the_connection() -> None:
        def hold(db: object) -> None:
            holding.set()
            wait(let_go)

        writer.call_holding(hold)

    threads = [threading.Thread(target=attempt, args=(outer, outcome, "outer"), daemon=True)]
    try:
        threads[0].start()
        wait(inside)
        threads.append(threading.Thread(target=hold_the_connection, daemon=True))
        threads[1].start()
        wait(holding)
        leave.set()
        deadline = time.monotonic() + DEADLINE
        while writer.stats()["hold_waiters"] != 1:  # the outer end waits for the connection
            assert time.monotonic() < deadline
            time.sleep(0.005)
        go.set()
        assert wrote.wait(DEADLINE / 2), "the nested level's write waited for the commit"
    finally:
        for event in (leave, go, let_go):
            event.set()
        for t in threads:
            t.join(DEADLINE)
        store.close()
    assert isinstance(outcome["inner/2"], errors.NestingError), outcome
    assert isinstance(outcome["outer"], errors.NestingError), outcome
    assert committed(path) == set()


def attempt(fn, outcome: dict[str, object], name: str) -> None:
    try:
        fn()
        outcome[name] = "done"
    except BaseException as exc:  # noqa: BLE001 - checked by the caller
        outcome[name] = exc


async def test_an_async_outer_block_ending_before_its_nested_task_rolls_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "async-outer-first.zarrdb"
    store = SQLiteStore(path)
    inside, outer_over = asyncio.Event(), asyncio.Event()
    outcome: dict[str, object] = {}

    async def nested() -> None:
        try:
            async with store.transaction():
                await store.set("nested", buf(b"n"))
                inside.set()
                await outer_over.wait()
            outcome["nested"] = "done"
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome["nested"] = exc

    try:
        async with asyncio.timeout(DEADLINE):
            with pytest.raises(errors.NestingError):
                async with store.transaction():
                    await store.set("outer", buf(b"o"))
                    task = asyncio.create_task(nested())
                    await inside.wait()
            await store.set("later", buf(b"l"))
            outer_over.set()
            await task
    finally:
        store.close()
    assert isinstance(outcome["nested"], errors.NestingError), outcome
    assert committed(path) == {"later"}
