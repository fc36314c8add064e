"""Fixtures for the remote tests: small .zarrdb files written by zarrdb and closed. The servers
they are published on (`s3`, `http`: moto's S3 server and an aiohttp server on 127.0.0.1, one
of each for the session) are in tests/conftest.py, shared with the command-line tests."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrdb import SQLiteStore

SHAPE = (256, 256)
CHUNKS = (32, 32)
SHARDS = (128, 128)


def wait_until_loaded(store: SQLiteStore, timeout: float = 30) -> None:
    """Wait until no block of the store's file is being fetched (read-ahead started in the
    background has landed), so that requests counted after it are the next read's."""
    deadline = time.monotonic() + timeout
    while store.remote_stats()["loading"]:
        assert time.monotonic() < deadline, f"blocks still loading after {timeout} s"
        time.sleep(0.01)


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
