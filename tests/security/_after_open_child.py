"""The child process of test_after_open_fuzz.py: for each case in the JSON file named on its
command line it opens the case's file with a writing store and a read-only one, runs the case's
writes and reads, plants the case's sidecar between two of them (and removes it between two
later ones, or leaves it for the end), then closes both, reopens the file beside what was
planted, removes it, and reopens the file again to read everything back, write once more and
close. Before each step it prints {"n": N, "at": STEP}, so that the parent can say which one
crashed or hung; after each case one line of what broke the property.

    python -m security._after_open_child CASES SECONDS

Each step has SECONDS to finish (then faulthandler prints the stacks and ends the process,
which the parent reports as a hang). The child judges what it reads against the writes the
store acknowledged, and watches a planted file that is not the file's own with inotify: it
must never be opened, by any connection of the process (the writer's, its checkpointer's, the
reader's), and it must keep its owner and mode.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import json
import os
import struct
import sys
import warnings

from zarr.core.buffer import default_buffer_prototype

from reliability.helpers import sidecars
from zarrdb import SQLiteStore, _tunables, errors

# The checkpointer copies the log once it holds this many pages (256 by default, 256 KiB of
# the case's 1 KiB pages): a few writes of a case then open its connection, whose first read
# looks beside the file, and make it run again while the planted file is there.
_tunables.CHECKPOINT_PAGES = 4
# journal="auto" turns to WAL after 4 small commits rather than 8: within a case's writes, with
# as many plants before the switch as after it.
_tunables.AUTO_WAL_AFTER = 4
PLANTED = b"PLANTED"  # every value of the copy the planted logs come from starts so
IN_OPEN = 0x20
BUSY_TIMEOUT = 1.0
_libc = ctypes.CDLL(None, use_errno=True)


class Watch:
    """Whether anything opened `path` since the watch began (inotify reports the opens of
    every process, this one's included; nothing but the open is watched)."""

    def __init__(self, path: str) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or _libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), f"inotify on {path}")
        self.opened = False

    def check(self) -> bool:
        """Whether it was opened; read once (its removal, IN_IGNORED, is reported too)."""
        with contextlib.suppress(BlockingIOError):
            data = os.read(self.fd, 65536)
            while data:
                mask, length = struct.unpack_from("4xI4xI", data)
                self.opened = self.opened or bool(mask & IN_OPEN)
                data = data[16 + length :]
        return self.opened

    def close(self) -> None:
        os.close(self.fd)


def _value(data: bytes):
    return default_buffer_prototype().buffer.from_bytes(data)


class Case:
    def __init__(self, case: dict, seconds: float) -> None:
        self.case = case
        self.seconds = seconds
        self.path = case["path"]
        self.target = self.path + case["side"]
        self.acked = {k: v.encode() for k, v in case["initial"].items()}
        self.failed: dict[str, list[bytes]] = {}
        self.problems: list[str] = []
        self.outcomes: list[str] = []
        self.planted: tuple[int, int] | None = None  # (device, inode) of what was planted
        self.watch: Watch | None = None
        self.mode = 0
        self.changed = False
        self.present = False  # a planted file is beside the file
        self.writer: SQLiteStore | None = None
        self.reader: SQLiteStore | None = None

    # -- each step under its deadline ----------------------------------------------------------

    def step(self, at: str, action):
        """`action()`'s result, or None if it raised; a raise that is not zarrdb's, or one while
        nothing is planted beside the file, is a problem."""
        print(json.dumps({"n": self.case["n"], "at": at}), flush=True)
        faulthandler.dump_traceback_later(self.seconds, exit=True)
        try:
            return action()
        except errors.ZarrDBError as exc:
            said = f"{type(exc).__name__}: {str(exc)[:300]}"
            self.outcomes.append(f"{at}: {type(exc).__name__}")
            # Beside another's file a refusal names it (SidecarError), whatever SQLite made of
            # the refusal: a read-only store took a -journal it may not open for a crash's
            # (ReadOnlyError), and a writer opened beside one while a reader held the file
            # waited for it as for a lock (DatabaseLockedError). Beside the user's own junk any
            # of zarrdb's errors may be what SQLite says of it.
            if not self.present:
                self.problems.append(f"{at} raised with nothing planted beside the file: {said}")
            elif self.case["foreign"] and not isinstance(exc, errors.SidecarError):
                self.problems.append(f"{at} raised beside another's file, not naming it: {said}")
        except Exception as exc:  # noqa: BLE001 - anything else is what the property forbids
            self.problems.append(f"{at} raised {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            faulthandler.cancel_dump_traceback_later()
        return None

    # -- the planted file ----------------------------------------------------------------------

    def plant(self) -> None:
        c = self.case
        group = -1 if c["owner"] == os.geteuid() else c["owner"]  # (not root: its own only)
        try:
            if c["kind"] == "fifo":
                os.mkfifo(self.target, c["mode"])
            elif c["kind"] == "link":
                os.symlink(c["source"], self.target)
            else:
                fd = os.open(self.target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o600)  # fmt: skip
                try:
                    if c["source"]:
                        with open(c["source"], "rb") as f:
                            os.write(fd, f.read())
                    os.fchown(fd, c["owner"], group)
                    os.fchmod(fd, c["mode"])
                finally:
                    os.close(fd)
        except FileExistsError:
            # The store's own is there (its -wal and -shm in WAL mode, its -journal during a
            # commit): nobody else may replace it, in a sticky folder or any other.
            self.outcomes.append(f"not planted: {c['side']} is there")
            return
        if c["kind"] == "fifo":
            os.chown(self.target, c["owner"], group)
            os.chmod(self.target, c["mode"])
        st = os.lstat(self.target)
        self.planted, self.mode = (st.st_dev, st.st_ino), st.st_mode
        self.present = True
        self.outcomes.append(f"planted {c['side']}")
        if c["foreign"]:
            self.watch = Watch(c["source"] if c["kind"] == "link" else self.target)

    def still_planted(self) -> bool:
        try:
            st = os.lstat(self.target)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == self.planted

    def check_planted(self, when: str) -> None:
        """A planted file that is not the file's own was never opened, and is as planted."""
        if self.watch is None:
            return
        if not self.watch.opened and self.watch.check():
            self.problems.append(f"the planted {self.case['side']} was opened ({when})")
        if self.present and not self.still_planted():
            # SQLite deletes a -journal by name when it leaves the TRUNCATE journal mode (the
            # store's close), with nothing opened: a planted one goes too where the process may
            # delete it (root; in a sticky folder nobody else may).
            self.outcomes.append(f"the planted {self.case['side']} was deleted ({when})")
            self.present = False
        if self.present:
            st = os.lstat(self.target)
            changed = (st.st_uid, st.st_mode) != (self.case["owner"], self.mode)
            if changed and self.case["kind"] != "link" and not self.changed:
                self.changed = True
                self.problems.append(
                    f"the planted {self.case['side']} was changed ({when}): owner {st.st_uid}, "
                    f"mode {oct(st.st_mode)}"
                )

    def remove(self) -> None:
        """Takes away a planted file that is not the file's own (the user's own, SQLite may
        have taken as its own: it is left to the end)."""
        if self.case["foreign"] and self.still_planted():
            self.check_planted("before its removal")
            os.unlink(self.target)
            self.present = False

    # -- reads and writes ----------------------------------------------------------------------

    def write(self, at: str, key: str, data: bytes) -> None:
        assert self.writer is not None
        done = self.step(at, lambda: self.writer.set_sync(key, _value(data)) or True)
        if done:
            self.acked[key] = data
        else:
            self.failed.setdefault(key, []).append(data)

    def read(self, at: str, store: SQLiteStore | None, key: str) -> None:
        if store is None:
            return
        got = self.step(at, lambda: store.get_sync(key) or b"")
        if got is None:
            return
        got = got if isinstance(got, bytes) else got.to_bytes()
        want = self.acked.get(key, b"")
        if got != want:
            planted = " (the planted copy's)" if got.startswith(PLANTED) else ""
            kept = " (a write that raised)" if got in self.failed.get(key, []) else ""
            self.problems.append(
                f"{at}: {key} read as {got[:32]!r}{planted}{kept}, acknowledged {want[:32]!r}"
            )

    def read_all(self, at: str, store: SQLiteStore) -> None:
        for key in self.acked:
            self.read(f"{at}, {key}", store, key)

    # -- the case ------------------------------------------------------------------------------

    def run(self) -> None:
        c = self.case
        self.writer = self.step("open", lambda: self.opened(journal=c["journal"]))
        self.reader = self.step("open reader", lambda: self.opened(read_only=True))
        if self.writer is None:
            return
        for i, op in enumerate(c["ops"]):
            at = f"op {i} {op}"
            if op[0] == "plant":
                self.plant()
            elif op[0] == "remove":
                self.remove()
            elif op[0] == "write":
                data = f"{c['n']}:{i}:".encode().ljust(op[2], b"v")
                self.write(at, op[1], data)
            else:
                self.read(at, self.writer if op[2] == "writer" else self.reader, op[1])
            self.check_planted(at)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a close beside a refused -shm warns)
            if self.reader is not None:
                self.step("close reader", self.reader.close)
            self.step("close", self.writer.close)
        self.check_planted("after the close")
        if self.present:
            # Beside what was planted: refused, or read as what was acknowledged.
            self.reopened_read("reopened beside it")
            self.check_planted("after the reopen beside it")
        if self.planted is not None and self.still_planted():
            os.unlink(self.target)  # (the user's own too, if it is still what was planted)
        self.present = False
        self.recover()
        if self.watch is not None:
            self.watch.close()

    def opened(self, **options) -> SQLiteStore:
        # A connection that finds a -journal it may not open takes it for a crash's and waits
        # for the lock to roll it back while another store reads the file: a second, not five.
        store = SQLiteStore(self.path, busy_timeout=BUSY_TIMEOUT, **options)
        store.ensure_open()
        return store

    def reopened_read(self, at: str) -> None:
        store = self.step(f"{at}: open", lambda: self.opened(read_only=True))
        if store is not None:
            self.read_all(at, store)
            self.step(f"{at}: close", store.close)

    def recover(self) -> None:
        """Once the planted file is gone the file is whole again: every acknowledged write is
        there, a write works, and closing leaves the file alone."""
        store = self.step("reopen", lambda: self.opened(journal=self.case["journal"]))
        if store is None:
            return
        self.read_all("reopened", store)
        self.writer = store
        self.write("write after the removal", "after", b"after")
        self.step("close after the removal", store.close)
        left = sidecars(self.path)
        if left:
            self.problems.append(f"closing after the removal left {left} beside the file")
        self.reopened_read("read back")


def main() -> None:
    cases = json.load(open(sys.argv[1]))  # noqa: SIM115
    seconds = float(sys.argv[2])
    for case in cases:
        run = Case(case, seconds)
        try:
            run.run()
        except Exception as exc:  # noqa: BLE001
            run.problems.append(f"the case ended with {type(exc).__name__}: {exc}")
        print(json.dumps({"n": case["n"], "problems": run.problems,
                          "outcomes": run.outcomes}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
