"""The looping-overflow bomb where the file's size is a claim (issue 37, finding 4).

A value's claim was bounded by the file's size (page count x page size). That size is what a
server says an object has, or a local file's apparent size: the 11 KB bomb of
test_overflow_bombs.py, its header saying 2^30 pages and truncated to a sparse 1 TiB (or served
as a 1 TiB object), read as three values of 200 MB. Now a chain that comes back to a page it
passed is refused before anything is allocated, and a remote object's size must be the one
its header gives.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from zarr.abc.store import RangeByteRequest
from zarr.core.buffer import default_buffer_prototype

from security._hostile_http import HostileServer
from security._overflow import bomb_file, run_measured, sound_file
from zarrdb import SQLiteStore
from zarrdb.errors import DatabaseCorruptError

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="sparse files, and /proc for the peak (Linux)"
)

proto = default_buffer_prototype()
TIB = 1 << 40
PAGE = 1024  # the bomb's page size
CHUNK_KEY = "a/c/1"
REMOTE = {"allow_http": True, "retry_config": {"max_retries": 0}}


def claiming(data: bytes, pages: int, *, trusted: bool = True) -> bytes:
    """`data` with a header that says `pages` pages (`trusted`: a count SQLite uses; else one
    it ignores for the file's size)."""
    out = bytearray(data)
    out[28:32] = pages.to_bytes(4, "big")
    if not trusted:
        out[92:96] = (int.from_bytes(out[24:28], "big") + 1).to_bytes(4, "big")
    return bytes(out)


@pytest.fixture(params=["header says 1 TiB", "header count ignored"])
def sparse_bomb(request, tmp_path) -> Path:
    """The bomb as a sparse file of 1 TiB (a few KB on disk)."""
    path = bomb_file(tmp_path / "sparse.zarrdb")
    path.write_bytes(claiming(path.read_bytes(), TIB // PAGE, trusted="says" in request.param))
    os.truncate(path, TIB)
    assert path.stat().st_blocks * 512 < 1 << 20
    return path


def all_reads(store: SQLiteStore) -> dict:
    return {
        "get_sync": lambda: store.get_sync(CHUNK_KEY),
        "get": lambda: asyncio.run(store.get(CHUNK_KEY, proto)),
        "range": lambda: asyncio.run(
            store.get(CHUNK_KEY, proto, RangeByteRequest(100_000_000, 100_000_100))
        ),
        "batch": lambda: asyncio.run(
            store.get_partial_values(proto, [(CHUNK_KEY, None), ("a/c/0", None)])
        ),
    }


@pytest.mark.parametrize("read", ["get_sync", "get", "range", "batch"])
def test_a_sparse_file_does_not_lift_the_bound(sparse_bomb, read):
    """Every read of a value on the looping chain raises DatabaseCorruptError naming the
    chain (before: 200 MB returned by each get)."""
    with SQLiteStore(sparse_bomb, read_only=True) as store:
        with pytest.raises(DatabaseCorruptError, match="comes back to a page"):
            all_reads(store)[read]()


def test_copy_of_a_sparse_bomb_stays_small(sparse_bomb, tmp_path):
    """The command line on the sparse file: one line, exit 2, and the memory of a small file."""
    sound = run_measured("info", sound_file(tmp_path / "sound.zarrdb"))
    out = run_measured("copy", sparse_bomb, tmp_path / "out.zarrdb")
    assert out.returncode in (1, 2) and "Traceback" not in out.stderr, out.stderr
    assert out.peak_rss < sound.peak_rss + 50_000_000, (out.peak_rss, sound.peak_rss)


def test_a_sound_file_with_long_values_reads_as_before(tmp_path):
    """Chains of many distinct pages, read whole and in ranges, are walked and accepted."""
    path = tmp_path / "long.zarrdb"
    values = {f"v/{n}": os.urandom(n) for n in (70_000, 300_000, 5_000_000)}
    with SQLiteStore(path, page_size=1024) as store:
        for key, value in values.items():
            store.set_sync(key, proto.buffer.from_bytes(value))
    with SQLiteStore(path, read_only=True) as store:
        for key, value in values.items():
            assert store.get_sync(key).to_bytes() == value
            window = RangeByteRequest(len(value) - 5000, len(value) - 10)
            got = asyncio.run(store.get(key, proto, window))
            assert got.to_bytes() == value[-5000:-10]
        got = asyncio.run(store.get_partial_values(proto, [(k, None) for k in values]))
        assert [g.to_bytes() for g in got] == list(values.values())


@pytest.fixture
def served_bomb(tmp_path) -> bytes:
    return bomb_file(tmp_path / "bomb.zarrdb").read_bytes()


def test_a_server_that_claims_another_size_is_refused_at_open(served_bomb):
    """The 11 KB bomb served as a 1 TiB object (its header says otherwise): refused when the
    store opens, naming both sizes (before: 200 MB per get, about 1 MiB of traffic)."""
    with HostileServer(served_bomb, "claim_size", huge=TIB) as server:
        store = SQLiteStore(server.url(), read_only=True, storage_options=REMOTE)
        try:
            with pytest.raises(DatabaseCorruptError, match="server says") as raised:
                store.get_sync(CHUNK_KEY)
        finally:
            store.close()
    assert f"{TIB:,}" in str(raised.value)


def test_a_served_bomb_whose_header_agrees_with_the_claim_is_refused(served_bomb):
    """The header made to say 1 TiB too: the sizes agree, and the chain is refused."""
    data = claiming(served_bomb, TIB // PAGE)
    with HostileServer(data, "claim_size", huge=TIB) as server:
        with SQLiteStore(server.url(), read_only=True, storage_options=REMOTE) as store:
            with pytest.raises(DatabaseCorruptError, match="comes back to a page"):
                store.get_sync(CHUNK_KEY)
        assert server.sent < 4 << 20
