"""Another process holding a file's write lock: a deterministic window for the tests of what
waits for that lock (nothing can commit until the holder lets go)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

# Holds BEGIN IMMEDIATE (or the mode given) on the file until a line arrives on stdin.
_HOLDER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
con.execute("BEGIN " + sys.argv[2])
print("locked", flush=True)
sys.stdin.readline()
con.execute("COMMIT")
con.close()
"""


class LockHolder:
    """Another process holding the file's write lock from construction until release();
    `exclusive`: an EXCLUSIVE lock (in a rollback journal nothing can even read the file)."""

    def __init__(self, path: Path | str, timeout: float = 30, exclusive: bool = False) -> None:
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(path), "EXCLUSIVE" if exclusive else "IMMEDIATE"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "locked"
        self._told = False  # let_go has run: once is enough (a timer's and release's may race)
        self._told_lock = threading.Lock()

    def let_go(self) -> None:
        """Lets the lock go (the holder commits its empty transaction and exits)."""
        with self._told_lock:
            if self._told:
                return
            self._told = True
            try:
                self.proc.stdin.write("\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass  # it ended already; release() waits for it and sees how

    def release(self) -> None:
        """Lets go and waits for the holder to exit."""
        self.let_go()
        self.proc.communicate(timeout=self.timeout)
