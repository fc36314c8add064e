"""The read connections of one store in one process: each thread that reads gets its own,
opened lazily; when a thread ends, its connection goes to the next thread that reads; closing
waits for (and at last interrupts) a read still running in another thread.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

from zarrdb import _tunables, errors
from zarrdb._core import Database


class _Lease:
    """Held in a thread's thread-local storage while the thread uses a read connection."""

    __slots__ = ("__weakref__",)


def _return_reader(pool_ref: weakref.ref[ReaderPool], db: Database) -> None:
    pool = pool_ref()
    if pool is None or db.closed:
        return
    with pool.lock:
        if any(db is open_db for open_db in pool.readers):
            pool.idle.append(db)


class ReaderPool:
    """A read connection per thread, made by `connect` when a thread first reads."""

    def __init__(self, connect: Callable[[], Database]) -> None:
        self.connect = connect
        self.local = threading.local()
        self.readers: list[Database] = []  # every open read connection
        self.idle: list[Database] = []  # those whose thread has ended
        self.lock = threading.Lock()

    def reader(self) -> Database:
        """The calling thread's read connection."""
        db = getattr(self.local, "reader", None)
        if db is None or db.closed:
            db = self._next()
        return db

    def adopt(self, db: Database) -> None:
        """Make `db` (opened by the caller) one of the pool's, the calling thread's reader."""
        with self.lock:
            self.readers.append(db)
        self._lease(db)

    def _next(self) -> Database:
        """A read connection for the calling thread: one a finished thread left, or a new one."""
        db = None
        with self.lock:
            while self.idle and db is None:
                candidate = self.idle.pop()
                if not candidate.closed:
                    db = candidate
        if db is None:
            db = self.connect()
            with self.lock:
                self.readers.append(db)
        self._lease(db)
        return db

    def _lease(self, db: Database) -> None:
        """Make `db` the calling thread's reader until the thread ends; then it goes back to
        the idle pool (a thread's thread-local values are dropped when it ends), so threads
        that come and go do not each leave a connection open."""
        self.local.reader = db
        lease = _Lease()
        weakref.finalize(lease, _return_reader, weakref.ref(self), db).atexit = False
        self.local.lease = lease

    def release_idle(self) -> None:
        """Close every read connection no thread is using now (they reopen when used again)."""
        with self.lock:
            readers, self.readers = self.readers, []
            self.idle = []
        for db in readers:
            try:
                db.close()
            except errors.ConcurrentUseError:
                with self.lock:
                    self.readers.append(db)

    def close(self) -> None:
        """Close every read connection; one still busy in another thread after a grace
        period is interrupted (its read fails) so that the file can be left in DELETE mode.
        Raises the first one that could not be closed, once all were tried."""
        with self.lock:
            readers, self.readers = self.readers, []
            self.idle = []
        failed: BaseException | None = None
        for db in readers:
            try:
                _close_when_free(db)
            except errors.ConcurrentUseError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed


def _close_when_free(db: Database, wait: float | None = None) -> None:
    """Close a read connection another thread may be in the middle of using (zarr's reads of
    a call that failed go on in its own thread after the caller got the error): wait for that
    read to end, interrupt it if it does not, then close (`wait`: seconds, by default
    _tunables.CLOSE_READ_GRACE)."""
    if wait is None:
        wait = _tunables.CLOSE_READ_GRACE
    deadline = time.monotonic() + wait
    interrupted = False
    while True:
        try:
            db.close()
            return
        except errors.ConcurrentUseError:
            if time.monotonic() >= deadline:
                if interrupted:
                    raise
                db.interrupt()  # the read fails (OperationInterruptedError) and lets go
                interrupted = True
                deadline = time.monotonic() + wait
            time.sleep(0.001)
