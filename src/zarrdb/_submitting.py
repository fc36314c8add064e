"""Writes of one open file of a store: the engine's writer thread, seen from Python.

Every set/delete becomes a submission on the writer (`zarrdb._core.Writer`): a C thread that
owns the write connection, never holds the GIL, takes everything queued, writes it in one
transaction and commits (group commit), while zarr prepares the next chunks on the caller's
thread. A call returns once its data is committed:
- a coroutine awaits a future that the event loop settles when the writer reports completion
  through the loop's port (a file descriptor the loop watches; one port per loop), and small
  writes of one turn of the loop go to the writer together (_completions.py);
- a synchronous caller waits on the writer with the GIL released.
Explicit transactions (`store.transaction()`, _transactions.py): the store object is the
session, as an SQLite connection is. While one is open, every write through the store joins
it, whatever thread, event loop or zarr worker it comes from; the writer decides that under its
lock at the moment the write is queued, and marks the transaction's start and end the same way
(see _writer.pxi). A write made inside a level is queued as expecting that level to be the
innermost open one (expected_level), else refused with NestingError.
The numbers (queue bound, group commit size, ...) are _tunables.py's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from zarrdb import _compat, _format, _pause, _tunables
from zarrdb._completions import Burst, LoopWatch, Op
from zarrdb._core import Database, Writer
from zarrdb._log import WriterEvents
from zarrdb._transactions import expected_level

T = TypeVar("T")
_SYNCHRONOUS = {"off": 0, "normal": 1, "full": 2}


class Submitter:
    """The writes of one open file of a store: its engine Writer, and a LoopWatch per event
    loop that writes through it."""

    def __init__(self, db: Database, *, durability: str, journal: str) -> None:
        self.db = db
        self.writer = Writer(
            db,
            touch_sql=_format.TOUCH_MODIFIED_AT,
            signal_bytes=_tunables.WAKE_WRITER_BYTES,
            checkpoint=True,
            synchronous=_SYNCHRONOUS[durability],
            wal_after=_tunables.AUTO_WAL_AFTER if journal == "auto" else 0,
            **_tunables.writer_options(),
        )
        # What the writer thread records without the GIL (journal switches, failed
        # checkpoints, lock waits), logged once a commit has settled and at close.
        self.events = WriterEvents(self.writer, db, db.path)
        self.watches: dict[int, LoopWatch] = {}  # id(loop) -> its port's watch
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

    def write_sync(self, ops: Sequence[Op], level: int) -> None:
        """Queue `ops` and return once they are committed; raises the write's error. While an
        explicit transaction is open, returns once they are queued: they are the
        transaction's, committed or rolled back with it. `level`: the serial of the level the
        caller writes in (0: none; see the store's _write_target, which checked it)."""
        if self.watches:  # (an event loop wrote through this store: see queue_bursts_here)
            self.queue_bursts_here()
        writer = self.writer
        writer.write(ops, level)
        if writer.events != self.events.mark:
            self.events.report()

    def write_async(self, ops: Sequence[Op]) -> Awaitable[None]:
        """As write_sync, for a coroutine to await: the event loop runs on while the writer
        works. A small set or delete joins the loop's burst and gives back its caller's own
        future, not a coroutine (a frame more per write costs as much as the burst saves)."""
        loop = asyncio.get_running_loop()
        watch = self.watches.get(id(loop))
        if watch is None or watch.loop() is not loop:
            watch = self._watch(loop)
        # (Not a write made in a level, even one whose transaction has ended: the writer refuses
        # that one, and a burst expects no level.)
        if len(ops) == 1 and not self.writer.in_transaction and not expected_level(self.writer):
            kind, _, value = op = ops[0]
            burst_value_max = _tunables.BURST_VALUE_MAX
            nbytes = 0 if value is None else getattr(value, "nbytes", burst_value_max + 1)
            if nbytes <= burst_value_max and (kind == "set" or kind == "delete"):
                burst = watch.burst  # joins this turn's burst (see BURST_VALUE_MAX)
                if burst is None:
                    burst = watch.burst = Burst()
                    watch.hint(loop)  # the turn's end queues it
                burst.ops.append(op)
                future = loop.create_future()
                burst.futures.append(future)
                burst.nbytes += nbytes
                if burst.nbytes >= _tunables.BURST_MAX_BYTES:
                    watch.queue_burst()
                return future
        return self._write_alone(watch, loop, ops)

    async def _write_alone(
        self, watch: LoopWatch, loop: asyncio.AbstractEventLoop, ops: Sequence[Op]
    ) -> None:
        """write_async for writes that are a submission of their own: queued after what this
        turn queued before and after the bursts waiting for room, in order."""
        sub = self.writer.prepare(ops, port=watch.port)
        sub.expect_level = expected_level(self.writer)
        future = loop.create_future()
        watch.queue_alone(sub, future)
        watch.hint(loop)
        await future

    def queue_bursts_here(self) -> None:
        """Queue the burst of the event loop running in this thread and the bursts it has
        waiting for room, if any, before a write or a transaction that must come after them;
        waits here for room for them (the caller is synchronous: it blocks the loop anyway),
        and flushes what the loop queued whose flush waits for the loop's next turn."""
        if not self.watches:  # no event loop has written through this store
            return
        loop = _compat.running_loop()
        if loop is not None:
            watch = self.watches.get(id(loop))
            if (watch is not None
                    and (watch.burst is not None or watch.backlog or watch.hint_due)
                    and watch.loop() is loop):
                watch.queue_all()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> LoopWatch:
        with self.watches_lock:
            self._prune_watches()
            watch = LoopWatch(self.writer, loop, self.events)
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
