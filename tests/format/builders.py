"""Builders of SQLite files, good and bad, made with the standard-library sqlite3 only.

Nothing in here uses zarrdb: the constants and the schema are copied from the SQLiteStore 1.0
spec (/work/shared/spec/SQLiteStore-1.0.md), not imported from zarrdb._format, so the tests
check zarrdb against the spec rather than against itself. Every builder writes a closed file in
DELETE journal mode (unless told otherwise) and returns its path. The reliability tests reuse
these builders (import ``format.builders`` with ``tests/`` on sys.path, or relatively).

The zarr hierarchy inside `make_store_file` files is written by hand (JSON metadata and raw
little-endian chunks), so a test can read it through zarr and compare with `STORE_ARRAY`.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path

# From the spec ("Application ID", "Database schema", appendix "Create database schema").
APPLICATION_ID = 0x10B50760
SPEC_SCHEMA = """
CREATE TABLE IF NOT EXISTS zarr_sqlitestore_metadata (
    k TEXT PRIMARY KEY NOT NULL,
    v TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS zarr (
    k TEXT PRIMARY KEY NOT NULL,
    v BLOB NOT NULL
);
"""
REQUIRED_METADATA = {
    "sqlitestore_version": "1.0",
    "compatible_flags": "",
    "incompatible_flags": "",
}
OPTIONAL_METADATA_KEYS = ("created_by", "modified_at")
ALLOWED_METADATA_KEYS = frozenset(REQUIRED_METADATA) | frozenset(OPTIONAL_METADATA_KEYS)

# --- a tiny zarr v3 hierarchy, written by hand ----------------------------------------------------

# A group with one attribute, holding one int32 array "a" of shape (6,) in two chunks of 3.
STORE_GROUP_ATTRS = {"builder": "stdlib sqlite3"}
STORE_ARRAY_VALUES = [0, 1, 2, 3, 4, 5]  # "a"[:]
_GROUP_JSON = {"zarr_format": 3, "node_type": "group", "attributes": STORE_GROUP_ATTRS}
_ARRAY_JSON = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [6],
    "data_type": "int32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0,
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    "attributes": {},
}


def _int32_le(values) -> bytes:
    return b"".join(int(v).to_bytes(4, "little", signed=True) for v in values)


def hand_written_entries() -> dict[str, bytes]:
    """The zarr table rows of the tiny hierarchy (root group + array "a")."""
    return {
        "zarr.json": json.dumps(_GROUP_JSON).encode(),
        "a/zarr.json": json.dumps(_ARRAY_JSON).encode(),
        "a/c/0": _int32_le(STORE_ARRAY_VALUES[:3]),
        "a/c/1": _int32_le(STORE_ARRAY_VALUES[3:]),
    }


# --- builders -----------------------------------------------------------------------------------


def make_store_file(
    path: str | Path,
    *,
    application_id: int = APPLICATION_ID,
    metadata: Mapping[str, str | None] | None = None,
    entries: Mapping[str, bytes | str] | None = None,
    journal_mode: str = "delete",
    tables_sql: str = SPEC_SCHEMA,
    page_size: int | None = None,
) -> Path:
    """A SQLiteStore file as the spec's appendix makes it.

    `metadata` overrides the default records (the three required ones, created_by and a
    modified_at); a value of None removes that record, an unknown key adds it. `entries` are
    the zarr table rows (default: the hand-written hierarchy); a str value is stored as TEXT,
    as a careless writer might."""
    path = Path(path)
    records: dict[str, str | None] = dict(REQUIRED_METADATA)
    records["created_by"] = "tests/format/builders.py"
    records["modified_at"] = "2024-01-02T03:04:05.678Z"
    records.update(metadata or {})
    rows = hand_written_entries() if entries is None else dict(entries)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        if page_size is not None:
            con.execute(f"PRAGMA page_size = {int(page_size)}")
        assert con.execute(f"PRAGMA journal_mode = {journal_mode}").fetchone()[0] == journal_mode
        con.execute(f"PRAGMA application_id = {int(application_id)}")
        con.executescript(tables_sql)
        con.execute("BEGIN")
        con.executemany(
            "INSERT INTO zarr_sqlitestore_metadata(k, v) VALUES (?, ?)",
            [(k, v) for k, v in records.items() if v is not None],
        )
        con.executemany("INSERT INTO zarr(k, v) VALUES (?, ?)", list(rows.items()))
        con.execute("COMMIT")
    finally:
        con.close()
    return path


def set_wal_mode(path: str | Path) -> None:
    """Put the file at `path` in WAL mode through another library's connection, closed at once:
    what a connection that closed last in WAL mode leaves (the header keeps the mode)."""
    with closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA journal_mode = wal").fetchone() == ("wal",)


def make_planted_log(
    path: str | Path, copy: str | Path, into: str | Path, sql: str, params: tuple = ()
) -> Path:
    """The write-ahead log of a copy of `path` (made at `copy`) that `sql` changed, copied to
    `into` as it was while that connection was still open: a -wal whose pages are not the
    file's, to plant beside it."""
    shutil.copyfile(path, copy)
    with closing(sqlite3.connect(copy, isolation_level=None)) as con:
        con.execute("PRAGMA journal_mode = wal")
        con.execute("PRAGMA wal_autocheckpoint = 0")
        con.execute(sql, params)
        shutil.copyfile(f"{copy}-wal", into)
    return Path(into)


def make_not_sqlite(path: str | Path, size: int = 4096, seed: int = 0) -> Path:
    """A file of random bytes (not an SQLite database)."""
    path = Path(path)
    data = random.Random(seed).randbytes(size)
    assert not data.startswith(b"SQLite format 3\x00")
    path.write_bytes(data)
    return path


def make_foreign_db(
    path: str | Path, tables: tuple[str, ...] = ("customers", "orders")
) -> Path:
    """Another application's SQLite database: a few tables with a row each, no SQLiteStore
    tables, application_id 0."""
    path = Path(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for name in tables:
            con.execute(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, name TEXT)")
            con.execute(f"INSERT INTO {name}(name) VALUES ('row of {name}')")
    finally:
        con.close()
    return path


def make_empty_file(path: str | Path) -> Path:
    """A 0-byte file."""
    path = Path(path)
    path.write_bytes(b"")
    return path


def make_empty_sqlite(path: str | Path) -> Path:
    """A valid SQLite database with no tables at all (one page, header written)."""
    path = Path(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA user_version = 7")  # forces the header page to be written
    finally:
        con.close()
    assert path.stat().st_size > 0
    return path


def make_wrong_application_id(path: str | Path, application_id: int = 0x12345678) -> Path:
    """A SQLiteStore file, complete but for its application id."""
    return make_store_file(path, application_id=application_id)


def make_version(path: str | Path, version: str) -> Path:
    """A SQLiteStore file declaring sqlitestore_version `version`."""
    return make_store_file(path, metadata={"sqlitestore_version": version})


def make_flags(path: str | Path, *, compatible: str = "", incompatible: str = "") -> Path:
    """A SQLiteStore file with the given flag lists."""
    return make_store_file(
        path, metadata={"compatible_flags": compatible, "incompatible_flags": incompatible}
    )


def make_extra_metadata(path: str | Path, extra: Mapping[str, str]) -> Path:
    """A SQLiteStore file with metadata records the spec does not define."""
    return make_store_file(path, metadata=dict(extra))


def make_zarr_table_only(path: str | Path) -> Path:
    """The zarr table with the hand-written hierarchy and the right application id, but no
    zarr_sqlitestore_metadata table."""
    path = Path(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        con.execute("CREATE TABLE zarr (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)")
        con.executemany(
            "INSERT INTO zarr(k, v) VALUES (?, ?)", list(hand_written_entries().items())
        )
    finally:
        con.close()
    return path
