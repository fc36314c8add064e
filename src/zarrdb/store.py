"""SQLiteStore: a zarr v3 store in one SQLite file (SQLiteStore 1.0 format).

This module is the adapter between zarr's Store API and the engine; the work behind it lives
in its own modules (see ARCHITECTURE.md):
- _connections.py: opening and creating the file, one read connection per thread, closing on
  every path;
- _writing.py: writes go to the engine's writer thread (group commit beside zarr's own work);
- _file_ops.py: file-level operations (rename, backup, vacuum, check, file_info, ...);
- explicit transactions (`with store.transaction():`) are below, on top of _writing.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
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

from zarrdb import _format
from zarrdb import remote as _remote
from zarrdb._connections import (
    DEFAULT_CACHE_KIB,
    DEFAULT_MMAP_BYTES,
    Connections,
    unwind_on_sigterm,
)
from zarrdb._file_ops import FileOperations

if TYPE_CHECKING:
    from typing import Self


__all__ = ["SQLiteStore"]

Durability = Literal["full", "normal", "off"]
# Durability levels; the SQLite synchronous setting each stands for, by journal mode, is chosen
# in _connections._synchronous.
_DURABILITY_LEVELS = ("full", "normal", "off")

# A read of at most this many bytes runs on the event loop's thread; a longer one is handed to
# a worker thread, so the loop is not stalled and the copies of the values zarr gathers run on
# several cores at once. One call alone is faster inline at every size, but zarr reading a
# whole array of 1 MiB chunks is faster through threads, and of 256 KiB chunks (64 KiB in 1-D)
# faster inline (benchmarks/tunables.py, section inline). Whole values only: byte ranges below.
INLINE_READ_MAX = 512 * 1024
# Byte ranges come from partial reads (a window out of a shard: the index and a few inner
# chunks), one or two at a time, where the thread hop costs more than the copy: a range of at
# most this many bytes is read inline.
INLINE_RANGE_MAX = 1024 * 1024
# A batch of at most this many ranges is read inline; more go to a worker thread.
INLINE_BATCH_MAX = 4

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


class _TransactionContext:
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


class SQLiteStore(FileOperations, Store):
    """A zarr v3 store that keeps a whole hierarchy in one SQLite file (SQLiteStore 1.0).

    Pass it wherever zarr takes a store. The file is opened at the first use (or by
    `ensure_open`), created if missing when the store is writable; `close` leaves one
    self-contained file, and so does garbage collection or the end of the program. A store
    pickles as its path and options and reopens by itself in another process.

    Parameters
    ----------
    path
        The `.zarrdb` file. A URL (`s3://`, `gs://`, `az://`, `http://`, `https://`) reads a
        file from object storage or a web server, read-only (needs `zarrdb[remote]`).
    read_only
        Open with SQLite's read-only mode: nothing is created or modified, and a missing file
        raises `FileNotFoundError`.
    durability
        `"full"`: every commit is synced, and the folder once a rollback journal is deleted
        (SQLite's `synchronous=EXTRA`; survives a power loss or an OS crash); `"normal"`
        (default): survives a crash of the process, a power loss may drop the last commits
        made in WAL mode, never corrupts the file; `"off"`: no sync at all, for bulk loads
        that can be redone (a power loss is likely to corrupt the file).
    page_size
        Page size in bytes of a new file: a power of two from 512 to 65536 (default 65536).
        An existing file keeps its own.
    busy_timeout
        Seconds to wait for another process's lock before raising
        [`DatabaseLockedError`][zarrdb.errors.DatabaseLockedError].
    immutable
        The file is on read-only media or a share and cannot change while open: read it
        without any locking. Implies `read_only`.
    cache_size
        SQLite's page cache per connection, in KiB (default 16384).
    mmap_size
        Bytes of the file each read connection maps into memory (default 256 MiB; 0 turns
        memory mapping off).
    journal
        Journal mode while open for writing. `"auto"` (default): a rollback journal, in which
        pages appended to the file are written once (bulk loads of large chunks, large
        transactions), switching to WAL once commits turn out small and frequent (a rollback
        journal syncs twice per commit). `"wal"`: WAL throughout (readers never wait for the
        writer; every page is written twice, log then file). `"delete"`: a rollback journal
        throughout (readers wait while a commit is written). The closed file is in DELETE
        mode in every case.
    storage_options
        For a URL only: obstore's settings for `obstore.store.from_url` (`endpoint`,
        `region`, credentials, `allow_http`, `retry_config`, ...).
    block_cache
        For a URL only: the block cache, a [`BlockCache`][zarrdb.remote.BlockCache] or a dict
        of its fields (`size`, `block_size`, `readahead`, `first_read`).

    Raises
    ------
    ValueError
        For an unknown `durability` or `journal`, for a URL without `read_only=True`, and for
        `storage_options` or `block_cache` with a local path.

    Examples
    --------
    ```python
    with SQLiteStore("data.zarrdb") as store:
        root = zarr.open_group(store, mode="w")
        t = root.create_array("t", shape=(100, 100), chunks=(10, 10), dtype="f4")
        t[:] = 1.0
    ```
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
        journal: Literal["auto", "wal", "delete"] = "auto",
        storage_options: Mapping[str, Any] | None = None,
        block_cache: _remote.BlockCache | Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(read_only=read_only or immutable)
        if durability not in _DURABILITY_LEVELS:
            raise ValueError(f"durability must be 'full', 'normal' or 'off', not {durability!r}")
        if journal not in ("auto", "wal", "delete"):
            raise ValueError(f"journal must be 'auto', 'wal' or 'delete', not {journal!r}")
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
        self._conns: Connections | None = None
        self._closer: weakref.finalize | None = None
        if not self.read_only:
            # So that SIGTERM, too, leaves the file whole (see unwind_on_sigterm): made here,
            # in the caller's thread (zarr opens stores on its own event-loop thread).
            unwind_on_sigterm()
        self._open_lock = threading.Lock()

    # --- life cycle ------------------------------------------------------------------------

    @classmethod
    async def open(cls, *args: Any, **kwargs: Any) -> Self:
        """Make a store and open its file now (zarr's `Store.open`).

        Takes the arguments of `SQLiteStore`. A missing, foreign, damaged or locked file
        raises here rather than at the first use.
        """
        store = cls(*args, **kwargs)
        await store._open()
        return store

    @classmethod
    def from_object_store(
        cls,
        store: Any,
        path: str,
        *,
        block_cache: _remote.BlockCache | Mapping[str, int] | None = None,
        cache_size: int | None = None,
    ) -> SQLiteStore:
        """A read-only store on a `.zarrdb` file in an obstore store.

        Parameters
        ----------
        store
            An obstore store (`S3Store`, `GCSStore`, `AzureStore`, `HTTPStore`, ...),
            configured with its bucket, credentials and client options.
        path
            The path of the file inside `store`.
        block_cache
            The block cache, as for `SQLiteStore`.
        cache_size
            SQLite's page cache per connection, in KiB.

        Returns
        -------
        SQLiteStore
            A read-only store; it pickles with the obstore store's configuration.
        """
        location = _remote.RemoteLocation(store=store, path=path)
        return cls(location, read_only=True, block_cache=block_cache, cache_size=cache_size)

    async def _open(self) -> None:
        if self._is_open:
            raise ValueError("store is already open")
        self._open_sync()

    def _open_sync(self) -> Connections:
        with self._open_lock:
            conns = self._conns
            if conns is not None and conns.pid == os.getpid() and self._is_open and not conns.closed:
                return conns
            remote = None
            if self._remote is not None:
                remote = (self._remote, self._block_cache, self._expect_etag)
            conns = Connections(self.path, self.read_only, self._options, remote)
            conns.open()
            self._conns = conns
            self._is_open = True
            # Closed like close() when the store is garbage-collected unclosed, or at the
            # latest at interpreter exit: the file is always left whole, in DELETE mode.
            self._closer = weakref.finalize(self, conns.close)
            return conns

    def _connections(self) -> Connections:
        conns = self._conns
        if conns is None or conns.pid != _PID or conns.closed:
            conns = self._open_sync()
        return conns

    def _connections_for_write(self) -> Connections:
        self._check_writable()
        return self._connections()

    async def _ensure_open(self) -> None:
        self._connections()

    def ensure_open(self) -> None:
        """Open the file now instead of at the first use.

        A writable store creates a missing file. A missing, foreign, damaged or locked file
        raises here. Calling it again does nothing.

        Raises
        ------
        FileNotFoundError
            If the store is read-only and the file does not exist.
        zarrdb.errors.ZarrDBError
            If the file is not a SQLiteStore file this zarrdb can use, is damaged, or stays
            locked longer than `busy_timeout`.
        """
        self._connections()

    @property
    def options(self) -> dict[str, Any]:
        """The options the store was made with, as a new dict.

        Keys: `durability`, `page_size`, `busy_timeout`, `immutable`, `cache_size`,
        `mmap_size`, `journal` (with the defaults filled in).
        """
        return dict(self._options)

    def close(self) -> None:
        """Commit what is queued, close every connection, and leave one file.

        The file is put back in DELETE journal mode, so no `-wal`, `-shm` or `-journal` file
        remains beside it. The store reopens by itself when it is used again.
        """
        closer, self._closer = self._closer, None
        self._conns = None
        if closer is not None:
            closer()
        super().close()

    def __enter__(self) -> Self:
        return self

    def with_read_only(self, read_only: bool = False) -> SQLiteStore:
        """A new store on the same file with the same options, read-only or not."""
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
        """A block whose writes to this store are one atomic commit.

        Use it as `with store.transaction():` or `async with store.transaction():`. Every
        write inside, from any thread working for the block (zarr's event loop and codec
        threads included), joins one SQLite transaction, rolled back if the block raises.
        Nested blocks join the outer one; reads inside see the block's own writes. Writes
        inside do not wait to be written; one that fails ends the block with its error.

        Returns
        -------
        context manager
            Entering it gives the store.
        """
        return _TransactionContext(self)

    # --- reads -------------------------------------------------------------------------------

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """The value of `key`, or a byte range of it, without an event loop.

        The synchronous form of `get`, for zarr's codec threads.

        Parameters
        ----------
        key
            The key.
        prototype
            The buffer type to return (zarr's default CPU buffer when None).
        byte_range
            A zarr `ByteRequest` (`RangeByteRequest`, `OffsetByteRequest`,
            `SuffixByteRequest`), or None for the whole value.

        Returns
        -------
        Buffer or None
            The bytes, or None if the key is not stored.
        """
        with self._connections().read_connection() as db:
            data = db.get(key) if byte_range is None else db.get_range(key, *_byte_range(byte_range))
        if data is None:
            return None
        return _as_buffer(prototype or default_buffer_prototype(), data)

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """The value of `key`, or a byte range of it; None if the key is not stored.

        Small values and ranges are read on the event loop's thread, larger ones in a worker
        thread. See `get_sync` for the parameters.
        """
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
        if len(requests) <= INLINE_BATCH_MAX or self._connections().in_transaction():
            return self._get_ranges_sync(requests)
        return await asyncio.to_thread(self._get_ranges_sync, requests)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        """Several values or byte ranges in one engine call and one snapshot.

        Returns
        -------
        list of Buffer or None
            In the order asked, None where a key is not stored.
        """
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

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **_coalescing: Any,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        """All `byte_ranges` of `key` in one engine call and one snapshot.

        zarr 3.4 reads parts of shards this way. Reading adjacent ranges separately costs
        SQLite nothing, so they are not merged: zarr's coalescing options are accepted and
        have nothing to do.

        Yields
        ------
        list of (int, Buffer)
            One batch: each range's index in `byte_ranges` and its bytes.

        Raises
        ------
        BaseExceptionGroup
            Holding `FileNotFoundError` if `key` is not stored.
        """
        if not byte_ranges:
            return
        values = await self._get_ranges([(key, *_byte_range(r)) for r in byte_ranges])
        yield self._ranges_result(key, prototype, values)

    def get_ranges_sync(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **_coalescing: Any,
    ) -> Sequence[tuple[int, Buffer | None]]:
        """The synchronous form of `get_ranges`, for zarr's codec threads.

        Returns
        -------
        list of (int, Buffer)
            Each range's index in `byte_ranges` and its bytes.
        """
        if not byte_ranges:
            return []
        values = self._get_ranges_sync([(key, *_byte_range(r)) for r in byte_ranges])
        return self._ranges_result(key, prototype, values)

    @staticmethod
    def _ranges_result(
        key: str, prototype: BufferPrototype, values: list[bytes | None]
    ) -> list[tuple[int, Buffer | None]]:
        if values[0] is None:  # one key: all present or all missing
            raise BaseExceptionGroup("chunk read failed", [FileNotFoundError(key)])
        return [(i, _as_buffer(prototype, v)) for i, v in enumerate(values)]  # type: ignore[arg-type]

    async def exists(self, key: str) -> bool:
        """Whether `key` is stored."""
        with self._connections().read_connection() as db:
            return db.exists(key)

    async def getsize(self, key: str) -> int:
        """The stored size of the value of `key` in bytes, without reading it.

        Raises
        ------
        FileNotFoundError
            If the key is not stored.
        """
        with self._connections().read_connection() as db:
            size = db.length(key)
        if size is None:
            raise FileNotFoundError(key)
        return size

    async def getsize_prefix(self, prefix: str) -> int:
        """The total stored size of the values below `prefix` (a group or array path)."""
        with self._connections().read_connection() as db:
            return db.size_prefix(_format.dir_prefix(prefix))

    # --- writes ------------------------------------------------------------------------------

    def _set_op(self, key: str, value: Buffer, kind: str = "set") -> tuple[str, str, Any]:
        if not isinstance(value, Buffer):
            raise TypeError(
                f"SQLiteStore.set(): `value` must be a Buffer instance, not {type(value).__name__}"
            )
        _format.check_key(key)
        return (kind, key, _value_view(value))

    def set_sync(self, key: str, value: Buffer) -> None:
        """Store `value` at `key` without an event loop; returns once it is committed.

        The synchronous form of `set`, for zarr's codec threads; it raises what `set` raises.
        Inside a transaction it returns at once and the transaction commits it.
        """
        self._check_writable()
        op = self._set_op(key, value)
        self._connections().writing.write_sync([op])  # type: ignore[union-attr]

    def delete_sync(self, key: str) -> None:
        """Delete `key` (if stored) without an event loop; the synchronous form of `delete`."""
        self._check_writable()
        self._connections().writing.write_sync([("delete", key, None)])  # type: ignore[union-attr]

    async def _write(self, ops: list[tuple[str, str, Any]]) -> None:
        self._check_writable()
        await self._connections().writing.write_async(ops)  # type: ignore[union-attr]

    async def set(self, key: str, value: Buffer) -> None:
        """Store `value` at `key`; returns once it is committed (group commit).

        The writer thread takes the caller's buffer without a copy. Inside a transaction it
        returns at once and the transaction commits it.

        Raises
        ------
        zarrdb.errors.ReadOnlyError
            If the store is read-only.
        zarrdb.errors.InvalidKeyError
            If `key` breaks the format's key rules.
        zarrdb.errors.ValueTooLargeError
            If the value is larger than 2,147,483,645 bytes.
        """
        self._check_writable()
        op = self._set_op(key, value)
        await self._connections().writing.write_async([op])  # type: ignore[union-attr]

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        """Store `value` at `key` only if the key is not stored yet."""
        self._check_writable()
        await self._write([self._set_op(key, value, "set_if_absent")])

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        self._check_writable()
        ops = [self._set_op(key, value) for key, value in values]
        if ops:
            await self._write(ops)

    async def set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        """Store several `(key, value)` pairs, committed together.

        Parameters
        ----------
        values
            `(key, Buffer)` pairs.
        """
        await self._set_many(values)

    async def delete(self, key: str) -> None:
        """Delete `key`; deleting a key that is not stored is not an error."""
        await self._write([("delete", key, None)])

    async def delete_dir(self, prefix: str) -> None:
        """Delete every key below `prefix` (a group or array path), in one commit."""
        await self._write([("delete_prefix", _format.dir_prefix(prefix), None)])

    async def clear(self) -> None:
        """Delete every key of the store, in one commit."""
        await self.delete_dir("")

    # --- listings ------------------------------------------------------------------------------

    async def list(self) -> AsyncIterator[str]:
        """Every key of the store, in key order."""
        with self._connections().read_connection() as db:
            keys = db.list_keys()
        for key in keys:
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key that starts with `prefix`, in key order (an index range scan)."""
        with self._connections().read_connection() as db:
            keys = db.list_prefix(prefix)
        for key in keys:
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The names of the keys and sub-trees directly below `prefix`.

        Each child's sub-tree is skipped with one index seek, so listing a group costs in
        proportion to its children, not to the keys below it.
        """
        with self._connections().read_connection() as db:
            children = db.list_dir(_format.dir_prefix(prefix))
        seen: set[str] = set()
        for child in children:
            name = child[:-1] if child.endswith("/") else child
            if name not in seen:  # a key and a sub-tree may share a name
                seen.add(name)
                yield name

    async def is_empty(self, prefix: str) -> bool:
        """Whether nothing is stored below `prefix`."""
        with self._connections().read_connection() as db:
            return not db.has_prefix(_format.dir_prefix(prefix))
