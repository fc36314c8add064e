"""The named pause points (zarrdb._pause; test builds only): a test holds a thread at a point
of the write path, the engine's writer thread included, until it lets it go."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from zarr.core.buffer import cpu

from zarrdb import SQLiteStore, _core, _pause

pytestmark = pytest.mark.skipif(
    not _core._PAUSE_POINTS, reason="the pause points are in test builds only (ZARRDB_TEST_VFS=1)"
)


def test_a_writer_held_before_its_commit_commits_only_when_let_go(tmp_path: Path) -> None:
    at_commit = threading.Event()
    go = threading.Event()

    def hook(name: str) -> None:
        if name == "writer.commit" and not go.is_set():
            at_commit.set()
            assert go.wait(10)

    store = SQLiteStore(tmp_path / "p.zarrdb")
    store.ensure_open()
    returned = threading.Event()

    def write() -> None:
        store.set_sync("k", cpu.Buffer.from_bytes(b"v"))
        returned.set()

    _pause.arm(hook)
    try:
        writer = threading.Thread(target=write)
        writer.start()
        assert at_commit.wait(10)  # the writer thread is at the point, its batch applied
        assert not returned.wait(0.2)  # not committed: set_sync has not returned
        go.set()
        writer.join(10)
        assert returned.is_set()
    finally:
        _pause.disarm()
        go.set()
        store.close()
    with SQLiteStore(tmp_path / "p.zarrdb", read_only=True) as again:
        assert again.get_sync("k").to_bytes() == b"v"  # type: ignore[union-attr]

