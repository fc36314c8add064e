"""What a SQLiteStore file may contain, as one list checked at open.

A file may hold the spec's two tables (with the columns k and v and nothing computed), the
indexes SQLite makes by itself for a table's PRIMARY KEY or UNIQUE constraints
(sqlite_autoindex_*), SQLite's own tables (sqlite_sequence, sqlite_stat1, ...) and other plain
tables, which readers ignore. Nothing else: no trigger, view, virtual table, explicit index or
generated column, whatever it is attached to and however its names are spelled. No writer of
the format makes any of them, and each is SQL of the file's author that SQLite would run on
zarrdb's statements, or could once something refers to it.

Names compare as SQLite compares them: case-insensitively for ASCII letters only, after
SQLite has removed quotes ("", [], ``) and a `main.` prefix, which is why the check reads
sqlite_schema's name and tbl_name columns (stored without them) and never the statement text
for names. The statement text is read only for its kind (CREATE TABLE, CREATE VIRTUAL TABLE,
...): SQLite builds an object from the text of a schema row, whatever the row's `type` says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Queries(Protocol):
    """What the check needs of a connection (zarrdb._core.Database has each)."""

    def column_kinds(self, table: str) -> list[tuple[Any, ...]]: ...
    def index_computes_expression(self, index: str) -> bool: ...
    def index_is_partial(self, table: str, index: str) -> bool: ...


# SQLite folds the 26 ASCII letters only (sqlite3StrICmp); "ＺＡＲＲ" is another name than "zarr".
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# What follows CREATE in a schema statement: SQLite skips spaces and comments between tokens.
_GAP = r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$))*"
_KIND_RE = re.compile(
    rf"^create{_GAP}(?:(temp|temporary){_GAP})?(?:(unique){_GAP})?(virtual{_GAP}table|\w+)",
    re.IGNORECASE | re.DOTALL,
)


def fold(name: str) -> str:
    """`name` as SQLite compares it with another."""
    return name.translate(_ASCII_LOWER)


def statement_kind(sql: str) -> str:
    """What a schema row's statement creates, in lower case ("table", "virtual table",
    "index", "view", "trigger"), or "" when it is not a CREATE statement SQLite would run."""
    match = _KIND_RE.match(sql)
    if not match or match.group(1):  # a TEMP object has no place in a file's schema
        return ""
    made = match.group(3).lower()
    return "virtual table" if made.startswith("virtual") else made


def problems(
    db: Queries, schema: Sequence[tuple[str, ...]], spec_columns: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """What in `schema` (sqlite_schema's type, name, tbl_name, sql; sql "" for none) a file
    may not contain, one description each: [] for a file zarrdb may use. `spec_columns` maps
    each spec table's name (lower case) to its column names."""
    found = []
    for kind, name, table, sql in schema:
        made = statement_kind(sql) if sql else ""
        if kind == "table" and made == "table":
            found += _table_problems(db, name, spec_columns)
        elif kind == "table" and made == "virtual table":
            found.append(_in_place_of(name, "virtual table", spec_columns))
        elif kind == "index" and not sql and fold(name).startswith("sqlite_autoindex_"):
            continue  # SQLite's own index of a PRIMARY KEY or UNIQUE constraint
        elif kind == "index":
            found.append(_index_problem(db, name, table))
        elif kind == "trigger":
            found.append(f"trigger {name!r} on table {table}")
        elif kind == "view":
            found.append(_in_place_of(name, "view", spec_columns))
        else:
            found.append(f"{kind or 'object'} {name!r} made by {(made or 'unknown SQL')!r}")
    return found


def _in_place_of(name: str, what: str, spec_columns: Mapping[str, tuple[str, ...]]) -> str:
    if fold(name) in spec_columns:
        return f"{name!r} is a {what}, not a table"
    return f"{what} {name!r}"


def _table_problems(
    db: Queries, name: str, spec_columns: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """A table's columns: none computed (hidden 2 and 3: VIRTUAL and STORED generated
    columns) in any table, and only the spec's in a spec table (a column of its own would get
    its DEFAULT computed on every insert of zarrdb's)."""
    columns = db.column_kinds(name)
    found = [
        f"generated column {column!r} in table {name}"
        for column, hidden in columns
        if hidden in (2, 3)
    ]
    wanted = spec_columns.get(fold(name))
    if wanted is not None:
        extra = [str(c) for c, hidden in columns if fold(str(c)) not in wanted and hidden == 0]
        if extra:
            found.append(
                f"table {name} has the column(s) {', '.join(map(repr, extra))} besides "
                f"{' and '.join(wanted)}"
            )
    return found


def _index_problem(db: Queries, name: str, table: str) -> str:
    """An explicit index: the spec's tables have only their primary key's."""
    described = f"index {name!r} on table {table}"
    if db.index_computes_expression(name):
        return described + " computes an expression"
    if db.index_is_partial(table, name):
        return described + " has a WHERE clause"
    return described + " (no writer of the format makes one)"
