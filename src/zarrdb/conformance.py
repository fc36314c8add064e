"""Does a file follow the SQLiteStore 1.0 spec? Checked with Python's own `sqlite3`, an SQLite
independent of zarrdb's engine, so a file the engine refuses (a damaged one) is still examined.

    report = zarrdb.conformance.check_file("data.zarrdb")
    for finding in report.findings:
        print(finding.level, finding.message)

The checks: the application id; exactly the two tables with their columns, declared types,
primary keys and BINARY key collation; the metadata records (required ones present, no unknown
ones, a version this zarrdb reads, no flags in 1.0, an RFC 3339 `modified_at`); no NULLs, keys
TEXT and values BLOB; nothing a SQLiteStore file may not hold (zarrdb._schema: triggers, views,
virtual tables, explicit indexes, generated columns); the journal mode; and SQLite's integrity
check. What the spec only
recommends is a warning. Nothing is written: the file is opened read-only.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from zarrdb import _beside, _format, _tunables, errors
from zarrdb._core import CONNECTION_LIMITS, FACT_QUERIES
from zarrdb._live_stores import open_in_this_process

__all__ = ["KEY_RULES", "Finding", "Report", "check_file", "key_problem"]


_EXPECTED_COLUMNS = {
    _format.METADATA_TABLE: (("k", "TEXT", True), ("v", "TEXT", False)),
    _format.DATA_TABLE: (("k", "TEXT", True), ("v", "BLOB", False)),
}


@dataclass(frozen=True)
class Finding:
    """One thing found: a `problem` (the spec's "must") or a `warning` (what it recommends).
    `kind` groups findings of one sort ("format", "schema", "metadata", "rows", "journal",
    "integrity", "damage")."""

    level: Literal["problem", "warning"]
    kind: str
    message: str


@dataclass
class Report:
    """The findings, and whether the file can be opened as a SQLiteStore file at all (False
    when its format or its damage rules that out)."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    readable: bool = True

    def problem(self, kind: str, message: str) -> None:
        self.findings.append(Finding("problem", kind, message))

    def warning(self, kind: str, message: str) -> None:
        self.findings.append(Finding("warning", kind, message))


KEY_RULES = _format.KEY_RULES
"""How `key_problem` ends its message for a key that breaks the spec's three key rules; any
other problem makes a key unsafe to write as a path (a `..` segment, a NUL) rather than
malformed."""


def key_problem(key: str, flavour: str = "store") -> str | None:
    """Why `key` may not be stored in a SQLiteStore file, or None if it may.

    `flavour` "posix" or "windows" asks instead whether it may be written as a file's path
    below a folder (an export to a directory or a zip file) on that kind of system."""
    reason = _format.key_problem(key, flavour)
    return None if reason is None else f"invalid key {key!r}: {reason}"


def check_file(
    path: str | os.PathLike[str], *, busy_timeout: float = _tunables.BUSY_TIMEOUT
) -> Report:
    """Check the SQLite database at `path` against the SQLiteStore 1.0 rules.

    Reads the file with Python's own `sqlite3`, read-only. A damaged file is not an error: the
    damage and SQLite's integrity findings are in the report.

    Parameters
    ----------
    path
        The file.
    busy_timeout
        Seconds to wait for another process's lock.

    Returns
    -------
    Report
        Every finding, and whether the file can be used as a SQLiteStore file at all.

    Raises
    ------
    zarrdb.errors.CantOpenError
        If the file cannot be opened.
    zarrdb.errors.NotADatabaseError
        If it is not an SQLite database.
    zarrdb.errors.NotAZarrDBError
        If it is another application's database (`Zarr2FileError`: one of zarr-python 2's
        SQLiteStore).
    zarrdb.errors.DatabaseLockedError
        If another process holds a lock longer than `busy_timeout`.
    """
    path = os.fspath(path)
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    size_problem = None
    sidecars = _beside.check(path)  # SidecarError: a -wal, -shm or -journal not the file's own
    if not open_in_this_process(path):  # reading the header here would drop a store's locks
        try:
            _beside.check_holes(path, sidecars, _beside.read_head(path), _beside.data_of(path))
        except errors.DatabaseCorruptError as exc:
            # Mostly holes: SQLite's integrity check would go through every page the length
            # claims (a bit of memory each, 134 MB for a sparse TiB), to say as much.
            report = Report(path)
            report.readable = False
            report.problem("damage", f"damaged: {exc}")
            return report
        try:
            _beside.check_header(path, sidecars, lambda: _beside.read_head(path))
        except errors.DatabaseCorruptError as exc:  # its size is not what its header says
            size_problem = str(exc)
    try:
        con = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None)
    except sqlite3.Error as exc:
        raise errors.CantOpenError(f"{path}: cannot be opened ({exc})", filename=path) from None
    report = Report(path)
    if size_problem is not None:
        report.problem("damage", f"damaged: {size_problem}")
    try:
        db = _Connection(con)
        try:
            facts = _format.read_facts(db)
        except sqlite3.DatabaseError as exc:
            _raise_unusable(path, exc, busy_timeout)
            report.readable = False
            report.problem(
                "damage", f"damaged: SQLite cannot read the file's schema or metadata ({exc})"
            )
            _integrity(db, report)
            return report
        for code in facts.code:
            report.problem(
                "schema", f"schema: {code} (SQL of the file's author; zarrdb refuses the file)"
            )
        try:
            for note in _format.validate(facts, path=path, writable=False):
                report.problem("format", f"format: {note.replace('; reading it anyway', '')}")
        except errors.UnsafeSchemaError:
            report.readable = False
        except errors.Zarr2FileError:
            raise  # names the commands that convert it
        except errors.NotAZarrDBError:
            raise errors.NotAZarrDBError(
                f"{path}: is not a .zarrdb file (an SQLite database without the SQLiteStore tables)"
            ) from None
        except errors.FormatError as exc:
            report.problem("format", f"format: {exc}")
            report.readable = False
        # Reading rows through a generated column or a view would run the file's SQL.
        checks_to_run = (_schema_checks, _metadata_checks) + (() if facts.code else (_row_checks,))
        for checks in checks_to_run:
            try:
                checks(db, facts, report)
            except sqlite3.DatabaseError as exc:
                _raise_unusable(path, exc, busy_timeout)
                report.problem("damage", f"damaged: SQLite cannot read the file through ({exc})")
        _integrity(db, report)
        _journal_checks(db, path, report)
    finally:
        con.close()
    return report


def _raise_unusable(path: str, exc: sqlite3.DatabaseError, busy_timeout: float) -> None:
    """Raise what makes checking impossible (a lock, not a database, a hot journal that a
    read-only connection cannot roll back), built as the engine builds SQLite's errors
    (errors.sqlite_error); return on damage."""
    extended = getattr(exc, "sqlite_errorcode", 0)
    code = extended & 0xFF
    if extended == errors.SQLITE_READONLY_ROLLBACK:
        context = ""
    elif code in (errors.SQLITE_BUSY, errors.SQLITE_LOCKED):
        context = f"cannot check: gave up after waiting {busy_timeout:g} s for a lock on"
    elif code == errors.SQLITE_NOTADB:
        context = "cannot check"
    else:
        return
    raise errors.sqlite_error(
        extended, extended, str(exc), filename=path, context=context
    ) from None


class _Connection:
    """What `_format.read_facts` needs (pragma and the statements of the engine's FACT_QUERIES)
    over Python's own sqlite3, with statements that Ctrl-C and SIGTERM interrupt: every
    _tunables.CHECK_PROGRESS_STEPS steps SQLite calls a Python function, at whose start Python
    runs its signal handlers. What a handler raises there stops the statement (sqlite3 drops
    the exception and reports SQLITE_INTERRUPT), and execute() raises KeyboardInterrupt in its
    place: nothing else interrupts this connection."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        con.set_progress_handler(_keep_going, _tunables.CHECK_PROGRESS_STEPS)
        # The engine's limits, before anything parses the file's schema.
        for name, (_, value) in CONNECTION_LIMITS.items():
            con.setlimit(getattr(sqlite3, f"SQLITE_LIMIT_{name}"), value)
        # As the engine's connections: SQL stored in the file may call only harmless functions.
        con.execute("PRAGMA trusted_schema = OFF")
        if sys.version_info >= (3, 12):  # Connection.setconfig
            con.setconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE, True)

    def pragma(self, name: str) -> Any:
        rows = self.execute(f"PRAGMA {name}")
        return rows[0][0] if rows else None

    # What `_format.read_facts` reads, with the engine's statements.
    def schema_objects(self) -> list[tuple[Any, ...]]:
        return self.execute(FACT_QUERIES["schema_objects"])

    def table_columns(self, table: str) -> list[tuple[Any, ...]]:
        return self.execute(FACT_QUERIES["table_columns"], (table,))

    def column_kinds(self, table: str) -> list[tuple[Any, ...]]:
        return self.execute(FACT_QUERIES["column_kinds"], (table,))

    def index_computes_expression(self, index: str) -> bool:
        return bool(self.execute(FACT_QUERIES["index_expression"], (index,)))

    def index_is_partial(self, table: str, index: str) -> bool:
        return bool(self.execute(FACT_QUERIES["index_partial"], (table, index)))

    def metadata_records(self) -> list[tuple[Any, ...]]:
        return self.execute(FACT_QUERIES["metadata_records"])

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.con.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == errors.SQLITE_INTERRUPT:
                raise KeyboardInterrupt from None
            raise


def _keep_going() -> int:
    return 0


def _integrity(db: _Connection, report: Report) -> None:
    """SQLite's own integrity check, one finding per line it reports."""
    try:
        rows = [str(row[0]) for row in db.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        report.problem("integrity", f"integrity: SQLite's integrity check cannot run ({exc})")
        return
    if rows == ["ok"]:
        return
    # A row may hold several findings, one a line, under a "*** in database main ***" heading.
    for line in (line for row in rows for line in row.splitlines()):
        if line.strip() and not line.startswith("***"):
            report.problem("integrity", f"integrity: {line.strip()}")


def _journal_checks(db: _Connection, path: str, report: Report) -> None:
    mode = str(db.pragma("journal_mode")).lower()
    if mode != "delete":
        report.warning(
            "journal",
            f"journal mode: the file is in {mode.upper()} mode; the spec recommends DELETE "
            "(a writer may have it open now, or it was not closed cleanly)",
        )
    wal = path + "-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        report.warning(
            "journal",
            f"journal mode: {wal} holds changes not yet in the file (the file is not "
            "self-contained until a writer checkpoints it)",
        )


def _schema_checks(db: _Connection, facts: _format.FileFacts, report: Report) -> None:
    others = sorted(
        t for t in facts.tables if t not in _EXPECTED_COLUMNS and not t.startswith("sqlite_")
    )
    for table in others:
        report.problem(
            "schema",
            f"schema: extra table {table!r} (a SQLiteStore file has exactly the tables "
            f"{_format.METADATA_TABLE!r} and {_format.DATA_TABLE!r})",
        )
    for table, expected in _EXPECTED_COLUMNS.items():
        if table not in facts.tables:
            continue
        columns = db.execute(f'PRAGMA table_info("{table}")')
        names = [c[1] for c in columns]
        wanted = [name for name, _, _ in expected]
        if names != wanted:
            report.problem(
                "schema", f"schema: table {table!r} has the columns {names}, not {wanted}"
            )
            continue
        for (_, name, decl, notnull, _, pk), (_, want, want_pk) in zip(columns, expected):
            if decl.upper() != want:
                report.problem(
                    "schema",
                    f"schema: column {table}.{name} is declared {decl or 'untyped'!r}, not {want}",
                )
            if bool(pk) != want_pk:
                report.problem(
                    "schema",
                    f"schema: column {table}.{name} "
                    + ("is not the primary key" if want_pk else "is part of the primary key"),
                )
            if not notnull:
                report.warning(
                    "schema",
                    f"schema: column {table}.{name} lacks NOT NULL (the spec recommends it)",
                )
        for _, index, _, origin, _ in db.execute(f'PRAGMA index_list("{table}")'):
            if origin != "pk":
                continue
            for row in db.execute(f'PRAGMA index_xinfo("{index}")'):
                if row[1] == 0 and row[4] and str(row[4]).upper() != "BINARY":
                    report.problem(
                        "schema",
                        f"schema: keys of {table!r} compare with collation {row[4]}, not BINARY",
                    )


def _metadata_checks(db: _Connection, facts: _format.FileFacts, report: Report) -> None:
    if _format.METADATA_TABLE not in facts.tables:
        return
    meta = facts.metadata
    for key in sorted(set(meta) - set(_format.KNOWN_METADATA)):
        report.problem(
            "metadata",
            f"metadata: unknown record {_format.shown(key)} in {_format.METADATA_TABLE} "
            "(writers must not add records the spec does not describe)",
        )
    if meta.get("sqlitestore_version", "") == "1.0":
        for name in ("compatible_flags", "incompatible_flags"):
            if meta.get(name, "") != "":
                report.problem(
                    "metadata",
                    f"metadata: {name} is {_format.shown(meta[name])}; SQLiteStore 1.0 defines "
                    "no flags, so it must be ''",
                )
    else:
        flags = _format.parse_flags(meta.get("compatible_flags", ""))
        unknown = flags - _format.KNOWN_COMPATIBLE_FLAGS
        if unknown:
            report.warning(
                "metadata",
                "metadata: unknown compatible flags "
                f"{_format.shown(', '.join(sorted(unknown)), 200)} (ignored)",
            )
    modified = meta.get("modified_at")
    if modified is None:
        return
    if _format.parse_timestamp(modified) is None:
        report.problem(
            "metadata",
            f"metadata: modified_at {_format.shown(modified)} is not an RFC 3339 timestamp",
        )
    elif not modified.endswith("Z"):
        report.warning(
            "metadata",
            f"metadata: modified_at {_format.shown(modified)} is not in UTC with a trailing 'Z' "
            "(the spec recommends it)",
        )


def _row_checks(db: _Connection, facts: _format.FileFacts, report: Report) -> None:
    checks = (
        (_format.METADATA_TABLE, "k IS NULL OR v IS NULL", "rows with NULL"),
        (
            _format.METADATA_TABLE,
            "typeof(k) != 'text' OR typeof(v) != 'text'",
            "records that are not TEXT",
        ),
        (_format.DATA_TABLE, "k IS NULL OR v IS NULL", "rows with a NULL key or value"),
        (_format.DATA_TABLE, "typeof(k) != 'text'", "keys that are not TEXT"),
        (_format.DATA_TABLE, "v IS NOT NULL AND typeof(v) != 'blob'", "values that are not BLOBs"),
    )
    for table, where, what in checks:
        if table not in facts.tables:
            continue
        rows = db.execute(f'SELECT count(*), quote(min(k)) FROM "{table}" WHERE {where}')
        count, example = rows[0]
        if count:
            report.problem("rows", f"rows: {table!r} has {count:,} {what} (e.g. key {example})")
