"""`zarrdb view FILE`: the file and the viewer page served on 127.0.0.1, byte ranges honoured,
nothing else served; files zarrdb refuses are refused before anything listens."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cli.helpers import CLI, run


@pytest.fixture
def page(tmp_path) -> Path:
    """A stand-in for the built page (the real one is built and tested in js/)."""
    folder = tmp_path / "viewer"
    folder.mkdir()
    (folder / "index.html").write_text("<!doctype html><title>viewer</title>")
    (folder / "viewer.js").write_text("export {};")
    return folder


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _get(url: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), b""


def test_view_serves_the_file_by_ranges_and_the_page(sample_file, page):
    process = subprocess.Popen(
        [*CLI, "view", str(sample_file), "--json", "--viewer-dir", str(page)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        address = json.loads(process.stdout.readline())["url"]
        assert address.startswith("http://127.0.0.1:")
        status, headers, _ = _get(address)
        assert status == 302
        assert headers["Location"] == f"/viewer/index.html?url=/data/{sample_file.name}"
        whole = sample_file.read_bytes()
        status, headers, body = _get(
            f"{address}data/{sample_file.name}", {"Range": "bytes=100-4195"}
        )
        assert (status, body) == (206, whole[100:4196])
        assert headers["Content-Range"] == f"bytes 100-4195/{len(whole)}"
        status, _, body = _get(f"{address}data/{sample_file.name}", {"Range": "bytes=-16"})
        assert (status, body) == (206, whole[-16:])
        assert _get(f"{address}viewer/index.html")[2] == (page / "index.html").read_bytes()
        for elsewhere in ("viewer/../../etc/passwd", "data/other.zarrdb", "viewer/"):
            assert _get(address + elsewhere)[0] == 404
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=10)


def test_view_refuses_a_file_that_is_not_a_zarrdb(tmp_path, page):
    other = tmp_path / "notes.zarrdb"
    other.write_bytes(b"not a database" * 100)
    result = run("view", other, "--viewer-dir", page, timeout=30)
    assert result.returncode == 2
    assert "zarrdb view: error:" in result.stderr and "serving" not in result.stdout


def test_view_says_how_to_build_a_missing_page(sample_file, tmp_path):
    result = run("view", sample_file, "--viewer-dir", tmp_path, timeout=30)
    assert result.returncode == 2
    assert "npm run build" in result.stderr
