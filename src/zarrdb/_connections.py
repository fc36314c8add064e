"""The connections of one store in one process.

- Opening: a missing file is created atomically (built in a private folder beside it and
  linked into place, so a crash leaves no file or a whole empty SQLiteStore file); an existing
  one is checked against the SQLiteStore 1.0 rules.
- Reads: each thread gets its own read connection, opened lazily; when a thread ends, its
  connection goes to the next thread that reads.
- Writes: the write connection belongs to the engine's writer thread (see _writing.py).
- Closing, on every path (close(), garbage collection of an unclosed store, interpreter exit):
  everything queued is committed, the write-ahead log is copied into the file, and the file is
  put back in DELETE journal mode, so one self-contained file remains.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from zarrdb import _format, errors
from zarrdb import remote as _remote
from zarrdb._core import Database, _library_info
from zarrdb._writing import Writing

T = TypeVar("T")

# New files get 64 KiB pages: a large value (a shard) is a chain of 16 times fewer overflow
# pages, so a byte range deep inside it is reached quickly and partial reads stay flat as shards
# grow from 1 to 16 MiB; large values also write faster (benchmarks/tunables.py).
DEFAULT_PAGE_SIZE = 65536
# New files keep a pointer map (SQLite's incremental auto-vacuum, which also lets deletes give
# free pages back): with it SQLite finds the next overflow page of a value without reading the
# current one, so a byte range near the end of a shard costs a few lookups in one hot page
# instead of touching every page of the chain. Random windows out of 4 and 16 MiB shards
# measured 5% and 8% faster; ingest of small chunks about 2% slower.
AUTO_VACUUM = "incremental"
# Page cache per connection, KiB (SQLite's default of 2 MiB holds only 31 pages of 64 KiB;
# reads mostly go through mmap, so more buys little: benchmarks/tunables.py).
DEFAULT_CACHE_KIB = 16384
# Read connections map this much of the file into memory: a value is copied straight from the
# OS page cache, and a byte range deep in a large value costs no page reads to reach.
DEFAULT_MMAP_BYTES = 256 * 1024 * 1024


def compiled_default(name: str) -> int | None:
    """A number the SQLite in use was compiled with, e.g. DEFAULT_SYNCHRONOUS (None: unknown)."""
    for option in _library_info()[2]:
        key, _, value = option.partition("=")
        if key == name and value.isdigit():
            return int(value)
    return None


# SQLite's synchronous setting when none is set: its default while the file is in a rollback
# journal (FULL, 2, in zarrdb's build and most others), its WAL default in WAL mode.
_ROLLBACK_DEFAULT_IS_FULL = (compiled_default("DEFAULT_SYNCHRONOUS") or 0) >= 2


def _synchronous(
    durability: str, journal: str
) -> Literal["off", "normal", "full", "extra"] | None:
    """PRAGMA synchronous of the write connection; None leaves it to SQLite, which then uses
    FULL while the file is in a rollback journal and NORMAL once it is in WAL mode (setup.py's
    SQLITE_DEFAULT_WAL_SYNCHRONOUS; a system SQLite may use FULL there too), following the
    writer's switch from one to the other (journal="auto").

    A power loss (tests/reliability/test_power_loss.py) showed why: with NORMAL, SQLite does
    not sync the end of a rollback journal (its truncation or deletion), so the journal can come
    back over later writes (the file truncated after VACUUM, sectors of the next journal), and
    rolling it back damaged the file; with FULL, a deleted journal can come back whole and roll
    back a commit that had returned. EXTRA is FULL plus a sync of the directory once the
    journal is deleted. In WAL mode NORMAL only loses the last commits."""
    if durability == "off":
        return "off"
    if durability == "full" or journal == "delete":
        return "extra"
    if journal == "wal":
        return "normal"
    return None if _ROLLBACK_DEFAULT_IS_FULL else "full"


# Every Connections object alive in this process, for closing siblings on the same file.
_live: weakref.WeakSet[Connections] = weakref.WeakSet()


class _Lease:
    """Held in a thread's thread-local storage while the thread uses a read connection."""

    __slots__ = ("__weakref__",)


def _return_reader(conns_ref: weakref.ref[Connections], db: Database) -> None:
    conns = conns_ref()
    if conns is None or db.closed:
        return
    with conns.readers_lock:
        if any(db is open_db for open_db in conns.readers):
            conns.idle_readers.append(db)


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
        self.local = threading.local()
        self.readers: list[Database] = []  # every open read connection
        self.idle_readers: list[Database] = []  # those whose thread has ended
        self.readers_lock = threading.Lock()
        self.writing: Writing | None = None
        self.closed = False
        _live.add(self)

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
        if not os.path.exists(path):
            _create(path, opts)
        db = Database(
            path,
            mode="c",
            busy_timeout=opts["busy_timeout"],
            cache_size=opts["cache_size"],
            synchronous=_synchronous(opts["durability"], opts["journal"]),
            cell_size_check=opts["check_pages"],
        )
        try:
            facts = _format.read_facts(db)
            if facts.is_empty:  # an empty file made by someone else: initialise it in place
                _initialise(db, opts, path)
            else:
                _format.warn(_format.validate(facts, path=path, writable=True))
            # "auto" starts with a rollback journal (TRUNCATE: no file created and deleted
            # at every commit) and the writer may move to WAL (see _writing.AUTO_WAL_AFTER);
            # a file another connection has in WAL mode already stays in it.
            wanted = {"auto": "truncate", "wal": "wal", "delete": "delete"}[opts["journal"]]
            if opts["journal"] == "auto" and db.journal_mode() == "wal":
                wanted = "wal"
            mode = db.journal_mode(wanted)
            if mode != wanted:
                raise errors.SQLiteError(
                    f"cannot switch {path!r} to journal mode {wanted!r} (got {mode!r}; another "
                    "connection may have it open in another mode)"
                )
            self.writing = Writing(db, durability=opts["durability"], journal=opts["journal"])
        except BaseException:
            db.close()
            raise

    def _open_read_only(self) -> None:
        path = self.store_path
        opts = self.options
        if self.remote_location is None and not os.path.exists(path):
            raise FileNotFoundError(f"no such SQLiteStore file: {path!r}")
        # A file a writer left in WAL mode, without its -wal/-shm files: reading it makes SQLite
        # create them, and a read-only connection cannot remove them. Remember it, to tidy up
        # at close (see _remove_sidecars_we_made).
        self.made_sidecars = (
            self.remote_location is None
            and not opts["immutable"]
            and _header_says_wal(path)
            and not any(os.path.exists(path + s) for s in ("-wal", "-shm"))
        )
        # Whose journal lies beside the file is looked at before SQLite opens it: SQLite run by
        # root gives a journal it opens the owner of the file.
        foreign = self.remote_location is None and _foreign_journal(path)
        try:
            db, notes = self._open_and_validate()
        except errors.ReadOnlyError as exc:
            if exc.extended_code != errors.SQLITE_READONLY_ROLLBACK or self.remote_location:
                raise
            # A writer stopped in the middle of a transaction and left a hot journal: reading
            # needs it rolled back first, as any connection that may write would do.
            _roll_back_hot_journal(path, opts["busy_timeout"], foreign)
            db, notes = self._open_and_validate()
        _format.warn(notes)
        with self.readers_lock:
            self.readers.append(db)
        self._lease(db)

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
        the file in DELETE mode. Idempotent; in a forked child it touches nothing."""
        if self.pid != os.getpid() or self.closed:
            return
        self.closed = True
        writing, self.writing = self.writing, None
        try:
            self._close_readers()
        finally:
            # Whatever the readers did: the writer is closed and the file left whole.
            if writing is not None:
                self._close_writer(writing)
            elif self.made_sidecars:
                _remove_sidecars_we_made(self.store_path)

    def _close_readers(self) -> None:
        """Close every read connection; one still busy in another thread after a grace
        period is interrupted (its read fails) so that the file can be left in DELETE mode.
        Raises the first one that could not be closed, once all were tried."""
        with self.readers_lock:
            readers, self.readers = self.readers, []
            self.idle_readers = []
        failed: BaseException | None = None
        for db in readers:
            try:
                _close_when_free(db)
            except errors.ConcurrentUseError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def _close_writer(self, writing: Writing) -> None:
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


# Closing waits this long (seconds) for a read still running in another thread to end before it
# interrupts it, and as long again for the interrupted read to return.
CLOSE_READ_GRACE = 5.0


def _close_when_free(db: Database, wait: float = CLOSE_READ_GRACE) -> None:
    """Close a read connection another thread may be in the middle of using (zarr's reads of
    a call that failed go on in its own thread after the caller got the error): wait for that
    read to end, interrupt it if it does not, then close."""
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


def _foreign_journal(path: str) -> bool:
    """Whether a journal beside `path` belongs to another user than the file."""
    try:
        return os.stat(path + "-journal").st_uid != os.stat(path).st_uid
    except OSError:
        return False  # no journal (the usual case)


def _roll_back_hot_journal(path: str, busy_timeout: float, foreign: bool) -> None:
    """Roll back the transaction a writer left unfinished in `path`'s journal, through a
    connection that may write (the file is not otherwise changed). Only a journal of the file's
    own owner is rolled back (`foreign`: it was another user's), and only where this process may
    write the file and its folder; otherwise ReadOnlyError names the journal and what to do."""
    journal = path + "-journal"
    folder = os.path.dirname(path) or "."
    if foreign:
        # Anyone who may create files in the folder can put a journal beside the file; rolling
        # it back would copy its pages into the file.
        why = (
            f"the journal {journal!r} beside it belongs to another user than the file, so "
            "zarrdb does not roll it back (that would copy its pages into the file). If a "
            "writer of this file crashed, the file's owner opening it once for writing rolls "
            "it back; if you did not expect the journal, remove it"
        )
    elif os.access(path, os.W_OK) and os.access(folder, os.W_OK):
        db = Database(path, mode="w", busy_timeout=busy_timeout)
        try:
            db.pragma("schema_version")  # reading rolls the journal back
        finally:
            db.close()
        return
    else:
        why = (
            f"a writer stopped in the middle of a transaction and left the journal {journal!r}, "
            "which must be rolled back first, and that needs write permission on the file and "
            "its folder. Open it once as a user who may write both (any zarrdb command does "
            f"it, e.g. `zarrdb info {path}`); do not delete a journal a crashed writer of this "
            "file left, which would leave the file damaged"
        )
    raise errors.ReadOnlyError(
        f"{path!r} cannot be read: {why}",
        code=errors.SQLITE_READONLY,
        extended_code=errors.SQLITE_READONLY_ROLLBACK,
        filename=path,
    )


def _header_says_wal(path: str) -> bool:
    """Bytes 18-19 of the SQLite header: 2, 2 for WAL mode."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[18] == 2 and head[19] == 2


def _remove_sidecars_we_made(path: str) -> None:
    """Remove the -wal and -shm files that reading a file in WAL mode made (the file's own
    writer had left none), if they hold nothing: a connection allowed to write, opened and
    closed as the last one, checkpoints nothing and deletes them; the file itself is not
    written. Where this process may not write there, they stay (SQLite then reads without
    them, in memory, and made none)."""
    if not os.path.exists(path + "-wal") or os.path.getsize(path + "-wal") != 0:
        return
    with contextlib.suppress(errors.ZarrDBError, OSError):
        db = Database(path, mode="w", busy_timeout=0)
        try:
            db.pragma("schema_version")  # joins the log, so that closing ends it
        finally:
            db.close()


def open_in_this_process(path: str) -> bool:
    """Whether a store of this process has the local file `path` open."""
    path = os.path.abspath(path)
    pid = os.getpid()
    return any(
        conns.store_path == path and conns.pid == pid and not conns.closed
        and conns.remote_location is None and (conns.readers or conns.writing is not None)
        for conns in list(_live)
    )  # fmt: skip


def _release_siblings(closing: Connections) -> None:
    """Close the idle read connections other stores of this process hold on the same file (they
    reopen by themselves when used again), so the closing writer can leave the file in DELETE
    mode. zarr makes such stores itself, e.g. the read-only copy behind open_group(mode="r")."""
    for conns in list(_live):
        if conns is closing or conns.closed or conns.store_path != closing.store_path:
            continue
        if conns.pid != closing.pid or conns.writing is not None:
            continue
        with conns.readers_lock:
            readers, conns.readers = conns.readers, []
            conns.idle_readers = []
        for db in readers:
            try:
                db.close()
            except errors.ConcurrentUseError:
                with conns.readers_lock:
                    conns.readers.append(db)


# --- creating a file -----------------------------------------------------------------------------


def _initialise(db: Database, opts: dict[str, Any], path: str) -> None:
    """Give an empty database the SQLiteStore schema and metadata, in one transaction."""
    from zarrdb import __version__

    db.pragma("page_size", int(opts["page_size"] or DEFAULT_PAGE_SIZE))
    db.pragma("auto_vacuum", AUTO_VACUUM)  # before the first table: only an empty file takes it
    # SQLite sized the cache in pages of the old size: size it again in KiB.
    db.pragma("cache_size", -int(opts["cache_size"]))

    def schema(db: Database) -> None:
        facts = _format.read_facts(db)  # another process may have won the race
        if not facts.is_empty:
            _format.warn(_format.validate(facts, path=path, writable=True))
            return
        write_schema(db, f"zarrdb {__version__}")

    db._atomic_call(schema)  # schema work on a connection no writer runs yet


def write_schema(db: Database, created_by: str, *, data_table: bool = True) -> None:
    """Make the file a SQLiteStore file inside the transaction open on `db`: the application
    id, the tables (`data_table`: the `zarr` table too), and the metadata of a new file."""
    db.pragma("application_id", _format.APPLICATION_ID)
    schema = _format.SCHEMA if data_table else _format.METADATA_SCHEMA
    db.executescript(schema)
    for key, value in _format.initial_metadata(created_by):
        db.execute(f"INSERT INTO {_format.METADATA_TABLE}(k, v) VALUES (?, ?)", (key, value))


def _create(path: str, opts: dict[str, Any]) -> None:
    """Create an empty SQLiteStore file at `path` atomically: it is built and synced in a new
    private folder in the same directory, then linked to `path` (which fails if another process
    created it meanwhile: then that file is used). A crash leaves no file at `path`, or a whole
    one; at worst a hidden folder beside it."""
    directory, name = os.path.split(path)
    # A folder only this user can enter, made exclusively under a random name: no file or
    # -journal that someone else planted at the temporary name can be opened as ours.
    folder = tempfile.mkdtemp(prefix=f".{name}.creating-", dir=directory or os.curdir)
    temporary = os.path.join(folder, name)
    try:
        db = Database(temporary, mode="c", busy_timeout=opts["busy_timeout"], synchronous="full")
        try:
            _initialise(db, opts, path)
        finally:
            db.close()
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # created by someone else meanwhile
        except OSError:
            # No hard links here (some network and FAT file systems): rename, which on POSIX
            # would replace a file created meanwhile, so check first (a small window).
            if os.path.exists(path):
                return
            os.rename(temporary, path)
        _sync_directory(directory)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sync_directory(directory: str) -> None:
    """Make a new directory entry durable (POSIX; Windows has no directory handles to sync)."""
    if os.name != "posix":
        return
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)
