"""Where a command's output goes: built in a private folder beside its place and put there in
one rename, so that a failed or interrupted command leaves what was there before; and, for a
directory store, keys refused whose files a symbolic link would lead outside it."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

# Re-exported: the commands build their outputs the way zarrdb.copy does.
from zarrdb._places import discard as discard
from zarrdb._places import make_private as make_private
from zarrdb._places import outside as _outside
from zarrdb._places import temporary_sibling as temporary_sibling
from zarrdb.cli.framework import BadInput

if TYPE_CHECKING:
    from zarrdb.cli.stores import Location


def require_inside(where: Location, keys: Iterable[str], role: str) -> None:
    """BadInput if, in the directory store `where`, a symbolic link leads the file of one of
    `keys` outside the directory (`role`: "source", whose values would be read from it, or
    "destination", which would be written through it)."""
    found = _outside(where.path, keys)
    if found is None:
        return
    key, target = found
    if role == "source":
        what = "refusing to read it (copy the file into the source instead of linking to it)"
    else:
        what = "refusing to write through it (remove the link, or choose another destination)"
    raise BadInput(
        f"{where.path}: {key!r} leads through a symbolic link to {target}, outside the {role}; "
        + what
    )


# --- new files and directories, built in a private folder -------------------------------------


def remove(path: str) -> None:
    """Remove a file (with its SQLite journals) or a directory, if it exists."""
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)


@contextlib.contextmanager
def building(temporary: str) -> Iterator[None]:
    """The private folder of `temporary` made for the block, and removed with what it holds if
    the block fails (one made by someone else is never removed: make_private fails first)."""
    make_private(temporary)
    try:
        yield
    except BaseException:
        discard(temporary)
        raise


def put_in_place(temporary: str, location: str, source: str | None = None) -> None:
    """Rename the finished store to `location`, replacing what is there, and remove its
    private folder. It takes the permissions of what it replaces; a new one is no more open
    than the local file or directory `source` (see `narrowed_mode`)."""
    os.chmod(temporary, narrowed_mode(temporary, location, source))
    if os.path.isdir(temporary) and os.path.isdir(location):
        # Directories cannot replace each other: the old one goes into the private folder.
        os.rename(location, os.path.join(os.path.dirname(temporary), "replaced"))
    os.replace(temporary, location)
    shutil.rmtree(os.path.dirname(temporary), ignore_errors=True)  # the copy is in place


def narrowed_mode(temporary: str, location: str, source: str | None) -> int:
    """The permissions for the store at `temporary` once it is `location`: those of the file or
    directory it replaces; else its own (the umask's) less what `source` denies, as `cp`
    gives a copy (a directory made from a file can be entered by whoever may read the file)."""
    with contextlib.suppress(FileNotFoundError):
        return stat.S_IMODE(os.stat(location).st_mode) & 0o777
    own = stat.S_IMODE(os.stat(temporary).st_mode)
    if source is None:
        return own
    try:
        allowed = stat.S_IMODE(os.stat(source).st_mode) & 0o777
    except OSError:
        return own
    if os.path.isdir(temporary):
        allowed |= (allowed & 0o444) >> 2
    return own & allowed
