"""The shapes the schedule explorer's programs start from (test_schedule_explorer.py): where
the write path's parts meet, rare for independent steps to build, and where defects of the kind
found before were. Random steps follow each."""

from __future__ import annotations

import os

# Features left out of the programs (ZARRDB_EXPLORER_WITHOUT, see test_schedule_explorer.py).
WITHOUT = set(filter(None, os.environ.get("ZARRDB_EXPLORER_WITHOUT", "").split(",")))


class Shapes:
    """Mixed into ScheduleExplorer: `shape_<name>()` adds a shape to the program."""

    program: dict

    def add(self, caller: int, op: dict) -> dict:
        raise NotImplementedError

    def numbered(self, op: dict) -> dict:
        raise NotImplementedError

    def new_id(self) -> int:
        raise NotImplementedError

    def shape_free(self) -> None:
        """No shape: the steps alone."""

    def shape_siblings(self) -> None:
        """Two callers started in one block, each in a nested level of its own, one of them
        failing: the levels meet on the one stack of savepoints."""
        txn = self.add(0, {"op": "txn", "ok": True, "join": True, "body": [], "children": []})
        bodies = []
        for key, ok in ((0, True), (1, False)):
            write = self.numbered({"op": "set", "key": key, "size": "small", "bad": False})
            inner = self.numbered({"op": "txn", "ok": ok, "join": True, "body": [write],
                                   "children": []})  # fmt: skip
            txn["children"].append([inner])
            # Where the level's code starts (the child's name, as _schedule_child makes it)
            bodies.append(f"a0t{txn['id']}c{len(bodies)}t{inner['id']}.0")
        # The first writes only once the second has entered its level: both are open at once.
        self.program["gates"].append([bodies[0], 1, bodies[1]])

    def shape_outer_first(self) -> None:
        """The outer block ends while a nested level, entered by a caller it started and does
        not wait for, is still open; that level then fails, and the outer caller writes on."""
        write = {"op": "set", "size": "small", "bad": False}
        txn = self.add(0, {"op": "txn", "ok": True, "join": False, "children": [],
                           "body": [self.numbered({**write, "key": 0})]})  # fmt: skip
        inner = self.numbered({"op": "txn", "ok": False, "join": True, "children": [],
                               "body": [self.numbered({**write, "key": 1})]})  # fmt: skip
        txn["children"].append([inner])
        self.add(0, {**write, "key": 1})
        # The outer block ends once the nested level is open; that level writes only once the
        # outer block is ending.
        body = f"a0t{txn['id']}c0t{inner['id']}.0"
        txn["body"].append(self.numbered({"op": "wait", "until": body}))
        self.program["gates"].append([body, 1, "txn.end"])

    def shape_deferred(self) -> None:
        """A transaction waits for the lock another process holds while another thread queues
        a large value (committed before the transaction opens; it used to wait for its end,
        and still filled the queue); then the block's own large value must find room."""
        if "full_queue" in WITHOUT or "lock" in WITHOUT:
            return
        self.program["queue_bytes"] = 96 * 1024
        self.program["lock_ms"] = 300
        for actor in self.program["actors"][:2]:
            actor["kind"] = "thread"
        large = {"op": "set", "size": "large", "bad": False}
        self.add(0, {"op": "txn", "ok": True, "join": True, "children": [],
                     "body": [self.numbered({**large, "key": 0})]})  # fmt: skip
        self.add(1, {"op": "wait", "until": "txn.begin"})
        self.add(1, {**large, "key": 1})

    def shape_began(self) -> None:
        """A transaction waits for the lock another process holds; meanwhile a task fires a
        write of a key, and once the block's code runs fires another write of that key, which
        must be the one stored (the first is committed before the transaction opens; it was
        left for after the transaction's end, and landed after the second, which had joined
        the transaction)."""
        if "lock" in WITHOUT or "txn" in WITHOUT or "fire" in WITHOUT:
            return
        self.program["lock_ms"] = 150  # (shorter than a wait's timeout, GATE_WAIT)
        for actor in self.program["actors"][:2]:
            actor["kind"] = "task"
        small = {"size": "small", "bad": False}
        txn = self.add(0, {"op": "txn", "ok": True, "join": True, "children": [],
                           "body": [self.numbered({"op": "set", "key": 0, **small})]})  # fmt: skip
        self.add(1, {"op": "wait", "until": "txn.begin"})
        self.add(1, {"op": "fire", "key": 1, **small})
        self.add(1, {"op": "wait", "until": f"a0t{txn['id']}.0"})  # the block's code runs
        self.add(1, {"op": "fire", "key": 1, **small})

    def shape_exit(self) -> None:
        """Ctrl-C while a task writes large values one after the other: the program ends, the
        exit hook closes the store while the event loop's thread goes on writing."""
        if "signal" in WITHOUT:
            return
        self.program["actors"][0]["kind"] = "task"
        for i in range(6):
            self.add(0, {"op": "set", "key": i % 2, "size": "large", "bad": False})
        self.program["signal"] = ["writer.committed", 1]

    def shape_backlog_sync(self, last: str = "set_sync") -> None:
        """On the event loop: a large value fills the queue (another process holds the lock),
        a small write's burst waits for room, then a synchronous write of the same key on the
        loop's thread, which must come after it."""
        if "full_queue" in WITHOUT or "lock" in WITHOUT:
            return
        self.program["queue_bytes"] = 96 * 1024
        self.program["lock_ms"] = 300
        self.program["actors"][0]["kind"] = "task"
        self.add(0, {"op": "fire", "key": 1, "size": "large", "bad": False})
        self.add(0, {"op": "fire", "key": 0, "size": "small", "bad": False})
        if last == "close":
            self.add(0, {"op": "close"})
        else:
            self.add(0, {"op": "set_sync", "key": 0, "size": "small", "bad": False})

    def shape_backlog_close(self) -> None:
        """As backlog_sync, with a close() on the loop's thread instead: it queues the burst
        waiting for room first."""
        self.shape_backlog_sync("close")

    def shape_fork(self) -> None:
        """A child forked while another thread of the parent closes the store, holding the
        store's own lock: the child writes through the store it inherited."""
        if "fork" in WITHOUT or "close" in WITHOUT:
            return
        self.add(0, {"op": "set", "key": 0, "size": "small", "bad": False})
        self.add(0, {"op": "close"})
        self.program["fork_at"] = ["connections.close", 1, 0, self.new_id()]

    def shape_switch(self) -> None:
        """A store in WAL mode closes, and another process opens the file and writes while the
        close switches it out of WAL mode (where SQLite's switch, outside exclusive locking
        mode, let its exclusive lock go between deleting the log and writing the header)."""
        if "opener" in WITHOUT:
            return
        self.program["journal"] = "wal"
        self.add(0, {"op": "set", "key": 0, "size": "large", "bad": False})
        if "close" not in WITHOUT:
            self.add(0, {"op": "close"})
        self.program["opener_at"] = ["vfs.relock_after_wal", 1, 0, self.new_id()]

    def shape_reopen(self) -> None:
        """Another process opens the file in WAL mode and writes as the store closes, and
        keeps it open; a write after the close opens the store again, and the other process
        closes (the last out: leaving WAL mode, its log deleted) once that open has sized the
        files beside the database, before SQLite has read the header."""
        if "opener" in WITHOUT or "close" in WITHOUT:
            return
        self.program["journal"] = "wal"
        self.add(0, {"op": "set", "key": 0, "size": "large", "bad": False})
        self.add(0, {"op": "close"})
        self.add(0, {"op": "set", "key": 1, "size": "small", "bad": False})
        self.program["opener_at"] = ["close", 1, 0, self.new_id(), "open.beside", 1]
