"""Values that claim more bytes than the file holds (issue 23, item 3).

A value's overflow chain can loop back to its start and several keys can share it: SQLite's
blob API then reads the same pages over and over, for as many bytes as each value's record
claims. An 11 KB file read as three values of 200 MB each: `info` reported 572 MiB, `copy`
wrote 573 MB, and over HTTP one small request produced as much on disk. Only SQLite's full
integrity check noticed.

In a sound file no value is longer than the file (page count x page size; SQLite's own reads
apply the same bound), and the values together are not longer either; a claim beyond that is
damage, refused before anything is allocated or copied.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from pathlib import Path

import pytest
from zarr.abc.store import RangeByteRequest
from zarr.core.buffer import default_buffer_prototype

from cli.helpers import assert_ok, run
from security._overflow import (
    CLAIM,
    bomb_file,
    misplaced_cell_file,
    run_measured,
    short_chain_file,
    sound_file,
    tree_bytes,
)
from zarrdb import SQLiteStore
from zarrdb.errors import DatabaseCorruptError

proto = default_buffer_prototype()
CHUNK_KEY = "a/c/1"


@functools.cache
def memory_limit() -> int:
    """What a command on the bomb may take at its peak: what `zarrdb info` takes on a small
    sound file (the interpreter, numpy and zarr: 55 MB measured; about 290 MB under
    AddressSanitizer, whose shadow memory counts) plus half of one claimed value (the copy that
    the bomb fooled took 460 MB)."""
    with tempfile.TemporaryDirectory() as folder:
        out = run_measured("info", sound_file(Path(folder) / "sound.zarrdb"))
    assert out.returncode == 0, out.stderr
    return out.peak_rss + CLAIM // 2


@pytest.fixture
def bomb(tmp_path):
    return bomb_file(tmp_path / "bomb.zarrdb")


def test_the_crafted_file_is_what_it_says(bomb):
    """Each chunk's record claims 200 MB while the file has a few KB, and SQLite's integrity
    check finds the shared chain (standard-library sqlite3, not zarrdb)."""
    import sqlite3
    from contextlib import closing

    assert bomb.stat().st_size < 16_000
    with closing(sqlite3.connect(bomb)) as con:
        sizes = dict(con.execute("SELECT k, length(v) FROM zarr WHERE k LIKE 'a/c/%'"))
        problems = con.execute("PRAGMA integrity_check").fetchall()
    assert len(sizes) == 3 and all(size >= CLAIM for size in sizes.values())
    assert "2nd reference to page" in problems[0][0]


def test_store_reads_refuse_a_value_longer_than_the_file(bomb):
    """get (whole, sync and async), byte ranges, batches and sizes each raise
    DatabaseCorruptError naming the file, without reading the value."""
    store = SQLiteStore(bomb, read_only=True)
    try:
        reads = {
            "get_sync": lambda: store.get_sync(CHUNK_KEY),
            "get": lambda: asyncio.run(store.get(CHUNK_KEY, proto)),
            "get range": lambda: asyncio.run(
                store.get(CHUNK_KEY, proto, byte_range=RangeByteRequest(0, 10))
            ),
            "get_partial_values": lambda: asyncio.run(
                store.get_partial_values(proto, [(CHUNK_KEY, None), ("a/c/2", None)])
            ),
            "getsize": lambda: asyncio.run(store.getsize(CHUNK_KEY)),
            "getsize_prefix": lambda: asyncio.run(store.getsize_prefix("a")),
            "key_sizes": lambda: store.key_sizes(""),
            "file_info": store.file_info,
        }
        for name, read in reads.items():
            with pytest.raises(DatabaseCorruptError, match="more than the whole file") as caught:
                read()
            assert str(bomb) in str(caught.value), name
        # What the file holds soundly still reads.
        assert store.get_sync("zarr.json") is not None
        assert asyncio.run(store.exists(CHUNK_KEY))
    finally:
        store.close()


def test_info_reports_damage_instead_of_sizes(bomb):
    out = run_measured("info", bomb)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stdout == ""
    assert "more than the whole file" in out.stderr and len(out.stderr.splitlines()) == 1
    assert out.peak_rss < memory_limit()


@pytest.mark.parametrize("dest", ["out.zarrdb", "out-dir", "out.zip"])
def test_copy_refuses_before_writing(bomb, tmp_path, dest):
    out = run_measured("copy", bomb, tmp_path / dest)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "more than the whole file" in out.stderr and len(out.stderr.splitlines()) == 1
    assert out.peak_rss < memory_limit(), out.peak_rss
    assert tree_bytes(tmp_path / dest) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.zarrdb"]  # nothing left behind


def test_copy_of_a_sub_tree_refuses_before_writing(bomb, tmp_path):
    out = run_measured("copy", bomb, tmp_path / "out", "--path", "a")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "more than the whole file" in out.stderr
    assert out.peak_rss < memory_limit()
    assert tree_bytes(tmp_path / "out") == 0


def test_mv_refuses_before_rewriting_the_rows(bomb):
    """Changing a key rewrites its row at the length its record claims: `mv` of the bomb took
    475 MB before SQLite found the file malformed."""
    before = bomb.read_bytes()
    out = run_measured("mv", bomb, "a", "renamed")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "more than the whole file" in out.stderr and len(out.stderr.splitlines()) == 1
    assert out.peak_rss < memory_limit(), out.peak_rss
    assert bomb.read_bytes()[100:] == before[100:]


def test_quick_check_reports_the_damage(bomb):
    out = run_measured("check", "--quick", bomb)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "damaged:" in out.stdout and "more than the whole file" in out.stdout
    assert out.peak_rss < memory_limit()


def test_full_check_reports_the_damage(bomb):
    out = run_measured("check", bomb)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "2nd reference to page" in out.stdout


def test_remote_read_of_the_bomb(bomb, tmp_path, http):
    """Over HTTP: the store's reads and `copy` to a directory fail cleanly, after fetching no
    more than the file."""
    data = bomb.read_bytes()
    http.put("files/bomb.zarrdb", data)
    url = f"{http.url}files/bomb.zarrdb"
    store = SQLiteStore(
        url, read_only=True, storage_options={"allow_http": True, "retry_config": {"max_retries": 0}}
    )
    try:
        with pytest.raises(DatabaseCorruptError, match="more than the whole file"):
            store.get_sync(CHUNK_KEY)
        with pytest.raises(DatabaseCorruptError, match="more than the whole file"):
            asyncio.run(store.get_partial_values(proto, [(CHUNK_KEY, None)]))
        with pytest.raises(DatabaseCorruptError, match="more than the whole file"):
            store.key_sizes("")
    finally:
        store.close()
    out = run_measured("copy", url, tmp_path / "out")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "more than the whole file" in out.stderr
    assert out.peak_rss < memory_limit()
    assert tree_bytes(tmp_path / "out") == 0
    assert http.traffic.bytes_sent() <= 4 * len(data)


def test_a_short_chain_under_a_huge_claim_fails_in_bounded_memory(tmp_path):
    """A value claiming 1.5 GB over a chain of two pages that ends: DatabaseCorruptError, and
    nothing near 1.5 GB is taken (sound before this fix too: kept)."""
    path = short_chain_file(tmp_path / "short.zarrdb")
    with SQLiteStore(path, read_only=True) as store:
        with pytest.raises(DatabaseCorruptError):
            store.get_sync("a/c/0")
        assert store.get_sync("a/c/1") is not None
    out = run_measured("copy", path, tmp_path / "out")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert str(path) in out.stderr and len(out.stderr.splitlines()) == 1
    assert out.peak_rss < memory_limit()
    assert tree_bytes(tmp_path / "out") == 0


def test_sound_files_near_the_bound_read_as_before(tmp_path):
    """No sound value is refused: a value that fills nearly the whole file, and a reader that
    learnt the file's size when it was small, then reads a value written since (the file grew
    under it)."""
    from zarr.core.buffer import cpu

    path = tmp_path / "sound.zarrdb"
    big = bytes(range(256)) * 4096  # 1 MiB
    with SQLiteStore(path, page_size=4096) as writer:
        writer.set_sync("small", cpu.Buffer.from_bytes(b"x" * 10))
        reader = SQLiteStore(path, read_only=True)
        try:
            assert reader.get_sync("small").to_bytes() == b"x" * 10
            assert asyncio.run(reader.getsize("small")) == 10
            writer.set_sync("big", cpu.Buffer.from_bytes(big))
            assert reader.get_sync("big").to_bytes() == big
            assert asyncio.run(reader.getsize("big")) == len(big)
            assert reader.get_sync("big", byte_range=RangeByteRequest(5, 9)).to_bytes() == big[5:9]
            assert dict(reader.key_sizes("")) == {"small": 10, "big": len(big)}
            assert reader.file_info()["stored_bytes"] == len(big) + 10
        finally:
            reader.close()
    assert_ok(run("copy", path, tmp_path / "copy.zarrdb"))


def test_files_from_others_are_read_with_each_page_checked(tmp_path, http):
    """SQLite's cell_size_check is on where files from others are read (the command line,
    remote files, check_pages=True): a page whose cell lies where no cell may is refused when
    it is loaded, instead of being read as a row without key or value."""
    path = misplaced_cell_file(tmp_path / "cell.zarrdb")
    with SQLiteStore(path, read_only=True, check_pages=True) as store:
        # A scan of the table (a lookup through the key index notices the missing row anyway):
        # read unchecked, the sum of the sizes leaves out "zarr.json" without a word.
        with pytest.raises(DatabaseCorruptError):
            asyncio.run(store.getsize_prefix(""))
    out = run_measured("info", path)
    assert out.returncode == 2 and "damaged" in out.stderr, (out.stdout, out.stderr)
    assert out.stdout == ""
    out = run_measured("check", "--quick", path)
    assert out.returncode == 1 and "damaged:" in out.stdout, (out.stdout, out.stderr)
    http.put("files/sound.zarrdb", sound_file(tmp_path / "sound.zarrdb").read_bytes())
    url = f"{http.url}files/sound.zarrdb"
    with SQLiteStore(url, read_only=True, storage_options={"allow_http": True}) as store:
        assert store._file().reader().pragma("cell_size_check") == 1
