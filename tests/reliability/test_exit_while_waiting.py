"""The program ends while a coroutine on an event loop's (daemon) thread waits: for a
transaction level, or for room in the writer's queue.

An `async with store.transaction()` waited for the level it opens, and for its end, in asyncio's
default executor. At the end of the program `threading._shutdown` joins that executor's worker
threads before atexit handlers run: a worker waiting for a level that another block on the same
loop holds open waited for good, since that block could no longer end it (`asyncio.to_thread`
raised "cannot schedule new futures after interpreter shutdown") and the exit hook, which
closes the store, never ran. Such waits now run in daemon threads of their own, not joined at
exit: the exit hook closes the store, the open block's writes are rolled back, the waiting
level is refused, and one file in DELETE mode is left. A write waiting for room at that moment
failed with RuntimeError; it is now written (the store is still open until the exit hook). A
block entered once no thread can start any more, before the exit hook, is refused with
ClosedError (it might wait for a block of its own loop).

Deterministic, with the pause points (test builds only): the program ends once the second
block has asked to open its level, while the first block never ends by itself; the write's
wait for room is handed on only once the exit hook has started.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from zarrdb import _core

from .helpers import child_env, header_journal_mode, run_child, sidecars

pytestmark = pytest.mark.skipif(
    not _core._PAUSE_POINTS, reason="the pause points are in test builds only (ZARRDB_TEST_VFS=1)"
)

_CHILD = r"""
import asyncio, faulthandler, sys, threading
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore, _pause

faulthandler.dump_traceback_later(15, exit=True)  # a hang at exit fails with the stacks
store = SQLiteStore(sys.argv[1])
store.set_sync("a", cpu.Buffer.from_bytes(b"before"))
first_open = threading.Event()
second_asked = threading.Event()  # the second block's wait for its level has been handed on


def hook(name):
    if name == "txn.enter" and first_open.is_set():
        # A few turns of the loop on: whatever the block hands its wait to has it by then.
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.call_soon, loop.call_soon, second_asked.set)


_pause.arm(hook)


async def first():
    async with store.transaction():
        await store.set("b", cpu.Buffer.from_bytes(b"in the block"))
        first_open.set()
        await asyncio.Event().wait()  # the program ends meanwhile


async def second():
    while not first_open.is_set():
        await asyncio.sleep(0.001)
    async with store.transaction():  # waits for the first block
        await store.set("c", cpu.Buffer.from_bytes(b"never"))


async def main():
    await asyncio.gather(first(), second(), return_exceptions=True)


threading.Thread(target=asyncio.run, args=(main(),), daemon=True).start()
if not second_asked.wait(10):
    sys.exit(3)  # the second block never asked for its level: nothing was tested
print("main ends", flush=True)
"""


@pytest.mark.parametrize("run", range(2))
def test_exit_with_an_async_block_waiting_for_another(tmp_path: Path, run: int) -> None:
    path = tmp_path / "waiting.zarrdb"
    proc = run_child(_CHILD, str(path))
    assert "Timeout (" not in proc.stderr, f"a hang at exit:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == "main ends"
    assert sidecars(path) == [], proc.stderr[-3000:]
    assert header_journal_mode(path) == "delete"
    with sqlite3.connect(path) as db:
        keys = {k for (k,) in db.execute("SELECT k FROM zarr")}
    # The block that never ended is rolled back; the other never began.
    assert keys == {"a"}, keys


# A write waiting for room in the queue when the program ends (another process holds the
# file's lock, so the writer cannot commit the large value that fills the queue). Its wait is
# handed on once the exit hook has started: asyncio's executor is stopped by then.
_ROOM_CHILD = r"""
import asyncio, faulthandler, sys, threading
sys.path.insert(0, sys.argv[2])
from _lock_holder import LockHolder
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore, _pause, _tunables

faulthandler.dump_traceback_later(15, exit=True)
_tunables.QUEUE_MAX_BYTES = 96 * 1024
store = SQLiteStore(sys.argv[1])
store.ensure_open()
holder = LockHolder(sys.argv[1])
waiting = threading.Event()  # a write waits for room
exiting = threading.Event()  # the exit hook has started
settled = threading.Event()
outcome = []


def hook(name):
    if name == "backlog.wait" and not waiting.is_set():
        waiting.set()
        exiting.wait(10)
    elif name == "exit":
        exiting.set()
        holder.let_go()  # the writer can commit, and make room
        settled.wait(10)
        print("small:", outcome, flush=True)


_pause.arm(hook)


async def writes():
    big = asyncio.ensure_future(store.set("big", cpu.Buffer.from_bytes(bytes(96 * 1024))))
    await asyncio.sleep(0.05)  # queued; the writer waits for the lock
    try:
        await store.set("small", cpu.Buffer.from_bytes(b"small"))
        outcome.append("ok")
    except Exception as exc:
        outcome.append(repr(exc))
    settled.set()
    await big


threading.Thread(target=asyncio.run, args=(writes(),), daemon=True).start()
if not waiting.wait(10):
    sys.exit(3)  # no write waited for room: nothing was tested
"""


def test_exit_with_a_write_waiting_for_room(tmp_path: Path) -> None:
    path = tmp_path / "room.zarrdb"
    store_tests = Path(__file__).resolve().parent.parent / "store"
    proc = subprocess.run(
        [sys.executable, "-c", _ROOM_CHILD, str(path), str(store_tests)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert "Timeout (" not in proc.stderr, f"a hang at exit:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Written: the writer was open all along (before, RuntimeError: "cannot schedule new
    # futures after interpreter shutdown").
    assert proc.stdout.strip() == "small: ['ok']", proc.stdout
    assert sidecars(path) == [], proc.stderr[-3000:]
    assert header_journal_mode(path) == "delete"
    with sqlite3.connect(path) as db:
        keys = {k for (k,) in db.execute("SELECT k FROM zarr")}
    assert {"big", "small"} <= keys, keys


# A block entered once the interpreter has begun to end (from threading's own exit handlers on,
# no thread starts, daemon or not) and before the exit hook has closed the store: refused.
_LATE_CHILD = r"""
import asyncio, faulthandler, sys, threading
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore

faulthandler.dump_traceback_later(15, exit=True)
store = SQLiteStore(sys.argv[1])
store.set_sync("a", cpu.Buffer.from_bytes(b"before"))
go = threading.Event()
done = threading.Event()
outcome = []


async def late():
    while not go.is_set():
        await asyncio.sleep(0.001)
    try:
        async with store.transaction():
            await store.set("b", cpu.Buffer.from_bytes(b"late"))
        outcome.append("committed")
    except Exception as exc:
        outcome.append(type(exc).__name__)
    done.set()


def at_shutdown():
    go.set()
    done.wait(10)
    print("late:", outcome, flush=True)


threading.Thread(target=asyncio.run, args=(late(),), daemon=True).start()
threading._register_atexit(at_shutdown)  # runs as the interpreter begins to end
"""


def test_an_async_block_entered_as_the_interpreter_ends_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "late.zarrdb"
    proc = run_child(_LATE_CHILD, str(path))
    assert "Timeout (" not in proc.stderr, f"a hang at exit:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Before, RuntimeError: "can't create new thread at interpreter shutdown". CPython 3.11
    # still starts threads there: the block waits in one as at any other time, and commits
    # before the exit hook closes the store.
    ending_refuses_threads = sys.version_info >= (3, 12)
    expected = "ClosedError" if ending_refuses_threads else "committed"
    assert proc.stdout.strip() == f"late: ['{expected}']", proc.stdout
    assert sidecars(path) == [], proc.stderr[-3000:]
    assert header_journal_mode(path) == "delete"
    with sqlite3.connect(path) as db:
        keys = {k for (k,) in db.execute("SELECT k FROM zarr")}
    assert keys == ({"a"} if ending_refuses_threads else {"a", "b"}), keys
