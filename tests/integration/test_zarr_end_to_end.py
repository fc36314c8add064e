"""zarr end to end on SQLiteStore: every result is compared with the numpy data it came from.

Covers groups and attributes, arrays of the common dtypes, compressors, sharding (including a
check, by counting what the store returns, that reading one inner chunk of a shard reads byte
ranges and not the whole shard), consolidated metadata, resize/append, overwrite, deletes,
read-only use, reopening, zarr's synchronous FusedCodecPipeline (when the installed zarr has
it), threads, `spawn` child processes and pickling.

The counting store is a `zarr.storage.WrapperStore` around the real SQLiteStore: no mocks.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.core.codec_pipeline
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec
from zarr.core.buffer import cpu, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import WrapperStore

from zarrdb import SQLiteStore

from . import _spawn_child

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    # zarr warns that consolidated metadata is not (yet) in the v3 spec.
    pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning"),
]

FUSED_PIPELINE = "zarr.core.codec_pipeline.FusedCodecPipeline"
HAS_FUSED_PIPELINE = hasattr(zarr.core.codec_pipeline, "FusedCodecPipeline")
needs_fused = pytest.mark.skipif(
    not HAS_FUSED_PIPELINE,
    reason=f"zarr {zarr.__version__} has no {FUSED_PIPELINE} (the synchronous codec "
    "pipeline that calls get_sync/set_sync/delete_sync)",
)


# --- helpers -------------------------------------------------------------------------------------


def keys(store: Any, prefix: str = "") -> list[str]:
    async def collect() -> list[str]:
        return [k async for k in store.list_prefix(prefix)]

    return sorted(sync(collect()))


def raw(store: Any, key: str) -> bytes | None:
    buf = sync(store.get(key, prototype=default_buffer_prototype()))
    return None if buf is None else buf.to_bytes()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def journal_is_wal(path: Path) -> bool:
    """From the SQLite file header (bytes 18-19: 1 = rollback journal, 2 = WAL), without
    opening the file with a second SQLite library."""
    header = path.read_bytes()[:100]
    assert header[:16] == b"SQLite format 3\x00"
    return header[18] == 2 and header[19] == 2


class CallLog:
    """Calls and bytes returned per store method, shared by the wrappers zarr derives from one
    (e.g. through with_read_only)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: collections.Counter[str] = collections.Counter()
        self.nbytes: collections.Counter[str] = collections.Counter()
        self.by_key: collections.Counter[tuple[str, str]] = collections.Counter()
        self.requests: collections.Counter[str] = collections.Counter()  # ByteRequest types

    def record(self, method: str, key: str, buffers: list[Any], requests: Any = ()) -> None:
        with self.lock:
            self.calls[method] += 1
            self.by_key[(method, key)] += 1
            self.nbytes[method] += sum(len(b) for b in buffers if b is not None)
            for request in requests:
                self.requests[f"{method}({type(request).__name__})"] += 1

    def clear(self) -> None:
        with self.lock:
            self.calls.clear()
            self.nbytes.clear()
            self.by_key.clear()
            self.requests.clear()

    def total_bytes(self) -> int:
        return sum(self.nbytes.values())

    def summary(self) -> str:
        calls = ", ".join(
            f"{m}: {n} calls/{self.nbytes[m]} B" for m, n in sorted(self.calls.items())
        )
        return f"{calls}; requests: {dict(sorted(self.requests.items()))}"


class CountingStore(WrapperStore):
    """The real store, with every read and write counted. Reads are recorded by the method zarr
    called ("get" / "get+range", "get_sync" / "get_sync+range", "get_partial_values",
    "get_ranges", "get_ranges_sync", "_get_many"), each counted once (a method that delegates
    to the wrapped store's own methods is not counted again)."""

    def __init__(self, store: SQLiteStore, log: CallLog | None = None) -> None:
        super().__init__(store)
        self.log = log if log is not None else CallLog()

    def _with_store(self, store: SQLiteStore) -> CountingStore:
        return type(self)(store, self.log)

    # reads
    async def get(self, key, prototype=None, byte_range: ByteRequest | None = None):
        if prototype is None:
            prototype = default_buffer_prototype()
        buf = await self._store.get(key, prototype, byte_range)
        self.log.record("get" if byte_range is None else "get+range", key, [buf], [byte_range])
        return buf

    async def get_partial_values(self, prototype, key_ranges):
        key_ranges = list(key_ranges)
        bufs = await self._store.get_partial_values(prototype, key_ranges)
        for (key, byte_range), buf in zip(key_ranges, bufs, strict=True):
            self.log.record("get_partial_values", key, [buf], [byte_range])
        return bufs

    async def get_ranges(self, key, byte_ranges, *, prototype, **kwargs):
        byte_ranges = list(byte_ranges)
        async for group in self._store.get_ranges(key, byte_ranges, prototype=prototype, **kwargs):
            self.log.record(
                "get_ranges", key, [buf for _, buf in group], [byte_ranges[i] for i, _ in group]
            )
            yield group

    async def _get_many(self, requests):
        async for key, buf in self._store._get_many(requests):
            self.log.record("_get_many", key, [buf])
            yield key, buf

    def get_sync(self, key, *, prototype=None, byte_range=None):
        buf = self._store.get_sync(key, prototype=prototype, byte_range=byte_range)
        method = "get_sync" if byte_range is None else "get_sync+range"
        self.log.record(method, key, [buf], [byte_range])
        return buf

    def get_ranges_sync(self, key, byte_ranges, *, prototype, **kwargs):
        byte_ranges = list(byte_ranges)
        results = self._store.get_ranges_sync(key, byte_ranges, prototype=prototype, **kwargs)
        bufs = [buf for _, buf in results]
        self.log.record("get_ranges_sync", key, bufs, [byte_ranges[i] for i, _ in results])
        return results

    # writes
    async def set(self, key, value):
        await self._store.set(key, value)
        self.log.record("set", key, [])

    async def _set_many(self, values):
        values = list(values)
        await self._store._set_many(values)
        for key, _ in values:
            self.log.record("_set_many", key, [])

    def set_sync(self, key, value):
        self._store.set_sync(key, value)
        self.log.record("set_sync", key, [])

    async def delete(self, key):
        await self._store.delete(key)
        self.log.record("delete", key, [])

    def delete_sync(self, key):
        self._store.delete_sync(key)
        self.log.record("delete_sync", key, [])


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "e2e.zarrdb"


@pytest.fixture
def store(path: Path):
    s = SQLiteStore(path)
    yield s
    s.close()


# --- groups and attributes -----------------------------------------------------------------------


ATTRS = {
    "title": "tëst ☃ – unicode",
    "n": 3,
    "pi": 3.141592653589793,
    "neg": -1.5e-300,
    "flag": True,
    "nothing": None,
    "list": [1, "two", [3.0, None], {"four": 4}],
    "nested": {"a": {"b": {"c": [1, 2, 3]}}},
}


def test_nested_groups_and_attributes(store: SQLiteStore, path: Path) -> None:
    root = zarr.open_group(store, mode="w", attributes={"root": True})
    a = root.create_group("a", attributes=ATTRS)
    b = a.create_group("b")
    b.attrs.update({"depth": 2, "list": [1, 2]})
    c = zarr.open_group(store, path="a/b/c", mode="a")
    c.attrs["depth"] = 3
    root.create_group("a_sibling")  # shares a name prefix with "a"
    uni = root.create_group("grüße", attributes={"ключ": "значение"})
    uni.create_array("漢字", shape=(3,), dtype="uint8")[:] = [1, 2, 3]
    x = b.create_array("x", shape=(5,), dtype="int16", attributes={"units": "m"})
    x[:] = np.arange(5, dtype="int16")
    a.attrs["title"] = "changed"  # update after creation
    del a.attrs["nothing"]
    store.close()

    expected_a = {k: v for k, v in ATTRS.items() if k != "nothing"} | {"title": "changed"}
    for s in (SQLiteStore(path), SQLiteStore(path, read_only=True)):
        try:
            root = zarr.open_group(s, mode="r")
            assert root.attrs.asdict() == {"root": True}
            assert sorted(root.group_keys()) == ["a", "a_sibling", "grüße"]
            assert root["grüße"].attrs.asdict() == {"ключ": "значение"}
            np.testing.assert_array_equal(root["grüße/漢字"][:], np.array([1, 2, 3], "uint8"))
            assert root["a"].attrs.asdict() == expected_a
            assert root["a/b"].attrs.asdict() == {"depth": 2, "list": [1, 2]}
            assert root["a/b/c"].attrs.asdict() == {"depth": 3}
            assert sorted(root["a/b"].group_keys()) == ["c"]
            assert sorted(root["a/b"].array_keys()) == ["x"]
            assert root["a/b/x"].attrs.asdict() == {"units": "m"}
            np.testing.assert_array_equal(root["a/b/x"][:], np.arange(5, dtype="int16"))
            members = sorted(name for name, _ in root.members(max_depth=None))
            assert members == [
                "a", "a/b", "a/b/c", "a/b/x", "a_sibling", "grüße", "grüße/漢字"
            ]
            # The metadata documents are stored as plain zarr.json values.
            meta = json.loads(raw(s, "a/zarr.json"))
            assert meta["node_type"] == "group"
            assert meta["attributes"] == expected_a
            assert keys(s) == [
                "a/b/c/zarr.json",
                "a/b/x/c/0",
                "a/b/x/zarr.json",
                "a/b/zarr.json",
                "a/zarr.json",
                "a_sibling/zarr.json",
                "grüße/zarr.json",
                "grüße/漢字/c/0",
                "grüße/漢字/zarr.json",
                "zarr.json",
            ]
        finally:
            s.close()


# --- dtypes --------------------------------------------------------------------------------------

SHAPE = (37, 23)
CHUNKS = (8, 5)

FIXED_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "datetime64[ns]",
    "datetime64[D]",
    "timedelta64[s]",
    "S7",  # fixed-length bytes (zarr: null_terminated_bytes)
    "U9",  # fixed-length str (zarr: fixed_length_utf32)
]


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random data of `dtype` with its edge values (min/max, nan/inf/-0.0, NaT, empty str)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    dt = np.dtype(dtype)
    if dt.kind == "b":
        flat = rng.random(n) < 0.5
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        flat = rng.integers(info.min, info.max, size=n, dtype=dt, endpoint=True)
        flat[:3] = [info.min, info.max, 0]
    elif dt.kind == "f":
        flat = (rng.standard_normal(n) * 1000).astype(dt)
        info = np.finfo(dt)
        flat[:7] = [np.nan, np.inf, -np.inf, -0.0, info.max, info.tiny, info.min]
    elif dt.kind == "c":
        flat = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
        flat[:3] = [complex(np.nan, 1.0), complex(np.inf, -np.inf), complex(-0.0, 0.0)]
    elif dt.kind in "mM":
        flat = rng.integers(-(10**9), 10**9, size=n).astype(dt)
        flat[:2] = [np.array("NaT").astype(dt), np.array(0).astype(dt)]
    elif dt.kind == "S":
        letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789 \x01\xff", dtype="S1")
        lengths = rng.integers(0, dt.itemsize + 1, size=n)
        flat = np.array([b"".join(rng.choice(letters, size=k)) for k in lengths], dtype=dt)
        flat[0] = b""
    elif dt.kind == "U":
        alphabet = list("abcxyz ÄÖÜßéñ☃€漢字🙂")
        lengths = rng.integers(0, dt.itemsize // 4 + 1, size=n)
        flat = np.array(["".join(rng.choice(alphabet, size=k)) for k in lengths], dtype=dt)
        flat[0] = ""
    else:  # pragma: no cover
        raise AssertionError(dtype)
    return flat.reshape(shape)


def vlen_strings(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    alphabet = list("abc XYZ 0123 ÄÖÜ ß é ñ ☃ € 漢字 🙂\n\t\"'\\")
    n = int(np.prod(shape))
    out = np.empty(n, dtype=object)
    for i in range(n):
        out[i] = "".join(rng.choice(alphabet, size=rng.integers(0, 40)))
    out[0] = ""
    out[1] = "x" * 5000  # longer than any other value in its chunk
    return out.reshape(shape)


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)
    # bit for bit: -0.0 against 0.0, NaN payloads, padding of fixed-length strings
    assert actual.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", FIXED_DTYPES)
def test_dtype_round_trip(dtype: str, store: SQLiteStore, path: Path) -> None:
    data = sample(dtype, SHAPE)
    arr = zarr.create_array(store, name="arr", shape=SHAPE, dtype=data.dtype, chunks=CHUNKS)
    arr[:] = data
    assert_same(arr[:], data)
    store.close()

    ro = SQLiteStore(path, read_only=True)
    try:
        arr = zarr.open_array(ro, path="arr", mode="r")
        assert_same(arr[:], data)
        # partial chunks and strided selections
        assert_same(arr[3:30:4, 2:20:3], data[3:30:4, 2:20:3])
        assert_same(arr.oindex[[0, 9, 36], [22, 4, 0]], data[np.ix_([0, 9, 36], [22, 4, 0])])
        # ceil(37/8) * ceil(23/5) chunks, all stored
        assert len(keys(ro, "arr/c/")) == 5 * 5
    finally:
        ro.close()


def test_variable_length_strings(store: SQLiteStore, path: Path) -> None:
    data = vlen_strings(SHAPE)
    arr = zarr.create_array(store, name="s", shape=SHAPE, dtype=str, chunks=CHUNKS)
    arr[:] = data
    store.close()
    store = SQLiteStore(path, read_only=True)
    try:
        arr = zarr.open_array(store, path="s", mode="r")
        result = arr[:]
        assert result.shape == data.shape
        assert result.tolist() == data.tolist()
        assert arr[1:20:3, 5].tolist() == data[1:20:3, 5].tolist()
    finally:
        store.close()


def test_fill_value_and_unwritten_chunks(store: SQLiteStore) -> None:
    arr = zarr.create_array(
        store, name="f", shape=(40, 40), dtype="float32", chunks=(10, 10), fill_value=-7.5
    )
    expected = np.full((40, 40), -7.5, dtype="float32")
    arr[12:18, 25:40] = 1.0
    expected[12:18, 25:40] = 1.0
    assert keys(store, "f/c/") == ["f/c/1/2", "f/c/1/3"]
    np.testing.assert_array_equal(arr[:], expected)
    # writing the fill value back removes the chunks (write_empty_chunks is False by default)
    arr[10:20, 20:40] = -7.5
    assert keys(store, "f/c/") == []
    np.testing.assert_array_equal(arr[:], np.full((40, 40), -7.5, dtype="float32"))


# --- compression ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codec", "name"),
    [
        (ZstdCodec(level=3), "zstd"),
        (GzipCodec(level=5), "gzip"),
        (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), "blosc"),
    ],
    ids=["zstd", "gzip", "blosc"],
)
def test_compression(codec: Any, name: str, store: SQLiteStore, path: Path) -> None:
    rng = np.random.default_rng(1)
    data = (np.arange(200 * 300, dtype="int32").reshape(200, 300) % 97) + rng.integers(
        0, 2, size=(200, 300), dtype="int32"
    )
    arr = zarr.create_array(
        store, name="c", shape=data.shape, dtype=data.dtype, chunks=(50, 60), compressors=codec
    )
    arr[:] = data
    store.close()

    ro = SQLiteStore(path, read_only=True)
    try:
        meta = json.loads(raw(ro, "c/zarr.json"))
        assert [c["name"] for c in meta["codecs"]][-1] == name
        chunk_keys = keys(ro, "c/c/")
        assert len(chunk_keys) == 4 * 5
        stored = sync(ro.getsize_prefix("c/c"))
        assert stored == sum(len(raw(ro, k)) for k in chunk_keys)
        assert stored < data.nbytes / 3, f"{name}: {stored} bytes stored for {data.nbytes}"
        arr = zarr.open_array(ro, path="c", mode="r")
        assert_same(arr[:], data)
        assert_same(arr[17:133, 59:61], data[17:133, 59:61])
    finally:
        ro.close()


# --- sharding ------------------------------------------------------------------------------------


def test_sharding_round_trip(store: SQLiteStore, path: Path) -> None:
    rng = np.random.default_rng(2)
    data = rng.standard_normal((256, 192)).astype("float64")
    arr = zarr.create_array(
        store,
        name="sh",
        shape=data.shape,
        dtype=data.dtype,
        chunks=(32, 32),
        shards=(128, 96),
        compressors=ZstdCodec(level=1),
    )
    arr[:] = data
    assert keys(store, "sh/") == ["sh/c/0/0", "sh/c/0/1", "sh/c/1/0", "sh/c/1/1", "sh/zarr.json"]
    # a write into part of one inner chunk rewrites that shard only
    before = {k: raw(store, k) for k in keys(store, "sh/c/")}
    arr[40:50, 100:110] = 0.5
    data[40:50, 100:110] = 0.5
    after = {k: raw(store, k) for k in keys(store, "sh/c/")}
    assert [k for k in before if before[k] != after[k]] == ["sh/c/0/1"]
    store.close()

    ro = SQLiteStore(path, read_only=True)
    try:
        arr = zarr.open_array(ro, path="sh", mode="r")
        assert_same(arr[:], data)
        assert_same(arr[100:140, 90:100], data[100:140, 90:100])  # across 4 shards
    finally:
        ro.close()


INNER = (64, 64)  # 16 KiB of float32
SHARD = (1024, 1024)  # 4 MiB of float32, 256 inner chunks
INDEX_BYTES = 256 * 16 + 4  # (offset, nbytes) per inner chunk + crc32c


def _pipelines() -> list[Any]:
    return [
        pytest.param(None, id="default-pipeline"),
        pytest.param(FUSED_PIPELINE, id="fused-pipeline", marks=needs_fused),
    ]


@pytest.mark.parametrize("pipeline", _pipelines())
@pytest.mark.parametrize("compressed", [False, True], ids=["raw", "zstd"])
def test_sharding_partial_read_uses_byte_ranges(
    pipeline: str | None, compressed: bool, path: Path
) -> None:
    # random data: compressed or not, the shard stays about 4 MiB
    data = np.random.default_rng(8).standard_normal(SHARD).astype("float32")
    writer = SQLiteStore(path)
    arr = zarr.create_array(
        writer,
        name="s",
        shape=SHARD,
        dtype="float32",
        chunks=INNER,
        shards=SHARD,
        compressors=ZstdCodec(level=1) if compressed else None,
    )
    arr[:] = data
    shard_size = sync(writer.getsize("s/c/0/0"))
    writer.close()
    if not compressed:
        assert shard_size == data.nbytes + INDEX_BYTES

    config = {"codec_pipeline.path": pipeline} if pipeline else {}
    counting = CountingStore(SQLiteStore(path, read_only=True))
    try:
        with zarr.config.set(config):
            arr = zarr.open_array(counting, path="s", mode="r")
            log = counting.log
            log.clear()
            got = arr[64:128, 128:192]  # exactly inner chunk (1, 2)
        np.testing.assert_array_equal(got, data[64:128, 128:192])
        chunk_bytes = INNER[0] * INNER[1] * 4
        note = f"zarr {zarr.__version__}, {pipeline or 'default pipeline'}: {log.summary()}"
        print(note)
        assert log.calls, note
        assert log.by_key[("get", "s/c/0/0")] == 0, f"whole-shard get: {note}"
        assert log.by_key[("get_sync", "s/c/0/0")] == 0, f"whole-shard get_sync: {note}"
        assert log.total_bytes() < 2 * chunk_bytes + INDEX_BYTES, note
        assert log.total_bytes() < shard_size / 100, note

        # Two inner chunks far apart: still only their ranges (plus the index).
        log.clear()
        with zarr.config.set(config):
            arr = zarr.open_array(counting, path="s", mode="r")
            log.clear()
            got = arr[0:64, 0:64]
            got2 = arr[960:1024, 960:1024]
        np.testing.assert_array_equal(got, data[0:64, 0:64])
        np.testing.assert_array_equal(got2, data[960:1024, 960:1024])
        assert log.total_bytes() <= 2 * (chunk_bytes + INDEX_BYTES), log.summary()
    finally:
        counting.close()


# --- large chunks ---------------------------------------------------------------------------------


def _large_chunks_round_trip(path: Path, n_chunks: int) -> None:
    """Chunks of 4 MiB: large reads and range reads leave the event loop for a worker thread
    and large group commits are written from one, and a group commit is capped in size."""
    rng = np.random.default_rng(7)
    data = rng.standard_normal((n_chunks, 1024, 1024)).astype("float32")
    store = SQLiteStore(path)
    try:
        arr = zarr.create_array(
            store, name="big", shape=data.shape, dtype=data.dtype, chunks=(1, 1024, 1024),
            compressors=None,
        )
        arr[:] = data  # zarr writes the chunks concurrently: they queue into group commits
        assert keys(store, "big/c/") == sorted(f"big/c/{i}/0/0" for i in range(n_chunks))
        np.testing.assert_array_equal(arr[:], data)
        proto = default_buffer_prototype()
        last = n_chunks - 1
        key = f"big/c/{last}/0/0"
        whole = data[last].tobytes()
        assert sync(store.getsize(key)) == len(whole)
        for request, expected in [
            (RangeByteRequest(1000, 1000 + 3 * 2**20), whole[1000 : 1000 + 3 * 2**20]),
            (OffsetByteRequest(2**20 + 3), whole[2**20 + 3 :]),
            (SuffixByteRequest(300_000), whole[-300_000:]),
        ]:
            got = sync(store.get(key, prototype=proto, byte_range=request))
            assert got is not None and got.to_bytes() == expected, request
            got = store.get_sync(key, prototype=proto, byte_range=request)
            assert got is not None and got.to_bytes() == expected, request
    finally:
        store.close()
    ro = SQLiteStore(path, read_only=True)
    try:
        np.testing.assert_array_equal(zarr.open_array(ro, path="big", mode="r")[:], data)
    finally:
        ro.close()


def test_large_chunks(path: Path) -> None:
    _large_chunks_round_trip(path, n_chunks=3)


def test_large_chunks_over_group_commit_cap(path: Path) -> None:
    # 20 x 4 MiB queued at once: more than one group commit's cap of 64 MiB
    _large_chunks_round_trip(path, n_chunks=20)


# --- consolidated metadata -----------------------------------------------------------------------


def test_consolidated_metadata(store: SQLiteStore, path: Path) -> None:
    root = zarr.open_group(store, mode="w", attributes={"k": "v"})
    arrays = {
        "a/x": np.arange(12, dtype="int32").reshape(3, 4),
        "a/b/y": np.linspace(0, 1, 7),
        "z": np.array([True, False, True]),
    }
    for name, data in arrays.items():
        arr = root.create_array(name, shape=data.shape, dtype=data.dtype, chunks=data.shape)
        arr[:] = data
    root.create_group("empty")
    zarr.consolidate_metadata(store)
    root_meta = json.loads(raw(store, "zarr.json"))
    assert root_meta["consolidated_metadata"]["kind"] == "inline"
    store.close()

    counting = CountingStore(SQLiteStore(path, read_only=True))
    try:
        group = zarr.open_consolidated(counting, mode="r")
        assert group.metadata.consolidated_metadata is not None
        assert group.attrs.asdict() == {"k": "v"}
        members = sorted(name for name, _ in group.members(max_depth=None))
        assert members == ["a", "a/b", "a/b/y", "a/x", "empty", "z"]
        counting.log.clear()
        for name, data in arrays.items():
            node = group[name]
            assert node.shape == data.shape
            np.testing.assert_array_equal(node[:], data)
        # the nodes' metadata came from the consolidated document: no zarr.json was read
        read = {key for (_, key) in counting.log.by_key}
        assert not [k for k in read if k.endswith("zarr.json")], read
    finally:
        counting.close()


# --- resize, append ------------------------------------------------------------------------------


def test_resize_and_append(store: SQLiteStore, path: Path) -> None:
    rng = np.random.default_rng(3)
    expected = rng.integers(0, 1000, size=(20, 30), dtype="int64")
    arr = zarr.create_array(
        store, name="r", shape=(20, 30), dtype="int64", chunks=(8, 8), fill_value=0
    )
    arr[:] = expected

    # grow: the new area reads as the fill value
    arr.resize((33, 41))
    grown = np.zeros((33, 41), dtype="int64")
    grown[:20, :30] = expected
    expected = grown
    np.testing.assert_array_equal(arr[:], expected)
    expected[25:33, 35:41] = 9
    arr[25:33, 35:41] = 9
    np.testing.assert_array_equal(arr[:], expected)

    # shrink: chunks wholly outside the new shape are deleted from the store
    before_shrink = expected.copy()
    arr.resize((12, 17))
    expected = expected[:12, :17].copy()
    np.testing.assert_array_equal(arr[:], expected)
    assert keys(store, "r/c/") == [f"r/c/{i}/{j}" for i in range(2) for j in range(3)]

    # grow again: where the deleted chunks were, the fill value. (zarr keeps the edge chunks
    # as they were, so within them the values from before the shrink come back, as they do
    # on a MemoryStore.)
    arr.resize((24, 33))
    expected = np.zeros((24, 33), dtype="int64")
    expected[:16, :24] = before_shrink[:16, :24]
    np.testing.assert_array_equal(arr[:], expected)

    # append along each axis
    rows = rng.integers(0, 1000, size=(5, 33), dtype="int64")
    arr.append(rows, axis=0)
    expected = np.concatenate([expected, rows], axis=0)
    cols = rng.integers(0, 1000, size=(29, 11), dtype="int64")
    arr.append(cols, axis=1)
    expected = np.concatenate([expected, cols], axis=1)
    assert arr.shape == expected.shape == (29, 44)
    np.testing.assert_array_equal(arr[:], expected)
    store.close()

    reopened = zarr.open_array(SQLiteStore(path, read_only=True), path="r", mode="r")
    try:
        assert reopened.shape == (29, 44)
        np.testing.assert_array_equal(reopened[:], expected)
    finally:
        reopened.store.close()


# --- overwrite -----------------------------------------------------------------------------------


def test_overwrite_with_mode_w(store: SQLiteStore, path: Path) -> None:
    root = zarr.open_group(store, mode="w")
    root.attrs["old"] = 1
    for name in ("a", "ab", "a_b"):
        arr = root.create_array(name, shape=(6,), dtype="int8", chunks=(2,))
        arr[:] = 1
    root.create_group("g").create_array("inner", shape=(3,), dtype="int8")[:] = 2

    # mode="w" on a sub-path replaces that node only, not siblings sharing its name prefix
    new_a = zarr.open_array(store, path="a", mode="w", shape=(2, 2), dtype="float64", chunks=(1, 2))
    new_a[:] = [[1.5, 2.5], [3.5, 4.5]]
    assert keys(store, "a/") == ["a/c/0/0", "a/c/1/0", "a/zarr.json"]
    np.testing.assert_array_equal(zarr.open_array(store, path="ab")[:], np.ones(6, dtype="int8"))
    np.testing.assert_array_equal(zarr.open_array(store, path="a_b")[:], np.ones(6, dtype="int8"))

    g = zarr.open_group(store, path="g", mode="w")
    assert list(g.members()) == []
    assert keys(store, "g/") == ["g/zarr.json"]

    # create_array(overwrite=True) with another shape: no chunk of the old array survives
    ab = zarr.create_array(
        store, name="ab", shape=(1,), dtype="uint16", chunks=(1,), overwrite=True
    )
    ab[:] = 7
    assert keys(store, "ab/") == ["ab/c/0", "ab/zarr.json"]

    # mode="w" at the root: only the new root document is left
    root = zarr.open_group(store, mode="w", attributes={"new": True})
    assert keys(store) == ["zarr.json"]
    store.close()

    reopened = SQLiteStore(path, read_only=True)
    try:
        root = zarr.open_group(reopened, mode="r")
        assert root.attrs.asdict() == {"new": True}
        assert list(root.members()) == []
    finally:
        reopened.close()


# --- delete --------------------------------------------------------------------------------------


def test_delete_arrays_and_groups(store: SQLiteStore, path: Path) -> None:
    root = zarr.open_group(store, mode="w")
    names = ["x", "x2", "x.y", "xg/arr"]
    data = {name: np.full((4, 4), i, dtype="uint8") for i, name in enumerate(names)}
    for name, d in data.items():
        root.create_array(name, shape=d.shape, dtype=d.dtype, chunks=(2, 2))[:] = d
    sub = root.create_group("grp")
    sub.create_group("deeper").create_array("leaf", shape=(3,), dtype="f4")[:] = 1
    root.create_group("grp_keep")

    del root["x"]
    assert "x" not in root
    assert keys(store, "x/") == []
    del root["grp"]
    assert "grp" not in root
    assert keys(store, "grp/") == []
    with pytest.raises(KeyError):
        root["x"]

    expected_members = ["grp_keep", "x.y", "x2", "xg", "xg/arr"]
    assert sorted(name for name, _ in root.members(max_depth=None)) == expected_members
    for name in ("x2", "x.y", "xg/arr"):
        np.testing.assert_array_equal(root[name][:], data[name])
    store.close()

    reopened = SQLiteStore(path, read_only=True)
    try:
        root = zarr.open_group(reopened, mode="r")
        assert sorted(name for name, _ in root.members(max_depth=None)) == expected_members
        assert keys(reopened, "x/") == [] and keys(reopened, "grp/") == []
        for name in ("x2", "x.y", "xg/arr"):
            np.testing.assert_array_equal(root[name][:], data[name])
    finally:
        reopened.close()


# --- read-only -----------------------------------------------------------------------------------


def _write_sample(store: SQLiteStore) -> np.ndarray:
    root = zarr.open_group(store, mode="w", attributes={"a": 1})
    data = np.arange(100, dtype="float32").reshape(10, 10)
    root.create_array("arr", shape=data.shape, dtype=data.dtype, chunks=(5, 5))[:] = data
    root.create_group("sub")
    return data


def _assert_no_writes(root: zarr.Group) -> None:
    arr = root["arr"]
    with pytest.raises(ValueError, match="read-only"):
        arr[0, 0] = 123.0
    with pytest.raises(ValueError, match="read-only"):
        arr.resize((20, 20))
    with pytest.raises(ValueError, match="read-only"):
        root.attrs["a"] = 2
    with pytest.raises(ValueError, match="read-only"):
        root.create_group("new")
    with pytest.raises(ValueError, match="read-only"):
        del root["sub"]


def test_zarr_open_mode_r_is_read_only(store: SQLiteStore, path: Path) -> None:
    data = _write_sample(store)
    root = zarr.open(store, mode="r")
    assert isinstance(root, zarr.Group)
    assert root.store.read_only
    _assert_no_writes(root)
    with pytest.raises(ValueError, match="read-only"):
        root.store.set_sync("k", cpu.Buffer.from_bytes(b"v"))
    # nothing changed, seen through the writable store too
    np.testing.assert_array_equal(zarr.open_array(store, path="arr")[:], data)
    assert zarr.open_group(store).attrs.asdict() == {"a": 1}
    assert "sub" in zarr.open_group(store)
    arr = zarr.open(store, path="arr", mode="r")
    assert isinstance(arr, zarr.Array)
    np.testing.assert_array_equal(arr[:], data)
    with pytest.raises(ValueError, match="read-only"):
        arr[:] = 0
    # zarr made read-only copies of the store: close them
    root.store.close()
    arr.store.close()


def test_open_read_only_after_close_leaves_file_unchanged(store: SQLiteStore, path: Path) -> None:
    data = _write_sample(store)
    store.close()
    assert not journal_is_wal(path), "a closed store must leave the file in rollback-journal mode"
    digest = file_sha256(path)

    ro = SQLiteStore(path, read_only=True)
    try:
        assert ro.read_only
        root = zarr.open(ro, mode="r")
        np.testing.assert_array_equal(root["arr"][:], data)
        assert root.attrs.asdict() == {"a": 1}
        _assert_no_writes(root)
        with pytest.raises(ValueError, match="read-only"):
            sync(ro.set("k", cpu.Buffer.from_bytes(b"v")))
        with pytest.raises(ValueError, match="read-only"):
            ro.delete_sync("zarr.json")
        with pytest.raises(ValueError, match="read-only"):
            sync(ro.delete_dir("arr"))
    finally:
        ro.close()
    assert file_sha256(path) == digest
    assert sorted(os.listdir(path.parent)) == [path.name]


def test_mode_r_on_missing_file_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.zarrdb"
    with pytest.raises(FileNotFoundError):
        zarr.open(SQLiteStore(missing, read_only=True), mode="r")
    with pytest.raises(FileNotFoundError):
        zarr.open_group(SQLiteStore(missing), mode="r")
    assert os.listdir(tmp_path) == []


def test_read_only_store_alongside_open_writer(store: SQLiteStore, path: Path) -> None:
    """A read-only store opened while the writer is open sees every committed write."""
    data = _write_sample(store)
    ro = SQLiteStore(path, read_only=True)
    try:
        arr_ro = zarr.open_array(ro, path="arr", mode="r")
        np.testing.assert_array_equal(arr_ro[:], data)
        zarr.open_array(store, path="arr")[2:7, 2:7] = -1
        data[2:7, 2:7] = -1
        np.testing.assert_array_equal(arr_ro[:], data)
    finally:
        ro.close()


def test_reopen_after_close(store: SQLiteStore, path: Path) -> None:
    data = _write_sample(store)
    assert store._is_open
    store.close()
    assert not store._is_open
    assert not journal_is_wal(path)
    assert not any(os.path.exists(f"{path}{s}") for s in ("-wal", "-shm", "-journal"))

    # the same object reopens by itself on its next use, for reads and for writes
    arr = zarr.open_array(store, path="arr")
    np.testing.assert_array_equal(arr[:], data)
    arr[0] = 42
    data[0] = 42
    assert store._is_open
    store.close()
    store.close()  # idempotent

    # a new object on the same file
    again = SQLiteStore(path)
    try:
        arr = zarr.open_array(again, path="arr")
        np.testing.assert_array_equal(arr[:], data)
        arr.resize((12, 10))
        arr[10:] = 7
    finally:
        again.close()
    data = np.concatenate([data, np.full((2, 10), 7, dtype=data.dtype)])

    # and after several open/close cycles the data is still all there
    for _ in range(3):
        s = SQLiteStore(path)
        try:
            np.testing.assert_array_equal(zarr.open_array(s, path="arr")[:], data)
        finally:
            s.close()
    assert not journal_is_wal(path)


# --- transactions ------------------------------------------------------------------------------


def _commits_so_far(path: Path) -> int:
    """The file's change counter (header offset 24), which SQLite raises by one at every commit
    while the file is in a rollback journal (journal="delete")."""
    with open(path, "rb") as f:
        return int.from_bytes(f.read(28)[24:28], "big")


async def test_transaction_with_zarr_async_api(path: Path) -> None:
    """`async with store.transaction()` around zarr's async API: one commit, or none."""
    from zarr.api.asynchronous import create_array

    store = SQLiteStore(path, journal="delete")  # a rollback journal: commits are counted
    try:
        arr = await create_array(
            store, name="a", shape=(20,), chunks=(4,), dtype="int32", fill_value=0
        )
        data = np.arange(20, dtype="int32")
        before = _commits_so_far(path)
        async with store.transaction():
            await arr.setitem(slice(None), data)  # five chunks
            np.testing.assert_array_equal(await arr.getitem(slice(None)), data)
            assert _commits_so_far(path) == before
        assert _commits_so_far(path) == before + 1
        np.testing.assert_array_equal(await arr.getitem(slice(None)), data)
        with pytest.raises(RuntimeError, match="roll back"):
            async with store.transaction():
                await arr.setitem(slice(0, 10), np.full(10, -1, dtype="int32"))
                raise RuntimeError("roll back")
        assert _commits_so_far(path) == before + 1
        np.testing.assert_array_equal(await arr.getitem(slice(None)), data)
    finally:
        store.close()
    ro = SQLiteStore(path, read_only=True)
    try:
        np.testing.assert_array_equal(zarr.open_array(ro, path="a", mode="r")[:], data)
    finally:
        ro.close()


_TRANSACTION_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import zarr
    from zarrdb import SQLiteStore

    store = SQLiteStore(sys.argv[1])
    other = SQLiteStore(sys.argv[1], read_only=True)  # another connection to the file
    arr = zarr.open_array(store, path="a")
    seen = zarr.open_array(other, path="a", mode="r")
    with store.transaction():
        arr[:] = np.arange(20, dtype="int32")
        assert (arr[:] == np.arange(20)).all()  # reads inside see the block's writes
        assert (seen[:] == 0).all()  # other connections do not, until the commit
    assert (seen[:] == np.arange(20)).all()
    try:
        with store.transaction():
            arr[0:10] = -1
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert (arr[:] == np.arange(20)).all()
    if sys.argv[2] != "-":  # the same through zarr's synchronous codec pipeline
        with zarr.config.set({"codec_pipeline.path": sys.argv[2]}):
            fused = zarr.open_array(store, path="a")
        try:
            with store.transaction():
                fused[:] = 5
                assert (fused[:] == 5).all()
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        assert (fused[:] == np.arange(20)).all()
    other.close()
    store.close()
    print("done")
    """
)


def test_transaction_with_zarr_sync_api(path: Path) -> None:
    """`with store.transaction():` around zarr's synchronous API (`arr[:] = ...`), which runs
    the store calls on zarr's own event-loop thread. Run in a child process with a timeout, so
    a hang fails this test instead of blocking zarr's event loop for the rest of the run."""
    store = SQLiteStore(path)
    zarr.create_array(store, name="a", shape=(20,), chunks=(4,), dtype="int32", fill_value=0)
    store.close()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                _TRANSACTION_SCRIPT,
                str(path),
                FUSED_PIPELINE if HAS_FUSED_PIPELINE else "-",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            "`with store.transaction(): arr[:] = data` (zarr's sync API) did not finish in 20 s: "
            "the transaction holds the store's write lock on the calling thread while zarr "
            "does the writes on its event-loop thread, which waits for that lock"
        )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    ro = SQLiteStore(path, read_only=True)
    try:
        np.testing.assert_array_equal(
            zarr.open_array(ro, path="a", mode="r")[:], np.arange(20, dtype="int32")
        )
    finally:
        ro.close()


# --- FusedCodecPipeline (synchronous codec pipeline) ---------------------------------------------


@needs_fused
@pytest.mark.parametrize("max_workers", [1, 4])
@pytest.mark.parametrize("shards", [None, (64, 64)], ids=["chunks", "shards"])
def test_fused_codec_pipeline_round_trip(
    max_workers: int, shards: tuple[int, int] | None, path: Path
) -> None:
    rng = np.random.default_rng(4)
    data = rng.standard_normal((128, 128))
    counting = CountingStore(SQLiteStore(path))
    config = {"codec_pipeline.path": FUSED_PIPELINE, "codec_pipeline.max_workers": max_workers}
    try:
        with zarr.config.set(config):
            arr = zarr.create_array(
                counting,
                name="f",
                shape=data.shape,
                dtype=data.dtype,
                chunks=(16, 16),
                shards=shards,
                compressors=ZstdCodec(level=1),
                fill_value=0.0,
            )
            assert type(arr._async_array.codec_pipeline).__name__ == "FusedCodecPipeline"
            log = counting.log
            log.clear()
            arr[:] = data
            assert log.calls["set_sync"] > 0, log.summary()
            assert log.calls["set"] == 0, f"chunk writes went through async set: {log.summary()}"
            # partial update: read-modify-write of the touched chunks
            arr[5:70, 3:99] = data[5:70, 3:99] * 2
            data[5:70, 3:99] *= 2
            # a chunk of fill values is deleted (one shard holds other data: rewritten)
            arr[0:16, 0:16] = 0.0
            data[0:16, 0:16] = 0.0
            if shards is None:
                assert log.calls["delete_sync"] == 1, log.summary()
                assert "f/c/0/0" not in keys(counting, "f/c/")
            log.clear()
            got = zarr.open_array(counting, path="f")[:]
            assert log.calls["get_sync"] + log.calls["get_sync+range"] > 0, log.summary()
            np.testing.assert_array_equal(got, data)
            np.testing.assert_array_equal(arr[100:128, 17:33], data[100:128, 17:33])
    finally:
        counting.close()

    # what the fused pipeline wrote, the default pipeline reads
    store = SQLiteStore(path, read_only=True)
    try:
        np.testing.assert_array_equal(zarr.open_array(store, path="f", mode="r")[:], data)
    finally:
        store.close()


# --- threads -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", _pipelines())
def test_threads_write_disjoint_regions(
    pipeline: str | None, store: SQLiteStore, path: Path
) -> None:
    """4 threads write disjoint, chunk-aligned row blocks of one array through one store.
    (With the fused pipeline the store calls run on worker threads at the same time, not only
    on zarr's event-loop thread.)"""
    n_threads = 4
    rows = 100  # per thread; chunk-aligned, so no two threads touch one chunk
    shape = (n_threads * rows, 300)
    arr = zarr.create_array(
        store, name="t", shape=shape, dtype="int32", chunks=(25, 50), compressors=ZstdCodec(level=1)
    )
    rng = np.random.default_rng(5)
    expected = rng.integers(-(2**31), 2**31 - 1, size=shape, dtype="int32")
    barrier = threading.Barrier(n_threads)
    config = {"codec_pipeline.path": pipeline, "codec_pipeline.max_workers": 2} if pipeline else {}
    with zarr.config.set(config):  # the pipeline is chosen when an array is opened
        arrays = [zarr.open_array(store, path="t") for _ in range(n_threads)]

    def work(i: int) -> None:
        mine = arrays[i]
        barrier.wait()
        for step in range(4):  # several writes each, interleaved with the other threads
            lo = i * rows + step * 25
            mine[lo : lo + 25] = expected[lo : lo + 25]
            np.testing.assert_array_equal(mine[lo : lo + 25], expected[lo : lo + 25])

    with concurrent.futures.ThreadPoolExecutor(n_threads) as pool:
        for future in [pool.submit(work, i) for i in range(n_threads)]:
            future.result()

    np.testing.assert_array_equal(arr[:], expected)
    store.close()
    ro = SQLiteStore(path, read_only=True)
    try:
        np.testing.assert_array_equal(zarr.open_array(ro, path="t", mode="r")[:], expected)
    finally:
        ro.close()


def test_threads_sync_store_api(store: SQLiteStore) -> None:
    """Threads calling set_sync/get_sync/delete_sync on one store: every write is committed
    and each thread reads its own writes back."""
    n_threads, n_keys = 4, 150
    barrier = threading.Barrier(n_threads)
    proto = default_buffer_prototype()

    def value(i: int, k: int) -> bytes:
        return hashlib.sha256(f"{i}/{k}".encode()).digest() * (1 + k % 7)

    def work(i: int) -> None:
        barrier.wait()
        for k in range(n_keys):
            store.set_sync(f"t{i}/k{k}", cpu.Buffer.from_bytes(value(i, k)))
            got = store.get_sync(f"t{i}/k{k}", prototype=proto)
            assert got is not None and got.to_bytes() == value(i, k)
            if k % 10 == 9:
                store.delete_sync(f"t{i}/k{k}")
                assert store.get_sync(f"t{i}/k{k}", prototype=proto) is None

    with concurrent.futures.ThreadPoolExecutor(n_threads) as pool:
        for future in [pool.submit(work, i) for i in range(n_threads)]:
            future.result()

    for i in range(n_threads):
        expected = sorted(f"t{i}/k{k}" for k in range(n_keys) if k % 10 != 9)
        assert keys(store, f"t{i}/") == expected
        for k in range(n_keys):
            if k % 10 != 9:
                assert raw(store, f"t{i}/k{k}") == value(i, k)


def test_threads_each_with_own_event_loop(store: SQLiteStore) -> None:
    """Async writes from several event loops (one per thread) on one store: the group commit
    must wake every waiter on its own loop."""
    n_threads, n_keys = 4, 100
    barrier = threading.Barrier(n_threads)

    async def writes(i: int) -> None:
        await asyncio.gather(
            *(
                store.set(f"l{i}/k{k}", cpu.Buffer.from_bytes(bytes([i, k % 256]) * 50))
                for k in range(n_keys)
            )
        )
        got = await store.get_partial_values(
            default_buffer_prototype(), [(f"l{i}/k{k}", None) for k in range(n_keys)]
        )
        assert [g.to_bytes() if g is not None else None for g in got] == [
            bytes([i, k % 256]) * 50 for k in range(n_keys)
        ]

    def work(i: int) -> None:
        barrier.wait()
        asyncio.run(asyncio.wait_for(writes(i), timeout=60))

    with concurrent.futures.ThreadPoolExecutor(n_threads) as pool:
        for future in [pool.submit(work, i) for i in range(n_threads)]:
            future.result()
    assert len(keys(store)) == n_threads * n_keys


# --- processes -----------------------------------------------------------------------------------


def test_spawned_child_reads_and_writes_through_pickled_store(
    store: SQLiteStore, path: Path
) -> None:
    rng = np.random.default_rng(6)
    data = rng.standard_normal((64, 48)).astype("float32")
    arr = zarr.create_array(store, name="p", shape=data.shape, dtype=data.dtype, chunks=(16, 16))
    arr[:] = data  # the writer stays open: the children read the committed state of a WAL file
    expected = hashlib.sha256(data.tobytes()).hexdigest()

    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        ro = SQLiteStore(path, read_only=True)
        results = [
            pool.submit(_spawn_child.array_checksum, store, "p"),
            pool.submit(_spawn_child.array_checksum, ro, "p"),
        ]
        for future in results:
            pid, digest, shape, dtype = future.result(timeout=120)
            assert pid != os.getpid()
            assert (digest, shape, dtype) == (expected, data.shape, "float32")

        # a child writes through its own copy of the writable store; the parent sees it
        pid = pool.submit(_spawn_child.write_rows, store, "p", 16, 32, 2.5).result(timeout=120)
        assert pid != os.getpid()
    data[16:32] = 2.5
    np.testing.assert_array_equal(zarr.open_array(store, path="p")[:], data)


# --- pickling ------------------------------------------------------------------------------------


def test_pickle_store(store: SQLiteStore, path: Path) -> None:
    data = _write_sample(store)
    assert store._is_open

    clone = pickle.loads(pickle.dumps(store))
    assert clone == store
    assert hash(clone) == hash(store)
    assert clone is not store
    assert clone.path == store.path and not clone.read_only
    assert repr(clone) == repr(store)
    assert not clone._is_open, "an unpickled store opens on first use, not on unpickling"
    np.testing.assert_array_equal(zarr.open_array(clone, path="arr")[:], data)
    assert clone._is_open
    zarr.open_array(clone, path="arr")[0, 0] = -5  # the clone writes too
    assert zarr.open_array(store, path="arr")[0, 0] == -5
    clone.close()
    assert not clone._is_open and store._is_open  # separate connections

    assert pickle.loads(pickle.dumps(store)) != SQLiteStore(path, read_only=True)


def test_pickle_read_only_store_stays_read_only(store: SQLiteStore, path: Path) -> None:
    data = _write_sample(store)
    store.close()
    ro = SQLiteStore(path, read_only=True)
    clone = pickle.loads(pickle.dumps(ro))
    try:
        assert clone == ro and clone.read_only
        assert not clone._is_open
        root = zarr.open_group(clone, mode="r")
        np.testing.assert_array_equal(root["arr"][:], data)
        _assert_no_writes(root)
        with pytest.raises(ValueError, match="read-only"):
            clone.set_sync("k", cpu.Buffer.from_bytes(b"v"))
        # once more through an open store
        again = pickle.loads(pickle.dumps(clone))
        assert again.read_only and not again._is_open
        with pytest.raises(ValueError, match="read-only"):
            sync(again.set("k", cpu.Buffer.from_bytes(b"v")))
        again.close()
    finally:
        clone.close()
        ro.close()


def test_pickle_zarr_array(store: SQLiteStore) -> None:
    """A zarr Array pickles with its store (what dask does with arrays)."""
    data = _write_sample(store)
    arr = zarr.open_array(store, path="arr")
    clone = pickle.loads(pickle.dumps(arr))
    try:
        assert isinstance(clone.store, SQLiteStore) and clone.store == store
        np.testing.assert_array_equal(clone[:], data)
        clone[9, 9] = 0.25
        assert arr[9, 9] == 0.25
    finally:
        clone.store.close()
