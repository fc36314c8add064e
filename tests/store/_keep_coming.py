"""Writes that keep coming while a transaction begins: at each of the begin's tries to find
nothing queued once it has the file's lock (the pause point `txn.retry`, test builds only),
another thread queues a write before the begin goes on. After its tries the transaction opens
with that last write still queued, which then waits for the transaction's end: the window the
tests of such writes need."""

from __future__ import annotations

import threading
import time

from store.helpers import buf
from zarrdb import SQLiteStore, _pause

WAIT = 10.0  # seconds for a write to be queued (it is at once, unless something is wrong)


class KeepComing:
    """Armed as a context manager; `keys` are the writes made, in order (the last one is the
    one left for after the transaction's end), `outcomes` what each one's call did."""

    def __init__(self, store: SQLiteStore, writer: object, prefix: str = "again") -> None:
        self.store = store
        self.writer = writer
        self.prefix = prefix
        self.keys: list[str] = []
        self.threads: list[threading.Thread] = []
        self.outcomes: dict[str, object] = {}

    def _hook(self, name: str) -> None:
        if name != "txn.retry":
            return
        key = f"{self.prefix}/{len(self.keys)}"
        self.keys.append(key)
        thread = threading.Thread(target=self._write, args=(key,), daemon=True)
        thread.start()
        self.threads.append(thread)
        deadline = time.monotonic() + WAIT
        while self.writer.stats()["queued_bytes"] == 0:  # (the begin has just drained it)
            assert time.monotonic() < deadline, f"{key} was never queued"
            time.sleep(0.002)

    def _write(self, key: str) -> None:
        try:
            self.store.set_sync(key, buf(b"again"))
            self.outcomes[key] = "committed"
        except BaseException as exc:  # noqa: BLE001 - the test checks it
            self.outcomes[key] = exc

    def join(self, timeout: float) -> None:
        for thread in self.threads:
            thread.join(timeout)

    def __enter__(self) -> KeepComing:
        _pause.arm(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        _pause.disarm()
