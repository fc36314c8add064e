"""Writes the files the Node tests read, and what Python reads from each (manifest.json).

Run by the tests with zarrdb's Python: python make_fixtures.py OUTDIR. Every file is made here,
at test time, by zarrdb, by the standard-library sqlite3 module writing the SQLiteStore schema,
or (hostile files) by editing such a file; none is kept in the repository.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import sys

import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype

import zarrdb

OUT = sys.argv[1]
MANIFEST: dict[str, dict] = {}
PROTOTYPE = default_buffer_prototype()

# Keys whose UTF-8 byte order differs from JavaScript's UTF-16 string order, and others.
UNICODE_KEYS = ["é/ü/中文", "a/\ue000", "a/\U0001f600", "Ωmega", "x y/z", "🙂/zarr.json"]


def sizes(page_size: int) -> list[int]:
    """Values at the edges of the local/overflow split and across many overflow pages."""
    usable = page_size
    edges = [0, 1, 100, usable - 36, usable - 35, usable - 34, usable - 4, usable * 3 + 7]
    return edges + [usable * 40 + 123, 1_000_003]


def payload(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def read_back(path: str) -> dict[str, str]:
    """What zarrdb reads from the file: every key and its value (base64)."""
    store = zarrdb.SQLiteStore(path, read_only=True)
    try:
        return {k: base64.b64encode(_get(store, k)).decode() for k in sorted(_list(store))}
    finally:
        store.close()


def array_bytes(path: str, array_path: str = "") -> str:
    """An array's values as zarr-python reads them through zarrdb (base64, C order)."""
    store = zarrdb.SQLiteStore(path, read_only=True)
    try:
        return base64.b64encode(
            np.asarray(zarr.open_array(store, path=array_path)[:]).tobytes()
        ).decode()
    finally:
        store.close()


def _list(store) -> list[str]:
    import asyncio

    async def collect():
        return [k async for k in store.list()]

    return asyncio.run(collect())


def _get(store, key: str) -> bytes:
    import asyncio

    buf = asyncio.run(store.get(key, PROTOTYPE))
    return buf.to_bytes()


def record(name: str, **extra) -> None:
    path = os.path.join(OUT, name)
    MANIFEST[name] = {"values": read_back(path), **extra}


def zarrdb_file(name: str, page_size: int, many: int = 0) -> str:
    path = os.path.join(OUT, name)
    store = zarrdb.SQLiteStore(path, page_size=page_size)
    for i, n in enumerate(sizes(page_size)):
        store.set_sync(f"values/{n}", PROTOTYPE.buffer.from_bytes(payload(n, i)))
    for i, key in enumerate(UNICODE_KEYS):
        store.set_sync(key, PROTOTYPE.buffer.from_bytes(key.encode() * (i + 1)))
    for i in range(many):
        store.set_sync(f"many/c/{i}/{i % 7}", PROTOTYPE.buffer.from_bytes(payload(50 + i % 300, i)))
    store.close()
    return path


for page_size in (512, 4096, 65536):
    zarrdb_file(f"zarrdb_{page_size}.zarrdb", page_size, many=3000 if page_size == 512 else 400)
    record(f"zarrdb_{page_size}.zarrdb", kind="zarrdb", page_size=page_size)

# A file that went through WAL mode (writes in WAL, then checkpoint and back to DELETE).
wal = zarrdb_file("wal.zarrdb", 4096)
with sqlite3.connect(wal) as db:
    db.execute("PRAGMA journal_mode=WAL")
    for i in range(50):
        db.execute(
            "INSERT OR REPLACE INTO zarr(k, v) VALUES (?, ?)", (f"wal/{i}", payload(5000 + i, i))
        )
    db.execute("DELETE FROM zarr WHERE k = 'values/100'")
db.close()
with sqlite3.connect(wal) as db:
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA journal_mode=DELETE")
db.close()
record("wal.zarrdb", kind="wal")


def stdlib_file(
    name: str,
    page_size: int,
    schema_extra: str = "",
    meta: dict | None = None,
    table: str | None = None,
    encoding: str | None = None,
    fragment: bool = False,
) -> str:
    """The SQLiteStore schema written by Python's sqlite3 module (no auto-vacuum)."""
    path = os.path.join(OUT, name)
    db = sqlite3.connect(path)
    if encoding:
        db.execute(f"PRAGMA encoding = '{encoding}'")
    db.execute(f"PRAGMA page_size = {page_size}")
    db.execute("PRAGMA application_id = 0x10b50760")
    db.execute(
        "CREATE TABLE zarr_sqlitestore_metadata (k TEXT PRIMARY KEY NOT NULL, v TEXT NOT NULL)"
    )
    db.execute(table or "CREATE TABLE zarr (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)")
    if schema_extra:
        db.executescript(schema_extra)
    records = {"sqlitestore_version": "1.0", "compatible_flags": "", "incompatible_flags": ""}
    records.update(meta or {})
    db.executemany("INSERT INTO zarr_sqlitestore_metadata VALUES (?, ?)", list(records.items()))
    for i, n in enumerate(sizes(page_size)):
        db.execute("INSERT INTO zarr VALUES (?, ?)", (f"values/{n}", payload(n, i)))
    db.execute(
        "INSERT INTO zarr VALUES (?, ?)", ("zarr.json", b'{"zarr_format":3,"node_type":"group"}')
    )
    if fragment:
        # Freed pages are reused by later values: their overflow chains are not contiguous.
        for i in range(30):
            db.execute(
                "INSERT INTO zarr VALUES (?, ?)", (f"tmp/{i}", payload(page_size * 3, 100 + i))
            )
        db.commit()
        db.execute(
            "DELETE FROM zarr WHERE k LIKE 'tmp/%' AND CAST(substr(k, 5) AS INTEGER) % 2 = 0"
        )
        db.commit()
        db.execute("INSERT INTO zarr VALUES (?, ?)", ("fragmented", payload(page_size * 40, 7)))
    db.commit()
    db.close()
    return path


stdlib_file("stdlib_1024.zarrdb", 1024, fragment=True)
record("stdlib_1024.zarrdb", kind="stdlib")

# The sqlite3 shell, if installed, writing the schema from the spec's SQL.
if os.path.exists("/usr/bin/sqlite3"):
    import subprocess

    shell = os.path.join(OUT, "shell.zarrdb")
    script = """
PRAGMA page_size = 2048;
PRAGMA application_id = 0x10b50760;
CREATE TABLE IF NOT EXISTS zarr_sqlitestore_metadata (k TEXT PRIMARY KEY NOT NULL, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS zarr (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL);
INSERT INTO zarr_sqlitestore_metadata(k, v) VALUES ('sqlitestore_version', '1.0'),
  ('created_by', 'sqlite3 shell'), ('compatible_flags', ''), ('incompatible_flags', '');
INSERT INTO zarr VALUES ('zarr.json', CAST('{"zarr_format":3,"node_type":"group"}' AS BLOB));
INSERT INTO zarr VALUES ('big', randomblob(300000));
INSERT INTO zarr VALUES ('empty', x'');
"""
    subprocess.run(["/usr/bin/sqlite3", shell], input=script, text=True, check=True)
    record("shell.zarrdb", kind="shell")

# zarr arrays: a plain one and a sharded one, with the values Python reads.
arrays_path = os.path.join(OUT, "arrays.zarrdb")
store = zarrdb.SQLiteStore(arrays_path)
root = zarr.open_group(store, mode="w")
root.attrs["title"] = "fixtures"
plain = root.create_array("plain", shape=(100, 130), chunks=(32, 64), dtype="float32")
plain[:] = np.arange(100 * 130, dtype="float32").reshape(100, 130) / 7
cube = root.create_group("nested").create_array(
    "cube", shape=(6, 64, 96), chunks=(1, 16, 16), shards=(2, 64, 48), dtype="uint16"
)
cube[:] = (np.arange(6 * 64 * 96) % 65521).astype("uint16").reshape(6, 64, 96)
store.close()
MANIFEST["arrays.zarrdb"] = {
    "kind": "arrays",
    "values": read_back(arrays_path),
    "arrays": {
        "plain": array_bytes(arrays_path, "plain"),
        "nested/cube": array_bytes(arrays_path, "nested/cube"),
    },
}

# Many small chunks (4 KiB pages, 256 chunks of 4 KiB): a whole read is many values at once.
many_path = os.path.join(OUT, "many_chunks.zarrdb")
store = zarrdb.SQLiteStore(many_path, page_size=4096)
grid = zarr.create_array(
    store, shape=(512, 512), chunks=(32, 32), dtype="float32", compressors=None
)
grid[:] = np.random.default_rng(5).random((512, 512), dtype="float32")
store.close()
MANIFEST["many_chunks.zarrdb"] = {
    "kind": "arrays",
    "values": read_back(many_path),
    "arrays": {
        "": array_bytes(many_path),
    },
}

# zarr-sqlite (the pure-Python SQLiteStore), where it is installed: its own file of arrays.
try:
    from zarr_sqlite import SQLiteStore as ZarrSQLiteStore
except ImportError:
    ZarrSQLiteStore = None
if ZarrSQLiteStore is not None:
    other_path = os.path.join(OUT, "zarr_sqlite.zarrdb")
    other = ZarrSQLiteStore(other_path, journal_mode="DELETE")
    group = zarr.open_group(other, mode="w")
    values = group.create_array("values", shape=(300, 200), chunks=(64, 64), dtype="int32")
    values[:] = np.arange(300 * 200, dtype="int32").reshape(300, 200)
    tiles = group.create_array(
        "tiles", shape=(128, 128), chunks=(16, 16), shards=(64, 64), dtype="float64"
    )
    tiles[:] = np.random.default_rng(3).random((128, 128))
    other.close()
    MANIFEST["zarr_sqlite.zarrdb"] = {
        "kind": "zarr-sqlite",
        "values": read_back(other_path),
        "arrays": {
            "values": array_bytes(other_path, "values"),
            "tiles": array_bytes(other_path, "tiles"),
        },
    }

# Files Python refuses, each with the refusal it gets.
hostile = {
    "utf16.zarrdb": {"encoding": "UTF-16le"},
    "without_rowid.zarrdb": {
        "table": "CREATE TABLE zarr (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID"
    },
    "nocase.zarrdb": {
        "table": "CREATE TABLE zarr (k TEXT PRIMARY KEY COLLATE NOCASE NOT NULL, v BLOB NOT NULL)"
    },
    "flags.zarrdb": {"meta": {"incompatible_flags": "future-thing"}},
    "version2.zarrdb": {"meta": {"sqlitestore_version": "2.0"}},
    "trigger.zarrdb": {
        "schema_extra": "CREATE TRIGGER t AFTER INSERT ON zarr BEGIN SELECT 1; END;"
    },
    "partial_index.zarrdb": {"schema_extra": "CREATE INDEX p ON zarr(k) WHERE length(v) > 0;"},
}
refusals = {}
for name, options in hostile.items():
    path = stdlib_file(name, 1024, **options)
    store = zarrdb.SQLiteStore(path, read_only=True)
    try:
        _get(store, "zarr.json")
        refusals[name] = None
    except zarrdb.errors.ZarrDBError as exc:  # what Python says of the file
        refusals[name] = type(exc).__name__
    finally:
        store.close()

# zarr-python 2's layout, a non-SQLite file, a file cut short.
zarr2 = os.path.join(OUT, "zarr2.zarrdb")
with sqlite3.connect(zarr2) as db:
    db.execute("CREATE TABLE IF NOT EXISTS zarr(k TEXT PRIMARY KEY, v BLOB)")
db.close()
with open(os.path.join(OUT, "not_sqlite.zarrdb"), "wb") as f:
    f.write(b"PK\x03\x04 not a database" * 100)
with open(os.path.join(OUT, "zarrdb_4096.zarrdb"), "rb") as f:
    whole = f.read()
with open(os.path.join(OUT, "truncated.zarrdb"), "wb") as f:
    f.write(whole[: len(whole) // 3])

# An overflow chain that loops: the second overflow page of a value points back at the first.
loop = stdlib_file("loop.zarrdb", 1024)
with open(loop, "r+b") as f:
    data = bytearray(f.read())
    marker = payload(1024 * 40 + 123, 8)  # the value stored at values/41083
    start = next(
        at for at in (data.find(marker[o : o + 16]) for o in range(5000, 9000, 100)) if at >= 0
    )
    page_no = start // 1024 + 1
    next_page = int.from_bytes(data[(page_no - 1) * 1024 : (page_no - 1) * 1024 + 4], "big")
    # page_no's successor now leads back to page_no: the walk would never end.
    data[(next_page - 1) * 1024 : (next_page - 1) * 1024 + 4] = page_no.to_bytes(4, "big")
    f.seek(0)
    f.write(data)
MANIFEST["loop.zarrdb"] = {"kind": "loop", "key": "values/41083"}
MANIFEST["_refusals"] = refusals

with open(os.path.join(OUT, "manifest.json"), "w") as f:
    json.dump(MANIFEST, f)
