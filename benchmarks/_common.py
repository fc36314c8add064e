"""Helpers shared by the engine benchmarks (issue 3) and their conftest.

Every data set is written once per session by the standard `sqlite3` module into a source file
(fixed page size, WAL, checkpointed), then copied byte for byte into one file for zarrdb and one
for the standard module, so both read exactly the same layout. Everything lives under pytest's
tmp_path_factory, never in the repository.

Nothing here needs pytest-benchmark; the benchmark modules skip themselves without it.

Environment (for experiments; the defaults are what the targets are judged on):
    ZARRDB_BENCH_PAGE_SIZE   page size of every file (default 65536, as SQLiteStore creates them)
    ZARRDB_BENCH_MMAP        mmap_size of every connection, both engines (default 268435456,
                             SQLiteStore's default for read connections; 0 disables)
    ZARRDB_BENCH_ROUNDS      multiplies the number of rounds of each benchmark (default 1.0)
    ZARRDB_BENCH_BLOCKS      blocks each benchmark is split into, interleaved with the blocks
                             of the other variants of its group (default 3)
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

from zarrdb._core import Database

KIB = 1024
MIB = 1024 * KIB

PAGE_SIZE = int(os.environ.get("ZARRDB_BENCH_PAGE_SIZE", "65536"))
MMAP_SIZE = int(os.environ.get("ZARRDB_BENCH_MMAP", str(256 * 1024 * 1024)))
ROUNDS_SCALE = float(os.environ.get("ZARRDB_BENCH_ROUNDS", "1.0"))
BLOCKS = max(1, int(os.environ.get("ZARRDB_BENCH_BLOCKS", "3")))
# The same for both engines: WAL, synchronous=NORMAL (no fsync per commit, one per checkpoint).
JOURNAL_MODE = "wal"
SYNCHRONOUS = "normal"

SCHEMA = "CREATE TABLE zarr(k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)"
# The statement zarrdb's set/set_many run, used verbatim by the standard module.
UPSERT = "INSERT INTO zarr(k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v"
SELECT_V = "SELECT v FROM zarr WHERE k = ?"
SELECT_ROWID = "SELECT rowid FROM zarr WHERE k = ?"
SCAN_KEYS = "SELECT k FROM zarr WHERE k > ? AND k < ?"

# Sizes of the data sets (chosen so a whole run stays well under three minutes on two cores).
N_16K = 2000  # 2000 x 16 KiB = 31 MiB
N_1M = 64  # 64 x 1 MiB = 64 MiB
TREE_GROUP = "grp/"
TREE_CHILDREN = 200
TREE_KEYS_PER_CHILD = 500  # 200 x 500 = 100,000 keys below TREE_GROUP


def rounds(n: int) -> int:
    """The number of rounds of a benchmark, scaled by ZARRDB_BENCH_ROUNDS."""
    return max(3, round(n * ROUNDS_SCALE))


# --- the two engines, configured alike ---------------------------------------------------------


def open_zarrdb(path: Path | str, **kwargs) -> Database:
    kwargs.setdefault("mmap_size", MMAP_SIZE)
    return Database(
        path, journal_mode=JOURNAL_MODE, synchronous=SYNCHRONOUS, page_size=PAGE_SIZE, **kwargs
    )


def open_stdlib(path: Path | str, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """One connection in autocommit mode (transactions are explicit BEGIN .. COMMIT)."""
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    con.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # new files only, as for zarrdb
    con.execute(f"PRAGMA mmap_size = {MMAP_SIZE}")
    mode = con.execute(f"PRAGMA journal_mode = {JOURNAL_MODE}").fetchone()[0]
    assert mode == JOURNAL_MODE, mode
    con.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
    return con


def write_source(path: Path, items) -> None:
    """A new file holding `items` (key, value) pairs, checkpointed so the WAL is empty."""
    con = open_stdlib(path)
    con.execute(SCHEMA)
    con.execute("BEGIN IMMEDIATE")
    con.executemany(UPSERT, items)
    con.execute("COMMIT")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert con.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE
    con.close()


def children_of(keys, plen: int) -> list[str]:
    """list_dir computed in Python from every key (str) below a prefix of length `plen`."""
    out = set()
    add = out.add
    for k in keys:
        i = k.find("/", plen)
        add(k[plen:] if i < 0 else k[plen : i + 1])
    return sorted(out)


def children_of_rows(rows, plen: int) -> list[str]:
    """The same from an iterable of 1-tuples (rows of a cursor), without an intermediate list."""
    out = set()
    add = out.add
    for (k,) in rows:
        i = k.find("/", plen)
        add(k[plen:] if i < 0 else k[plen : i + 1])
    return sorted(out)


def random_values(n: int, size: int, seed: int) -> list[tuple[str, bytes]]:
    """n (key, value) pairs with keys as in a zarr array: a prefix and chunk coordinates."""
    rng = random.Random(seed)
    return [(f"arr/c/{i // 64}/{i % 64}", rng.randbytes(size)) for i in range(n)]
