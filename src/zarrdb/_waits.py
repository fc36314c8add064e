"""Blocking waits of coroutines, each in a daemon thread of its own: a transaction level waiting
for another one to end, or for its end's commit, and a burst waiting for room in the queue.

Not asyncio's default executor: at the end of the program `threading._shutdown` joins its
worker threads (concurrent.futures' exit handler) before the atexit handlers run, and from then
on refuses new work. A worker waiting for a level that only a coroutine on another (daemon)
thread's event loop can end would hang the exit for good, since that coroutine's own
`asyncio.to_thread` to end it raises "cannot schedule new futures after interpreter shutdown".
A daemon thread is not joined: the exit hook (zarrdb._open_file) closes the store, which wakes
every wait on its writer (ClosedError for a level, the writer's stop for room), and nothing of
an open block is committed. A thread per wait also means that waits never take the default
executor's few workers from the reads a transaction's own block awaits.
Once the main thread has ended (CPython 3.12 on) no thread starts any more, daemon or not: a
wait then runs on the loop's own thread, or is refused where it could wait for that loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def in_daemon_thread(
    fn: Callable[..., T],
    *args: Any,
    lost: Callable[[], None] | None = None,
    refused: Callable[[], BaseException] | None = None,
) -> asyncio.Future[T]:
    """A future of the running loop settled with `fn(*args)`, called in a new daemon thread.
    `lost` is called in that thread if the loop is closed before it can be told (what the call
    opened then has no one to end it). If no thread can start (the interpreter is ending), the
    future fails with `refused()` if given, else `fn` runs here, on the loop's thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context

    def run() -> None:
        result: Any = None
        exc: BaseException | None = None
        try:
            result = context.run(fn, *args)
        except BaseException as error:  # noqa: BLE001 - the awaiting coroutine gets it
            exc = error
        try:
            loop.call_soon_threadsafe(_settle, future, result, exc)
        except RuntimeError:  # the loop is closed
            if lost is not None:
                lost()

    try:
        threading.Thread(target=run, name="zarrdb-wait", daemon=True).start()
    except RuntimeError:  # "can't create new thread at interpreter shutdown"
        if refused is not None:
            future.set_exception(refused())
        else:
            try:
                future.set_result(fn(*args))
            except Exception as error:  # noqa: BLE001 - the awaiting coroutine gets it
                future.set_exception(error)
    return future
