"""Independent checks of a SQLiteStore file with the standard-library sqlite3 (no zarrdb here).

zarrdb carries its own SQLite library. Two SQLite libraries in one process do not share POSIX
locks, and closing any file descriptor of a file drops every lock this process holds on it, so
the in-process helpers here (`connect_ro`, `header`, `file_state`, ...) must only be used on a
file no zarrdb store has open. While a store is open, `run_python` looks at the file from a
child process instead.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path

from .builders import ALLOWED_METADATA_KEYS, APPLICATION_ID, REQUIRED_METADATA

SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")
# RFC 3339 date-time in UTC with an upper-case T and Z (fractional seconds optional).
RFC3339_UTC = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?Z$"
)


def connect_ro(path: str | Path) -> sqlite3.Connection:
    """A read-only stdlib connection (opens nothing else, changes nothing)."""
    return sqlite3.connect(Path(path).as_uri() + "?mode=ro", uri=True, isolation_level=None)


def query(path: str | Path, sql: str, params=()) -> list[tuple]:
    with closing(connect_ro(path)) as con:
        return con.execute(sql, params).fetchall()


def header(path: str | Path) -> bytes:
    """The 100-byte SQLite database header."""
    with open(path, "rb") as f:
        return f.read(100)


def header_application_id(path: str | Path) -> int:
    return int.from_bytes(header(path)[68:72], "big")


def sidecars(path: str | Path) -> list[str]:
    """The -wal/-shm/-journal files beside `path` (os.path.exists opens no descriptor)."""
    return [s for s in SIDECAR_SUFFIXES if os.path.exists(f"{path}{s}")]


def file_state(path: str | Path) -> tuple[bytes, int, int, list[str]]:
    """Everything a read must not change: bytes, mtime, size and the sidecar files."""
    st = os.stat(path)
    return Path(path).read_bytes(), st.st_mtime_ns, st.st_size, sidecars(path)


def metadata(path: str | Path) -> dict[str, str]:
    return dict(query(path, "SELECT k, v FROM zarr_sqlitestore_metadata"))


def zarr_rows(path: str | Path) -> dict[str, bytes]:
    return dict(query(path, "SELECT k, v FROM zarr"))


def parse_rfc3339_utc(text: str) -> datetime:
    """A modified_at value as an aware datetime; AssertionError unless RFC 3339 with T and Z."""
    match = RFC3339_UTC.match(text)
    assert match, f"modified_at {text!r} is not an RFC 3339 UTC timestamp with 'T' and 'Z'"
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7) or ".0"
    micro = int(round(float(fraction) * 1_000_000))
    return datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc).replace(
        microsecond=min(micro, 999_999)
    )


def assert_conforming(path: str | Path) -> dict[str, str]:
    """The closed file at `path` is a SQLiteStore 1.0 file as a writer must leave it: SQLite
    header, application id, exactly the two tables with NOT NULL TEXT/BLOB columns, the
    required metadata and no unknown keys written, blob values, valid text keys, no NULLs, a
    single file in DELETE mode, integrity ok. Returns the metadata."""
    head = header(path)
    assert head[:16] == b"SQLite format 3\x00", head[:16]
    assert int.from_bytes(head[68:72], "big") == APPLICATION_ID
    assert (head[18], head[19]) == (1, 1), "file header says WAL mode after close"
    assert sidecars(path) == []
    with closing(connect_ro(path)) as con:
        assert con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
        assert tables == {"zarr_sqlitestore_metadata", "zarr"}
        for table, vtype in (("zarr_sqlitestore_metadata", "TEXT"), ("zarr", "BLOB")):
            info = con.execute(f"PRAGMA table_info({table})").fetchall()
            cols = {r[1]: (r[2].upper(), r[3], r[5]) for r in info}
            assert cols == {"k": ("TEXT", 1, 1), "v": (vtype, 1, 0)}, (table, info)
        meta = dict(con.execute("SELECT k, v FROM zarr_sqlitestore_metadata"))
        for key, value in REQUIRED_METADATA.items():
            assert meta.get(key) == value, (key, meta)
        assert con.execute(
            "SELECT count(*) FROM zarr WHERE k IS NULL OR v IS NULL OR typeof(v) != 'blob' "
            "OR typeof(k) != 'text'"
        ).fetchone()[0] == 0
        for (key,) in con.execute("SELECT k FROM zarr"):
            assert valid_key(key), key
    if "modified_at" in meta:
        parse_rfc3339_utc(meta["modified_at"])
    return meta


def assert_only_allowed_metadata_written(before: dict[str, str], after: dict[str, str]) -> None:
    """A writer added no metadata record the spec does not describe."""
    added = set(after) - set(before)
    assert added <= ALLOWED_METADATA_KEYS, f"writer inserted unknown metadata keys {added}"


def valid_key(key: str) -> bool:
    """The spec's three key rules."""
    return not (key.startswith("/") or key.endswith("/") or "//" in key)


# --- child processes ------------------------------------------------------------------------------


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter (the same one as the tests) with `args` in sys.argv."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


_PEEK = """
import json, sqlite3, sys
from pathlib import Path
path = sys.argv[1]
con = sqlite3.connect(Path(path).as_uri() + "?mode=ro", uri=True, isolation_level=None,
                      timeout=10)
try:
    mode = con.execute("PRAGMA journal_mode").fetchone()[0]
    keys = [r[0] for r in con.execute("SELECT k FROM zarr ORDER BY k")]
finally:
    con.close()
with open(path, "rb") as f:
    head = f.read(100)
print(json.dumps({"journal_mode": mode, "keys": keys,
                  "write_version": head[18], "read_version": head[19]}))
"""


def peek_from_child(path: str | Path) -> dict:
    """Journal mode, keys and header version bytes of `path`, read by a stdlib connection in a
    child process (safe while a zarrdb store has the file open here)."""
    proc = run_python(_PEEK, str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
