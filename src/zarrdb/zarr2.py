"""Files of zarr-python 2's SQLiteStore: read them as they are, or upgrade them in place.

zarr-python 2 shipped `zarr.storage.SQLiteStore`, which wrote one table,
`zarr(k TEXT PRIMARY KEY, v BLOB)`, with no SQLiteStore metadata and no application id;
zarr-python 3 has no such store. Such a file is not a SQLiteStore 1.0 file, and `SQLiteStore`
refuses it (`Zarr2FileError`). This module offers the two ways across:

    upgrade("old.sqlite")                  # in place: a SQLiteStore 1.0 file, one transaction
    upgrade("old.sqlite", to_v3=True)      # and its zarr v2 metadata converted to v3
    Zarr2SQLiteStore("old.sqlite")         # read-only, as it is (`zarrdb copy` reads it so)

The command line: `zarrdb upgrade FILE [--to-v3]` and `zarrdb copy FILE NEW.zarrdb`.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import warnings
from dataclasses import dataclass, field
from typing import Any

from zarrdb import _format, _tunables, errors
from zarrdb._file_setup import switch_journal, write_schema
from zarrdb._core import Database
from zarrdb.store import SQLiteStore

__all__ = ["UpgradeResult", "Zarr2SQLiteStore", "is_zarr2_file", "upgrade"]

# zarr v2's metadata documents, and v3's.
V2_ARRAY, V2_GROUP, V2_ATTRS, V2_CONSOLIDATED = ".zarray", ".zgroup", ".zattrs", ".zmetadata"
V2_DOCUMENTS = (V2_ARRAY, V2_GROUP, V2_ATTRS, V2_CONSOLIDATED)
V3_DOCUMENT = "zarr.json"


class Zarr2SQLiteStore(SQLiteStore):
    """A read-only store on a file written by zarr-python 2's `SQLiteStore`.

    It reads the file as it is (zarr reads its zarr v2 hierarchy), and also reads
    SQLiteStore 1.0 files. Nothing is ever written to the file. Takes the options of
    `SQLiteStore` (`busy_timeout`, `check_pages`, ...); a store that could write raises
    `ValueError`.

    Examples
    --------
    ```python
    import zarr
    from zarrdb.zarr2 import Zarr2SQLiteStore

    with Zarr2SQLiteStore("old.sqlite") as store:
        group = zarr.open_group(store, mode="r", zarr_format=2)
    ```
    """

    _accept_zarr2 = True

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = True, **options: Any):
        if not read_only:
            raise ValueError(
                "files of zarr-python 2's SQLiteStore are read as they are, read-only: "
                "zarrdb.zarr2.upgrade (zarrdb upgrade FILE) makes one a SQLiteStore 1.0 file "
                "that SQLiteStore writes"
            )
        super().__init__(path, read_only=True, **options)

    def __repr__(self) -> str:
        return f"Zarr2SQLiteStore({self.path!r})"


def is_zarr2_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a file zarr-python 2's `SQLiteStore` wrote (and no SQLiteStore 1.0
    file): the table `zarr` of exactly zarr 2's shape and nothing else.

    Reads the file's schema only, read-only; False for anything that is not an SQLite
    database, or that cannot be read.
    """
    target = os.fspath(path)
    if not os.path.isfile(target):
        return False
    try:
        db = Database(target, mode="r", cell_size_check=True)
    except errors.ZarrDBError:
        return False
    try:
        facts = _format.read_facts(db)
    except errors.ZarrDBError:
        return False
    finally:
        db.close()
    return not facts.has_store_tables and _format.zarr2_problem(facts) is None


@dataclass
class UpgradeResult:
    """What `upgrade` did.

    Attributes
    ----------
    path : str
        The file.
    keys : int
        The keys in the file.
    upgraded : bool
        Whether the file was converted to SQLiteStore 1.0 (False: it was one already).
    converted : list of str
        The nodes whose zarr v2 metadata became v3 (`to_v3`), by path ("" is the root).
    consolidated : list of str
        The groups whose consolidated metadata (`.zmetadata`) was made again in v3 form.
    size_before, size_after : int
        The file's size in bytes.
    vacuumed : bool
        Whether the space the old table held was given back to the file system.
    """

    path: str
    keys: int = 0
    upgraded: bool = False
    converted: list[str] = field(default_factory=list)
    consolidated: list[str] = field(default_factory=list)
    size_before: int = 0
    size_after: int = 0
    vacuumed: bool = False


def upgrade(
    path: str | os.PathLike[str],
    *,
    to_v3: bool = False,
    busy_timeout: float = _tunables.BUSY_TIMEOUT,
) -> UpgradeResult:
    """Turn a file of zarr-python 2's `SQLiteStore` into a SQLiteStore 1.0 file, in place.

    Everything is checked before anything is written: the table `zarr` must have exactly
    zarr 2's shape (and be the only table), no row may hold a NULL, every key must be text
    that the format allows. Then, in one transaction (all or nothing), the rows move to a
    table with the format's `NOT NULL` columns, the metadata table and the application id are
    added, and (`to_v3`) the hierarchy's zarr v2 metadata documents are replaced by v3 ones
    made with zarr's own converter, `zarr.metadata.migrate_v3`; consolidated metadata
    (`.zmetadata`) is made again in v3 form. Finally the file is rebuilt (SQLite's VACUUM,
    with zarrdb's page size) to give back the space the old table held.

    A SQLiteStore 1.0 file is left as it is, except that `to_v3` converts its zarr v2
    metadata.

    Parameters
    ----------
    path
        The file.
    to_v3
        Also convert the hierarchy's zarr v2 metadata to zarr v3 (chunks are not touched:
        the v3 metadata keeps their keys with the `v2` chunk key encoding).
    busy_timeout
        Seconds to wait for another process's lock.

    Returns
    -------
    UpgradeResult

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    zarrdb.errors.NotAZarrDBError
        If the file is neither zarr 2's nor a SQLiteStore file (the reason is named).
    zarrdb.errors.FormatError
        If a row holds a NULL, a key is not text or breaks the key rules, or a value is
        neither a blob nor text; nothing was changed.
    zarrdb.errors.MetadataConversionError
        If zarr's converter cannot convert the metadata (`to_v3`), with its reason; nothing
        was changed.
    zarrdb.errors.DatabaseLockedError
        If another process holds a lock longer than `busy_timeout`.
    """
    target = os.path.abspath(os.fspath(path))
    if os.path.isdir(target):
        raise IsADirectoryError(f"{target!r} is a directory, not a file")
    if not os.path.exists(target):
        raise FileNotFoundError(f"no such file: {target!r}")
    result = UpgradeResult(target, size_before=os.path.getsize(target))
    db = Database(target, mode="w", busy_timeout=busy_timeout, cell_size_check=True)
    try:
        _check_kind(target, _format.read_facts(db))
        if db.journal_mode() == "wal":
            # One file before and after; VACUUM can change the page size only out of WAL mode.
            switch_journal(db, "delete")
        # Maintenance on a connection no writer runs: the upgrade's SQL as one unit (one
        # compiled call, which a signal cannot leave half begun).
        def upgrade_rows(db: Database) -> None:
            facts = _format.read_facts(db)  # as of the transaction: another writer may have won
            result.upgraded = _check_kind(target, facts)
            keys = _checked_keys(db, target)
            result.keys = len(keys)
            plan = _v3_plan(db, keys, target) if to_v3 else None
            if result.upgraded:
                _move_rows(db)
            if plan is not None:
                for key in plan.delete:
                    db.delete_value(key)
                for key, document in plan.documents.items():
                    db.put_value(key, document)
                result.converted, result.consolidated = plan.converted, plan.consolidated
            if not result.upgraded and (plan is None or plan.changes):
                db.touch_modified_at()
            _format.validate(_format.read_facts(db), path=target, writable=True)

        db.atomic_call(upgrade_rows)
        if result.upgraded:
            result.vacuumed = _rebuild(db, target)
    finally:
        db.close()
    result.size_after = os.path.getsize(target)
    return result


def _check_kind(path: str, facts: _format.FileFacts) -> bool:
    """True for a file of zarr 2's SQLiteStore, False for a SQLiteStore 1.0 file zarrdb can
    write; otherwise the error that says why it is neither."""
    if facts.has_store_tables:
        _format.validate(facts, path=path, writable=True)
        return False
    problem = _format.zarr2_problem(facts)
    if problem is not None:
        raise errors.NotAZarrDBError(
            f"{path!r} is not a file of zarr-python 2's SQLiteStore: {problem}; zarrdb upgrade "
            "converts only those (a table zarr(k TEXT PRIMARY KEY, v BLOB) and nothing else)"
        )
    return True


def _checked_keys(db: Database, path: str) -> list[str]:
    """Every key of the file, once each row is known to hold no NULL, a text key and a blob or
    text value, and every key to follow the format's rules; FormatError naming the first that
    does not."""
    nulls, named = db.rows_with_null()
    if nulls:
        which = f", e.g. the value of {named!r}" if named is not None else ""
        raise errors.FormatError(
            f"{path!r}: {nulls:,} row(s) hold a NULL{which}; a SQLiteStore file has none "
            "(nothing was changed)"
        )
    odd = db.mistyped_row()
    if odd is not None:
        raise errors.FormatError(
            f"{path!r}: a row holds a {odd[0]} key and a {odd[1]} value; zarr keys are "
            "text and values bytes (nothing was changed)"
        )
    keys = db.list_keys()  # InvalidKeyError for a key that is not UTF-8
    for key in keys:
        problem = _format.key_problem(key)
        if problem:
            raise errors.FormatError(
                f"{path!r}: the key {key!r} cannot be in a SQLiteStore file: {problem} "
                "(nothing was changed)"
            )
    return keys


def _move_rows(db: Database) -> None:
    """Inside the open transaction: the SQLiteStore tables, metadata and application id, with
    the rows of zarr 2's table moved into the new `zarr` table (text values as their bytes)."""
    from zarrdb import __version__

    db.set_zarr2_table_aside()
    write_schema(db, f"zarrdb {__version__} (upgraded from zarr-python 2's SQLiteStore)")
    db.move_zarr2_rows()


def _rebuild(db: Database, path: str) -> bool:
    """Give back the pages the old table held (SQLite's VACUUM: all or nothing; the file keeps
    its page size, as files of other implementations do: `zarrdb copy` rewrites one with
    zarrdb's). False, with a warning, where it cannot be done now: the file is upgraded either
    way."""
    try:
        db.vacuum()
    except (errors.DiskFullError, errors.DatabaseLockedError) as exc:
        warnings.warn(
            f"{path!r} is upgraded, but the space its old table held stays in the file "
            f"({exc.sqlite_message or exc}); `zarrdb vacuum {path}` gives it back later",
            UserWarning,
            stacklevel=3,
        )
        return False
    return True


# --- zarr v2 metadata to v3 ----------------------------------------------------------------------


@dataclass
class _Plan:
    """The metadata documents that replace the hierarchy's v2 ones."""

    documents: dict[str, bytes] = field(default_factory=dict)  # key -> zarr.json document
    delete: list[str] = field(default_factory=list)  # the v2 documents
    converted: list[str] = field(default_factory=list)
    consolidated: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return bool(self.documents or self.delete)


def _v3_plan(db: Database, keys: list[str], path: str) -> _Plan:
    """The v3 documents zarr's converter makes of the file's v2 metadata documents, converted
    in memory first: what it cannot convert is refused before anything is written."""
    v2 = [key for key in keys if posixpath.basename(key) in V2_DOCUMENTS]
    plan = _Plan()
    if not v2:
        return plan  # nothing in zarr v2 form
    v3 = [key for key in keys if posixpath.basename(key) == V3_DOCUMENT]
    if v3:
        raise errors.MetadataConversionError(
            f"{path!r} holds zarr v3 metadata already ({v3[0]!r}) beside zarr v2 metadata "
            f"({v2[0]!r}); --to-v3 converts a hierarchy in zarr v2 form only (nothing was "
            "changed)"
        )
    try:
        from zarr.metadata.migrate_v3 import migrate_v2_to_v3
    except ImportError:
        import zarr

        raise errors.MetadataConversionError(
            f"converting zarr v2 metadata to v3 needs zarr's converter, zarr.metadata."
            f"migrate_v3, which zarr {zarr.__version__} does not have (pip install -U zarr); "
            "nothing was changed"
        ) from None
    from zarr.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    documents = dict(zip(v2, db.get_many(v2), strict=True))
    consolidated = [posixpath.dirname(k) for k in v2 if posixpath.basename(k) == V2_CONSOLIDATED]
    buffer = default_buffer_prototype().buffer
    # The converter works on a MemoryStore holding only the metadata documents; what it
    # writes lands in this dict.
    memory: dict[str, Any] = {
        key: buffer.from_bytes(value)
        for key, value in documents.items()
        if posixpath.basename(key) != V2_CONSOLIDATED and value is not None
    }
    try:
        import zarr

        migrate_v2_to_v3(input_store=MemoryStore(memory))
        nodes = {posixpath.dirname(k) for k in _documents(memory)}
        left = sorted(k for k in v2 if posixpath.dirname(k) not in nodes)
        if left:
            raise ValueError(
                f"it did not reach the node of {left[0]!r} (a group above it has no .zgroup "
                "document)"
            )
        for key in v2:
            memory.pop(key, None)
        with warnings.catch_warnings():
            # zarr: "consolidated metadata is not part of the Zarr format 3 specification"
            warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
            for group in consolidated:
                zarr.consolidate_metadata(MemoryStore(memory), path=group or None)
        made = _documents(memory)
    except Exception as exc:  # noqa: BLE001 - zarr's converter says why in its own exceptions
        raise errors.MetadataConversionError(
            f"{path!r}: zarr's converter cannot turn this hierarchy's zarr v2 metadata into v3: "
            f"{exc} ({type(exc).__name__}; nothing was changed)"
        ) from exc
    plan.documents = made
    plan.delete = v2
    plan.converted = sorted(nodes)
    plan.consolidated = sorted(consolidated)
    return plan


def _documents(store_dict: dict[str, Any]) -> dict[str, bytes]:
    """The zarr.json documents of a MemoryStore's dict, by key (each a JSON object)."""
    out = {}
    for key, value in store_dict.items():
        if posixpath.basename(key) == V3_DOCUMENT:
            data = value.to_bytes()
            with contextlib.suppress(ValueError):
                if isinstance(json.loads(data), dict):
                    out[key] = data
                    continue
            raise ValueError(f"the converter wrote {key!r}, which is not a JSON object")
    return out
