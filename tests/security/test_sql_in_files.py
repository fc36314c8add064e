"""SQL stored in a hostile file must never run on zarrdb's reads or writes (issue 23, items 4
and 5): triggers, views, generated columns, virtual tables and expression or partial indexes
on the SQLiteStore tables are refused when a file is opened, and `zarrdb check` reports each.
Every connection runs with SQLite's defensive mode and `trusted_schema` off.

Also kept: a file with a `zarr` view, a WITHOUT ROWID table, a NOCASE or RTRIM key collation,
or UTF-16 text is refused (or, for `check`, flagged)."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest
from zarr.core.buffer import cpu

from cli.helpers import run
from format import builders
from zarrdb import SQLiteStore, errors
from zarrdb._core import Database

DEADBEEF = bytes.fromhex("DEADBEEF")

# Each rewrites or burns what zarrdb's own statements touch. (name, SQL, what the refusal names)
CODE = {
    "trigger": (
        "CREATE TRIGGER poison AFTER INSERT ON zarr "
        "BEGIN UPDATE zarr SET v = x'DEADBEEF' WHERE k = NEW.k; END",
        "trigger 'poison' on table zarr",
    ),
    "endless trigger": (
        "CREATE TABLE sink(x); "
        "CREATE TRIGGER forever AFTER INSERT ON zarr BEGIN INSERT INTO sink SELECT x FROM "
        "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c); END",
        "trigger 'forever' on table zarr",
    ),
    "metadata trigger": (
        "CREATE TRIGGER stamp AFTER UPDATE ON zarr_sqlitestore_metadata "
        "BEGIN UPDATE zarr SET v = x'DEADBEEF'; END",
        "trigger 'stamp' on table zarr_sqlitestore_metadata",
    ),
    "expression index": (
        "CREATE INDEX burn ON zarr(length(printf('%.*c', 100000000, 'x')))",
        "index 'burn' on table zarr computes an expression",
    ),
    "partial index": (
        "CREATE INDEX part ON zarr(k) WHERE length(printf('%.*c', 100000000, 'x')) > 0",
        "index 'part' on table zarr has a WHERE clause",
    ),
}

# A generated value column: reading any value formats 100 MB (issue 23, item 5).
GENERATED_SCHEMA = """
CREATE TABLE zarr_sqlitestore_metadata (k TEXT PRIMARY KEY NOT NULL, v TEXT NOT NULL);
CREATE TABLE zarr (
    k TEXT PRIMARY KEY NOT NULL,
    v BLOB GENERATED ALWAYS AS (printf('%.*c', 100000000, 'x')) VIRTUAL
);
"""


def _plain_file(path: Path) -> Path:
    return builders.make_store_file(path)


def _with_sql(path: Path, sql: str) -> Path:
    """A sound SQLiteStore file, then `sql` added by its author."""
    builders.make_store_file(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.executescript(sql)
    finally:
        con.close()
    return path


def _generated(path: Path) -> Path:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute(f"PRAGMA application_id = {builders.APPLICATION_ID}")
        con.executescript(GENERATED_SCHEMA)
        con.executemany(
            "INSERT INTO zarr_sqlitestore_metadata VALUES (?, ?)",
            list(builders.REQUIRED_METADATA.items()),
        )
        con.executemany("INSERT INTO zarr(k) VALUES (?)", [("zarr.json",), ("a/c/0",)])
    finally:
        con.close()
    return path


def _rows(path: Path) -> list[tuple[str, bytes]]:
    """The zarr table as the file holds it, read with the standard-library sqlite3."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT k, v FROM zarr ORDER BY k").fetchall()
    finally:
        con.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- refused at open --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(CODE))
@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read"])
def test_code_on_the_spec_tables_is_refused_at_open(tmp_path, kind, read_only):
    sql, named = CODE[kind]
    path = _with_sql(tmp_path / "hostile.zarrdb", sql)
    before = _digest(path)
    with pytest.raises(errors.FormatError, match=named) as caught:
        SQLiteStore(path, read_only=read_only).ensure_open()
    assert type(caught.value).__name__ == "UnsafeSchemaError"
    assert str(path) in str(caught.value)
    assert _digest(path) == before


def test_generated_value_column_is_refused_at_open_promptly(tmp_path):
    path = _generated(tmp_path / "generated.zarrdb")
    started = time.monotonic()
    with pytest.raises(errors.FormatError, match="generated column 'v' in table zarr"):
        SQLiteStore(path, read_only=True).ensure_open()
    assert time.monotonic() - started < 1.0


def test_virtual_zarr_table_is_refused(tmp_path):
    path = tmp_path / "virtual.zarrdb"
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute(f"PRAGMA application_id = {builders.APPLICATION_ID}")
        con.execute(
            "CREATE TABLE zarr_sqlitestore_metadata (k TEXT PRIMARY KEY NOT NULL, v TEXT NOT NULL)"
        )
        try:
            con.execute("CREATE VIRTUAL TABLE zarr USING fts4(k, v)")
        except sqlite3.OperationalError:  # pragma: no cover - a Python without FTS4
            pytest.skip("this Python's sqlite3 has no FTS4 to build the file with")
        con.executemany(
            "INSERT INTO zarr_sqlitestore_metadata VALUES (?, ?)",
            list(builders.REQUIRED_METADATA.items()),
        )
    finally:
        con.close()
    with pytest.raises(errors.FormatError, match="'zarr' is a virtual table"):
        SQLiteStore(path, read_only=True).ensure_open()


def test_code_on_other_tables_is_refused_too(tmp_path):
    """No writer of the format makes triggers, views or generated columns, on any table: a
    file holding one is refused whatever it is attached to (issue 37; they were once allowed
    on tables of other data, which readers ignore)."""
    path = _with_sql(
        tmp_path / "other.zarrdb",
        "CREATE TABLE notes(a, b GENERATED ALWAYS AS (a * 2)); "
        "CREATE TRIGGER t AFTER INSERT ON notes BEGIN SELECT 1; END; "
        "CREATE VIEW recent AS SELECT * FROM notes",
    )
    with pytest.raises(errors.UnsafeSchemaError) as caught:
        SQLiteStore(path).ensure_open()
    for named in ("generated column 'b' in table notes", "trigger 't' on table notes",
                  "view 'recent'"):  # fmt: skip
        assert named in str(caught.value)


# --- the command line -------------------------------------------------------------------------


def test_copy_into_a_file_with_a_trigger_refuses_and_writes_nothing(tmp_path):
    source = _plain_file(tmp_path / "source.zarrdb")
    hostile = _with_sql(tmp_path / "hostile.zarrdb", CODE["trigger"][0])
    before = _rows(hostile)
    proc = run("copy", source, hostile, "--dest-path", "incoming", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "trigger 'poison' on table zarr" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert _rows(hostile) == before
    assert not any(v == DEADBEEF for _, v in _rows(hostile))


def test_mv_in_a_file_with_a_trigger_refuses_and_writes_nothing(tmp_path):
    hostile = _with_sql(
        tmp_path / "hostile.zarrdb",
        "CREATE TRIGGER poison AFTER UPDATE ON zarr BEGIN UPDATE zarr SET v = x'DEADBEEF'; END; "
        "CREATE TRIGGER poison2 AFTER DELETE ON zarr BEGIN UPDATE zarr SET v = x'DEADBEEF'; END",
    )
    before = _digest(hostile)
    proc = run("mv", hostile, "a", "b", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "trigger 'poison' on table zarr" in proc.stderr
    assert _digest(hostile) == before


def test_endless_trigger_makes_copy_refuse_promptly(tmp_path):
    source = _plain_file(tmp_path / "source.zarrdb")
    hostile = _with_sql(tmp_path / "hostile.zarrdb", CODE["endless trigger"][0])
    started = time.monotonic()
    proc = run("copy", source, hostile, "--dest-path", "incoming", timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "trigger 'forever' on table zarr" in proc.stderr
    assert time.monotonic() - started < 15


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_check_reports_each_piece_of_code(tmp_path, quick):
    hostile = _with_sql(
        tmp_path / "hostile.zarrdb", CODE["trigger"][0] + "; " + CODE["endless trigger"][0]
    )
    proc = run("check", hostile, *(["--quick"] if quick else []), timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "trigger 'poison' on table zarr" in proc.stdout
    if not quick:  # the full check lists each, and still runs SQLite's integrity check
        assert "trigger 'forever' on table zarr" in proc.stdout
        assert "problem(s)" in proc.stdout
    assert proc.stdout.strip() != "ok"


def test_info_and_check_on_a_generated_value_column_end_promptly(tmp_path):
    path = _generated(tmp_path / "generated.zarrdb")
    started = time.monotonic()
    info = run("info", path, timeout=60)
    assert info.returncode == 2, info.stdout + info.stderr
    assert "generated column 'v' in table zarr" in info.stderr
    check = run("check", path, timeout=60)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "generated column 'v' in table zarr" in check.stdout
    assert time.monotonic() - started < 15


# --- every connection is defensive and distrusts the schema -----------------------------------


def test_engine_connections_are_defensive_and_distrust_the_schema(tmp_path):
    path = _plain_file(tmp_path / "plain.zarrdb")
    for mode in ("r", "w"):
        db = Database(str(path), mode=mode)
        try:
            assert db.pragma("trusted_schema") == 0
            if mode == "w":
                # Defensive mode: the schema cannot be rewritten through writable_schema.
                db.execute("PRAGMA writable_schema = ON")
                with pytest.raises(errors.SQLiteError, match="may not be modified"):
                    db.execute("UPDATE sqlite_schema SET sql = sql WHERE name = 'zarr'")
        finally:
            db.close()


# --- also kept: shapes of the spec's tables zarrdb refuses or flags ---------------------------


def _spec_tables(path: Path, zarr_sql: str, *, encoding: str | None = None) -> Path:
    """A file with the metadata table as the spec has it, `zarr_sql` for the data table, and
    the tiny hierarchy's rows."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        if encoding:
            con.execute(f"PRAGMA encoding = '{encoding}'")
        con.execute(f"PRAGMA application_id = {builders.APPLICATION_ID}")
        con.execute(
            "CREATE TABLE zarr_sqlitestore_metadata (k TEXT PRIMARY KEY NOT NULL, v TEXT NOT NULL)"
        )
        con.executescript(zarr_sql)
        con.executemany(
            "INSERT INTO zarr_sqlitestore_metadata VALUES (?, ?)",
            list(builders.REQUIRED_METADATA.items()),
        )
        if not zarr_sql.startswith("CREATE TABLE hidden"):
            rows = builders.hand_written_entries().items()
            con.executemany("INSERT INTO zarr VALUES (?, ?)", rows)
    finally:
        con.close()
    return path


def test_a_zarr_view_is_refused(tmp_path):
    path = _spec_tables(
        tmp_path / "view.zarrdb",
        "CREATE TABLE hidden (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL); "
        "CREATE VIEW zarr AS SELECT k, x'DEADBEEF' AS v FROM hidden",
    )
    with pytest.raises(errors.FormatError, match="'zarr' is a view"):
        SQLiteStore(path, read_only=True).ensure_open()
    proc = run("check", path, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "schema: 'zarr' is a view, not a table" in proc.stdout


@pytest.mark.parametrize("collation", ["NOCASE", "RTRIM"])
def test_a_key_collation_other_than_binary_is_flagged(tmp_path, collation):
    path = _spec_tables(
        tmp_path / f"{collation}.zarrdb",
        f"CREATE TABLE zarr (k TEXT PRIMARY KEY COLLATE {collation} NOT NULL, v BLOB NOT NULL)",
    )
    proc = run("check", path, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"compare with collation {collation}, not BINARY" in proc.stdout


@pytest.mark.parametrize(
    "name, zarr_sql, encoding, named",
    [
        (
            "without-rowid",
            "CREATE TABLE zarr (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID",
            None,
            "table zarr is a WITHOUT ROWID table",
        ),
        (
            "utf-16",
            "CREATE TABLE zarr (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)",
            "UTF-16le",
            "stores its text as UTF-16le; zarrdb reads SQLiteStore files in UTF-8 only",
        ),
    ],
)
def test_a_layout_zarrdb_cannot_use_is_refused_naming_it(tmp_path, name, zarr_sql, encoding, named):
    """A WITHOUT ROWID data table and a UTF-16 file are refused with a FormatError that says
    so (not "no such column: rowid", not "lacks the required metadata"), and `check` lists it
    as the file's problem."""
    path = _spec_tables(tmp_path / f"{name}.zarrdb", zarr_sql, encoding=encoding)
    for read_only in (True, False):
        with pytest.raises(errors.FormatError, match=named):
            SQLiteStore(path, read_only=read_only).ensure_open()
    proc = run("check", path, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert named in proc.stdout
