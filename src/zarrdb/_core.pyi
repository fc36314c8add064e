"""Type stubs for zarrdb._core, the engine under SQLiteStore (knows nothing of zarr)."""

import os
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias, TypeVar, overload

from typing_extensions import Buffer, disjoint_base

_T = TypeVar("_T")

BUNDLED_SQLITE: bool
REMOTE_VFS: str  # "zarrdb-remote", the read-only VFS of RemoteFile
MAX_VALUE_SIZE: int  # 2_147_483_645, the spec's limit for one value
CONNECTION_LIMITS: dict[str, tuple[int, int]]  # name -> (SQLITE_LIMIT_ id, value)

def library_info() -> tuple[str, str, tuple[str, ...]]: ...
def give_back_free_pages(db: Database) -> None:
    """Give the pages deletes freed back to the file system (incremental auto-vacuum)."""
def record_modified_at(db: Database) -> None:
    """Write the file's modification time."""

@disjoint_base
class TransactionLevels:
    """The levels one transaction object entered, innermost last, and its compiled __exit__."""

    def __init__(self) -> None: ...
    @property
    def levels(self) -> list[Level]: ...
    def list_level(self, level: Level) -> None: ...
    def unlist_level(self, level: Level) -> None: ...
    def take_innermost(self) -> Level: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

def check_inside(
    inside: tuple[Level, ...], owner: object, writer: Writer | None = None
) -> int:
    """The serial of the level of `owner` that code inside `inside` writes in (0: none);
    raises ClosedError or NestingError if that level can no longer be written."""

@disjoint_base
class Level:
    """One level of an explicit transaction, on the writer it was opened on (for good)."""

    def __new__(cls, writer: Writer, owner: object = None) -> Self: ...
    @property
    def writer(self) -> Writer: ...
    @property
    def owner(self) -> object: ...
    @property
    def token(self) -> int: ...
    @property
    def depth(self) -> int: ...
    @property
    def serial(self) -> int: ...
    mark: Any
    def unmark(self) -> None:
        """Take the level off the list of the context that entered it."""
    @property
    def is_open(self) -> bool:
        """Opened, and its block has not ended it."""
    @property
    def undone(self) -> bool:
        """Rolled back because the level around it ended first; its block has not ended."""
    @property
    def usable(self) -> bool:
        """Its writer can still be written: not closed, and of this process."""

@disjoint_base
class _Atomic:
    """Context manager from Database._atomic(): the outermost level is BEGIN IMMEDIATE ..
    COMMIT, inner levels are savepoints; an exception rolls back that level and propagates."""

    def __enter__(self) -> Database: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

FACT_QUERIES: dict[str, str]  # the statements that read what a file is, by name

class _FileStatements:
    """The SQL the Python layer needs of a file, by name (_file_statements.pxi)."""

    def atomic_call(self, fn: Callable[[Database], _T]) -> _T:
        """`fn(self)` as one unit, as _atomic_call: the name the Python layer calls."""

    def schema_objects(self) -> list[tuple[Any, ...]]: ...
    def table_columns(self, table: str) -> list[tuple[Any, ...]]: ...
    def column_kinds(self, table: str) -> list[tuple[Any, ...]]: ...
    def index_computes_expression(self, index: str) -> bool: ...
    def index_is_partial(self, table: str, index: str) -> bool: ...
    def metadata_records(self) -> list[tuple[Any, ...]]: ...
    def write_schema(
        self, records: Iterable[tuple[str, str]], *, data_table: bool = True
    ) -> None: ...
    def touch_modified_at(self) -> None: ...
    def incremental_vacuum(self) -> None: ...
    def put_value(self, key: str, value: Buffer) -> None: ...
    def delete_value(self, key: str) -> None: ...
    def rows_with_null(self) -> tuple[int, str | None]: ...
    def mistyped_row(self) -> tuple[str, str] | None: ...
    def set_zarr2_table_aside(self) -> None: ...
    def move_zarr2_rows(self) -> None: ...


@disjoint_base
class Database(_FileStatements):
    """One SQLite connection to a file with a `zarr(k TEXT PRIMARY KEY, v BLOB)` table.

    Used by one thread at a time (simultaneous use raises ConcurrentUseError); never usable in
    a child process after fork (ForkedProcessError). Every SQLite call runs without the GIL.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: Literal["r", "w", "c"] = "c",
        uri: bool = False,
        immutable: bool = False,
        busy_timeout: float | None = None,
        page_size: int | None = None,
        cache_size: int | None = None,
        mmap_size: int | None = None,
        synchronous: Literal["off", "normal", "full", "extra"] | None = None,
        journal_mode: Literal["delete", "truncate", "persist", "memory", "wal", "off"]
        | None = None,
        vfs: str | None = None,
        cell_size_check: bool = False,
    ) -> None:
        """mode: "r" read-only, "w" read-write (file must exist), "c" read-write, created if
        missing. uri: path is a `file:` URI. immutable: read-only media, no locking (implies
        "r"). busy_timeout in seconds. page_size applies to new files only. cache_size in KiB.
        mmap_size in bytes (0 = off). vfs: the name of an SQLite VFS (default: the OS's).
        cell_size_check: SQLite checks each page's cells as it loads the page (files from
        others; costs a few microseconds per lookup with memory mapping)."""

    @property
    def path(self) -> str: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def beside(self) -> Any: ...
    @property
    def header(self) -> bytes: ...
    @property
    def closed(self) -> bool: ...
    @property
    def in_transaction(self) -> bool: ...
    @property
    def busy_timeout(self) -> float: ...
    def note_lock_waits(self) -> None:
        """Log the waits for locks this connection's writer thread made since the last ones
        logged (read without the lock: the writer thread counts them without the GIL)."""
    def interrupt(self) -> None:
        """Make the statement another thread is running on this connection stop at once (it
        raises OperationInterruptedError); callable from any thread."""

    def close(self) -> None:
        """Close the connection; idempotent. In a forked child it only forgets the handle."""

    def __enter__(self) -> Self: ...
    def __exit__(self, *exc_info: object) -> None: ...

    # reads ---------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None: ...
    def get_limited(self, key: str, limit: int) -> bytes | int | None:
        """The value if at most `limit` bytes long; otherwise its length (nothing read); None
        if the key is missing."""

    def get_into(self, key: str, out: Buffer) -> int | None:
        """Copy the value into the writable buffer `out`; returns its length, or None if the
        key is missing. ValueError (nothing copied) if `out` is smaller than the value. A test
        hook: NotImplementedError outside test builds (ZARRDB_TEST_VFS=1)."""

    def get_range(self, key: str, start: int, length: int | None) -> bytes | None:
        """Bytes [start, start+length) of the value, clamped to its end; length None: to the
        end; start < 0: the last -start bytes (suffix). A start past the end gives b""."""

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]: ...
    def get_ranges(
        self, requests: Sequence[tuple[str, int, int | None]]
    ) -> list[bytes | None]: ...
    def exists(self, key: str) -> bool: ...
    def length(self, key: str) -> int | None: ...

    # listings ------------------------------------------------------------------------
    def list_keys(self) -> list[str]: ...
    def list_prefix(self, prefix: str) -> list[str]:
        """Keys that start with `prefix`, in BINARY (UTF-8 byte) order."""

    def list_dir(self, prefix: str) -> list[str]:
        """Children of `prefix` ("" or ending in "/"), relative to it, sorted: a stored key as
        its name, a sub-tree as its name with a trailing "/". One index seek per child."""

    def has_prefix(self, prefix: str) -> bool:
        """True if any key starts with `prefix` (one index seek)."""

    def list_prefix_sizes(self, prefix: str) -> list[tuple[str, int]]:
        """(key, value length) for keys starting with `prefix`; values are not read."""

    def rename_prefix(self, old: str, new: str) -> int:
        """Move every key starting with `old` to start with `new`, atomically; returns the
        count. ConstraintError (nothing moved) if a new key exists. Maintenance, run on the
        connection Writer.call_holding() hands over."""

    def size_prefix(self, prefix: str) -> int: ...
    def count_prefix(self, prefix: str) -> int: ...

    # schema and maintenance work (keys are written by a Writer) ---------------------------
    def _atomic(self) -> _Atomic:
        """The block's statements as one unit (BEGIN IMMEDIATE .. COMMIT, or a savepoint inside
        the open transaction), for creating a file and for maintenance on a connection no
        writer runs or that Writer.call_holding() handed over."""

    def _atomic_call(self, fn: Callable[[Database], _T]) -> _T:
        """`fn(self)` as one unit (as _atomic), begun and committed (or rolled back if `fn`
        raises) inside one compiled call: the form for Python code (see Writer.call_holding)."""

    # maintenance and plain SQL -----------------------------------------------------------
    def checkpoint(
        self, mode: Literal["passive", "full", "restart", "truncate"] = "passive"
    ) -> tuple[int, int]: ...
    def journal_mode(self, mode: str | None = None) -> str: ...
    def integrity_check(self, max_errors: int = 100) -> list[str]:
        """SQLite's integrity check; an empty list when the file is sound."""

    def vacuum(self) -> None: ...
    def backup_to(self, path: str | os.PathLike[str], *, pages_per_step: int = -1) -> None:
        """A consistent copy through SQLite's online backup API; the copy is left in DELETE
        journal mode. pages_per_step -1 copies in one step (one snapshot)."""

    def limits(self) -> dict[str, int]: ...
    def set_limit(self, name: str, value: int) -> int: ...
    def length_limit(self, value: int = -1) -> int:
        """SQLITE_LIMIT_LENGTH before setting it to `value` (>= 0). A test hook:
        NotImplementedError outside test builds (ZARRDB_TEST_VFS=1)."""

    def pragma(self, name: str, value: int | str | None = None) -> Any: ...
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...
    def executescript(self, sql: str) -> None: ...



# The writer (_writer.pxi) -------------------------------------------------------------------

# One write: (kind, key, value), kind "set", "set_if_absent", "delete" or "delete_prefix"
# (value None for the deletes).
_Op: TypeAlias = tuple[str, str, Buffer | None]

@disjoint_base
class Submission:
    """One caller's writes, queued on a Writer. `future` is the caller's (the store settles it
    when the submission comes out of its Port)."""

    future: Any
    expect_level: int

    @property
    def done(self) -> bool: ...
    @property
    def nbytes(self) -> int:
        """The bytes it counts for in the queue (its values and keys)."""

    @property
    def joined(self) -> bool:
        """The submission joined the store's open explicit transaction when it was queued."""

    @property
    def changes(self) -> int:
        """Rows the submission wrote or deleted (once done)."""

    def wait(self) -> None:
        """Block (GIL released) until the writer is done with this submission; raise its error
        if it failed."""

    def collect(self) -> BaseException | None:
        """Once done: release the buffers and return the error (None if it succeeded)."""

    def error(self) -> BaseException | None:
        """The exception for a failed submission (None if it succeeded or is not done)."""
    def error_at(self, index: int) -> BaseException | None:
        """As error(), for the caller of operation `index` of an event loop's burst."""

@disjoint_base
class Port:
    """Where the writer reports finished submissions for one event loop: `fileno()` becomes
    readable (watch it with add_reader), `drain()` returns them. Where there is no descriptor
    (`has_fd` false: Windows), `wait()` blocks until there is something to drain."""

    @property
    def has_fd(self) -> bool: ...
    @property
    def pending(self) -> int: ...
    def __new__(cls, writer: Writer) -> Self: ...
    def fileno(self) -> int: ...
    def drain(self) -> list[Submission]:
        """The submissions finished since the last call (their buffers released)."""

    def wait(self, timeout: float | None = None) -> bool:
        """Block (GIL released) until something finished or the port is closed; True if
        there is something to drain."""

    def close(self) -> None:
        """Wake a wait() for good."""

@disjoint_base
class Writer:
    """The write connection of a Database, run by a C thread (see the top of _writer.pxi)."""

    @property
    def path(self) -> str: ...
    @property
    def busy_timeout(self) -> float: ...
    def __init__(
        self,
        db: Database,
        *,
        hold_spill_min: int | None = None,
        touch_sql: str | None = None,
        signal_bytes: int = 0,
        checkpoint: bool = False,
        synchronous: int = 1,
        wal_after: int = 0,
        **tunables: float,
    ) -> None:
        """The tunables (batch_bytes, queue_bytes, blob_min, hold_spill_max, touch_every,
        max_age, checkpoint_pages, wal_limit_pages, small_bytes, vacuum_pages, vacuum_min) are
        zarrdb._tunables' unless given."""
    @overload
    def submit(
        self, ops: Iterable[_Op], *, port: Port | None = None, block: Literal[True] = True
    ) -> Submission: ...
    @overload
    def submit(
        self, ops: Iterable[_Op], *, port: Port | None = None, block: bool
    ) -> Submission | None:
        """Queue `ops` as one submission; while an explicit transaction is open it joins it.
        When the queue is full, waits (GIL released), or with block=False returns None."""

    @overload
    def prepare(
        self, ops: Iterable[_Op], *, port: Port | None = None, bad: None = None
    ) -> Submission: ...
    @overload
    def prepare(
        self, ops: Iterable[_Op], *, port: Port | None = None, bad: list[tuple[int, Exception]]
    ) -> Submission | None:
        """The submission of `ops`, made but not queued (see enqueue). With a list `bad`, an
        operation whose value cannot be taken is left out and `(index, error)` appended to
        `bad`; None if every operation is left out."""

    def enqueue(self, sub: Submission, *, block: bool = True) -> bool:
        """Queue a submission made by prepare(); False if the queue is full and not `block`."""

    def write(self, ops: Iterable[_Op], expect: int = 0) -> None:
        """Queue `ops` and, unless they joined the open explicit transaction, wait until they
        are committed (GIL released); raises the write's error."""

    def flush(self) -> None:
        """Everything queued so far is all the caller has for now: commit it without waiting."""

    def wait_for_room(self, nbytes: int) -> None:
        """Block (GIL released) until a submission of `nbytes` would be queued at once, or
        the writer stops."""

    def call_holding(self, fn: Callable[[Database], _T], drain: bool = True) -> _T:
        """`fn(db)` on the write connection, taken from the thread once everything queued so
        far is written (with `drain`) and given back when `fn` returns or raises; a signal's
        exception can come only while `fn` runs or after the connection is given back."""

    def holding(self, drain: bool = True) -> AbstractContextManager[Database, bool]:
        """The write connection for a `with` block, taken from the thread once everything
        queued so far is written (with `drain`), given back at the end (or when the holder is
        dropped, if a signal's exception skipped `__exit__`). A test hook: NotImplementedError
        outside test builds (ZARRDB_TEST_VFS=1); zarrdb uses call_holding."""

    @property
    def in_transaction(self) -> bool: ...
    @property
    def transaction(self) -> int:
        """The token of the open explicit transaction (0: none)."""
    @property
    def innermost_level(self) -> Level | None:
        """The innermost open level of the explicit transaction (None: none is open)."""

    def begin(self, inside: int, levels: list[int]) -> int:
        """Open a level of explicit transaction (on top of the innermost open level if
        `inside` is the open transaction's token); appends its token to `levels`, returns it."""

    def end(self, token: int, ok: bool, levels: list[int] | None = None) -> None:
        """End the innermost open level of transaction `token`: commit (or release its
        savepoint) if `ok` and none of its writes failed, else roll back. Empties `levels`."""

    def open_level(self, level: Level, parent: Level | None = None) -> None:
        """Open `level` on top of `parent` (None: a new transaction); NestingError if another
        level is open on top of `parent`."""

    def end_level(self, level: Level, ok: bool) -> None:
        """End `level`; one ending while levels inside it are open is rolled back with them
        and raises NestingError."""

    @property
    def checkpoint_failures(self) -> tuple[int, int, int, int]:
        """(failed checkpoints, the last one's result code, frames in the log the last
        checkpoint saw, frames it copied)."""

    @property
    def events(self) -> int:
        """A count that grows whenever the writer has something for _log.WriterEvents to log."""
    @property
    def in_wal(self) -> bool: ...
    @property
    def touch_skipped(self) -> bool: ...
    def stats(self) -> dict[str, int]:
        """Counters: batches, submissions, retried batches, the largest batch, bytes queued; held."""

    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Write everything queued, stop the thread, and give the Database back to Python."""

@disjoint_base
class RemoteFile:
    """A database file read by byte ranges: `fetch(offset, length)` returns exactly `length`
    bytes (any buffer). Its blocks are cached here, least recently used dropped first, and shared
    by every RemoteDatabase opened on it; sequential reads fetch ahead (runs doubling up to
    `readahead` bytes), concurrent readers of a block wait for one fetch; a miss fetches at
    least the aligned `min_request` bytes. With `schedule(function, *args)`, which must call
    `function(*args)` soon on another thread, read-ahead and the rest of a miss's span are
    fetched in the background. `head`: bytes from the start of the file already in hand.
    `waiting()`: called now and then while a reader waits for another reader's fetch; what it
    raises ends the wait and fails the read."""

    url: str
    name: str  # what sqlite3_open_v2 opens with the REMOTE_VFS
    fetch: Callable[[int, int], Buffer]
    schedule: Callable[..., None] | None
    waiting: Callable[[], None] | None
    size: int
    block_size: int

    def __init__(
        self,
        url: str,
        size: int,
        fetch: Callable[[int, int], Buffer],
        *,
        block_size: int = 1048576,
        cache_size: int = 67108864,
        readahead: int = 16777216,
        min_request: int | None = None,
        schedule: Callable[..., None] | None = None,
        head: Buffer | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> None: ...
    def _fetch_scheduled(self, first: int, count: int) -> None:
        """Fetch a run of blocks handed to `schedule`."""
    def stats(self) -> dict[str, int]:
        """requests, bytes, hits, misses, waits, failures, evictions, cached_bytes, loading."""

@disjoint_base
class RemoteDatabase(Database):
    """A read-only Database on a RemoteFile; one per thread. A failed fetch raises what the
    fetch function raised if it is a zarrdb error, else a RemoteReadError caused by it."""

    source: RemoteFile

    def __init__(
        self,
        source: RemoteFile,
        *,
        busy_timeout: float | None = None,
        cache_size: int | None = None,
    ) -> None: ...
    def get(self, key: str) -> bytes | None:
        """As Database.get; the value's length is looked up first and fetched at once."""
    def get_range(self, key: str, start: int, length: int | None) -> bytes | None:
        """As Database.get_range; the range's length is the first miss's span."""

def install_pause_hook(point: Callable[[str], None] | None) -> bool:
    """Tests only: make the engine's pause points call `point(name)` (None: nothing); False
    where the points are not built."""
