"""The SQLiteStore 1.0 file format as code: constants, schema, key rules, file validation.

Everything the spec says lives here once; the store and the command line use it. The spec is
"Zarr SQLiteStore specification version 1.0" (SPEC.md of the zarr-sqlite-python project).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from zarrdb import _schema, errors

APPLICATION_ID = 0x10B50760
FORMAT_VERSION = "1.0"
SUPPORTED_MAJOR = 1
# Flags this implementation understands (none are defined in 1.0).
KNOWN_COMPATIBLE_FLAGS: frozenset[str] = frozenset()
KNOWN_INCOMPATIBLE_FLAGS: frozenset[str] = frozenset()
# The first 16 bytes of every SQLite database file (SQLite's file format: the header string).
SQLITE_HEADER = b"SQLite format 3\x00"
# The names a SQLiteStore file goes by: what the command line and copies take for one.
ZARRDB_SUFFIXES = (".zarrdb", ".sqlite", ".sqlite3", ".db")
# The largest value a SQLiteStore file can hold (3 bytes less than 2 GiB).
MAX_VALUE_SIZE = 2_147_483_645

METADATA_TABLE = "zarr_sqlitestore_metadata"
DATA_TABLE = "zarr"
SPEC_TABLES = (METADATA_TABLE, DATA_TABLE)
REQUIRED_METADATA = ("sqlitestore_version", "compatible_flags", "incompatible_flags")
KNOWN_METADATA = REQUIRED_METADATA + ("created_by", "modified_at")

METADATA_SCHEMA = f"""
CREATE TABLE {METADATA_TABLE} (
    k TEXT PRIMARY KEY NOT NULL,
    v TEXT NOT NULL
);
"""
DATA_SCHEMA = f"""
CREATE TABLE {DATA_TABLE} (
    k TEXT PRIMARY KEY NOT NULL,
    v BLOB NOT NULL
);
"""
SCHEMA = METADATA_SCHEMA + DATA_SCHEMA

# Run inside each write transaction: one statement, no second transaction per write.
TOUCH_MODIFIED_AT = (
    f"INSERT INTO {METADATA_TABLE}(k, v) "
    "VALUES ('modified_at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) "
    "ON CONFLICT(k) DO UPDATE SET v = excluded.v"
)

_VERSION_RE = re.compile(r"^([0-9]+)\.([0-9]+)$")
# Table options follow the column list's closing parenthesis: "WITHOUT ROWID", "STRICT".
_WITHOUT_ROWID_RE = re.compile(r"\bwithout\s+rowid\b[^)]*$", re.IGNORECASE)


def initial_metadata(created_by: str) -> list[tuple[str, str]]:
    """The metadata records of a new file."""
    return [
        ("sqlitestore_version", FORMAT_VERSION),
        ("compatible_flags", ""),
        ("incompatible_flags", ""),
        ("created_by", created_by),
        ("modified_at", format_timestamp(datetime.now(UTC))),
    ]


def format_timestamp(moment: datetime) -> str:
    """RFC 3339, UTC, upper-case T and Z, milliseconds: 1999-12-31T23:59:59.999Z."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_timestamp(text: str) -> datetime | None:
    """A modified_at value as an aware datetime; None when it is not RFC 3339 (the spec lets
    readers treat such a value as absent). No timezone means UTC."""
    candidate = text.strip()
    if "T" not in candidate:
        return None
    if candidate.endswith(("Z", "z")):
        candidate = candidate[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(candidate)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


# --- keys ------------------------------------------------------------------------------------


# The spec's three key rules, as they are broken.
KEY_RULES = "keys must not start or end with '/' or contain '//'"
_DRIVE = re.compile(r"(?:\A|/)[A-Za-z]:")


def key_problem(key: str, flavour: str = "store") -> str | None:
    """Why `key` may not be written where `flavour` says, or None if it may: "store" (a
    SQLiteStore file), or a file's path below a folder on a "posix" or "windows" file system
    (an export to a directory or a zip file).

    Every flavour refuses the spec's empty segments, `.` and `..` segments (the Zarr core spec
    forbids them as node names; as a path they climb out of the hierarchy) and NUL. A path on a
    file system must also name a file (not ""), and on Windows hold no backslash, no drive
    letter ("C:") at the start of a segment and no segment ending in a dot or a space."""
    if not key:
        return None if flavour == "store" else "the empty key names no file"
    # The common case costs a few substring searches: this runs for every chunk written.
    if key[0] == "/" or key[-1] == "/" or "//" in key:
        return KEY_RULES
    if "\x00" in key:
        return "it holds a NUL character, which no file system takes in a name"
    if key[0] == "." or "/." in key:  # a segment that starts with a dot
        framed = f"/{key}/"
        for segment in ("/../", "/./"):
            if segment in framed:
                return (
                    f"a {segment[1:-1]!r} segment (Zarr forbids '.' and '..' as node names; as "
                    "a path it would leave its hierarchy)"
                )
    if flavour == "windows":
        if "\\" in key:
            return "a backslash, which separates folders on Windows"
        if ":" in key and _DRIVE.search(key):
            return "a drive letter ('C:') at the start of a segment, which names a drive on Windows"
        if key[-1] in ". " or "./" in key or " /" in key:
            # Windows drops a name's trailing dots and spaces as it opens it: '.. ' and '... '
            # become '..' (a way out of the folder), 'a.' and 'a ' the file 'a'.
            return (
                "a segment ending in a dot or a space, which Windows drops ('.. ' would be "
                "'..', leaving the folder)"
            )
    return None


def check_key(key: str) -> str:
    """`key` if it may be written to a SQLiteStore file, else InvalidKeyError."""
    if not isinstance(key, str):
        raise TypeError(f"keys are str, not {type(key).__name__}")
    problem = key_problem(key)
    if problem:
        raise errors.InvalidKeyError(f"invalid key {key!r}: {problem}")
    return key


def dir_prefix(prefix: str) -> str:
    """A directory prefix as zarr passes it ("", "a", "a/") in the form "" or "a/"."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


# --- validation of an existing file -----------------------------------------------------------


@dataclass
class FileFacts:
    """What a reader needs to know about a file to decide whether it can use it."""

    application_id: int
    tables: dict[str, str]  # name -> CREATE statement
    metadata: dict[str, str] = field(default_factory=dict)
    # What the file holds beyond what a SQLiteStore file may contain (zarrdb._schema: a
    # trigger, a view, an index, a generated column, ...), one description each; such a file
    # is refused.
    code: list[str] = field(default_factory=list)
    encoding: str = "UTF-8"  # of the file's text (PRAGMA encoding)
    # The columns of the table `zarr`, if there is one: (name, declared type, not null, pk).
    data_columns: list[tuple[str, str, int, int]] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.tables

    @property
    def has_store_tables(self) -> bool:
        return METADATA_TABLE in self.tables and DATA_TABLE in self.tables


class Queries(_schema.Queries, Protocol):
    """What read_facts needs of a connection: a zarrdb._core.Database, or conformance's
    stand-in over Python's sqlite3 (both run the statements of _core.FACT_QUERIES)."""

    def pragma(self, name: str) -> Any: ...
    def schema_objects(self) -> list[tuple[Any, ...]]: ...
    def table_columns(self, table: str) -> list[tuple[Any, ...]]: ...
    def metadata_records(self) -> list[tuple[Any, ...]]: ...


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def read_facts(db: Queries) -> FileFacts:
    """Gather FileFacts through a zarrdb._core.Database (or conformance's stand-in over
    Python's sqlite3). Runs none of the file's own SQL: its metadata records are read only from
    a file without any (FileFacts.code)."""
    application_id = int(db.pragma("application_id") or 0)
    # A damaged schema can hold names that are not text (a blob, a number): they are reported
    # as the file has them rather than failing the comparison with a TypeError.
    schema = [
        tuple(_as_text(column) for column in row)
        for row in db.schema_objects()
    ]
    # By name as SQLite compares names: a table "ZARR" is the table zarrdb's statements use.
    tables = {_schema.fold(name): sql for kind, name, _, sql in schema if kind == "table"}
    code = _schema.problems(db, schema, {METADATA_TABLE: ("k", "v"), DATA_TABLE: ("k", "v")})
    facts = FileFacts(application_id & 0xFFFFFFFF, tables, code=code)
    facts.encoding = str(db.pragma("encoding") or "UTF-8")
    if DATA_TABLE in tables and not facts.code:
        facts.data_columns = [
            (_as_text(name), _as_text(kind).upper(), int(notnull or 0), int(pk or 0))
            for name, kind, notnull, pk in db.table_columns(DATA_TABLE)
        ]
    if METADATA_TABLE in tables and not facts.code and facts.encoding == "UTF-8":
        # Read as bytes and decode leniently: an informational record (created_by) in another
        # encoding must not make the file unreadable. NULLs count as missing records.
        rows = db.metadata_records()
        facts.metadata = {
            k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
            for k, v in rows
            if k is not None and v is not None
        }
    return facts


def shown(text: str, limit: int = 60) -> str:
    """A value from a file as a message quotes it: its repr, cut to about `limit` characters
    (a record may hold a gigabyte)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def parse_version(text: str) -> tuple[int, int]:
    match = _VERSION_RE.match(text.strip())
    # A number of more than 18 digits is no version a writer made; int() would also refuse one
    # of more than 4,300 (Python's limit on converting decimal strings), with a ValueError.
    if not match or max(len(match.group(1)), len(match.group(2))) > 18:
        raise errors.UnsupportedVersionError(
            f"sqlitestore_version is {shown(text)}, not MAJOR.MINOR; the file cannot be read"
        )
    return int(match.group(1)), int(match.group(2))


def parse_flags(text: str) -> set[str]:
    return {flag.strip() for flag in text.split(",") if flag.strip()}


# --- files of zarr-python 2's SQLiteStore ----------------------------------------------------

# zarr-python 2's zarr.storage.SQLiteStore made one table, with this statement, and nothing else
# (no metadata table, application id 0): "CREATE TABLE IF NOT EXISTS zarr(k TEXT PRIMARY KEY,
# v BLOB)". As FileFacts.data_columns has it:
ZARR2_COLUMNS = [("k", "TEXT", 0, 1), ("v", "BLOB", 0, 0)]


def zarr2_problem(facts: FileFacts) -> str | None:
    """Why the file is not one zarr-python 2's SQLiteStore wrote, or None if it is: the table
    `zarr` of exactly that shape and no other table, no SQLiteStore metadata, no application
    id, no SQL of its author on the table, text in UTF-8."""
    if facts.code:
        return f"it holds SQL that would run on its tables ({'; '.join(facts.code)})"
    if DATA_TABLE not in facts.tables:
        return f"it has no table {DATA_TABLE!r}"
    others = sorted(name for name in facts.tables if name != DATA_TABLE)
    if others:
        return f"it has other tables than {DATA_TABLE!r} ({', '.join(others)})"
    if facts.data_columns != ZARR2_COLUMNS:
        found = ", ".join(f"{name} {kind}".strip() for name, kind, _, _ in facts.data_columns)
        return (
            f"its table {DATA_TABLE!r} has the columns ({found}), not zarr 2's "
            "(k TEXT PRIMARY KEY, v BLOB)"
        )
    if _WITHOUT_ROWID_RE.search(facts.tables[DATA_TABLE]):
        return f"its table {DATA_TABLE!r} is a WITHOUT ROWID table, which zarr 2 never made"
    if facts.application_id not in (0, APPLICATION_ID):
        return f"it has the application id {facts.application_id:#010x} of another program"
    if facts.encoding != "UTF-8":
        return f"it stores its text as {facts.encoding}, not UTF-8"
    return None


def zarr2_error(path: str) -> errors.Zarr2FileError:
    """What a store says of a file of zarr-python 2's SQLiteStore."""
    return errors.Zarr2FileError(
        f"{path!r} was written by zarr-python 2's SQLiteStore (one table {DATA_TABLE!r}, no "
        f"SQLiteStore metadata): it is not a SQLiteStore 1.0 file. Convert it in place with "
        f"`zarrdb upgrade {path}` (--to-v3 also turns its zarr v2 metadata into v3), or copy it "
        f"into a new file with `zarrdb copy {path} NEW.zarrdb`; "
        "zarrdb.zarr2.Zarr2SQLiteStore reads it as it is"
    )


def validate(
    facts: FileFacts, *, path: str, writable: bool, accept_zarr2: bool = False
) -> list[str]:
    """Raise the zarrdb.errors exception that says why the file cannot be used, or return the
    warnings to show (e.g. a foreign application id in a file opened for reading).

    A file of zarr-python 2's SQLiteStore raises Zarr2FileError, unless `accept_zarr2` (a
    read-only store that reads such files as they are)."""
    notes: list[str] = []
    if not facts.has_store_tables and zarr2_problem(facts) is None:
        if accept_zarr2 and not writable:
            return notes
        raise zarr2_error(path)
    if facts.code:
        raise errors.UnsafeSchemaError(
            f"{path!r} holds SQL a SQLiteStore file may not: {'; '.join(facts.code)}. zarrdb "
            "runs no SQL from a file; if you trust it, remove these with the sqlite3 shell "
            "(DROP TRIGGER name; DROP VIEW name; DROP INDEX name; ...)"
        )
    if not facts.has_store_tables:
        if facts.is_empty:
            raise errors.NotAZarrDBError(
                f"{path!r} is empty: nothing has been written to it yet (a SQLiteStore file "
                "gets its tables when a store opened for writing first uses it)"
            )
        others = ", ".join(sorted(facts.tables))
        raise errors.NotAZarrDBError(
            f"{path!r} is an SQLite database of another application (tables: {others}); "
            f"a SQLiteStore file has the tables {METADATA_TABLE!r} and {DATA_TABLE!r}"
        )
    _check_layout(facts, path)
    missing = [k for k in REQUIRED_METADATA if k not in facts.metadata]
    if missing:
        raise errors.FormatError(
            f"{path!r} lacks the required metadata record(s) {', '.join(missing)} in "
            f"{METADATA_TABLE}; it is not a valid SQLiteStore file"
        )
    try:
        major, _minor = parse_version(facts.metadata["sqlitestore_version"])
    except errors.UnsupportedVersionError as exc:
        raise errors.UnsupportedVersionError(f"{path!r}: {exc}") from None
    if major != SUPPORTED_MAJOR:
        raise errors.UnsupportedVersionError(
            f"{path!r} is SQLiteStore version {shown(facts.metadata['sqlitestore_version'])}; "
            "this "
            f"zarrdb reads version {SUPPORTED_MAJOR}.x only (upgrade zarrdb)"
        )
    unknown = parse_flags(facts.metadata["incompatible_flags"]) - KNOWN_INCOMPATIBLE_FLAGS
    if unknown:
        raise errors.IncompatibleFlagError(
            f"{path!r} uses feature(s) this zarrdb does not implement (incompatible flags: "
            f"{shown(', '.join(sorted(unknown)), 200)}); upgrade zarrdb to read it"
        )
    if facts.application_id != APPLICATION_ID:
        message = (
            f"{path!r} has application id {facts.application_id:#010x}, not "
            f"{APPLICATION_ID:#010x} (SQLiteStore)"
        )
        if writable:
            raise errors.FormatError(message + "; refusing to write to it (open it read-only)")
        notes.append(message + "; reading it anyway")
    return notes


def _check_layout(facts: FileFacts, path: str) -> None:
    """FormatError for a file whose spec tables zarrdb cannot use as they are stored."""
    if facts.encoding != "UTF-8":
        raise errors.FormatError(
            f"{path!r} stores its text as {facts.encoding}; zarrdb reads SQLiteStore files "
            "in UTF-8 only (the encoding SQLite gives a new file by default)"
        )
    if _WITHOUT_ROWID_RE.search(facts.tables[DATA_TABLE]):
        raise errors.FormatError(
            f"{path!r}: table {DATA_TABLE} is a WITHOUT ROWID table; zarrdb reads and writes "
            "values through rowids (a SQLiteStore file made by zarrdb has them)"
        )


def warn(notes: list[str]) -> None:
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=3)
