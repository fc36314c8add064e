"""SIGTERM turned into an orderly exit, for programs that ask for it (zarrdb.exit_on_sigterm).

SIGTERM (kill, a scheduler ending a job) ends a Python process at once, without its exit
handlers, which close the stores still open. A library that installs a signal handler by itself
surprises the program that hosts it, so zarrdb does not: what SIGTERM leaves without this is a
consistent file that the next open tidies (docs/guide/durability.md).
"""

from __future__ import annotations

import signal


def exit_on_sigterm() -> bool:
    """Make SIGTERM end the program as an uncaught exception does (SystemExit with status 143,
    as a shell reports), so that exit handlers run and every open store is closed to one file.
    Call it from the main thread. Returns False, changing nothing, when the program has already
    chosen what SIGTERM does (a handler of its own, or SIG_IGN); True once installed."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False

    def terminate(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    return True
