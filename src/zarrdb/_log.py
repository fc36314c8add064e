"""What zarrdb tells the `logging` module: the logger "zarrdb" and its children.

    zarrdb.writer  the journal switching to WAL (INFO), a checkpoint that failed (WARNING)
    zarrdb.locks   waits for another connection's lock (DEBUG)
    zarrdb.remote  a failed remote request, and read-ahead asked for again (INFO)

Warnings (the `warnings` module) stay for what the user must act on. The engine's writer thread
never holds the GIL, so it only counts what happens; `WriterEvents.report` logs the counts from
Python once a commit has settled and when the store closes.
"""

from __future__ import annotations

import logging
from typing import Any

from zarrdb import errors

logger = logging.getLogger("zarrdb")
# A library leaves output to the application: without a handler configured, nothing is printed
# (logging's last-resort handler would print warnings to stderr).
logger.addHandler(logging.NullHandler())
writer_logger = logger.getChild("writer")
locks_logger = logger.getChild("locks")
remote_logger = logger.getChild("remote")


def lock_waits(path: str, waits: int, seconds: float) -> None:
    """A connection to `path` waited `waits` times for another one's lock, `seconds` in all."""
    if locks_logger.isEnabledFor(logging.DEBUG):
        locks_logger.debug(
            "waited %.3f s for another connection's lock on %r (%d wait%s)",
            seconds,
            path,
            waits,
            "" if waits == 1 else "s",
        )


def _code_name(rc: int) -> str:
    """The name of the exception SQLite's result code `rc` raises, for a message."""
    return type(errors.sqlite_error(rc, rc, "")).__name__


class WriterEvents:
    """What the writer thread of a store has recorded and Python has not logged yet."""

    __slots__ = ("checkpoint_failures", "db", "in_wal", "mark", "path", "writer")

    def __init__(self, writer: Any, db: Any, path: str) -> None:
        self.writer = writer
        self.db = db
        self.path = path
        self.in_wal: bool = writer.in_wal
        self.checkpoint_failures: int = writer.checkpoint_failures[0]
        # writer.events as last reported: a write reports only when it has grown.
        self.mark: int = -1

    def report(self) -> None:
        """Log what happened since the last report (the counters are read without the writer's
        lock: a count the writer is changing now is logged at the next report)."""
        writer = self.writer
        self.mark = writer.events  # first: what comes during this report is for the next one
        if writer.in_wal and not self.in_wal:
            self.in_wal = True
            writer_logger.info(
                "%r switched from its rollback journal to WAL after a run of small commits "
                "(journal='auto'); closing the store returns it to one file",
                self.path,
            )
        failures = writer.checkpoint_failures
        if failures[0] != self.checkpoint_failures:
            new, self.checkpoint_failures = failures[0] - self.checkpoint_failures, failures[0]
            writer_logger.warning(
                "%d checkpoint%s of %r failed (%s, SQLite code %d); the write-ahead log holds "
                "%d pages, %d of them copied into the file, and grows until one succeeds",
                new,
                "" if new == 1 else "s",
                self.path,
                _code_name(failures[1]),
                failures[1],
                failures[2],
                failures[3],
            )
        self.db.note_lock_waits()
