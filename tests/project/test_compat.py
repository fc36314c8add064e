"""zarrdb._compat against the installed zarr, asyncio and fsspec: each private name it uses is
still there and still does what zarrdb relies on. A failure here names what a new release of
one of them changed."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import numpy as np
import zarr
from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
from fsspec.implementations.local import LocalFileSystem
from numcodecs import Zstd
from zarr.abc.store import Store
from zarr.codecs import ZstdCodec
from zarr.core.array import AsyncArray
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import Buffer
from zarr.storage import LocalStore, StorePath

from zarrdb import SQLiteStore, _compat


def test_zarr_stores_still_open_through_the_hooks_sqlitestore_implements(tmp_path):
    for hook in ("_open", "_ensure_open"):
        assert inspect.iscoroutinefunction(getattr(Store, hook)), hook
    local = LocalStore(tmp_path / "local")
    assert local._is_open is False  # zarr's Store.__init__ sets the flag
    asyncio.run(_compat.ensure_open(local))
    assert local._is_open is True
    local.close()
    assert local._is_open is False  # and Store.close() clears it
    for hook in _compat.ZARR_STORE_HOOKS:
        assert hook in vars(SQLiteStore), f"SQLiteStore no longer implements zarr's {hook}"


def test_ensure_open_opens_a_sqlitestore_as_zarr_would(tmp_path):
    store = SQLiteStore(tmp_path / "a.zarrdb")
    assert not store._is_open
    asyncio.run(_compat.ensure_open(store))
    assert store._is_open and (tmp_path / "a.zarrdb").is_file()
    store.close()


def test_store_path_is_what_zarr_makes_of_a_path(tmp_path):
    made = asyncio.run(_compat.store_path(str(tmp_path / "dir"), mode="a"))
    assert isinstance(made, StorePath) and isinstance(made.store, LocalStore)


def test_async_array_is_the_array_behind_a_zarr_array(tmp_path):
    arr = zarr.create_array(LocalStore(tmp_path / "arr"), shape=(4,), dtype="i4")
    arr[:] = np.arange(4)
    behind = _compat.async_array(arr)
    assert isinstance(behind, AsyncArray)
    assert asyncio.run(behind.getitem(slice(1, 3))).tolist() == [1, 2]


def test_running_loop_is_none_outside_a_loop_and_the_loop_inside():
    assert _compat.running_loop() is None

    async def inside() -> bool:
        return _compat.running_loop() is asyncio.get_running_loop()

    assert asyncio.run(inside())


def test_fsspec_find_lists_an_async_file_system_with_sizes(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_bytes(b"12345")
    fs = AsyncFileSystemWrapper(LocalFileSystem(), asynchronous=True)
    found = asyncio.run(_compat.fsspec_find(fs, str(tmp_path / "d")))
    assert [(name.rsplit("/", 1)[-1], info["size"]) for name, info in found.items()] == [("x", 5)]


def test_a_compressor_decodes_one_chunk_both_ways():

    codec = ZstdCodec()
    data = b"zarrdb" * 100
    packed = Buffer.from_bytes(Zstd().encode(data))  # a zstd frame, as zarr's codec writes
    spec = SimpleNamespace(prototype=default_buffer_prototype())
    assert _compat.decode_bytes_sync(codec, packed, spec).to_bytes() == data
    assert asyncio.run(_compat.decode_bytes(codec, packed, spec)).to_bytes() == data
