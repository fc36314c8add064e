"""`zarrdb snapshot` while another process writes, and `zarrdb vacuum`."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys

from zarrdb import SQLiteStore

from .helpers import (
    assert_bad_input,
    assert_ok,
    fingerprint,
    journal_mode,
    run,
    run_json,
    sqlite_rows,
)

WRITER = r"""
import os, sys
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarrdb import SQLiteStore

path, stop = sys.argv[1], sys.argv[2]
buf = default_buffer_prototype().buffer
store = SQLiteStore(path)
zarr.create_array(store, name="log", shape=(64 * 512,), chunks=(512,), dtype="u8",
                  compressors=None, fill_value=0)
generation = 0
while not os.path.exists(stop):
    generation += 1
    value = buf.from_bytes(generation.to_bytes(8, "little") * 512)
    with store.transaction():  # every key of a generation, all at once
        for i in range(64):
            store.set_sync(f"log/c/{i}", value)
    if generation == 3:
        print("writing", flush=True)
store.close()
print(generation, flush=True)
"""


def test_snapshot_while_another_process_writes(tmp_path):
    live = tmp_path / "live.zarrdb"
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(live), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "writing"
        snaps = [tmp_path / f"snap{i}.zarrdb" for i in range(2)]
        for snap in snaps:
            proc = run("snapshot", live, snap)
            assert_ok(proc)
            assert "journal mode delete" in proc.stdout
        stop.touch()
        out, err = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err
    assert int(out.split()[-1]) > 3
    for snap in snaps:
        chunks = [v for k, v in sqlite_rows(snap) if k.startswith("log/c/")]
        assert len(chunks) == 64
        assert len(set(chunks)) == 1  # one generation: a consistent moment
        assert journal_mode(snap) == "delete"
        assert not (tmp_path / f"{snap.name}-wal").exists()
    assert_ok(run("check", snaps[-1]))
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_snapshot_destination_rules(sample_file, tmp_path):
    dest = tmp_path / "snap.zarrdb"
    result = run_json("snapshot", sample_file, dest)
    assert result["journal_mode"] == "delete"
    assert sqlite_rows(dest) == sqlite_rows(sample_file)
    before = fingerprint(dest)
    assert_bad_input(run("snapshot", sample_file, dest), str(dest), "--overwrite")
    assert fingerprint(dest) == before
    assert_ok(run("snapshot", sample_file, dest, "--overwrite"))
    assert sqlite_rows(dest) == sqlite_rows(sample_file)


def test_vacuum_gives_back_free_pages(sample_copy):
    """Free pages stay in a file without a pointer map (zarrdb's own files give them back by
    themselves; another program's may not): `zarrdb vacuum` gives them back."""
    con = sqlite3.connect(sample_copy)
    con.execute("PRAGMA auto_vacuum = NONE")
    con.execute("VACUUM")
    con.close()
    with SQLiteStore(sample_copy) as store:
        values = {f"bulk/{i}": bytes(8192) for i in range(200)}
        from zarr.core.buffer import default_buffer_prototype

        buf = default_buffer_prototype().buffer
        asyncio.run(store._set_many([(k, buf.from_bytes(v)) for k, v in values.items()]))
    with SQLiteStore(sample_copy) as store:
        asyncio.run(store.delete_dir("bulk"))
    rows = sqlite_rows(sample_copy)
    size = sample_copy.stat().st_size
    result = run_json("vacuum", sample_copy)
    assert result["size_before"] == size
    assert result["free_pages_before"] > 0 and result["free_pages_after"] == 0
    assert result["size_after"] == sample_copy.stat().st_size < size
    assert sqlite_rows(sample_copy) == rows
    assert journal_mode(sample_copy) == "delete"
    proc = run("vacuum", sample_copy)
    assert_ok(proc)
    assert "free pages 0 -> 0" in proc.stdout
