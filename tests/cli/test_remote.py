"""The command line on .zarrdb files at a URL: the sample file published on a real S3 server
(moto) and a real HTTP server (aiohttp) on 127.0.0.1 (tests/conftest.py), read in place by
info, tree and check --quick, downloaded by check and copy, and the one-line errors of what
cannot be read. Most runs are in this process (the same main() the command runs)."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import pytest

from zarrdb import SQLiteStore

from .helpers import (
    assert_bad_input,
    assert_ok,
    directory_items,
    journal_mode,
    run,
    run_here,
    sqlite_rows,
)
from .test_check import _break, _page_of

pytestmark = pytest.mark.remote


@dataclass
class Published:
    """A file on one of the servers: its URL, the --storage-option arguments that reach it,
    and what the server was asked for."""

    url: str
    options: list[str]
    traffic: object

    def ranged_reads(self) -> list:
        """The GETs of the file, each asserted to be a range request answered with 206."""
        reads = self.traffic.reads(self.url.rsplit("/", 1)[1])
        assert reads and all(r.range and r.status == 206 for r in reads), reads
        return reads


def publish(kind, s3, http, data: bytes, name: str = "data.zarrdb") -> Published:
    if kind == "s3":
        server, bucket = s3
        server.put(bucket, f"files/{name}", data)
        server.traffic.reset()
        settings = {
            k: v
            for k, v in server.storage_options.items()
            if k not in ("allow_http", "retry_config")  # an http:// endpoint allows it
        }
        options = [arg for k, v in settings.items() for arg in ("--storage-option", f"{k}={v}")]
        return Published(f"s3://{bucket}/files/{name}", options, server.traffic)
    http.put(f"files/{name}", data)
    http.traffic.reset()
    return Published(f"{http.url}files/{name}", [], http.traffic)  # http:// allows plain HTTP


@pytest.fixture(params=["s3", "http"])
def published(request, s3, http, sample_file) -> Published:
    return publish(request.param, s3, http, sample_file.read_bytes())


def lines_of(text: str, local: str, url: str) -> list[str]:
    return text.replace(str(local), url).splitlines()


# --- info, tree --------------------------------------------------------------------------------


def test_info_and_tree_of_a_url_say_what_they_say_of_the_local_file(published, sample_file, capsys):
    code, out, err = run_here(capsys, "info", published.url, "--json", *published.options)
    assert code == 0, err
    remote = json.loads(out)
    code, out, _ = run_here(capsys, "info", sample_file, "--json")
    local = json.loads(out)
    assert remote["store"] == {**local["store"], "path": published.url}
    assert remote["file"] == {**local["file"], "path": published.url}
    assert remote["arrays"] == local["arrays"] and remote["groups"] == local["groups"] == 2
    assert remote["problems"] == []
    published.ranged_reads()

    code, out, err = run_here(capsys, "tree", published.url, "/climate", *published.options)
    assert code == 0, err
    assert out.splitlines() == [
        "/climate (group)",
        "├── station (25,) int64",
        "└── temperature (40, 60) float32",
    ]
    code, local_text, _ = run_here(capsys, "info", sample_file)
    code, remote_text, _ = run_here(capsys, "info", published.url, *published.options)
    assert remote_text.splitlines() == lines_of(local_text, sample_file, published.url)


def test_settings_from_the_environment_in_a_new_process(s3, sample_file, capsys):
    """obstore reads AWS_* variables: the endpoint (http://, so plain HTTP is allowed), the
    region and the credentials, with no --storage-option."""
    target = publish("s3", s3, None, sample_file.read_bytes())
    server = s3[0]
    env = {
        "AWS_ENDPOINT": server.endpoint,
        "AWS_REGION": server.storage_options["region"],
        "AWS_ACCESS_KEY_ID": server.storage_options["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": server.storage_options["secret_access_key"],
    }
    proc = run("tree", target.url, env=env)
    assert_ok(proc)
    code, local, _ = run_here(capsys, "tree", sample_file)
    assert proc.stdout == local and len(local.splitlines()) == 7
    target.ranged_reads()


# --- check -------------------------------------------------------------------------------------


@pytest.fixture
def flawed(sample_copy):
    """The sample with problems of every reach: one that opening the file finds (a foreign
    application id), hierarchy problems (a chunk outside its grid, a stray key), a schema
    problem (an extra table) and damage only SQLite's integrity check finds."""
    _break(
        sample_copy,
        [
            "PRAGMA application_id = 1234",
            "CREATE TABLE extra(x)",
            "INSERT INTO zarr VALUES ('climate/temperature/c/4/0', x'00')",
            "INSERT INTO zarr VALUES ('notes', x'00')",
        ],
    )
    offset, page_size = _page_of(sample_copy, "sqlite_autoindex_zarr_1")
    data = bytearray(sample_copy.read_bytes())
    at = offset + data[offset : offset + page_size].index(b"temperature/c/2/")
    data[at : at + 16] = b"temperature/c/7/"
    sample_copy.write_bytes(bytes(data))
    return sample_copy


def test_check_of_a_url_downloads_it_and_finds_what_it_finds_locally(
    s3, http, flawed, tmp_path, capsys, monkeypatch
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    target = publish("s3", s3, http, flawed.read_bytes(), "flawed.zarrdb")
    code, local, _ = run_here(capsys, "check", flawed)
    assert code == 1
    code, out, err = run_here(capsys, "check", target.url, *target.options)
    assert code == 1 and err == "", err
    assert out.splitlines() == lines_of(local, flawed, target.url)
    assert "integrity: " in out and "extra table 'extra'" in out
    assert list(scratch.iterdir()) == []  # the download is removed
    size = flawed.stat().st_size
    assert any(r.sent == size for r in target.ranged_reads())  # the whole file, in one request


def test_check_quick_reads_a_url_in_place_and_says_what_it_skipped(
    s3, http, flawed, capsys, monkeypatch
):
    target = publish("http", s3, http, flawed.read_bytes(), "flawed.zarrdb")
    code, local, _ = run_here(capsys, "check", "--quick", flawed)
    assert code == 1
    code, out, err = run_here(capsys, "check", "--quick", target.url)
    assert code == 1 and err == "", err
    lines = out.splitlines()
    assert lines[1:] == lines_of(local, flawed, target.url)[1:]
    assert lines[0].startswith("quick check: SQLite's integrity check and the spec's checks")
    assert f"zarrdb check {target.url} downloads the file and runs them" in lines[0]
    # The key the damaged index holds instead of climate/temperature/c/2/N is listed too:
    # keys are listed from the index.
    found = sorted(line.split(":")[0] for line in lines[1:-1])
    assert found[:2] == ["format", "key 'climate/temperature/c/4/0'"]
    assert found[2][:-2] == "key 'climate/temperature/c/7/" and found[3] == "key 'notes'"
    assert "application id 0x000004d2" in lines[1]
    assert lines[-1] == "4 problem(s), 0 warning(s)"
    code, out, _ = run_here(capsys, "check", "--quick", target.url, "--json")
    report = json.loads(out)
    assert (report["path"], report["ok"], report["problem_count"]) == (target.url, False, 4)
    assert report["skipped"] == [lines[0]]


def test_check_quick_of_a_sound_url(published, capsys):
    code, out, err = run_here(capsys, "check", "--quick", published.url, *published.options)
    assert code == 0, out + err
    assert out.splitlines()[1:] == ["ok"]


# --- copy, snapshot ----------------------------------------------------------------------------


def test_copy_of_a_whole_url_to_a_new_file_is_a_download(published, sample_file, tmp_path, capsys):
    out_file = tmp_path / "copy.zarrdb"
    code, out, err = run_here(
        capsys, "copy", published.url, out_file, "--verify", "--json", *published.options
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["verified"] is True and report["mismatches"] == []
    assert report["downloaded"] is True and report["bytes"] == sample_file.stat().st_size
    assert report["keys"] == len(sqlite_rows(sample_file))
    assert out_file.read_bytes() == sample_file.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.zarrdb"]
    out_file.write_bytes(b"")  # an empty file named .zarrdb is a new destination too
    code, out, err = run_here(capsys, "copy", published.url, out_file, *published.options)
    assert code == 0 and "(the file, downloaded byte for byte)" in out, err
    assert out_file.read_bytes() == sample_file.read_bytes()


@pytest.mark.parametrize("dest", ["copy.zarr", "copy.zip", "part.zarrdb", "empty.zarrdb"])
def test_copy_of_a_url_reads_through_the_store(s3, http, sample_file, tmp_path, capsys, dest):
    target = publish("http", s3, http, sample_file.read_bytes())
    out_path = tmp_path / dest
    extra = ["--path", "/climate"] if dest == "part.zarrdb" else []
    if dest == "empty.zarrdb":  # a SQLiteStore file that holds nothing yet: written in place
        with SQLiteStore(out_path) as store:
            store.ensure_open()
        assert journal_mode(out_path) == "delete" and sqlite_rows(out_path) == []
    code, out, err = run_here(capsys, "copy", target.url, out_path, "--verify", "--json", *extra)
    assert code == 0, err
    report = json.loads(out)
    assert report["verified"] is True and report["downloaded"] is False
    rows = dict(sqlite_rows(sample_file))
    copied = [v for k, v in rows.items() if k.startswith("climate/" if extra else "")]
    assert (report["keys"], report["bytes"]) == (len(copied), sum(map(len, copied)))
    if dest == "copy.zarr":
        assert directory_items(out_path) == rows
    elif dest == "empty.zarrdb":
        assert dict(sqlite_rows(out_path)) == rows
    elif dest == "part.zarrdb":
        assert dict(sqlite_rows(out_path)) == {
            k: v for k, v in rows.items() if k.startswith("climate/")
        }
    else:
        code, out, _ = run_here(capsys, "copy", out_path, tmp_path / "back.zarr")
        assert code == 0 and directory_items(tmp_path / "back.zarr") == rows
    target.ranged_reads()


def test_snapshot_of_a_url(s3, http, sample_file, tmp_path, capsys):
    target = publish("s3", s3, http, sample_file.read_bytes())
    dest = tmp_path / "snap.zarrdb"
    code, out, err = run_here(capsys, "snapshot", target.url, dest, *target.options)
    assert code == 0, err
    assert out.startswith(f"snapshot of {target.url} written to {dest}: ")
    assert sqlite_rows(dest) == sqlite_rows(sample_file)
    assert sqlite3.connect(dest).execute("PRAGMA integrity_check").fetchone() == ("ok",)


# --- what cannot be read -----------------------------------------------------------------------


def _wal_file(sample_file, tmp_path) -> bytes:
    path = tmp_path / "wal.zarrdb"
    path.write_bytes(sample_file.read_bytes())
    with sqlite3.connect(path) as con:  # a writer switched to WAL and has not switched back
        con.execute("PRAGMA journal_mode = WAL")
    con.close()
    return path.read_bytes()


def _foreign_file(tmp_path) -> bytes:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t(x)")
    con.close()
    return path.read_bytes()


UNREADABLE = {
    "missing": (None, ["no such file", "nothing at this URL"]),
    "not sqlite": (lambda f, t: b"PAR1" + bytes(5000), ["not a .zarrdb file", "not an SQLite"]),
    "foreign": (lambda f, t: _foreign_file(t), ["without the SQLiteStore tables"]),
    "wal": (_wal_file, ["is in WAL mode", "Close the store that writes it"]),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_what_cannot_be_read_is_one_line_and_exit_code_2(
    case, s3, http, sample_file, tmp_path, capsys
):
    make, words = UNREADABLE[case]
    target = publish("http", s3, http, b"" if make is None else make(sample_file, tmp_path))
    url = target.url
    if make is None:
        http.objects.clear()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for argv in (
        ["info", url],
        ["tree", url],
        ["check", "--quick", url],
        ["check", url],
        ["copy", url, out_dir / "copy.zarrdb"],
        ["copy", url, out_dir / "copy.zarr"],
        ["snapshot", url, out_dir / "snap.zarrdb"],
    ):
        code, out, err = run_here(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 2 and out == "" and len(lines) == 1, (argv, out, err)
        assert lines[0].startswith(f"zarrdb {argv[0]}: error: "), lines
        for word in words:
            assert word in lines[0], (argv, lines[0])
    assert list(out_dir.iterdir()) == []


def test_a_network_failure_is_one_line(capsys):
    with socket.socket() as sock:  # a port on this machine that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/files/data.zarrdb"
    code, out, err = run_here(capsys, "info", url, "--storage-option", "max_retries=0")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"zarrdb info: error: cannot open '{url}': ")


def test_without_obstore_a_url_names_the_extra():
    code = (
        "import sys; sys.modules['obstore'] = None\n"
        "from zarrdb.cli import main\n"
        "sys.exit(main(['info', 's3://bucket/data.zarrdb']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert_bad_input(proc, "s3://bucket/data.zarrdb", "obstore", "zarrdb[remote]")


# --- what is fetched ---------------------------------------------------------------------------


def test_check_quick_and_a_whole_copy_fetch_what_they_need(s3, http, tmp_path, capsys):
    """A file of small chunks (values inline in the table's pages): check --quick reads the
    index of keys and the metadata, not the pages of values; a whole copy downloads the file
    once, without listing the sizes of its values first (which would read it all)."""
    import numpy as np
    import zarr

    path = tmp_path / "small-chunks.zarrdb"
    with SQLiteStore(path) as store:
        array = zarr.create_array(store, shape=(1024, 2048), chunks=(64, 64), dtype="f4",
                                  compressors=None)  # fmt: skip
        array[:] = np.arange(1024 * 2048, dtype="f4").reshape(1024, 2048)
    size = path.stat().st_size
    assert size > 8 * 2**20
    target = publish("http", s3, http, path.read_bytes(), path.name)

    code, out, err = run_here(capsys, "check", "--quick", target.url)
    assert code == 0 and out.splitlines()[-1] == "ok", out + err
    fetched = sum(r.sent for r in target.ranged_reads())
    assert fetched < size / 4, (fetched, size)

    target.traffic.reset()
    code, out, err = run_here(capsys, "copy", target.url, tmp_path / "copy.zarrdb")
    assert code == 0, err
    assert (tmp_path / "copy.zarrdb").read_bytes() == path.read_bytes()
    fetched = sum(r.sent for r in target.ranged_reads())
    assert fetched < 1.25 * size, (fetched, size)
