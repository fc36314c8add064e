"""Ctrl-C and SIGTERM while a thread waits for the write connection (issue 24, defect 2).

The main thread of a child process waits for the write connection (to begin a transaction, to
read inside one, to rename) while the writer thread is busy with another thread's write that
waits behind a third process's lock. A signal arrives during that wait, at a known moment (an
interval timer, or another thread sending SIGTERM to the main thread); its exception is raised
as the wait returns. Whatever bytecode that is, the store must go on working: a later write
commits, close() returns and leaves one file. A wedged store hangs instead, so the child runs
under a watchdog (faulthandler) and a subprocess timeout.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import child_env

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer") or not hasattr(signal, "pthread_kill"),
    reason="needs POSIX signals",
)

# argv: path, what waits ("transaction" | "rename"), how the signal comes
# ("sigint-timer" | "sigterm-thread")
_CHILD = r"""
import faulthandler, os, signal, subprocess, sys, threading, time
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore

path, waits, how = sys.argv[1:4]
faulthandler.dump_traceback_later(20, exit=True)  # a wedged store: fail, do not hang
buf = cpu.Buffer.from_bytes

store = SQLiteStore(path, busy_timeout=30)
store.set_sync("dir/x", buf(b"x"))
holder = subprocess.Popen(
    [sys.executable, "-c",
     "import sqlite3, sys\n"
     "con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)\n"
     "con.execute('BEGIN IMMEDIATE')\n"
     "print('locked', flush=True)\n"
     "sys.stdin.readline()\n"
     "con.execute('COMMIT')\n", path],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert holder.stdout.readline().strip() == "locked"

# The writer thread takes this write and waits for the other process's lock.
busy = threading.Thread(target=store.set_sync, args=("busy", buf(b"b")))
busy.start()
time.sleep(0.3)

main = threading.get_ident()
if how == "sigint-timer":
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
else:  # zarrdb's own SIGTERM handler raises SystemExit
    threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGTERM)).start()

def release():
    time.sleep(0.8)  # the signal came while the main thread waited
    holder.stdin.write("\n")
    holder.stdin.flush()
threading.Thread(target=release).start()

caught = None
try:
    if waits == "transaction":
        with store.transaction():
            store.set_sync("inside", buf(b"i"))
    else:
        store.rename("dir", "renamed")
except (KeyboardInterrupt, SystemExit) as exc:
    caught = type(exc).__name__
print("caught", caught, flush=True)
busy.join()
store.set_sync("after", buf(b"a"))
print("wrote", flush=True)
store.close()
print("closed", flush=True)
holder.wait()
"""


@pytest.mark.parametrize("how", ["sigint-timer", "sigterm-thread"])
@pytest.mark.parametrize("waits", ["transaction", "rename"])
def test_signal_while_waiting_for_the_write_connection_leaves_the_store_working(
    tmp_path: Path, waits: str, how: str
) -> None:
    path = tmp_path / "signal.zarrdb"
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), waits, how],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    lines = proc.stdout.split("\n")
    expected = "KeyboardInterrupt" if how == "sigint-timer" else "SystemExit"
    assert f"caught {expected}" in lines, proc.stdout + proc.stderr
    assert "closed" in lines, (
        "after the signal the store was wedged: a later write or close() hung\n"
        + proc.stdout
        + proc.stderr
    )
    assert proc.returncode == 0, proc.stderr
    # One file, in DELETE mode, holding the write that waited for the lock and the later one;
    # nothing of the interrupted transaction.
    assert not Path(str(path) + "-wal").exists()
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        keys = {k for (k,) in con.execute("SELECT k FROM zarr")}
    finally:
        con.close()
    assert {"busy", "after"} <= keys
    assert "inside" not in keys
