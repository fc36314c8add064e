"""Reads and listings of SQLiteStore: zarr's `get` (whole values and byte ranges), batches of
ranges for sharded arrays, sizes, and the listings, each on the calling thread's read
connection (or the transaction's own, inside one).

A mixin of SQLiteStore, which holds the store's open file (`OpenFile`, _open_file.py): every
read asks the store for it once (`_file()`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype, cpu, default_buffer_prototype

from zarrdb import _format, _tunables
from zarrdb._core import Database
from zarrdb._open_file import FileSpec, OpenFile

T = TypeVar("T")

_U8 = np.dtype("B")
_CPU_BUFFER = cpu.Buffer


def _as_buffer(prototype: BufferPrototype, data: bytes) -> Buffer:
    """`data` as the prototype's Buffer; for host buffers a view, without from_bytes' layers."""
    cls = prototype.buffer
    if cls is _CPU_BUFFER:
        return cls(np.frombuffer(data, _U8))
    return cls.from_bytes(data)


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


def _get_one(db: Database, key: str, byte_range: ByteRequest | None) -> bytes | None:
    if byte_range is None:
        return db.get(key)
    return db.get_range(key, *_byte_range(byte_range))


class Reads:
    # Whether the last whole value `get` read from a local file was longer than
    # _tunables.INLINE_READ_MAX: then the next is read in a worker thread without first being
    # looked up on the loop's thread (a hint: a wrong guess costs a thread hop or a second lookup).
    _large_values: bool = False

    _spec: FileSpec

    if TYPE_CHECKING:  # OpenFileHolder's (_open_file.py), beside this mixin in SQLiteStore
        def _file(self) -> OpenFile: ...
        def _current_file(self) -> OpenFile: ...
        def _file_for_write(self) -> OpenFile: ...

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
        file = self._file()
        if file.in_transaction():
            data = file.read_with(lambda db: _get_one(db, key, byte_range))
        else:  # the common case, without a closure per call
            data = _get_one(file.reader(), key, byte_range)
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

        Small values and ranges of a local file are read on the event loop's thread, larger
        ones in a worker thread; every read of a remote file in one of the store's read
        threads. See `get_sync` for the parameters.
        """
        if prototype is None:
            prototype = default_buffer_prototype()
        if self._spec.location is not None:
            # Every read of a remote file in the store's read threads, where waits for the
            # network overlap (and the event loop's thread never waits for one).
            return await self._current_file().read_threads().run(
                self.get_sync, key, prototype=prototype, byte_range=byte_range
            )
        file = self._file()
        if file.in_transaction():
            # The transaction's connection, once the writes queued before are written: wait
            # for it in a worker thread, not on the loop (which may run those writes).
            return await asyncio.to_thread(
                self.get_sync, key, prototype=prototype, byte_range=byte_range
            )
        if byte_range is None:
            if self._large_values:
                # The last value read was large, and so is the next, most likely (the chunks of
                # an array): the whole read in a worker thread, with one lookup.
                data = await asyncio.to_thread(self._get_in_thread, key)
                if data is not None and len(data) <= _tunables.INLINE_READ_MAX:
                    self._large_values = False
            else:
                found = file.reader().get_limited(key, _tunables.INLINE_READ_MAX)
                if isinstance(found, int):  # its length: larger than the inline bound
                    self._large_values = True
                    data = await asyncio.to_thread(self._get_in_thread, key)
                else:
                    data = found
        else:
            start, length = _byte_range(byte_range)
            if length is not None and length > _tunables.INLINE_RANGE_MAX:
                data = await asyncio.to_thread(self._get_range_in_thread, key, start, length)
            else:
                data = file.reader().get_range(key, start, length)
        return None if data is None else _as_buffer(prototype, data)

    def _get_in_thread(self, key: str) -> bytes | None:
        return self._file().reader().get(key)

    def _get_range_in_thread(self, key: str, start: int, length: int | None) -> bytes | None:
        return self._file().reader().get_range(key, start, length)

    def _get_ranges_sync(
        self, requests: Sequence[tuple[str, int, int | None]]
    ) -> list[bytes | None]:
        return self._file().read_with(lambda db: db.get_ranges(requests))

    async def _get_ranges(self, requests: list[tuple[str, int, int | None]]) -> list[bytes | None]:
        if self._spec.location is not None:
            pool = self._current_file().read_threads()
            if len(requests) == 1:
                return await pool.run(self._get_ranges_sync, requests)
            # Each range in a read thread of its own: their misses are fetched together (the
            # file is pinned to one version, so separate reads see one snapshot all the same).
            return list(
                await asyncio.gather(
                    *(pool.run(self._get_range_in_thread, *request) for request in requests)
                )
            )
        if len(requests) <= _tunables.INLINE_BATCH_MAX and not self._file().in_transaction():
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
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
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
        return [(i, None if v is None else _as_buffer(prototype, v)) for i, v in enumerate(values)]

    async def _read(self, fn: Callable[[Database], T]) -> T:
        """`fn(db)` on the connection a read uses; while an explicit transaction is open, in
        a worker thread (its connection waits for the writes queued before the read)."""
        if self._spec.location is not None:
            return await self._current_file().read_threads().run(lambda: self._file().read_with(fn))
        file = self._file()
        if file.in_transaction():
            return await asyncio.to_thread(file.read_with, fn)
        return fn(file.reader())

    async def exists(self, key: str) -> bool:
        """Whether `key` is stored."""
        return await self._read(lambda db: db.exists(key))

    async def getsize(self, key: str) -> int:
        """The stored size of the value of `key` in bytes, without reading it.

        Raises
        ------
        FileNotFoundError
            If the key is not stored.
        """
        size = await self._read(lambda db: db.length(key))
        if size is None:
            raise FileNotFoundError(key)
        return size

    async def getsize_prefix(self, prefix: str) -> int:
        """The total stored size of the values below `prefix` (a group or array path)."""
        return await self._read(lambda db: db.size_prefix(_format.dir_prefix(prefix)))

    # --- listings ------------------------------------------------------------------------------

    async def list(self) -> AsyncIterator[str]:
        """Every key of the store, in key order."""
        keys = await self._read(lambda db: db.list_keys())
        for key in keys:
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key that starts with `prefix`, in key order (an index range scan)."""
        keys = await self._read(lambda db: db.list_prefix(prefix))
        for key in keys:
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The names of the keys and sub-trees directly below `prefix`.

        Each child's sub-tree is skipped with one index seek, so listing a group costs in
        proportion to its children, not to the keys below it.
        """
        children = await self._read(lambda db: db.list_dir(_format.dir_prefix(prefix)))
        seen: set[str] = set()
        for child in children:
            name = child[:-1] if child.endswith("/") else child
            if name not in seen:  # a key and a sub-tree may share a name
                seen.add(name)
                yield name

    async def is_empty(self, prefix: str) -> bool:
        """Whether nothing is stored below `prefix`."""
        return not await self._read(lambda db: db.has_prefix(_format.dir_prefix(prefix)))
