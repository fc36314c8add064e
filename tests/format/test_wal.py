"""Journal mode while a store is open for writing (journal="auto": a rollback journal, WAL once
commits turn small and frequent; "wal": WAL throughout), DELETE (one self-contained file) after
close, and recovery of a file a crashed writer left behind.

While a zarrdb store has a file open, the file is looked at only from a child process (see
sqlite_checks: two SQLite libraries in one process do not share POSIX locks)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import zarr

from zarrdb import SQLiteStore

from .sqlite_checks import (
    assert_conforming,
    header,
    peek_from_child,
    run_python,
    sidecars,
    zarr_rows,
)


def test_wal_while_open_for_writing_delete_after_close(tmp_path):
    path = tmp_path / "wal.zarrdb"
    store = SQLiteStore(path, journal="wal")
    root = zarr.open_group(store, mode="w")
    root.create_array("a", shape=(10,), chunks=(5,), dtype="i4")[:] = np.arange(10)

    seen = peek_from_child(path)  # the store is still open here
    assert seen["journal_mode"] == "wal"
    assert (seen["write_version"], seen["read_version"]) == (2, 2)
    # what was written is committed: another process sees it
    assert {"zarr.json", "a/zarr.json", "a/c/0", "a/c/1"} <= set(seen["keys"])

    store.close()
    assert sidecars(path) == []
    head = header(path)
    assert (head[18], head[19]) == (1, 1)
    assert_conforming(path)


def test_auto_journal_rollback_while_writing_then_wal_after_small_commits(tmp_path):
    """The default: a rollback journal while open (the header says rollback, the journal file
    is kept empty between commits), WAL once a run of small commits has come, and one file in
    DELETE mode after close either way."""
    path = tmp_path / "auto.zarrdb"
    store = SQLiteStore(path)
    root = zarr.open_group(store, mode="w")
    arr = root.create_array("a", shape=(10,), chunks=(5,), dtype="i4")
    arr[:] = np.arange(10)  # two commits so far (metadata, then the chunks)

    seen = peek_from_child(path)
    assert (seen["write_version"], seen["read_version"]) == (1, 1)
    assert {"zarr.json", "a/zarr.json", "a/c/0", "a/c/1"} <= set(seen["keys"])
    assert "-wal" not in sidecars(path)
    journal = f"{path}-journal"
    assert not os.path.exists(journal) or os.path.getsize(journal) == 0

    for i in range(40):  # small commits, one at a time
        arr[i % 10] = -i
    seen = peek_from_child(path)
    assert (seen["write_version"], seen["read_version"]) == (2, 2)
    assert seen["journal_mode"] == "wal"

    store.close()
    assert sidecars(path) == []
    head = header(path)
    assert (head[18], head[19]) == (1, 1)
    assert_conforming(path)


def test_read_only_store_leaves_delete_mode_alone(tmp_path):
    path = tmp_path / "ro.zarrdb"
    store = SQLiteStore(path)
    zarr.open_group(store, mode="w").attrs["x"] = 1
    store.close()
    before = path.read_bytes()

    store = SQLiteStore(path, read_only=True)
    assert dict(zarr.open_group(store, mode="r").attrs) == {"x": 1}
    seen = peek_from_child(path)
    assert seen["journal_mode"] == "delete"
    assert sidecars(path) == []
    store.close()
    assert path.read_bytes() == before


def test_reopening_for_writing_twice_ends_in_delete_mode(tmp_path):
    path = tmp_path / "again.zarrdb"
    for i in range(3):
        store = SQLiteStore(path)
        root = zarr.open_group(store, mode="a")
        root.create_array(f"a{i}", shape=(3,), chunks=(3,), dtype="i1")[:] = i + 1
        store.close()
        assert_conforming(path)
    assert {"a0/c/0", "a1/c/0", "a2/c/0"} <= set(zarr_rows(path))


_CRASHING_WRITER = """
import os, signal, sys
import numpy as np
import zarr
from zarrdb import SQLiteStore

path, how, journal = sys.argv[1], sys.argv[2], sys.argv[3]
store = SQLiteStore(path, journal=journal)
root = zarr.open_group(store, mode="w")
root.attrs["committed"] = True
arr = root.create_array("data", shape=(100,), chunks=(10,), dtype="i8")
arr[:] = np.arange(100) * 3
print("written", flush=True)
if how == "exit":
    os._exit(0)  # no close, no atexit handlers
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("how", ["exit", "sigkill"])
@pytest.mark.parametrize("first_open", ["read", "write"])
@pytest.mark.parametrize("journal", ["wal", "auto"])
def test_file_left_behind_by_a_crashed_writer_recovers(tmp_path, how, first_open, journal):
    path = tmp_path / "crashed.zarrdb"
    proc = run_python(_CRASHING_WRITER, str(path), how, journal)
    assert proc.stdout.strip() == "written", proc.stderr
    assert proc.returncode == (0 if how == "exit" else -9), proc.stderr

    # precondition: what the writer really left: the file in WAL mode with its -wal file, or
    # (between two commits in a rollback journal) the file in rollback mode and an empty journal
    head = header(path)
    if journal == "wal":
        assert (head[18], head[19]) == (2, 2)
        assert "-wal" in sidecars(path)
    else:
        assert (head[18], head[19]) == (1, 1)
        assert os.path.getsize(f"{path}-journal") == 0

    expected = np.arange(100) * 3
    if first_open == "read":
        store = SQLiteStore(path, read_only=True)
        root = zarr.open_group(store, mode="r")
        assert root.attrs["committed"] is True
        np.testing.assert_array_equal(root["data"][:], expected)
        store.close()

    store = SQLiteStore(path)
    root = zarr.open_group(store, mode="r+")
    assert root.attrs["committed"] is True
    np.testing.assert_array_equal(root["data"][:], expected)
    store.close()

    # after the next close: back to one file in DELETE mode, with the committed data in it
    assert sidecars(path) == []
    assert_conforming(path)
    rows = zarr_rows(path)
    assert json.loads(rows["zarr.json"])["attributes"] == {"committed": True}
    assert sum(1 for k in rows if k.startswith("data/c/")) == 10


_WRITER_AND_ZARR_READ_ONLY_COPY = """
import sys
import numpy as np
import zarr
from zarrdb import SQLiteStore

store = SQLiteStore(sys.argv[1])
root = zarr.open_group(store, mode="w")
root.create_array("a", shape=(10,), chunks=(5,), dtype="i4")[:] = np.arange(10)
# mode "r" on a writable store: zarr reads through store.with_read_only(True), a second
# (read-only) SQLiteStore that the program never closes; zarrdb closes it at exit.
view = zarr.open_group(store, mode="r")
assert view["a"][:].tolist() == list(range(10))
store.close()  # `view` (and its store) is still referenced
print("closed", flush=True)
"""


def test_single_file_after_exit_when_zarr_made_a_read_only_copy(tmp_path):
    """A common pattern: a writable store, later opened by zarr with mode="r". When the process
    has ended normally, the file must be one file in DELETE mode again."""
    path = tmp_path / "copy.zarrdb"
    proc = run_python(_WRITER_AND_ZARR_READ_ONLY_COPY, str(path))
    assert proc.returncode == 0 and proc.stdout.strip() == "closed", proc.stderr
    assert sidecars(path) == []
    assert_conforming(path)
    assert set(zarr_rows(path)) >= {"a/c/0", "a/c/1"}


@pytest.mark.parametrize("last", ["reader", "writer"], ids=["reader-closed-last", "writer-closed-last"])
def test_single_file_after_a_writer_and_a_reader_of_this_process_close(tmp_path, last):
    path = tmp_path / "two.zarrdb"
    writer = SQLiteStore(path)
    zarr.open_group(writer, mode="w").create_array("a", shape=(4,), dtype="i2")[:] = [1, 2, 3, 4]
    reader = SQLiteStore(path, read_only=True)
    assert zarr.open_array(reader, path="a", mode="r")[:].tolist() == [1, 2, 3, 4]
    first, second = (writer, reader) if last == "reader" else (reader, writer)
    first.close()
    second.close()
    assert sidecars(path) == []
    assert_conforming(path)
