"""Values at their limits end as a zarrdb error, never as "internal error" (issue 37, finding 7).

- a `sqlitestore_version` of more than 4,300 digits: Python refuses to convert such a decimal
  string (ValueError), and every command ended with exit 3;
- a key stored as a BLOB (the spec's keys are TEXT): `copy` ended with a TypeError;
- a server whose Content-Range claims an object of 2**64 - 1 bytes: an OverflowError.
Each now raises a zarrdb.errors exception; the command line exits 1 or 2 with one line."""

from __future__ import annotations

import sqlite3

import pytest

from cli.helpers import assert_bad_input, run
from format import builders
from zarrdb import SQLiteStore, errors

from ._hostile_http import HostileServer, _span, sqlite_looking


def _no_internal_error(proc) -> None:  # noqa: ANN001
    message = proc.stdout + proc.stderr
    assert proc.returncode in (1, 2), (proc.returncode, message)
    assert "internal error" not in message and "Traceback" not in message, message
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# --- a version number of 5,000 digits ---------------------------------------------------------

HUGE_VERSION = "1" * 5000 + ".0"


def test_a_huge_version_number_is_an_unsupported_version(tmp_path):
    path = builders.make_version(tmp_path / "v.zarrdb", HUGE_VERSION)
    for read_only in (True, False):
        with pytest.raises(errors.UnsupportedVersionError, match="5,002 characters"):
            SQLiteStore(path, read_only=read_only).ensure_open()


@pytest.mark.parametrize("command", ["info", "tree", "check", "copy", "snapshot"])
def test_a_huge_version_number_ends_every_command_cleanly(tmp_path, command):
    path = builders.make_version(tmp_path / "v.zarrdb", HUGE_VERSION)
    extra = [tmp_path / "out.zarrdb"] if command in ("copy", "snapshot") else []
    proc = run(command, path, *extra, timeout=60)
    _no_internal_error(proc)
    assert len(proc.stdout + proc.stderr) < 2000  # the number is not printed whole


# --- a key stored as a BLOB -------------------------------------------------------------------


def _blob_key(path):
    builders.make_store_file(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("UPDATE zarr SET k = CAST(k AS BLOB) WHERE k = 'a/c/0'")
        assert con.execute("SELECT count(*) FROM zarr WHERE typeof(k) = 'blob'").fetchone() == (1,)
    finally:
        con.close()
    return path


@pytest.mark.parametrize("dest", ["out.zarrdb", "out.zip", "out"])
def test_copy_of_a_file_with_a_blob_key_ends_cleanly(tmp_path, dest):
    path = _blob_key(tmp_path / "blob.zarrdb")
    proc = run("copy", path, tmp_path / dest, timeout=60)
    _no_internal_error(proc)
    if proc.returncode == 2:
        assert "a/c/0" in proc.stderr and "BLOB" in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", ["info", "tree", "check"])
def test_other_commands_on_a_blob_key_end_cleanly(tmp_path, command):
    proc = run(command, _blob_key(tmp_path / "blob.zarrdb"), timeout=60)
    assert proc.returncode in (0, 1, 2), proc.stdout + proc.stderr
    assert "internal error" not in proc.stdout + proc.stderr


# --- a server claiming 2**64 - 1 bytes ----------------------------------------------------------


class HugeTotal(HostileServer):
    """Says the object is 2**64 - 1 bytes long, and answers each range whole (zeros past its
    data), as if it were."""

    def _answer(self, conn, seen, headers, number):  # noqa: ANN001
        start, stop = _span(seen.range, 2**64 - 1)
        body = self.data[start:stop].ljust(stop - start, b"\0")
        fields = {
            "ETag": '"v1"',
            "Content-Range": f"bytes {start}-{stop - 1}/{2**64 - 1}",
            "Content-Length": str(len(body)),
        }
        self._send(conn, "206 Partial Content", fields, body)


@pytest.mark.parametrize("command", ["info", "check"])
def test_a_claimed_size_of_two_to_the_64_ends_cleanly(command, tmp_path):
    with HugeTotal(sqlite_looking(8192)) as server:
        proc = run(command, server.url(), timeout=60, env={"TMPDIR": str(tmp_path)})
    assert_bad_input(proc)
    assert "internal error" not in proc.stderr
