"""The connections of one store in one process, and where each call goes.

- Opening (_opening.py): a missing file is created atomically; an existing one is checked
  against the SQLiteStore 1.0 rules.
- Reads: each thread's own read connection (_readers.py), or the write connection while an
  explicit transaction is open.
- Writes: the write connection belongs to the engine's writer thread (see _submitting.py).
- Closing, on every path (close(), garbage collection of an unclosed store, interpreter exit):
  everything queued is committed, the write-ahead log is copied into the file, and the file is
  put back in DELETE journal mode, so one self-contained file remains.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from zarrdb import _format, _open_files, _opening, _pause, errors
from zarrdb import remote as _remote
from zarrdb._core import Database
from zarrdb._readers import ReaderPool
from zarrdb._submitting import Submitter

T = TypeVar("T")

class Connections:
    """The connections of one store in one process."""

    def __init__(
        self,
        path: str,
        read_only: bool,
        options: dict[str, Any],
        remote: tuple[_remote.RemoteLocation, _remote.BlockCache, str | None] | None = None,
        *,
        accept_zarr2: bool = False,
    ) -> None:
        self.store_path = path
        # A read-only store of a file zarr-python 2's SQLiteStore wrote (zarrdb.zarr2).
        self.accept_zarr2 = accept_zarr2
        # A remote file: where it is (location, block cache options, the version to expect),
        # and once open, the file itself (its version pinned, its block cache shared by the
        # read connections of every thread).
        self.remote_location: _remote.RemoteLocation | None = None
        self.block_cache: _remote.BlockCache | None = None
        self.expect_etag: str | None = None
        if remote is not None:
            self.remote_location, self.block_cache, self.expect_etag = remote
        self.remote: _remote.RemoteObject | None = None
        self.made_sidecars = False
        self.options = options
        self.read_only = read_only
        self.pid = os.getpid()
        self.pool = ReaderPool(self._open_reader)
        self.writing: Submitter | None = None
        self.closed = False
        _open_files.register(self)

    # --- opening --------------------------------------------------------------------------

    def open(self) -> None:
        path = self.store_path
        opts = self.options
        if self.remote_location is None and os.path.isdir(path):
            raise errors.CantOpenError(
                f"{path!r} is a directory; a SQLiteStore is a single file (for a directory "
                "of chunk files use zarr.storage.LocalStore)",
                code=errors.SQLITE_CANTOPEN,
                filename=path,
            )
        if self.read_only:
            self._open_read_only()
            return
        db = _opening.open_writable(path, opts)
        try:
            self.writing = Submitter(db, durability=opts["durability"], journal=opts["journal"])
        except BaseException:
            db.close()
            raise

    def _open_read_only(self) -> None:
        path = self.store_path
        opts = self.options
        if self.remote_location is None and not os.path.exists(path):
            raise FileNotFoundError(f"no such SQLiteStore file: {path!r}")
        # Whose journal lies beside the file is looked at before SQLite opens it: SQLite run by
        # root gives a journal it opens the owner of the file.
        foreign = self.remote_location is None and _opening.foreign_journal(path)
        try:
            db, notes = self._open_and_validate()
        except errors.ReadOnlyError as exc:
            if exc.extended_code != errors.SQLITE_READONLY_ROLLBACK or self.remote_location:
                raise
            # A writer stopped in the middle of a transaction and left a hot journal: reading
            # needs it rolled back first, as any connection that may write would do.
            _opening.roll_back_hot_journal(path, opts["busy_timeout"], foreign)
            db, notes = self._open_and_validate()
        # A file a writer left in WAL mode, without its -wal/-shm files: reading it makes SQLite
        # create them, and a read-only connection cannot remove them. Remember it, to tidy up
        # at close (see _opening.remove_sidecars_we_made). What was beside the file and its
        # header come from the connection's opening (read through SQLite's own handle: closing
        # another descriptor of the file would drop every POSIX lock this process holds on it).
        self.made_sidecars = (
            self.remote_location is None
            and not opts["immutable"]
            and db.beside is not None
            and not {"-wal", "-shm"} & db.beside.sizes.keys()
            and db.header[18:20] == b"\x02\x02"
        )
        _format.warn(notes)
        self.pool.adopt(db)

    def _open_and_validate(self) -> tuple[Database, list[str]]:
        """A read connection and the notes of checking the file against the format."""
        db = self._open_reader()
        try:
            return db, _format.validate(
                _format.read_facts(db),
                path=self.store_path,
                writable=False,
                accept_zarr2=self.accept_zarr2,
            )
        except BaseException:
            db.close()
            raise

    def _open_reader(self) -> Database:
        opts = self.options
        if self.remote_location is not None:
            assert self.block_cache is not None  # given with the location
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
            cell_size_check=opts["check_pages"],
        )

    # --- the connection for this call ----------------------------------------------------------

    def reader(self) -> Database:
        """The calling thread's read connection."""
        return self.pool.reader()

    def holds_local_file(self) -> bool:
        """A connection to a local file is open (a reader, or the writer)."""
        return self.remote_location is None and (
            bool(self.pool.readers) or self.writing is not None
        )

    def in_transaction(self) -> bool:
        """An explicit transaction is open on this store: reads go to its connection."""
        return self.writing is not None and self.writing.in_transaction()

    def read_with(self, fn: Callable[[Database], T]) -> T:
        """`fn(db)` on the connection a read uses: while an explicit transaction is open, the
        write connection once the writes queued before the read are written (the store object
        is the session: its reads see the transaction's writes), else this thread's reader."""
        if self.writing is not None and self.writing.in_transaction():
            return self.writing.call_holding(fn)
        return fn(self.reader())

    def write_with(self, fn: Callable[[Database], T]) -> T:
        """`fn(db)` on the write connection, once everything queued is written (for
        maintenance; inside an open explicit transaction, the work is part of it)."""
        writing = self.writing
        assert writing is not None
        return writing.call_holding(fn)

    # --- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection of this process; a writer commits what is queued and leaves
        the file in DELETE mode. Idempotent; in a forked child it touches nothing. (Also the
        exit hook: a weakref.finalize of the session.)"""
        _pause.point("connections.close")
        if self.pid != os.getpid() or self.closed:
            return
        self.closed = True
        writing, self.writing = self.writing, None
        try:
            self.pool.close()
        finally:
            # Whatever the readers did: the writer is closed and the file left whole.
            if writing is not None:
                self._close_writer(writing)
            elif self.made_sidecars:
                _opening.remove_sidecars_we_made(self.store_path)

    def _close_writer(self, writing: Submitter) -> None:
        """Commit what is queued, stop the writer thread, give back free pages, and leave the
        file in DELETE mode; the write connection is closed whatever fails."""
        db = writing.db
        try:
            # Commits everything queued, stops the thread, and discards an explicit
            # transaction whose block has not ended.
            writing.close()
            with contextlib.suppress(errors.ZarrDBError):
                # What a delete freed and the writer had no time to give back yet.
                if db.pragma("auto_vacuum") == 2 and db.pragma("freelist_count"):
                    db.execute("PRAGMA incremental_vacuum")
            if writing.writer.touch_skipped:
                with contextlib.suppress(errors.ZarrDBError):
                    # Best effort: the data is committed already; a stale modified_at (which
                    # readers must not rely on) is no reason to fail closing. One statement:
                    # its own transaction.
                    db.execute(_format.TOUCH_MODIFIED_AT)
            _release_siblings(self)
            try:
                db.checkpoint("truncate")
                db.journal_mode("delete")
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
                    stacklevel=4,
                )
        finally:
            db.close()


def _release_siblings(closing: Connections) -> None:
    """Close the idle read connections other stores of this process hold on the same file (they
    reopen by themselves when used again), so the closing writer can leave the file in DELETE
    mode. zarr makes such stores itself, e.g. the read-only copy behind open_group(mode="r")."""
    for conns in _open_files.others_on_the_same_file(closing):
        if conns.writing is None:
            conns.pool.release_idle()
