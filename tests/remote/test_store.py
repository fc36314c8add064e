"""SQLiteStore on a URL: a .zarrdb written by zarrdb, published on a real S3 server (moto) and a
real HTTP server (aiohttp), read through zarr. Requests and bytes are counted by the servers."""

from __future__ import annotations

import logging
import pickle
import sqlite3
import subprocess
import sys
import threading

import numpy as np
import pytest
import zarr

from zarrdb import SQLiteStore, errors, remote

from .conftest import CHUNKS, SHAPE, wait_until_loaded, write_hierarchy

KIB = 1024


class Published:
    """A file on one of the servers: its URL, storage options and the server's counts."""

    def __init__(self, kind, server, url, options, put) -> None:
        self.kind = kind
        self.server = server
        self.url = url
        self.storage_options = options
        self._put = put

    def put(self, data: bytes) -> None:
        """Replace the object's content."""
        self._put(data)

    @property
    def traffic(self):
        return self.server.traffic

    def reads(self) -> int:
        return self.traffic.count(self.url.rsplit("/", 1)[1])

    def open(self, **kwargs) -> SQLiteStore:
        return SQLiteStore(self.url, read_only=True, storage_options=self.storage_options, **kwargs)


def publish(kind, s3, http, data: bytes, name: str = "data.zarrdb") -> Published:
    if kind == "s3":
        server, bucket = s3
        key = f"published/{name}"
        server.put(bucket, key, data)
        server.traffic.reset()
        return Published(
            kind,
            server,
            f"s3://{bucket}/{key}",
            server.storage_options,
            lambda new: server.put(bucket, key, new),
        )
    http.put(f"files/{name}", data)
    http.traffic.reset()
    return Published(
        kind,
        http,
        f"{http.url}files/{name}",
        {"allow_http": True, "retry_config": {"max_retries": 0}},
        lambda new: http.put(f"files/{name}", new),
    )


@pytest.fixture(params=["s3", "http"])
def published(request, s3, http, hierarchy_file) -> Published:
    data, _ = hierarchy_file
    return publish(request.param, s3, http, data)


# --- reading -----------------------------------------------------------------------------


def test_zarr_reads_the_published_hierarchy(published, hierarchy_file):
    _, arrays = hierarchy_file
    with published.open() as store:
        root = zarr.open_group(store, mode="r")
        assert root.attrs["title"] == "remote test"
        assert sorted(name for name, _ in root.members()) == ["plain", "sharded"]
        for name, expected in arrays.items():
            np.testing.assert_array_equal(root[name][:], expected)
            np.testing.assert_array_equal(root[name][37:101, 5:200], expected[37:101, 5:200])
        assert store.read_only
        assert store.path == published.url
    reads = published.traffic.reads()
    assert reads and all(r.range is not None and r.status == 206 for r in reads)


def test_the_servers_counts_match_the_stores(published, hierarchy_file):
    data, _ = hierarchy_file
    with published.open(block_cache={"first_read": 64 * KIB, "block_size": 16 * KIB}) as store:
        zarr.open_array(store, path="plain", mode="r")[:]
        stats = store.remote_stats()
    # the opening request, then the block cache's
    assert published.reads() == stats["requests"] + 1
    assert published.traffic.bytes_sent() == stats["bytes"] + 64 * KIB
    assert stats["bytes"] <= len(data)


def test_a_window_again_costs_no_request(published):
    with published.open(
        block_cache={"first_read": 32 * KIB, "block_size": 16 * KIB, "min_request": 16 * KIB}
    ) as store:
        arr = zarr.open_array(store, path="plain", mode="r")
        before = published.reads()
        first = arr[40:72, 100:132]
        # Read-ahead the window started in the background may still be on its way.
        wait_until_loaded(store)
        cold = published.reads() - before
        again = arr[40:72, 100:132]
        assert published.reads() - before == cold
    np.testing.assert_array_equal(first, again)
    # the window's blocks, and read-ahead (in a file this small, with blocks this small, the
    # window's rows look like a stream, and read-ahead keeps two runs ahead of one)
    assert 1 <= cold <= 4


def test_a_full_read_takes_far_fewer_requests_than_chunks(published, hierarchy_file):
    data, arrays = hierarchy_file
    nchunks = (SHAPE[0] // CHUNKS[0]) * (SHAPE[1] // CHUNKS[1])
    with published.open(block_cache={"first_read": 16 * KIB, "block_size": 16 * KIB}) as store:
        np.testing.assert_array_equal(
            zarr.open_array(store, path="plain", mode="r")[:], arrays["plain"]
        )
    assert published.reads() <= nchunks // 4
    assert published.traffic.bytes_sent() <= 1.1 * len(data)


def test_many_threads_read_at_once_through_one_block_cache(published, hierarchy_file):
    _, arrays = hierarchy_file
    expected = arrays["plain"]
    store = published.open(block_cache={"first_read": 16 * KIB, "block_size": 16 * KIB})
    arr = zarr.open_array(store, path="plain", mode="r")
    failures: list[BaseException] = []
    barrier = threading.Barrier(8)

    def read(t: int) -> None:
        try:
            barrier.wait(10)
            for i in range(6):
                r, c = (t * 29 + i * 41) % 200, (t * 17 + i * 23) % 200
                np.testing.assert_array_equal(
                    arr[r : r + 50, c : c + 50], expected[r : r + 50, c : c + 50]
                )
                key = f"c/{(t + i) % 8}/{(t * i) % 8}"
                assert store.get_sync(f"plain/{key}") is not None
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=read, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stats = store.remote_stats()
    store.close()
    assert not failures, failures[0]
    # each block was fetched at most once: the cache holds the whole file
    ranges = [r.range for r in published.traffic.reads()]
    assert len(ranges) == len(set(ranges))
    assert stats["failures"] == 0 and stats["evictions"] == 0


# --- opening: what is refused --------------------------------------------------------------


def test_a_url_must_be_opened_read_only(published):
    with pytest.raises(ValueError, match="read_only=True"):
        SQLiteStore(published.url, storage_options=published.storage_options)
    store = published.open()
    with pytest.raises(ValueError, match="read_only=True"):
        store.with_read_only(False)
    other = store.with_read_only(True)
    assert other == store and other.read_only
    assert published.reads() == 0


def test_a_missing_object_is_file_not_found(published):
    store = SQLiteStore(
        published.url.replace("data.zarrdb", "missing.zarrdb"),
        read_only=True,
        storage_options=published.storage_options,
    )
    with pytest.raises(FileNotFoundError, match="missing.zarrdb"):
        store.ensure_open()


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_a_file_still_in_wal_mode_is_refused(kind, s3, http, tmp_path):
    path = tmp_path / "wal.zarrdb"
    write_hierarchy(path)
    with sqlite3.connect(path) as con:  # a writer that switched to WAL and has not switched back
        con.execute("PRAGMA journal_mode = WAL")
    con.close()
    target = publish(kind, s3, http, path.read_bytes(), "wal.zarrdb")
    with pytest.raises(errors.UnclosedFileError, match="WAL mode.*[Cc]lose the store") as info:
        target.open().ensure_open()
    assert isinstance(info.value, errors.FormatError)


def test_a_file_that_is_not_sqlite_is_refused(s3, http):
    target = publish("http", s3, http, b"PAR1" + bytes(5000), "table.parquet")
    with pytest.raises(errors.NotADatabaseError, match="not an SQLite database"):
        target.open().ensure_open()


def test_a_foreign_sqlite_file_is_refused_as_locally(s3, http, tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t(x)")
    con.close()
    target = publish("s3", s3, http, path.read_bytes(), "other.db")
    with pytest.raises(errors.NotAZarrDBError):
        target.open().ensure_open()


# --- the version opened is the version read -------------------------------------------------


@pytest.mark.parametrize("ignore_if_match", [False, True])
def test_a_file_replaced_while_open_raises_on_the_next_request(
    s3, http, hierarchy_file, tmp_path, ignore_if_match
):
    data, arrays = hierarchy_file
    kind = "http" if ignore_if_match else "s3"
    target = publish(kind, s3, http, data)
    http.ignore_if_match = ignore_if_match  # such a server still sends the new ETag: caught too
    store = target.open(
        block_cache={"first_read": 16 * KIB, "block_size": 16 * KIB, "min_request": 16 * KIB}
    )
    arr = zarr.open_array(store, path="plain", mode="r")
    np.testing.assert_array_equal(arr[:32, :32], arrays["plain"][:32, :32])
    newer = tmp_path / "newer.zarrdb"
    write_hierarchy(newer, seed=1)
    target.put(newer.read_bytes())
    with pytest.raises(errors.RemoteFileChangedError, match="Open the store again") as info:
        arr[200:, 200:]
    assert isinstance(info.value, errors.RemoteReadError)
    store.close()
    # Opened again, the store reads the new version.
    with target.open() as fresh:
        np.testing.assert_array_equal(
            zarr.open_array(fresh, path="plain", mode="r")[200:, 200:],
            write_hierarchy(tmp_path / "again.zarrdb", seed=1)["plain"][200:, 200:],
        )


def test_a_server_error_is_a_remote_read_error_and_reading_resumes(s3, http, hierarchy_file):
    data, arrays = hierarchy_file
    target = publish("http", s3, http, data)
    store = target.open(
        block_cache={"first_read": 16 * KIB, "block_size": 16 * KIB, "min_request": 16 * KIB}
    )
    arr = zarr.open_array(store, path="plain", mode="r")
    # Every request for the second half of the file fails (one failing request could be a
    # read-ahead in the background, which fails no read: the reader that needs its blocks
    # asks again); a read that needs those bytes fails, and reads again once the server is well.
    http.fail_from_offset = len(data) // 2
    with pytest.raises(errors.RemoteReadError, match="500") as info:
        arr[:]
    assert target.url in str(info.value)
    assert info.value.__cause__ is not None
    assert store.remote_stats()["failures"] >= 1
    http.fail_from_offset = None
    np.testing.assert_array_equal(arr[:], arrays["plain"])
    store.close()


def test_an_unreachable_server_is_a_remote_read_error():
    store = SQLiteStore(
        "http://127.0.0.1:9/data.zarrdb",  # the discard port: nothing listens there
        read_only=True,
        storage_options={"allow_http": True, "retry_config": {"max_retries": 0}},
    )
    with pytest.raises(
        errors.RemoteReadError, match="cannot open 'http://127.0.0.1:9/data.zarrdb'"
    ):
        store.ensure_open()


# --- processes, copies, information ---------------------------------------------------------


def test_a_remote_store_pickles_as_its_url_and_options_and_version(
    published, hierarchy_file, tmp_path
):
    _, arrays = hierarchy_file
    store = published.open(block_cache={"block_size": 64 * KIB})
    store.ensure_open()
    state = store.__getstate__()
    assert state["path"] == published.url
    clone = pickle.loads(pickle.dumps(store))
    assert clone == store and clone.read_only
    np.testing.assert_array_equal(
        zarr.open_array(clone, path="plain", mode="r")[:], arrays["plain"]
    )
    # A copy made before the file changed does not read the new version (in a new process,
    # which has not got the old version cached).
    later = pickle.loads(pickle.dumps(store))
    newer = tmp_path / "newer.zarrdb"
    write_hierarchy(newer, seed=2)
    published.put(newer.read_bytes())
    remote.release_caches()
    with pytest.raises(errors.RemoteFileChangedError):
        later.ensure_open()
    store.close()
    clone.close()


def test_stores_of_one_version_share_the_block_cache(published, hierarchy_file):
    _, arrays = hierarchy_file
    store = published.open()
    np.testing.assert_array_equal(
        zarr.open_array(store, path="plain", mode="r")[:], arrays["plain"]
    )
    before = published.reads()
    # Unpickled (as a dask task does): the version is known, the blocks are cached.
    clone = pickle.loads(pickle.dumps(store))
    np.testing.assert_array_equal(
        zarr.open_array(clone, path="plain", mode="r")[:], arrays["plain"]
    )
    assert published.reads() == before
    # Opened anew: one request finds the version unchanged, and the cache serves the rest.
    again = published.open()
    np.testing.assert_array_equal(
        zarr.open_array(again, path="plain", mode="r")[:], arrays["plain"]
    )
    assert published.reads() == before + 1
    # Another block cache configuration is another cache.
    other = published.open(block_cache={"block_size": 32 * KIB})
    zarr.open_array(other, path="plain", mode="r")[:8]
    assert published.reads() > before + 1
    for s in (store, clone, again, other):
        s.close()


def test_from_object_store(s3, hierarchy_file):
    server, bucket = s3
    data, arrays = hierarchy_file
    server.put(bucket, "deep/in/data.zarrdb", data)
    obstore_store = server.object_store(bucket, prefix="deep")
    store = SQLiteStore.from_object_store(obstore_store, "in/data.zarrdb")
    assert store.path == f"s3://{bucket}/deep/in/data.zarrdb"
    np.testing.assert_array_equal(
        zarr.open_array(store, path="sharded", mode="r")[:], arrays["sharded"]
    )
    clone = pickle.loads(pickle.dumps(store))
    np.testing.assert_array_equal(
        zarr.open_array(clone, path="plain", mode="r")[:9], arrays["plain"][:9]
    )
    store.close()
    clone.close()


def test_file_info_and_key_sizes(published, hierarchy_file):
    data, _ = hierarchy_file
    with published.open() as store:
        info = store.file_info()
        sizes = store.key_sizes("plain/")
    assert info["path"] == published.url
    assert info["file_size"] == len(data)
    assert info["format_version"] == "1.0"
    assert info["keys"] == 3 + 64 + 4  # zarr.json of the root and both arrays, chunks, shards
    assert len(sizes) == 65 and sizes[0][0] == "plain/c/0/0"


def test_every_key_copied_to_a_local_directory(published, tmp_path):
    """What a copy of the hierarchy does: list the keys with their sizes, read the values in
    batches, write them elsewhere."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import LocalStore

    prototype = default_buffer_prototype()
    dest = LocalStore(tmp_path / "copy.zarr")

    async def copy(source: SQLiteStore) -> int:
        listing = source.key_sizes("")
        for start in range(0, len(listing), 16):
            batch = [key for key, _ in listing[start : start + 16]]
            values = await source.get_partial_values(prototype, [(key, None) for key in batch])
            for key, value in zip(batch, values, strict=True):
                await dest.set(key, value)
        return len(listing)

    with published.open() as store:
        copied = zarr.core.sync.sync(copy(store))
        assert store.check() == []  # SQLite's integrity check, through the remote file
        original = zarr.open_group(store, mode="r")
        copy_group = zarr.open_group(dest, mode="r")
        assert copied == 3 + 64 + 4
        for name in ("plain", "sharded"):
            np.testing.assert_array_equal(copy_group[name][:], original[name][:])
        assert dict(copy_group.attrs) == dict(original.attrs)


def test_copies_to_a_local_file(published, hierarchy_file, tmp_path):
    data, arrays = hierarchy_file
    # byte for byte
    copied = remote.download(
        published.url,
        tmp_path / "copy.zarrdb",
        storage_options=published.storage_options,
        chunk_size=100 * KIB,
    )
    assert copied == len(data)
    assert (tmp_path / "copy.zarrdb").read_bytes() == data
    # every byte fetched once: the opening request's bytes are not asked for again
    assert published.traffic.bytes_sent() == len(data), published.traffic.reads()
    with pytest.raises(FileExistsError):
        remote.download(
            published.url, tmp_path / "copy.zarrdb", storage_options=published.storage_options
        )
    # page by page, through SQLite's backup
    with published.open() as store:
        store.backup(tmp_path / "backup.zarrdb")
    with SQLiteStore(tmp_path / "backup.zarrdb", read_only=True) as local:
        np.testing.assert_array_equal(
            zarr.open_array(local, path="plain", mode="r")[:], arrays["plain"]
        )
        assert local.check() == []


def test_a_failed_request_and_the_read_asking_again_are_logged(s3, http, hierarchy_file, caplog):
    caplog.set_level(logging.INFO, logger="zarrdb.remote")
    data, arrays = hierarchy_file
    target = publish("http", s3, http, data)
    store = target.open(
        block_cache={"first_read": 16 * KIB, "block_size": 16 * KIB, "min_request": 16 * KIB}
    )
    arr = zarr.open_array(store, path="plain", mode="r")
    assert [r for r in caplog.records if r.name == "zarrdb.remote"] == []
    http.fail_from_offset = len(data) // 2
    with pytest.raises(errors.RemoteReadError):
        arr[:]
    failed = [r.getMessage() for r in caplog.records if "a request failed" in r.getMessage()]
    assert failed and "500" in failed[0] and target.url in failed[0]
    http.fail_from_offset = None
    np.testing.assert_array_equal(arr[:], arrays["plain"])
    again = [r.getMessage() for r in caplog.records if r.getMessage().startswith("asking again")]
    assert again and target.url in again[0]
    assert {r.levelno for r in caplog.records if r.name == "zarrdb.remote"} == {logging.INFO}
    store.close()

def test_a_failed_download_leaves_nothing(s3, http, hierarchy_file, tmp_path):
    data, _ = hierarchy_file
    target = publish("http", s3, http, data)
    http.fail_from_offset = 400 * KIB  # the opening request and the next chunk pass
    dest = tmp_path / "partial.zarrdb"
    with pytest.raises(errors.RemoteReadError, match="500"):
        remote.download(
            target.url, dest, storage_options=target.storage_options, chunk_size=200 * KIB
        )
    assert not dest.exists()
    assert [(r.range, r.status) for r in http.traffic.reads()] == [
        ("bytes=0-204799", 206),
        ("bytes=204800-409599", 206),
        ("bytes=409600-614399", 500),
    ]


# --- options ----------------------------------------------------------------------------------


def test_store_kinds_by_scheme():
    import obstore.store as obs

    cases = {
        "s3://bucket/dir/data.zarrdb": (
            {"region": "eu-west-1", "skip_signature": True},
            obs.S3Store,
        ),
        "gs://bucket/dir/data.zarrdb": ({"skip_signature": True}, obs.GCSStore),
        "az://container/dir/data.zarrdb": (
            {"account_name": "acct", "skip_signature": True},
            obs.AzureStore,
        ),
        "https://example.org/files/data.zarrdb": ({"timeout": "5s"}, obs.HTTPStore),
    }
    for url, (options, kind) in cases.items():
        location = remote.RemoteLocation(url, storage_options=options)
        assert location.path == "data.zarrdb"
        made = location.object_store()
        assert isinstance(made, kind), url
        if kind is not obs.HTTPStore:
            assert made.prefix == "dir"
        store = SQLiteStore(url, read_only=True, storage_options=options)  # opens lazily
        assert pickle.loads(pickle.dumps(store)) == store


def test_bad_urls_and_options():
    with pytest.raises(ValueError, match="names no file"):
        SQLiteStore("s3://bucket", read_only=True)
    with pytest.raises(ValueError, match="query"):
        SQLiteStore("https://example.org/data.zarrdb?sig=abc", read_only=True)
    with pytest.raises(ValueError, match="remote files"):
        SQLiteStore("local.zarrdb", storage_options={"region": "x"})
    with pytest.raises(ValueError, match="unknown block_cache"):
        SQLiteStore("s3://b/x.zarrdb", read_only=True, block_cache={"sise": 1})
    with pytest.raises(ValueError, match="at least one block"):
        SQLiteStore("s3://b/x.zarrdb", read_only=True, block_cache={"size": 1024})
    with pytest.raises(ValueError, match="obstore cannot make a store"):
        remote.RemoteLocation(
            "s3://b/x.zarrdb", storage_options={"no_such_option": 1}
        ).object_store()
    assert remote.is_url("S3://bucket/x.zarrdb") and remote.is_url("https://h/x")
    assert not remote.is_url("file:///tmp/x.zarrdb") and not remote.is_url("data.zarrdb")
    assert remote.parse_options(["region=eu-west-1", "allow_http=true", "timeout = 5s"]) == {
        "region": "eu-west-1",
        "allow_http": True,
        "timeout": "5s",
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        remote.parse_options(["region"])


def test_without_obstore_the_error_names_the_extra():
    code = (
        "import sys; sys.modules['obstore'] = None\n"
        "from zarrdb import SQLiteStore\n"
        "store = SQLiteStore('s3://bucket/data.zarrdb', read_only=True)\n"
        "try:\n"
        "    store.ensure_open()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert 'pip install "zarrdb[remote]"' in out.stdout
