"""Explicit transactions: `with store.transaction():` and `async with store.transaction():`.

The store object is the session, as an SQLite connection is: while a transaction is open, every
write through the store joins it, whatever thread, event loop or zarr worker it comes from (the
writer decides that under its lock, see _writer.pxi). Its levels belong to the engine's writer
(`zarrdb._core.Level`): each is opened on one writer, that is on one open file of the store, and
keeps it. The rule of nesting (docs/guide/transactions.md):

- Levels of one transaction nest one inside the other, one open at each depth: a level is
  entered inside the innermost open level, from that level's code (its context: the code of
  its block, and tasks and threads started with that context). One entered beside an open
  level (a sibling task or thread) raises NestingError; entered from code outside the
  transaction, it waits for the whole transaction to end.
- A level ends before the levels around it. One that ends while a level inside it is still open
  is rolled back with it and raises NestingError (the outermost: the whole transaction); the
  inner level's code then gets NestingError at its next write and at its end.
- A level's code that its block does not wait for (a task or thread started in it) writes in
  it while it is open: such a write is queued only while the level is the innermost open one,
  and so goes with its commit or rollback. Once the block has ended (committed or rolled
  back), its writes and the levels it enters raise NestingError and nothing of them is written:
  the writer refuses them atomically with queueing (Submission.expect_level).
- A level outlived by its open file (close() from another thread, or a forked child continuing
  its parent's block) is over: every write of its code, every level entered in it and its end
  raise ClosedError; nothing reopens the store for them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Generic, Protocol, TypeVar

from zarrdb import _pause, errors
from zarrdb._core import Level, TransactionLevels, Writer
from zarrdb._waits import in_daemon_thread


class LevelWriter(Protocol):
    """What a transaction needs of a store's writes (zarrdb._submitting.Submitter, which imports
    this module: named here by what it does, not imported)."""

    writer: Writer

    def queue_bursts_here(self) -> None: ...

S = TypeVar("S")  # the session a Transaction gives when entered (the store)

# The levels the current context works inside, outermost first (of every store: each level
# knows its store by `owner`, the store's FileSpec.key).
INSIDE: ContextVar[tuple[Level, ...]] = ContextVar("zarrdb_transactions", default=())


def expected_level(writer: Writer) -> int:
    """The serial of the innermost transaction level of `writer` that the calling code is in
    (0: none), open or not: the writer queues its write only if that level is then the
    innermost open one (Submission.expect_level), and refuses it once the level has ended."""
    inside = INSIDE.get()
    if inside:
        for level in reversed(inside):
            if level.writer is writer:
                return int(level.serial)
    return 0


def _parent(level: Level) -> Level | None:
    """The innermost level of `level`'s writer the calling code works inside (None: a new
    transaction). One that has ended is given too: opening inside it raises NestingError."""
    for outer in reversed(INSIDE.get()):
        if outer.writer is level.writer:
            return outer
    return None


def _abandon(level: Level) -> None:
    """Roll back `level` if it was opened for a caller who is gone (interrupted by a signal as
    opening returned, or a cancelled task)."""
    level.unmark()
    inside = INSIDE.get()
    if any(entered is level for entered in inside):
        # Listed, but its mark was never kept: the signal's exception came as INSIDE.set
        # returned, before the assignment. Left listed, it would make the next block of this
        # context look like code of an ended level (NestingError).
        INSIDE.set(tuple(entered for entered in inside if entered is not level))
    if level.is_open:
        with contextlib.suppress(Exception):
            level.writer.end_level(level, False)


class Transaction(TransactionLevels, Generic[S]):
    """`with store.transaction():` and `async with store.transaction():` (see the module's
    docstring for the rules). The levels it entered, and its compiled `__exit__`, are the
    engine's (zarrdb._core.TransactionLevels)."""

    def __init__(self, store: S, submitter: Callable[[], LevelWriter], owner: object) -> None:
        self.store = store  # what entering gives
        # The store's writes; raises if the store may not write, or if the calling code is in
        # a level it can no longer write (check_inside).
        self.submitter = submitter
        self.owner = owner  # the store's key (FileSpec.key)

    def _level(self) -> Level:
        submitter = self.submitter()
        submitter.queue_bursts_here()  # the loop's writes before the block are not its own
        return Level(submitter.writer, self.owner)

    def _forget(self, level: Level) -> None:
        """Roll back `level` if it opened, and drop it (its __enter__ failed or was
        interrupted)."""
        _abandon(level)
        self.unlist_level(level)

    def __enter__(self) -> S:
        # Ctrl-C or SIGTERM may raise at any point where Python runs signal handlers: as a
        # function starts, and as a call into compiled code returns. From the moment the level
        # is listed until __enter__ returns, any of them rolls back what was opened. (A
        # `return` runs no handler, and the with statement protects the block from there.)
        level = self._level()
        _pause.point("txn.enter")
        try:
            self.list_level(level)
            level.writer.open_level(level, _parent(level))
            level.mark = INSIDE.set((*INSIDE.get(), level))
        except BaseException:
            self._forget(level)
            raise
        return self.store

    # __exit__ is TransactionLevels' (compiled: see there why).

    async def __aenter__(self) -> S:
        # In a thread of its own: waiting for another transaction, for the writes queued
        # before, or for another process's lock must not stop the event loop, which may be
        # running this transaction's own work. Not in asyncio's default executor, whose
        # workers the end of the program joins before the exit hook can close the store (and
        # so end the wait): see zarrdb._waits. The context's mark is set here, in the coroutine.
        level = self._level()
        _pause.point("txn.enter")
        self.list_level(level)
        path = level.writer.path
        opening = in_daemon_thread(
            level.writer.open_level, level, _parent(level),
            lost=lambda: _abandon(level),
            # It might wait for a level this very loop has to end.
            refused=lambda: errors.ClosedError(
                f"no transaction begins on {path!r}: the program is ending"
            ),
        )  # fmt: skip
        try:
            await asyncio.shield(opening)
            level.mark = INSIDE.set((*INSIDE.get(), level))
        except BaseException:
            self.unlist_level(level)
            if opening.done():
                _abandon(level)
            else:  # cancelled: the thread goes on; end what it opens
                opening.add_done_callback(lambda _: _abandon(level))
            raise
        return self.store

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        _pause.point("txn.exit")
        level = self.take_innermost()
        level.unmark()
        if level.is_open or level.undone:
            # Shielded: a task cancelled while the commit runs must not leave it half done.
            # (In a thread of its own, as __aenter__'s wait.)
            ending = in_daemon_thread(level.writer.end_level, level, exc_type is None)
            await asyncio.shield(ending)
