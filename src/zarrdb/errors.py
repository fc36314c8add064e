"""The exceptions zarrdb raises.

Every error zarrdb raises on purpose derives from :class:`ZarrDBError`. Errors that come from
the SQLite engine are :class:`SQLiteError` subclasses chosen by SQLite's primary result code
(the one table that maps codes to classes is :data:`_BY_PRIMARY_CODE`); each carries the
primary and extended result code and SQLite's own message. Where a built-in exception has the
same meaning, the zarrdb class derives from it too, so ``except PermissionError`` or
``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "ZarrDBError",
    "SQLiteError",
    "DatabaseLockedError",
    "DatabaseCorruptError",
    "NotADatabaseError",
    "ValueTooLargeError",
    "ReadOnlyError",
    "DiskFullError",
    "ConstraintError",
    "MisuseError",
    "CantOpenError",
    "DiskIOError",
    "OperationInterruptedError",
    "OutOfMemoryError",
    "FormatError",
    "NotAZarrDBError",
    "Zarr2FileError",
    "UnsupportedVersionError",
    "IncompatibleFlagError",
    "UnsafeSchemaError",
    "MetadataConversionError",
    "InvalidKeyError",
    "ClosedError",
    "ConcurrentUseError",
    "ForkedProcessError",
    "NestingError",
    "RemoteReadError",
    "RemoteFileChangedError",
    "RemoteWriteError",
    "UnclosedFileError",
    "UnsafeZipError",
    "CopyMismatchError",
    "SidecarError",
    "CoordinateTooLargeError",
    "DamagedChunkError",
    "sqlite_error",
]


class ZarrDBError(Exception):
    """Base class of every exception raised by zarrdb."""


class SQLiteError(ZarrDBError):
    """The SQLite engine returned an error.

    The subclass is chosen by SQLite's primary result code; this class itself stands for
    SQLITE_ERROR and any code without a class of its own.

    Attributes
    ----------
    code : int
        SQLite's primary result code (`SQLITE_BUSY` is 5, ...).
    extended_code : int
        SQLite's extended result code, which says more (`SQLITE_IOERR_FSYNC`, ...).
    sqlite_message : str
        SQLite's own message, without zarrdb's context and advice.
    filename : str or None
        The database file, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        code: int = 1,
        extended_code: int | None = None,
        sqlite_message: str = "",
        filename: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.extended_code = code if extended_code is None else extended_code
        self.sqlite_message = sqlite_message
        self.filename = filename

    def __str__(self) -> str:
        # OSError subclasses would otherwise format themselves as "[Errno ...] ...".
        return str(self.args[0]) if self.args else ""


class DatabaseLockedError(SQLiteError):
    """Another connection holds a lock that did not clear within the busy timeout (SQLITE_BUSY,
    SQLITE_LOCKED). Nothing was written by this call; it can be retried."""


class DatabaseCorruptError(SQLiteError):
    """The file is damaged (SQLITE_CORRUPT)."""


class NotADatabaseError(DatabaseCorruptError):
    """The file is not an SQLite database at all (SQLITE_NOTADB)."""


class ValueTooLargeError(SQLiteError, ValueError):
    """A value or key is longer than SQLite can store (SQLITE_TOOBIG: 2,147,483,645 bytes for a
    value in a SQLiteStore file). Nothing was written."""


class ReadOnlyError(SQLiteError, PermissionError):
    """A write was attempted on a database opened read-only, or on a file that cannot be
    written (SQLITE_READONLY)."""


class DiskFullError(SQLiteError, OSError):
    """The disk (or a quota) is full (SQLITE_FULL). The transaction was rolled back."""


class ConstraintError(SQLiteError):
    """A constraint of the schema was violated (SQLITE_CONSTRAINT), e.g. a NULL value."""


class MisuseError(SQLiteError):
    """The SQLite API was used in a way it does not allow (SQLITE_MISUSE, SQLITE_RANGE)."""


class CantOpenError(SQLiteError, OSError):
    """SQLite could not open the file (SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_AUTH)."""


class DiskIOError(SQLiteError, OSError):
    """The operating system reported an I/O error (SQLITE_IOERR, SQLITE_NOLFS)."""


class RemoteReadError(DiskIOError):
    """A byte range of a remote file (object storage, HTTP) could not be read: the network, the
    server, permissions, or a missing object. The original exception is the ``__cause__``.
    Nothing is cached from a failed read: the same call can be retried."""


class RemoteFileChangedError(RemoteReadError):
    """The remote file was replaced after the store opened it (its ETag or version changed).
    Nothing of the new version was mixed into what was read; open the store again to read the
    new version."""


class RemoteWriteError(DiskIOError):
    """A file could not be uploaded to object storage (`zarrdb.remote.upload`): the network,
    the service, permissions. The original exception is the ``__cause__``. An upload that fails
    publishes nothing."""


class OutOfMemoryError(SQLiteError, MemoryError):
    """SQLite (or zarrdb's engine) could not allocate memory (SQLITE_NOMEM)."""


class OperationInterruptedError(SQLiteError):
    """The operation was interrupted (SQLITE_INTERRUPT)."""


class FormatError(ZarrDBError):
    """The file is an SQLite database but not one this version of zarrdb can use as a
    SQLiteStore file."""


class NotAZarrDBError(FormatError):
    """The SQLite database lacks the SQLiteStore tables (another application's database)."""


class Zarr2FileError(NotAZarrDBError):
    """The file was written by zarr-python 2's `SQLiteStore` (one table `zarr`, no SQLiteStore
    metadata, no application id): not a SQLiteStore 1.0 file. `zarrdb upgrade FILE` converts it
    in place; `zarrdb copy FILE NEW.zarrdb` copies it into a new file;
    `zarrdb.zarr2.Zarr2SQLiteStore` reads it as it is."""


class UnsupportedVersionError(FormatError):
    """The file declares a SQLiteStore major version this zarrdb does not implement."""


class IncompatibleFlagError(FormatError):
    """The file declares an incompatible flag this zarrdb does not implement."""


class UnsafeSchemaError(FormatError):
    """The file's schema holds what a SQLiteStore file may not: a trigger, a view, a virtual
    table, an explicit index or a generated column (on any table), or a column of its own in
    a SQLiteStore table. zarrdb refuses such a file rather than run its author's code."""


class MetadataConversionError(ZarrDBError, ValueError):
    """zarr's converter (`zarr.metadata.migrate_v3`) cannot turn a hierarchy's zarr v2
    metadata into zarr v3 (a codec without a v3 form, a node it cannot reach, ...); the message
    gives its reason. Nothing was changed."""


class UnclosedFileError(FormatError):
    """The file is still in WAL mode: the program writing it has not closed it, and part of its
    data may live in a ``-wal`` file beside it. Close the store (zarrdb leaves a closed file in
    DELETE mode) before copying or publishing the file."""


class UnsafeZipError(ZarrDBError, ValueError):
    """A zip file holds an entry that is not read safely: encrypted, named twice, compressed
    beyond what its method allows, overlapping another entry or lying outside the archive."""


class CopyMismatchError(ZarrDBError):
    """A copy checked after writing (``verify=True``) differs from its source.

    Attributes
    ----------
    mismatches : list of str
        One line per difference.
    """

    def __init__(self, mismatches: list[str]) -> None:
        self.mismatches = list(mismatches)
        shown = "; ".join(self.mismatches[:5])
        more = f" (and {len(self.mismatches) - 5:,} more)" if len(self.mismatches) > 5 else ""
        super().__init__(f"the copy differs from its source: {shown}{more}")


class InvalidKeyError(ZarrDBError, ValueError):
    """A key is not valid for a SQLiteStore file (see the key rules of the spec), or cannot be
    encoded as UTF-8."""


class ClosedError(ZarrDBError, ValueError):
    """The database or store was used after it was closed."""


class ConcurrentUseError(ZarrDBError, RuntimeError):
    """One connection was used by two threads at the same time. Give each thread its own
    connection (``SQLiteStore`` does this for you)."""


class ForkedProcessError(ZarrDBError, RuntimeError):
    """A connection opened in a parent process was used in a child after ``fork()``. Open the
    database again in the child (a pickled ``SQLiteStore`` reopens by itself)."""


class NestingError(ZarrDBError, RuntimeError):
    """A level of a transaction broke the nesting rule (docs/guide/transactions.md): it was
    entered beside another open level of the same transaction (from a sibling task or thread),
    or a level ended while a level inside it was still open, which rolls back that level with
    everything inside it. Writes from the code of a level rolled back that way raise it too, as
    do writes from a task or thread started in a level once that level's block has ended."""


class SidecarError(CantOpenError):
    """A ``-wal``, ``-shm`` or ``-journal`` file beside the database is not the file's own
    (another owner, writable by users who may not write the file, not a regular file, or a
    write-ahead log beside a file in rollback mode). SQLite would read it as part of the file,
    so nothing is opened; the message says what to do if it is yours."""

    def __init__(self, message: str, *, filename: str | None = None) -> None:
        super().__init__(message, code=SQLITE_CANTOPEN, filename=filename)


class CoordinateTooLargeError(ZarrDBError, ValueError):
    """The dimension coordinates xarray reads whole when it opens a dataset declare more bytes
    than the backend's `max_coordinate_bytes` allows (a file can declare any size and store
    nothing). Pass a larger limit, or None, for a file you trust."""


class DamagedChunkError(ZarrDBError, ValueError):
    """A stored chunk of strings (vlen-utf8, vlen-bytes) states more items than its bytes or
    its chunk's shape can hold; it is refused before its decoder allocates them (the xarray
    backend)."""


# SQLite's primary result codes (sqlite3.h), by name. The engine checks at import that they
# match the SQLite it was built with.
SQLITE_ERROR = 1
SQLITE_PERM = 3
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_NOMEM = 7
SQLITE_READONLY = 8
SQLITE_INTERRUPT = 9
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CANTOPEN = 14
SQLITE_TOOBIG = 18
SQLITE_CONSTRAINT = 19
SQLITE_MISUSE = 21
SQLITE_NOLFS = 22
SQLITE_AUTH = 23
SQLITE_RANGE = 25
SQLITE_NOTADB = 26
# Extended result codes with advice of their own.
SQLITE_READONLY_ROLLBACK = SQLITE_READONLY | (3 << 8)

# Primary result code -> exception class. SQLITE_ERROR and anything unlisted map to
# SQLiteError itself.
_BY_PRIMARY_CODE: dict[int, type[SQLiteError]] = {
    SQLITE_PERM: CantOpenError,
    SQLITE_BUSY: DatabaseLockedError,
    SQLITE_LOCKED: DatabaseLockedError,
    SQLITE_NOMEM: OutOfMemoryError,
    SQLITE_READONLY: ReadOnlyError,
    SQLITE_INTERRUPT: OperationInterruptedError,
    SQLITE_IOERR: DiskIOError,
    SQLITE_CORRUPT: DatabaseCorruptError,
    SQLITE_FULL: DiskFullError,
    SQLITE_CANTOPEN: CantOpenError,
    SQLITE_TOOBIG: ValueTooLargeError,
    SQLITE_CONSTRAINT: ConstraintError,
    SQLITE_MISUSE: MisuseError,
    SQLITE_NOLFS: DiskIOError,
    SQLITE_AUTH: CantOpenError,
    SQLITE_RANGE: MisuseError,
    SQLITE_NOTADB: NotADatabaseError,
}

# What the user can do about it, by primary code; appended to the message.
_ADVICE: dict[int, str] = {
    SQLITE_BUSY: "another connection is writing; retry, or raise busy_timeout",
    SQLITE_LOCKED: "another connection is writing; retry, or raise busy_timeout",
    SQLITE_READONLY: "open the store for writing, or check the file's and its folder's permissions",
    SQLITE_CORRUPT: "the file is damaged; restore it from a copy ('zarrdb check' lists what SQLite finds)",
    SQLITE_FULL: "free disk space and retry; the transaction was rolled back",
    SQLITE_CANTOPEN: "check that the path exists, is a file, and can be read",
    SQLITE_TOOBIG: "values in a SQLiteStore file are limited to 2,147,483,645 bytes; use smaller chunks",
    SQLITE_NOTADB: "is this a .zarrdb file?",
}

# What the user can do about it, by extended code, before the primary code's advice; "{journal}"
# stands for the file's journal.
_ADVICE_EXTENDED: dict[int, str] = {
    # A hot journal: a writer stopped in a transaction (a crash, a kill) and left the pages it
    # changed in {journal}; the file is not readable until they are put back. A journal can
    # also be planted beside someone's file, and a writer would copy its pages into the file.
    SQLITE_READONLY_ROLLBACK: "{journal} holds a transaction interrupted by a crash, which only "
    "a writer can roll back: if the journal belongs to this file, open the store for writing "
    "once; if you did not expect it (someone else may have put it there), remove it",
}


def sqlite_error(
    code: int,
    extended_code: int,
    sqlite_message: str,
    *,
    filename: str | None = None,
    context: str = "",
) -> SQLiteError:
    """Build (not raise) the exception for an SQLite result code.

    Parameters
    ----------
    code
        The result code; its low byte, the primary code, chooses the class.
    extended_code
        The extended result code.
    sqlite_message
        SQLite's message.
    filename
        The database file, named in the message.
    context
        What was being done, put before the message.

    Returns
    -------
    SQLiteError
        An instance of the class for the code, with advice appended to the message where the
        user can do something about it.
    """
    primary = code & 0xFF
    cls = _BY_PRIMARY_CODE.get(primary, SQLiteError)
    where = repr(filename) if filename else ""
    head = f"{context} {where}".strip()
    message = f"{head}: {sqlite_message}" if head else sqlite_message
    advice = _ADVICE_EXTENDED.get(extended_code) or _ADVICE.get(primary)
    if advice:
        journal = f"{filename}-journal" if filename else "the -journal file beside it"
        message = f"{message} ({advice.replace('{journal}', journal)})"
    return cls(
        message,
        code=primary,
        extended_code=extended_code,
        sqlite_message=sqlite_message,
        filename=filename,
    )
