"""SQLiteStore: a zarr v3 store in one SQLite file (SQLiteStore 1.0 format).

Layout of the work (see ARCHITECTURE.md, "Concurrency and durability"):
- reads: each thread has its own read connection, opened lazily; reads run in parallel with
  the GIL released and never wait for the writer;
- writes: one writer connection; concurrent set/delete calls are queued and committed together
  (group commit); a call returns once its data is committed;
- explicit transactions: `with store.transaction():` puts every write of the store into one
  atomic commit;
- the file is in WAL mode while open for writing and back in DELETE mode after close.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import time
import warnings
import weakref
from contextvars import ContextVar
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype, cpu, default_buffer_prototype

from zarrdb import _format, errors
from zarrdb import remote as _remote
from zarrdb._core import Database

if TYPE_CHECKING:
    from typing import Self

__all__ = ["SQLiteStore"]

Durability = Literal["full", "normal", "off"]
# Each durability level is SQLite's synchronous setting of the same name.
_DURABILITY_LEVELS = ("full", "normal", "off")

# A read of at most this many bytes runs on the event loop's thread; a longer one is handed to
# a worker thread, so the loop is not stalled and the copies of the values zarr gathers run on
# several cores at once. One call alone is faster inline at every size, but zarr reading a
# whole array of 1 MiB chunks is faster through threads, and of 256 KiB chunks (64 KiB in 1-D)
# faster inline (benchmarks/tunables.py, section inline). Whole values only: byte ranges below.
INLINE_READ_MAX = 512 * 1024
# Byte ranges come from partial reads (a window out of a shard: the index and a few inner
# chunks, ranges zarr may merge up to a few MiB), one or two at a time, where the thread hop
# costs more than the copy: a range of at most this many bytes is read inline.
INLINE_RANGE_MAX = 1024 * 1024
# New files get 64 KiB pages: a large value (a shard) is a chain of 16 times fewer overflow
# pages, so a byte range deep inside it is reached quickly and partial reads stay flat as shards
# grow from 1 to 16 MiB; large values also write faster (benchmarks/tunables.py).
DEFAULT_PAGE_SIZE = 65536
# New files keep a pointer map (SQLite's incremental auto-vacuum, which also lets
# `PRAGMA incremental_vacuum` give free pages back): with it SQLite finds the next overflow page
# of a value without reading the current one, so a byte range near the end of a shard costs a
# few lookups in one hot page instead of touching every page of the chain. Random windows out of
# 4 and 16 MiB shards measured 5% and 8% faster; ingest of small chunks about 2% slower (the
# map's page is written with each commit).
AUTO_VACUUM = "incremental"
# Page cache per connection, KiB (SQLite's default of 2 MiB holds only 31 pages of 64 KiB;
# reads mostly go through mmap, so more buys little: benchmarks/tunables.py).
DEFAULT_CACHE_KIB = 16384
# Read connections map this much of the file into memory: a value is copied straight from the
# OS page cache, and a byte range deep in a large value costs no page reads to reach.
DEFAULT_MMAP_BYTES = 256 * 1024 * 1024
# A group commit of at most this many bytes runs on the event loop's thread; a larger one in a
# worker thread, so the loop keeps preparing the next chunks meanwhile.
INLINE_COMMIT_MAX = 16 * 1024 * 1024
# The writer never takes more than this many bytes into one group commit (the rest waits for
# the next one): bounds the transaction and the memory pinned by queued values.
GROUP_COMMIT_MAX_BYTES = 64 * 1024 * 1024
# Group commits update the modified_at record at most this often (seconds); one right after
# another would otherwise each write the metadata table's page again (a 64 KiB page per commit
# of ten 16 KiB chunks). Closing the store writes the final time if a later commit skipped it;
# explicit transactions always write it.
MODIFIED_AT_INTERVAL = 0.5


_running_loop = asyncio._get_running_loop  # None outside a running loop (no exception)
_U8 = np.dtype("B")
_CPU_BUFFER = cpu.Buffer
# This process's id, kept current across fork() without a system call per store call.
_PID = os.getpid()


def _forked() -> None:
    global _PID
    _PID = os.getpid()


os.register_at_fork(after_in_child=_forked)


def _as_buffer(prototype: BufferPrototype, data: bytes) -> Buffer:
    """`data` as the prototype's Buffer; for host buffers a view, without from_bytes' layers."""
    cls = prototype.buffer
    if cls is _CPU_BUFFER:
        return cls(np.frombuffer(data, _U8))
    return cls.from_bytes(data)


def _value_view(value: Buffer) -> Any:
    """The bytes of a zarr Buffer, without a copy for CPU buffers."""
    return value.as_numpy_array()


def _byte_range(byte_range: ByteRequest | None) -> tuple[int, int | None]:
    """A zarr ByteRequest as the engine's (start, length)."""
    if byte_range is None:
        return 0, None
    if isinstance(byte_range, RangeByteRequest):
        if byte_range.start < 0:
            raise ValueError(f"byte range start must be >= 0, got {byte_range}")
        return byte_range.start, max(0, byte_range.end - byte_range.start)
    if isinstance(byte_range, OffsetByteRequest):
        if byte_range.offset < 0:
            raise ValueError(f"byte range offset must be >= 0, got {byte_range}")
        return byte_range.offset, None
    if isinstance(byte_range, SuffixByteRequest):
        if byte_range.suffix < 0:
            raise ValueError(f"byte range suffix must be >= 0, got {byte_range}")
        if byte_range.suffix == 0:
            return 0, 0
        return -byte_range.suffix, None
    raise ValueError(f"Unexpected byte_range, got {byte_range}.")


# The explicit transaction the current context belongs to. zarr's synchronous API runs its
# coroutines on its own event-loop thread with a copy of the caller's context (and
# asyncio.to_thread copies it again), so the work zarr does for the thread that opened a
# transaction carries this mark, while work zarr does for other threads does not.
_TRANSACTION: ContextVar[object | None] = ContextVar("zarrdb_transaction", default=None)


class _Submission:
    """Writes from one caller, committed together; the caller waits on it."""

    __slots__ = ("ops", "nbytes", "error", "event", "future", "loop")

    def __init__(self, ops: list[tuple[str, str, Any]], nbytes: int) -> None:
        self.ops = ops  # ("set", key, value) | ("delete", key, None)
        self.nbytes = nbytes
        self.error: BaseException | None = None
        self.event: threading.Event | None = None
        self.future: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def resolve(self) -> None:
        if self.event is not None:
            self.event.set()
        if self.future is not None and self.loop is not None:
            if _running_loop() is self.loop:
                self._settle()  # committed on the loop's own thread: no wake-up to send
                return
            try:
                self.loop.call_soon_threadsafe(self._settle)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def _settle(self) -> None:
        future = self.future
        if future is None or future.done():
            return
        if self.error is not None:
            future.set_exception(self.error)
        else:
            future.set_result(None)


class _Lease:
    """Held in a thread's thread-local storage while the thread uses a read connection."""

    __slots__ = ("__weakref__",)


def _return_reader(conns_ref: weakref.ref, db: Database) -> None:
    conns = conns_ref()
    if conns is None or db.closed:
        return
    with conns.readers_lock:
        if any(db is open_db for open_db in conns.readers):
            conns.idle_readers.append(db)


class _Connections:
    """The connections of one store in one process."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store_path = store.path
        self.options = store._options
        self.read_only = store.read_only
        # A remote file: where it is, and once open, the file itself (its version pinned, its
        # block cache shared by the read connections of every thread).
        self.remote_location = store._remote
        self.remote: _remote.RemoteObject | None = None
        self.block_cache = store._block_cache
        self.expect_etag = store._expect_etag
        self.pid = os.getpid()
        self.local = threading.local()
        self.readers: list[Database] = []  # every open read connection
        self.idle_readers: list[Database] = []  # those whose thread has ended
        self.readers_lock = threading.Lock()
        self.writer: Database | None = None
        self.write_lock = threading.RLock()  # held while the writer connection is used
        self.pending: list[_Submission] = []
        self.pending_lock = threading.Lock()
        self.flush_scheduled = False
        self.flush_running = False
        # monotonic time modified_at was last written by this writer, and whether a commit
        # since then left it out.
        self.touched_at: float | None = None
        self.touch_skipped = False
        self.transaction_depth = 0
        self.transaction_token: object | None = None
        self.transaction_done = threading.Condition(self.write_lock)

    # --- opening --------------------------------------------------------------------------

    def open(self) -> None:
        path = self.store_path
        opts = self.options
        if self.remote_location is None and os.path.isdir(path):
            raise errors.CantOpenError(
                f"{path!r} is a directory; a SQLiteStore is a single file (for a directory "
                "of chunk files use zarr.storage.LocalStore)",
                code=14,
                filename=path,
            )
        if self.read_only:
            if self.remote_location is None and not os.path.exists(path):
                raise FileNotFoundError(f"no such SQLiteStore file: {path!r}")
            db = self._open_reader()
            try:
                notes = _format.validate(_format.read_facts(db), path=path, writable=False)
            except BaseException:
                db.close()
                raise
            _format.warn(notes)
            self._adopt_reader(db)
            return
        db = Database(
            path,
            mode="c",
            busy_timeout=opts["busy_timeout"],
            cache_size=opts["cache_size"],
            synchronous=opts["durability"],
        )
        try:
            facts = _format.read_facts(db)
            if facts.is_empty:
                self._initialise(db)
            else:
                _format.warn(_format.validate(facts, path=path, writable=True))
            wanted = opts["journal"]
            mode = db.journal_mode(wanted)
            if mode != wanted:
                raise errors.SQLiteError(
                    f"cannot switch {path!r} to journal mode {wanted!r} (got {mode!r}; another "
                    "connection may have it open in another mode)"
                )
        except BaseException:
            db.close()
            raise
        self.writer = db

    def _initialise(self, db: Database) -> None:
        from zarrdb import __version__

        page_size = self.options["page_size"] or DEFAULT_PAGE_SIZE
        db.pragma("page_size", int(page_size))
        # Before the first table: takes effect only on an empty file.
        db.pragma("auto_vacuum", AUTO_VACUUM)
        # SQLite sized the cache in pages of the old size: size it again in KiB.
        db.pragma("cache_size", -int(self.options["cache_size"]))
        with db.transaction():
            facts = _format.read_facts(db)  # another process may have won the race
            if not facts.is_empty:
                _format.warn(_format.validate(facts, path=self.store_path, writable=True))
                return
            db.pragma("application_id", _format.APPLICATION_ID)
            db.executescript(_format.SCHEMA)
            for key, value in _format.initial_metadata(f"zarrdb {__version__}"):
                db.execute(
                    f"INSERT INTO {_format.METADATA_TABLE}(k, v) VALUES (?, ?)", (key, value)
                )

    def _new_reader(self) -> Database:
        """A read connection for the calling thread: one a finished thread left, or a new one."""
        db = None
        with self.readers_lock:
            while self.idle_readers and db is None:
                candidate = self.idle_readers.pop()
                if not candidate.closed:
                    db = candidate
        if db is None:
            db = self._open_reader()
            with self.readers_lock:
                self.readers.append(db)
        self._lease(db)
        return db

    def _open_reader(self) -> Database:
        opts = self.options
        if self.remote_location is not None:
            if self.remote is None:
                self.remote = _remote.open_shared(
                    self.remote_location, self.block_cache, expect_etag=self.expect_etag
                )
            return self.remote.connect(cache_size=opts["cache_size"])
        return Database(
            self.store_path,
            mode="r" if self.read_only else "w",
            immutable=opts["immutable"],
            busy_timeout=opts["busy_timeout"],
            cache_size=opts["cache_size"],
            mmap_size=opts["mmap_size"],
        )

    def _adopt_reader(self, db: Database) -> None:
        with self.readers_lock:
            self.readers.append(db)
        self._lease(db)

    def _lease(self, db: Database) -> None:
        """Make `db` the calling thread's reader until the thread ends; then it goes back to
        the idle pool (a thread's thread-local values are dropped when it ends), so threads
        that come and go do not each leave a connection open."""
        self.local.reader = db
        lease = _Lease()
        weakref.finalize(lease, _return_reader, weakref.ref(self), db).atexit = False
        self.local.lease = lease

    # --- the connection for this call ----------------------------------------------------------

    def reader(self) -> Database:
        """The calling thread's read connection."""
        db = getattr(self.local, "reader", None)
        if db is None or db.closed:
            db = self._new_reader()
        return db

    def in_transaction(self) -> bool:
        """True if the caller takes part in the open explicit transaction: the code inside the
        block and zarr's work for it (marked through the context), or zarr's codec thread pool,
        which does not carry the context along."""
        if not self.transaction_depth:
            return False
        token = _TRANSACTION.get()
        if token is not None and token is self.transaction_token:
            return True
        return threading.get_ident() in _zarr_pool_threads()

    def wait_for_transaction(self) -> None:
        """Block while an explicit transaction this thread takes no part in is open."""
        if not self.transaction_depth:
            return  # the common case, without touching the writer's lock
        with self.transaction_done:
            while self.transaction_depth and not self.in_transaction():
                # Timed: a thread zarr has just started for its pool joins that pool's list of
                # threads a moment after it starts running.
                self.transaction_done.wait(0.01)

    @contextlib.contextmanager
    def read_connection(self):
        """The connection a read uses: the writer for a thread inside the open transaction (so
        it sees the transaction's own writes), else this thread's reader."""
        if self.in_transaction():
            with self.write_lock:
                yield self.writer
        else:
            yield self.reader()

    # --- writes: group commit --------------------------------------------------------------------

    def take_batch(self) -> list[_Submission]:
        with self.pending_lock:
            batch: list[_Submission] = []
            total = 0
            while self.pending and (not batch or total + self.pending[0].nbytes <= GROUP_COMMIT_MAX_BYTES):
                sub = self.pending.pop(0)
                total += sub.nbytes
                batch.append(sub)
            return batch

    def commit(self, batch: list[_Submission], joined: bool = False) -> None:
        """Apply `batch` in one transaction (`joined`: inside the open explicit transaction),
        set each submission's error, and wake its caller."""
        if not batch:
            return
        try:
            with self.write_lock:
                try:
                    self._apply(batch, joined)
                except errors.ZarrDBError as exc:
                    if len(batch) == 1:
                        batch[0].error = exc
                    else:
                        # One caller's bad write must not fail the others: retry one by one.
                        for sub in batch:
                            try:
                                self._apply([sub], joined)
                            except errors.ZarrDBError as single:
                                sub.error = single
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
            for sub in batch:
                if sub.error is None:
                    sub.error = exc
        finally:
            for sub in batch:
                sub.resolve()

    def _apply(self, batch: list[_Submission], joined: bool) -> None:
        db = self.writer
        assert db is not None
        if not joined:
            db.begin_write()
        try:
            sets: list[tuple[str, Any]] = []
            for sub in batch:
                for kind, key, value in sub.ops:
                    if kind == "set":
                        sets.append((key, value))
                    else:
                        if sets:
                            db.set_many(sets)
                            sets = []
                        if kind == "delete":
                            db.delete(key)
                        elif kind == "delete_prefix":
                            db.delete_prefix(key)
                        elif kind == "set_if_absent":
                            db.set_if_absent(key, value)
                        else:  # pragma: no cover - internal misuse
                            raise AssertionError(kind)
            if sets:
                db.set_many(sets)
            if not joined:
                self.touch_modified_at(db, due_only=True)
        except BaseException:
            if not joined and db.in_transaction:
                db.rollback()
            raise
        if not joined:
            db.commit()

    def touch_modified_at(self, db: Database, *, due_only: bool = False) -> None:
        """Write modified_at inside the open write transaction (with `due_only`, only if the
        last write of it is MODIFIED_AT_INTERVAL old)."""
        now = time.monotonic()
        recent = self.touched_at is not None and now - self.touched_at < MODIFIED_AT_INTERVAL
        if due_only and recent:
            self.touch_skipped = True
            return
        db.execute(_format.TOUCH_MODIFIED_AT)
        self.touched_at = now
        self.touch_skipped = False

    def commit_pending(self) -> None:
        """Commit everything queued (not while an explicit transaction is open)."""
        with self.write_lock:
            while self.pending and not self.transaction_depth:
                self.commit(self.take_batch())

    def write_sync(self, sub: _Submission) -> None:
        """Queue `sub` and return once it is committed. Whoever finds the writer free commits
        everything queued so far; the others wait for their own write to be done."""
        self.wait_for_transaction()
        if self.in_transaction():
            self.commit([sub], joined=True)
        else:
            sub.event = threading.Event()
            with self.pending_lock:
                self.pending.append(sub)
            while not sub.event.is_set():
                if self.write_lock.acquire(blocking=False):
                    try:
                        if not self.transaction_depth:
                            while self.pending:
                                self.commit(self.take_batch())
                    finally:
                        self.write_lock.release()
                    # Writes queued while the lock was being released are not stranded: the
                    # loop runs again unless the queue is empty.
                    if sub.event.is_set() and not self.pending:
                        break
                    continue
                # Another thread is committing, most likely this write with it.
                sub.event.wait(0.002)
        if sub.error is not None:
            raise sub.error

    async def write_async(self, sub: _Submission) -> None:
        """Queue `sub`; the event loop commits everything queued in its next turn."""
        if self.transaction_depth and not self.in_transaction():
            await asyncio.to_thread(self.wait_for_transaction)
        if self.in_transaction():
            self.commit([sub], joined=True)
            if sub.error is not None:
                raise sub.error
            return
        loop = asyncio.get_running_loop()
        sub.loop = loop
        sub.future = loop.create_future()
        with self.pending_lock:
            self.pending.append(sub)
            schedule = not self.flush_scheduled
            self.flush_scheduled = True
        if schedule:
            loop.call_soon(self._flush, loop)
        await sub.future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        with self.pending_lock:
            self.flush_scheduled = False
        if self.flush_running or self.transaction_depth:
            # A commit in a worker thread reschedules when it finishes; the end of an explicit
            # transaction commits what was queued meanwhile.
            return
        batch = self.take_batch()
        if not batch:
            return
        if sum(sub.nbytes for sub in batch) <= INLINE_COMMIT_MAX:
            self.commit(batch)
            self._reschedule(loop)
            return
        self.flush_running = True

        def done(_: object) -> None:
            self.flush_running = False
            self._reschedule(loop)

        loop.run_in_executor(None, self.commit, batch).add_done_callback(done)

    def _reschedule(self, loop: asyncio.AbstractEventLoop) -> None:
        with self.pending_lock:
            if not self.pending or self.flush_scheduled:
                return
            self.flush_scheduled = True
        loop.call_soon(self._flush, loop)

    # --- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        if self.pid != os.getpid():
            return  # the parent's connections: not ours to touch
        with self.readers_lock:
            readers, self.readers = self.readers, []
            self.idle_readers = []
        for db in readers:
            db.close()
        writer, self.writer = self.writer, None
        if writer is not None:
            with self.write_lock:
                while self.pending:
                    self.commit(self.take_batch())
                if self.touch_skipped:
                    with contextlib.suppress(errors.ZarrDBError):
                        # Best effort: the data is committed already; a stale modified_at
                        # (which readers must not rely on) is no reason to fail closing.
                        with writer.transaction():
                            self.touch_modified_at(writer)
                _release_siblings(self)
                try:
                    writer.checkpoint("truncate")
                    writer.journal_mode("delete")
                except errors.DatabaseLockedError:
                    # Another connection still has the file open; the last one to close
                    # checkpoints it.
                    pass
                except errors.ZarrDBError as exc:
                    warnings.warn(
                        f"{self.store_path!r} stays in WAL mode: closing could not copy the "
                        f"write-ahead log into the file ({exc.__class__.__name__}: "
                        f"{getattr(exc, 'sqlite_message', exc)}). Every committed write is safe "
                        "in the -wal file beside it; open and close the store again once the "
                        "problem (e.g. a full disk) is solved to get one file.",
                        UserWarning,
                        stacklevel=3,
                    )
                finally:
                    writer.close()


class _TransactionContext:
    """`with store.transaction():` and `async with store.transaction():`.

    The code inside the block takes part in it, and so does the work zarr does for it on its own
    event-loop and codec threads (zarr's synchronous API writes from there): those writes join
    the transaction and those reads see it. Other threads' writes wait for the block to end;
    their reads see committed data only. The writer lock is held around each use of the connection, never for
    the whole block. A nested block is a savepoint: if it raises, its writes are undone."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.inner: list[Any] = []  # the engine's transaction of each level entered

    def __enter__(self) -> SQLiteStore:
        conns = self.store._connections_for_write()
        conns.wait_for_transaction()  # another thread's transaction: wait for its end
        with conns.write_lock:
            conns.wait_for_transaction()
            if conns.transaction_depth == 0:
                while conns.pending:
                    conns.commit(conns.take_batch())
                conns.transaction_token = object()
            inner = conns.writer.transaction()  # type: ignore[union-attr]
            inner.__enter__()  # BEGIN IMMEDIATE, or a savepoint when nested
            self.inner.append((inner, _TRANSACTION.set(conns.transaction_token)))
            conns.transaction_depth += 1
        return self.store

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        conns = self.store._conns
        assert conns is not None and conns.writer is not None
        with conns.write_lock:
            inner, mark = self.inner.pop()
            _TRANSACTION.reset(mark)
            try:
                if exc_type is None and conns.transaction_depth == 1:
                    try:
                        conns.touch_modified_at(conns.writer)
                    except BaseException as touch_error:
                        inner.__exit__(type(touch_error), touch_error, None)
                        raise
                inner.__exit__(exc_type, exc, tb)
            finally:
                conns.transaction_depth -= 1
                if conns.transaction_depth == 0:
                    conns.transaction_token = None
                    conns.transaction_done.notify_all()
        conns.commit_pending()  # writes of other threads that waited for the end

    async def __aenter__(self) -> SQLiteStore:
        await self.store._ensure_open()
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)


class SQLiteStore(Store):
    """A zarr v3 store that keeps a whole hierarchy in one SQLite file (SQLiteStore 1.0).

    Parameters
    ----------
    path
        The `.zarrdb` file. Opening for writing creates it when missing.
    read_only
        Open with SQLite's read-only mode: nothing is created or modified.
    durability
        "full": every commit is fsync'ed (survives power loss); "normal" (default): survives a
        crash of the process, a power loss may drop the last commits; "off": no fsync at all,
        for bulk loads that can be redone.
    page_size
        Page size in bytes for a new file (512 to 65536, a power of two; default 65536).
    busy_timeout
        Seconds to wait for another process's lock before raising DatabaseLockedError.
    immutable
        The file is on read-only media or a share and cannot change while open: read it
        without any locking (implies read_only).
    cache_size
        Page cache per connection, in KiB (default 16384).
    mmap_size
        Bytes of the file to memory-map for reads (default 256 MiB; 0 disables).
    journal
        Journal mode while open for writing. "wal" (default): readers never wait for the
        writer, but every page is written twice (log, then file). "delete": a rollback journal,
        which does not need to copy pages appended to the file, so bulk loads of large chunks
        write about twice as fast; readers wait while a commit is written. The closed file is
        in DELETE mode either way.
    storage_options
        For a URL (s3://, gs://, az://, http(s)://; read_only=True): obstore's settings for
        `obstore.store.from_url` (endpoint, region, credentials, allow_http, retry_config, ...).
    block_cache
        For a URL: the block cache, a `zarrdb.remote.BlockCache` or a dict of its fields
        (size, block_size, readahead, first_read).
    """

    supports_writes: bool = True
    supports_deletes: bool = True
    supports_listing: bool = True
    supports_consolidated_metadata: bool = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        durability: Durability = "normal",
        page_size: int | None = None,
        busy_timeout: float = 5.0,
        immutable: bool = False,
        cache_size: int | None = None,
        mmap_size: int | None = None,
        journal: Literal["wal", "delete"] = "wal",
        storage_options: Mapping[str, Any] | None = None,
        block_cache: _remote.BlockCache | Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(read_only=read_only or immutable)
        if durability not in _DURABILITY_LEVELS:
            raise ValueError(f"durability must be 'full', 'normal' or 'off', not {durability!r}")
        if journal not in ("wal", "delete"):
            raise ValueError(f"journal must be 'wal' or 'delete', not {journal!r}")
        # A remote file (read-only): a URL, or a RemoteLocation from from_object_store.
        self._remote: _remote.RemoteLocation | None = None
        self._block_cache: _remote.BlockCache | None = None
        self._expect_etag: str | None = None  # the version a pickled remote store was opened at
        if isinstance(path, _remote.RemoteLocation) or _remote.is_url(path):
            if not self.read_only:
                raise ValueError(
                    f"{str(path)!r} is a remote file: open it with read_only=True (remote "
                    "files are read-only; write a local file and upload it when closed)"
                )
            if isinstance(path, _remote.RemoteLocation):
                self._remote = path
            else:
                self._remote = _remote.RemoteLocation(path, storage_options=storage_options)
            self._block_cache = _remote.BlockCache.from_options(block_cache)
            self.path = self._remote.url
        elif storage_options is not None or block_cache is not None:
            raise ValueError("storage_options and block_cache apply to remote files (URLs) only")
        else:
            self.path = os.path.abspath(os.fspath(path))
        self._options: dict[str, Any] = {
            "durability": durability,
            "page_size": page_size,
            "busy_timeout": float(busy_timeout),
            "immutable": bool(immutable),
            "cache_size": DEFAULT_CACHE_KIB if cache_size is None else cache_size,
            "mmap_size": DEFAULT_MMAP_BYTES if mmap_size is None else mmap_size,
            "journal": journal,
        }
        self._conns: _Connections | None = None
        self._open_lock = threading.Lock()

    # --- life cycle ------------------------------------------------------------------------

    @classmethod
    def from_object_store(
        cls,
        store: Any,
        path: str,
        *,
        block_cache: _remote.BlockCache | Mapping[str, int] | None = None,
        cache_size: int | None = None,
    ) -> SQLiteStore:
        """A read-only store on the .zarrdb file at `path` in an obstore store (S3Store,
        GCSStore, AzureStore, HTTPStore, ...); it pickles with the store's configuration."""
        location = _remote.RemoteLocation(store=store, path=path)
        return cls(location, read_only=True, block_cache=block_cache, cache_size=cache_size)

    @classmethod
    async def open(cls, *args: Any, **kwargs: Any) -> Self:
        store = cls(*args, **kwargs)
        await store._open()
        return store

    async def _open(self) -> None:
        if self._is_open:
            raise ValueError("store is already open")
        self._open_sync()

    def _open_sync(self) -> _Connections:
        with self._open_lock:
            conns = self._conns
            if conns is not None and conns.pid == os.getpid() and self._is_open:
                return conns
            conns = _Connections(self)
            conns.open()
            self._conns = conns
            self._is_open = True
            _register_for_exit(self)
            return conns

    def _connections(self) -> _Connections:
        conns = self._conns
        if conns is None or conns.pid != _PID or not self._is_open:
            conns = self._open_sync()
        return conns

    def _connections_for_write(self) -> _Connections:
        self._check_writable()
        return self._connections()

    async def _ensure_open(self) -> None:
        self._connections()

    def ensure_open(self) -> None:
        """Open the file now (created if missing and writable) instead of at the first use, so
        that a missing, foreign, damaged or locked file raises here. Idempotent."""
        self._connections()

    @property
    def options(self) -> dict[str, Any]:
        """The options the store was opened with (a copy): durability, page_size,
        busy_timeout, immutable, cache_size, mmap_size, journal."""
        return dict(self._options)

    def close(self) -> None:
        """Commit what is queued, close every connection, and leave one file (DELETE mode)."""
        conns, self._conns = self._conns, None
        if conns is not None:
            conns.close()
        super().close()

    def __enter__(self) -> Self:
        return self

    def with_read_only(self, read_only: bool = False) -> SQLiteStore:
        opts = dict(self._options)
        if self._remote is not None:
            return type(self)(
                self._remote, read_only=read_only, block_cache=self._block_cache, **opts
            )
        return type(self)(self.path, read_only=read_only, **opts)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SQLiteStore)
            and self.path == other.path
            and self.read_only == other.read_only
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.path, self.read_only))

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}{', read_only=True' if self.read_only else ''})"

    def __str__(self) -> str:
        return f"sqlite://{self.path}"

    def __getstate__(self) -> dict[str, Any]:
        state = {"path": self.path, "read_only": self.read_only, "options": dict(self._options)}
        if self._remote is not None:
            # A remote store reopens at the version it has open (or was given), so that the
            # processes reading one array never mix two versions of the file.
            conns = self._conns
            opened = conns.remote if conns is not None else None
            state["remote"] = {
                "location": self._remote,
                "block_cache": self._block_cache,
                "etag": opened.etag if opened is not None else self._expect_etag,
            }
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        remote = state.get("remote")
        if remote is None:
            self.__init__(state["path"], read_only=state["read_only"], **state["options"])  # type: ignore[misc]
            return
        self.__init__(  # type: ignore[misc]
            remote["location"],
            read_only=True,
            block_cache=remote["block_cache"],
            **state["options"],
        )
        self._expect_etag = remote["etag"]

    def transaction(self) -> _TransactionContext:
        """Every write to this store inside the block is one atomic commit (rolled back if the
        block raises). Nested blocks join the outer one. Reads inside see the block's writes."""
        return _TransactionContext(self)

    # --- file-level operations (used by the command line; public API) --------------------------

    def _writer_call(self, fn):
        """Run `fn(writer)` with the writer connection, after everything queued is committed."""
        conns = self._connections_for_write()
        conns.wait_for_transaction()
        with conns.write_lock:
            if not conns.transaction_depth:
                while conns.pending:
                    conns.commit(conns.take_batch())
            return fn(conns.writer)

    def move(self, source: str, dest: str) -> int:
        """Deprecated name of `rename` (zarr's `ZipStore.move` moves the whole store instead)."""
        warnings.warn(
            "SQLiteStore.move(source, dest) is renamed SQLiteStore.rename(source, dest)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.rename(source, dest)

    def rename(self, source: str, dest: str) -> int:
        """Rename the group or array at `source` to `dest` (paths inside the hierarchy) in one
        transaction: readers see the hierarchy before or after, never between. Returns the
        number of keys moved. FileNotFoundError if `source` holds nothing; FileExistsError if
        `dest` holds something already."""
        src = _format.dir_prefix(source)
        dst = _format.dir_prefix(dest)
        if not src or not dst:
            raise errors.InvalidKeyError("cannot move the root of the hierarchy, or onto it")
        if dst.startswith(src) or src.startswith(dst):
            raise errors.InvalidKeyError(f"cannot move {source!r} into itself or its parent {dest!r}")
        _format.check_key(dst[:-1])

        def run(db: Database) -> int:
            with db.transaction():
                if not db.has_prefix(src):
                    raise FileNotFoundError(f"nothing stored at {source!r} in {self.path!r}")
                if db.has_prefix(dst):
                    raise FileExistsError(f"{dest!r} exists already in {self.path!r}")
                moved = db.rename_prefix(src, dst)
                db.execute(_format.TOUCH_MODIFIED_AT)
            return moved

        return self._writer_call(run)

    def backup(self, dest: str | os.PathLike[str]) -> None:
        """A consistent point-in-time copy of the file at `dest` (SQLite's online backup; other
        processes may keep writing meanwhile). The copy is one file in DELETE journal mode."""
        target = os.fspath(dest)
        if os.path.exists(target):
            raise FileExistsError(f"{target!r} exists already")
        with self._connections().read_connection() as db:
            db.backup_to(target)

    def vacuum(self) -> None:
        """Rebuild the file without free pages (needs about the file's size in free space)."""
        self._writer_call(lambda db: db.vacuum())

    def remote_stats(self) -> dict[str, int] | None:
        """For a remote file: its block cache's counters (requests, bytes fetched, block hits
        and misses, waits for another thread's request, failures, evictions, cached_bytes);
        None for a local file."""
        remote = self._connections().remote
        return None if remote is None else remote.stats()

    def check(self) -> list[str]:
        """Problems SQLite's integrity check finds in the file (empty when it is sound)."""
        with self._connections().read_connection() as db:
            return db.integrity_check()

    def key_sizes(self, prefix: str = "") -> list[tuple[str, int]]:
        """(key, stored length) of every key starting with `prefix`, without reading values."""
        with self._connections().read_connection() as db:
            return db.list_prefix_sizes(prefix)

    def file_info(self) -> dict[str, Any]:
        """Facts about the file: format metadata, SQLite settings, key count and stored bytes."""
        import zarrdb

        conns = self._connections()
        with conns.read_connection() as db:
            facts = _format.read_facts(db)
            info: dict[str, Any] = {
                "path": self.path,
                "file_size": conns.remote.size if conns.remote else os.path.getsize(self.path),
                "format_version": facts.metadata.get("sqlitestore_version"),
                "created_by": facts.metadata.get("created_by"),
                "modified_at": facts.metadata.get("modified_at"),
                "compatible_flags": facts.metadata.get("compatible_flags"),
                "incompatible_flags": facts.metadata.get("incompatible_flags"),
                "application_id": facts.application_id,
                "sqlite_version": zarrdb.sqlite_version,
                "page_size": db.pragma("page_size"),
                "page_count": db.pragma("page_count"),
                "freelist_count": db.pragma("freelist_count"),
                "journal_mode": db.journal_mode(),
                "keys": db.count_prefix(""),
                "stored_bytes": db.size_prefix(""),
            }
        return info

    # --- reads -------------------------------------------------------------------------------

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """Synchronous `get`, for zarr's codec worker threads."""
        if prototype is None:
            prototype = default_buffer_prototype()
        start, length = _byte_range(byte_range)
        with self._connections().read_connection() as db:
            if byte_range is None:
                data = db.get(key)
            else:
                data = db.get_range(key, start, length)
        return None if data is None else _as_buffer(prototype, data)

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        if prototype is None:
            prototype = default_buffer_prototype()
        conns = self._connections()
        if conns.in_transaction():
            return self.get_sync(key, prototype=prototype, byte_range=byte_range)
        db = conns.reader()
        if byte_range is None:
            data = db.get_limited(key, INLINE_READ_MAX)
            if type(data) is int:
                data = await asyncio.to_thread(self._get_in_thread, key)
        else:
            start, length = _byte_range(byte_range)
            if length is not None and length > INLINE_RANGE_MAX:
                data = await asyncio.to_thread(self._get_range_in_thread, key, start, length)
            else:
                data = db.get_range(key, start, length)
        return None if data is None else _as_buffer(prototype, data)

    def _get_in_thread(self, key: str) -> bytes | None:
        return self._connections().reader().get(key)

    def _get_range_in_thread(self, key: str, start: int, length: int | None) -> bytes | None:
        return self._connections().reader().get_range(key, start, length)

    def _get_ranges_sync(
        self, requests: Sequence[tuple[str, int, int | None]]
    ) -> list[bytes | None]:
        with self._connections().read_connection() as db:
            return db.get_ranges(requests)

    async def _get_ranges(
        self, requests: list[tuple[str, int, int | None]]
    ) -> list[bytes | None]:
        if len(requests) <= 4 or self._connections().in_transaction():
            return self._get_ranges_sync(requests)
        return await asyncio.to_thread(self._get_ranges_sync, requests)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        requests = [(key, *_byte_range(byte_range)) for key, byte_range in key_ranges]
        if not requests:
            return []
        values = await self._get_ranges(requests)
        return [None if v is None else _as_buffer(prototype, v) for v in values]

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncIterator[tuple[str, Buffer | None]]:
        reqs = list(requests)
        values = await self._get_ranges([(key, *_byte_range(br)) for key, _, br in reqs])
        for (key, prototype, _), value in zip(reqs, values, strict=True):
            yield key, (None if value is None else _as_buffer(prototype, value))

    async def exists(self, key: str) -> bool:
        with self._connections().read_connection() as db:
            return db.exists(key)

    async def getsize(self, key: str) -> int:
        with self._connections().read_connection() as db:
            size = db.length(key)
        if size is None:
            raise FileNotFoundError(key)
        return size

    async def getsize_prefix(self, prefix: str) -> int:
        with self._connections().read_connection() as db:
            return db.size_prefix(_format.dir_prefix(prefix))

    # --- writes ------------------------------------------------------------------------------

    def _submission(self, ops: list[tuple[str, str, Any]]) -> _Submission:
        nbytes = 0
        for kind, key, value in ops:
            if kind in ("set", "set_if_absent"):
                _format.check_key(key)
                size = value.nbytes
                if size > _format.MAX_VALUE_SIZE:
                    raise errors.ValueTooLargeError(
                        f"{self.path!r}: the value for {key!r} has {size:,} bytes, over the "
                        f"limit of {_format.MAX_VALUE_SIZE:,} bytes of a SQLiteStore file; "
                        "nothing was written (use smaller chunks or shards)",
                        code=18,
                        filename=self.path,
                    )
                nbytes += size
            nbytes += len(key)
        return _Submission(ops, nbytes)

    def set_sync(self, key: str, value: Buffer) -> None:
        """Synchronous `set`, for zarr's codec worker threads."""
        conns = self._connections_for_write()
        conns.write_sync(self._submission([("set", key, _value_view(value))]))

    def delete_sync(self, key: str) -> None:
        """Synchronous `delete`, for zarr's codec worker threads."""
        conns = self._connections_for_write()
        conns.write_sync(self._submission([("delete", key, None)]))

    async def set(self, key: str, value: Buffer) -> None:
        conns = self._connections_for_write()
        if not isinstance(value, Buffer):
            raise TypeError(
                f"SQLiteStore.set(): `value` must be a Buffer instance, not {type(value).__name__}"
            )
        await conns.write_async(self._submission([("set", key, _value_view(value))]))

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        conns = self._connections_for_write()
        await conns.write_async(self._submission([("set_if_absent", key, _value_view(value))]))

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        conns = self._connections_for_write()
        ops = [("set", key, _value_view(value)) for key, value in values]
        if ops:
            await conns.write_async(self._submission(ops))

    async def set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        """Store several (key, value) pairs; they are committed together."""
        await self._set_many(values)

    async def delete(self, key: str) -> None:
        conns = self._connections_for_write()
        await conns.write_async(self._submission([("delete", key, None)]))

    async def delete_dir(self, prefix: str) -> None:
        conns = self._connections_for_write()
        await conns.write_async(self._submission([("delete_prefix", _format.dir_prefix(prefix), None)]))

    async def clear(self) -> None:
        await self.delete_dir("")

    # --- listings ------------------------------------------------------------------------------

    async def list(self) -> AsyncIterator[str]:
        with self._connections().read_connection() as db:
            keys = db.list_keys()
        for key in keys:
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        with self._connections().read_connection() as db:
            keys = db.list_prefix(prefix)
        for key in keys:
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        with self._connections().read_connection() as db:
            children = db.list_dir(_format.dir_prefix(prefix))
        seen: set[str] = set()
        for child in children:
            name = child[:-1] if child.endswith("/") else child
            if name not in seen:  # a key and a sub-tree may share a name
                seen.add(name)
                yield name

    async def is_empty(self, prefix: str) -> bool:
        with self._connections().read_connection() as db:
            return not db.has_prefix(_format.dir_prefix(prefix))


def _zarr_pool_threads() -> set[int]:
    """Thread ids of zarr's codec thread pool (zarr 3.2+, if started). Its tasks do not carry
    the caller's context; they only ever work for zarr calls made on zarr's behalf."""
    try:
        from zarr.core import codec_pipeline
    except ImportError:
        return set()
    pool = getattr(codec_pipeline, "_pool", None)
    if pool is None:
        return set()
    return {t.ident for t in list(getattr(pool, "_threads", ())) if t.ident is not None}


# Stores still open at interpreter exit are closed, so their files are left in DELETE mode.
_open_stores: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()


def _release_siblings(closing: _Connections) -> None:
    """Close the idle connections other stores of this process hold on the same file (they
    reopen by themselves when used again), so the closing writer can leave the file in DELETE
    mode. zarr makes such stores itself, e.g. the read-only copy behind open_group(mode="r")."""
    for store in list(_open_stores):
        conns = store._conns
        if conns is None or conns is closing or conns.store_path != closing.store_path:
            continue
        if conns.pid != closing.pid or conns.transaction_depth or conns.pending:
            continue
        with conns.readers_lock:
            readers, conns.readers = conns.readers, []
        for db in readers:
            try:
                db.close()
            except errors.ConcurrentUseError:
                with conns.readers_lock:
                    conns.readers.append(db)


def _register_for_exit(store: SQLiteStore) -> None:
    _open_stores.add(store)


def _close_all() -> None:
    for store in list(_open_stores):
        with contextlib.suppress(Exception):
            store.close()


atexit.register(_close_all)
