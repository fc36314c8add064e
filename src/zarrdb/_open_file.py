"""One open file of a store in this process: `OpenFile`, the only owner of its life cycle.

An OpenFile holds everything the store has open on its file in one process: the read
connection of each thread (_readers.py), the writer (_submitting.py), a remote file and the
threads that read it, the process id, and whether it is closed, behind one lock. It goes one
way only, new -> open -> closed: a closed one (close() of the store, garbage collection of the
store, the end of the program) and one inherited by a forked child are never used again; the
store replaces them (SQLiteStore._file) with a new one, unless the program is ending or the
calling code is in a transaction level of the old one (_core.check_inside).

- Opening (_file_setup.py): a missing file is created atomically; an existing one is checked
  against the SQLiteStore 1.0 rules.
- Reads: each thread's own read connection, or the write connection while an explicit
  transaction is open.
- Writes: the write connection belongs to the engine's writer thread.
- Closing leaves one self-contained file on every path: everything queued is committed, the
  write-ahead log is copied into the file, and the file is put back in DELETE journal mode.
  Closing runs under the lock, whoever closes: at the end of the program the exit hook closes
  every open file for good, waiting for a close another thread has started (the store's
  garbage collection in a daemon thread, say), and no file opens after it.
In a forked child, every lock of the open files starts afresh (one a parent's thread held at
fork() would never be let go), and the files are the parent's: the child's stores open their
own.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from zarrdb import _format, _live_stores, _file_setup, _pause, errors
from zarrdb import remote as _remote
from zarrdb._core import (
    Database,
    Level,
    check_inside,
    give_back_free_pages,
    record_modified_at,
)
from zarrdb._readers import ReaderPool
from zarrdb._submitting import Submitter
from zarrdb._transactions import INSIDE

T = TypeVar("T")

# This process's id, kept current across fork() without a system call per store call.
_PID = os.getpid()
# Every open file of this process, and whether the program is ending (no file opens any more).
_files: weakref.WeakSet[OpenFile] = weakref.WeakSet()
_exiting = False

_NEW, _OPEN, _CLOSED = 0, 1, 2


@dataclass(frozen=True)
class FileSpec:
    """What a store opens: its file (`path`, or a remote `location`) and how."""

    path: str
    read_only: bool
    options: dict[str, Any]
    location: _remote.RemoteLocation | None = None
    block_cache: _remote.BlockCache | None = None
    accept_zarr2: bool = False  # a read-only store of a file zarr-python 2 wrote (zarr2.py)
    # What the transaction levels of the store name as theirs (not the store or its open file:
    # a level kept in a context must not keep either alive).
    key: object = field(default_factory=object, compare=False)


# Taken to replace a store's closed (or inherited) open file with a new one: rare, and short.
_replacing = threading.Lock()


def _forked() -> None:
    global _PID, _replacing
    _PID = os.getpid()
    _replacing = threading.Lock()
    for file in list(_files):
        file.lock = threading.Lock()
        file.ready = False  # the parent's: never used here
        file.read_pool = None  # its threads stayed in the parent
    _pause.point("fork.child")


def _close_all_at_exit() -> None:
    """Close every open file for good, each under its lock. (Registered after zarr's own exit
    handler, so it runs first, while zarr's event-loop thread may still be writing.)"""
    global _exiting
    _exiting = True
    _pause.point("exit")
    for file in list(_files):
        try:
            file.close()
        except Exception as exc:  # noqa: BLE001 - the other files are closed all the same
            warnings.warn(f"closing {file.path!r} at exit failed: {exc!r}", stacklevel=1)


os.register_at_fork(after_in_child=_forked)
atexit.register(_close_all_at_exit)


class OpenFile:
    """A store's file in this process: local (`spec.path`) or remote (`spec.location`)."""

    def __init__(self, spec: FileSpec, expect_etag: str | None = None) -> None:
        self.spec = spec
        self.path = self.store_path = spec.path
        self.read_only = spec.read_only
        self.options = spec.options
        self.expect_etag = expect_etag  # the version a pickled remote store was opened at
        self.pid = _PID
        self.lock = threading.Lock()
        self.state = _NEW
        # Open, and this process's: what every call of the store looks at first.
        self.ready = False
        self.readers = ReaderPool(self._open_reader)
        self.submitter: Submitter | None = None
        self.remote: _remote.RemoteObject | None = None
        self.read_pool: _remote.ReadPool | None = None  # a remote file's read threads
        self.made_sidecars = False
        # Closes it when its store is garbage-collected (set by the store; detached on close).
        self.finalizer: weakref.finalize[Any, Any] | None = None
        _files.add(self)
        _live_stores.register(self)

    @property
    def closed(self) -> bool:
        """Closed, or inherited from the parent process (never used again either way)."""
        return self.state == _CLOSED or self.pid != _PID

    @property
    def reusable(self) -> bool:
        """Not closed and of this process: the store may go on using it (open or not)."""
        return self.state != _CLOSED and self.pid == _PID

    # --- opening ----------------------------------------------------------------------------

    def open(self) -> OpenFile:
        """This file, opened now if it is not yet; ClosedError if it was closed meanwhile (a
        closed file never opens again: the store makes a new one)."""
        if self.ready:
            return self
        with self.lock:
            if self.state == _OPEN and self.pid == _PID:
                return self
            if self.state == _CLOSED or self.pid != _PID:
                raise errors.ClosedError(f"the store {self.path!r} was closed meanwhile")
            if _exiting:
                raise errors.ClosedError(
                    f"the store {self.path!r} was closed for good: the program is ending"
                )
            self._open()
            self.state = _OPEN
            self.ready = True
        return self

    def _open(self) -> None:
        path = self.path
        opts = self.options
        if self.spec.location is None and os.path.isdir(path):
            raise errors.CantOpenError(
                f"{path!r} is a directory; a SQLiteStore is a single file (for a directory "
                "of chunk files use zarr.storage.LocalStore)",
                code=errors.SQLITE_CANTOPEN,
                filename=path,
            )
        if self.read_only:
            self._open_read_only()
            return
        db = _file_setup.open_writable(path, opts)
        try:
            self.submitter = Submitter(db, durability=opts["durability"], journal=opts["journal"])
        except BaseException:
            db.close()
            raise

    def _open_read_only(self) -> None:
        path = self.path
        opts = self.options
        local = self.spec.location is None
        if local and not os.path.exists(path):
            raise FileNotFoundError(f"no such SQLiteStore file: {path!r}")
        # Whose journal lies beside the file is looked at before SQLite opens it: SQLite run by
        # root gives a journal it opens the owner of the file.
        foreign = local and _file_setup.foreign_journal(path)
        try:
            db, notes = self._open_and_validate()
        except errors.ReadOnlyError as exc:
            if exc.extended_code != errors.SQLITE_READONLY_ROLLBACK or not local:
                raise
            # A writer stopped in the middle of a transaction and left a hot journal: reading
            # needs it rolled back first, as any connection that may write would do.
            _file_setup.roll_back_hot_journal(path, opts["busy_timeout"], foreign)
            db, notes = self._open_and_validate()
        # A file a writer left in WAL mode, without its -wal/-shm files: reading it makes SQLite
        # create them, and a read-only connection cannot remove them. Remember it, to tidy up
        # at close (see _file_setup.remove_sidecars_we_made). What was beside the file and its
        # header come from the connection's opening (read through SQLite's own handle: closing
        # another descriptor of the file would drop every POSIX lock this process holds on it).
        self.made_sidecars = (
            local
            and not opts["immutable"]
            and db.beside is not None
            and not {"-wal", "-shm"} & db.beside.sizes.keys()
            and db.header[18:20] == b"\x02\x02"
        )
        _format.warn(notes)
        self.readers.adopt(db)

    def _open_and_validate(self) -> tuple[Database, list[str]]:
        """A read connection and the notes of checking the file against the format."""
        db = self._open_reader()
        try:
            return db, _format.validate(
                _format.read_facts(db),
                path=self.path,
                writable=False,
                accept_zarr2=self.spec.accept_zarr2,
            )
        except BaseException:
            db.close()
            raise

    def _open_reader(self) -> Database:
        opts = self.options
        location = self.spec.location
        if location is not None:
            assert self.spec.block_cache is not None  # given with the location
            if self.remote is None:
                self.remote = _remote.open_shared(
                    location, self.spec.block_cache, expect_etag=self.expect_etag
                )
            return self.remote.connect(cache_size=opts["cache_size"])
        return Database(
            self.path,
            mode="r" if self.read_only else "w",
            immutable=opts["immutable"],
            busy_timeout=opts["busy_timeout"],
            cache_size=opts["cache_size"],
            mmap_size=opts["mmap_size"],
            cell_size_check=opts["check_pages"],
        )

    # --- the connection for this call ---------------------------------------------------------

    def reader(self) -> Database:
        """The calling thread's read connection."""
        return self.readers.reader()

    def read_threads(self) -> _remote.ReadPool:
        """The threads a remote file is read in (made at the first use, before opening: the
        opening request runs in one of them)."""
        pool = self.read_pool
        if pool is None:
            with self.lock:
                pool = self.read_pool
                if pool is None:
                    if self.state == _CLOSED:
                        raise errors.ClosedError(f"the store {self.path!r} was closed meanwhile")
                    assert self.spec.block_cache is not None
                    pool = self.read_pool = _remote.ReadPool(self.spec.block_cache.max_requests)
        return pool

    def holds_local_file(self) -> bool:
        """A connection to a local file is open (a reader, or the writer)."""
        return self.spec.location is None and (
            bool(self.readers.readers) or self.submitter is not None
        )

    def in_transaction(self) -> bool:
        """An explicit transaction is open on this file: reads go to its connection."""
        return self.submitter is not None and self.submitter.in_transaction()

    def read_with(self, fn: Callable[[Database], T]) -> T:
        """`fn(db)` on the connection a read uses: while an explicit transaction is open, the
        write connection once the writes queued before the read are written (the store object
        is the session: its reads see the transaction's writes), else this thread's reader."""
        submitter = self.submitter
        if submitter is not None and submitter.in_transaction():
            return submitter.call_holding(fn)
        return fn(self.reader())

    def write_with(self, fn: Callable[[Database], T]) -> T:
        """`fn(db)` on the write connection, once everything queued is written (for
        maintenance; inside an open explicit transaction, the work is part of it)."""
        submitter = self.submitter
        if submitter is None:
            raise errors.ClosedError(f"the store {self.path!r} was closed meanwhile")
        return submitter.call_holding(fn)

    # --- closing --------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit what is queued, close every connection, and leave one file. Under the lock
        that opening takes: a file another thread is opening meanwhile is opened first and
        closed here. Idempotent; a file inherited by a forked child is only marked closed
        (its connections are the parent's). Also the store's finalizer."""
        _pause.point("close")
        pool = None
        try:
            with self.lock:
                _pause.point("connections.close")
                was, self.state, self.ready = self.state, _CLOSED, False
                finalizer, self.finalizer = self.finalizer, None
                if finalizer is not None:
                    finalizer.detach()  # (its store may live on, with a new open file)
                pool, self.read_pool = self.read_pool, None
                if pool is not None:
                    pool.cancel()  # reads waiting for the network end now, not after timeouts
                if was == _OPEN and self.pid == _PID:
                    self._close_connections()
        finally:
            # (After the lock: a read thread may be waiting for it.)
            if pool is not None and self.pid == _PID:
                pool.close()
            _pause.point("close.done")

    def _close_connections(self) -> None:
        submitter, self.submitter = self.submitter, None
        try:
            self.readers.close()
        finally:
            # Whatever the readers did: the writer is closed and the file left whole.
            if submitter is not None:
                self._close_writer(submitter)
            elif self.made_sidecars:
                _file_setup.remove_sidecars_we_made(self.path)

    def _close_writer(self, submitter: Submitter) -> None:
        """Commit what is queued, stop the writer thread, give back free pages, and leave the
        file in DELETE mode; the write connection is closed whatever fails."""
        db = submitter.db
        busy = switched = False
        try:
            # Commits everything queued, stops the thread, and discards an explicit
            # transaction whose block has not ended.
            submitter.close()
            with contextlib.suppress(errors.ZarrDBError):
                # What a delete freed and the writer had no time to give back yet.
                give_back_free_pages(db)
            if submitter.writer.touch_skipped:
                with contextlib.suppress(errors.ZarrDBError):
                    # Best effort: the data is committed already; a stale modified_at (which
                    # readers must not rely on) is no reason to fail closing.
                    record_modified_at(db)
            _release_siblings(self)
            try:
                db.checkpoint("truncate")
                switched = _file_setup.switch_to_delete(db)
            except errors.DatabaseLockedError:
                # Another connection still has the file open: tried again once this one is
                # closed (that one may be closing too, and find this one open).
                busy = True
            except errors.ZarrDBError as exc:
                warnings.warn(
                    f"{self.path!r} stays in WAL mode: closing could not copy the "
                    f"write-ahead log into the file ({exc.__class__.__name__}: "
                    f"{getattr(exc, 'sqlite_message', '') or exc}). Every committed write is safe "
                    "in the -wal file beside it; open and close the store again once the "
                    "problem (e.g. a full disk) is solved to get one file.",
                    UserWarning,
                    stacklevel=4,
                )
        finally:
            _pause.point("close.switched")
            db.close()
        if busy or (switched and _file_setup.log_beside(self.path)):
            _file_setup.leave_one_file(self.path, self.options)


def _release_siblings(closing: OpenFile) -> None:
    """Close the idle read connections other stores of this process hold on the same file (they
    reopen by themselves when used again), so the closing writer can leave the file in DELETE
    mode. zarr makes such stores itself, e.g. the read-only copy behind open_group(mode="r")."""
    for file in _live_stores.others_on_the_same_file(closing):
        if file.submitter is None:
            file.readers.release_idle()


class OpenFileHolder:
    """What a store does with its open file (a mixin of SQLiteStore): it holds one OpenFile
    (`_open_file`) and asks it once per call."""

    path: str
    _spec: FileSpec
    _expect_etag: str | None
    _open_file: OpenFile

    def _check_writes(self) -> None:
        """Raise ValueError, as zarr's own stores do, if the store was opened read-only."""
        if self._spec.read_only:
            raise ValueError("store was opened in read-only mode and does not support writing")

    def _new_file(self) -> OpenFile:
        file = OpenFile(self._spec, self._expect_etag)
        # Closed like close() when the store is garbage-collected, and at interpreter exit by
        # the exit hook, under its lock (weakref's own exit handler would close it without it).
        file.finalizer = weakref.finalize(self, file.close)
        file.finalizer.atexit = False
        return file

    def _current_file(self) -> OpenFile:
        """This process's open file of the store, opened or not: a closed one, or the parent
        process's, is replaced by a new one (ClosedError once the program is ending)."""
        file = self._open_file
        if not file.reusable:
            # (Two threads may both find it closed: the second takes the first one's new file.)
            with _replacing:
                file = self._open_file
                if not file.reusable:
                    if _exiting:
                        raise errors.ClosedError(
                            f"the store {self.path!r} was closed for good: the program is ending"
                        )
                    file = self._open_file = self._new_file()
        return file

    def _file(self) -> OpenFile:
        """This process's open file of the store, opened now if it is not."""
        file = self._open_file
        return file if file.ready else self._current_file().open()

    def _file_for_write(self) -> OpenFile:
        """The open file, unless the calling code is in a transaction level that can no longer
        be written (zarrdb._core.check_inside): such a write does not even open the store
        again."""
        return self._checked_file(INSIDE.get())[0]

    def _checked_file(self, inside: tuple[Level, ...]) -> tuple[OpenFile, int]:
        """_file_for_write for code working inside the levels `inside`, and the serial of the
        one of this store it writes in (0: none)."""
        file = self._open_file
        if not file.ready:
            if inside and not file.reusable:
                check_inside(inside, self._spec.key)
            file = self._current_file().open()
        # Checked with the file in hand: a close() from another thread before this fails the
        # check, one after it fails the write (its writer is closed); neither is written into
        # the file opened again meanwhile. A level keeps the writer it was opened on: one
        # whose file close() has marked closed, though its writer is not closed yet, is over
        # too (the write would go, plain, to the file opened again).
        if not inside:
            return file, 0
        submitter = file.submitter
        return file, check_inside(inside, self._spec.key, submitter.writer if submitter else None)

    def _write_target(self) -> tuple[Submitter, int]:
        """The writer of the open file, and the serial of the transaction level of this store
        the calling code writes in (0: none; the writer queues the write only while that level
        is the innermost open one). For a writable store only (the store checks that first).
        ClosedError in a transaction level whose file was closed or is the parent process's;
        NestingError in one rolled back by the level around it or ended. (Code in no
        transaction level, the common case, costs one look at the context.)"""
        file = self._open_file
        inside = INSIDE.get()
        level = 0
        if not file.ready:
            file, level = self._checked_file(inside)
            submitter = file.submitter
        else:
            submitter = file.submitter
            if inside:  # (_checked_file's check, inline: it runs for every write in a level)
                level = check_inside(
                    inside, self._spec.key, submitter.writer if submitter is not None else None
                )
        if submitter is None:  # a writable store's open file has one until it is closed
            raise errors.ClosedError(f"the store {self.path!r} was closed meanwhile")
        return submitter, level

    def _submitter(self) -> Submitter:
        """The writer of the open file (_write_target's, without the level)."""
        file = self._open_file
        if file.ready and not INSIDE.get():  # (the common case, without a tuple)
            submitter = file.submitter
            if submitter is not None:
                return submitter
        return self._write_target()[0]
