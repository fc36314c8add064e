"""Every private name of another project that zarrdb uses, in one place.

zarr-python, asyncio and fsspec can change these in any release without notice;
tests/project/test_compat.py checks each against the installed versions and fails when one
changes. Nothing else in zarrdb reads another project's private names: it calls these.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zarr.abc.store import Store
    from zarr.storage import StorePath

# zarr's Store keeps whether it is open in the attribute `_is_open` (False from __init__ and
# close()), opens in `_open()` (ValueError if it is open already) and is opened by zarr, before
# its first use, through `_ensure_open()`. SQLiteStore implements the three (store.py): its
# flag follows whether its file is open, and opening it opens the file.
ZARR_STORE_HOOKS = ("_is_open", "_open", "_ensure_open")


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


async def fsspec_find(fs: Any, path: str) -> dict[str, dict[str, Any]]:
    """An asynchronous fsspec file system's recursive listing with details, awaited on the
    running loop (fsspec's async methods are its underscored names)."""
    found: dict[str, dict[str, Any]] = await fs._find(path, detail=True)
    return found
