"""`zarrdb info` and `zarrdb tree` on real files, compared with what Python's sqlite3 sees."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

import zarrdb

from .helpers import assert_ok, fingerprint, run, run_json, run_many, sqlite_rows

ARRAYS = {
    # path: (shape, dtype, chunk shape, shard shape, chunks possible)
    "/climate/station": ([25], "int64", [10], None, 3),
    "/climate/temperature": ([40, 60], "float32", [10, 20], None, 12),
    "/legacy": ([12], "int16", [5], None, 3),
    "/scalar": ([], "float64", [], None, 1),
    "/tiles": ([64, 64], "uint16", [8, 8], [32, 32], 4),
}
ITEMSIZE = {"int64": 8, "float32": 4, "int16": 2, "float64": 8, "uint16": 2}


def chunk_rows(path, array_path):
    """(count, bytes) of the keys below an array other than its zarr.json, via sqlite3."""
    prefix = array_path.strip("/") + "/"
    rows = [
        (k, v) for k, v in sqlite_rows(path) if k.startswith(prefix) and k != prefix + "zarr.json"
    ]
    return len(rows), sum(len(v) for _, v in rows)


def test_info_json_matches_the_file(sample_file):
    before = fingerprint(sample_file)
    info = run_json("info", sample_file)
    f = info["file"]
    assert f["format_version"] == "1.0"
    assert f["created_by"].startswith("zarrdb ")
    assert f["modified_at"].endswith("Z")
    assert f["sqlite_version"] == zarrdb.sqlite_version
    assert f["journal_mode"] == "delete"
    assert f["file_size"] == sample_file.stat().st_size
    assert f["page_size"] * f["page_count"] == f["file_size"]
    rows = sqlite_rows(sample_file)
    assert f["keys"] == len(rows)
    assert f["stored_bytes"] == sum(len(v) for _, v in rows)
    assert info["groups"] == 2
    by_path = {a["path"]: a for a in info["arrays"]}
    assert sorted(by_path) == sorted(ARRAYS)
    for path, (shape, dtype, chunks, shards, possible) in ARRAYS.items():
        a = by_path[path]
        assert (a["shape"], a["dtype"], a["chunk_shape"], a["shard_shape"]) == (
            shape,
            dtype,
            chunks,
            shards,
        )
        assert a["chunks_possible"] == possible
        count, nbytes = chunk_rows(sample_file, path)
        assert (a["chunks_stored"], a["stored_bytes"]) == (count, nbytes), path
        assert a["nbytes"] == math.prod(shape) * ITEMSIZE[dtype]
        assert a["ratio"] == pytest.approx(a["nbytes"] / nbytes, rel=1e-3)
    assert by_path["/tiles"]["chunks_stored"] == 4  # shards, not inner chunks
    assert by_path["/tiles"]["codecs"][0].startswith("sharding_indexed(")
    assert by_path["/climate/temperature"]["chunks_stored"] == 12
    assert fingerprint(sample_file) == before  # read-only


def test_info_text(sample_file):
    proc = run("info", sample_file)
    assert_ok(proc)
    out = proc.stdout
    assert "SQLiteStore 1.0" in out
    assert f"SQLite        {zarrdb.sqlite_version}" in out or zarrdb.sqlite_version in out
    for path in ARRAYS:
        assert f"\n{path}  (array" in out
    assert "chunks stored 12 / 12" in out
    assert "chunks stored 4 / 4 shards" in out
    assert proc.stderr == ""


def test_info_never_decodes_chunks(sample_copy):
    """Chunk values that no codec could decode do not matter: info reads metadata only."""
    con = sqlite3.connect(sample_copy)
    con.execute("UPDATE zarr SET v = x'DEADBEEF' WHERE k LIKE 'climate/temperature/c/%'")
    con.commit()
    con.close()
    info = run_json("info", sample_copy)
    temp = next(a for a in info["arrays"] if a["path"] == "/climate/temperature")
    assert (temp["chunks_stored"], temp["stored_bytes"]) == (12, 12 * 4)


def test_tree_text(sample_file):
    proc = run("tree", sample_file)
    assert_ok(proc)
    assert proc.stdout.splitlines() == [
        "/ (group)",
        "├── climate (group)",
        "│   ├── station (25,) int64",
        "│   └── temperature (40, 60) float32",
        "├── legacy (12,) int16",
        "├── scalar () float64",
        "└── tiles (64, 64) uint16",
    ]


def test_tree_of_a_subtree_and_json(sample_file):
    proc = run("tree", sample_file, "/climate/")
    assert_ok(proc)
    assert proc.stdout.splitlines() == [
        "/climate (group)",
        "├── station (25,) int64",
        "└── temperature (40, 60) float32",
    ]
    tree = run_json("tree", sample_file, "climate/temperature")
    assert tree == {
        "path": "/climate/temperature",
        "node_type": "array",
        "shape": [40, 60],
        "dtype": "float32",
    }
    whole = run_json("tree", sample_file)
    assert [c["path"] for c in whole["children"]] == ["/climate", "/legacy", "/scalar", "/tiles"]
    assert [c["path"] for c in whole["children"][0]["children"]] == [
        "/climate/station",
        "/climate/temperature",
    ]


@pytest.mark.parametrize("kind", ["directory", "zip"])
def test_info_and_tree_take_every_store_copy_takes(kind, sample_dir, sample_zip, sample_file):
    """The same hierarchy in a directory or a zip: tree draws it alike, info describes every
    array alike (the file facts are SQLite's alone)."""
    path = sample_dir if kind == "directory" else sample_zip
    before = fingerprint(path)
    argvs = [
        ("tree", path), ("tree", sample_file), ("tree", path, "/climate", "--json"),
        ("tree", sample_file, "/climate", "--json"), ("info", path, "--json"),
        ("info", sample_file, "--json"), ("info", path),
    ]  # fmt: skip
    procs = run_many(argvs)
    for proc in procs:
        assert_ok(proc)
    tree, tree_ours, sub, sub_ours, info, info_ours, text = procs
    assert tree.stdout == tree_ours.stdout
    assert json.loads(sub.stdout) == json.loads(sub_ours.stdout)
    theirs, ours = json.loads(info.stdout), json.loads(info_ours.stdout)
    assert theirs["file"] is None
    assert theirs["store"]["kind"] == ("dir" if kind == "directory" else "zip")
    assert theirs["groups"] == ours["groups"]
    assert theirs["arrays"] == ours["arrays"]
    assert "chunks stored 12 / 12" in text.stdout and "chunks stored 4 / 4 shards" in text.stdout
    assert fingerprint(path) == before


def test_copy_hint_names_a_command_that_works_there(sample_dir, tmp_path):
    """copy of a path a directory does not hold names `zarrdb tree DIR`, which shows it."""
    proc = run("copy", sample_dir, tmp_path / "out.zarrdb", "--path", "/nothing/here")
    hint = f"'zarrdb tree {sample_dir}' shows what is there"
    assert proc.returncode == 2 and hint in proc.stderr
    tree = run("tree", sample_dir)
    assert_ok(tree)
    assert "temperature (40, 60) float32" in tree.stdout
