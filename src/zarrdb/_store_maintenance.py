"""The store's maintenance, operations on its file as a whole: renaming a node, backup,
vacuum, integrity check, listing sizes, facts about the file (public API; the command line is
built on them).

A mixin of SQLiteStore, which holds the store's open file (`OpenFile`, _open_file.py): every
operation asks the store for it once (`_file()`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from zarrdb import _format, errors
from zarrdb._core import Database
from zarrdb._open_file import FileSpec, OpenFile

T = TypeVar("T")


class FileOperations:
    path: str
    _spec: FileSpec

    if TYPE_CHECKING:  # OpenFileHolder's (_open_file.py), beside this mixin in SQLiteStore
        def _file(self) -> OpenFile: ...
        def _current_file(self) -> OpenFile: ...
        def _file_for_write(self) -> OpenFile: ...
        def _check_writes(self) -> None: ...

    def _maintain(self, fn: Callable[[Database], T]) -> T:
        """Run `fn(db)` on the write connection, once everything queued is written (inside
        an open explicit transaction, as part of it: the store object is the transaction's)."""
        self._check_writes()
        return self._file_for_write().write_with(fn)

    def move(self, source: str, dest: str) -> int:
        """Deprecated name of `rename`.

        zarr's `ZipStore.move` moves the whole store instead, hence the new name.
        """
        warnings.warn(
            "SQLiteStore.move(source, dest) is renamed SQLiteStore.rename(source, dest)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.rename(source, dest)

    def rename(self, source: str, dest: str) -> int:
        """Rename a group or array, every key below it, in one transaction.

        Readers (in any process) see the hierarchy before or after, never between.

        Parameters
        ----------
        source
            The path of the group or array inside the hierarchy (slashes around it are
            optional).
        dest
            Its new path; nothing may be stored there yet.

        Returns
        -------
        int
            The number of keys moved.

        Raises
        ------
        FileNotFoundError
            If nothing is stored at `source`.
        FileExistsError
            If something is stored at `dest` already.
        zarrdb.errors.InvalidKeyError
            If either is the root, one lies inside the other, or `dest` is not a valid key.
        """
        src = _format.dir_prefix(source)
        dst = _format.dir_prefix(dest)
        if not src or not dst:
            raise errors.InvalidKeyError("cannot move the root of the hierarchy, or onto it")
        if dst.startswith(src) or src.startswith(dst):
            raise errors.InvalidKeyError(f"cannot move {source!r} into itself or its parent {dest!r}")
        _format.check_key(dst[:-1])

        def move(db: Database) -> int:
            if not db.has_prefix(src):
                raise FileNotFoundError(f"nothing stored at {source!r} in {self.path!r}")
            if db.has_prefix(dst):
                raise FileExistsError(f"{dest!r} exists already in {self.path!r}")
            moved = db.rename_prefix(src, dst)
            db.touch_modified_at()
            return moved

        # The writer hands its connection over: the checks and the move are one unit (inside
        # an open explicit transaction, a savepoint of it).
        return self._maintain(lambda db: db.atomic_call(move))

    def backup(self, dest: str | os.PathLike[str]) -> None:
        """Copy the file as of one moment to `dest`, while others may keep writing.

        SQLite's online backup, page by page; the copy is one file in DELETE journal mode.
        Use this (or `zarrdb snapshot`), never a file copy, for a file that is open.

        Raises
        ------
        FileExistsError
            If `dest` exists.
        """
        target = os.fspath(dest)
        if os.path.exists(target):
            raise FileExistsError(f"{target!r} exists already")
        self._file().read_with(lambda db: db.backup_to(target))

    def vacuum(self) -> None:
        """Rebuild the file without free pages.

        Needs free disk space of about the file's size. Files made by zarrdb give the space of
        deleted values back by themselves; this is for other files, or to compact one.
        """
        self._maintain(lambda db: db.vacuum())

    def check(self) -> list[str]:
        """Run SQLite's integrity check on the file.

        Returns
        -------
        list of str
            The problems found, one per item; empty when the file is sound.
        """
        return self._file().read_with(lambda db: db.integrity_check())

    def key_sizes(self, prefix: str = "") -> list[tuple[str, int]]:
        """The stored size of every value whose key starts with `prefix`, without reading it.

        Returns
        -------
        list of (str, int)
            `(key, length in bytes)` pairs, in key order.
        """
        return self._file().read_with(lambda db: db.list_prefix_sizes(prefix))

    def remote_stats(self) -> dict[str, int] | None:
        """The counters of a remote file's block cache.

        Returns
        -------
        dict or None
            Requests, bytes fetched, block hits and misses, waits for another thread's
            request, failures, evictions, `cached_bytes` and `loading` (blocks being fetched
            now); None for a local file.
        """
        remote = self._file().remote
        return None if remote is None else remote.stats()

    def file_info(self) -> dict[str, Any]:
        """Facts about the file, as `zarrdb info` shows them.

        Returns
        -------
        dict
            `path`, `file_size`, the format metadata (`format_version`, `created_by`,
            `modified_at`, `compatible_flags`, `incompatible_flags`, `application_id`), SQLite's
            settings (`sqlite_version`, `page_size`, `page_count`, `freelist_count`,
            `free_bytes`, `auto_vacuum`, `journal_mode`), `keys` and `stored_bytes`.
        """
        import zarrdb

        file = self._file()

        def read(db: Database) -> dict[str, Any]:
            facts = _format.read_facts(db)
            page_size = db.pragma("page_size")
            freelist = db.pragma("freelist_count")
            info: dict[str, Any] = {
                "path": self.path,
                "file_size": file.remote.size if file.remote else os.path.getsize(self.path),
                "format_version": facts.metadata.get("sqlitestore_version"),
                "created_by": facts.metadata.get("created_by"),
                "modified_at": facts.metadata.get("modified_at"),
                "compatible_flags": facts.metadata.get("compatible_flags"),
                "incompatible_flags": facts.metadata.get("incompatible_flags"),
                "application_id": facts.application_id,
                "sqlite_version": zarrdb.sqlite_version,
                "page_size": page_size,
                "page_count": db.pragma("page_count"),
                "freelist_count": freelist,
                "free_bytes": page_size * freelist,
                "auto_vacuum": ("none", "full", "incremental")[db.pragma("auto_vacuum")],
                "journal_mode": db.journal_mode(),
                "keys": db.count_prefix(""),
                "stored_bytes": db.size_prefix(""),
            }
            return info

        return file.read_with(read)
