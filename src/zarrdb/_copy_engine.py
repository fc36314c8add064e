"""The work of `zarrdb.copy` once both stores are open: list the source with the sizes of its
values, read batches of values while the previous batch is written, and check the copy.

Memory stays bounded: a batch holds at most `batch_bytes` of values (or one larger value
alone) and `_tunables.COPY_BATCH_KEYS` keys, and at most three batches exist at a time (one being read, one
waiting, one being written).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from zarrdb import _compat, _tunables, _zipfiles

if TYPE_CHECKING:
    from zarr.abc.buffer import Buffer
    from zarr.abc.store import Store



class ProgressCallback(Protocol):
    """What `zarrdb.copy` calls to report progress: the interface of fsspec's
    `fsspec.callbacks.Callback` (any of its subclasses works, `TqdmCallback` too).

    `set_size` receives the number of keys to copy and `relative_update` the number of keys
    done; `branched(source_key, dest_key)` gives, per value, a callback whose `set_size` and
    `relative_update` count that value's bytes, as fsspec's `put` and `get` do per file."""

    def set_size(self, size: int) -> None: ...

    def relative_update(self, inc: int = 1) -> None: ...

    def branched(self, path_1: str, path_2: str, **kwargs: Any) -> Any: ...


@dataclass
class Item:
    """One value to copy: its key in the source and in the destination, its size, and (when
    the copy is verified) the digest of what was written."""

    src: str
    dst: str
    size: int
    digest: bytes | None = None


@dataclass
class Tally:
    keys: int = 0
    bytes: int = 0
    batches: int = 0
    written: list[Item] = field(default_factory=list)


def digest(value: Buffer) -> bytes:
    return hashlib.blake2b(_view(value), digest_size=16).digest()


def _view(value: Buffer) -> memoryview:
    return memoryview(value.as_buffer_like()).cast("B")


async def key_sizes(
    store: Store, prefix: str, zip_sizes: Sequence[tuple[str, int]] | None
) -> list[tuple[str, int]]:
    """(key, size) of every key below `prefix`, sorted by key; values are not read.
    `zip_sizes`: the entries of a checked zip file, for a zip source."""
    from zarr.storage import FsspecStore, LocalStore

    from zarrdb import SQLiteStore

    if zip_sizes is not None:
        return sorted((k, n) for k, n in zip_sizes if k.startswith(prefix))
    if isinstance(store, SQLiteStore):
        return await asyncio.to_thread(store.key_sizes, prefix)
    keys = sorted({key async for key in store.list_prefix(prefix)})
    if isinstance(store, LocalStore):
        root = str(store.root)
        sizes = await asyncio.to_thread(
            lambda: [os.stat(os.path.join(root, key)).st_size for key in keys]
        )
        return list(zip(keys, sizes))
    if isinstance(store, FsspecStore):
        found = await _fsspec_sizes(store, prefix)
        if found is not None and all(k in found for k in keys):
            return [(k, found[k]) for k in keys]
    out: list[int] = []
    for start in range(0, len(keys), _tunables.COPY_SIZE_REQUESTS):
        part = keys[start : start + _tunables.COPY_SIZE_REQUESTS]
        out.extend(await asyncio.gather(*(store.getsize(k) for k in part)))
    return list(zip(keys, out))


async def _fsspec_sizes(store: Any, prefix: str) -> dict[str, int] | None:
    """Sizes from one recursive listing of an fsspec file system (an object store lists sizes
    with the names: no request per key); None where the file system cannot."""
    fs = store.fs
    root = store.path.rstrip("/")
    where = f"{root}/{prefix}".rstrip("/") if root else prefix.rstrip("/")
    try:
        if getattr(fs, "async_impl", False):
            found = await _compat.fsspec_find(fs, where)
        else:
            found = await asyncio.to_thread(fs.find, where, detail=True)
    except (OSError, NotImplementedError, TypeError, ValueError):
        return None
    base = root.strip("/")
    out: dict[str, int] = {}
    for name, info in found.items():
        size = info.get("size")
        if info.get("type") == "directory" or not isinstance(size, int):
            continue
        rel = name.strip("/")
        if base:
            if not rel.startswith(base + "/"):
                continue
            rel = rel[len(base) + 1 :]
        out[rel] = size
    return out


def metadata_last(items: list[Item]) -> list[Item]:
    """Chunks first, metadata documents last: a reader of a partial copy sees no node whose
    chunks are still missing."""
    return sorted(items, key=lambda it: (_zipfiles.is_metadata(it.dst), it.dst))


def rfc9_first(items: list[Item]) -> list[Item]:
    """RFC-9's order for a zip file: the root `zarr.json` first, the other metadata documents
    breadth-first, then the rest."""
    by_dst = {it.dst: it for it in items}
    return [by_dst[key] for key in _zipfiles.rfc9_order(by_dst)]


def batches(items: Sequence[Item], limit: int) -> Iterator[list[Item]]:
    """Runs of `items` of at most `limit` bytes and _tunables.COPY_BATCH_KEYS keys (a larger value alone)."""
    batch: list[Item] = []
    total = 0
    for item in items:
        if batch and (total + item.size > limit or len(batch) >= _tunables.COPY_BATCH_KEYS):
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += item.size
    if batch:
        yield batch


def _by_file(store: Store) -> bool:
    """Whether the store is a directory with synchronous file calls (zarr's LocalStore)."""
    from zarr.storage import LocalStore

    return isinstance(store, LocalStore) and hasattr(store, "get_sync") and hasattr(store, "set_sync")


def _runs(n: int) -> list[range]:
    step = max(1, -(-n // _tunables.COPY_FILE_THREADS))
    return [range(start, min(n, start + step)) for start in range(0, n, step)]


async def read_batch(store: Store, keys: list[str]) -> list[Buffer | None]:
    from zarr.core.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    if _by_file(store):
        get = store.get_sync  # type: ignore[attr-defined]

        def read(run: range) -> list[Buffer | None]:
            return [get(keys[i], prototype=proto) for i in run]

        parts = await asyncio.gather(*(asyncio.to_thread(read, run) for run in _runs(len(keys))))
        return [value for part in parts for value in part]
    return await store.get_partial_values(proto, [(k, None) for k in keys])


Writer = Callable[[list[tuple[str, "Buffer"]]], Any]


async def write_batch_to_store(store: Store, pairs: list[tuple[str, Buffer]]) -> None:
    """One transaction on a .zarrdb; runs of files in a few threads for a directory;
    concurrent writes elsewhere."""
    from zarrdb import SQLiteStore

    if isinstance(store, SQLiteStore):
        await store.set_many(pairs)
    elif _by_file(store):
        put = store.set_sync  # type: ignore[attr-defined]

        def write(run: range) -> None:
            for i in run:
                put(*pairs[i])

        await asyncio.gather(*(asyncio.to_thread(write, run) for run in _runs(len(pairs))))
    else:
        await asyncio.gather(*(store.set(key, value) for key, value in pairs))


class ZipTarget:
    """A new zip file written front to back, in a worker thread (the loop keeps reading)."""

    def __init__(self, path: str, comment: bytes) -> None:
        self.path = path
        self._file = open(path, "xb")  # noqa: SIM115 - closed in close()
        self._writer = _zipfiles.ZipWriter(self._file, comment)

    async def write(self, pairs: list[tuple[str, Buffer]]) -> None:
        def add_all() -> None:
            for key, value in pairs:
                self._writer.add(key, _view(value))

        await asyncio.to_thread(add_all)

    def finish(self) -> None:
        self._writer.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def abandon(self) -> None:
        self._file.close()


async def pipeline(
    src: Store,
    write: Callable[[list[tuple[str, Buffer]]], Any],
    items: Sequence[Item],
    batch_bytes: int,
    callback: ProgressCallback | None,
    keep_digests: bool,
) -> Tally:
    """Copy `items`: batch k+1 is read while batch k is written."""
    tally = Tally()
    queue: asyncio.Queue[list[tuple[Item, Buffer]] | None] = asyncio.Queue(maxsize=1)
    failure: list[BaseException] = []

    async def produce() -> None:
        try:
            for batch in batches(items, batch_bytes):
                values = await read_batch(src, [it.src for it in batch])
                for it, value in zip(batch, values, strict=True):
                    if value is None:
                        raise FileNotFoundError(f"the key {it.src!r} vanished from the source")
                await queue.put(list(zip(batch, values)))  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - raised by the consumer, once it has stopped
            failure.append(exc)
        await queue.put(None)

    producer = asyncio.ensure_future(produce())
    try:
        while (batch := await queue.get()) is not None:
            await write([(it.dst, value) for it, value in batch])
            tally.batches += 1
            for it, value in batch:
                tally.keys += 1
                tally.bytes += len(value)
                if keep_digests:
                    it.digest = digest(value)
                    tally.written.append(it)
                if callback is not None:
                    _report(callback, it, len(value))
        await producer
    finally:
        if not producer.done():
            producer.cancel()
            try:
                await producer
            except asyncio.CancelledError:
                pass
    if failure:
        raise failure[0]
    return tally


def _report(callback: ProgressCallback, item: Item, nbytes: int) -> None:
    child = callback.branched(item.src, item.dst)
    if child is not None:
        child.set_size(nbytes)
        child.relative_update(nbytes)
        child.close()
    callback.relative_update(1)


async def compare(
    src: Store, dst: Store, items: Sequence[Item], prefix: str, batch_bytes: int
) -> list[str]:
    """Lines for every difference between the copy and the source: each item's value in
    `dst` against its digest (or, without one, against the source's value), and keys below
    `prefix` in `dst` that the copy did not make."""
    expected = {it.dst for it in items}
    actual = {key async for key in dst.list_prefix(prefix)}
    out = [f"key {k!r}: in the destination only" for k in sorted(actual - expected)]
    for batch in batches(items, max(1, batch_bytes)):
        theirs = await read_batch(dst, [it.dst for it in batch])
        unknown = [it for it in batch if it.digest is None]
        values = await read_batch(src, [it.src for it in unknown]) if unknown else []
        ours = dict(zip((it.src for it in unknown), values, strict=True))
        for it, value in zip(batch, theirs, strict=True):
            if value is None:
                out.append(f"key {it.dst!r}: missing in the destination")
                continue
            want = it.digest
            if want is None:
                source_value = ours[it.src]
                want = None if source_value is None else digest(source_value)
            if want != digest(value):
                out.append(f"key {it.dst!r}: the value differs")
    return out
