"""Fixtures for the remote tests: an S3 server (moto) and an HTTP server (aiohttp) on
127.0.0.1, one of each for the session, and small .zarrdb files written by zarrdb and closed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrdb import SQLiteStore, remote

from .servers import HTTPServer, S3Server

SHAPE = (256, 256)
CHUNKS = (32, 32)
SHARDS = (128, 128)


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


def field(shape=SHAPE, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype="f4")


def write_hierarchy(
    path: Path, *, seed: int = 0, page_size: int | None = None
) -> dict[str, np.ndarray]:
    """A closed .zarrdb at `path`: a group with an array of small chunks ("plain") and a sharded
    one ("sharded") of the same data, plus an attribute; returns the arrays written."""
    data = field(seed=seed)
    with SQLiteStore(path, page_size=page_size) as store:
        root = zarr.open_group(store, mode="w", attributes={"title": "remote test"})
        plain = root.create_array("plain", shape=SHAPE, chunks=CHUNKS, dtype="f4", compressors=None)
        plain[:] = data
        sharded = root.create_array(
            "sharded", shape=SHAPE, chunks=CHUNKS, shards=SHARDS, dtype="f4", compressors=None
        )
        sharded[:] = data
    return {"plain": data, "sharded": data}


@pytest.fixture(scope="session")
def hierarchy_file(tmp_path_factory) -> tuple[bytes, dict[str, np.ndarray]]:
    """The bytes of a closed .zarrdb written by zarrdb, and its arrays."""
    path = tmp_path_factory.mktemp("remote") / "hierarchy.zarrdb"
    arrays = write_hierarchy(path)
    return path.read_bytes(), arrays
