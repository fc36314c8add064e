"""A read-only open of a file whose writer was killed in the middle of a transaction
(issue 24).

The writer leaves a hot journal (a rollback journal still holding the pages it changed). A
read-only connection may not roll it back: where this process may write the file and its
folder, a read-only open rolls it back (as any connection that may write would) and reads;
where it may not, the error names the journal and what recovers it.

The writer is a child process killed with os._exit in the middle of a transaction whose pages
have spilled from its cache into the file (a small page cache), either zarrdb's own writer or
the standard library's sqlite3.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from zarr.core.buffer import cpu

from zarrdb import SQLiteStore, errors

_KILLED_WRITER = {
    "zarrdb": """
import os, sys
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore
store = SQLiteStore(sys.argv[1], journal="delete", cache_size=64)
with store.transaction():
    for i in range(40):
        store.set_sync(f"new/{i}", cpu.Buffer.from_bytes(os.urandom(200_000)))
    store.get_sync("zarr.json")  # every write above is in the file's pages or the journal
    os._exit(9)
""",
    "sqlite3": """
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA cache_size = 1")
con.execute("BEGIN IMMEDIATE")
for i in range(40):
    con.execute("INSERT INTO zarr(k, v) VALUES (?, ?)", (f"new/{i}", os.urandom(200_000)))
os._exit(9)
""",
}

GROUP = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'


def killed_mid_transaction(path: Path, writer: str) -> None:
    store = SQLiteStore(path, journal="delete")
    store.set_sync("zarr.json", cpu.Buffer.from_bytes(GROUP))
    store.close()
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER[writer], str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 9, proc.stderr
    assert os.path.getsize(f"{path}-journal") > 0, "no hot journal was left"


@pytest.mark.parametrize("writer", list(_KILLED_WRITER))
def test_read_only_open_rolls_back_a_hot_journal_where_writable(
    tmp_path: Path, writer: str
) -> None:
    path = tmp_path / "killed.zarrdb"
    killed_mid_transaction(path, writer)
    store = SQLiteStore(path, read_only=True)
    try:
        assert store.get_sync("zarr.json").to_bytes() == GROUP
        assert store.get_sync("new/0") is None  # the unfinished transaction is gone
    finally:
        store.close()
    assert not Path(f"{path}-journal").exists()
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [k for (k,) in con.execute("SELECT k FROM zarr")] == ["zarr.json"]
    finally:
        con.close()


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="root may write a file whatever its permissions",
)
def test_read_only_open_names_the_journal_where_not_writable(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "killed.zarrdb"
    killed_mid_transaction(path, "sqlite3")
    folder.chmod(0o555)
    try:
        with pytest.raises(errors.ReadOnlyError) as excinfo:
            SQLiteStore(path, read_only=True).ensure_open()
        message = str(excinfo.value)
        assert f"{path}-journal" in message and "zarrdb info" in message
        assert Path(f"{path}-journal").exists()  # left for a user who may write
    finally:
        folder.chmod(0o755)
