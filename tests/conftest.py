"""Fixtures shared by the test folders: the real servers on 127.0.0.1 that remote files are
read from (tests/remote for the store, tests/cli for the command line). Each is started once
per session, when a test first asks for it."""

from __future__ import annotations

import pytest

from remote.servers import HTTPServer, S3Server
from zarrdb import remote


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
