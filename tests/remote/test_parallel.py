"""Remote reads at an object store's latency (tests/remote/latency_server.py): reads from threads,
coroutines and zarr's concurrent chunk reads wait for the network at the same time, within the
bound of requests in flight; failures, a replaced object and closing under that concurrency.

Each test proves concurrency by what the server saw (the most requests in flight at once), not
by timing."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype

from zarrdb import SQLiteStore, _remote_threads, errors, remote

from .conftest import wait_until_loaded
from .latency_server import LatencyServer

KIB = 1024
# Small blocks and requests, so that the test file of about 600 KiB is many blocks.
SMALL = {"first_read": 16 * KIB, "block_size": 16 * KIB, "min_request": 16 * KIB}
WINDOW = 40


@pytest.fixture
def server(hierarchy_file):
    data, _ = hierarchy_file
    with LatencyServer(latency=0.05) as running:
        running.put("data.zarrdb", data)
        yield running


def open_store(server, **block_cache) -> SQLiteStore:
    remote.release_caches()  # a cold cache for every store
    return SQLiteStore(
        server.url + "data.zarrdb",
        read_only=True,
        storage_options={"allow_http": True, "retry_config": {"max_retries": 0}},
        block_cache={**SMALL, **block_cache},
    )


def windows(count: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    return [(int(i), int(j)) for i, j in rng.integers(0, 256 - WINDOW, size=(count, 2))]


def remote_threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def test_sixteen_threads_read_equal_windows_within_the_bound_of_requests(server, hierarchy_file):
    _, arrays = hierarchy_file
    # short read-ahead: many requests, not a few runs that take the whole file
    store = open_store(server, max_requests=4, readahead=64 * KIB)
    arr = zarr.open_array(store, path="plain", mode="r")
    server.reset()

    def read(corner):
        i, j = corner
        return corner, arr[i : i + WINDOW, j : j + WINDOW]

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(read, windows(48)))
    for (i, j), window in results:
        np.testing.assert_array_equal(window, arrays["plain"][i : i + WINDOW, j : j + WINDOW])
    seen = server.snapshot()
    assert seen.requests > 4
    # in parallel, never more than the bound
    assert 2 <= seen.peak_in_flight <= 4, seen.peak_in_flight
    store.close()


def test_concurrent_gets_wait_for_the_network_together_and_off_the_event_loop(server):
    store = open_store(server)
    keys = [f"plain/c/{i}/{i}" for i in range(8)]  # eight chunks far apart in the file
    server.latency = 0.5
    ticks: list[float] = []  # when the loop ran the ticker, while the reads waited

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    async def main() -> list:
        await store._ensure_open()
        server.reset()
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop))
        try:
            prototype = default_buffer_prototype()
            values = await asyncio.gather(*(store.get(k, prototype) for k in keys))
            ticks.append(time.monotonic())
            return values
        finally:
            stop.set()
            await ticking

    values = asyncio.run(main())
    assert all(v is not None and len(v) == 32 * 32 * 4 for v in values)
    seen = server.snapshot()
    # the eight reads were in flight together
    assert seen.peak_in_flight >= 4, seen
    # and the loop ran on while they waited: a read on the loop's thread would have blocked it
    # for a whole 500 ms request at least once
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert len(ticks) >= 3 and max(gaps) < 0.3, (len(ticks), max(gaps, default=None))
    store.close()


def test_readers_missing_the_same_blocks_wait_for_one_request(server):
    key = "plain/c/5/5"
    alone = open_store(server)
    alone.ensure_open()
    server.reset()
    expected = alone.get_sync(key)
    needed = server.snapshot().requests  # what one reader alone asks for
    alone.close()

    store = open_store(server)
    store.ensure_open()
    server.latency = 0.3
    server.reset()
    barrier = threading.Barrier(6)

    def read(_):
        barrier.wait()
        return store.get_sync(key)

    with ThreadPoolExecutor(6) as pool:
        values = list(pool.map(read, range(6)))
    assert all(v.to_bytes() == expected.to_bytes() for v in values)
    assert server.snapshot().requests == needed >= 1
    assert store.remote_stats()["waits"] >= 1
    store.close()


def test_a_server_failing_one_request_in_ten_is_retried(hierarchy_file):
    data, arrays = hierarchy_file
    with LatencyServer(latency=0.02) as server:
        server.put("data.zarrdb", data)
        server.fail_every = 10
        remote.release_caches()
        store = SQLiteStore(
            server.url + "data.zarrdb",
            read_only=True,
            # obstore retries a 503 by itself, quickly
            storage_options={
                "allow_http": True,
                "retry_config": {
                    "max_retries": 3,
                    "backoff": {"init_backoff": datetime.timedelta(milliseconds=10)},
                },
            },
            block_cache=SMALL,
        )
        arr = zarr.open_array(store, path="plain", mode="r")
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda c: arr[c[0] : c[0] + WINDOW, c[1] : c[1] + WINDOW],
                                    windows(24, seed=1)))
        for (i, j), window in zip(windows(24, seed=1), results, strict=True):
            np.testing.assert_array_equal(window, arrays["plain"][i : i + WINDOW, j : j + WINDOW])
        np.testing.assert_array_equal(arr[:], arrays["plain"])
        assert server.snapshot().failed >= 1
        store.close()


def test_a_failed_request_fails_only_the_reads_that_needed_it(server, hierarchy_file):
    data, arrays = hierarchy_file
    # read-ahead of two blocks at most, so that reading the first quarter leaves the last one
    store = open_store(server, readahead=32 * KIB)
    arr = zarr.open_array(store, path="plain", mode="r")
    np.testing.assert_array_equal(arr[:64, :], arrays["plain"][:64, :])  # cached now
    wait_until_loaded(store)
    server.fail_every = 1  # every request fails from here on
    with ThreadPoolExecutor(4) as pool:
        cached = pool.submit(lambda: arr[:64, :])
        uncached = pool.submit(lambda: arr[192:, :])
        np.testing.assert_array_equal(cached.result(), arrays["plain"][:64, :])
        with pytest.raises(errors.RemoteReadError, match="503"):
            uncached.result()
    server.fail_every = 0
    np.testing.assert_array_equal(arr[192:, :], arrays["plain"][192:, :])  # read again: fine
    store.close()


def test_an_object_replaced_mid_read_fails_every_reader_that_asks_again(server, hierarchy_file):
    data, arrays = hierarchy_file
    store = open_store(server)
    arr = zarr.open_array(store, path="plain", mode="r")
    np.testing.assert_array_equal(arr[:32, :], arrays["plain"][:32, :])
    # a new version of the file: other bytes, another ETag
    server.put("data.zarrdb", data[:-1] + bytes([data[-1] ^ 0xFF]))
    outcomes: list[object] = []

    def read(corner):
        i, j = corner
        try:
            outcomes.append(arr[100 + i % 100 : 100 + i % 100 + WINDOW, j : j + WINDOW])
        except Exception as exc:  # noqa: BLE001 - collected and checked below
            outcomes.append(exc)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(read, windows(16, seed=2)))
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert failures, "no reader asked the server again"
    assert all(isinstance(f, errors.RemoteFileChangedError) for f in failures), failures
    # what was read at all was read from the version opened
    for o in outcomes:
        if not isinstance(o, BaseException):
            assert isinstance(o, np.ndarray)
    store.close()


def test_closing_a_store_ends_the_reads_waiting_on_the_network(server):
    store = open_store(server)
    store.ensure_open()
    wait_until_loaded(store)  # the opening's read-ahead: the request in flight below is the read's
    server.stall = 30.0  # no answer for half a minute
    outcome: list[object] = []

    async def read() -> None:
        try:
            outcome.append(await store.get("plain/c/7/7", default_buffer_prototype()))
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome.append(exc)

    reader = threading.Thread(target=lambda: asyncio.run(read()))
    reader.start()
    deadline = time.monotonic() + 10
    while (
        server.snapshot().in_flight == 0 or store._open_file.read_pool is None
    ) and time.monotonic() < deadline:  # the read is in the store's read threads, waiting
        time.sleep(0.01)
    assert server.snapshot().in_flight >= 1, "the read never reached the server"
    started = time.monotonic()
    store.close()
    closed_in = time.monotonic() - started
    reader.join(10)
    assert not reader.is_alive()
    assert closed_in < 5, closed_in  # not the stall, nor the read timeout
    assert len(outcome) == 1 and isinstance(outcome[0], errors.ClosedError), outcome
    assert remote_threads("zarrdb-remote-read") == []
    server.stall = 0.0


def test_no_thread_is_left_behind_after_close(server, hierarchy_file):
    _, arrays = hierarchy_file
    store = open_store(server)
    arr = zarr.open_array(store, path="plain", mode="r")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c: arr[c[0] : c[0] + WINDOW, c[1] : c[1] + WINDOW], windows(16)))
    assert remote_threads("zarrdb-remote-read")
    store.close()
    assert remote_threads("zarrdb-remote-read") == []
    # the request threads end once idle (a background read-ahead may still be finishing)
    deadline = time.monotonic() + _remote_threads._Workers.IDLE_EXIT + 10
    while remote_threads("zarrdb-remote-request") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert remote_threads("zarrdb-remote-request") == []
    # and the store reads again after close, with new threads
    np.testing.assert_array_equal(arr[:WINDOW, :WINDOW], arrays["plain"][:WINDOW, :WINDOW])
    store.close()
    assert remote_threads("zarrdb-remote-read") == []


def test_a_sequential_read_keeps_a_request_in_flight_ahead_of_it(hierarchy_file):
    data, arrays = hierarchy_file
    with LatencyServer(latency=0.1) as server:
        server.put("data.zarrdb", data)
        store = open_store(server, block_size=4 * KIB, min_request=4 * KIB, readahead=64 * KIB)
        arr = zarr.open_array(store, path="sharded", mode="r")
        server.reset()
        np.testing.assert_array_equal(arr[:], arrays["sharded"])
        seen = server.snapshot()
        stats = store.remote_stats()
        store.close()
    # the background read-ahead overlapped the readers' own requests
    assert seen.peak_in_flight >= 2, seen
    assert stats["bytes"] <= len(data)
