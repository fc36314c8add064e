"""Type stubs for zarrdb._core, the engine under SQLiteStore (knows nothing of zarr)."""

import os
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Literal

from typing_extensions import Buffer, Self

BUNDLED_SQLITE: bool
REMOTE_VFS: str  # "zarrdb-remote", the read-only VFS of RemoteFile
MAX_VALUE_SIZE: int  # 2_147_483_645, the spec's limit for one value

def _library_info() -> tuple[str, str, tuple[str, ...]]: ...

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

class Database:
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
        busy_timeout: float = 5.0,
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
    def closed(self) -> bool: ...
    @property
    def in_transaction(self) -> bool: ...
    @property
    def busy_timeout(self) -> float: ...
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
        key is missing. ValueError (nothing copied) if `out` is smaller than the value."""

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
        connection Writer.holding() hands over."""

    def size_prefix(self, prefix: str) -> int: ...
    def count_prefix(self, prefix: str) -> int: ...

    # schema and maintenance work (keys are written by a Writer) ---------------------------
    def _atomic(self) -> _Atomic:
        """The block's statements as one unit (BEGIN IMMEDIATE .. COMMIT, or a savepoint inside
        the open transaction), for creating a file and for maintenance on a connection no
        writer runs or that Writer.holding() handed over."""

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

    def pragma(self, name: str, value: int | str | None = None) -> Any: ...
    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...
    def executescript(self, sql: str) -> None: ...


class RemoteFile:
    """A database file read by byte ranges: `fetch(offset, length)` returns exactly `length`
    bytes (any buffer). Its blocks are cached here, least recently used dropped first, and shared
    by every RemoteDatabase opened on it; sequential reads fetch ahead (runs doubling up to
    `readahead` bytes), concurrent readers of a block wait for one fetch. `head`: bytes from the
    start of the file already in hand."""

    url: str
    name: str  # what sqlite3_open_v2 opens with the REMOTE_VFS
    fetch: Callable[[int, int], Buffer]
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
        head: Buffer | None = None,
    ) -> None: ...
    def stats(self) -> dict[str, int]:
        """requests, bytes, hits, misses, waits, failures, evictions, cached_bytes."""

class RemoteDatabase(Database):
    """A read-only Database on a RemoteFile; one per thread. A failed fetch raises what the
    fetch function raised if it is a zarrdb error, else a RemoteReadError caused by it."""

    source: RemoteFile

    def __init__(
        self, source: RemoteFile, *, busy_timeout: float = 5.0, cache_size: int | None = None
    ) -> None: ...
