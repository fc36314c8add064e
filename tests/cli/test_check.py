"""`zarrdb check`: a sound file passes; each kind of problem is one line and exit code 1."""

from __future__ import annotations

import json
import re
import sqlite3

from zarrdb import SQLiteStore

from .helpers import assert_ok, fingerprint, run


def test_sound_file_is_ok(sample_file):
    before = fingerprint(sample_file)
    proc = run("check", sample_file)
    assert_ok(proc)
    assert proc.stdout == "ok\n"
    assert fingerprint(sample_file) == before
    proc = run("check", sample_file, "--json")
    assert_ok(proc)
    report = json.loads(proc.stdout)
    assert report["ok"] and report["problems"] == [] and report["keys"] > 0


def _break(path, statements):
    con = sqlite3.connect(path)
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()


def test_every_kind_of_problem_is_one_line(sample_copy):
    array = json.dumps({"zarr_format": 3, "node_type": "array", "shape": [3]})
    _break(
        sample_copy,
        [
            "PRAGMA application_id = 1234",
            "CREATE TABLE extra(x)",
            "INSERT INTO zarr_sqlitestore_metadata VALUES ('colour', 'blue')",
            "UPDATE zarr_sqlitestore_metadata SET v = 'yesterday' WHERE k = 'modified_at'",
            "INSERT INTO zarr VALUES ('climate/note', 'text, not a blob')",
            "INSERT INTO zarr VALUES ('/rooted', x'00')",
            "INSERT INTO zarr VALUES ('climate/temperature/c/4/0', x'00')",  # 4 chunk rows: 0..3
            "INSERT INTO zarr VALUES ('climate/temperature/c/1', x'00')",
            "INSERT INTO zarr VALUES ('climate/temperature/0.0', x'00')",
            "INSERT INTO zarr VALUES ('legacy/3', x'00')",  # 3 chunks: 0..2, v2 key encoding
            "INSERT INTO zarr VALUES ('legacy/c/1', x'00')",
            "INSERT INTO zarr VALUES ('tiles/c/0/2', x'00')",  # 2 x 2 shards
            "INSERT INTO zarr VALUES ('scalar/c/0', x'00')",
            "INSERT INTO zarr VALUES ('broken/zarr.json', CAST('{not json' AS BLOB))",
            "INSERT INTO zarr VALUES ('v2ish/zarr.json', CAST('{\"zarr_format\": 2}' AS BLOB))",
            f"INSERT INTO zarr VALUES ('partial/zarr.json', CAST('{array}' AS BLOB))",
        ],
    )
    proc = run("check", sample_copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    expected = [
        "application id 0x000004d2",
        "extra table 'extra'",
        "unknown record 'colour'",
        "modified_at 'yesterday' is not an RFC 3339 timestamp",
        "values that are not BLOBs (e.g. key 'climate/note')",
        "key '/rooted': breaks the key rules",
        "key 'climate/temperature/c/4/0': chunk index 4 of dimension 0 is outside the chunk grid",
        "key 'climate/temperature/c/1': not a chunk key of this 2-d array",
        "key 'climate/temperature/0.0': not a chunk key",
        "key 'legacy/3': chunk index 3 of dimension 0 is outside the chunk grid",
        "key 'legacy/c/1': not a chunk key",
        "key 'tiles/c/0/2': chunk index 2 of dimension 1 is outside the chunk grid (2 shards",
        "key 'scalar/c/0': not a chunk key",
        "broken/zarr.json is not valid JSON",
        "v2ish/zarr.json: zarr_format is 2, not 3",
        "partial/zarr.json: the array metadata lacks data_type",
        "key 'climate/note': belongs to no array",
    ]
    for text in expected:
        assert sum(text in line for line in lines) == 1, f"{text!r} not in:\n{proc.stdout}"
    assert lines[-1].startswith(f"{len(expected)} problem(s)")
    assert len(lines) == len(expected) + 1


def test_wal_mode_is_a_warning_and_strict_makes_it_a_problem(sample_copy):
    store = SQLiteStore(sample_copy, journal="wal")  # a writer keeps it open in WAL mode
    try:
        store.file_info()
        proc = run("check", sample_copy)
        assert_ok(proc)
        assert "warning: journal mode: the file is in WAL mode" in proc.stdout
        assert proc.stdout.splitlines()[-1] == "ok"
        strict = run("check", "--strict", sample_copy)
        assert strict.returncode == 1
    finally:
        store.close()


def _page_of(path, name):
    """(offset in the file, page size) of the root page of the table or index `name`."""
    con = sqlite3.connect(path)
    try:
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        (root,) = con.execute(
            "SELECT rootpage FROM sqlite_schema WHERE name = ?", (name,)
        ).fetchone()
    finally:
        con.close()
    return (root - 1) * page_size, page_size


def test_integrity_check_finds_damage(sample_copy):
    """Keys changed in the key index but not in the table: SQLite's integrity check reports
    rows missing from the index, each one problem line."""
    offset, page_size = _page_of(sample_copy, "sqlite_autoindex_zarr_1")
    data = bytearray(sample_copy.read_bytes())
    at = offset + data[offset : offset + page_size].index(b"temperature/c/2/")
    data[at : at + 16] = b"temperature/c/7/"
    sample_copy.write_bytes(bytes(data))
    proc = run("check", sample_copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    damage = [line for line in proc.stdout.splitlines() if line.startswith("integrity: ")]
    assert damage and all("missing from index" in line for line in damage)


def test_unreadable_file_is_reported_as_damaged(sample_copy):
    """A destroyed b-tree page: even the integrity check cannot run; check says so and fails."""
    offset, _ = _page_of(sample_copy, "zarr")
    with open(sample_copy, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * 16)
    proc = run("check", sample_copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert any(line.startswith("damaged: ") for line in proc.stdout.splitlines())


def test_damage_that_stops_info_is_listed_by_check(sample_copy):
    """A record of the metadata table that runs off the end of its page: the store cannot be
    opened, and info's hint sends the user to check, which lists what SQLite's integrity check
    finds (one line each, exit code 1), not the same one-line error."""
    page, page_size = _page_of(sample_copy, "zarr_sqlitestore_metadata")
    data = bytearray(sample_copy.read_bytes())
    first_cell = int.from_bytes(data[page + 8 : page + 10], "big")  # a table leaf page
    data[page + first_cell] = 100  # the record's length: 100 bytes, past the end of the page
    sample_copy.write_bytes(bytes(data))
    before = fingerprint(sample_copy)

    info = run("info", sample_copy)
    assert info.returncode == 2 and "Traceback" not in info.stderr
    assert f"'zarrdb check {sample_copy}' lists what SQLite finds" in info.stderr

    proc = run("check", sample_copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    # The page and the cell, in the words of whichever SQLite Python's sqlite3 links: older ones
    # say "On tree page 3 cell 0: ...", newer ones "Tree 3 page 3 cell 0: ..." (the tree's root
    # page, then the page: the same page here).
    root = page // page_size + 1
    found = re.compile(
        rf"integrity: (On tree page {root}|Tree {root} page {root}) cell 0: Extends off end of page"
    )
    assert [line for line in lines if found.fullmatch(line)], lines
    assert lines[-1].endswith("problem(s), 0 warning(s)")
    assert fingerprint(sample_copy) == before
