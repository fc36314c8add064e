"""Regenerate the SQLiteStore files written by zarr-sqlite (the pure-Python reference
implementation) that tests/format/test_fixtures.py reads with zarrdb on every Python.

Run with a Python that has zarr-sqlite 1.0.1 (needs Python >= 3.12):

    .venv/py3.12/bin/python tests/data/make_fixtures.py

The files are named *.zarrdb.fixture because .gitignore ignores *.zarrdb. Their contents are
described in the test by plain numpy expressions; if you change what is written here, change
the test's expectations by hand (never generate them from the files).

- hierarchy.zarrdb.fixture: a group with attributes, a nested group, several dtypes, a
  zstd-compressed, an uncompressed, a gzip-compressed and a sharded array, and an array with an
  unwritten chunk; written with journal_mode="DELETE" (one self-contained file).
- wal-mode.zarrdb.fixture: one int64 array, written with zarr-sqlite's default
  journal_mode="WAL"; zarr-sqlite leaves its files in WAL mode after close, and this file
  checks that zarrdb copes with that.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import numpy as np
import zarr
import zarr.codecs

HERE = Path(__file__).resolve().parent / "zarr-sqlite"


def write_hierarchy(store) -> None:
    root = zarr.open_group(store, mode="w")
    root.attrs.update({"fixture": "zarr-sqlite 1.0.1", "answer": 42})
    grp = root.create_group("grp")
    grp.attrs["nested"] = {"a": [1, 2, 3]}
    root.create_group("grp/sub")

    ints = root.create_array("ints", shape=(6, 8), chunks=(3, 4), dtype="int32")  # zstd
    ints[:] = np.arange(48, dtype="int32").reshape(6, 8) - 24

    floats = root.create_array(
        "grp/floats", shape=(10,), chunks=(4,), dtype="float64", compressors=None
    )
    floats[:] = np.arange(10) / 4

    flags = root.create_array(
        "grp/sub/flags",
        shape=(5, 5),
        chunks=(5, 5),
        dtype="bool",
        compressors=zarr.codecs.GzipCodec(level=6),
    )
    flags[:] = np.arange(25).reshape(5, 5) % 3 == 0

    sharded = root.create_array(
        "sharded", shape=(16, 16), shards=(8, 8), chunks=(4, 4), dtype="uint16"
    )
    sharded[:] = np.arange(256, dtype="uint16").reshape(16, 16)

    partial = root.create_array(
        "partial", shape=(10,), chunks=(5,), dtype="int16", fill_value=-1
    )
    partial[:5] = np.arange(5, dtype="int16")


def write_wal_mode(store) -> None:
    root = zarr.open_group(store, mode="w")
    counts = root.create_array("counts", shape=(20,), chunks=(8,), dtype="int64")
    counts[:] = np.arange(20, dtype="int64") ** 2


def build(name: str, writer, journal_mode: str) -> Path:
    from zarr_sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "fixture.zarrdb"
        store = SQLiteStore(work, journal_mode=journal_mode)
        writer(store)
        store.close()
        leftovers = [s for s in ("-wal", "-shm", "-journal") if os.path.exists(f"{work}{s}")]
        assert not leftovers, f"zarr-sqlite left {leftovers} beside {work}"
        con = sqlite3.connect(work.as_uri() + "?mode=ro", uri=True)
        try:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            mode = con.execute("PRAGMA journal_mode").fetchone()[0]
            assert mode == journal_mode.lower(), mode
        finally:
            con.close()
        target = HERE / name
        HERE.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(work, target)
    return target


def main() -> int:
    try:
        import zarr_sqlite
    except ImportError:
        print("zarr-sqlite is not installed (it needs Python >= 3.12)", file=sys.stderr)
        return 1
    print(f"zarr-sqlite {zarr_sqlite.__version__}, zarr {zarr.__version__}")
    for name, writer, journal_mode in (
        ("hierarchy.zarrdb.fixture", write_hierarchy, "DELETE"),
        ("wal-mode.zarrdb.fixture", write_wal_mode, "WAL"),
    ):
        path = build(name, writer, journal_mode)
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
