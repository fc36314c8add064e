"""The live stores, those of this process that have a file open: an upload refuses a file one
of them still has open, and a closing writer releases the idle read connections the others
hold on its file.
Imports nothing of zarrdb, so that every module may ask.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol, TypeVar


class LiveFile(Protocol):
    """What the registry needs to know of a store's open file (_open_file.OpenFile)."""

    store_path: str
    pid: int

    @property
    def closed(self) -> bool: ...

    def holds_local_file(self) -> bool: ...


F = TypeVar("F", bound=LiveFile)

# Every store's connections alive in this process.
_live: weakref.WeakSet[LiveFile] = weakref.WeakSet()


def register(conns: LiveFile) -> None:
    _live.add(conns)


def open_in_this_process(path: str) -> bool:
    """Whether a store of this process has the local file `path` open."""
    path = os.path.abspath(path)
    pid = os.getpid()
    return any(
        conns.store_path == path and conns.pid == pid and not conns.closed
        and conns.holds_local_file()
        for conns in list(_live)
    )  # fmt: skip


def others_on_the_same_file(conns: F) -> list[F]:
    """The other open connections of this process on `conns`' file (of the same kind)."""
    return [
        other
        for other in list(_live)
        if other is not conns and not other.closed and other.store_path == conns.store_path
        and other.pid == conns.pid and type(other) is type(conns)
    ]  # fmt: skip
