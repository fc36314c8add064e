"""`zarrdb::PATH`: a .zarrdb file by name wherever zarr, xarray or dask take a URL.

    zarr.open_group("zarrdb::data.zarrdb", mode="w")
    xr.open_zarr("zarrdb::data.zarrdb"); ds.to_zarr("zarrdb::data.zarrdb")
    dask.array.from_zarr("zarrdb::https://example.org/data.zarrdb", component="t")

zarr sends a string with a protocol to its FsspecStore, which asks fsspec's registry for the
filesystem; the package registers this one under `zarrdb` (its `fsspec.specs` entry point).
As with fsspec's `zip` filesystem, the part after `::` names the file (`fo`, a local path or a
URL) and the part before it a path inside: `zarrdb://group/sub::data.zarrdb`. A zarr key is a
file of this filesystem; every call goes to one `SQLiteStore` per filesystem instance, opened
when first used. The filesystem is asynchronous, so zarr awaits it on its own event loop
instead of running each call in a thread.

A plain "data.zarrdb" makes zarr create a *directory* of that name: say `zarrdb::` (or pass a
`SQLiteStore`). Local files are writable; remote ones (`zarrdb::s3://...`, `zarrdb::https://...`)
are read through zarrdb's remote reader, read-only, with obstore's options under the inner
protocol's name: `storage_options={"s3": {"region": "eu-west-1"}}`. The other options are
SQLiteStore's: `storage_options={"durability": "full", "read_only": True}`.
"""

from __future__ import annotations

import io
import os
import threading
import weakref
from collections.abc import Iterable
from typing import Any

from fsspec.asyn import AsyncFileSystem
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import cpu

from zarrdb import _compat, _format
from zarrdb import remote as _remote
from zarrdb.store import SQLiteStore

__all__ = ["ZarrDBFileSystem", "close"]

# SQLiteStore's options a filesystem instance passes on (from storage_options).
_STORE_OPTIONS = (
    "durability",
    "page_size",
    "busy_timeout",
    "immutable",
    "cache_size",
    "mmap_size",
    "journal",
    "check_pages",
    "block_cache",
)


class ZarrDBFileSystem(AsyncFileSystem):  # type: ignore[misc]  # fsspec has no types
    """The keys of one .zarrdb file as files of an fsspec filesystem (protocol `zarrdb`).

    Parameters
    ----------
    fo
        The file: a local path, or a URL zarrdb reads remotely (read-only).
    target_protocol, target_options
        What fsspec passes for a chained URL: the protocol of `fo` (`file`, `s3`, `https`, ...)
        and its options, which for a remote file are obstore's `storage_options`.
    read_only
        Open the file read-only (always so for a remote one).
    **options
        `SQLiteStore`'s options (`durability`, `journal`, `block_cache`, ...), and fsspec's
        own (`asynchronous`, `loop`, ...).
    """

    protocol = "zarrdb"
    root_marker = ""
    # fsspec keeps instances made with the same arguments (in the same thread) and hands
    # them out again: every zarr call on "zarrdb::x.zarrdb" then shares one store.
    cachable = True

    def __init__(
        self,
        fo: str | os.PathLike[str] = "",
        *,
        target_protocol: str | None = None,
        target_options: dict[str, Any] | None = None,
        read_only: bool = False,
        **options: Any,
    ) -> None:
        store_options = {k: options.pop(k) for k in _STORE_OPTIONS if k in options}
        super().__init__(**options)
        location = os.fspath(fo)
        if not location:
            raise ValueError(
                "zarrdb:: needs a file after it: 'zarrdb::data.zarrdb', "
                "'zarrdb::s3://bucket/data.zarrdb'"
            )
        if target_protocol not in (None, "file", "local") and "://" not in location:
            location = f"{target_protocol}://{location}"  # s3fs and others strip it
        self.remote = _remote.is_url(location)
        if self.remote:
            store_options["storage_options"] = dict(target_options or {})
        else:
            location = os.path.abspath(location.removeprefix("file://"))
        self.location = location
        self.read_only = read_only or self.remote or bool(store_options.get("immutable"))
        self.store_options = store_options
        self._store: SQLiteStore | None = None
        self._lock = threading.Lock()
        _INSTANCES[id(self)] = self

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        # a key, relative to the file's root (as fsspec's zip filesystem does)
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        stripped: str = _compat.strip_protocol(cls, path)
        return stripped.strip("/")

    # --- the store ------------------------------------------------------------------------------

    def store(self) -> SQLiteStore:
        """The SQLiteStore behind this filesystem: read-only, or writable once the file exists
        (a missing local file is created by the first write, not by a read)."""
        store = self._store
        if store is not None:
            return store
        with self._lock:
            if self._store is None:
                self._store = SQLiteStore(
                    self.location, read_only=self.read_only, **self.store_options
                )
            return self._store

    def _exists_locally(self) -> bool:
        return self._store is not None or self.remote or os.path.exists(self.location)

    async def _reader(self) -> SQLiteStore | None:
        """The store to read, None while a local file does not exist (nothing is stored)."""
        if not self._exists_locally():
            return None
        return self.store()

    async def _writer(self) -> SQLiteStore:
        if self.read_only:
            where = "a remote file" if self.remote else "opened read-only"
            raise PermissionError(f"{self.location!r} is {where}: zarrdb:: cannot write to it")
        return self.store()

    def close(self) -> None:
        """Close the store (it reopens when used again): the file is one file again."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()

    # --- reading --------------------------------------------------------------------------------

    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        key = self._strip_protocol(path)
        store = await self._reader()
        value = None
        if store is not None:
            value = await store.get(key, cpu.buffer_prototype, _byte_request(start, end))
        if value is None:
            raise FileNotFoundError(path)
        return value.to_bytes()

    async def _cat_ranges(
        self,
        paths: list[str],
        starts: Any,
        ends: Any,
        max_gap: int | None = None,
        batch_size: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[Any]:
        # one engine call for every range (as zarr's get_partial_values), not one each
        if not isinstance(starts, Iterable):
            starts = [starts] * len(paths)
        if not isinstance(ends, Iterable):
            ends = [ends] * len(paths)
        starts, ends = list(starts), list(ends)
        if not len(paths) == len(starts) == len(ends):
            raise ValueError("paths, starts and ends differ in length")
        store = await self._reader()
        keys = [self._strip_protocol(p) for p in paths]
        values: list[Any] = [None] * len(keys)
        if store is not None:
            values = await store.get_partial_values(
                cpu.buffer_prototype,
                [(k, _byte_request(s, e)) for k, s, e in zip(keys, starts, ends, strict=True)],
            )
        out: list[Any] = []
        for path, value in zip(paths, values, strict=True):
            if value is None:
                if on_error != "return":
                    raise FileNotFoundError(path)
                out.append(FileNotFoundError(path))
            else:
                out.append(value.to_bytes())
        return out

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        key = self._strip_protocol(path)
        store = await self._reader()
        if store is not None:
            if key:
                try:
                    return {"name": key, "size": await store.getsize(key), "type": "file"}
                except FileNotFoundError:
                    pass
            if not key or not await store.is_empty(key):
                return {"name": key, "size": 0, "type": "directory"}
        elif not key:
            return {"name": key, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        key = self._strip_protocol(path)
        store = await self._reader()
        if store is None:
            return not key
        return not key or await store.exists(key) or not await store.is_empty(key)

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        key = self._strip_protocol(path)
        store = await self._reader()
        names: list[str] = []
        if store is not None:
            names = [name async for name in store.list_dir(key)]
        if not names:
            info = await self._info(path)  # FileNotFoundError if nothing is there
            if info["type"] == "file":
                return [info if detail else key]
            return []
        children = [f"{key}/{name}" if key else name for name in names]
        if not detail:
            return children
        return [await self._info(child) for child in children]

    async def _find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        key = self._strip_protocol(path)
        store = await self._reader()
        found: dict[str, dict[str, Any]] = {}
        if store is not None:
            if key and await store.exists(key):
                found[key] = {"name": key, "type": "file"}
            below = _format.dir_prefix(key)
            async for name in store.list_prefix(below):
                depth = name[len(below) :].count("/") + 1
                if maxdepth is not None and depth > maxdepth:
                    continue
                found[name] = {"name": name, "type": "file"}
                if withdirs:
                    parts = name.split("/")
                    for i in range(len(key.split("/")) if key else 0, len(parts) - 1):
                        folder = "/".join(parts[: i + 1])
                        found.setdefault(folder, {"name": folder, "type": "directory"})
        names = sorted(found)
        if detail:
            return {name: found[name] for name in names}
        return names

    # --- writing --------------------------------------------------------------------------------

    async def _pipe_file(
        self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any
    ) -> None:
        store = await self._writer()
        key = self._strip_protocol(path)
        buffer = cpu.Buffer.from_bytes(value)
        if mode == "create":
            if await store.exists(key):
                raise FileExistsError(path)
        await store.set(key, buffer)

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        store = await self._writer()
        key = self._strip_protocol(path)
        if not await store.exists(key):
            raise FileNotFoundError(path)
        await store.delete(key)

    async def _rm(
        self, path: Any, recursive: bool = False, batch_size: int | None = None, **kwargs: Any
    ) -> None:
        paths = path if isinstance(path, list) else [path]
        store = await self._writer()
        for each in paths:
            key = self._strip_protocol(each)
            if recursive:
                # the key itself (a file of that name) and everything below it
                if key and await store.exists(key):
                    await store.delete(key)
                await store.delete_dir(key)
            else:
                await self._rm_file(each)

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        pass  # folders are the keys' prefixes: there is nothing to make

    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        pass

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        """A file object of a key: read whole when opened, or written when closed."""
        if "r" in mode:
            return io.BytesIO(self.cat_file(path))
        if mode not in ("wb", "xb"):
            raise ValueError(f"zarrdb:: files open with 'rb', 'wb' or 'xb', not {mode!r}")
        return _WriteOnClose(self, path, "create" if mode == "xb" else "overwrite")


# Every instance of this process, for close(): fsspec keeps them (and so their open stores)
# for reuse, under keys a caller cannot easily rebuild.
# (By identity: fsspec's instances hash and compare by their arguments.)
_INSTANCES: weakref.WeakValueDictionary[int, ZarrDBFileSystem] = weakref.WeakValueDictionary()


def close(path: str | os.PathLike[str] | None = None) -> None:
    """Close the stores that `zarrdb::` URLs opened in this process (those of the file at `path`
    only, if given), leaving each file one file; a URL used again opens its file again.

    Stores also close when the process exits; call this to hand a file on before then (to
    upload it, or to another program that wants it closed)."""
    wanted = None
    if path is not None:
        wanted = os.fspath(path)
        wanted = wanted if _remote.is_url(wanted) else os.path.abspath(wanted)
    for fs in list(_INSTANCES.values()):
        if wanted is None or wanted == (fs.location if fs.remote else os.path.abspath(fs.location)):
            fs.close()


class _WriteOnClose(io.BytesIO):
    """A key opened for writing: stored as one value when closed."""

    def __init__(self, fs: ZarrDBFileSystem, path: str, how: str) -> None:
        super().__init__()
        self.fs, self.path, self.how = fs, path, how  # how: "overwrite" or "create"

    def close(self) -> None:
        if not self.closed:
            self.fs.pipe_file(self.path, self.getvalue(), mode=self.how)
        super().close()


def _byte_request(start: int | None, end: int | None) -> Any:
    """zarr's byte request for fsspec's (start, end): end exclusive; a negative start counts
    from the end of the value."""
    if start is None and end is None:
        return None
    if start is not None and start < 0:
        if end is not None:
            raise ValueError("a range from the end of a value takes no end")
        return SuffixByteRequest(-start)
    start = start or 0
    if end is None:
        return OffsetByteRequest(start)
    if end < 0:
        raise ValueError("a negative end needs the value's size; give a non-negative one")
    return RangeByteRequest(start, max(start, end))
