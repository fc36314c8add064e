"""Where a new store is built before it is put in place: a private folder beside its place,
made exclusively, so that an interrupted copy leaves what was there before and no one can plant
a file, a link or a journal in it; and which keys of a directory store a symbolic link would
lead outside it."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterable

__all__ = ["discard", "make_private", "outside", "temporary_sibling"]


def outside(root: str, keys: Iterable[str]) -> tuple[str, str] | None:
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


def discard(temporary: str) -> None:
    """Remove the private folder of `temporary`, with the store and journals built in it."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(os.path.dirname(temporary))
