"""Writing keys in the engine's tests the way SQLiteStore writes them: through the writer thread
(`zarrdb._core.Writer`), the only path by which the engine writes keys.

Each call starts a writer on the given Database (the thread owns the connection meanwhile),
queues the operations as one submission, waits until they are committed, and stops the writer,
so that the Database is the caller's again for reading. `open_writer` keeps one writer for a
block, for tests that write many times or open explicit transactions (Writer.begin/end); reads
inside such a block go through `writer.holding()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from zarrdb._core import Database, Writer


def write(db: Database, ops: Iterable[tuple[str, str, Any]]) -> int:
    """Run `ops` ((kind, key, value), as the store queues them) as one submission: one
    transaction, all or nothing. Returns the rows written or deleted; raises the write's
    error."""
    ops = list(ops)
    writer = Writer(db)
    try:
        if not ops:
            return 0
        sub = writer.submit(ops)
        sub.wait()
        return sub.changes
    finally:
        writer.close()


@contextmanager
def open_writer(db: Database, **options: Any) -> Iterator[Writer]:
    """A writer on `db` for the block (stopped at its end, whatever happens)."""
    writer = Writer(db, **options)
    try:
        yield writer
    finally:
        writer.close()


def set(db: Database, key: str, value: Any) -> None:  # noqa: A001 - the store's verb
    write(db, [("set", key, value)])


def set_many(db: Database, pairs: Iterable[tuple[str, Any]]) -> None:
    write(db, [("set", key, value) for key, value in pairs])


def set_if_absent(db: Database, key: str, value: Any) -> bool:
    """True if it was written (the key did not exist)."""
    return write(db, [("set_if_absent", key, value)]) > 0


def delete(db: Database, key: str) -> bool:
    """True if the key existed."""
    return write(db, [("delete", key, None)]) > 0


def delete_many(db: Database, keys: Iterable[str]) -> int:
    """How many of the keys existed."""
    return write(db, [("delete", key, None) for key in keys])


def delete_prefix(db: Database, prefix: str) -> int:
    """Delete every key that starts with `prefix` ("" deletes all); returns the count."""
    return write(db, [("delete_prefix", prefix, None)])
