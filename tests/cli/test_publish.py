"""Publishing a file: `zarrdb copy FILE s3://bucket/NAME.zarrdb` (and `zarrdb.remote.upload`)
against the real S3 server (moto, tests/conftest.py): the round trip (write, close, upload, read
in place), byte for byte, the size and ETag checks, --verify, multipart uploads, and what is
refused (an unclosed file, a file that changes while it goes up, an existing object, a source
that is not a whole local .zarrdb) with nothing published."""

from __future__ import annotations

import json
import os
import sqlite3

import numpy as np
import obstore
import pytest
import zarr

from format.zarr2_files import private_copy
from zarrdb import SQLiteStore, errors, remote

from .helpers import fingerprint, run_here

pytestmark = pytest.mark.remote

MIB = 1024 * 1024


def settings(server) -> tuple[dict, list[str]]:
    """The storage options that reach the server, as a dict and as --storage-option arguments
    (an http:// endpoint allows plain HTTP by itself on the command line)."""
    options = {k: v for k, v in server.storage_options.items() if k != "retry_config"}
    argv = [
        arg
        for k, v in options.items()
        if k != "allow_http"
        for arg in ("--storage-option", f"{k}={v}")
    ]
    return options, argv


def object_bytes(server, bucket: str, key: str) -> bytes | None:
    try:
        return bytes(obstore.get(server.object_store(bucket), key).bytes())
    except FileNotFoundError:
        return None


def test_write_close_upload_and_read_in_place(s3, tmp_path, capsys):
    server, bucket = s3
    path = tmp_path / "field.zarrdb"
    data = np.random.default_rng(5).random((200, 300))
    with SQLiteStore(path) as store:  # closed: one file in DELETE mode
        zarr.create_array(store, name="field", shape=data.shape, chunks=(50, 50), dtype="f8")[:] = data
    options, argv = settings(server)
    url = f"s3://{bucket}/published/field.zarrdb"
    code, out, err = run_here(capsys, "copy", path, url, "--verify", *argv)
    assert (code, err) == (0, ""), out
    lines = out.splitlines()
    assert lines[0].startswith(f"uploaded {path} to {url}: ")
    assert lines[1] == "size and ETag (MD5 of the parts) checked"
    assert lines[2] == "verify: all 26 keys and values, read in place, are identical"
    assert object_bytes(server, bucket, "published/field.zarrdb") == path.read_bytes()
    with SQLiteStore(url, read_only=True, storage_options=options) as store:
        np.testing.assert_array_equal(zarr.open_array(store, path="field", mode="r")[:], data)
    assert not os.path.exists(f"{path}-journal")  # the local file was only read


def test_json_and_overwrite(s3, sample_file, capsys):
    server, bucket = s3
    _, argv = settings(server)
    url = f"s3://{bucket}/sample.zarrdb"
    code, out, _ = run_here(capsys, "copy", sample_file, url, "--json", *argv)
    result = json.loads(out)
    assert code == 0 and result["uploaded"] is True
    assert result["bytes"] == sample_file.stat().st_size and result["parts"] == 1
    assert result["etag_checked"] is True and result["etag"].endswith('-1"')
    assert result["mismatches"] == [] and result["verified"] is None
    code, _, err = run_here(capsys, "copy", sample_file, url, *argv)
    assert code == 2 and "exists already; pass --overwrite" in err
    code, _, err = run_here(
        capsys, "copy", sample_file, url, "--overwrite", "--verify", "--progress", *argv
    )
    assert code == 0, err
    assert "upload" in err and "verify" in err  # the progress bars, on stderr


def test_a_multipart_upload_is_checked_part_by_part(s3, tmp_path):
    server, bucket = s3
    path = tmp_path / "big.zarrdb"
    with SQLiteStore(path) as store:  # about 11 MiB of values that do not compress
        noise = np.random.default_rng(9).integers(0, 2**63, (1400, 1000), dtype="i8")
        zarr.create_array(store, name="noise", shape=noise.shape, chunks=(200, 1000),
                          dtype="i8", compressors=None)[:] = noise  # fmt: skip
    options, _ = settings(server)
    seen = []
    result = remote.upload(
        path, f"s3://{bucket}/big.zarrdb", storage_options=options, part_size=5 * MIB,
        progress=seen.append,
    )  # fmt: skip
    size = path.stat().st_size
    assert result.parts == -(-size // (5 * MIB)) >= 3
    assert sum(seen) == result.size == size
    assert result.etag_checked and result.etag.endswith(f'-{result.parts}"')
    assert result.problems == []
    assert object_bytes(server, bucket, "big.zarrdb") == path.read_bytes()


def wal_mode_file(sample_file, tmp_path):
    path = tmp_path / "wal.zarrdb"
    path.write_bytes(sample_file.read_bytes())
    with sqlite3.connect(path) as con:  # a writer switched to WAL and has not switched back
        con.execute("PRAGMA journal_mode = WAL")
    con.close()
    return path


def with_journal(sample_file, tmp_path):
    path = tmp_path / "journal.zarrdb"
    path.write_bytes(sample_file.read_bytes())
    (tmp_path / "journal.zarrdb-journal").write_bytes(b"")  # a writer has it open (TRUNCATE)
    return path


@pytest.mark.parametrize(
    "make, words",
    [(wal_mode_file, "is in WAL mode"), (with_journal, "rollback journal")],
)
def test_an_unclosed_file_is_refused_and_nothing_published(make, words, s3, sample_file, tmp_path, capsys):
    server, bucket = s3
    path = make(sample_file, tmp_path)
    _, argv = settings(server)
    code, out, err = run_here(capsys, "copy", path, f"s3://{bucket}/x.zarrdb", *argv)
    assert (code, out) == (2, "")
    assert words in err and "upload" in err and len(err.strip().splitlines()) == 1
    assert object_bytes(server, bucket, "x.zarrdb") is None


def test_a_file_that_changes_while_it_goes_up_publishes_nothing(s3, sample_file, tmp_path):
    server, bucket = s3
    path = tmp_path / "moving.zarrdb"
    path.write_bytes(sample_file.read_bytes())
    options, _ = settings(server)

    def write_meanwhile(nbytes: int) -> None:
        with SQLiteStore(path) as store:  # another writer commits while the file is read
            zarr.open_group(store, mode="r+").attrs["changed"] = True

    with pytest.raises(errors.UnclosedFileError, match="changed while it was uploaded"):
        remote.upload(path, f"s3://{bucket}/moving.zarrdb", storage_options=options,
                      progress=write_meanwhile)  # fmt: skip
    assert object_bytes(server, bucket, "moving.zarrdb") is None


def test_what_cannot_be_uploaded_is_one_line_and_exit_code_2(s3, sample_file, sample_dir, tmp_path, capsys):
    server, bucket = s3
    _, argv = settings(server)
    url = f"s3://{bucket}/out.zarrdb"
    old = private_copy(tmp_path)  # written by zarr-python 2's SQLiteStore
    before = fingerprint(old)
    cases = [
        ((sample_dir, url), "a whole local .zarrdb file"),
        ((sample_file, url, "--path", "/climate"), "no --path or --dest-path"),
        ((old, url), "zarrdb upgrade"),
        ((sample_file, f"s3://no-such-bucket-{bucket}/out.zarrdb"), "nothing was published"),
    ]
    for args, words in cases:
        code, out, err = run_here(capsys, "copy", *args, *argv)
        assert (code, out) == (2, ""), (args, out, err)
        assert words in err and len(err.strip().splitlines()) == 1, (args, err)
    assert object_bytes(server, bucket, "out.zarrdb") is None
    assert fingerprint(old) == before  # only read


def test_http_is_read_only(sample_file, capsys):
    code, _, err = run_here(capsys, "copy", sample_file, "https://example.org/data.zarrdb")
    assert code == 2 and "HTTP server is read-only" in err
    with pytest.raises(ValueError, match="object storage"):
        remote.upload(sample_file, "https://example.org/data.zarrdb")
