"""Ctrl-C and SIGTERM while a thread waits for the write connection (issue 24, defect 2).

Two ways in. The first delivers a real signal while the wait is under way (below). The second
is deterministic and needs no particular interpreter: it raises KeyboardInterrupt, one run at a
time, at each point of an operation where CPython runs signal handlers (as a Python function
starts, and as a call into compiled code returns), through a profile function, until the
operation runs through without one. CPython 3.14 calls a `with` statement's `__enter__` as a
plain call, so a compiled `__enter__` that takes the write connection returns into such a point
before the block is protected; older versions call it from inside the with statement's own
instruction. The profile function reaches exactly the points each version has.

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
else:  # the handler of zarrdb.exit_on_sigterm() raises SystemExit
    import zarrdb
    assert zarrdb.exit_on_sigterm()
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


# argv: path, operation ("rename" | "transaction" | "vacuum")
_EVERY_POINT_CHILD = r"""
import faulthandler, os, sys, threading
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore

path, operation = sys.argv[1:3]
faulthandler.dump_traceback_later(240, exit=True)  # a wedged store: fail, do not hang
buf = cpu.Buffer.from_bytes
store = SQLiteStore(path)
store.set_sync("a/x", buf(b"x"))
store.set_sync("t/x", buf(b"x"))
checker = SQLiteStore(path, read_only=True)  # another connection: sees only what is committed


def rename():
    if store.get_sync("a/x") is not None:
        return lambda: store.rename("a", "b")
    return lambda: store.rename("b", "a")


def transaction(i):
    def run():
        with store.transaction():
            store.set_sync(f"t/{i}", buf(b"t"))
            assert store.get_sync(f"t/{i}") is not None  # a read inside holds the connection
            with store.transaction():  # a savepoint
                store.set_sync(f"n/{i}", buf(b"n"))
            store.key_sizes("t/")
    return run


def interrupted(run, n):
    # Runs `run`, raising KeyboardInterrupt at the n-th point where a signal handler may run:
    # the start of a Python function, the return of a call into anything else (compiled code).
    # Returns where it was raised, or None if `run` has fewer points. sys.monitoring (3.12+)
    # sees every call; 3.11's profile function sees the returns of builtins only.
    me = threading.get_ident()
    count = 0
    where = None
    armed = False  # between start() and stop(), on this thread

    def hit(what, code):
        nonlocal count, where, armed
        if not armed or threading.get_ident() != me:
            return
        count += 1
        if count == n:
            armed = False
            name = getattr(code, "co_qualname", code.co_name)
            where = f"{what} (in {name}, {code.co_filename})"
            raise KeyboardInterrupt

    if hasattr(sys, "monitoring"):
        mon = sys.monitoring
        tool = next(i for i in range(6) if mon.get_tool(i) is None)
        mon.use_tool_id(tool, "interrupt at every point")
        mon.register_callback(tool, mon.events.CALL, lambda *args: None)
        mon.register_callback(tool, mon.events.PY_START,
                              lambda code, offset: hit("start", code))
        mon.register_callback(tool, mon.events.C_RETURN,
                              lambda code, offset, fn, arg0: hit(f"return from {fn!r}", code))

        def start():
            mon.set_events(tool, mon.events.PY_START | mon.events.CALL)  # with C_RETURN

        def stop():
            mon.set_events(tool, 0)
    else:
        def profile(frame, event, arg):
            if event == "call":
                hit("start", frame.f_code)
            elif event == "c_return":
                hit(f"return from {arg!r}", frame.f_code)

        def start():
            sys.setprofile(profile)

        def stop():
            sys.setprofile(None)
    try:
        start()
        armed = True
        run()
        armed = False
    except KeyboardInterrupt:
        if where is None:
            raise
    finally:
        armed = False
        stop()
        if hasattr(sys, "monitoring"):
            sys.monitoring.free_tool_id(tool)
    return where


n = 0
while True:
    n += 1
    if operation == "rename":
        run = rename()
    elif operation == "vacuum":
        run = store.vacuum
    else:
        run = transaction(n)
    where = interrupted(run, n)
    # The store goes on working: a write from another thread commits (it would hang if the
    # connection were never given back, or wait in a transaction left open for good).
    writer = threading.Thread(target=store.set_sync, args=(f"check/{n}", buf(b"c")), daemon=True)
    writer.start()
    writer.join(15)
    if writer.is_alive():
        print(f"wedged: a write hangs after KeyboardInterrupt at point {n}: {where}", flush=True)
        os._exit(3)
    if checker.get_sync(f"check/{n}") is None:
        print(f"a transaction stayed open after KeyboardInterrupt at point {n}: {where}",
              flush=True)
        os._exit(4)
    if where is None:
        break
print("points", n - 1, flush=True)
checker.close()
store.close()
print("closed", flush=True)
"""


@pytest.mark.parametrize("operation", ["rename", "transaction", "vacuum"])
def test_an_interrupt_at_every_point_where_a_signal_handler_runs_leaves_the_store_working(
    tmp_path: Path, operation: str
) -> None:
    path = tmp_path / "every.zarrdb"
    proc = subprocess.run(
        [sys.executable, "-c", _EVERY_POINT_CHILD, str(path), operation],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.split("\n")
    assert "closed" in lines, proc.stdout + proc.stderr
    points = int(next(line for line in lines if line.startswith("points ")).split()[1])
    assert points >= 5, proc.stdout  # the profile function did reach the operation
    assert not Path(str(path) + "-wal").exists()
