"""Where a command's output goes: built in a private folder beside its place and put there in
one rename, so that a failed or interrupted command leaves what was there before; and, for a
directory store, keys refused whose files a symbolic link would lead outside it."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

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


def _outside(root: str, keys: Iterable[str]) -> tuple[str, str] | None:
    """The first key whose file under `root`, links followed, is not inside `root`, and where
    it leads; None if there is none. Each folder is resolved and listed once (its links
    found by scandir, without a stat per file): the check costs little beside a copy."""
    base = os.path.realpath(root)
    inside = base if base.endswith(os.sep) else base + os.sep
    folders: dict[str, tuple[str, set[str]]] = {}
    for key in keys:
        folder, _, name = key.rpartition("/")
        known = folders.get(folder)
        if known is None:
            known = folders[folder] = _resolved_folder(base, folder)
        resolved, links = known
        path = os.path.join(resolved, name)
        if name in links or name in ("", ".", ".."):
            path = os.path.realpath(path)
        if path != base and not path.startswith(inside):
            return key, path
    return None


def _resolved_folder(base: str, folder: str) -> tuple[str, set[str]]:
    """The real path of `folder` under `base`, and the names of the links it holds."""
    resolved = os.path.realpath(os.path.join(base, folder))
    try:
        with os.scandir(resolved) as entries:
            return resolved, {entry.name for entry in entries if entry.is_symlink()}
    except (FileNotFoundError, NotADirectoryError):
        return resolved, set()


# --- new files and directories, built in a private folder -------------------------------------


def temporary_sibling(location: str) -> str:
    """Where a new store for `location` is built: a path inside a private folder beside it,
    which `make_private` creates. The folder's name is random, so none can be planted at it
    in advance."""
    head, tail = os.path.split(os.path.abspath(location))
    return os.path.join(head, f".{tail}.partial-{secrets.token_hex(8)}", tail)


def make_private(temporary: str) -> None:
    """Create the folder that holds `temporary`, for this user only (mode 0700), exclusively:
    FileExistsError if anything is there already (nothing found in place is ever reused), and
    no one else can put a file or a journal inside it meanwhile."""
    os.mkdir(os.path.dirname(temporary), 0o700)


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


def discard(temporary: str) -> None:
    """Remove the private folder of `temporary`, with the store and journals built in it."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(os.path.dirname(temporary))


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
