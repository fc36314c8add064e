"""What the store's transaction tests share: values as zarr's buffers, the keys a closed file
committed (read with the standard library's sqlite3), and calls whose outcome is recorded
rather than raised, in a thread of their own if need be."""

from __future__ import annotations

import contextvars
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from zarr.core.buffer import cpu


def buf(data: bytes) -> cpu.Buffer:
    return cpu.Buffer.from_bytes(data)


def committed(path: Path) -> set[str]:
    """The committed keys, read with the standard library's sqlite3 (the store is closed)."""
    con = sqlite3.connect(path)
    try:
        return {k for (k,) in con.execute("SELECT k FROM zarr")}
    finally:
        con.close()


def attempt(fn: Callable[[], object], outcome: dict[str, object], name: str) -> None:
    """Run `fn`, recording "done" or the exception it raised under `name`."""
    try:
        fn()
        outcome[name] = "done"
    except BaseException as exc:  # noqa: BLE001 - checked by the caller
        outcome[name] = exc


def in_context(
    fn: Callable[[], object], outcome: dict[str, object], name: str
) -> threading.Thread:
    """A daemon thread running `fn` in a copy of the caller's context (as a thread started
    inside a block with its context), recording its outcome as attempt() does."""
    ctx = contextvars.copy_context()
    thread = threading.Thread(
        target=attempt, args=(lambda: ctx.run(fn), outcome, name), daemon=True
    )
    thread.start()
    return thread
