"""The engine's remote VFS (zarrdb._core.RemoteFile, RemoteDatabase): SQLite reads a file through
a fetch function, from a block cache shared by every connection. The fetch functions here read a
real .zarrdb file on disk and record what they were asked for."""

from __future__ import annotations

import gc
import os
import threading
import time

import pytest

from zarrdb import errors
from zarrdb._core import Database, RemoteDatabase, RemoteFile, Writer

from .conftest import write_hierarchy

KIB = 1024
WHOLE_FILE = 1 << 40  # as `head`: hand over the whole file at open


class FileFetch:
    """fetch(offset, length) over a local file, recording each call; `gate` (an Event) makes
    every fetch wait until it is set, `fail` (a list) raises its items one per fetch."""

    def __init__(self, path) -> None:
        self.data = open(path, "rb").read()
        self.calls: list[tuple[int, int]] = []
        self.gate: threading.Event | None = None
        self.fail: list[BaseException] = []
        self.lock = threading.Lock()

    def __call__(self, offset: int, length: int) -> bytes:
        with self.lock:
            self.calls.append((offset, length))
            failure = self.fail.pop(0) if self.fail else None
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"
        if failure is not None:
            raise failure
        return self.data[offset : offset + length]


def remote_file(path, *, head: int | None = None, **options) -> tuple[FileFetch, RemoteFile]:
    """A RemoteFile on the file at `path` read through a FileFetch; `head`: how many bytes
    from the start are handed over at open."""
    fetch = FileFetch(path)
    initial = None if head is None else fetch.data[:head]
    return fetch, RemoteFile("test://x", len(fetch.data), fetch, head=initial, **options)


def wait_until(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


@pytest.fixture(scope="module")
def small_pages(tmp_path_factory):
    """A closed .zarrdb with 4 KiB pages (values span several pages), and its arrays."""
    path = tmp_path_factory.mktemp("vfs") / "pages4k.zarrdb"
    arrays = write_hierarchy(path, page_size=4096)
    return path, arrays


def every_value(db) -> dict[str, bytes]:
    return {key: db.get(key) for key in db.list_keys()}


def test_reads_equal_the_local_file(small_pages):
    path, _ = small_pages
    fetch = FileFetch(path)
    remote = RemoteFile("test://pages4k.zarrdb", len(fetch.data), fetch, block_size=8 * KIB)
    db = RemoteDatabase(remote)
    with Database(path, mode="r") as local:
        assert every_value(db) == every_value(local)
        keys = local.list_keys()
        assert db.list_dir("") == local.list_dir("")
        assert db.get_ranges([(k, 100, 50) for k in keys]) == local.get_ranges(
            [(k, 100, 50) for k in keys]
        )
    assert db.path == "test://pages4k.zarrdb"
    assert db.readonly
    stats = remote.stats()
    assert stats["requests"] == len(fetch.calls) > 0
    assert stats["bytes"] == sum(n for _, n in fetch.calls) <= len(fetch.data)
    db.close()


def test_bytes_given_at_open_are_not_fetched_again(small_pages):
    path, _ = small_pages
    fetch, remote = remote_file(path, block_size=4 * KIB, head=WHOLE_FILE)
    db = RemoteDatabase(remote)
    assert len(db.list_keys()) > 10
    assert fetch.calls == []
    assert remote.stats()["requests"] == 0
    db.close()


def test_a_read_over_several_absent_blocks_is_one_request(small_pages):
    path, _ = small_pages
    fetch, remote = remote_file(path, block_size=512)
    db = RemoteDatabase(remote)  # SQLite reads whole 4 KiB pages: eight blocks each
    db.list_keys()
    # First the header's 100 bytes (one block), then the rest of page 1 in one request.
    assert fetch.calls[:2] == [(0, 512), (512, 4096 - 512)]
    for offset, length in fetch.calls[2:]:
        assert offset % 4096 == 0 and length % 4096 == 0, (offset, length)
    db.close()


@pytest.mark.parametrize("readahead", [16 * KIB, 1024 * KIB])
def test_sequential_reads_grow_the_requests_up_to_the_readahead(small_pages, readahead):
    path, _ = small_pages
    fetch, remote = remote_file(path, block_size=4 * KIB, readahead=readahead, head=16 * KIB)
    db = RemoteDatabase(remote)
    # A shard of 128x128 float32 is 64 KiB: a chain of 17 overflow pages of 4 KiB, in order.
    # Read as a range to its end, its length is not looked up first (see the next test).
    value = db.get_range("sharded/c/1/1", 0, None)
    assert value is not None and len(value) > 64 * KIB
    grown = [n for _, n in fetch.calls if n > 4 * KIB]
    if readahead == 16 * KIB:
        assert grown[:3] == [8 * KIB, 16 * KIB, 16 * KIB]  # doubled up to the limit
    else:
        assert grown[:3] == [8 * KIB, 16 * KIB, 32 * KIB]
    assert max(n for _, n in fetch.calls) <= readahead
    assert len(fetch.calls) <= 10  # instead of one request per page
    db.close()


def test_a_sequential_read_keeps_two_runs_of_read_ahead_asked_for(small_pages):
    """Read-ahead asks for the next run while the run before it is still ahead of the reader,
    so that on a link busy moving one run the next is already on its way (one run ahead, the
    link idles for a round trip each time the reader catches up)."""
    path, _ = small_pages
    # read-ahead fetched at once on the reading thread: what each read asked for is known
    fetch, remote = remote_file(
        path, block_size=4 * KIB, readahead=16 * KIB, head=16 * KIB,
        schedule=lambda function, *args: function(*args),
    )
    db = RemoteDatabase(remote)
    with Database(path, mode="r") as local:
        expected = local.get("sharded/c/1/1")
    asked: list[list[tuple[int, int]]] = []  # per read of one page's worth, what it fetched
    for offset in range(0, len(expected), 4 * KIB):
        before = len(fetch.calls)
        assert db.get_range("sharded/c/1/1", offset, 4 * KIB) == expected[offset : offset + 4 * KIB]
        asked.append(fetch.calls[before:])
    full = [step for step, calls in enumerate(asked) for _, n in calls if n == 16 * KIB]
    assert len(full) >= 2, asked
    # The run after the first full run is asked for by the very next read, one block on: the
    # reader has not reached the first run yet. (One run ahead, it waited until the reader
    # entered that run, two reads later.)
    assert full[1] - full[0] == 1, asked
    db.close()


@pytest.mark.parametrize("readahead", [16 * KIB, 1024 * KIB])
def test_a_value_read_whole_is_fetched_in_requests_as_long_as_the_readahead(
    small_pages, readahead
):
    path, _ = small_pages
    fetch, remote = remote_file(path, block_size=4 * KIB, readahead=readahead, head=16 * KIB)
    db = RemoteDatabase(remote)
    with Database(path, mode="r") as local:
        expected = local.get("sharded/c/1/1")
    # get() looks the value's length up first: its first miss fetches up to all of it at once,
    # without the doubling a read of unknown length goes through.
    assert db.get("sharded/c/1/1") == expected
    value_requests = [n for _, n in fetch.calls if n > 4 * KIB]  # the B-tree's: one page each
    assert max(n for _, n in fetch.calls) <= readahead
    if readahead > len(expected):
        # all of its overflow pages (the value less what its leaf cell holds) in one request
        assert len(value_requests) == 1 and value_requests[0] >= len(expected) - 4 * KIB, (
            fetch.calls
        )
    else:
        assert len(value_requests) <= len(expected) // readahead + 1, fetch.calls
    db.close()


@pytest.mark.parametrize("order", ["forwards", "backwards", "shuffled"])
def test_values_read_in_file_order_either_way_grow_the_requests(small_pages, order):
    path, _ = small_pages
    with Database(path, mode="r") as local:
        keys = [
            k for (k,) in local.execute("SELECT k FROM zarr WHERE k >= 'plain/c/' ORDER BY rowid")
        ]
        expected = {k: local.get(k) for k in keys}
    keys = keys[:60]  # 32x32 float32 chunks: one page and a bit each
    if order == "backwards":
        keys.reverse()
    elif order == "shuffled":
        keys = [keys[(i * 37) % len(keys)] for i in range(len(keys))]
    fetch, remote = remote_file(path, block_size=4 * KIB, readahead=256 * KIB, head=32 * KIB)
    db = RemoteDatabase(remote)
    db.list_keys()  # the index, so that what follows fetches the values only
    fetch.calls.clear()
    for key in keys:
        assert db.get(key) == expected[key]
    if order == "shuffled":
        assert len(fetch.calls) > 20  # no order to follow: about one request per value
    else:
        assert len(fetch.calls) <= 10, fetch.calls
        assert max(n for _, n in fetch.calls) >= 64 * KIB
    db.close()


def test_the_cache_keeps_the_most_recently_used_blocks_within_its_size(small_pages):
    path, _ = small_pages
    size = 32 * KIB
    fetch, remote = remote_file(path, block_size=4 * KIB, cache_size=size, readahead=4 * KIB)
    db = RemoteDatabase(remote, cache_size=0)  # no SQLite page cache in between
    with Database(path, mode="r") as local:
        assert every_value(db) == every_value(local)
    stats = remote.stats()
    assert stats["evictions"] > 0
    assert stats["cached_bytes"] <= size
    # The header block is read at every statement: it stays cached.
    before = len(fetch.calls)
    db.list_keys()
    assert (0, 4 * KIB) not in fetch.calls[before:]
    db.close()


def test_one_fetch_serves_every_thread_waiting_for_the_same_blocks(small_pages):
    path, arrays = small_pages
    fetch, remote = remote_file(path, block_size=64 * KIB, head=64 * KIB)
    nthreads = 8
    dbs = [RemoteDatabase(remote) for _ in range(nthreads)]
    fetch.gate = threading.Event()
    results: list[bytes | None] = [None] * nthreads
    errors_seen: list[BaseException] = []

    def read(i: int) -> None:
        try:
            results[i] = dbs[i].get("plain/c/7/7")
        except BaseException as exc:  # reported below
            errors_seen.append(exc)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    wait_until(lambda: remote.stats()["waits"] >= nthreads - 1)
    waits_before_gate = remote.stats()["waits"]
    fetch.gate.set()
    for t in threads:
        t.join(10)
    assert not errors_seen
    with Database(path, mode="r") as local:
        expected = local.get("plain/c/7/7")
    assert results == [expected] * nthreads
    # Every miss was fetched once, by one thread, while the others waited for it.
    assert waits_before_gate >= nthreads - 1
    offsets = [offset for offset, _ in fetch.calls]
    assert len(offsets) == len(set(offsets))
    for db in dbs:
        db.close()


def test_a_fetch_under_way_holds_up_neither_the_gil_nor_cached_reads(small_pages):
    path, _ = small_pages
    fetch, remote = remote_file(path, block_size=4 * KIB, head=WHOLE_FILE)
    slow_remote = RemoteFile("test://y", len(fetch.data), fetch, block_size=4 * KIB)
    fetch.gate = threading.Event()
    slow = RemoteDatabase.__new__(RemoteDatabase)
    opened = threading.Event()

    def open_slow() -> None:
        slow.__init__(slow_remote)  # its first read waits at the gate
        opened.set()

    t = threading.Thread(target=open_slow)
    t.start()
    wait_until(lambda: bool(fetch.calls))
    assert fetch.calls, "the slow open never fetched"
    # Meanwhile: Python runs, and another connection reads from its cache.
    fast = RemoteDatabase(remote)
    assert len(fast.list_keys()) > 10
    assert not opened.is_set()
    fetch.gate.set()
    t.join(10)
    assert opened.is_set()
    fast.close()
    slow.close()


def test_a_failing_fetch_raises_a_zarrdb_error_and_the_next_read_recovers(small_pages):
    path, _ = small_pages
    fetch, remote = remote_file(path, block_size=4 * KIB, head=16 * KIB)
    db = RemoteDatabase(remote)
    cause = ConnectionResetError("connection reset by peer")
    fetch.fail.append(cause)
    with pytest.raises(errors.RemoteReadError) as info:
        db.get("plain/c/3/3")
    assert "test://x" in str(info.value) and "connection reset by peer" in str(info.value)
    assert info.value.__cause__ is cause
    assert isinstance(info.value, OSError)
    assert remote.stats()["failures"] == 1
    with Database(path, mode="r") as local:
        assert db.get("plain/c/3/3") == local.get("plain/c/3/3")
    db.close()


def test_a_zarrdb_error_from_the_fetch_reaches_the_caller_as_it_is(small_pages):
    path, _ = small_pages
    fetch, remote = remote_file(path, block_size=4 * KIB, head=16 * KIB)
    db = RemoteDatabase(remote)
    changed = errors.RemoteFileChangedError("test://x changed", code=10, filename="test://x")
    fetch.fail.append(changed)
    with pytest.raises(errors.RemoteFileChangedError) as info:
        db.list_keys()
    assert info.value is changed
    db.close()


def test_waiters_for_a_failed_fetch_fetch_again_themselves(small_pages):
    path, _ = small_pages
    fetch, remote = remote_file(path, block_size=4 * KIB, head=4096)
    fetch.fail.append(TimeoutError("slow server"))
    fetch.gate = threading.Event()
    dbs = [RemoteDatabase.__new__(RemoteDatabase) for _ in range(4)]
    outcomes: list[object] = [None] * 4

    def open_and_list(i: int) -> None:
        try:
            dbs[i].__init__(remote)
            outcomes[i] = len(dbs[i].list_keys())
        except errors.RemoteReadError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=open_and_list, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: remote.stats()["waits"] >= 3)
    fetch.gate.set()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    failed = [o for o in outcomes if isinstance(o, errors.RemoteReadError)]
    assert len(failed) == 1 and "slow server" in str(failed[0])
    assert sorted(o for o in outcomes if isinstance(o, int))[0] > 10
    for db in dbs:
        if not db.closed:
            db.close()


def test_a_short_answer_is_an_error_not_a_short_page(small_pages):
    path, _ = small_pages
    data = open(path, "rb").read()
    remote = RemoteFile(
        "test://x",
        len(data),
        lambda offset, n: data[offset : offset + n - 1],
        block_size=4 * KIB,
        head=data[:4096],
    )
    with pytest.raises(errors.DiskIOError, match="shorter than when it was opened"):
        RemoteDatabase(remote).list_keys()


def test_writes_are_refused(small_pages):
    path, _ = small_pages
    _, remote = remote_file(path, head=WHOLE_FILE)
    db = RemoteDatabase(remote)
    with pytest.raises(errors.ReadOnlyError):
        Writer(db)  # keys are written by a writer, which a read-only connection cannot have
    with pytest.raises(errors.ReadOnlyError):
        db.execute("INSERT INTO zarr(k, v) VALUES ('a/zarr.json', x'7b7d')")
    assert db.get("a/zarr.json") is None
    db.close()


def test_the_connection_keeps_its_file_alive(small_pages):
    path, _ = small_pages
    db = RemoteDatabase(remote_file(path, block_size=4 * KIB)[1])
    gc.collect()
    with Database(path, mode="r") as local:
        assert every_value(db) == every_value(local)
    db.close()


def test_an_unknown_name_does_not_open(tmp_path):
    with pytest.raises(errors.CantOpenError):
        Database("/zarrdb-remote/999999", mode="r", vfs="zarrdb-remote")


def test_bad_arguments():
    with pytest.raises(TypeError):
        RemoteFile("test://x", 10, None)
    with pytest.raises(ValueError):
        RemoteFile("test://x", 10, bytes, block_size=100)
    with pytest.raises(ValueError):
        RemoteFile("test://x", 10, bytes, block_size=4096, cache_size=1024)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_file_used_in_a_child_after_fork_is_refused_there_and_a_new_one_works(small_pages):
    if not hasattr(os, "fork"):
        pytest.skip("no fork() on this platform")
    from core.helpers import run_in_child  # tests/ is on sys.path (pytest's rootdir)

    path, _ = small_pages
    fetch, remote = remote_file(path, block_size=4 * KIB)
    db = RemoteDatabase(remote)
    expected = len(db.list_keys())

    def child() -> dict:
        try:
            db.list_keys()
        except errors.ForkedProcessError:
            refused = True
        else:
            refused = False
        fresh = RemoteDatabase(RemoteFile("test://x", len(fetch.data), fetch, block_size=4 * KIB))
        return {"refused": refused, "keys": len(fresh.list_keys())}

    assert run_in_child(child) == {"refused": True, "keys": expected}
    db.close()
