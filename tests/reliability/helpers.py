"""Shared helpers of the reliability tests: trial counts, child processes that report on a pipe,
and readers of a whole .zarrdb file through zarrdb.

Nothing here opens a file with the standard-library sqlite3: two SQLite libraries in one process
do not share POSIX locks (see test_processes.py, "same file, two SQLite libraries"), so checks
with the stdlib run in another process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zarrdb import SQLiteStore, _core

HERE = Path(__file__).resolve().parent
TESTS_DIR = HERE.parent
REPO = TESTS_DIR.parent
PYTHON = sys.executable

# The power-loss simulator is compiled only into test builds (ZARRDB_TEST_VFS=1, which
# scripts/dev.sh sets); tests/project/test_build.py checks that such a build has it.
needs_powerloss_vfs = pytest.mark.skipif(
    not _core._POWERLOSS_VFS,
    reason="this build has no power-loss simulator (a release build: test builds are made "
    "with ZARRDB_TEST_VFS=1, as scripts/dev.sh does)",
)


def generated(examples: int):
    """Hypothesis settings of a generator of hostile inputs: `examples` examples (batches),
    the same ones every run, no shrinking (a batch's report names each failing case)."""
    from hypothesis import HealthCheck, Phase, settings

    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def trials(variable: str, default: int, slow_default: int, *, slow: bool) -> int:
    """How many randomised trials to run: `variable` from the environment when set (bounded to
    1..10000), else `default` in the default run and `slow_default` in the slow one."""
    text = os.environ.get(variable)
    if text:
        return max(1, min(10_000, int(text)))
    return slow_default if slow else default


# scripts/memcheck.sh sets MEMCHECK_MODE: under AddressSanitizer (its quarantine of freed memory,
# its shadow memory) or valgrind a process's resident size says nothing of zarrdb's allocations,
# so a bound on a peak's growth is not judged there; CI's test steps without a checker judge it.
MEMORY_CHECKER = os.environ.get("MEMCHECK_MODE", "")


def over_peak(growth: int | None, bound: int) -> bool:
    """Whether a measured growth of peak memory breaks `bound` (never under a memory checker)."""
    return not MEMORY_CHECKER and (growth or 0) > bound


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: tests/ on sys.path (so `reliability._workers` and
    `format.builders` import), unbuffered output, and faulthandler on, so a crash in C prints
    the Python stack before the process dies."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(TESTS_DIR), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"
    env.update(extra)
    return env


class ReportingChild:
    """A child process (a Python script) that reports one line per event on stdout.

    A thread collects complete lines as they come; `wait_for(word)` blocks until a line
    starting with `word` has arrived. stderr goes to a file, shown when a check fails.
    """

    def __init__(
        self, args: list[str], stderr_path: Path, cwd: Path | None = None, *, stdin: bool = False
    ) -> None:
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")  # noqa: SIM115 - closed in finish()
        self.proc = subprocess.Popen(
            [PYTHON, *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            env=child_env(),
            cwd=cwd,
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        buffered = b""
        while True:
            data = self.proc.stdout.read1(65536)
            if not data:
                break
            buffered += data
            *complete, buffered = buffered.split(b"\n")
            if complete:
                with self._cond:
                    self.lines.extend(line.decode() for line in complete)
                    self._cond.notify_all()
        # A line cut short by the kill (no newline) was never acknowledged: dropped.
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for(self, word: str, timeout: float = 60.0) -> bool:
        """True once a line starting with `word` has come; False on EOF or timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if any(line.split(" ", 1)[0] == word for line in self.lines):
                    return True
                if self._eof:
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)

    def send(self, line: str) -> None:
        """A line on the child's stdin (needs stdin=True)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)

    def finish(self, timeout: float = 120.0) -> list[str]:
        """Wait for the process and the reader thread; every complete line it wrote."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(30)
            raise AssertionError(
                f"child did not finish within {timeout} s:\n{self.stderr()}"
            ) from None
        self._thread.join(30)
        self._stderr.close()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        return list(self.lines)

    def stderr(self) -> str:
        with contextlib.suppress(OSError):
            return self.stderr_path.read_text(errors="replace")[-6000:]
        return ""


def run_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -c code args...` in a child with the test build's environment, its output kept
    as text."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
    )


def sidecars(path: str | os.PathLike[str]) -> list[str]:
    """The -wal, -shm and -journal files next to `path` that exist."""
    return [s for s in ("-wal", "-shm", "-journal") if os.path.exists(f"{os.fspath(path)}{s}")]


def header_journal_mode(path: str | os.PathLike[str]) -> str:
    """'wal' or 'delete' (rollback journal), from bytes 18-19 of the database header.

    Only for a file that no store of this process has open: closing any file descriptor on
    the database drops every POSIX lock the process holds on it (zarrdb's too)."""
    with open(path, "rb") as f:
        header = f.read(20)
    return (
        {1: "delete", 2: "wal"}.get(header[18], f"unknown({header[18]})")
        if len(header) == 20
        else "none"
    )


def remove_leftover(path: Path) -> None:
    """Removes what a killed writer left: a file, or a private folder it was building in."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Only for a file that no store of this process has open (see header_journal_mode)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_all(store: SQLiteStore) -> dict[str, bytes]:
    """Every key of `store` with its value, through zarrdb."""

    async def keys() -> list[str]:
        return [key async for key in store.list()]

    out: dict[str, bytes] = {}
    for key in asyncio.run(keys()):
        value = store.get_sync(key)
        assert value is not None, f"listed key {key!r} has no value"
        out[key] = value.to_bytes()
    return out


@contextlib.contextmanager
def opened(path: str | os.PathLike[str], **options) -> Iterator[SQLiteStore]:
    store = SQLiteStore(path, **options)
    try:
        yield store
    finally:
        store.close()
