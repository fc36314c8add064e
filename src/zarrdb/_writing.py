"""Writes of one store: the engine's writer thread, seen from Python.

Every set/delete becomes a submission on the writer (`zarrdb._core.Writer`): a C thread that
owns the write connection, never holds the GIL, takes everything queued, writes it in one
transaction and commits (group commit), while zarr prepares the next chunks on the caller's
thread. A call returns once its data is committed:
- a coroutine awaits a future that the event loop settles when the writer reports completion
  through the loop's port (a file descriptor the loop watches; one port per loop);
- a synchronous caller waits on the writer with the GIL released.
Small writes of one turn of an event loop go to the writer together, as a burst (see
BURST_VALUE_MAX), each caller with its own future and its own outcome (a value the writer
cannot take fails only its caller). A submission that finds the queue full waits in its loop's
backlog, in order: a task waits for room in a worker thread and queues the backlog on the
loop's thread as room is made; every later write of that loop is queued after it, and a
synchronous caller on the loop's thread (set_sync, close(), a transaction's begin) queues it
first, waiting for room there.
Explicit transactions (`store.transaction()`): the store object is the session, as an SQLite
connection is. While one is open, every write through the store joins it, whatever thread,
event loop or zarr worker it comes from; the writer decides that under its lock at the moment
the write is queued, and marks the transaction's start and end the same way (see _writer.pxi);
the transaction's levels are _transactions.py's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from zarrdb import _format, _pause, errors
from zarrdb._core import Database, Port, Writer
from zarrdb._log import WriterEvents
from zarrdb._transactions import _INSIDE

# One group commit takes at most this many bytes (the rest waits for the next): bounds a
# transaction's size and the pages SQLite keeps for it.
GROUP_COMMIT_MAX_BYTES = 64 * 1024 * 1024
# Submitters wait while this many bytes are queued: the values are the callers' own buffers
# (not copied), so this bounds the memory pinned by writes that have not been committed yet.
# A write that joins an open transaction is not counted against the writes that transaction
# deferred until its end (room only its end makes): at most twice this while one is open.
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
# burst so far and the loop's backlog, which keeps their order). A burst is queued once it holds
# BURST_MAX_BYTES, and what is left when the turn ends: the writer applies the first while the
# loop still runs the turn, and commits them all after the turn (100 sets of 1 KiB: 9.0 against
# 9.7 us each with the whole turn in one submission, benchmarks/large_values.py --only gathered).
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

# (kind, key, value): "set" | "set_if_absent" | "delete" | "delete_prefix"
Op = tuple[str, str, Any]


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
        # What the writer thread records without the GIL (journal switches, failed
        # checkpoints, lock waits), logged once a commit has settled and at close.
        self.events = WriterEvents(self.writer, db, db.path)
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
        self.writer.write(ops, _expected_depth(self.writer))
        self.events.report()

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
        """write_async for writes that are a submission of their own: queued after what this
        turn queued before and after the bursts waiting for room, in order."""
        sub = self.writer.prepare(ops, port=watch.port)
        sub.expect_depth = _expected_depth(self.writer)
        future = loop.create_future()
        watch.queue_alone(sub, future)
        watch.hint(loop)
        await future

    def queue_bursts_here(self) -> None:
        """Queue the burst of the event loop running in this thread and the bursts it has
        waiting for room, if any, before a write or a transaction that must come after them;
        waits here for room for them (the caller is synchronous: it blocks the loop anyway)."""
        if not self.watches:  # no event loop has written through this store
            return
        loop = asyncio._get_running_loop()
        if loop is not None:
            watch = self.watches.get(id(loop))
            if (watch is not None and (watch.burst is not None or watch.backlog)
                    and watch.loop() is loop):
                watch.queue_all()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> _LoopWatch:
        with self.watches_lock:
            self._prune_watches()
            watch = _LoopWatch(self.writer, loop, self.events)
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
        self.events.report()
        with self.watches_lock:
            for watch in self.watches.values():
                watch.settle_elsewhere()
                watch.close()
            self.watches.clear()


class _LoopWatch:
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
        self.burst: _Burst | None = None  # this turn's small writes, not queued yet
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
        """Queue this turn's burst and everything waiting for room, waiting here for room
        (on the loop's thread, for a synchronous caller that must come after them)."""
        self.queue_burst()
        if self.backlog and self._queue_backlog(block=True):
            self.writer.flush()  # nobody else says that these are all

    def _prepare(self, burst: _Burst) -> tuple[Any, list[asyncio.Future[Any]]] | None:
        """The burst's submission, not queued yet, and its callers' futures. A caller whose
        value cannot be taken (a buffer that is not contiguous) gets its own error at once and
        is left out: the others' writes go on."""
        bad: list[tuple[int, Exception]] = []
        try:
            sub = self.writer.prepare(burst.ops, port=self.port, bad=bad)
        except BaseException as exc:  # e.g. ClosedError: every waiter gets it
            _settle_each(burst.futures, exc)
            if isinstance(exc, Exception):
                return None
            raise  # Ctrl-C, SystemExit: the loop's to stop
        futures = burst.futures
        if bad:
            for index, error in bad:
                _resolve(futures[index], error)
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
                    _attach(sub, future)
                    return
            except BaseException as exc:
                _settle_each(future if type(future) is list else [future], exc)
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
                if not self.writer.enqueue(sub, block=block):
                    break
            except errors.NestingError as exc:  # its own level's affair: the others go on
                backlog.popleft()
                _settle_each(future if type(future) is list else [future], exc)
                continue
            except BaseException as exc:
                self._fail_backlog(exc)
                if isinstance(exc, Exception):
                    break
                raise
            backlog.popleft()
            _attach(sub, future)
            queued = True
        return queued

    async def _queue_backlog_as_room_is_made(self) -> None:
        """Wait for room for the backlog's first submission in a worker thread (not on the
        loop), then queue what fits on the loop's thread, in order, until none is left."""
        loop = asyncio.get_running_loop()
        while self.backlog:
            sub, _ = self.backlog[0]
            _pause.point("backlog.wait")
            try:
                await asyncio.to_thread(self.writer.wait_for_room, sub.nbytes)
            except BaseException as exc:  # the waiters get it, whatever it is
                self._fail_backlog(exc)
                if isinstance(exc, Exception):
                    return
                raise
            if self._queue_backlog(block=False):
                # Their turn has ended, and its flush with it: the next one tells the writer
                # that these are all (else it would wait for them to be flushed, for good).
                self.hint(loop)

    def _fail_backlog(self, exc: BaseException) -> None:
        for _, future in self.backlog:
            _settle_each(future if type(future) is list else [future], exc)
        self.backlog.clear()

    def settle(self) -> None:
        """Settle the futures of every finished submission (on the loop's thread)."""
        self.drained.set()
        _settle(self.port.drain())
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


def _attach(sub: Any, future: Any) -> None:
    """Give a queued submission its caller's future (a burst's: a list, one per write)."""
    sub.future = future
    if sub.joined:
        # It joined an explicit transaction (that opened meanwhile, for a burst): its writes
        # are the transaction's, as any write queued while one is open; its callers return now.
        _settle_each(future if type(future) is list else [future], None)
    elif sub.done:
        # Finished already, and drained before its future was attached (by close() from
        # another thread): no settle may come for it.
        _settle([sub])


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


def _expected_depth(writer: Writer) -> int:
    """The depth of the innermost open transaction level of `writer` that the calling code is
    in (-1: none): the level its write must still be the innermost one of when it is queued."""
    inside = _INSIDE.get()
    if inside:
        for level in reversed(inside):
            if level.writer is writer and level.is_open:
                return int(level.depth)
    return -1


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

