"""Fixtures shared by the test folders: the real servers on 127.0.0.1 that remote files are
read from (tests/remote for the store, tests/cli for the command line). Each is started once
per session, when a test first asks for it.

Tests that read remote files in the test process (those that use a server, or are marked
`remote`) run after all the others: the servers' threads and obstore's runtime threads stay
for the rest of the process, and the tests that fork() want a process of one thread."""

from __future__ import annotations

import os

import pytest

from remote.servers import HTTPServer, S3Server
from zarrdb import remote


# `zarrdb bench`'s cold reads run in the tests, where dropping the machine's page cache would
# slow every other program (and the other half of a parallel run).
os.environ["ZARRDB_BENCH_KEEP_PAGE_CACHE"] = "1"

SERVERS = frozenset({"s3_server", "http_server"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "remote: reads remote files in the test process (run after the other tests)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def remote(item: pytest.Item) -> bool:
        uses = set(getattr(item, "fixturenames", ()))
        return bool(SERVERS & uses) or item.get_closest_marker("remote") is not None

    items[:] = sorted(items, key=remote)  # stable: the others first, each part in its order


@pytest.fixture(scope="session")
def s3_server():
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def http_server():
    server = HTTPServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server):
    """The S3 server with a new bucket of its own and fresh counts: (server, bucket)."""
    bucket = s3_server.new_bucket()
    s3_server.traffic.reset()
    remote.release_caches()
    return s3_server, bucket


@pytest.fixture
def http(http_server):
    """The HTTP server, emptied, with fresh counts and its default behaviour."""
    http_server.objects.clear()
    http_server.traffic.reset()
    http_server.fail_next = 0
    http_server.fail_from_offset = None
    http_server.delay = 0.0
    http_server.ignore_if_match = False
    http_server.send_etag = True
    remote.release_caches()  # the same URL serves other bytes in each test
    return http_server
