"""Fixtures for the tests of zarrdb._core.Database: new files with the zarr table, made with the
standard-library sqlite3, in DELETE and in WAL journal mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from zarrdb._core import Database

from .helpers import make_db_file


@pytest.fixture
def db_path(tmp_path) -> Path:
    """A new file with the zarr table, in DELETE journal mode."""
    return make_db_file(tmp_path / "test.zarrdb", "delete")


@pytest.fixture
def wal_path(tmp_path) -> Path:
    """A new file with the zarr table, in WAL journal mode."""
    return make_db_file(tmp_path / "test-wal.zarrdb", "wal")


@pytest.fixture
def db(db_path):
    """An open Database on a new file in DELETE journal mode."""
    database = Database(db_path)
    yield database
    database.close()


@pytest.fixture
def wal_db(wal_path):
    """An open Database on a new file in WAL journal mode."""
    database = Database(wal_path)
    yield database
    database.close()


@pytest.fixture(params=["delete", "wal"])
def any_db(request, tmp_path):
    """An open Database on a new file, once in DELETE and once in WAL journal mode."""
    path = make_db_file(tmp_path / f"any-{request.param}.zarrdb", request.param)
    database = Database(path)
    yield database
    database.close()


@pytest.fixture
def fast_db(db_path):
    """An open Database in DELETE journal mode with synchronous=off, for property tests that
    write once per example (durability is not what they test)."""
    database = Database(db_path, synchronous="off")
    yield database
    database.close()
