"""Named pause points on the write path, for the schedule explorer's tests.

`point("name")` marks a place in the Python write path (the engine has its own, in C: see
_pause_points.h) where a test may hold the calling thread until another thread reaches some
point, or until the test lets it go: deterministic interleavings instead of sleeps. Unarmed it
is one global lookup and a comparison with None. Only a test build (ZARRDB_TEST_VFS=1, as
scripts/dev.sh builds) can be armed; in any other build, every wheel, arm() refuses, and the
engine has no points at all.
"""

from __future__ import annotations

from collections.abc import Callable

# What every point calls while armed (a test's scheduler), else None.
_hook: Callable[[str], None] | None = None


def point(name: str) -> None:
    """The calling thread is at the pause point `name`."""
    if _hook is not None:
        _hook(name)


def arm(hook: Callable[[str], None]) -> None:
    """Tests only: from now on every point, Python's and the engine's, calls `hook(name)` in
    the thread at the point (the engine's points with the GIL taken, never under a lock the
    writer needs)."""
    global _hook
    from zarrdb import _core

    if not _core.install_pause_hook(point):
        raise NotImplementedError(
            "this build of zarrdb has no pause points: only test builds have them "
            "(built with ZARRDB_TEST_VFS=1, as scripts/dev.sh does)"
        )
    _hook = hook


def disarm() -> None:
    """Every point does nothing again."""
    global _hook
    _hook = None
    from zarrdb import _core

    _core.install_pause_hook(None)
