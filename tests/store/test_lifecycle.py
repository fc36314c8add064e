"""What a store leaves on disk on every path: creating a file (atomically), stores that are
never closed (garbage collection, interpreter exit), read-only use of a file in WAL mode,
space freed by deletes, and the message for a file nothing was written to.

Files are looked at from the outside: their header bytes, the sidecar files beside them, and
the standard-library sqlite3 in a child process (never in this process while a zarrdb store
may have the file open: two SQLite libraries in one process do not share their locks)."""

from __future__ import annotations

import asyncio
import gc
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.core.buffer import cpu

import zarrdb
from zarrdb import SQLiteStore, errors

SIDECARS = ("-wal", "-shm", "-journal")


def sidecars(path: Path) -> list[str]:
    return [s for s in SIDECARS if os.path.exists(f"{path}{s}")]


def header_mode(path: Path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(20)
    return head[18], head[19]  # 1, 1: rollback journal (DELETE); 2, 2: WAL


def rows_seen_by_stdlib(path: Path, sql: str) -> list:
    """Rows of `sql`, read by Python's sqlite3 in a child process (read-only, immutable: it
    sees the main file alone, as a copy of it would)."""
    code = textwrap.dedent(
        """
        import json, sqlite3, sys
        con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1", uri=True)
        rows = [list(r) for r in con.execute(sys.argv[2])]
        print(json.dumps(rows))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path), sql], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    import json

    return json.loads(proc.stdout)


_UNCLOSED = """
import sys
import numpy as np
import xarray as xr
from zarrdb import SQLiteStore

path = sys.argv[1]
ds = xr.Dataset({"t": (("x", "y"), np.arange(64 * 64, dtype="f4").reshape(64, 64))})
ds.to_zarr(SQLiteStore(path), mode="w", consolidated=False)           # never closed
back = xr.open_zarr(SQLiteStore(path), consolidated=False)            # never closed
assert back["t"].shape == (64, 64)
more = xr.Dataset({"t": (("x", "y"), np.full((16, 64), -1, dtype="f4"))})
more.to_zarr(SQLiteStore(path), append_dim="x", consolidated=False)   # never closed
print("written", flush=True)
"""


def test_unclosed_stores_leave_one_whole_file_at_exit(tmp_path):
    """Three stores on one file, none closed, then a normal exit: one file in DELETE mode with
    every write in it, the last append included (read from the main file alone)."""
    pytest.importorskip("xarray")
    path = tmp_path / "unclosed.zarrdb"
    proc = subprocess.run(
        [sys.executable, "-c", _UNCLOSED, str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "written", proc.stderr
    assert sidecars(path) == []
    assert header_mode(path) == (1, 1)
    [[shape]] = rows_seen_by_stdlib(
        path, "SELECT json_extract(CAST(v AS TEXT), '$.shape') FROM zarr WHERE k = 't/zarr.json'"
    )
    assert shape == "[80,64]"


_ENDING = """
import os, signal, sys, time
import zarr
import zarrdb
from zarrdb import SQLiteStore
path, how = sys.argv[1], sys.argv[2]
# A program run from a terminal turns Ctrl-C into KeyboardInterrupt; Python leaves SIGINT
# ignored instead when it inherits it ignored (a background job of a shell, as a CI runner's).
signal.signal(signal.SIGINT, signal.default_int_handler)
if how == "sigterm":
    assert zarrdb.exit_on_sigterm()
store = SQLiteStore(path, journal="wal")
# zarrdb sets no signal handler of its own: SIGTERM does what the program chose
assert (signal.getsignal(signal.SIGTERM) is signal.SIG_DFL) == (how != "sigterm")
zarr.create_array(store, name="a", shape=(100,), chunks=(10,), dtype="i4")[:] = 7
print("ready", flush=True)
if how == "exception":
    raise RuntimeError("an exception nobody catches")
# SIGTERM or Ctrl-C (SIGINT) comes meanwhile. Short sleeps: a signal the kernel hands to
# another thread (zarr's event loop, a codec thread) wakes no sleep of the main thread, whose
# handler then runs at the end of the sleep it is in.
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.05)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals")
@pytest.mark.parametrize("how", ["sigterm", "sigint", "exception"])
def test_process_ending_by_signal_or_exception_leaves_one_whole_file(tmp_path, how):
    """A program that never closes its store (in WAL mode, which leaves -wal/-shm files
    while open) ends by SIGTERM (with zarrdb.exit_on_sigterm()), by Ctrl-C, or by an exception
    nobody catches: one file in DELETE mode remains, with every write in it."""
    path = tmp_path / f"{how}.zarrdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", _ENDING, str(path), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    if how != "exception":
        proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    assert proc.returncode != -signal.SIGTERM, "SIGTERM ended it without the exit handlers"
    assert sidecars(path) == []
    assert header_mode(path) == (1, 1)
    assert rows_seen_by_stdlib(path, "SELECT count(*) FROM zarr WHERE k LIKE 'a/c/%'") == [[10]]


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals")
def test_sigterm_without_exit_on_sigterm_leaves_a_consistent_file_the_next_open_tidies(tmp_path):
    """Without zarrdb.exit_on_sigterm() SIGTERM ends the process at once, its exit handlers
    skipped: the file stays in WAL mode with its -wal and -shm files, every returned write in
    them; the next writable open recovers it and its close leaves one file in DELETE mode."""
    path = tmp_path / "default.zarrdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", _ENDING, str(path), "sigterm-default"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, err  # no handler: the default action
    assert header_mode(path) == (2, 2)
    assert "-wal" in sidecars(path)
    store = SQLiteStore(path)
    try:
        assert store.check() == []
        data = zarr.open_array(store, path="a", mode="r")[:]
        assert (data == 7).all() and data.shape == (100,)
    finally:
        store.close()
    assert sidecars(path) == []
    assert header_mode(path) == (1, 1)
    assert rows_seen_by_stdlib(path, "SELECT count(*) FROM zarr WHERE k LIKE 'a/c/%'") == [[10]]


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals")
def test_exit_on_sigterm_keeps_the_programs_own_choice():
    """exit_on_sigterm() changes nothing where the program has a SIGTERM handler or ignores
    SIGTERM; a second call once installed changes nothing either."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        for own in (signal.SIG_IGN, lambda signum, frame: None):
            signal.signal(signal.SIGTERM, own)
            assert zarrdb.exit_on_sigterm() is False
            assert signal.getsignal(signal.SIGTERM) is own
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert zarrdb.exit_on_sigterm() is True
        installed = signal.getsignal(signal.SIGTERM)
        assert callable(installed)
        assert zarrdb.exit_on_sigterm() is False
        assert signal.getsignal(signal.SIGTERM) is installed
    finally:
        signal.signal(signal.SIGTERM, before)


def test_garbage_collected_store_is_closed_like_close(tmp_path):
    path = tmp_path / "collected.zarrdb"
    store = SQLiteStore(path, journal="wal")
    zarr.create_array(store, name="a", shape=(100,), chunks=(10,), dtype="i4")[:] = 7
    assert header_mode(path) == (2, 2) and "-wal" in sidecars(path)
    del store
    gc.collect()
    assert sidecars(path) == []
    assert header_mode(path) == (1, 1)
    assert rows_seen_by_stdlib(path, "SELECT count(*) FROM zarr WHERE k LIKE 'a/c/%'") == [[10]]


_CREATOR = """
import sys
from pathlib import Path
from zarrdb import SQLiteStore
folder = Path(sys.argv[1])
print("started", flush=True)
for i in range(100000):
    store = SQLiteStore(folder / f"{i:05d}.zarrdb")
    store.ensure_open()
    store.close()
"""


def test_a_crash_while_creating_leaves_no_file_or_a_valid_one(tmp_path):
    """A process creating files one after another is killed at random moments: every file
    it left under a store's name opens read-only as a (valid, empty) SQLiteStore file."""
    rng = random.Random(1234)
    checked = 0
    for trial in range(6):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        proc = subprocess.Popen(
            [sys.executable, "-c", _CREATOR, str(folder)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "started"
        time.sleep(rng.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        for path in sorted(folder.glob("*.zarrdb")):
            store = SQLiteStore(path, read_only=True)
            try:
                assert asyncio.run(store.is_empty("")), path
            finally:
                store.close()
            checked += 1
    assert checked > 6  # the creator did get files made in the time it had


def test_reading_a_file_left_in_wal_mode_leaves_nothing_behind(tmp_path):
    """A file whose writer left it in WAL mode without its -wal/-shm files (a copy of the main
    file alone, say): a read-only store reads it and, once closed, leaves no sidecar it made;
    the file's bytes are unchanged."""
    path = tmp_path / "walmode.zarrdb"
    store = SQLiteStore(path, journal="wal")
    zarr.create_array(store, name="a", shape=(10,), chunks=(5,), dtype="i4")[:] = 3
    copy = tmp_path / "copy.zarrdb"
    store.backup(copy)  # a copy in DELETE mode ...
    store.close()
    raw = bytearray(copy.read_bytes())
    raw[18] = raw[19] = 2  # ... marked as WAL mode, as a writer that never closed leaves it
    copy.write_bytes(bytes(raw))
    reader = SQLiteStore(copy, read_only=True)
    assert zarr.open_array(reader, path="a", mode="r")[:].tolist() == [3] * 10
    reader.close()
    assert sidecars(copy) == []
    assert copy.read_bytes() == bytes(raw)


def test_deleting_an_array_gives_its_space_back(tmp_path):
    """Deleting a 16 MiB array (the first one written, so the pages of the other must move):
    the file shrinks back while the store is open, without a manual vacuum."""
    path = tmp_path / "deleted.zarrdb"
    data = np.random.default_rng(0).random((2048, 2048), dtype="f4")
    store = SQLiteStore(path)
    root = zarr.open_group(store, mode="w")
    for name in ("drop", "keep"):
        root.create_array(name, shape=data.shape, chunks=(256, 256), dtype="f4", compressors=None)[:] = data
    store.close()
    full = path.stat().st_size
    store = SQLiteStore(path)
    asyncio.run(store.delete_dir("drop"))
    deadline = time.monotonic() + 20
    while store.file_info()["free_bytes"] > 1 << 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.file_info()["free_bytes"] <= 1 << 20  # given back while open
    store.close()
    assert path.stat().st_size < full - data.nbytes * 0.9
    ro = SQLiteStore(path, read_only=True)
    np.testing.assert_array_equal(zarr.open_array(ro, path="keep", mode="r")[:], data)
    assert ro.check() == []
    ro.close()


def test_space_left_free_at_close_is_given_back_then(tmp_path):
    path = tmp_path / "closed-soon.zarrdb"
    store = SQLiteStore(path)
    values = [(f"d/{i}", cpu.Buffer.from_bytes(os.urandom(1 << 20))) for i in range(16)]
    asyncio.run(store.set_many(values))
    store.close()
    full = path.stat().st_size
    store = SQLiteStore(path)
    asyncio.run(store.delete_dir("d"))
    store.close()  # at once: the writer had no time of its own
    assert path.stat().st_size < full - 15 * (1 << 20)


def test_zarr_mode_r_on_an_empty_file_says_nothing_was_written(tmp_path):
    """A writable store on an empty file, opened by zarr with mode="r" (zarr reads through a
    read-only copy of the store): the error says the file is empty, not to open it for
    writing (it was)."""
    path = tmp_path / "empty.zarrdb"
    path.write_bytes(b"")
    store = SQLiteStore(path)
    with pytest.raises(errors.NotAZarrDBError) as excinfo:
        zarr.open_group(store, mode="r")
    message = str(excinfo.value)
    assert "nothing has been written" in message
    assert "open it for writing" not in message
    store.close()
