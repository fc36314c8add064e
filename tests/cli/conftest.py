"""Real files for the command-line tests: a .zarrdb, a directory store and a zip, all written by
zarr, holding the same hierarchy (groups, attributes, a plain, a sharded, a 0-d and a v2-key
array). Session-scoped and read-only: a test that changes a file works on a copy."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore, ZipStore

from zarrdb import SQLiteStore

TEMPERATURE = np.random.default_rng(7).normal(15, 5, (40, 60)).astype("f4")


def build_hierarchy(store) -> None:
    root = zarr.open_group(store, mode="w", attributes={"title": "cli tests"})
    climate = root.create_group("climate", attributes={"source": "synthetic"})
    temp = climate.create_array(
        "temperature", shape=(40, 60), chunks=(10, 20), dtype="f4", attributes={"units": "degC"}
    )
    temp[:] = TEMPERATURE
    climate.create_array("station", shape=(25,), chunks=(10,), dtype="i8")[:] = np.arange(25)
    tiles = root.create_array("tiles", shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="u2")
    tiles[:40] = 7  # 4 shards of 4 written (rows 0..39 touch both rows of shards)
    root.create_array("scalar", shape=(), dtype="f8")[...] = 2.5
    legacy = root.create_array(
        "legacy",
        shape=(12,),
        chunks=(5,),
        dtype="i2",
        chunk_key_encoding={"name": "v2", "separator": "."},
    )
    legacy[:] = np.arange(12)


@pytest.fixture(scope="session")
def sample_file(tmp_path_factory) -> Path:
    """A .zarrdb written by zarr through SQLiteStore (closed: DELETE journal mode)."""
    path = tmp_path_factory.mktemp("sample") / "sample.zarrdb"
    with SQLiteStore(path) as store:
        build_hierarchy(store)
    return path


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory) -> Path:
    """The same hierarchy in a directory, written by zarr's LocalStore."""
    path = tmp_path_factory.mktemp("sample-dir") / "sample.zarr"
    build_hierarchy(LocalStore(path))
    return path


@pytest.fixture(scope="session")
def sample_zip(tmp_path_factory) -> Path:
    """The same hierarchy in a zip file, written by zarr's ZipStore."""
    path = tmp_path_factory.mktemp("sample-zip") / "sample.zip"
    store = ZipStore(path, mode="w")
    build_hierarchy(store)
    store.close()
    return path


@pytest.fixture
def sample_copy(sample_file, tmp_path) -> Path:
    """A private copy of the sample .zarrdb, for tests that change it."""
    path = tmp_path / "copy.zarrdb"
    shutil.copy(sample_file, path)
    return path
