"""A directory store whose writes cannot leave its directory, whatever is swapped meanwhile.

Before a copy writes into an existing directory, every key's path is checked for links that
lead outside it (_places.outside). That check is over by the time a file is written: someone
who can write in the directory could swap a folder for a link to elsewhere in between, and
zarr's LocalStore, which opens paths by name, would follow it. `ConfinedLocalStore` writes
each value by walking from a descriptor of the root, one folder at a time, never following a
link as it opens one (O_NOFOLLOW, dir_fd), and creates the file and renames it into place
relative to the descriptor of its own folder. A link met on the way is read and resolved by
the same walk, so a link that stays inside the directory is still followed (as the check
allows), and one that leads outside, or is swapped in at any moment, makes the write fail
with PermissionError instead. POSIX only; elsewhere it is zarr's LocalStore.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
from typing import Any

from zarr.core.buffer import Buffer
from zarr.storage import LocalStore

from zarrdb import _compat

_HOPS = 40  # links followed on the way to one file, as the kernel allows
_CONFINED = os.name == "posix" and hasattr(os, "O_NOFOLLOW") and os.open in os.supports_dir_fd


class ConfinedLocalStore(LocalStore):
    """zarr's LocalStore, its writes confined to its root (see the module's doc)."""

    def set_sync(self, key: str, value: Buffer) -> None:
        if not _CONFINED:
            return super().set_sync(key, value)
        _compat.ensure_open_sync(self)
        _compat.check_writable(self)
        put_beneath(str(self.root), key, value.as_buffer_like())

    async def _set(self, key: str, value: Buffer, exclusive: bool = False) -> None:
        if not _CONFINED:
            await _compat.local_store_set(self, key, value, exclusive)
            return
        await _compat.ensure_open(self)
        _compat.check_writable(self)
        await asyncio.to_thread(
            put_beneath, str(self.root), key, value.as_buffer_like(), exclusive=exclusive
        )


def put_beneath(root: str, key: str, data: Any, *, exclusive: bool = False) -> None:
    """Write `data` as the file `key` under `root`, creating its folders; PermissionError if
    a link would lead the file outside `root`. The file is written under a temporary name and
    renamed into place (FileExistsError if `exclusive` and the name is taken)."""
    *folders, name = key.split("/")
    if not name or name in (".", "..") or any(f in ("", ".", "..") for f in folders):
        raise PermissionError(f"{root}: {key!r} does not name a file inside the directory")
    fd = _folder_beneath(root, key, folders)
    try:
        temporary = f".{name}.{secrets.token_hex(8)}.partial"
        out = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=fd
        )
        try:
            with open(out, "wb", closefd=False) as f:
                f.write(data)
        finally:
            os.close(out)
        try:
            if exclusive:
                # A hard link fails if the name exists: the file appears whole, or not at all.
                os.link(temporary, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            else:
                # rename() replaces a link at the name itself, never writes through it.
                os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=fd)
    finally:
        os.close(fd)


def _folder_beneath(root: str, key: str, folders: list[str]) -> int:
    """A descriptor of the folder `folders` under `root` (made where missing), reached
    without following a link that leads outside `root`."""
    top = os.path.realpath(root)
    remaining = list(folders)
    walked: list[str] = []
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    hops = 0
    try:
        while remaining:
            part = remaining.pop(0)
            try:
                inner = _open_folder(part, fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    target = os.readlink(part, dir_fd=fd)
                except OSError:
                    raise exc from None  # a file, not a link, where a folder belongs
                hops += 1
                resolved = os.path.normpath(os.path.join(top, *walked, target))
                if hops > _HOPS or os.path.commonpath([top, resolved]) != top:
                    raise PermissionError(
                        errno.EPERM,
                        f"{key!r} leads through a symbolic link to {resolved}, outside the "
                        "destination; refusing to write through it",
                        root,
                    ) from None
                # Walk again from the root along where the link leads, link by link.
                remaining = [p for p in os.path.relpath(resolved, top).split(os.sep)
                             if p not in ("", ".")] + remaining  # fmt: skip
                walked = []
                os.close(fd)
                fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
                continue
            os.close(fd)
            fd = inner
            walked.append(part)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_folder(part: str, fd: int) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(part, flags, dir_fd=fd)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, dir_fd=fd)
        return os.open(part, flags, dir_fd=fd)
