"""Regenerate the bad .zarrdb files of tests/reliability/test_bad_files.py (and the valid one its
fuzz test mutates). Every file is made with the standard-library sqlite3 and plain file writes
through tests/format/builders.py, never with zarrdb, so the files say what the spec says, not
what zarrdb happens to do.

    python tests/data/bad/make_bad_files.py

The files are named *.zarrdb.fixture because .gitignore ignores *.zarrdb; README.md beside this
script says what is wrong with each. They are small (page size 4096) and deterministic apart
from what SQLite writes into its header (the change counter and library version).
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/, for format.builders

from format import builders  # noqa: E402

# The spec's schema without the NOT NULL constraints (which it only recommends), so that a
# foreign writer can store NULLs.
NULLABLE_SCHEMA = """
CREATE TABLE IF NOT EXISTS zarr_sqlitestore_metadata (
    k TEXT PRIMARY KEY NOT NULL,
    v TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS zarr (
    k TEXT PRIMARY KEY,
    v BLOB
);
"""

# A second, gzip-compressed 2-D array "g/b" (int16, shape (4, 4), chunks (2, 2)) next to the
# builders' array "a", so the valid file has a nested group and compressed chunks to mutate.
B_VALUES = [[r * 4 + c - 8 for c in range(4)] for r in range(4)]


def valid_entries() -> dict[str, bytes]:
    entries = builders.hand_written_entries()
    entries["g/zarr.json"] = json.dumps(
        {"zarr_format": 3, "node_type": "group", "attributes": {"nested": True}}
    ).encode()
    entries["g/b/zarr.json"] = json.dumps(
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": [4, 4],
            "data_type": "int16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "gzip", "configuration": {"level": 5}},
            ],
            "attributes": {"units": "m"},
        }
    ).encode()
    for i in range(2):
        for j in range(2):
            raw = b"".join(
                int(B_VALUES[r][c]).to_bytes(2, "little", signed=True)
                for r in (2 * i, 2 * i + 1)
                for c in (2 * j, 2 * j + 1)
            )
            entries[f"g/b/c/{i}/{j}"] = gzip.compress(raw, mtime=0)
    # a few larger values, so the file has overflow pages and a deeper b-tree
    for n in range(12):
        entries[f"a/extra/{n}"] = bytes((n * 37 + i) % 251 for i in range(1500 + 400 * n))
    return entries


def _rows(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for sql in statements:
            con.execute(sql)
    finally:
        con.close()


def make_all(out: Path) -> dict[str, Path]:
    made: dict[str, Path] = {}

    def name(stem: str) -> Path:
        path = out / f"{stem}.zarrdb.fixture"
        if path.exists():
            path.unlink()
        made[stem] = path
        return path

    builders.make_store_file(name("valid"), entries=valid_entries())
    builders.make_empty_file(name("empty"))
    builders.make_not_sqlite(name("random-bytes"), size=8192, seed=9)
    truncated = builders.make_store_file(name("truncated"), entries=valid_entries())
    size = truncated.stat().st_size
    os.truncate(truncated, (size // 2) - 1000)  # mid-page, half the pages gone
    builders.make_foreign_db(name("foreign-app"), tables=("customers", "orders"))
    builders.make_wrong_application_id(name("wrong-application-id"), 0x12345678)
    builders.make_version(name("version-2.0"), "2.0")
    builders.make_flags(name("incompatible-flag"), incompatible="some_future_feature")
    entries = builders.hand_written_entries()
    del entries["a/c/1"]
    path = builders.make_store_file(name("null-value"), entries=entries, tables_sql=NULLABLE_SCHEMA)
    _rows(path, "INSERT INTO zarr(k, v) VALUES ('a/c/1', NULL)")
    path = builders.make_store_file(name("null-key"), tables_sql=NULLABLE_SCHEMA)
    _rows(path, "INSERT INTO zarr(k, v) VALUES (NULL, x'6e756c6c206b6579')")
    path = builders.make_store_file(name("non-utf8-key"))
    _rows(path, "INSERT INTO zarr(k, v) VALUES (CAST(x'ff61' AS TEXT), x'00')")
    path = builders.make_store_file(name("non-utf8-metadata"))
    _rows(
        path,
        "UPDATE zarr_sqlitestore_metadata SET v = CAST(x'7a617272646220ff' AS TEXT) "
        "WHERE k = 'created_by'",
    )
    return made


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    for path in make_all(target).values():
        print(f"{path.name}: {path.stat().st_size} bytes")
