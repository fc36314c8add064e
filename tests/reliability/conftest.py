"""Reliability tests: real processes, real files, nothing mocked (issue 9).

Tests marked `slow` here are skipped in a plain run, which stays within about three minutes on
two cores. Run them with `-m slow` (or any -m expression that names `slow`), or with
ZARRDB_RUN_SLOW=1. Trial counts of the randomised tests come from environment variables (see
helpers.trials)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
# Lines the fuzz tests leave for the end of the test output (how far the mutated files got).
FUZZ_SUMMARY = pytest.StashKey[list]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FUZZ_SUMMARY] = []


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    for line in config.stash.get(FUZZ_SUMMARY, []):
        terminalreporter.write_line(line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in (config.getoption("markexpr") or "") or os.environ.get("ZARRDB_RUN_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or ZARRDB_RUN_SLOW=1")
    for item in items:
        if item.get_closest_marker("slow") and _HERE in Path(item.path).resolve().parents:
            item.add_marker(skip)
