"""`zarrdb.zarr2.upgrade` is all or nothing: a process killed at any moment of an upgrade
(checks, the transaction that moves the rows, the VACUUM after) leaves the file of zarr-python
2's SQLiteStore as it was, or a whole SQLiteStore 1.0 file with the same rows; never a mix.
Checked with Python's own sqlite3, which also rolls back what the killed process left."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import pytest

from zarrdb import conformance

CHILD = (
    "import sys\n"
    "from zarrdb.zarr2 import upgrade\n"
    "print('start', flush=True)\n"
    "upgrade(sys.argv[1])\n"
    "print('done', flush=True)\n"
)


def make_zarr2_file(path, chunks: int = 2500, size: int = 4096) -> dict[str, bytes]:
    """A file in zarr 2's SQLiteStore layout, large enough that an upgrade takes a while."""
    rows = {".zgroup": b'{"zarr_format": 2}'}
    rows["a/.zarray"] = (
        b'{"chunks": [1024], "compressor": null, "dtype": "|u1", "fill_value": 0, "filters": '
        b'null, "order": "C", "shape": [%d], "zarr_format": 2}' % (chunks * 1024)
    )
    for i in range(chunks):
        rows[f"a/{i}"] = os.urandom(size)
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE zarr(k TEXT PRIMARY KEY, v BLOB)")
        con.executemany("INSERT INTO zarr VALUES (?, ?)", rows.items())
    con.close()
    return rows


def state_after(path) -> tuple[str, dict[str, bytes]]:
    """('zarr2' or 'upgraded', the rows) once what a killed writer left is rolled back."""
    con = sqlite3.connect(path)  # may write: rolls back a hot journal
    try:
        tables = {n for (n,) in con.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
        rows = {k: bytes(v) for k, v in con.execute("SELECT k, v FROM zarr")}
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        con.close()
    if tables == {"zarr"}:
        return "zarr2", rows
    assert tables == {"zarr", "zarr_sqlitestore_metadata"}, tables
    return "upgraded", rows


def test_an_upgrade_killed_at_any_moment_leaves_one_whole_state(tmp_path):
    path = tmp_path / "old.sqlite"
    original = make_zarr2_file(path)
    pristine = path.read_bytes()

    def attempt(delay: float | None) -> tuple[str, float]:
        path.write_bytes(pristine)
        for suffix in ("-journal", "-wal"):
            if os.path.exists(f"{path}{suffix}"):
                os.remove(f"{path}{suffix}")
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout.readline().strip() == "start"
        started = time.perf_counter()
        if delay is not None:
            time.sleep(delay)
            child.kill()
        else:
            assert child.stdout.readline().strip() == "done"
        elapsed = time.perf_counter() - started
        child.communicate(timeout=60)
        state, rows = state_after(path)
        assert rows == original, state  # every key and value, whichever state
        if state == "upgraded":
            report = conformance.check_file(path)
            assert [f.message for f in report.findings if f.level == "problem"] == []
        return state, elapsed

    state, whole = attempt(None)  # how long an upgrade takes here
    assert state == "upgraded"
    seen = set()
    for fraction in (0.1, 0.45, 0.85):
        seen.add(attempt(whole * fraction)[0])
    if len(seen) < 2:
        pytest.fail(f"every kill found the file {seen.pop()}: the kills missed the upgrade")
