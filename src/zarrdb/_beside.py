"""What is checked of a local file before SQLite opens it: the files SQLite keeps beside it, and
its size against its header.

SQLite reads a `-wal`, `-shm` or `-journal` beside a database as part of it: the pages of a
`-wal` replace the file's (even when the header says the file is in rollback mode) and the
first write copies them in; a hot `-journal` is copied back over the file. Anyone who may
create files in the folder (a sticky /tmp, a shared project folder) can put one there. So each
that exists must be the file's own, or nothing is opened:

- a regular file (not a link, a pipe or a folder),
- owned by the file's owner (by this process's user while the file does not exist yet; SQLite
  run by root gives the files it makes the database's owner),
- writable by no one the file is not writable by: not by others unless the file is, not by its
  group unless the file is (SQLite makes them with the file's permissions),
- a `-wal` that holds anything only beside a file whose header says WAL mode (byte 19, the
  read version, is 2; SQLite reads a log beside any other version it opens, 0 and 1 as well,
  and whatever byte 18 says): no writer leaves a log behind a file in rollback mode (leaving
  WAL mode removes the log before it rewrites the header).

And, in rollback mode with no journal or log in use, the header's page count times its page
size must be the file's size (fstat), which is then what SQLite bounds every read by. In any
mode, the file may not be mostly holes (a sparse file: its length a claim, not what it holds). In WAL
mode the file's header lags the log, and while a writer commits the file grows before its
journal empties; neither is checked.

SQLite looks for a -wal and a hot -journal again at each read transaction of a file in
rollback mode: the engine's connections to local files use a VFS that applies the first three
rules again as SQLite opens either ("zarrdb-guarded", _sqlite_amalgamation.h).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import NamedTuple

from zarrdb import _format, errors

SIDECARS = ("-wal", "-shm", "-journal")
_HEADER = 100


class Found(NamedTuple):
    """The path SQLite names the sidecars after (links resolved), and the size of each
    sidecar there, by suffix, with how much of it holds data (not holes)."""

    real: str
    sizes: dict[str, int]
    held: dict[str, int]


def check(path: str, suffixes: tuple[str, ...] = SIDECARS) -> Found:
    """SidecarError if a file beside `path` (those of `suffixes`) could put other pages into
    it, by what the file system says of each (nothing is opened); what was found."""
    real = os.path.realpath(path)  # SQLite names the sidecars after the file a link points to
    # (None: not there yet: SQLite creates it, and a planted sidecar is still refused)
    st = _stat_or_none(real)
    found = Found(real, {}, {})
    for suffix in suffixes:
        _look(path, found, suffix, st)
    return found


def _look(path: str, found: Found, suffix: str, st: os.stat_result | None) -> int:
    """The size of the sidecar `suffix` beside the file (0 if there is none), noted in `found`;
    SidecarError if it is not the file's own (`st`: the file's own stat, None if missing)."""
    side = found.real + suffix
    try:
        there = os.lstat(side)
    except OSError:
        found.sizes.pop(suffix, None)
        found.held.pop(suffix, None)
        return 0
    why = _problem(st, there)
    if why:
        raise _refusal(path, side, why)
    found.sizes[suffix] = there.st_size
    found.held[suffix] = min(there.st_size, there.st_blocks * 512)
    return there.st_size


def check_header(
    path: str,
    found: Found,
    read: Callable[[], tuple[bytes, int] | None],
    data: Callable[[int], int] | None = None,
) -> None:
    """The checks that need the file's header, given what `check` found beside it, `read()`,
    which gives the header's bytes and the file's size, and `data(n)`, how many of the first
    `n` bytes hold data rather than holes. Read through the handle SQLite has open (Database)
    or before any connection of this process has the file open: closing another descriptor of
    the file would drop every POSIX lock the process holds on it. SidecarError for a log beside
    a file in rollback mode; DatabaseCorruptError if the size is not the header's, or the
    file is mostly holes."""
    first = read()
    head = _database_head(first)
    if first is None or head is None:
        return
    if data is not None:
        check_holes(path, found, first, data)
    if not _rollback_mode(head):
        return  # WAL mode (or a format SQLite refuses itself)
    if found.sizes.get("-wal", 0) > 0:
        now = _log_went(path, found, read)
        if now is None:
            raise _refusal(
                path,
                found.real + "-wal",
                "is a write-ahead log that is not empty, while the file's header says it is not "
                "in WAL mode: no writer of this file leaves one",
            )
        if now == "wal":
            return  # in WAL mode again: the file's header lags its log
    if not found.sizes.get("-journal"):
        _check_size(path, found.real + "-journal", first, read)


def _database_head(got: tuple[bytes, int] | None) -> bytes | None:
    """The header's bytes of what `read()` gave, if they are a database's (else SQLite says
    what the file is itself)."""
    if got is None or len(got[0]) < _HEADER or not got[0].startswith(_format.SQLITE_HEADER):
        return None
    return got[0]


def _rollback_mode(head: bytes) -> bool:
    """Whether SQLite opens a file with this header in rollback mode: its read version (byte
    19) 0 or 1, whatever its write version (byte 18; above 2 the file is only read). It is in
    WAL mode at 2 and refused above, and reads a log beside it in either mode."""
    return head[19] < 2


def _log_went(
    path: str, found: Found, read: Callable[[], tuple[bytes, int] | None]
) -> str | None:
    """Whether the `-wal` that `check` found holding something, beside a header read later
    that says rollback mode, was another process's log that has gone since: a writer leaving
    WAL mode deletes its log and then rewrites the header, so a log sized while the file was
    in WAL mode and a header read after the switch disagree without anything being wrong.
    The log is looked at again, then the header: a planted log stays where it is beside a
    header that stays in rollback mode (which only the file's writers change); a writer would
    have to enter and leave WAL mode again between each two looks to look like one. "gone"
    (the log is gone or empty), "wal" (the header now says WAL mode, or what was read is no
    longer a database's header, which SQLite then says itself) or None (a log beside a header
    in rollback mode at every look). Updates `found` to what was seen last; SidecarError if
    the log is no longer the file's own."""
    for _ in range(3):
        if not _look(path, found, "-wal", _stat_or_none(found.real)):
            return "gone"
        again = _database_head(read())
        if again is None or not _rollback_mode(again):
            return "wal"
    return None


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def check_holes(
    path: str, found: Found, first: tuple[bytes, int] | None, data: Callable[[int], int]
) -> None:
    """DatabaseCorruptError if more of the file's pages are holes (never written: a sparse
    file) than any writer leaves. SQLite writes every page it counts but one (the page of its
    locks, at 1 GiB), so a page that reads as zeros is one whose bytes are all zero: a free
    page (listed on a trunk page of the free list, which is written and lists at most a
    quarter of its bytes' worth), the last page of a value's overflow chain (at most 16 a
    written page: a page holds no more cells that overflow), or one a log or journal beside the
    file still holds. Copies made with `cp --sparse`, `rsync -S` or a file system that drops
    zero blocks keep those as holes; a file of 1 TiB holding 11 KB has 2^30 of them. Every
    size SQLite reads by comes from the file's length: the whole-file commands (snapshot,
    check, vacuum) would work through all of it."""
    head = _database_head(first)
    if first is None or head is None:
        return
    size = first[1]
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return  # SQLite refuses the header itself
    pages = size // page_size
    counted = int.from_bytes(head[28:32], "big")
    if 0 < counted < pages and head[24:28] == head[92:96]:
        pages = counted  # SQLite reads no page past a count it trusts
    held = data(pages * page_size)
    holes = (pages * page_size - held) // page_size
    if holes <= 16:
        return
    written = pages - holes
    free = min(int.from_bytes(head[36:40], "big"), written * (page_size // 4))
    # Pages a log or journal holds, counted by the data it holds: one of holes, however long,
    # holds none (and lifted the bound for a file beside it as long as itself).
    logged = sum(found.held.get(side, 0) for side in ("-wal", "-journal")) // page_size
    if holes <= free + 16 * written + logged + 16:
        return
    what = (
        f"{holes:,} of its {pages:,} pages of {page_size:,} bytes are holes, never written (a "
        f"sparse file of {pages * page_size:,} bytes holding {held:,}): no writer of a "
        "database leaves that many"
    )
    raise errors.DatabaseCorruptError(
        f"{path!r}: {what}; it is damaged or crafted",
        code=errors.SQLITE_CORRUPT,
        filename=path,
        sqlite_message=what,
    )


def data_of(path: str) -> Callable[[int], int]:
    """How many of the first `n` bytes of the file at `path` hold data (see check_header on
    opening the file here)."""

    def data(upto: int) -> int:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return upto
        try:
            return _data_in(fd, upto)
        finally:
            os.close(fd)

    return data


def _data_in(fd: int, upto: int) -> int:
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None or os.fstat(fd).st_blocks * 512 >= upto:
        return upto
    at = found = 0
    while at < upto:
        try:
            start = os.lseek(fd, at, seek_data)
        except OSError as exc:
            return found if exc.errno == errno.ENXIO else upto  # ENXIO: no data past `at`
        if start >= upto:
            break
        try:
            end = min(os.lseek(fd, start, seek_hole), upto)
        except OSError:
            return upto
        found += end - start
        at = end
    return found


def read_head(path: str) -> tuple[bytes, int] | None:
    """The header's bytes and the size of the file at `path`, opened here (see check_header)."""
    try:
        with open(path, "rb") as f:
            return f.read(_HEADER), os.fstat(f.fileno()).st_size
    except OSError:
        return None


def _problem(st: os.stat_result | None, found: os.stat_result) -> str:
    """Why the sidecar `found` is not the file's own ("" if it may be)."""
    if not stat.S_ISREG(found.st_mode):
        return "is not a regular file (a link, a pipe or a folder)"
    if os.name != "posix":
        return ""  # no owners and modes to compare
    owner = st.st_uid if st is not None else os.geteuid()
    if found.st_uid != owner:
        return f"belongs to another user (uid {found.st_uid}) than the file (uid {owner})"
    mode = st.st_mode if st is not None else 0
    if found.st_mode & stat.S_IWOTH and not mode & stat.S_IWOTH:
        return "may be written by every user, and the file may not"
    if found.st_mode & stat.S_IWGRP and not mode & stat.S_IWGRP:
        return "may be written by its group, and the file may not"
    return ""


def _check_size(
    path: str, journal: str, first: tuple[bytes, int], read: Callable[[], tuple[bytes, int] | None]
) -> None:
    """The file holds at least the header's page count (where SQLite trusts it) times the page
    size, as read while no commit was under way: the same header and size before and after a
    look at the journal, which was empty (a commit fills the journal before it writes the file,
    and empties it last). A longer file is whole: a process killed while the file grew, or a
    power loss before a shrinking truncate reached the disk, leaves pages past the count, which
    SQLite never reads (nothing past the count is a page of the file to it, and an overflow
    chain that leads there is corrupt); every size is bounded by the count, not the length."""
    for _ in range(3):
        try:
            busy = os.path.getsize(journal) > 0
        except OSError:
            busy = False
        again = read()
        if again is None:
            return
        if again == first:
            break
        first = again
    else:
        return  # a writer busy all along: SQLite's own checks stand
    head, size = first
    if busy or head[24:28] != head[92:96]:
        return  # a commit under way, or a count SQLite does not trust (it uses the size)
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if pages == 0 or page_size * pages <= size:
        return
    raise errors.DatabaseCorruptError(
        f"{path!r}: its header says {pages:,} pages of {page_size:,} bytes "
        f"({pages * page_size:,} bytes), but the file has only {size:,} bytes: it was cut "
        "short (a partial copy or download?), or crafted",
        code=errors.SQLITE_CORRUPT,
        filename=path,
    )


def _refusal(path: str, side: str, why: str) -> errors.SidecarError:
    return errors.SidecarError(
        f"{path!r} is not opened: {side!r} beside it {why}. SQLite would "
        "read it as part of the file (and the first write would copy its pages in). If it is "
        "yours, left by a program that wrote this file and stopped, open the file once with "
        "the sqlite3 shell as the file's owner (`sqlite3 FILE 'PRAGMA integrity_check'`), "
        "which recovers it; otherwise remove it",
        filename=path,
    )
