"""The threads of remote reads, and the waits in them that Ctrl-C and closing end.

- `_workers`: daemon threads that make requests (and background read-ahead) for threads
  waiting on them, reused while busy;
- `Slots`: the bound of requests in flight for one file;
- `ReadPool`: the threads in which one remote store reads, off the event loop;
- `interrupt_requests()` and a read pool's closing end every wait for a request at once.

Public through `zarrdb.remote` (ReadPool, interrupt_requests).
"""

from __future__ import annotations

import asyncio
import functools
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from zarrdb import _tunables, errors

_T = TypeVar("_T")

# interrupt_requests() counts up; a wait that began at another count ends.
_interrupts = 0


def interrupt_requests() -> None:
    """End every wait for a remote request in this process now: each raises KeyboardInterrupt
    in its own thread (the requests themselves end with their timeouts, unread).

    The thread a signal interrupts ends its wait by itself; this ends the others' (worker
    threads reading for an event loop the signal stopped). The command line calls it on
    Ctrl-C and SIGTERM."""
    global _interrupts
    _interrupts += 1


class _Workers:
    """Daemon threads that make requests for threads waiting on them; an idle one is reused
    (starting a thread costs about as much as a 64 KiB request on loopback), and ends after
    IDLE_EXIT seconds without work."""

    IDLE_EXIT = 2.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0  # workers waiting for a job that no submit() has counted on yet
        self._pid = os.getpid()

    def submit(self, job: Callable[[], None]) -> None:
        """Run `job()` on an idle worker, or on a new one."""
        with self._lock:
            if self._pid != os.getpid():  # after fork(): the workers stayed in the parent
                self._jobs, self._idle, self._pid = queue.SimpleQueue(), 0, os.getpid()
            jobs, idle = self._jobs, self._idle > 0
            self._idle -= idle
        jobs.put(job)
        if not idle:
            thread = threading.Thread(
                target=self._work, args=(jobs,), name="zarrdb-remote-request", daemon=True
            )
            thread.start()

    def _work(self, jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            try:
                job = jobs.get(timeout=self.IDLE_EXIT)
            except queue.Empty:
                with self._lock:
                    if jobs is not self._jobs:
                        return
                    if self._idle > 0:  # no submit() counts on this worker: it may go
                        self._idle -= 1
                        return
                continue  # a submit() counted on an idle worker: its job is on the way
            job()
            with self._lock:
                if jobs is not self._jobs:
                    return
                self._idle += 1


_workers = _Workers()


def _forked() -> None:
    # The workers stayed in the parent, and one of them may have held the lock at fork().
    _workers._lock = threading.Lock()
    _workers._jobs, _workers._idle, _workers._pid = queue.SimpleQueue(), 0, os.getpid()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forked)


def schedule(function: Callable[..., Any], *args: Any) -> None:
    """Call `function(*args)` soon on a request thread (background read-ahead)."""

    _workers.submit(lambda: function(*args))


class Slots:
    """The bound of requests in flight for one file; waits for a slot end as
    interrupt_requests() or the store's closing says."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0
        self._changed = threading.Condition(threading.Lock())

    def acquire(self) -> None:
        started_at = _interrupts
        closing = getattr(_reader, "closing", None)
        with self._changed:
            while self.taken >= self.limit:
                self._changed.wait(_tunables.REMOTE_WAIT_STEP)
                _check_waiting(started_at, closing)
            self.taken += 1

    def release(self) -> None:
        with self._changed:
            self.taken -= 1
            self._changed.notify_all()


# The read pool a thread belongs to, as `_reader.closing` (its closing event): a wait for a
# request in such a thread ends with ClosedError once the store closes.
_reader = threading.local()


def check_closing(closing: threading.Event | None = None) -> None:
    """Raise ClosedError once `closing` (by default, the event of this thread's read pool) is
    set. Also what the block cache calls while a read waits for a block another reader is
    fetching, perhaps for another store."""
    if closing is None:
        closing = getattr(_reader, "closing", None)
    if closing is not None and closing.is_set():
        raise errors.ClosedError(
            "the store was closed while this read waited for the network; open it again"
        )


def _check_waiting(started_at: int, closing: threading.Event | None) -> None:
    """Raise what ends a wait that began when interrupt_requests() had counted `started_at`."""
    if _interrupts != started_at:
        raise KeyboardInterrupt
    check_closing(closing)


class ReadPool:
    """The threads in which one remote store reads: every read of a remote file runs in one of
    them (never on an event loop's thread), so that reads from coroutines, threads and zarr's
    own concurrent chunk reads wait for the network at the same time, each on a read
    connection of its own. `close()` ends the waits of its threads for requests (they raise
    ClosedError) and stops the threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def _start(self) -> ThreadPoolExecutor:
        with self._lock:
            if self.closing.is_set():
                raise errors.ClosedError("the store is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.size,
                    thread_name_prefix="zarrdb-remote-read",
                    initializer=_join_pool,
                    initargs=(self.closing,),
                )
            return self._executor

    async def run(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """`fn(*args, **kwargs)` in one of the pool's threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._start(), functools.partial(fn, *args, **kwargs))

    def cancel(self) -> None:
        """End the waits for the network of the reads under way (they raise ClosedError)."""
        self.closing.set()

    def close(self) -> None:
        """cancel(), then wait for the threads to end."""
        self.cancel()
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            # From one of its own threads (a read's callback closing the store) it cannot wait
            # for itself: the threads end once their reads do.
            inside = getattr(_reader, "closing", None) is self.closing
            executor.shutdown(wait=not inside, cancel_futures=True)


def _join_pool(closing: threading.Event) -> None:
    _reader.closing = closing


def interruptible(call: Callable[[], _T], deadline: float | None = None) -> _T:
    """`call()`, run on a worker thread while this one waits in short steps, for at most
    `deadline` seconds (then TimeoutError).

    A request waits inside obstore's blocking call, where neither Ctrl-C nor SIGTERM can end
    it (Python runs signal handlers between bytecodes of the main thread); a wait here ends at
    once on either, or on interrupt_requests(). The request is then abandoned: its worker
    finishes it with the request's timeouts, holding up neither the process's exit nor
    anything else."""
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def job() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome.append((False, exc))
        finally:
            done.set()

    started_at = _interrupts
    closing = getattr(_reader, "closing", None)
    give_up = None if deadline is None else time.monotonic() + deadline
    _workers.submit(job)
    while not done.wait(_tunables.REMOTE_WAIT_STEP):
        _check_waiting(started_at, closing)
        if give_up is not None and time.monotonic() > give_up:
            # A server that keeps the answer coming too slowly to end: the request is
            # abandoned as on Ctrl-C, and its worker ends with the client's timeouts.
            raise TimeoutError(f"the request took longer than its deadline ({deadline:g} s)")
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(_T, value)
