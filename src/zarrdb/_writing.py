"""Writes of one store: the engine's writer thread, seen from Python.

Every set/delete becomes a submission on the writer (`zarrdb._core.Writer`): a C thread that
owns the write connection, never holds the GIL, takes everything queued, writes it in one
transaction and commits (group commit), while zarr prepares the next chunks on the caller's
thread. A call returns once its data is committed:
- a coroutine awaits a future that the event loop settles when the writer reports completion
  through the loop's port (a file descriptor the loop watches; one port per loop);
- a synchronous caller waits on the writer with the GIL released.
Explicit transactions (`store.transaction()`) mark their participants' submissions with the
transaction's token: the writer writes them inside the open transaction, and holds everyone
else's until it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from zarrdb import _format, _zarr_shim
from zarrdb._core import Database, Port, Submission, Writer

if TYPE_CHECKING:
    from zarrdb.store import SQLiteStore

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
# writer switches the file to WAL mode for good (benchmarks/ingest.py).
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

# (kind, key, value): "set" | "set_if_absent" | "delete" | "delete_prefix"
Op = tuple[str, str, Any]

# The explicit transaction the current context takes part in. zarr's synchronous API runs its
# coroutines on its own event-loop thread with a copy of the caller's context (and
# asyncio.to_thread copies it again), so zarr's work for the thread that opened a transaction
# carries this mark, while its work for other threads does not.
_TRANSACTION: ContextVar[int] = ContextVar("zarrdb_transaction", default=0)
_tokens = itertools.count(1)


class Writing:
    """The writer of one store in one process, its ports, and its explicit transaction."""

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
            checkpoint=True,
            synchronous=_SYNCHRONOUS[durability],
            checkpoint_pages=CHECKPOINT_PAGES,
            wal_limit_pages=WAL_LIMIT_PAGES,
            wal_after=AUTO_WAL_AFTER if journal == "auto" else 0,
            small_bytes=AUTO_SMALL_COMMIT,
            vacuum_pages=VACUUM_STEP_PAGES,
            vacuum_min=VACUUM_MIN_PAGES,
        )
        self.ports: dict[int, _LoopPort] = {}  # id(loop) -> its port
        self.ports_lock = threading.Lock()
        # The explicit transaction: its depth, its token (0: none), and a condition other
        # threads wait on for its end.
        self.depth = 0
        self.token = 0
        self.ended = threading.Condition()
        self.level_writes: list[list[Submission]] = []  # per level: writes not waited for

    # --- the connection itself ---------------------------------------------------------------

    @contextlib.contextmanager
    def hold(self, drain: bool = True) -> Iterator[Database]:
        """The write connection, taken from the writer thread for the block: with `drain`, once
        everything queued so far is committed."""
        db = self.writer.hold(drain)
        try:
            yield db
        finally:
            self.writer.release()

    # --- explicit transactions -----------------------------------------------------------------

    def in_transaction(self) -> bool:
        """True if the caller takes part in the open explicit transaction: the code inside the
        block and zarr's work for it (marked through the context), or zarr's codec threads,
        which do not carry the context along."""
        if not self.token:
            return False
        mark = _TRANSACTION.get()
        return mark == self.token or (mark == 0 and _zarr_shim.in_codec_pool())

    def caller_token(self) -> int:
        return self.token if self.in_transaction() else 0

    def wait_for_other_transaction(self) -> None:
        """Block while an explicit transaction the caller takes no part in is open."""
        if not self.depth:
            return
        with self.ended:
            while self.depth and not self.in_transaction():
                # Timed: a thread zarr has just started joins its pool's list a moment later.
                self.ended.wait(0.01)

    def begin(self) -> tuple[Any, Any]:
        """Open a transaction level for the caller; returns what end() needs."""
        with self.ended:
            while self.depth and not self.in_transaction():
                self.ended.wait(0.01)
            outermost = self.depth == 0
            self.depth += 1  # reserved: other threads now wait
        try:
            with self.hold() as db:
                inner = db.transaction()
                inner.__enter__()  # BEGIN IMMEDIATE, or a savepoint when nested
                if outermost:
                    self.token = next(_tokens)
                    self.writer.begin_transaction(self.token)
        except BaseException:
            with self.ended:
                self.depth -= 1
                self.ended.notify_all()
            raise
        self.level_writes.append([])
        return inner, _TRANSACTION.set(self.token)

    def end(self, state: tuple[Any, Any], exc_type: Any, exc: Any, tb: Any) -> None:
        """End the caller's innermost level: once every write queued inside it is written,
        commit (or release its savepoint), or roll it back if the block raised or one of its
        writes failed (that write's error is raised)."""
        inner, mark = state
        _TRANSACTION.reset(mark)
        outermost = self.depth == 1
        writes = self.level_writes.pop()
        try:
            with self.hold() as db:
                try:
                    failed = _first_error(writes)
                    if failed is not None and exc_type is None:
                        inner.__exit__(type(failed), failed, None)
                        raise failed
                    if exc_type is None and outermost:
                        try:
                            db.execute(_format.TOUCH_MODIFIED_AT)
                        except BaseException as touch_error:
                            inner.__exit__(type(touch_error), touch_error, None)
                            raise
                    inner.__exit__(exc_type, exc, tb)
                finally:
                    if outermost:
                        self.writer.end_transaction()
        finally:
            with self.ended:
                self.depth -= 1
                if outermost:
                    self.token = 0
                self.ended.notify_all()

    def _queued_in_transaction(self, sub: Submission) -> None:
        """A participant's write does not wait to be written: the transaction is committed (or
        rolled back with the write's error) at its end, and reads inside it wait for the queue
        first. Kept until then; every so often the ones written fine are let go."""
        writes = self.level_writes[-1]
        writes.append(sub)
        if len(writes) >= 4096 and len(writes) % 4096 == 0:
            writes[:] = [w for w in writes if not w.done or w.collect() is not None]

    # --- submitting ------------------------------------------------------------------------------

    def _thread_token(self) -> int:
        """caller_token() for a thread. A thread zarr has just started for its codec pool
        joins the pool's list a moment after it starts running: while a transaction is open,
        look again for a short while before taking the caller for an outsider (whose write
        waits for the transaction's end: a participant's would never be written)."""
        if not self.token:
            return 0
        token = self.caller_token()
        deadline = time.monotonic() + 0.1
        while not token and self.token and time.monotonic() < deadline:
            time.sleep(0.005)
            token = self.caller_token()
        return token

    def write_sync(self, ops: Sequence[Op]) -> None:
        """Queue `ops` and return once they are committed; raises the write's error. Inside
        the caller's explicit transaction, returns once they are queued (see end())."""
        token = self._thread_token()
        sub = self.writer.submit(ops, token=token)
        if token:
            self._queued_in_transaction(sub)
        else:
            sub.wait()

    async def write_async(self, ops: Sequence[Op]) -> None:
        """As write_sync, for a coroutine: the event loop runs on while the writer works."""
        loop = asyncio.get_running_loop()
        port = self.ports.get(id(loop))
        if port is None or port.loop() is not loop:
            port = self._port(loop)
        token = self.token and self.caller_token()
        sub = self.writer.submit(ops, token=token, port=port.port, block=False)
        if sub is None:
            # The queue is full: wait for room in a worker thread, not on the loop.
            sub = await asyncio.to_thread(self.writer.submit, ops, token=token, port=port.port)
            if sub.done:  # possibly drained already, before a future was attached
                port.hint(loop)
                if token:
                    self._queued_in_transaction(sub)
                    return
                err = sub.error()
                if err is not None:
                    raise err
                return
        port.hint(loop)
        if token:
            self._queued_in_transaction(sub)
            return
        future = loop.create_future()
        sub.future = future
        await future

    def _port(self, loop: asyncio.AbstractEventLoop) -> _LoopPort:
        with self.ports_lock:
            self._prune_ports()
            port = _LoopPort(self.writer, loop)
            self.ports[id(loop)] = port
        return port

    def _prune_ports(self) -> None:
        """Drop the ports of loops that are gone or closed, once nothing is in flight on them."""
        for key, port in list(self.ports.items()):
            loop = port.loop()
            if loop is None or loop.is_closed():
                port.settle()  # whatever finished meanwhile: release its buffers
                if port.port.pending == 0:
                    port.close()
                    del self.ports[key]

    # --- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit everything queued and stop the writer (the Database is then Python's);
        settle what the ports still hold."""
        self.writer.close()
        with self.ports_lock:
            for port in self.ports.values():
                port.settle()
                port.close()
            self.ports.clear()


def _first_error(writes: list[Submission]) -> BaseException | None:
    """The error of the first failed write among `writes` (all done), releasing them all."""
    failed = None
    for sub in writes:
        err = sub.collect()
        if err is not None and failed is None:
            failed = err
    return failed


class _LoopPort:
    """A writer port watched by one event loop."""

    def __init__(self, writer: Writer, loop: asyncio.AbstractEventLoop) -> None:
        self.port = Port(writer)
        self.writer = writer
        self.loop = weakref.ref(loop)
        self.hint_due = False
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
        self.writer.flush()

    def settle(self) -> None:
        """Settle the futures of every finished submission; one caller's failure to take its
        result (a cancelled task, a closed loop) never strands another."""
        self.drained.set()
        for sub in self.port.drain():
            future = sub.future
            if future is None:
                continue
            try:
                if future.done():
                    continue
                err = sub.error()
                if err is None:
                    future.set_result(None)
                else:
                    future.set_exception(err)
            except Exception:  # noqa: BLE001 - e.g. the future's loop is closed
                pass

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


class Transaction:
    """`with store.transaction():` and `async with store.transaction():`.

    The code inside the block takes part in it, and so does the work zarr does for it on its own
    event-loop and codec threads (zarr's synchronous API writes from there): those writes join
    the transaction and those reads see it. Other threads' writes wait for the block to end;
    their reads see committed data only. A nested block is a savepoint: if it raises, its writes
    are undone."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.levels: list[Any] = []  # what each level entered needs to end

    def __enter__(self) -> SQLiteStore:
        writing = self.store._connections_for_write().writing
        assert writing is not None
        self.levels.append((writing, writing.begin()))
        return self.store

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        writing, state = self.levels.pop()
        writing.end(state, exc_type, exc, tb)

    async def __aenter__(self) -> SQLiteStore:
        writing = self.store._connections_for_write().writing
        assert writing is not None
        if writing.depth and not writing.in_transaction():
            # Another thread's transaction: wait for its end off the loop, which may be
            # running that transaction's own work.
            await asyncio.to_thread(writing.wait_for_other_transaction)
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)
