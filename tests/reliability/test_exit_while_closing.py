"""The program ends while another thread is closing a store (issue 36: the schedule explorer's
unclean file after SIGINT while an event loop queues a burst).

A store dropped in a daemon thread (an event loop's thread whose tasks held the last reference,
as the explorer's programs end) is closed there by its finalizer. The exit hook looked only for
stores still alive: it found none, the interpreter ended, and the daemon thread was stopped in
the middle of closing, leaving the journal beside the file. The exit hook now closes every open
file under its lock, so it waits for a close another thread has started.

Deterministic, with the pause points (test builds only): the dropping thread is held inside its
close until the exit hook has started.
"""

from __future__ import annotations

import pytest

from zarrdb import _core

from .helpers import header_journal_mode, run_child, sidecars

pytestmark = pytest.mark.skipif(
    not _core._PAUSE_POINTS, reason="the pause points are in test builds only (ZARRDB_TEST_VFS=1)"
)

_CHILD = r"""
import faulthandler, sys, threading
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore, _pause

faulthandler.dump_traceback_later(20, exit=True)
closing = threading.Event()  # the dropping thread is inside the store's close
exit_hook = threading.Event()  # the exit hook has started (a point of the fixed code only)


def hook(name):
    if name == "exit":
        exit_hook.set()
    elif name == "connections.close" and threading.current_thread().name == "dropper":
        closing.set()
        # Held here until the exit hook runs, at most a while: a close that takes time.
        exit_hook.wait(3)


store = SQLiteStore(sys.argv[1])
store.set_sync("a", cpu.Buffer.from_bytes(b"x"))  # the writer is open, its journal beside
holder = [store]
del store
_pause.arm(hook)


def drop():
    holder.clear()  # the last reference: the store's finalizer closes it in this thread


threading.Thread(target=drop, name="dropper", daemon=True).start()
if not closing.wait(10):
    sys.exit(3)  # the finalizer never ran in the dropping thread: nothing was tested
# The program ends here, with the close under way in the daemon thread.
"""


@pytest.mark.parametrize("run", range(2))
def test_exit_waits_for_a_close_under_way_in_another_thread(tmp_path, run):
    path = tmp_path / "closing.zarrdb"
    proc = run_child(_CHILD, str(path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sidecars(path) == [], proc.stderr[-3000:]
    assert header_journal_mode(path) == "delete"
