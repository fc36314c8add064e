"""Files of zarr-python 2's SQLiteStore (tests/data/zarr2, made by zarr 2 itself with
make_zarr2_fixtures.py): refused by SQLiteStore with the way across, read as they are by
Zarr2SQLiteStore, and upgraded in place by zarrdb.zarr2.upgrade, with and without converting
the metadata to zarr v3. What the files hold is compared with what zarr 2 recorded when it wrote
them (expected.npz, expected.json); files are checked with Python's own sqlite3 and
zarrdb.conformance."""

from __future__ import annotations

import shutil
import sqlite3
import warnings
from pathlib import Path

import pytest
import zarr

from zarrdb import SQLiteStore, errors
from zarrdb.zarr2 import Zarr2SQLiteStore, is_zarr2_file, upgrade

from .zarr2_files import (
    DATA,
    EXPECTED,
    HIERARCHY,
    STRINGS,
    assert_conforms,
    assert_reads_as_zarr2_wrote,
    needs_converter,
    nodes,
    private_copy,
    rows,
)



@pytest.fixture
def old_file(tmp_path) -> Path:
    """A private copy of the hierarchy zarr 2 wrote."""
    return private_copy(tmp_path)


# --- recognising and refusing --------------------------------------------------------------------


def test_the_fixtures_are_what_zarr_2_writes():
    assert EXPECTED["written_by"]["zarr"].startswith("2.")
    for fixture in (HIERARCHY, STRINGS):
        with sqlite3.connect(DATA / fixture) as con:
            schema = con.execute("SELECT type, name, sql FROM sqlite_schema").fetchall()
            assert con.execute("PRAGMA application_id").fetchone()[0] == 0
        con.close()
        assert ("table", "zarr", "CREATE TABLE zarr(k TEXT PRIMARY KEY, v BLOB)") in schema
        assert [name for kind, name, _ in schema if kind == "table"] == ["zarr"]
        assert sorted(rows(DATA / fixture)) == EXPECTED["files"][fixture]["keys"]
        assert is_zarr2_file(DATA / fixture)


def test_sqlitestore_refuses_a_zarr_2_file_naming_the_ways_across(old_file):
    before = old_file.read_bytes()
    for read_only in (True, False):
        store = SQLiteStore(old_file, read_only=read_only)
        with pytest.raises(errors.Zarr2FileError) as caught:
            store.ensure_open()
        store.close()
        assert isinstance(caught.value, errors.NotAZarrDBError)
        assert "zarrdb upgrade" in str(caught.value) and "zarrdb copy" in str(caught.value)
    assert old_file.read_bytes() == before
    assert not Path(f"{old_file}-journal").exists()


def test_zarr2_store_reads_the_file_as_it_is(old_file):
    before = old_file.read_bytes()
    with Zarr2SQLiteStore(old_file) as store:
        assert store.read_only
        assert_reads_as_zarr2_wrote(store)
        assert sorted(store.key_sizes()) == sorted(
            (k, len(v)) for k, v in rows(DATA / HIERARCHY).items()
        )
    with Zarr2SQLiteStore(old_file) as store:  # consolidated metadata, as zarr 2 wrote it
        root = zarr.open_consolidated(store, mode="r", zarr_format=2)
        assert set(root.array_keys()) == {"scaled", "sparse"}
    assert old_file.read_bytes() == before
    with pytest.raises(ValueError, match="read-only"):
        Zarr2SQLiteStore(old_file, read_only=False)


def test_is_zarr2_file_says_no_to_everything_else(tmp_path):
    with SQLiteStore(tmp_path / "new.zarrdb") as store:
        zarr.open_group(store, mode="w")
    (tmp_path / "text.txt").write_text("not sqlite")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE zarr(k TEXT PRIMARY KEY, v BLOB)")
        con.execute("CREATE TABLE extra(x)")
    con.close()
    for path in ("new.zarrdb", "text.txt", "other.sqlite", "missing.sqlite"):
        assert not is_zarr2_file(tmp_path / path), path


# --- upgrading ---------------------------------------------------------------------------------


def test_upgrade_makes_a_conforming_file_with_every_row_as_it_was(old_file):
    before = rows(old_file)
    result = upgrade(old_file)
    assert result.upgraded and result.vacuumed and result.converted == []
    assert result.keys == len(before) == 33
    assert rows(old_file) == before  # every key and value, byte for byte
    assert_conforms(old_file)
    assert not is_zarr2_file(old_file)
    with SQLiteStore(old_file, read_only=True) as store:
        assert_reads_as_zarr2_wrote(store)
    with SQLiteStore(old_file) as store:  # now a file zarrdb writes
        zarr.open_group(store, mode="r+", zarr_format=2).attrs["after"] = True
    assert_conforms(old_file)
    again = upgrade(old_file)
    assert not again.upgraded and again.converted == []


@needs_converter
def test_upgrade_to_v3_converts_the_metadata_with_zarrs_converter(old_file):
    chunks = {k: v for k, v in rows(old_file).items() if not k.rsplit("/", 1)[-1].startswith(".z")}
    result = upgrade(old_file, to_v3=True)
    assert result.upgraded
    assert result.converted == sorted(nodes(HIERARCHY))
    assert result.consolidated == [""]
    after = rows(old_file)
    assert not [k for k in after if k.rsplit("/", 1)[-1].startswith(".z")]  # no v2 document left
    assert {k: v for k, v in after.items() if not k.endswith("zarr.json")} == chunks
    assert_conforms(old_file)
    with SQLiteStore(old_file, read_only=True) as store:
        assert_reads_as_zarr2_wrote(store, zarr_format=3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            root = zarr.open_group(store, mode="r")
        assert root.metadata.consolidated_metadata is not None  # made again, in v3 form
        assert set(root.metadata.consolidated_metadata.metadata) >= {"climate", "scaled"}


@needs_converter
def test_upgrade_refuses_what_the_converter_cannot_convert_and_changes_nothing(tmp_path):
    path = tmp_path / "strings.sqlite"
    shutil.copy(DATA / STRINGS, path)
    before = path.read_bytes()
    with pytest.raises(errors.MetadataConversionError, match="vlen-utf8.*nothing was changed"):
        upgrade(path, to_v3=True)
    assert path.read_bytes() == before
    with Zarr2SQLiteStore(path) as store:  # zarr 3 reads the strings in zarr v2 form
        assert_reads_as_zarr2_wrote(store, STRINGS)
    upgrade(path)  # without --to-v3 it is upgraded
    with SQLiteStore(path, read_only=True) as store:
        assert_reads_as_zarr2_wrote(store, STRINGS)


def make_zarr2_like(path: Path, *statements: str, table: str = "CREATE TABLE zarr(k TEXT PRIMARY KEY, v BLOB)") -> Path:
    """A file in zarr 2's layout (or a changed one), made with Python's sqlite3."""
    with sqlite3.connect(path) as con:
        con.execute(table)
        con.execute("INSERT INTO zarr VALUES ('.zgroup', ?)", (b'{"zarr_format": 2}',))
        for statement in statements:
            con.execute(statement)
    con.close()
    return path


@pytest.mark.parametrize(
    "name, statements, table, error, words",
    [
        ("null value", ["INSERT INTO zarr VALUES ('a/0', NULL)"], None, errors.FormatError, "NULL"),
        ("null key", ["INSERT INTO zarr VALUES (NULL, x'00')"], None, errors.FormatError, "NULL"),
        ("blob key", ["INSERT INTO zarr VALUES (x'61', x'00')"], None, errors.FormatError, "blob key"),
        ("real value", ["INSERT INTO zarr VALUES ('a/0', 1.5)"], None, errors.FormatError, "real value"),
        ("dot-dot key", ["INSERT INTO zarr VALUES ('a/../../b', x'00')"], None, errors.FormatError, "'..'"),
        ("leading slash", ["INSERT INTO zarr VALUES ('/a', x'00')"], None, errors.FormatError, "'/'"),
        ("other table", ["CREATE TABLE notes(x)"], None, errors.NotAZarrDBError, "notes"),
        ("trigger", ["CREATE TRIGGER t AFTER INSERT ON zarr BEGIN SELECT 1; END"], None, errors.NotAZarrDBError, "trigger"),
        ("text values", [], "CREATE TABLE zarr(k TEXT PRIMARY KEY, v TEXT)", errors.NotAZarrDBError, "v TEXT"),
        ("no primary key", [], "CREATE TABLE zarr(k TEXT, v BLOB)", errors.NotAZarrDBError, "columns"),
    ],
)  # fmt: skip
def test_upgrade_checks_everything_before_writing_anything(tmp_path, name, statements, table, error, words):
    path = make_zarr2_like(tmp_path / "bad.sqlite", *statements, **({"table": table} if table else {}))
    before = path.read_bytes()
    with pytest.raises(error) as caught:
        upgrade(path)
    assert words in str(caught.value)
    assert str(path) in str(caught.value)
    assert path.read_bytes() == before


def test_upgrade_refuses_files_of_others(tmp_path):
    (tmp_path / "text.sqlite").write_bytes(b"plain text, long enough to be more than a header" * 4)
    with pytest.raises(errors.NotADatabaseError):
        upgrade(tmp_path / "text.sqlite")
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    with pytest.raises(errors.NotAZarrDBError, match="no table 'zarr'"):
        upgrade(empty)
    with pytest.raises(FileNotFoundError):
        upgrade(tmp_path / "missing.sqlite")


def test_text_values_become_their_bytes(tmp_path):
    path = make_zarr2_like(tmp_path / "text.sqlite", "INSERT INTO zarr VALUES ('.zattrs', '{\"a\": 1}')")
    upgrade(path)
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT typeof(v), v FROM zarr WHERE k = '.zattrs'").fetchone() == (
            "blob",
            b'{"a": 1}',
        )
    con.close()
    assert_conforms(path)
