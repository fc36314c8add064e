"""A watchdog for the end-to-end tests: a test that runs longer than its limit dumps every
thread's traceback and ends the run, instead of blocking it forever. (A lost wake-up in the
group commit or a lock-order deadlock between a transaction and zarr's event-loop thread hangs
rather than fails.) Not used when pytest's own `faulthandler_timeout` is set."""

from __future__ import annotations

import faulthandler
import sys

import pytest

try:  # the copy of the terminal's stderr that pytest's faulthandler plugin keeps
    from _pytest.faulthandler import fault_handler_stderr_fd_key
except ImportError:  # pragma: no cover - other pytest versions
    fault_handler_stderr_fd_key = None

WATCHDOG_SECONDS = 180
WATCHDOG_SECONDS_SLOW = 1200


@pytest.fixture(autouse=True)
def _watchdog(request: pytest.FixtureRequest):
    if request.config.getini("faulthandler_timeout"):
        yield
        return
    slow = request.node.get_closest_marker("slow") is not None
    out = None
    if fault_handler_stderr_fd_key is not None:
        out = request.config.stash.get(fault_handler_stderr_fd_key, None)
    faulthandler.dump_traceback_later(
        WATCHDOG_SECONDS_SLOW if slow else WATCHDOG_SECONDS,
        exit=True,
        file=sys.stderr if out is None else out,
    )
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
