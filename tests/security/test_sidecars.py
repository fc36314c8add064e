"""Files planted beside someone's file (issue 37, finding 3).

SQLite reads a `-wal`, `-shm` or `-journal` beside a database as part of it, and uses a `-wal`
that exists even when the file's header says rollback mode. Anyone who may create a file in
the folder (a sticky /tmp, a shared project folder) planted a `-wal` made from another
database: every read showed the planter's hierarchy, and the first write copied it into the
file. Before any open each sidecar must be the file's own (same owner, writable by no one the
file is not writable by, a regular file, and a `-wal` with content only beside a file in WAL
mode); the size of a file in rollback mode must be what its header says.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype

from cli.helpers import assert_bad_input, fingerprint, run
from format.builders import make_planted_log, make_store_file
from zarrdb import SQLiteStore, _beside, _core, _pause, conformance, errors

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX owners, modes, pipes and links")

NOBODY = 65534
needs_root = pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0,
    reason="giving a file another owner needs root (CI runs as root)",
)
PLANTED = {"zarr_format": 3, "node_type": "group", "attributes": {"planted": True}}


def victim(tmp_path: Path) -> Path:
    path = make_store_file(tmp_path / "mine.zarrdb")
    os.chmod(path, 0o644)
    return path


def planted_wal(path: Path, workdir: Path) -> Path:
    """A -wal beside `path` taken from another copy of it, in which the root group's
    zarr.json says {"planted": true}: the log of a connection still open, copied as it was."""
    make_planted_log(path, workdir / "other.zarrdb", f"{path}-wal",
                     "UPDATE zarr SET v = ? WHERE k = 'zarr.json'", (json.dumps(PLANTED).encode(),))
    # What was copied beside the file is in rollback mode, the log in WAL frames.
    assert Path(f"{path}-wal").stat().st_size > 0
    return Path(f"{path}-wal")


def anothers_file(name: str) -> int:
    """An empty file of another user made at `name` (exclusively); its descriptor, open, as
    whoever planted it may keep it."""
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.fchown(fd, NOBODY, NOBODY)
    return fd


def root_attributes(store: SQLiteStore) -> dict:
    return json.loads(store.get_sync("zarr.json").to_bytes())["attributes"]


@needs_root
@pytest.mark.parametrize("read_only", [True, False])
def test_a_planted_wal_of_another_user_is_refused_by_the_store(tmp_path, read_only):
    """Read-only and writable opens raise SidecarError naming the log; the file is untouched
    (before: the planted hierarchy was read, and a writable open copied it into the file)."""
    path = victim(tmp_path)
    wal = planted_wal(path, tmp_path)
    os.chown(wal, NOBODY, NOBODY)
    before = fingerprint(path)
    store = SQLiteStore(path, read_only=read_only)
    try:
        with pytest.raises(errors.SidecarError, match="-wal") as raised:
            root_attributes(store)
    finally:
        store.close()
    assert "another user" in str(raised.value) and "remove it" in str(raised.value)
    assert fingerprint(path) == before


@needs_root
@pytest.mark.parametrize("command", ["info", "tree", "check", "snapshot", "mv"])
def test_a_planted_wal_of_another_user_is_refused_by_every_command(tmp_path, command):
    path = victim(tmp_path)
    os.chown(planted_wal(path, tmp_path), NOBODY, NOBODY)
    before = fingerprint(path)
    more = {"snapshot": [tmp_path / "copy.zarrdb"], "mv": ["a", "b"]}.get(command, [])
    line = assert_bad_input(run(command, path, *more), f"{path}-wal")
    assert "another user" in line
    assert fingerprint(path) == before


@needs_root
def test_the_conformance_checker_refuses_a_planted_wal(tmp_path):
    path = victim(tmp_path)
    os.chown(planted_wal(path, tmp_path), NOBODY, NOBODY)
    with pytest.raises(errors.SidecarError, match="another user"):
        conformance.check_file(path)


def test_a_log_with_content_beside_a_file_in_rollback_mode_is_refused(tmp_path):
    """Even the user's own: no writer of this file leaves one (it could only be copied in)."""
    path = victim(tmp_path)
    planted_wal(path, tmp_path)
    with pytest.raises(errors.SidecarError, match="not in WAL mode"):
        SQLiteStore(path, read_only=True).ensure_open()
    line = assert_bad_input(run("info", path), "-wal")
    assert "not in WAL mode" in line


@pytest.mark.parametrize("versions", [(2, 1), (1, 0), (0, 1), (0, 0), (2, 0), (3, 1)])
def test_a_log_beside_any_header_sqlite_opens_in_rollback_mode_is_refused(tmp_path, versions):
    """SQLite is in WAL mode by the header's read version (byte 19) alone: 0 and 1 are rollback
    mode whatever the write version (byte 18) says (above 2: the file is only read), and it
    reads a log beside the file in either. A crafted file whose versions were not both 1 opened
    with a planted log's hierarchy."""
    path = victim(tmp_path)
    planted_wal(path, tmp_path)
    with open(path, "r+b") as f:
        f.seek(18)
        f.write(bytes(versions))
    before = fingerprint(path)
    for read_only in (True, False):
        store = SQLiteStore(path, read_only=read_only)
        try:
            with pytest.raises(errors.SidecarError, match="not in WAL mode"):
                root_attributes(store)
        finally:
            store.close()
    assert fingerprint(path) == before


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("mode", [0o666, 0o664])
def test_a_sidecar_others_may_write_is_refused(tmp_path, suffix, mode):
    """A world- or group-writable sidecar beside a file that is neither: whoever may write it
    decides what is read (the "planted world-writable -shm beside a planted -wal")."""
    path = victim(tmp_path)
    side = Path(f"{path}{suffix}")
    side.write_bytes(b"")
    os.chmod(side, mode)
    with pytest.raises(errors.SidecarError, match="may be written by"):
        SQLiteStore(path, read_only=True).ensure_open()


def test_sidecars_as_writable_as_the_file_are_accepted(tmp_path):
    """A file shared with its group for writing gets sidecars with its own permissions."""
    path = victim(tmp_path)
    os.chmod(path, 0o664)
    Path(f"{path}-journal").write_bytes(b"")
    os.chmod(f"{path}-journal", 0o664)
    with SQLiteStore(path, read_only=True) as store:
        assert store.get_sync("zarr.json") is not None


def test_a_sidecar_that_is_not_a_regular_file_is_refused(tmp_path):
    """A pipe as the journal held the open forever (in a child, so that it cannot hold the
    tests); a link points anywhere."""
    path = victim(tmp_path)
    os.mkfifo(f"{path}-journal")
    try:
        child = subprocess.run(
            [sys.executable, "-c", "import sys; from zarrdb import SQLiteStore; "
             "SQLiteStore(sys.argv[1], read_only=True).ensure_open()", str(path)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("opening a file beside a pipe named as its journal hung")
    assert "SidecarError" in child.stderr and "not a regular file" in child.stderr, child.stderr
    os.unlink(f"{path}-journal")
    os.symlink(tmp_path / "elsewhere", f"{path}-wal")
    with pytest.raises(errors.SidecarError, match="not a regular file"):
        SQLiteStore(path, read_only=True).ensure_open()


@needs_root
def test_a_sidecar_planted_before_the_file_exists_is_refused(tmp_path):
    """A -journal waiting for a file to be created under its name."""
    path = tmp_path / "new.zarrdb"
    Path(f"{path}-journal").write_bytes(b"")
    os.chown(f"{path}-journal", NOBODY, NOBODY)
    with pytest.raises(errors.SidecarError):
        SQLiteStore(path).ensure_open()


def test_a_file_in_wal_mode_is_read_beside_its_writer(tmp_path):
    """The usual case still works: a second store reads what a writer in WAL mode committed,
    while the writer has its -wal and -shm open."""
    path = tmp_path / "live.zarrdb"
    with SQLiteStore(path, journal="wal") as writer:
        group = zarr.open_group(writer, mode="w")
        group.create_array("a", shape=(4,), dtype="int32")[:] = [1, 2, 3, 4]
        assert Path(f"{path}-wal").stat().st_size > 0
        with SQLiteStore(path, read_only=True) as reader:
            assert list(zarr.open_array(reader, path="a", mode="r")[:]) == [1, 2, 3, 4]


def test_a_file_shorter_than_its_header_says_is_refused(tmp_path):
    """In rollback mode the file holds at least the header's page count times the page size; a
    file cut short is refused before anything is read."""
    path = victim(tmp_path)
    os.truncate(path, path.stat().st_size - 1024)
    with pytest.raises(errors.DatabaseCorruptError, match="header says"):
        SQLiteStore(path, read_only=True).ensure_open()
    report = conformance.check_file(path)
    assert any("header says" in f.message for f in report.findings)


def test_a_file_back_in_wal_mode_at_the_second_look_is_not_held_to_its_count(tmp_path):
    """The header an open read said rollback mode beside a log it had sized; at its second look
    another writer had entered WAL mode, the log its own. A file in WAL mode may be shorter
    than its header's count while a checkpoint fills it: no size check then (it called the
    file cut short)."""
    path = victim(tmp_path)
    planted_wal(path, tmp_path)  # (a log with content: what the sizing found)
    found = _beside.check(str(path))
    head = path.read_bytes()[:100]
    size = path.stat().st_size
    wal_head = head[:18] + b"\x02\x02" + head[20:]
    reads = iter([(head, size), (wal_head, size - 4096)])
    _beside.check_header(str(path), found, lambda: next(reads))
    # A log beside a header in rollback mode at each look is still refused.
    reads = iter([(head, size)] * 4)
    with pytest.raises(errors.SidecarError, match="not in WAL mode"):
        _beside.check_header(str(path), _beside.check(str(path)), lambda: next(reads))


def test_a_file_longer_than_its_header_says_is_read_by_the_header(tmp_path):
    """Pages past the header's count (a writer killed while the file grew, a power loss before
    a truncate reached the disk) are never pages of the file: a sparse tail of 1 GiB opens,
    reads what the header counts, and sizes nothing by the file's length."""
    path = tmp_path / "grown.zarrdb"
    with SQLiteStore(path) as writer:
        zarr.open_group(writer, mode="w").create_array("a", shape=(4,), dtype="int32")[:] = [
            1, 2, 3, 4
        ]
    os.truncate(path, path.stat().st_size + (1 << 30))
    with SQLiteStore(path, read_only=True) as reader:
        assert list(zarr.open_array(reader, path="a", mode="r")[:]) == [1, 2, 3, 4]
    assert not any("header says" in f.message for f in conformance.check_file(path).findings)


def test_the_checks_keep_the_locks_of_this_process(tmp_path):
    """The header is read through SQLite's own handle: closing another descriptor of the file
    would drop every POSIX lock this process holds on it, here a writer's, and let another
    process write in the middle of its transaction."""
    path = victim(tmp_path)
    with SQLiteStore(path) as writer, writer.transaction():
        writer.set_sync("k", default_buffer_prototype().buffer.from_bytes(b"x"))
        with SQLiteStore(path, read_only=True) as reader:  # opened and closed meanwhile
            assert reader.get_sync("zarr.json") is not None
        other = subprocess.run(
            [sys.executable, "-c", "import sqlite3, sys; "
             "sqlite3.connect(sys.argv[1], timeout=0).execute('BEGIN IMMEDIATE')", str(path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert other.returncode != 0 and "locked" in other.stderr, other.stderr


@needs_root
@pytest.mark.parametrize("sidecar", ["-wal", "-journal"])
def test_a_sidecar_planted_while_a_writer_has_the_file_open_is_named_by_its_write(
    tmp_path, sidecar
):
    """The writer thread's failures are built as every connection's are: the write that
    meets a -wal or -journal planted after the open (another user's) fails with SidecarError
    saying so (before: a bare CantOpenError, "unable to open database file"), and the file
    keeps what was committed."""
    path = victim(tmp_path)
    spare = tmp_path / "spare"
    spare.mkdir()
    planted = planted_wal(shutil.copyfile(path, spare / path.name), spare)
    value = default_buffer_prototype().buffer.from_bytes(b"x")
    store = SQLiteStore(path, journal="delete")
    store.set_sync("first", value)
    shutil.copyfile(planted, f"{path}{sidecar}")
    os.chown(f"{path}{sidecar}", NOBODY, NOBODY)
    with pytest.raises(errors.SidecarError, match="another user"):
        store.set_sync("second", value)
    os.remove(f"{path}{sidecar}")
    store.close()
    with SQLiteStore(path, read_only=True) as reader:
        assert reader.get_sync("first") is not None and reader.get_sync("second") is None


@needs_root
@pytest.mark.skipif(not _core._PAUSE_POINTS, reason="pause points: test builds only")
def test_a_journal_put_in_place_as_sqlite_makes_its_own_is_refused(tmp_path):
    """The guarded VFS found no -journal, and SQLite then created one by name: another user's
    put in place between the two (the test does it at the pause point between them; in a
    sticky folder, a loop of link and unlink did it within seconds) was opened and written
    as the journal of the write, its pages the writer's to copy back. The VFS now makes the
    journal itself, exclusively, before SQLite opens it: one that came first is checked as any
    sidecar, and refused."""
    path = victim(tmp_path)
    spare = tmp_path / "spare"
    spare.mkdir()
    planted = planted_wal(shutil.copyfile(path, spare / path.name), spare)
    target = f"{path}-journal"
    value = default_buffer_prototype().buffer.from_bytes(b"x")
    store = SQLiteStore(path, journal="delete")
    store.set_sync("first", value)
    put = []

    def put_in_place(name: str) -> None:
        if name == "vfs.sidecar" and not put:
            put.append(name)
            shutil.copyfile(planted, target)
            os.chown(target, NOBODY, NOBODY)

    _pause.arm(put_in_place)
    try:
        with pytest.raises(errors.SidecarError, match="another user"):
            store.set_sync("second", value)
    finally:
        _pause.disarm()
    assert put
    os.remove(target)
    store.close()
    with SQLiteStore(path, read_only=True) as reader:
        assert reader.get_sync("first") is not None and reader.get_sync("second") is None
        assert "planted" not in root_attributes(reader)


@needs_root
def test_a_shm_planted_before_the_switch_to_wal_is_refused(tmp_path):
    """SQLite opens the -shm itself, at the first read of a file in WAL mode. Another user's,
    put beside a store still in its rollback journal (journal="auto"), was taken when the
    writer switched the file to WAL, and whoever kept it open could put back an older header of
    the wal-index: the writer then wrote over commits it had acknowledged, and they were lost
    without an error. The engine checks the -shm at each connection's first map of it: the
    write after the switch raises SidecarError, and every acknowledged write is kept."""
    path = victim(tmp_path)
    value = default_buffer_prototype().buffer.from_bytes(b"x")
    store = SQLiteStore(path)  # journal="auto": rollback journal, WAL after small commits
    store.set_sync("first", value)
    shm = f"{path}-shm"
    fd = anothers_file(shm)
    acknowledged = ["first"]
    try:
        with pytest.raises(errors.SidecarError, match="another user"):
            for n in range(2000):  # the switch comes after a few dozen small commits
                store.set_sync(f"run{n}", value)
                acknowledged.append(f"run{n}")
    finally:
        os.close(fd)
    os.remove(shm)
    store.set_sync("after", value)  # the store goes on once it is gone
    store.close()
    with SQLiteStore(path, read_only=True) as reader:
        kept = [key for key in [*acknowledged, "after"] if reader.get_sync(key) is not None]
    assert kept == [*acknowledged, "after"]
    assert len(acknowledged) < 2001


@needs_root
def test_closing_beside_a_refused_shm_says_which_file_and_why(tmp_path):
    """A store whose -shm was refused at the switch to WAL cannot copy its log into the file
    at close: the warning named a disk I/O error (SQLite's code for the failed map), with a
    full disk as the example. It names the -shm and its owner, as the write before it did."""
    path = victim(tmp_path)
    value = default_buffer_prototype().buffer.from_bytes(b"x")
    store = SQLiteStore(path)
    store.set_sync("first", value)
    fd = anothers_file(f"{path}-shm")
    try:
        with pytest.raises(errors.SidecarError):
            for n in range(2000):
                store.set_sync(f"run{n}", value)
        with pytest.warns(UserWarning, match="stays in WAL mode") as warned:
            store.close()
    finally:
        os.close(fd)
    (message,) = [str(w.message) for w in warned if "stays in WAL mode" in str(w.message)]
    assert "SidecarError" in message and "-shm' beside it belongs to another user" in message
    assert "disk I/O error" not in message
    os.remove(f"{path}-shm")
    with SQLiteStore(path, read_only=True) as reader:
        assert reader.get_sync("first") is not None


@needs_root
def test_a_real_io_error_is_not_blamed_on_a_file_planted_beside_the_store(tmp_path):
    """Once the sidecars were looked at on I/O errors too (a refused -shm reaches a checkpoint
    as one), any I/O error became a SidecarError while another user's file lay beside the
    store, even a -journal SQLite never reads in WAL mode: a write over the process's file size
    limit said to remove the -journal, which changed nothing. Only the shared memory's errors
    look at the -shm; the I/O error is what it says."""
    path = victim(tmp_path)
    value = default_buffer_prototype().buffer.from_bytes
    store = SQLiteStore(path, journal="wal")
    store.set_sync("first", value(b"x"))
    os.close(anothers_file(f"{path}-journal"))
    limit = max(os.path.getsize(path), os.path.getsize(f"{path}-wal")) + 64 * 1024
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a signal
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        with pytest.raises(errors.DiskIOError) as raised:
            store.set_sync("big", value(os.urandom(1 << 20)))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert not isinstance(raised.value, errors.SidecarError)
    assert "-journal" not in str(raised.value)
    store.set_sync("after", value(b"y"))
    os.remove(f"{path}-journal")
    store.close()
    with SQLiteStore(path, read_only=True) as reader:
        assert reader.get_sync("first") is not None and reader.get_sync("after") is not None


@needs_root
def test_a_journal_planted_beside_a_store_in_wal_mode_stays_anothers(tmp_path):
    """The writer's checkpointer had a connection of its own, not through the guarded VFS:
    its first read looked into a -journal planted beside the file and opened it, and SQLite
    run by root gave it the file's owner, after which every check took it as the file's own
    and the next open in rollback mode played it back. The checkpointer's connection is
    guarded too, and SQLite gives away only files this process made."""
    path = victim(tmp_path)
    spare = tmp_path / "spare"
    spare.mkdir()
    planted = planted_wal(shutil.copyfile(path, spare / path.name), spare)
    journal = f"{path}-journal"
    store = SQLiteStore(path, journal="wal")
    store.set_sync("first", default_buffer_prototype().buffer.from_bytes(b"x"))
    shutil.copyfile(planted, journal)
    os.chown(journal, NOBODY, NOBODY)
    for n in range(300):  # enough pages for the checkpointer to run, often
        store.set_sync(f"k{n}", default_buffer_prototype().buffer.from_bytes(os.urandom(4000)))
    store.close()
    assert os.stat(journal).st_uid == NOBODY
    os.remove(journal)
    with SQLiteStore(path, read_only=True) as reader:
        assert "planted" not in root_attributes(reader)
        assert reader.get_sync("k299") is not None


@needs_root
def test_a_log_planted_while_the_file_is_open_is_not_read(tmp_path):
    """SQLite looks for a -wal again at each read of a file in rollback mode: one planted
    after the open (another user's) makes the read fail instead of being read (before: the
    planted log's hierarchy was read). The engine's VFS refuses such a -wal or -journal as
    SQLite opens it."""
    path = victim(tmp_path)
    spare = tmp_path / "spare"
    spare.mkdir()
    source = planted_wal(shutil.copyfile(path, spare / path.name), spare)
    content = path.read_bytes()
    with SQLiteStore(path, read_only=True) as store:
        assert "planted" not in root_attributes(store)
        shutil.copyfile(source, f"{path}-wal")
        os.chown(f"{path}-wal", NOBODY, NOBODY)
        with pytest.raises(errors.SidecarError, match="another user"):
            root_attributes(store)
    assert path.read_bytes() == content
