"""SQLiteStore: a zarr v3 store in one SQLite file (SQLiteStore 1.0 format).

This module is the adapter between zarr's Store API and the engine: opening, options, pickling
and writes. The work behind it lives in its own modules (the module map of docs/development.md):
- _open_file.py: the store's open file in this process (OpenFile: its connections, writer,
  remote read threads, process id and closing, behind one lock; the store holds one and asks
  it once per call, and makes a new one after close() or fork()); _file_setup.py: creating and
  checking the file; _readers.py: a read connection per thread;
- _reading.py: reads, byte ranges, batches and listings (a mixin of SQLiteStore);
- _submitting.py: writes go to the engine's writer thread (group commit beside zarr's own
  work; an event loop's bursts and completions in _completions.py, the numbers in
  _tunables.py), and explicit transactions (`with store.transaction():`, _transactions.py) on
  top of it;
- _store_maintenance.py: file-level operations (rename, backup, vacuum, check, file_info, ...; a mixin).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from zarr.abc.store import Store
from zarr.core.buffer import Buffer

from zarrdb import _compat, _format, _tunables
from zarrdb import remote as _remote
from zarrdb._store_maintenance import FileOperations
from zarrdb._reading import Reads
from zarrdb._open_file import FileSpec, OpenFileHolder
from zarrdb._submitting import Submitter
from zarrdb._transactions import Transaction

if TYPE_CHECKING:
    from typing import Self


__all__ = ["SQLiteStore"]

Durability = Literal["full", "normal", "off"]
# Durability levels; the SQLite synchronous setting each stands for, by journal mode, is chosen
# in _file_setup.synchronous.
_DURABILITY_LEVELS = ("full", "normal", "off")

def _value_view(value: Buffer) -> Any:
    """The bytes of a zarr Buffer, without a copy for CPU buffers."""
    return value.as_numpy_array()


class SQLiteStore(FileOperations, Reads, OpenFileHolder, Store):
    """A zarr v3 store that keeps a whole hierarchy in one SQLite file (SQLiteStore 1.0).

    Pass it wherever zarr takes a store. The file is opened at the first use (or by
    `ensure_open`), created if missing when the store is writable; `close` leaves one
    self-contained file, and so does garbage collection or the end of the program. A store
    pickles as its path and options and reopens by itself in another process.

    Parameters
    ----------
    path
        The `.zarrdb` file. A URL (`s3://`, `gs://`, `az://`, `http://`, `https://`) reads a
        file from object storage or a web server, read-only (needs `zarrdb[remote]`), and so
        does a `zarrdb.remote.RemoteLocation` (what `from_object_store` opens).
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
    check_pages
        Have SQLite check each cell of every b-tree page as it loads the page (its
        `cell_size_check`): for a file from someone else, whose pages may be crafted. With
        memory mapping each lookup loads its pages again, so a read of a small value takes
        about twice as long. Always on for remote files and in the command line.
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
    # Whether a file of zarr-python 2's SQLiteStore is read as it is (zarrdb.zarr2's store)
    # rather than refused with Zarr2FileError.
    _accept_zarr2: bool = False

    def __init__(
        self,
        path: str | os.PathLike[str] | _remote.RemoteLocation,
        *,
        read_only: bool = False,
        durability: Durability = "normal",
        page_size: int | None = None,
        busy_timeout: float = _tunables.BUSY_TIMEOUT,
        immutable: bool = False,
        cache_size: int | None = None,
        mmap_size: int | None = None,
        journal: Literal["auto", "wal", "delete"] = "auto",
        check_pages: bool = False,
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
        block_cache_options: _remote.BlockCache | None = None
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
            block_cache_options = _remote.BlockCache.from_options(block_cache)
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
            "cache_size": _tunables.DEFAULT_CACHE_KIB if cache_size is None else cache_size,
            "mmap_size": _tunables.DEFAULT_MMAP_BYTES if mmap_size is None else mmap_size,
            "journal": journal,
            "check_pages": bool(check_pages),
        }
        self._spec = FileSpec(
            self.path,
            self.read_only,
            self._options,
            location=self._remote,
            block_cache=block_cache_options,
            accept_zarr2=self._accept_zarr2,
        )
        self._expect_etag: str | None = None  # the version a pickled remote store was opened at
        self._open_file = self._new_file()

    @property
    def _is_open(self) -> bool:  # zarr's flag: whether this process has the file open now
        file = self.__dict__.get("_open_file")
        return file is not None and file.ready

    @_is_open.setter
    def _is_open(self, value: bool) -> None:
        """zarr's Store sets the flag in __init__ and close(); here it follows the open file."""

    # --- life cycle ------------------------------------------------------------------------

    @classmethod
    async def open(cls, *args: Any, **kwargs: Any) -> Self:
        """Make a store and open its file now (zarr's `Store.open`).

        Takes the arguments of `SQLiteStore`. A missing, foreign, damaged or locked file
        raises here rather than at the first use.
        """
        store = cls(*args, **kwargs)
        await _compat.ensure_open(store)  # a new store: as zarr's Store.open (_open)
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
        await self._ensure_open()

    def _writable_submitter(self) -> Submitter:
        """The writer, after checking that the store may write (ValueError if read-only)."""
        self._check_writes()
        return self._submitter()

    async def _ensure_open(self) -> None:
        if self._remote is not None:  # the opening request, off the event loop's thread
            file = self._current_file()
            await file.read_threads().run(file.open)
        else:
            self._file()

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
        self._file()

    @property
    def options(self) -> dict[str, Any]:
        """The options the store was made with, as a new dict.

        Keys: `durability`, `page_size`, `busy_timeout`, `immutable`, `cache_size`,
        `mmap_size`, `journal`, `check_pages` (with the defaults filled in).
        """
        return dict(self._options)

    def close(self) -> None:
        """Commit what is queued, close every connection, and leave one file.

        The file is put back in DELETE journal mode, so no `-wal`, `-shm` or `-journal` file
        remains beside it. The store reopens by itself when it is used again.
        """
        self._open_file.close()
        super().close()

    def __enter__(self) -> Self:
        return self

    def with_read_only(self, read_only: bool = False) -> SQLiteStore:
        """A new store on the same file with the same options, read-only or not."""
        opts = dict(self._options)
        if self._remote is not None:
            return type(self)(
                self._remote, read_only=read_only, block_cache=self._spec.block_cache, **opts
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
            opened = self._open_file.remote
            state["remote"] = {
                "location": self._remote,
                "block_cache": self._spec.block_cache,
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
        self._expect_etag = self._open_file.expect_etag = remote["etag"]

    def transaction(self) -> Transaction[Self]:
        """A block whose writes to this store are one atomic commit.

        Use it as `with store.transaction():` or `async with store.transaction():`. The store
        object is the session: while the block is open, every write through this store
        object joins one SQLite transaction, from any thread, event loop, zarr worker or dask
        task, rolled back if the block raises; reads through it see the transaction's writes,
        other store objects and processes only what is committed. A writer that must stay
        out uses its own `SQLiteStore`. A block entered inside the open one nests as a
        level (a savepoint); entered from anywhere else, it waits for the open one to end.
        Levels nest one at a time: a level beside an open one, or one ending while a level
        inside it is open, raises `NestingError` (docs/guide/transactions.md). Writes
        inside do not wait to be written; one that fails ends the block with its error.
        After `close()` (or in a forked child) the block's writes raise `ClosedError`.

        Returns
        -------
        context manager
            Entering it gives the store.
        """
        return Transaction(self, self._writable_submitter, self._spec.key)

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
        self._check_writes()
        op = self._set_op(key, value)
        submitter, level = self._write_target()
        submitter.write_sync([op], level)

    def delete_sync(self, key: str) -> None:
        """Delete `key` (if stored) without an event loop; the synchronous form of `delete`."""
        self._check_writes()
        submitter, level = self._write_target()
        submitter.write_sync([("delete", _format.check_key(key), None)], level)

    async def _write(self, ops: list[tuple[str, str, Any]]) -> None:
        self._check_writes()
        await self._submitter().write_async(ops)

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
        self._check_writes()
        op = self._set_op(key, value)
        await self._submitter().write_async([op])

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        """Store `value` at `key` only if the key is not stored yet."""
        self._check_writes()
        await self._write([self._set_op(key, value, "set_if_absent")])

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        self._check_writes()
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
        """Delete `key`; deleting a key that is not stored is not an error (a key that breaks
        the format's key rules is: InvalidKeyError, as for `set`)."""
        await self._write([("delete", _format.check_key(key), None)])

    async def delete_dir(self, prefix: str) -> None:
        """Delete every key below `prefix` (a group or array path), in one commit."""
        await self._write([("delete_prefix", _format.dir_prefix(prefix), None)])

    async def clear(self) -> None:
        """Delete every key of the store, in one commit."""
        await self.delete_dir("")
