"""pytest plugin of scripts/memcheck.sh (loaded with -p memcheck_plugin; not part of zarrdb).

- Records, in $MEMCHECK_LOGDIR/pids, the pid of the pytest process ("main PID") and of every
  child it forks with os.fork() ("fork PID": tests/core/helpers.run_in_child, the fork tests),
  so that the report knows which valgrind logs must exist. Children started with subprocess
  (fork + exec in C) are not recorded: they run another program.
- Skips, by node id, the tests that cannot pass under the checker ($MEMCHECK_MODE: valgrind or
  asan) for a reason that is not a memory error: they time something, or wait with a timeout
  that the checker's slowdown exceeds. Each entry says why (tests/project/test_memcheck.py
  checks that every listed test exists). Under AddressSanitizer it also skips the files that test the
  project's scripts and packaging, which run no code of the extension.
"""

from __future__ import annotations

import os

import pytest

# Under valgrind everything runs 20-50 times slower; a test that measures time or gives a child
# process a few seconds would be listed here (tests/core passed whole under valgrind, so none is).
VALGRIND_SKIPS: dict[str, str] = {}
# AddressSanitizer keeps freed memory in quarantine and maps shadow memory: a process's size
# says nothing about zarrdb then.
ASAN_SKIPS = {
    "tests/store/test_concurrency.py::test_large_assignment_keeps_memory_bounded": (
        "measures the process's peak memory"
    ),
    "tests/store/test_concurrency.py::test_group_commit_16_threads_batches_and_loses_nothing": (
        "counts writes per commit, which depend on how fast the writer runs"
    ),
    "tests/security/test_sparse_bombs.py::test_vacuum_takes_no_memory_by_the_size_of_the_file": (
        "measures the process's peak memory"
    ),
}
SKIPS = {"valgrind": VALGRIND_SKIPS, "asan": ASAN_SKIPS}
# Whole files left out of the AddressSanitizer run: they test the project's scripts, packaging
# and documentation, and run no code of the extension beyond importing it (which every other
# file does); the tests steps of CI run them.
ASAN_SKIP_FILES = {
    "tests/project/test_collection.py": "collects the suite in another pytest process",
    "tests/project/test_dev_script.py": "tests scripts/dev.sh",
    "tests/project/test_docs.py": "tests the documentation's sources",
    "tests/project/test_find_python.py": "tests scripts/find_python.sh",
    "tests/project/test_memcheck.py": "tests scripts/memcheck.sh and its report",
    "tests/project/test_packaging.py": "tests the sdist and the wheel's build list",
    "tests/project/test_release.py": "tests the release files and workflows",
}
SKIP_FILES = {"asan": ASAN_SKIP_FILES}


def _record(line: str) -> None:
    logdir = os.environ.get("MEMCHECK_LOGDIR")
    if logdir:
        fd = os.open(os.path.join(logdir, "pids"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)


def pytest_configure(config: pytest.Config) -> None:
    _record(f"main {os.getpid()}")
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: _record(f"fork {os.getpid()}"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mode = os.environ.get("MEMCHECK_MODE", "")
    skips = SKIPS.get(mode, {})
    for item in items:
        # an entry names a test, or one parametrised case of it
        reason = (
            skips.get(item.nodeid)
            or skips.get(item.nodeid.split("[", 1)[0])
            or SKIP_FILES.get(mode, {}).get(item.nodeid.split("::", 1)[0])
        )
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"under {mode}: {reason}"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _record(f"done {os.getpid()} {int(exitstatus)}")
