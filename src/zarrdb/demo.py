"""A short demonstration: write a small hierarchy into a .zarrdb file and show what is in it.

    python -m zarrdb.demo [FILE]

FILE defaults to a temporary file that is removed afterwards.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path

import numpy as np
import zarr

import zarrdb
from zarrdb import SQLiteStore


def build_example(path: Path) -> None:
    """A group with a temperature field (chunked) and its coordinates."""
    rng = np.random.default_rng(42)
    y, x = np.mgrid[0:256, 0:512]
    field = (15 + 10 * np.sin(x / 40) * np.cos(y / 30) + rng.normal(0, 0.5, x.shape)).astype("f4")
    with SQLiteStore(path) as store:
        root = zarr.open_group(store, mode="w", attributes={"title": "zarrdb example"})
        temp = root.create_array("temperature", shape=field.shape, chunks=(64, 64), dtype="f4")
        temp[:] = field
        temp.attrs["units"] = "degC"
        root.create_array("lat", shape=(256,), chunks=(256,), dtype="f8")[:] = np.linspace(-90, 90, 256)
        root.create_array("lon", shape=(512,), chunks=(512,), dtype="f8")[:] = np.linspace(0, 360, 512)


def describe(path: Path) -> None:
    with SQLiteStore(path, read_only=True) as store:
        root = zarr.open_group(store, mode="r")
        print(f"{path} ({path.stat().st_size:,} bytes), attributes {dict(root.attrs)}")
        for name, arr in sorted(root.arrays()):
            print(
                f"  /{name}: shape {arr.shape}, chunks {arr.chunks}, {arr.dtype}, "
                f"{arr.nbytes_stored():,} bytes stored"
            )
        temp = root["temperature"]
        assert isinstance(temp, zarr.Array)
        window = np.array2string(np.asarray(temp[100:102, 200:204]), precision=2, separator=", ")
        print(f"  temperature[100:102, 200:204] =\n{window}")
    # The file is plain SQLite: any SQLite client can read it.
    # As a URI the path is percent-encoded: a '?', '#' or '%' in it would otherwise start the
    # query, drop "mode=ro" with a fragment or name another file.
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        version, created_by = (
            con.execute(
                "SELECT v FROM zarr_sqlitestore_metadata WHERE k IN ('sqlitestore_version', 'created_by') ORDER BY k DESC"
            ).fetchall()
        )
        (count,) = con.execute("SELECT count(*) FROM zarr").fetchone()
        (journal,) = con.execute("PRAGMA journal_mode").fetchone()
    finally:
        con.close()
    print(f"  read with Python's sqlite3: SQLiteStore {version[0]}, written by {created_by[0]},"
          f" {count} keys, journal mode {journal}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(f"zarrdb {zarrdb.__version__} (SQLite {zarrdb.sqlite_version}), zarr {zarr.__version__}")
    if argv:
        path = Path(argv[0])
        build_example(path)
        describe(path)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "example.zarrdb"
        build_example(path)
        describe(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
