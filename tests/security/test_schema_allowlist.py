"""One list of what a file may contain (issue 37, finding 2).

The check of a file's schema compared sqlite_schema's tbl_name with the SQLiteStore tables'
names case-sensitively, while SQLite matches names case-insensitively: a trigger `ON ZARR`
passed, then ran on zarrdb's writes (`copy --dest-path` had its chunks overwritten with
DEADBEEF), and `check` said ok. Now a file may hold the spec's two tables, their automatic
indexes and other plain tables, nothing else: every trigger, view, virtual table, explicit index
and generated column is refused at open, whatever it is attached to and however it is spelled;
and no engine connection runs a trigger program at all (SQLITE_LIMIT_TRIGGER_DEPTH = 0)."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli.helpers import run
from format import builders
from zarrdb import SQLiteStore, errors

DEADBEEF = bytes.fromhex("DEADBEEF")

# Every way SQLite accepts to name a table: ASCII case, the three kinds of quotes (and
# backticks), a `main.` prefix, quoted or not.
SPELLINGS = {
    "zarr": ["ZARR", "Zarr", '"ZARR"', "[Zarr]", "`zArR`", "main.ZARR", 'main."Zarr"',
             '"main".[ZARR]', "MAIN.`zarr`", '"zarr"', "main.zarr"],
    "zarr_sqlitestore_metadata": [
        "ZARR_SQLITESTORE_METADATA", "Zarr_SQLiteStore_Metadata", '"ZARR_sqlitestore_metadata"',
        "[Zarr_SQLiteStore_Metadata]", "`ZARR_SQLITESTORE_METADATA`",
        "main.Zarr_SQLiteStore_Metadata", 'Main."ZARR_SQLITESTORE_METADATA"',
    ],
}  # fmt: skip
NAMED = [(table, spelled) for table, names in SPELLINGS.items() for spelled in names]


def _with_sql(path: Path, *statements: str) -> Path:
    """A sound SQLiteStore file, then `statements` added by its author."""
    builders.make_store_file(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            con.execute(statement)
    finally:
        con.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rows(path: Path) -> dict[str, bytes]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(con.execute("SELECT k, v FROM zarr"))
    finally:
        con.close()


def _refused(path: Path, named: str) -> None:
    before = _digest(path)
    for read_only in (True, False):
        with pytest.raises(errors.UnsafeSchemaError, match=named):
            SQLiteStore(path, read_only=read_only).ensure_open()
    assert _digest(path) == before


@pytest.mark.parametrize(("table", "spelled"), NAMED)
def test_a_trigger_however_its_table_is_spelled_is_refused(tmp_path, table, spelled):
    path = _with_sql(
        tmp_path / "hostile.zarrdb",
        f"CREATE TRIGGER poison AFTER INSERT ON {spelled} "
        "BEGIN UPDATE zarr SET v = x'DEADBEEF'; END",
    )
    _refused(path, "trigger 'poison' on table")


@pytest.mark.parametrize(
    ("index", "spelled"),
    [("burn", "ZARR"), ("burn", '"ZARR"'), ("burn", "[Zarr]"), ("main.burn", "Zarr"),
     ('MAIN."burn"', "`Zarr_SQLiteStore_Metadata`")],
)  # fmt: skip
def test_an_index_on_a_spec_table_however_spelled_is_refused(tmp_path, index, spelled):
    path = _with_sql(
        tmp_path / "hostile.zarrdb",
        f"CREATE INDEX {index} ON {spelled}(length(printf('%.*c', 100000000, 'x')))",
    )
    _refused(path, "index 'burn' on table")


OTHER_OBJECTS = {
    "plain index on zarr": ("CREATE INDEX by_value ON zarr(v)", "index 'by_value' on table zarr"),
    "view": ("CREATE VIEW everything AS SELECT * FROM zarr", "view 'everything'"),
    "view spelled in caps": ('CREATE VIEW "Listing" AS SELECT k FROM ZARR', "view 'Listing'"),
    "trigger on another table": (
        "CREATE TRIGGER relay AFTER INSERT ON notes BEGIN UPDATE zarr SET v = x'DEADBEEF'; END",
        "trigger 'relay' on table notes",
    ),
    "index on another table": ("CREATE INDEX by_a ON notes(a)", "index 'by_a' on table notes"),
    "generated column in another table": (
        "CREATE TABLE derived(a, b AS (a * 2))",
        "generated column 'b' in table derived",
    ),
    "virtual table (rtree)": (
        "CREATE VIRTUAL TABLE spatial USING rtree(id, x0, x1)",
        "virtual table 'spatial'",
    ),
    "virtual table (fts5)": ("CREATE VIRTUAL TABLE words USING fts5(k)", "virtual table 'words'"),
}


@pytest.mark.parametrize("kind", sorted(OTHER_OBJECTS))
def test_anything_but_plain_tables_is_refused(tmp_path, kind):
    statement, named = OTHER_OBJECTS[kind]
    path = _with_sql(tmp_path / "hostile.zarrdb", "CREATE TABLE notes(a)", statement)
    _refused(path, named)


def test_a_schema_row_whose_type_lies_is_refused(tmp_path):
    """A trigger stored as a "table" row: refused, by SQLite itself (a malformed schema) or
    by the check, which reads each statement's kind and not only the row's `type`."""
    path = _with_sql(
        tmp_path / "hostile.zarrdb",
        "CREATE TABLE disguise(a)",
        "PRAGMA writable_schema = ON",
        "UPDATE sqlite_schema SET rootpage = 0, sql = 'CREATE TRIGGER disguise AFTER INSERT ON "
        "ZARR BEGIN UPDATE zarr SET v = x''DEADBEEF''; END' WHERE name = 'disguise'",
    )
    before = _digest(path)
    for read_only in (True, False):
        with pytest.raises((errors.UnsafeSchemaError, errors.DatabaseCorruptError)):
            SQLiteStore(path, read_only=read_only).ensure_open()
    assert _digest(path) == before


def test_plain_other_tables_and_their_automatic_indexes_are_allowed(tmp_path):
    """The spec lets a file hold other tables, which readers ignore."""
    path = _with_sql(
        tmp_path / "other.zarrdb",
        "CREATE TABLE notes(id INTEGER PRIMARY KEY AUTOINCREMENT, tag TEXT UNIQUE, body)",
        "CREATE TABLE 'Notes 2'(a TEXT PRIMARY KEY, b) WITHOUT ROWID",
        "INSERT INTO notes(tag, body) VALUES ('a', 'b')",
    )
    with SQLiteStore(path) as store:
        from zarr.core.buffer import cpu

        store.set_sync("a/c/1", cpu.Buffer.from_bytes(b"new!"))
    assert _rows(path)["a/c/1"] == b"new!"


# --- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize("spelled", ["ZARR", "main.Zarr", "`ZARR_SQLITESTORE_METADATA`"])
def test_copy_into_a_file_with_a_trigger_spelled_otherwise_refuses(tmp_path, spelled):
    source = builders.make_store_file(tmp_path / "source.zarrdb")
    hostile = _with_sql(
        tmp_path / "hostile.zarrdb",
        f"CREATE TRIGGER poison AFTER INSERT ON {spelled} "
        "BEGIN UPDATE zarr SET v = x'DEADBEEF'; END",
    )
    before = _rows(hostile)
    proc = run("copy", source, hostile, "--dest-path", "incoming", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "trigger 'poison' on table" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert _rows(hostile) == before
    assert DEADBEEF not in _rows(hostile).values()


@pytest.mark.parametrize(
    "statement, named",
    [
        ("CREATE TRIGGER poison AFTER INSERT ON ZARR BEGIN SELECT 1; END", "trigger 'poison'"),
        ("CREATE VIEW everything AS SELECT * FROM zarr", "view 'everything'"),
        ("CREATE VIRTUAL TABLE spatial USING rtree(id, x0, x1)", "virtual table 'spatial'"),
    ],
)
def test_check_reports_them_and_does_not_say_ok(tmp_path, statement, named):
    path = _with_sql(tmp_path / "hostile.zarrdb", statement)
    proc = run("check", path, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert named in proc.stdout
    assert proc.stdout.strip() != "ok"
    for command in ("info", "tree"):
        proc = run(command, path, timeout=60)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert named in proc.stderr


# --- no trigger ever runs on an engine connection ---------------------------------------------


PLANTED_AFTER_OPEN = textwrap.dedent(
    """
    import sqlite3, sys
    from zarr.core.buffer import cpu
    from zarrdb import SQLiteStore, errors

    store = SQLiteStore(sys.argv[1])
    store.set_sync("a/c/1", cpu.Buffer.from_bytes(b"one"))
    # Another program adds an endless trigger while the store is open (after its check).
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute(
        "CREATE TRIGGER forever AFTER INSERT ON ZARR BEGIN SELECT count(*) FROM "
        "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c); END"
    )
    con.close()
    try:
        store.set_sync("a/c/2", cpu.Buffer.from_bytes(b"two"))
    except errors.ZarrDBError as exc:
        print("refused:", exc)
    else:
        print("written")
    store.close()
    """
)


def test_a_trigger_planted_after_open_never_runs(tmp_path):
    """The writer's statement fails at once (trigger depth 0) instead of running the
    trigger, which here would never end."""
    path = builders.make_store_file(tmp_path / "plain.zarrdb")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PLANTED_AFTER_OPEN, str(path)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the write ran the planted trigger (still running after 30 s)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "refused: " in proc.stdout and "trigger" in proc.stdout, proc.stdout
    assert "a/c/2" not in _rows(path)
