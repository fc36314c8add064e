"""Hostile URLs and servers: what a URL or a server on the other end can do to the person
running zarrdb. Each CLI run is a new process (`python -m zarrdb`) against a hostile server on
127.0.0.1 (_hostile_http.py), with a timeout.

- A URL whose path names no file (`.../..`, or `?v=/..` and `#/..` after the name) made
  `zarrdb check URL` delete the contents of the temporary directory.
- A range request answered with a body longer than asked was buffered whole.
- A server that accepts the connection and never answers held a command for minutes, through
  Ctrl-C and SIGTERM.
- A read through the store that failed (the object replaced, Ctrl-C) was reported as
  "cannot commit - no transaction is active".
- Servers that ignore Range, change ETag, redirect in a loop or lie about Content-Range fail
  cleanly, quickly (kept so).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from cli.helpers import CLI, assert_bad_input, run
from zarrdb import SQLiteStore

from ._hostile_http import MIB, HostileServer, sqlite_looking

POSIX_ONLY = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and resource")


def _run_to_error(*args: str, env: dict[str, str] | None = None):
    """`zarrdb ARGS` in a new process: the finished process, and when (time.time()) the first
    line of its stderr came (the process exits some tenths of a second later)."""
    proc = subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    killer = threading.Timer(60, proc.kill)  # a command that hangs fails the test, in bounded time
    killer.start()
    try:
        first = proc.stderr.readline()
        at = time.time()
        out, rest = proc.communicate()
    finally:
        killer.cancel()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, first + rest), at


def _canary_dir(tmp_path):
    """A TMPDIR holding a file and a folder of the user's, and what it holds."""
    scratch = tmp_path / "tmp"
    (scratch / "mine" / "deep").mkdir(parents=True)
    (scratch / "canary.txt").write_text("the user's file")
    (scratch / "mine" / "deep" / "notes.txt").write_text("more of the user's files")
    return scratch, _contents(scratch)


def _contents(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): p.read_text() if p.is_file() else "<dir>"
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture(scope="module")
def large_chunk_file(tmp_path_factory) -> bytes:
    """A .zarrdb written by zarrdb whose one chunk (3 MiB) lies past the opening request."""
    import numpy as np
    import zarr

    path = tmp_path_factory.mktemp("large") / "large.zarrdb"
    with SQLiteStore(path) as store:
        n = 3 * MIB // 8
        array = zarr.create_array(store, name="a", shape=(n,), chunks=(n,), dtype="f8",
                                  compressors=None)  # fmt: skip
        array[:] = np.arange(n, dtype="f8")
    return path.read_bytes()


# --- 1. a URL that names no file ------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/data/..",
        "http://127.0.0.1:9/data/%2e%2e",
        "{server}/data.zarrdb?v=/..",
        "{server}/data.zarrdb#/..",
    ],
)
def test_check_of_a_url_that_names_no_file_leaves_the_temporary_directory_alone(url, tmp_path):
    """`check URL` downloads to a temporary folder; a local name taken from the URL's last
    segment ('..') made its cleanup remove TMPDIR itself."""
    scratch, before = _canary_dir(tmp_path)
    with HostileServer(sqlite_looking(8192)) as server:
        url = url.format(server=f"http://127.0.0.1:{server.port}")
        proc = run("check", url, env={"TMPDIR": str(scratch)}, timeout=60)
    assert _contents(scratch) == before  # nothing of the user's removed, nothing left behind
    line = assert_bad_input(proc)
    assert "names no file" in line or "query or a fragment" in line, line
    assert server.requests == []  # refused before any request


@pytest.mark.parametrize("tail", ["..", ".", "%2e%2e", "%2E", ""])
def test_a_url_whose_path_names_no_file_is_refused_before_any_request(tail):
    with HostileServer(sqlite_looking(8192)) as server:
        url = server.url(f"data/{tail}")
        with pytest.raises(ValueError, match="names no file"):
            SQLiteStore(url, read_only=True)
    assert server.requests == []


# --- 6. a body longer than asked ------------------------------------------------------------------

# Runs `python -m zarrdb ARGS` and prints, on a last line of its own, the peak resident memory
# of that process (ru_maxrss of this wrapper's only child) in bytes.
_MEASURED = """
import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], timeout=120)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(peak * (1 if sys.platform == "darwin" else 1024))
sys.exit(proc.returncode)
"""


def _run_measured(*args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """`zarrdb ARGS` in a new process: the finished process and its peak RSS in bytes."""
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURED, *CLI, *args],
        capture_output=True,
        text=True,
        timeout=150,
    )
    *out, peak = proc.stdout.splitlines() or ["0"]
    proc.stdout = "\n".join(out)
    proc.args = [*CLI, *args]  # for assert_bad_input's messages
    return proc, int(peak)


@POSIX_ONLY
def test_a_body_longer_than_asked_fails_in_bounded_memory():
    """A range request answered with 300 MiB (a Content-Length far past the Content-Range):
    the body used to be taken whole before its length was checked, and the error said
    'shorter'. Now it fails once the body passes the length asked, having read about that."""
    huge = 300 * MIB
    data = sqlite_looking(64 * 1024)
    with HostileServer(data) as server:
        honest, baseline = _run_measured("info", server.url(), "--storage-option", "max_retries=0")
    assert honest.returncode == 2 and "not a .zarrdb file" in honest.stderr, honest.stderr
    with HostileServer(data, "longer", huge=huge) as server:
        proc, peak = _run_measured("info", server.url(), "--storage-option", "max_retries=0")
        sent = server.sent
    assert peak < baseline + 64 * MIB, (peak / MIB, baseline / MIB)
    assert sent < huge / 2, sent / MIB  # the connection was dropped, not drained
    line = assert_bad_input(proc, "longer than the")
    assert "shorter" not in line


# --- 7. a server that never answers ---------------------------------------------------------------


@POSIX_ONLY
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize(
    ("behaviour", "argv"),
    [
        ("stall", ["info", "{url}"]),  # the opening request
        ("stall_after_first", ["check", "{url}", "--json"]),  # a download's later request
        # a read through the store, on a worker thread of the event loop
        ("stall_after_first", ["copy", "{url}", "{tmp}/out.zarr"]),
    ],
    ids=["opening", "download", "store"],
)
def test_ctrl_c_and_sigterm_end_a_command_waiting_for_a_silent_server(
    behaviour, argv, signum, tmp_path, large_chunk_file
):
    scratch, before = _canary_dir(tmp_path)
    data = large_chunk_file if argv[0] == "copy" else sqlite_looking(3 * MIB)
    with HostileServer(data, behaviour) as server:
        args = [a.format(url=server.url(), tmp=tmp_path) for a in argv]
        proc = subprocess.Popen(
            [*CLI, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TMPDIR": str(scratch)},
        )
        try:
            # The request the server will never answer has arrived: the command waits on it.
            deadline = time.monotonic() + 60
            waiting = 1 if behaviour == "stall" else 2
            while len(server.requests) < waiting and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            assert len(server.requests) >= waiting
            time.sleep(0.3)
            sent = time.monotonic()
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=10)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines() == [f"zarrdb {argv[0]}: error: interrupted"], err
    assert took < 5, took
    assert _contents(scratch) == before  # the download's copy is gone too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]  # and the copy's


def test_a_silent_server_fails_the_command_after_the_read_timeout():
    """With read_timeout=1s (the default is 10 s), a server that accepts the connection and
    never answers fails the command in seconds, retries included, naming the timeout."""
    with HostileServer(sqlite_looking(8192), "stall") as server:
        proc, failed_at = _run_to_error("info", server.url(), "--storage-option", "read_timeout=1s")
        took = failed_at - server.requests[0].at
    line = assert_bad_input(proc, "timed out", "read_timeout=1s")
    assert took < 4, (took, line)


# --- a failed read through the store --------------------------------------------------------------


def test_a_file_replaced_during_a_copy_through_the_store_says_so(tmp_path, large_chunk_file):
    """A read through the store that fails (here: the object changed) is reported as what it
    is, not as the read transaction's end that SQLite had already rolled back."""
    with HostileServer(large_chunk_file, "etag_change") as server:
        proc = run("copy", server.url(), tmp_path / "out.zarr", timeout=60)
    assert_bad_input(proc, "was replaced or removed after it was opened")
    assert list(tmp_path.iterdir()) == []


# --- kept: servers that lie fail cleanly and quickly ----------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "words"),
    [
        ("ignore_range", ["Range request not supported"]),
        ("redirect_loop", ["cannot open", "redirect"]),
        ("content_range_lie", ["Requested 0..", "got 1.."]),
        ("etag_change", ["was replaced or removed after it was opened"]),
    ],
)
def test_a_lying_server_fails_the_command_cleanly_in_under_a_second(behaviour, words, tmp_path):
    """Each lie ends the command with one line (exit 2) in under a second from the first
    request; for the ETag, the file is larger than the opening request so that a later
    request sees the new version (a download by check)."""
    size = 3 * MIB if behaviour == "etag_change" else 8192
    with HostileServer(sqlite_looking(size), behaviour) as server:
        proc, failed_at = _run_to_error("check", server.url(), env={"TMPDIR": str(tmp_path)})
        took = failed_at - server.requests[0].at
    assert_bad_input(proc, *words)
    assert took < 1.0, took
    assert list(tmp_path.iterdir()) == []
