"""Ctrl-C while zarr writes an array (issue 36, defect 6).

`arr[:] = data` runs on zarr's event-loop thread, a daemon thread that goes on writing after
KeyboardInterrupt has ended the main thread (chunks without a compressor are encoded on that
thread itself, so nothing stops it when the interpreter's worker threads shut down). The store's exit hook then closed the file without
the store's lock while that thread reopened it: two write connections at once, the last one
never closed, and the file left in WAL mode or with a `-journal` beside it. At exit the store
closes for good, under its lock: what comes later fails with ClosedError, and one file in
DELETE mode remains.

A child process writes; the test sends SIGINT once the file has grown (the write is under way)
and checks what is left, a few times over.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import child_env, run_child

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="needs SIGINT")

DEADLINE = 60  # seconds for one run; a hang at exit fails instead of waiting for CI's limit
# The file grew by this much since the array was created: zarr's thread is writing chunks.
STARTED_BYTES = 2 * 1024 * 1024

_CHILD = r"""
import faulthandler, sys
import numpy as np
import zarr
from zarrdb import SQLiteStore

faulthandler.dump_traceback_later(50, exit=True)
store = SQLiteStore(sys.argv[1])
arr = zarr.create_array(store, shape=(2048, 4096), chunks=(32, 32), dtype="f4", compressors=None)
data = np.random.default_rng(0).random((2048, 4096), dtype="f4")
print("writing", flush=True)
arr[:] = data
print("finished", flush=True)
"""


def _interrupted_write(path: Path) -> str:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "writing"
        deadline = time.monotonic() + DEADLINE
        created = path.stat().st_size
        while path.stat().st_size < created + STARTED_BYTES:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.002)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "finished" not in out, "the write ended before the signal: nothing was tested"
    return err


def test_ctrl_c_during_an_array_write_leaves_one_closed_file(tmp_path: Path) -> None:
    for run in range(3):
        path = tmp_path / f"interrupted-{run}.zarrdb"
        err = _interrupted_write(path)
        assert "KeyboardInterrupt" in err, err
        assert sorted(os.listdir(tmp_path)) == sorted(
            f"interrupted-{i}.zarrdb" for i in range(run + 1)
        ), (run, err)
        header = path.read_bytes()[:100]
        assert (header[18], header[19]) == (1, 1), (run, err)  # DELETE mode, not WAL
        con = sqlite3.connect(path)
        try:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
            assert con.execute("SELECT count(*) FROM zarr").fetchone()[0] > 0
        finally:
            con.close()


_LATE_CHILD = r"""
import atexit, sys

def late():
    try:
        store.set_sync("late", buf(b"l"))
        print("late: written", flush=True)
    except Exception as exc:
        print("late:", type(exc).__name__, flush=True)

atexit.register(late)  # registered before zarrdb's own handler: runs after it
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore

buf = cpu.Buffer.from_bytes
store = SQLiteStore(sys.argv[1], journal="wal")
store.set_sync("k", buf(b"v"))
"""


def test_a_write_after_the_exit_handler_is_refused(tmp_path: Path) -> None:
    """Once the program's exit handlers have closed the stores, a write (here from a later exit
    handler; zarr's event-loop thread in real life) raises ClosedError instead of opening the
    file again with nobody left to close it."""
    path = tmp_path / "late.zarrdb"
    proc = run_child(_LATE_CHILD, str(path), timeout=DEADLINE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "late: ClosedError", (proc.stdout, proc.stderr)
    assert os.listdir(tmp_path) == ["late.zarrdb"]
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert [k for (k,) in con.execute("SELECT k FROM zarr")] == ["k"]
    finally:
        con.close()
