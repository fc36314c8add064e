"""Writes of one store: the engine's writer thread, seen from Python.

Every set/delete becomes a submission on the writer (`zarrdb._core.Writer`): a C thread that
owns the write connection, never holds the GIL, takes everything queued, writes it in one
transaction and commits (group commit), while zarr prepares the next chunks on the caller's
thread. A call returns once its data is committed:
- a coroutine awaits a future that the event loop settles when the writer reports completion
  through the loop's port (a file descriptor the loop watches; one port per loop);
- a synchronous caller waits on the writer with the GIL released.
Explicit transactions (`store.transaction()`): the store object is the session, as an SQLite
connection is. While one is open, every write through the store joins it, whatever thread,
event loop or zarr worker it comes from; the writer decides that under its lock at the moment
the write is queued, and marks the transaction's start and end the same way (see _writer.pxi).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from zarrdb import _format, _pause
from zarrdb._core import Database, Port, Writer, _exit_transaction

# One group commit takes at most this many bytes (the rest waits for the next): bounds a
# transaction's size and the pages SQLite keeps for it.
GROUP_COMMIT_MAX_BYTES = 64 * 1024 * 1024
# Submitters wait while this many bytes are queued: the values are the callers' own buffers
# (not copied), so this bounds the memory pinned by writes that have not been committed yet.
QUEUE_MAX_BYTES = 128 * 1024 * 1024
# Values at least this long are written in place through the blob API after inserting a
# zero-filled value of their length; shorter ones are bound to the INSERT. SQLite copies a bound
# value into a record buffer of its own first (for a 32 MiB value a fresh 32 MiB allocation);
# 32 MiB values wrote 2.2x faster, 1 MiB 1.3x, 64 KiB the same (benchmarks/tunables.py).
BLOB_WRITE_MIN = 128 * 1024
# Writes from an event loop are committed once the loop has queued all it has in that turn
# (zarr gathers a chunk write from every task it runs at once): the writer applies them as they
# arrive and commits when the loop says it is done, or at the latest this long (seconds) after
# the commit's first write. One commit then carries the whole burst, which costs far less per
# write than a commit each (with 64 KiB pages a commit writes at least two 64 KiB pages).
GROUP_COMMIT_MAX_AGE = 2e-3
# Writes from an event loop wake the writer thread only once this many bytes of them are queued,
# or when the loop's turn ends (its flush()): a few small writes cost one wake-up instead of one
# each, and large ones start at once (0: every write wakes it).
WAKE_WRITER_BYTES = 64 * 1024
# Small writes from an event loop in one turn of it (zarr's gathered chunk writes, one task per
# chunk) go to the writer together, as one submission: one queue entry, one completion and one
# lock round instead of one each. A write of a value larger than BURST_VALUE_MAX, or another kind
# of write, or one inside an explicit transaction, is queued at once on its own (after the turn's
# burst so far, which keeps their order). A burst is queued once it holds BURST_MAX_BYTES, and
# what is left when the turn ends: the writer applies the first while the loop still runs the
# turn, and commits them all after the turn (100 sets of 1 KiB: 9.0 against 9.7 us each with
# the whole turn in one submission, benchmarks/large_values.py --only gathered).
BURST_VALUE_MAX = 64 * 1024
BURST_MAX_BYTES = 64 * 1024
# In WAL mode a checkpointer thread with its own connection copies the write-ahead log into the
# file beside ingest, once the log holds this many pages (SQLite's own automatic checkpoint runs
# inside a commit, every 1000 pages); a commit waits for it only when the log exceeds the limit.
CHECKPOINT_PAGES = 256
WAL_LIMIT_PAGES = 1024
# Journal mode "auto" (the default) opens the file with a rollback journal, in which pages
# appended to the file are written once: bulk loads of large chunks and large explicit
# transactions write about half as much as in WAL mode, where every page goes to the log first
# and is copied into the file by a checkpoint. A rollback journal syncs twice at every commit,
# though, which a stream of small commits (zarr writing small chunks one cohort at a time) pays
# dearly for; after this many commits in a row of less than AUTO_SMALL_COMMIT bytes each, the
# writer switches the file to WAL mode for good ("Rollback journal or WAL" in
# docs/guide/writes.md).
AUTO_WAL_AFTER = 8
AUTO_SMALL_COMMIT = 512 * 1024
_SYNCHRONOUS = {"off": 0, "normal": 1, "full": 2}
# After deletes, the writer gives free pages back to the file system while it has nothing else
# to write, this many pages per step (each step its own short transaction, so a write that
# arrives meanwhile waits for one step at most), until fewer than VACUUM_MIN_PAGES are free.
VACUUM_STEP_PAGES = 256
VACUUM_MIN_PAGES = 16
# Group commits update the modified_at record at most this often (seconds); closing the store
# writes the final time if a later commit left it out; explicit transactions always write it.
MODIFIED_AT_INTERVAL = 0.5

T = TypeVar("T")
S = TypeVar("S")  # the session a Transaction gives when entered (the store)

# (kind, key, value): "set" | "set_if_absent" | "delete" | "delete_prefix"
Op = tuple[str, str, Any]

# The explicit transactions (their tokens) the current context works inside: a transaction()
# entered there nests in the open one as a savepoint, where one entered elsewhere waits for it
# to end. Which writes join a transaction is not decided here: all of the store's do.
_INSIDE: ContextVar[tuple[int, ...]] = ContextVar("zarrdb_transactions", default=())


class Writing:
    """The writer of one store in one process and its ports."""

    def __init__(self, db: Database, *, durability: str, journal: str) -> None:
        self.db = db
        self.writer = Writer(
            db,
            batch_bytes=GROUP_COMMIT_MAX_BYTES,
            queue_bytes=QUEUE_MAX_BYTES,
            blob_min=BLOB_WRITE_MIN,
            touch_sql=_format.TOUCH_MODIFIED_AT,
            touch_every=MODIFIED_AT_INTERVAL,
            max_age=GROUP_COMMIT_MAX_AGE,
            signal_bytes=WAKE_WRITER_BYTES,
            checkpoint=True,
            synchronous=_SYNCHRONOUS[durability],
            checkpoint_pages=CHECKPOINT_PAGES,
            wal_limit_pages=WAL_LIMIT_PAGES,
            wal_after=AUTO_WAL_AFTER if journal == "auto" else 0,
            small_bytes=AUTO_SMALL_COMMIT,
            vacuum_pages=VACUUM_STEP_PAGES,
            vacuum_min=VACUUM_MIN_PAGES,
        )
        self.watches: dict[int, _LoopWatch] = {}  # id(loop) -> its port's watch
        self.watches_lock = threading.Lock()

    def call_holding(self, fn: Callable[[Database], T], drain: bool = True) -> T:
        """`fn(db)` on the write connection, taken from the writer thread (with `drain`, once
        everything queued so far is written) and given back when `fn` returns or raises. Not a
        context manager: Ctrl-C or SIGTERM as a compiled `__enter__` returns would skip
        `__exit__` on CPython 3.14 and keep the connection for good (see Writer.call_holding)."""
        self.queue_bursts_here()
        return self.writer.call_holding(fn, drain)

    def in_transaction(self) -> bool:
        """An explicit transaction is open on this store."""
        return self.writer.in_transaction

    # --- submitting ------------------------------------------------------------------------------

    def write_sync(self, ops: Sequence[Op]) -> None:
        """Queue `ops` and return once they are committed; raises the write's error. While an
        explicit transaction is open, returns once they are queued: they are the
        transaction's, committed or rolled back with it."""
        self.queue_bursts_here()
        self.writer.write(ops)

    def write_async(self, ops: Sequence[Op]) -> Awaitable[None]:
        """As write_sync, for a coroutine to await: the event loop runs on while the writer
        works. A small set or delete joins the loop's burst and gives back its caller's own
        future, not a coroutine (a frame more per write costs as much as the burst saves)."""
        loop = asyncio.get_running_loop()
        watch = self.watches.get(id(loop))
        if watch is None or watch.loop() is not loop:
            watch = self._watch(loop)
        if len(ops) == 1 and not self.writer.in_transaction:
            kind, _, value = op = ops[0]
            nbytes = 0 if value is None else getattr(value, "nbytes", BURST_VALUE_MAX + 1)
            if nbytes <= BURST_VALUE_MAX and (kind == "set" or kind == "delete"):
                burst = watch.burst  # joins this turn's burst (see BURST_VALUE_MAX)
                if burst is None:
                    burst = watch.burst = _Burst()
                    watch.hint(loop)  # the turn's end queues it
                burst.ops.append(op)
                future = loop.create_future()
                burst.futures.append(future)
                burst.nbytes += nbytes
                if burst.nbytes >= BURST_MAX_BYTES:
                    watch.queue_burst()
                return future
        return self._write_alone(watch, loop, ops)

    async def _write_alone(
        self, watch: _LoopWatch, loop: asyncio.AbstractEventLoop, ops: Sequence[Op]
    ) -> None:
        """write_async for writes that are a submission of their own."""
        if watch.burst is not None:
            watch.queue_burst()  # first what this turn queued before
        if watch.backlog and watch.backlog_task is not None:
            await asyncio.shield(watch.backlog_task)  # and the bursts waiting for room
        sub = self.writer.submit(ops, port=watch.port, block=False)
        if sub is None:
            # The queue is full (or a transaction is opening): wait in a worker thread, not on
            # the loop.
            _pause.point("room.wait")
            sub = await asyncio.to_thread(self.writer.submit, ops, port=watch.port)
        watch.hint(loop)
        if sub.joined:
            return
        future = loop.create_future()
        sub.future = future
        if sub.done:
            # Finished already, and perhaps drained before the future was attached (by the
            # loop while it waited for the worker thread, or by close() from another thread):
            # no settle may come for it.
            err = sub.error()
            if err is not None:
                raise err
            return
        await future

    def queue_bursts_here(self) -> None:
        """Queue the burst of the event loop running in this thread, if it has one (before a
        write or a transaction that must come after it)."""
        if not self.watches:  # no event loop has written through this store
            return
        loop = asyncio._get_running_loop()
        if loop is not None:
            watch = self.watches.get(id(loop))
            if watch is not None and watch.burst is not None and watch.loop() is loop:
                watch.queue_burst()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> _LoopWatch:
        with self.watches_lock:
            self._prune_watches()
            watch = _LoopWatch(self.writer, loop)
            self.watches[id(loop)] = watch
        return watch

    def _prune_watches(self) -> None:
        """Drop the ports of loops that are gone or closed, once nothing is in flight on them."""
        for key, watch in list(self.watches.items()):
            loop = watch.loop()
            if loop is None or loop.is_closed():
                watch.settle_elsewhere()  # whatever finished meanwhile: release its buffers
                if watch.port.pending == 0:
                    watch.close()
                    del self.watches[key]

    # --- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit everything queued and stop the writer (the Database is then Python's);
        settle what the ports still hold. (A burst of another thread's event loop that is
        not queued yet fails with ClosedError when that loop queues it.)"""
        _pause.point("writing.close")
        self.queue_bursts_here()
        self.writer.close()
        with self.watches_lock:
            for watch in self.watches.values():
                watch.settle_elsewhere()
                watch.close()
            self.watches.clear()


class _LoopWatch:
    """One event loop's watch on its writer Port (the engine's): settles the futures of the
    loop's writes as the port reports them."""

    def __init__(self, writer: Writer, loop: asyncio.AbstractEventLoop) -> None:
        self.port = Port(writer)
        self.writer = writer
        self.loop = weakref.ref(loop)
        self.hint_due = False
        self.burst: _Burst | None = None  # this turn's small writes, not queued yet
        # Bursts waiting for room in the queue, in order, and the task queueing them.
        self.backlog: collections.deque[_Burst] = collections.deque()
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
        """Queue this turn's burst as one submission (on the loop's thread)."""
        burst, self.burst = self.burst, None
        if burst is None:
            return
        _pause.point("burst.queue")
        if self.backlog:
            self.backlog.append(burst)  # after the bursts waiting for room: in order
            return
        try:
            sub = self.writer.submit(burst.ops, port=self.port, block=False)
        except BaseException as exc:  # e.g. ClosedError: every waiter gets it
            _settle_each(burst.futures, exc)
            if isinstance(exc, Exception):
                return
            raise  # Ctrl-C, SystemExit: the loop's to stop
        if sub is not None:
            self._attach(sub, burst.futures)
            return
        # The queue is full (or a transaction is opening): wait for room in a worker thread,
        # this burst and the ones after it, one by one.
        _pause.point("burst.backlog")
        loop = self.loop()
        if loop is not None:
            self.backlog.append(burst)
            self.backlog_task = loop.create_task(self._queue_backlog())

    async def _queue_backlog(self) -> None:
        while self.backlog:
            burst = self.backlog[0]
            _pause.point("backlog.wait")
            try:
                sub = await asyncio.to_thread(self.writer.submit, burst.ops, port=self.port)
            except BaseException as exc:  # the waiters get it, whatever it is
                for each in self.backlog:
                    _settle_each(each.futures, exc)
                self.backlog.clear()
                if isinstance(exc, Exception):
                    return
                raise
            self.backlog.popleft()
            self._attach(sub, burst.futures)

    @staticmethod
    def _attach(sub: Any, futures: list[asyncio.Future[Any]]) -> None:
        sub.future = futures
        if sub.joined:
            # It joined an explicit transaction that opened meanwhile: its writes are the
            # transaction's, as any write queued while one is open; its callers return now.
            _settle_each(futures, None)
        elif sub.done:
            # Finished already, and drained before its futures were attached (by close()
            # from another thread): no settle may come for it.
            _settle([sub])

    def settle(self) -> None:
        """Settle the futures of every finished submission (on the loop's thread)."""
        self.drained.set()
        _settle(self.port.drain())

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
            _settle(subs)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits them
            loop.call_soon_threadsafe(_settle, subs)

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


class _Burst:
    """An event loop's small writes of one turn, and the future of each writer."""

    __slots__ = ("ops", "futures", "nbytes")

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.futures: list[asyncio.Future[Any]] = []
        self.nbytes = 0


def _settle_each(futures: list[asyncio.Future[Any]], result: Any) -> None:
    """Settle a burst's futures: `result` is None (done), an exception (every caller's), or the
    finished submission, from which each caller gets its own error if it failed."""
    errors = None
    if result is not None and not isinstance(result, BaseException):
        if result.error() is None:
            result = None
        else:  # each error names its caller's key
            errors = [result.error_at(index) for index in range(len(futures))]
    for index, future in enumerate(futures):
        _resolve(future, result if errors is None else errors[index])


def _resolve(future: asyncio.Future[Any], outcome: BaseException | None) -> None:
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


def _settle(subs: list[Any]) -> None:
    """Settle the futures of finished submissions, on their loop's thread; one caller's failure
    to take its result (a cancelled task, a closed loop) never strands another. A burst's
    futures (a list) each get the error of their own write, if the burst failed."""
    _pause.point("settle")
    for sub in subs:
        future = sub.future
        if future is None:
            continue
        if type(future) is list:
            _settle_each(future, sub)
        elif not future.done():
            _resolve(future, sub.error())


class _Level:
    """One level of a Transaction entered: its writer, the list the writer puts the
    transaction's token in the moment the level is open, and what resets the context's mark."""

    __slots__ = ("writer", "opened", "mark")

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.opened: list[int] = []
        self.mark: Any = None

    def inside(self) -> int:
        """The open transaction the caller's context works inside (0: none)."""
        current = self.writer.transaction
        return current if current in _INSIDE.get() else 0

    def entered(self) -> None:
        self.mark = _INSIDE.set((*_INSIDE.get(), self.opened[0]))

    def unmark(self) -> None:
        if self.mark is not None:
            with contextlib.suppress(ValueError, RuntimeError):  # another context set it
                _INSIDE.reset(self.mark)
            self.mark = None

    def end(self, ok: bool) -> None:
        """End the level if it is still open (the writer empties `opened` the moment it is
        over, so a call after one that was interrupted, or after a failed one, does nothing)."""
        self.unmark()
        if self.opened:
            self.writer.end(self.opened[0], ok, self.opened)

    def abandon(self) -> None:
        """Roll back the level if it was opened for a caller who is gone (interrupted by a
        signal as begin() returned, or a cancelled task)."""
        if self.opened:
            with contextlib.suppress(Exception):
                self.end(False)


class Transaction(Generic[S]):
    """`with store.transaction():` and `async with store.transaction():`.

    The store object is the session: while the block is open, every write through the store
    joins the transaction, from any thread, event loop or zarr worker, and every read through
    it sees the transaction's writes; other store objects and processes see only what is
    committed. A transaction() entered inside the block (the same context: the code of the
    block, tasks and threads started with its context) nests as a savepoint, undone if it
    raises; entered anywhere else, it waits for the open one to end."""

    def __init__(self, store: S, writing: Callable[[], Writing]) -> None:
        self.store = store  # what entering gives
        self.writing = writing  # the store's writer (raises if the store may not write)
        self.levels: list[_Level] = []

    def _level(self) -> _Level:
        writing = self.writing()
        writing.queue_bursts_here()  # the loop's writes before the block are not its own
        return _Level(writing.writer)

    def _forget(self, level: _Level) -> None:
        """Roll back `level` if it opened, and drop it (its __enter__ failed or was
        interrupted)."""
        level.abandon()
        if level in self.levels:
            self.levels.remove(level)

    def __enter__(self) -> S:
        # Ctrl-C or SIGTERM may raise at any point where Python runs signal handlers: as a
        # function starts, and as a call into compiled code returns. From the moment the level
        # is listed until __enter__ returns, any of them rolls back what was opened. (A
        # `return` runs no handler, and the with statement protects the block from there.)
        level = self._level()
        _pause.point("txn.enter")
        try:
            self.levels.append(level)
            level.writer.begin(level.inside(), level.opened)
            level.entered()
        except BaseException:
            self._forget(level)
            raise
        return self.store

    # Compiled (zarrdb._core): a __exit__ written in Python could be interrupted as it starts,
    # before the level has ended, leaving the transaction open for good.
    __exit__ = _exit_transaction

    async def __aenter__(self) -> S:
        # In a worker thread: waiting for another transaction, for the writes queued before,
        # or for another process's lock must not stop the event loop, which may be running
        # this transaction's own work. The context's mark is set here, in the coroutine.
        level = self._level()
        _pause.point("txn.enter")
        self.levels.append(level)
        begin = asyncio.ensure_future(
            asyncio.to_thread(level.writer.begin, level.inside(), level.opened)
        )
        try:
            await asyncio.shield(begin)
            level.entered()
        except BaseException:
            self.levels.remove(level)
            if begin.done():
                level.abandon()
            else:  # cancelled: the thread goes on; end what it opens
                begin.add_done_callback(lambda _: level.abandon())
            raise
        return self.store

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        _pause.point("txn.exit")
        level = self.levels.pop()
        level.unmark()
        # Shielded: a task cancelled while the commit runs must not leave it half done.
        ending = asyncio.to_thread(
            level.writer.end, level.opened[0], exc_type is None, level.opened
        )
        await asyncio.shield(ending)
