"""The open file of one SQLiteStore in this process, which the store holds (composition).

The zarr adapter (store.py, its reads in _reading.py, its file operations in _file_ops.py)
reaches the file only through its session:
- `connections()`: the connections of this process (_connections.py), opened at the first use,
  and again after `close()` or in a forked child;
- `writing()`: a writable store's writer, never None (ClosedError if closed meanwhile);
- `read_pool()`: the threads every read of a remote file runs in.

Closing leaves one self-contained file on every path: `close()`, garbage collection of the
store (its session goes with it), the end of the program. At the end of the program every
session is closed for good, under its lock: a thread still writing then (zarr's event-loop
thread, a daemon, goes on after Ctrl-C has ended the main thread) gets ClosedError instead of
opening the file again beside the one being closed.

A transaction's levels keep the open file they were opened on: once it is closed, or in a
forked child, the writes of their code raise ClosedError (_transactions.check_inside) instead of
reopening the store. In a child, every lock of the sessions starts afresh: one a parent's
thread held at fork() (close() waiting for a queued write, say) would never be let go.
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
import weakref
from typing import Any

from zarrdb import _pause, errors
from zarrdb import remote as _remote
from zarrdb._connections import Connections
from zarrdb._transactions import _INSIDE, check_inside
from zarrdb._submitting import Submitter

# This process's id, kept current across fork() without a system call per store call.
_PID = os.getpid()
# Every session of this process, and whether the program is ending (no file opens any more).
_sessions: weakref.WeakSet[Session] = weakref.WeakSet()
_exiting = False
_inside = _INSIDE.get  # the transaction levels the calling code is in (usually none)


def _forked() -> None:
    global _PID
    _PID = os.getpid()
    for session in list(_sessions):
        session._lock = threading.Lock()
        session._pool = None  # its threads stayed in the parent
    _pause.point("fork.child")


def _close_all_at_exit() -> None:
    """Close every session for good. (Registered after zarr's own exit handler, so it runs
    first, while zarr's event-loop thread may still be writing.)"""
    global _exiting
    _exiting = True
    for session in list(_sessions):
        try:
            session.close()
        except Exception as exc:  # noqa: BLE001 - the other stores are closed all the same
            warnings.warn(f"closing {session.path!r} at exit failed: {exc!r}", stacklevel=1)


os.register_at_fork(after_in_child=_forked)
atexit.register(_close_all_at_exit)


class Session:
    """One store's file in this process: local (`path`) or remote (`location`)."""

    def __init__(
        self,
        path: str,
        read_only: bool,
        options: dict[str, Any],
        *,
        location: _remote.RemoteLocation | None = None,
        block_cache: _remote.BlockCache | None = None,
        accept_zarr2: bool = False,
    ) -> None:
        self.path = path
        self.read_only = read_only
        self.options = options
        self.location = location
        self.block_cache = block_cache
        self.accept_zarr2 = accept_zarr2
        self.expect_etag: str | None = None  # the version a pickled remote store was opened at
        self._conns: Connections | None = None
        self._closer: weakref.finalize[[], Session] | None = None
        self._lock = threading.Lock()
        self._pool: _remote.ReadPool | None = None  # a remote store's read threads
        # What the transaction levels of this session name as theirs (not the session itself:
        # a level kept in a context must not keep the session, and its file, alive).
        self.key = object()
        _sessions.add(self)

    @property
    def current(self) -> Connections | None:
        """The connections opened last (None before the first use and after close())."""
        return self._conns

    @property
    def is_open(self) -> bool:
        conns = self._conns
        return conns is not None and conns.pid == _PID and not conns.closed

    def open(self) -> Connections:
        """The connections of this process, opened now if they are not."""
        with self._lock:
            conns = self._conns
            if conns is not None and conns.pid == os.getpid() and not conns.closed:
                return conns
            if _exiting:
                raise errors.ClosedError(
                    f"the store {self.path!r} was closed for good: the program is ending"
                )
            remote = None
            if self.location is not None:
                assert self.block_cache is not None  # given with the location
                remote = (self.location, self.block_cache, self.expect_etag)
            conns = Connections(
                self.path, self.read_only, self.options, remote, accept_zarr2=self.accept_zarr2
            )
            conns.open()
            self._conns = conns
            # Closed like close() when the session (with its store) is garbage-collected, and
            # at interpreter exit by _close_all_at_exit, under the lock (weakref's own exit
            # handler would close it without the lock, after which a thread could open it
            # again): the file is always left whole, in DELETE mode.
            self._closer = weakref.finalize(self, conns.close)
            self._closer.atexit = False
            return conns

    def connections(self) -> Connections:
        conns = self._conns
        if conns is None or conns.pid != _PID or conns.closed:
            conns = self.open()
        return conns

    def for_write(self) -> Connections:
        """The connections, for a store that may write (zarr's error for a read-only one;
        ClosedError in a transaction level whose file was closed)."""
        if self.read_only:
            raise ValueError("store was opened in read-only mode and does not support writing")
        return self._for_write()

    def writing(self) -> Submitter:
        """The writer of this process's connections; for a writable store only (the store
        checks that first). ClosedError in a transaction level whose file was closed or is the
        parent process's; NestingError in one rolled back by the level around it."""
        conns = self._conns
        if conns is None or conns.pid != _PID or conns.closed or _inside():
            conns = self._for_write()  # (the common case, written out: one call less)
        writing = conns.writing
        if writing is None:  # a writable store's connections have one until they are closed
            raise errors.ClosedError(f"the store {self.path!r} was closed meanwhile")
        return writing

    def _for_write(self) -> Connections:
        """The connections, unless the calling code is in a transaction level that can no
        longer be written (_transactions.check_inside)."""
        conns = self._conns
        if conns is None or conns.pid != _PID or conns.closed:
            check_inside(self.key)  # such a write does not even open the store again
            conns = self.open()
        # Checked with the connections in hand: a close() from another thread before this
        # fails the check, one after it fails the write (its writer is closed); neither is
        # written into the store opened again meanwhile. (Code in no transaction level, the
        # common case, costs one look at the context.)
        if _inside():
            check_inside(self.key)
        return conns

    def read_pool(self) -> _remote.ReadPool:
        """The threads a remote store reads in (a new set after close())."""
        pool = self._pool
        if pool is None:
            with self._lock:
                pool = self._pool
                if pool is None:
                    assert self.block_cache is not None
                    pool = self._pool = _remote.ReadPool(self.block_cache.max_requests)
        return pool

    def close(self) -> None:
        """Commit what is queued, close every connection, and leave one file."""
        # Under the lock that opening takes: a connection another thread is opening meanwhile
        # is either finished first and closed here, or opened after this returns. (Were it
        # left open beside the next one, two write connections of one store could wait on
        # each other's locks: a transaction open on one, its block's writes queued on the
        # other.)
        # (A remote store's read threads are stopped after: one may be waiting for the lock.)
        _pause.point("close")
        pool = None
        try:
            with self._lock:
                closer, self._closer = self._closer, None
                conns, self._conns = self._conns, None
                pool, self._pool = self._pool, None
                if pool is not None:
                    pool.cancel()  # reads waiting for the network end now, not after timeouts
                if closer is not None:
                    # Called here, not through the finalizer: at exit, weakref's own handler
                    # may have run already, after which a finalizer does nothing.
                    closer.detach()
                if conns is not None:
                    conns.close()
        finally:
            if pool is not None:
                pool.close()
            _pause.point("close.done")
