"""Crafted files whose values claim more bytes than the file holds (built with the standard
library's sqlite3, then by editing pages with reliability/sqlite_pages.py), and a way to run
`zarrdb` in a subprocess and learn its peak memory.

- `bomb_file`: a ~11 KB file in which three chunks share one overflow chain of two pages that
  loops back to its start, each declared 200 MB long: read through SQLite's blob API, the chain
  yields as many bytes as the value claims (a decompression bomb).
- `short_chain_file`: one chunk declared 1.5 GB long over a chain of two pages that ends: SQLite
  finds the end of the chain early.
- `misplaced_cell_file`: a row whose cell lies where no cell may (SQLite's cell_size_check).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from format import builders
from reliability import sqlite_pages

CLAIM = 200_000_000  # what each chunk of the bomb claims, in bytes
SHORT_CLAIM = 1_500_000_000  # what the chunk over a short chain claims
# A chunk this long is stored as 103 bytes on the b-tree page and two full overflow pages of a
# 1 KiB-page file (SQLite keeps its minimum on the page: the cells stay small).
CHUNK = 2134
CHUNKS = 3
ARRAY = "a"


def _entries() -> dict[str, bytes]:
    """A root group and a uint8 array of CHUNKS chunks of CHUNK bytes, every chunk stored."""
    array = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [CHUNKS * CHUNK],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
    }
    entries = {
        "zarr.json": json.dumps({"zarr_format": 3, "node_type": "group"}).encode(),
        f"{ARRAY}/zarr.json": json.dumps(array).encode(),
    }
    for i in range(CHUNKS):
        entries[f"{ARRAY}/c/{i}"] = bytes((7 * i + j) % 251 for j in range(CHUNK))
    return entries


def sound_file(path: Path) -> Path:
    """The file the crafted ones are made from: sound, 1 KiB pages, one leaf of rows."""
    return builders.make_store_file(path, entries=_entries(), page_size=1024)


def _zarr_root(path: Path) -> int:
    with closing(sqlite3.connect(path)) as con:
        return con.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'zarr'").fetchone()[0]


def bomb_file(path: Path) -> Path:
    """Every chunk claims CLAIM bytes of one looping chain of two pages."""
    sound_file(path)
    data = path.read_bytes()
    path.write_bytes(sqlite_pages.make_overflow_bomb(data, _zarr_root(path), CLAIM))
    return path


def short_chain_file(path: Path) -> Path:
    """The first chunk claims SHORT_CLAIM bytes of its own chain of two pages, which ends."""
    sound_file(path)
    data = bytearray(path.read_bytes())
    root = _zarr_root(path)
    cells = sqlite_pages.table_leaf_cells(bytes(data), root)
    first = next(i for i, cell in enumerate(cells) if cell.overflow)
    cells[first] = sqlite_pages.claim_blob(bytes(data), cells[first], SHORT_CLAIM, cells[first].overflow)
    sqlite_pages.write_table_leaf(data, root, cells)
    path.write_bytes(bytes(data))
    return path


def misplaced_cell_file(path: Path) -> Path:
    """The first row's cell pointer aims at the start of its page (into the page header, before
    the cells may start): read as it stands, the header's bytes make a row of rowid 0 and no
    key, and the key index's "zarr.json" finds no row."""
    sound_file(path)
    data = bytearray(path.read_bytes())
    start = (_zarr_root(path) - 1) * 1024
    data[start + 8 : start + 10] = (0).to_bytes(2, "big")
    path.write_bytes(bytes(data))
    return path


def tree_bytes(path: Path) -> int:
    """Bytes of the files at or below `path` (0 if there is nothing)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass
class Measured:
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int  # bytes


# `zarrdb ARGS...` that writes, as it exits, its peak resident memory (VmHWM, which starts
# afresh at exec; the rusage of a child would count the forking parent's pages too) to the
# file named by its first argument.
_MEASURED_MAIN = """
import atexit, sys
def peak(path=sys.argv[1]):
    with open("/proc/self/status") as f:
        kib = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(path, "w") as f:
        f.write(kib)
atexit.register(peak)
sys.argv = ["zarrdb", *sys.argv[2:]]
from zarrdb.cli import main
sys.exit(main())
"""


def run_measured(*args: object, timeout: float = 60) -> Measured:
    """`zarrdb ARGS...` in a new process (Linux), with its peak resident memory; killed after
    `timeout` seconds (then the test fails: a hang)."""
    with tempfile.TemporaryDirectory(prefix="zarrdb-peak-") as folder:
        report = Path(folder, "peak")
        try:
            out = subprocess.run(
                [sys.executable, "-c", _MEASURED_MAIN, report, *map(str, args)],
                capture_output=True, text=True, timeout=timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise AssertionError(f"zarrdb {args} ran past {timeout} s") from None
        peak = int(report.read_text()) * 1024
    return Measured(out.returncode, out.stdout, out.stderr, peak)
