"""Values another program stored as TEXT instead of BLOB (against the spec): zarrdb reads their
bytes, in full, rather than trusting length(), which counts characters for TEXT."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest
from zarr.core.buffer import cpu
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

from zarrdb import SQLiteStore
from zarrdb._core import Database

from .builders import make_store_file

SMALL = "é" * 100  # 200 bytes in UTF-8, 100 characters
LARGE = "é" * 50_000 + "z"  # 100,001 bytes: read with the blob API


@pytest.fixture
def path(tmp_path):
    entries = {"small": SMALL, "large": LARGE}
    path = make_store_file(tmp_path / "text-values.zarrdb", entries=entries)
    with closing(sqlite3.connect(path)) as con:
        assert con.execute("SELECT typeof(v) FROM zarr WHERE k = 'large'").fetchone() == ("text",)
    return path


@pytest.mark.parametrize("key,text", [("small", SMALL), ("large", LARGE)], ids=["small", "large"])
def test_engine_reads_text_values_as_their_bytes(path, key, text):
    data = text.encode()
    with Database(path, mode="r") as db:
        for _ in range(2):  # the second read starts from the first one's size guess
            assert db.get(key) == data
        assert db.length(key) == len(data)
        assert db.get_range(key, -10, None) == data[-10:]
        assert db.get_many([key, "missing"]) == [data, None]
        assert db.size_prefix("") == len(SMALL.encode()) + len(LARGE.encode())


async def test_store_reads_text_values_as_their_bytes(path):
    data = LARGE.encode()
    store = await SQLiteStore.open(path, read_only=True)
    proto = cpu.buffer_prototype
    assert (await store.get("large", proto)).to_bytes() == data
    assert (await store.get("large", proto, SuffixByteRequest(5))).to_bytes() == data[-5:]
    assert (await store.get("large", proto, OffsetByteRequest(99_990))).to_bytes() == data[99_990:]
    assert (await store.get("large", proto, RangeByteRequest(3, 9))).to_bytes() == data[3:9]
    assert await store.getsize("large") == len(data)
    store.close()
