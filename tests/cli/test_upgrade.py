"""The command line on files of zarr-python 2's SQLiteStore (tests/data/zarr2, written by
zarr 2): `zarrdb upgrade` in place, `zarrdb copy` into a new file (the old one untouched), and
the commands that need a SQLiteStore file naming both. Each route reads back what zarr 2
recorded when it wrote the file."""

from __future__ import annotations

import json
import shutil

import pytest

from zarrdb import SQLiteStore
from zarrdb.zarr2 import is_zarr2_file

from format.zarr2_files import (
    DATA,
    HIERARCHY,
    STRINGS,
    assert_conforms,
    assert_reads_as_zarr2_wrote,
    needs_converter,
    private_copy,
    rows,
)
from .helpers import assert_bad_input, assert_ok, fingerprint, run, run_here, sqlite_rows


@pytest.fixture
def old_file(tmp_path):
    return private_copy(tmp_path)


def test_upgrade_in_place(old_file, capsys):
    before = rows(old_file)
    code, out, err = run_here(capsys, "upgrade", old_file)
    assert (code, err) == (0, "")
    assert out.startswith(f"upgraded {old_file} to SQLiteStore 1.0: 33 keys")
    assert rows(old_file) == before
    assert_conforms(old_file)
    with SQLiteStore(old_file, read_only=True) as store:
        assert_reads_as_zarr2_wrote(store)
    code, out, _ = run_here(capsys, "upgrade", old_file)
    assert (code, out.strip()) == (0, f"{old_file}: is a SQLiteStore 1.0 file already")


@needs_converter
def test_upgrade_to_v3_in_place(old_file, capsys):
    code, out, err = run_here(capsys, "upgrade", old_file, "--to-v3", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["upgraded"] is True and result["keys"] == 33
    assert result["converted_to_v3"][0] == "/" and "/climate/temperature" in result["converted_to_v3"]
    assert result["consolidated"] == ["/"]
    assert_conforms(old_file)
    with SQLiteStore(old_file, read_only=True) as store:
        assert_reads_as_zarr2_wrote(store, zarr_format=3)


@needs_converter
def test_upgrade_to_v3_refused_in_one_line_with_the_reason(tmp_path):
    path = tmp_path / "strings.sqlite"
    shutil.copy(DATA / STRINGS, path)
    before = fingerprint(path)
    assert_bad_input(run("upgrade", path, "--to-v3"), "vlen-utf8", "nothing was changed")
    assert fingerprint(path) == before


def test_copy_reads_a_zarr_2_file_and_leaves_it_untouched(old_file, tmp_path, capsys):
    before = fingerprint(old_file)
    new = tmp_path / "new.zarrdb"
    code, out, err = run_here(capsys, "copy", old_file, new, "--verify")
    assert (code, err) == (0, "")
    assert "copied 33 keys" in out and "all 33 keys and values are identical" in out
    assert fingerprint(old_file) == before  # read-only: not a byte changed, no journal
    assert dict(sqlite_rows(new)) == rows(DATA / HIERARCHY)
    assert_conforms_made_by_zarrdb(new)
    with SQLiteStore(new, read_only=True) as store:
        assert_reads_as_zarr2_wrote(store)
    part = tmp_path / "part.zarrdb"
    code, _, err = run_here(capsys, "copy", old_file, part, "--path", "/climate", "--dest-path", "/")
    assert code == 0, err
    assert {k for k, _ in sqlite_rows(part)} == {
        k.removeprefix("climate/") for k in rows(DATA / HIERARCHY) if k.startswith("climate/")
    }


def assert_conforms_made_by_zarrdb(path) -> None:
    from zarrdb import conformance

    report = conformance.check_file(path)
    assert report.readable and not [f for f in report.findings if f.level == "problem"]
    assert not is_zarr2_file(path)


def test_commands_that_need_a_sqlitestore_file_name_the_ways_across(old_file, tmp_path):
    before = fingerprint(old_file)
    for argv in (("info", old_file), ("tree", old_file), ("vacuum", old_file),
                 ("check", old_file), ("check", "--quick", old_file),
                 ("mv", old_file, "/scaled", "/moved"), ("snapshot", old_file, tmp_path / "s.zarrdb")):  # fmt: skip
        line = assert_bad_input(run(*argv), "zarr-python 2", "zarrdb upgrade", "zarrdb copy")
        assert str(old_file) in line
    assert fingerprint(old_file) == before


def test_upgrade_refuses_other_files_in_one_line(sample_file, tmp_path):
    assert_bad_input(run("upgrade", tmp_path / "missing.sqlite"), "no such file")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert_bad_input(run("upgrade", text), "not a .zarrdb file")
    assert_bad_input(run("upgrade", "s3://bucket/old.sqlite"), "read-only", "upgrade")
    copy = tmp_path / "copy.zarrdb"
    shutil.copy(sample_file, copy)
    proc = run("upgrade", copy)  # a SQLiteStore file: nothing to do
    assert_ok(proc)
    assert "already" in proc.stdout
