"""Completions and bursts of one event loop's writes on a store's writer (_submitting.py).

An event loop watches its writer Port (the engine's: a file descriptor, or a thread waiting on
it where the loop cannot watch one) and settles the futures of its writes as the writer reports
them. Small writes of one turn of the loop go to the writer together, as a burst
(_tunables.BURST_VALUE_MAX), each caller with its own future and its own outcome (a value the
writer cannot take fails only its caller). A submission that finds the queue full waits in
the loop's backlog, in order: a task waits for room in a worker thread and queues the backlog
on the loop's thread as room is made; every later write of that loop is queued after it, and a
synchronous caller on the loop's thread (set_sync, close(), a transaction's begin) queues it
first, waiting for room there, and flushes what the loop queued (the loop's own flush waits
for its next turn, which cannot come while that caller waits).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import weakref
from typing import Any

from zarrdb import _pause, errors
from zarrdb._core import Port, Writer
from zarrdb._log import WriterEvents
from zarrdb._waits import in_daemon_thread

# (kind, key, value): "set" | "set_if_absent" | "delete" | "delete_prefix"
Op = tuple[str, str, Any]


class LoopWatch:
    """One event loop's watch on its writer Port (the engine's): settles the futures of the
    loop's writes as the port reports them."""

    def __init__(
        self, writer: Writer, loop: asyncio.AbstractEventLoop, events: WriterEvents
    ) -> None:
        self.port = Port(writer)
        self.writer = writer
        self.events = events
        self.loop = weakref.ref(loop)
        self.hint_due = False
        self.burst: Burst | None = None  # this turn's small writes, not queued yet
        # Submissions waiting for room in the queue, in order, each with its caller's future
        # (a burst's: a list, one per write), and the task queueing them as room is made.
        self.backlog: collections.deque[tuple[Any, Any]] = collections.deque()
        self.backlog_task: asyncio.Task[None] | None = None
        self.waker: threading.Thread | None = None
        self.drained = threading.Event()
        self.stopped = False
        watched = False
        if self.port.has_fd:
            try:
                loop.add_reader(self.port.fileno(), self.settle)
                watched = True
            except NotImplementedError:  # e.g. the proactor loop on Windows
                pass
        if not watched:
            # No descriptor to watch: a thread waits on the writer (GIL released) and wakes
            # the loop with call_soon_threadsafe.
            self.waker = threading.Thread(
                target=self._wake, name="zarrdb-writer-waker", daemon=True
            )
            self.waker.start()

    def hint(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tell the writer, at the start of the loop's next turn, that this turn's writes are
        all queued (once per turn, however many writes it queued)."""
        if not self.hint_due:
            self.hint_due = True
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.hint_due = False
        if self.burst is not None:
            self.queue_burst()
        self.writer.flush()

    def queue_burst(self) -> None:
        """Queue this turn's burst as one submission (on the loop's thread), after the
        submissions waiting for room."""
        burst, self.burst = self.burst, None
        if burst is None:
            return
        _pause.point("burst.queue")
        entry = self._prepare(burst)
        if entry is not None:
            self._queue(*entry)

    def queue_alone(self, sub: Any, future: asyncio.Future[Any]) -> None:
        """Queue a write that is a submission of its own, after this turn's burst so far and
        the submissions waiting for room (on the loop's thread)."""
        if self.burst is not None:
            self.queue_burst()
        self._queue(sub, future)

    def queue_all(self) -> None:
        """Queue this turn's burst and everything waiting for room, waiting here for room,
        and tell the writer that these are all (on the loop's thread, for a synchronous
        caller that must come after them). The loop cannot turn until that caller returns, so
        its own flush would come too late: a burst queued without one is not written (a small
        one does not even wake the writer), and the room the caller waits for never made."""
        self.queue_burst()
        if self.backlog:
            self._queue_backlog(block=True)
        self.writer.flush()

    def _prepare(self, burst: Burst) -> tuple[Any, list[asyncio.Future[Any]]] | None:
        """The burst's submission, not queued yet, and its callers' futures. A caller whose
        value cannot be taken (a buffer that is not contiguous) gets its own error at once and
        is left out: the others' writes go on."""
        bad: list[tuple[int, Exception]] = []
        try:
            sub = self.writer.prepare(burst.ops, port=self.port, bad=bad)
        except BaseException as exc:  # e.g. ClosedError: every waiter gets it
            settle_each(burst.futures, exc)
            if isinstance(exc, Exception):
                return None
            raise  # Ctrl-C, SystemExit: the loop's to stop
        futures = burst.futures
        if bad:
            for index, error in bad:
                resolve(futures[index], error)
            left_out = {index for index, _ in bad}
            futures = [f for index, f in enumerate(futures) if index not in left_out]
        return None if sub is None else (sub, futures)

    def _queue(self, sub: Any, future: Any) -> None:
        """Queue a submission at once if nothing waits for room before it and there is room
        now; else it waits its turn in the backlog, and a task queues the backlog as room is
        made (never out of order)."""
        if not self.backlog:
            try:
                if self.writer.enqueue(sub, block=False):
                    attach(sub, future)
                    return
            except BaseException as exc:
                settle_each(future if type(future) is list else [future], exc)
                if isinstance(exc, Exception):
                    return
                raise
        _pause.point("burst.backlog")
        self.backlog.append((sub, future))
        task = self.backlog_task
        if task is None or task.done():
            loop = self.loop()
            if loop is not None:
                self.backlog_task = loop.create_task(self._queue_backlog_as_room_is_made())

    def _queue_backlog(self, block: bool) -> bool:
        """Queue the backlog in order, as far as there is room (with `block`: all of it,
        waiting for room here); True if it queued something. A failure to queue (the writer
        closed) fails every caller still waiting."""
        backlog = self.backlog
        queued = False
        while backlog:
            sub, future = backlog[0]
            try:
                queued_now = self.writer.enqueue(sub, block=False)
                if not queued_now and block:
                    # The room is made by writing what this loop queued before, which waits
                    # for the loop's flush: the loop is the one waiting here, so say it now.
                    self.writer.flush()
                    queued_now = self.writer.enqueue(sub, block=True)
                if not queued_now:
                    break
            except errors.NestingError as exc:  # its own level's affair: the others go on
                backlog.popleft()
                settle_each(future if type(future) is list else [future], exc)
                continue
            except BaseException as exc:
                self._fail_backlog(exc)
                if isinstance(exc, Exception):
                    break
                raise
            backlog.popleft()
            attach(sub, future)
            queued = True
        return queued

    async def _queue_backlog_as_room_is_made(self) -> None:
        """Wait for room for the backlog's first submission in a thread of its own (not on the
        loop, nor in asyncio's executor, stopped at exit before the store closes: see
        zarrdb._waits), then queue what fits on the loop's thread, in order, until none is
        left."""
        loop = asyncio.get_running_loop()
        while self.backlog:
            sub, _ = self.backlog[0]
            _pause.point("backlog.wait")
            try:
                await in_daemon_thread(self.writer.wait_for_room, sub.nbytes)
            except BaseException as exc:  # the waiters get it, whatever it is
                self._fail_backlog(exc)
                if isinstance(exc, Exception):
                    return
                raise
            self._queue_what_fits(loop)

    def _queue_what_fits(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queue what of the backlog has room now, in order (on the loop's thread). Their turn
        has ended, and its flush with it: the next one tells the writer that these are all
        (else it would wait for them to be flushed, for good)."""
        if self._queue_backlog(block=False):
            self.hint(loop)

    def _fail_backlog(self, exc: BaseException) -> None:
        for _, future in self.backlog:
            settle_each(future if type(future) is list else [future], exc)
        self.backlog.clear()

    def settle(self) -> None:
        """Settle the futures of every finished submission (on the loop's thread), then queue
        what waits for room: their writing made it. (Queued here, on the loop's thread, it does
        not wait for the thread waiting for room to get the GIL back, which a busy loop can
        keep from it for seconds while the writer has nothing to do; that thread stays for the
        room other threads' and loops' writes make.)"""
        self.drained.set()
        settle_all(self.port.drain())
        if self.backlog:
            _pause.point("settle.backlog")
            loop = self.loop()
            if loop is not None:
                self._queue_what_fits(loop)
        self.events.report()

    def settle_elsewhere(self) -> None:
        """As settle, from any thread: the buffers are released here, the futures are settled
        on the loop's own thread (a future set from another thread would not wake its loop)."""
        subs = self.port.drain()
        if not subs:
            return
        loop = self.loop()
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or loop is running:
            settle_all(subs)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits them
            loop.call_soon_threadsafe(settle_all, subs)

    def _wake(self) -> None:
        while not self.stopped:
            if not self.port.wait(0.5):
                loop = self.loop()
                if loop is None or loop.is_closed():
                    return
                continue
            loop = self.loop()
            if loop is None:
                return
            self.drained.clear()
            try:
                loop.call_soon_threadsafe(self.settle)
            except RuntimeError:  # the loop is closed
                return
            # Wait for the loop to drain before looking again (else this would spin).
            while not self.drained.wait(0.5):
                loop = self.loop()
                if self.stopped or loop is None or loop.is_closed():
                    return

    def close(self) -> None:
        """Stop watching: the loop's reader is removed on the loop's own thread, and this
        object (with its descriptor) lives until then."""
        self.stopped = True
        self.port.close()
        loop = self.loop()
        if self.waker is not None or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop or not loop.is_running():
            self._unwatch(loop)
        else:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self._unwatch, loop)

    def _unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(Exception):
            loop.remove_reader(self.port.fileno())


def attach(sub: Any, future: Any) -> None:
    """Give a queued submission its caller's future (a burst's: a list, one per write)."""
    sub.future = future
    if sub.joined:
        # It joined an explicit transaction (that opened meanwhile, for a burst): its writes
        # are the transaction's, as any write queued while one is open; its callers return now.
        settle_each(future if type(future) is list else [future], None)
    elif sub.done:
        # Finished already, and drained before its future was attached (by close() from
        # another thread): no settle may come for it.
        settle_all([sub])


class Burst:
    """An event loop's small writes of one turn, and the future of each writer."""

    __slots__ = ("ops", "futures", "nbytes")

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.futures: list[asyncio.Future[Any]] = []
        self.nbytes = 0


def settle_each(futures: list[asyncio.Future[Any]], result: Any) -> None:
    """Settle a burst's futures: `result` is None (done), an exception (every caller's), or the
    finished submission, from which each caller gets its own error if it failed."""
    errors = None
    if result is not None and not isinstance(result, BaseException):
        if result.error() is None:
            result = None
        else:  # each error names its caller's key
            errors = [result.error_at(index) for index in range(len(futures))]
    for index, future in enumerate(futures):
        resolve(future, result if errors is None else errors[index])


def resolve(future: asyncio.Future[Any], outcome: BaseException | None) -> None:
    """Give a caller's future its outcome (an exception, or None: done), unless its caller was
    cancelled; a failure here (e.g. its loop is closed) is nobody else's concern."""
    try:
        if future.done():
            return
        if outcome is None:
            future.set_result(None)
        else:
            future.set_exception(outcome)
    except Exception:  # noqa: BLE001
        pass


def settle_all(subs: list[Any]) -> None:
    """Settle the futures of finished submissions, on their loop's thread; one caller's failure
    to take its result (a cancelled task, a closed loop) never strands another. A burst's
    futures (a list) each get the error of their own write, if the burst failed."""
    _pause.point("settle")
    for sub in subs:
        future = sub.future
        if future is None:
            continue
        if type(future) is list:
            settle_each(future, sub)
        elif not future.done():
            resolve(future, sub.error())
