"""Every private name of another project that zarrdb uses, in one place.

zarr-python, asyncio, xarray and fsspec can change these in any release without notice;
tests/project/test_compat.py checks each against the installed versions and fails when one
changes. Nothing else in zarrdb reads another project's private names: it calls these, and a
method of zarrdb's named as another project's hook is one listed here (the *_HOOKS tuples;
tests/project/test_seams.py holds the rest of the package to it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zarr.abc.store import Store
    from zarr.storage import StorePath

# zarr's Store keeps whether it is open in the attribute `_is_open` (False from __init__ and
# close()), opens in `_open()` (ValueError if it is open already) and is opened by zarr, before
# its first use, through `_ensure_open()`. SQLiteStore implements the three (store.py): its
# flag follows whether its file is open, and opening it opens the file.
# zarr asks a store for several values at once through `_get_many` (its default gets them one
# by one); SQLiteStore answers it with one batched read (_reading.py), and the xarray backend's
# check of chunks of strings passes it on (_string_chunks.py).
ZARR_STORE_HOOKS = ("_is_open", "_open", "_ensure_open", "_get_many")
# zarr's LocalStore writes every value through `_set(key, value, exclusive)` (set and
# set_if_not_exists call it): ConfinedLocalStore writes there instead (_confined.py).
LOCAL_STORE_HOOKS = ("_set",)
# fsspec's file systems: `_strip_protocol` turns a URL into a path, `_open` opens a file (what
# `open` calls), and an asynchronous file system's methods are its underscored names (`_cat_file`,
# `_info`, ...): fsspec's documented way to write one (zarrdb.filesystem).
FSSPEC_HOOKS = ("_strip_protocol", "_open")


async def ensure_open(store: Store) -> None:
    """Open a zarr store as zarr does before it first uses one (no public method does this for
    every kind of store)."""
    await store._ensure_open()


async def store_path(source: Any, *, mode: str) -> StorePath:
    """What zarr's own functions make of `source` (a path, a URL, a mapping, a store, ...)."""
    from zarr.storage._common import make_store_path

    return await make_store_path(source, mode=mode)  # type: ignore[arg-type]


def async_array(array: Any) -> Any:
    """The zarr AsyncArray behind an Array."""
    return array._async_array


# The event loop running in this thread, or None: asyncio.get_running_loop() without the
# exception it raises where none runs (asked once per write, where there mostly is none; bound,
# not wrapped: a Python frame more costs a tenth of a write in a transaction).
running_loop: Callable[[], asyncio.AbstractEventLoop | None] = asyncio._get_running_loop


async def decode_bytes(codec: Any, data: Any, spec: Any) -> Any:
    """One chunk through a zarr bytes-to-bytes codec (a compressor) backwards: its one-chunk
    method, without the batching of its public `decode`."""
    return await codec._decode_single(data, spec)


def decode_bytes_sync(codec: Any, data: Any, spec: Any) -> Any:
    """The same, synchronously (zarr's codecs that can decode without the event loop)."""
    return codec._decode_sync(data, spec)


def get_many(store: Store, requests: Any) -> Any:
    """The values of `requests` ((key, prototype, byte range) each), as zarr asks a store for
    several at once: an async iterator of (key, value)."""
    return store._get_many(requests)


def local_store_set(store: Any, key: str, value: Any, exclusive: bool) -> Awaitable[None]:
    """zarr's LocalStore's own write of a value (its `_set`), for a subclass that overrides it
    and falls back to it: an awaitable."""
    from zarr.storage import LocalStore

    return LocalStore._set(store, key, value, exclusive=exclusive)


def ensure_open_sync(store: Any) -> None:
    """Open a zarr store without an event loop, as zarr's synchronous methods do first (zarr
    3.4; zarr 3.1 has no synchronous surface, and opens it at its first asynchronous use)."""
    ensure = getattr(store, "_ensure_open_sync", None)
    if ensure is not None:
        ensure()


def check_writable(store: Store) -> None:
    """Raise zarr's ValueError if `store` is read-only, as its own writes check first."""
    store._check_writable()


def strip_protocol(cls: Any, path: Any) -> Any:
    """What fsspec's AbstractFileSystem makes of `path` for a file system class `cls`: the
    path without its protocol (a subclass that overrides `_strip_protocol` calls this)."""
    from fsspec import AbstractFileSystem

    return AbstractFileSystem._strip_protocol.__func__(cls, path)


def xarray_closer(obj: Any) -> Any:
    """What closing an xarray Dataset or DataTree node runs now (None: nothing): xarray keeps
    it in `_close` and hands it on itself (to a dataset `chunks=` makes, to a tree's nodes)."""
    return getattr(obj, "_close", None)


async def fsspec_find(fs: Any, path: str) -> dict[str, dict[str, Any]]:
    """An asynchronous fsspec file system's recursive listing with details, awaited on the
    running loop (fsspec's async methods are its underscored names)."""
    found: dict[str, dict[str, Any]] = await fs._find(path, detail=True)
    return found
