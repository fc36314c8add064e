"""`zarrdb copy` between a directory (LocalStore), a zip (ZipStore), a .zarrdb and a URL:
values byte for byte, in bounded batches, and identical round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

from zarrdb import SQLiteStore

from .conftest import TEMPERATURE
from .helpers import (
    assert_bad_input,
    assert_ok,
    directory_items,
    fingerprint,
    journal_mode,
    run,
    run_json,
    sqlite_rows,
)


def test_directory_to_zarrdb_to_directory(sample_dir, tmp_path):
    """A directory store made by zarr -> .zarrdb -> directory: the same keys and bytes."""
    db = tmp_path / "from-dir.zarrdb"
    back = tmp_path / "back.zarr"
    first = run_json("copy", sample_dir, db, "--verify")
    assert first["verified"] is True and first["mismatches"] == []
    original = directory_items(sample_dir)
    assert first["keys"] == len(original)
    assert first["bytes"] == sum(map(len, original.values()))
    assert dict(sqlite_rows(db)) == original
    assert journal_mode(db) == "delete"
    proc = run("copy", db, back)
    assert_ok(proc)
    assert proc.stdout.startswith(f"copied {len(original):,} keys")
    assert directory_items(back) == original
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]  # no temporary left


def test_zarrdb_to_directory_and_back_is_identical(sample_file, tmp_path):
    """.zarrdb -> directory -> .zarrdb: the keys and values of the zarr table are identical."""
    directory = tmp_path / "dir.zarr"
    again = tmp_path / "again.zarrdb"
    assert_ok(run("copy", sample_file, directory))
    assert_ok(run("copy", directory, again))
    assert sqlite_rows(again) == sqlite_rows(sample_file)


def test_zip_made_by_zarr(sample_zip, tmp_path):
    db = tmp_path / "from-zip.zarrdb"
    result = run_json("copy", sample_zip, db, "--verify")
    assert result["verified"] is True
    with SQLiteStore(db, read_only=True) as store:
        group = zarr.open_group(store, mode="r")
        np.testing.assert_array_equal(group["climate/temperature"][:], TEMPERATURE)
        assert group["tiles"][39, 0] == 7 and group["tiles"][40, 0] == 0
        assert group["scalar"][()] == 2.5
    # and out again into a new zip, verified
    out = tmp_path / "out.zip"
    assert run_json("copy", db, out, "--verify")["verified"] is True
    store = zarr.storage.ZipStore(out, mode="r")
    np.testing.assert_array_equal(
        zarr.open_array(store, path="climate/temperature", mode="r")[:], TEMPERATURE
    )
    store.close()


def test_small_batches_and_a_subtree(sample_file, tmp_path):
    """--batch-bytes bounds each batch (a bigger value goes alone); --path/--dest-path move
    one array to the root of a new file."""
    rows = dict(sqlite_rows(sample_file))
    prefix = "climate/temperature/"
    sub = {k[len(prefix) :]: v for k, v in rows.items() if k.startswith(prefix)}
    out = tmp_path / "temperature.zarrdb"
    result = run_json(
        "copy",
        sample_file,
        out,
        "--path",
        "/climate/temperature",
        "--dest-path",
        "/",
        "--batch-bytes",
        "4096",
        "--verify",
    )
    assert result["keys"] == len(sub) and result["verified"] is True
    # a batch holds values up to 4096 bytes in all, or one value alone
    sizes = [len(sub[k]) for k in sorted(k for k in sub if k != "zarr.json")]
    assert result["batches"] >= max(1, sum(sizes) // 4096)
    assert dict(sqlite_rows(out)) == sub
    np.testing.assert_array_equal(
        zarr.open_array(SQLiteStore(out, read_only=True), mode="r")[:], TEMPERATURE
    )
    # into an existing file, at a new path
    result = run_json(
        "copy", sample_file, out, "--path", "climate/station", "--dest-path", "moved/station"
    )
    assert result["keys"] == sum(1 for k in rows if k.startswith("climate/station/"))
    assert {k for k, _ in sqlite_rows(out) if k.startswith("moved/station/")}


def test_overwrite(sample_file, sample_dir, tmp_path):
    target = tmp_path / "target.zarrdb"
    assert_ok(run("copy", sample_file, target, "--path", "legacy", "--dest-path", ""))
    before = fingerprint(target)
    assert_bad_input(run("copy", sample_dir, target), str(target), "--overwrite")
    assert fingerprint(target) == before
    assert_ok(run("copy", sample_dir, target, "--overwrite"))
    assert dict(sqlite_rows(target)) == directory_items(sample_dir)
    # a directory destination is replaced as a whole
    directory = tmp_path / "target.zarr"
    assert_ok(run("copy", sample_file, directory, "--path", "legacy"))
    assert_ok(run("copy", sample_file, directory, "--overwrite"))
    assert directory_items(directory) == dict(sqlite_rows(sample_file))


def test_progress_bar(sample_file, tmp_path):
    proc = run("copy", sample_file, tmp_path / "p.zarrdb", "--progress", "--verify")
    assert_ok(proc)
    assert "keys" in proc.stderr and "copy" in proc.stderr and "verify" in proc.stderr


def test_url_through_fsspec(sample_file, tmp_path):
    pytest.importorskip("fsspec")
    url = (tmp_path / "via-url.zarr").as_uri()
    assert run_json("copy", sample_file, url, "--verify")["verified"] is True
    back = tmp_path / "back.zarrdb"
    assert run_json("copy", url, back, "--verify")["verified"] is True
    assert sqlite_rows(back) == sqlite_rows(sample_file)


def test_verify_reports_differences(sample_file, tmp_path, monkeypatch, capsys):
    """--verify compares every value: run in-process with a destination that changes one."""
    from zarrdb import cli
    from zarrdb.cli import copy

    target = tmp_path / "v.zarrdb"
    real = copy.verify

    async def tampered(source, dest, *args):
        from zarr.buffer import default_buffer_prototype

        writable = dest.with_read_only(False)
        await writable.set("legacy/0", default_buffer_prototype().buffer.from_bytes(b"x"))
        writable.close()
        return await real(source, dest, *args)

    monkeypatch.setattr(copy, "verify", tampered)
    code = cli.main(["copy", str(sample_file), str(target), "--verify", "--json"])
    assert code == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verified"] is False
    assert report["mismatches"] == ["key 'legacy/0': the value differs"]
