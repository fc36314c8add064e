"""A schema that nests an expression 150,000 deep (issue 37, finding 1).

The build had removed SQLite's expression-depth limit (SQLITE_MAX_EXPR_DEPTH=0): a 320 KB file
whose schema holds such an expression (a view, a trigger of another table, a partial index, a
DEFAULT, a generated column) overflowed the C stack while SQLite parsed the schema at open, and
every process opening it died of SIGSEGV. The build keeps a ceiling and every connection runs
with the run-time limits of `zarrdb._core.CONNECTION_LIMITS`; the file is refused cleanly.

Each open runs in a subprocess, so a crash fails the test instead of ending pytest."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cli.helpers import run
from format import builders
from zarrdb import _core
from zarrdb._core import Database

TERMS = 150_000
DEEP = "+".join(["1"] * TERMS)  # a left-deep tree of 150,000 additions

# Where an expression can stand in a schema: (a placeholder CREATE that the standard-library
# sqlite3 accepts, the statement the file finally holds). The stdlib's own depth limit (1,000)
# would refuse the deep one, so it is written into sqlite_schema directly.
PLACES = {
    "view": ("CREATE VIEW deep AS SELECT 1", f"CREATE VIEW deep AS SELECT {DEEP}"),
    "trigger": (
        "CREATE TRIGGER deep AFTER INSERT ON notes BEGIN SELECT 1; END",
        f"CREATE TRIGGER deep AFTER INSERT ON notes BEGIN SELECT {DEEP}; END",
    ),
    "partial index": (
        "CREATE INDEX deep ON notes(a) WHERE a > 1",
        f"CREATE INDEX deep ON notes(a) WHERE a > {DEEP}",
    ),
    "default": (
        "CREATE TABLE deep(a DEFAULT (1))",
        f"CREATE TABLE deep(a DEFAULT ({DEEP}))",
    ),
    "generated column": (
        "CREATE TABLE deep(a, b AS (1))",
        f"CREATE TABLE deep(a, b AS ({DEEP}))",
    ),
}


def _deep_file(path: Path, place: str) -> Path:
    """A sound SQLiteStore file, then an object `deep` whose statement nests TERMS deep."""
    placeholder, statement = PLACES[place]
    builders.make_store_file(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("CREATE TABLE notes(a)")
        con.execute(placeholder)
        con.execute("PRAGMA writable_schema = ON")
        con.execute("UPDATE sqlite_schema SET sql = ? WHERE name = 'deep'", (statement,))
    finally:
        con.close()
    return path


def _python(code: str, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=120
    )


OPEN_READ_ONLY = """
import sys
from zarrdb import SQLiteStore, errors
try:
    SQLiteStore(sys.argv[1], read_only=True).ensure_open()
except errors.ZarrDBError as exc:
    print(type(exc).__name__, exc)
    sys.exit(7)
print("opened")
"""


@pytest.mark.parametrize("place", sorted(PLACES))
def test_deep_expression_in_the_schema_is_refused_not_a_crash(tmp_path, place):
    path = _deep_file(tmp_path / "deep.zarrdb", place)
    assert path.stat().st_size > 300_000  # the whole attack is this one file
    proc = _python(OPEN_READ_ONLY, path)
    assert proc.returncode == 7, (proc.returncode, proc.stdout, proc.stderr)
    assert "too large" in proc.stdout or "depth" in proc.stdout, proc.stdout
    for command in ("info", "tree", "check"):
        proc = run(command, path, timeout=120)
        assert proc.returncode in (1, 2), (command, proc.returncode, proc.stdout, proc.stderr)
        message = (proc.stdout + proc.stderr).strip()
        assert "internal error" not in message, (command, message)
        if proc.returncode == 2:  # an error: one line on stderr
            assert len(proc.stderr.strip().splitlines()) == 1, (command, proc.stderr)
        else:  # check's report: the schema cannot be read
            assert "damaged" in proc.stdout, (command, proc.stdout)


# --- what the build and every connection have ---------------------------------------------


def test_the_build_keeps_an_expression_depth_ceiling(tmp_path):
    builders.make_store_file(tmp_path / "plain.zarrdb")
    db = Database(str(tmp_path / "plain.zarrdb"), mode="r")
    try:
        options = {row[0] for row in db.execute("PRAGMA compile_options")}
    finally:
        db.close()
    depth = [option for option in options if option.startswith("MAX_EXPR_DEPTH=")]
    assert depth == ["MAX_EXPR_DEPTH=1000"], sorted(options)
    # SQLite lists only the ceilings a build changed; none of the others is raised or removed.
    assert not any(option.endswith("=0") and option.startswith("MAX_") for option in options)


EXPECTED_LIMITS = {
    "EXPR_DEPTH": 100,
    "SQL_LENGTH": 1_000_000,
    "COLUMN": 1000,
    "COMPOUND_SELECT": 8,
    "FUNCTION_ARG": 8,
    "ATTACHED": 0,
    "LIKE_PATTERN_LENGTH": 50,
    "VARIABLE_NUMBER": 16,
    "TRIGGER_DEPTH": 0,
}


@pytest.mark.parametrize("mode", ["r", "w"])
def test_every_engine_connection_has_the_limits(tmp_path, mode):
    assert {name: value for name, (_, value) in _core.CONNECTION_LIMITS.items()} == (
        EXPECTED_LIMITS
    )
    builders.make_store_file(tmp_path / "plain.zarrdb")
    db = Database(str(tmp_path / "plain.zarrdb"), mode=mode)
    try:
        assert db.limits() == EXPECTED_LIMITS
        with pytest.raises(Exception, match="too many attached databases"):
            db.execute(f"ATTACH '{tmp_path / 'other.db'}' AS other")
    finally:
        db.close()


def test_store_connections_have_the_limits(tmp_path):
    """The store's reader and writer connections, not only a bare Database."""
    from zarrdb import SQLiteStore

    path = builders.make_store_file(tmp_path / "plain.zarrdb")
    store = SQLiteStore(path)
    try:
        store.ensure_open()
        reader = store._file().reader()
        assert reader.limits() == EXPECTED_LIMITS
    finally:
        store.close()
