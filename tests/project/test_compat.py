"""zarrdb._compat against the installed zarr, asyncio, xarray and fsspec: each private name it
uses is still there and still does what zarrdb relies on. A failure here names what a new
release of one of them changed."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import numpy as np
import pytest
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
from zarrdb._confined import ConfinedLocalStore
from zarrdb.filesystem import ZarrDBFileSystem


def test_zarr_stores_still_open_through_the_hooks_sqlitestore_implements(tmp_path):
    for hook in ("_open", "_ensure_open"):
        assert inspect.iscoroutinefunction(getattr(Store, hook)), hook
    local = LocalStore(tmp_path / "local")
    assert local._is_open is False  # zarr's Store.__init__ sets the flag
    asyncio.run(_compat.ensure_open(local))
    assert local._is_open is True
    local.close()
    assert local._is_open is False  # and Store.close() clears it
    own = [vars(c) for c in SQLiteStore.__mro__ if c.__module__.startswith("zarrdb")]
    for hook in _compat.ZARR_STORE_HOOKS:
        assert hook in vars(Store) or hook == "_is_open", f"zarr's Store has no {hook} any more"
        assert any(hook in v for v in own), f"SQLiteStore no longer implements zarr's {hook}"


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


def test_zarr_asks_a_store_for_many_values_through_get_many(tmp_path):
    assert "_get_many" in vars(Store) and inspect.isasyncgenfunction(Store._get_many)
    local = LocalStore(tmp_path / "many")
    proto = default_buffer_prototype()
    asyncio.run(local.set("a", proto.buffer.from_bytes(b"1")))

    async def many() -> list[tuple[str, bytes | None]]:
        got = _compat.get_many(local, [("a", proto, None), ("b", proto, None)])
        return sorted([(key, None if v is None else v.to_bytes()) async for key, v in got])

    assert asyncio.run(many()) == [("a", b"1"), ("b", None)]


def test_local_store_writes_every_value_through_the_hook_confined_stores_override(tmp_path):
    for hook in _compat.LOCAL_STORE_HOOKS:
        assert inspect.iscoroutinefunction(getattr(LocalStore, hook)), hook
        assert hook in vars(ConfinedLocalStore), f"ConfinedLocalStore no longer overrides {hook}"
    written = []

    class Watching(LocalStore):
        async def _set(self, key, value, exclusive=False):
            written.append((key, exclusive))
            await _compat.local_store_set(self, key, value, exclusive)

    store = Watching(tmp_path / "watched")
    value = default_buffer_prototype().buffer.from_bytes(b"v")
    asyncio.run(store.set("k", value))
    asyncio.run(store.set_if_not_exists("j", value))
    assert written == [("k", False), ("j", True)]
    assert (tmp_path / "watched" / "k").read_bytes() == b"v"


def test_ensure_open_sync_and_check_writable_are_zarrs(tmp_path):
    (tmp_path / "sync").mkdir()
    local = LocalStore(tmp_path / "sync", read_only=True)
    _compat.ensure_open_sync(local)  # zarr 3.4 opens it; zarr 3.1 has nothing to do
    if hasattr(Store, "_ensure_open_sync"):
        assert local._is_open
    with pytest.raises(ValueError, match="read-only"):
        _compat.check_writable(local)
    _compat.check_writable(LocalStore(tmp_path / "rw"))


def test_fsspec_strips_a_protocol_through_the_hook_the_zarrdb_file_system_overrides():
    from fsspec import AbstractFileSystem

    for hook in _compat.FSSPEC_HOOKS:
        assert hook in vars(AbstractFileSystem), hook
        assert hook in vars(ZarrDBFileSystem), f"ZarrDBFileSystem no longer overrides {hook}"
    assert _compat.strip_protocol(LocalFileSystem, "file:///tmp/x/") == "/tmp/x"
    assert ZarrDBFileSystem._strip_protocol("zarrdb://a/b/") == "a/b"


def test_xarray_keeps_a_datasets_closer_where_compat_reads_it():
    xr = pytest.importorskip("xarray")
    ds = xr.Dataset({"v": ("x", [1, 2])})
    assert _compat.xarray_closer(ds) is None
    closed = []
    ds.set_close(lambda: closed.append(True))
    closer = _compat.xarray_closer(ds)
    assert callable(closer)
    closer()
    assert closed == [True]
