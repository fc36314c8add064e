"""The local file system as a hostile party sees it: symbolic links planted in a source or a
destination directory, a file planted at the name of a temporary file, permissions widened by a
copy, and a `-journal` file left beside a .zarrdb.

Commands run in a child Python process (the real `zarrdb` main()) with the umask set
explicitly; a racer that plants a file is made deterministic by planting it from an audit hook
at the very moment it would win (right after the command removed the name)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from cli.helpers import assert_bad_input, assert_ok, fingerprint, run, sqlite_rows
from format.builders import hand_written_entries, make_store_file
import zarrdb
from zarrdb import SQLiteStore, errors

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX links and modes")

# The child: umask, then (optionally) a planted file and its racer, then zarrdb's main().
CHILD = r"""
import json, os, shutil, sys
umask, argv, plant = json.loads(sys.argv[1])
os.umask(umask)
if plant is not None:
    hostile, name = plant["file"], plant["name"].replace("{pid}", str(os.getpid()))
    shutil.copyfile(hostile, name)

    def racer(event, args):
        # A racer polling the folder plants its file again as soon as the name is free; here
        # that moment is the removal of the name's "-wal" right after the name itself.
        if event == "os.remove" and args and os.fspath(args[0]) == name + "-wal":
            shutil.copyfile(hostile, name)

    sys.addaudithook(racer)
from zarrdb import cli
sys.exit(cli.main(argv))
"""


def run_child(
    *argv: object, umask: int = 0o022, plant: dict | None = None
) -> subprocess.CompletedProcess[str]:
    """`zarrdb ARGV...` in a child with this umask; `plant`: {"file": a hostile file, "name":
    where to plant it, "{pid}" standing for the child's process id}."""
    spec = json.dumps([umask, [str(a) for a in argv], plant])
    return subprocess.run(
        [sys.executable, "-c", CHILD, spec], capture_output=True, text=True, timeout=120
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def store_file(path: Path, file_mode: int = 0o644) -> Path:
    make_store_file(path)
    os.chmod(path, file_mode)
    return path


def store_dir(root: Path) -> Path:
    """The hand-written hierarchy as a directory store."""
    for key, value in hand_written_entries().items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(value)
    return root


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if "partial" in p.name]


# --- 9: symbolic links ------------------------------------------------------------------------


def test_copy_refuses_a_source_link_to_a_file_outside(tmp_path):
    """A chunk file of a directory source linked to a secret outside it: the copy stops (exit
    2, naming the entry) and the secret is in no copy; a link inside the source is followed."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"the user's private key")
    source = store_dir(tmp_path / "src.zarr")
    (source / "a/c/1").unlink()
    (source / "a/c/1").symlink_to(secret)
    out = tmp_path / "out.zarrdb"
    line = assert_bad_input(run("copy", source, out), "'a/c/1'", "outside")
    assert "symbolic link" in line
    assert not out.exists() and leftovers(tmp_path) == []

    (source / "a/c/1").unlink()
    (source / "a/c/1").symlink_to("0")  # a link that stays inside the source
    assert_ok(run("copy", source, out))
    assert dict(sqlite_rows(out))["a/c/1"] == hand_written_entries()["a/c/0"]


def test_copy_refuses_a_source_path_through_a_linked_folder(tmp_path):
    """--path naming a folder that is a link to another directory: refused, nothing copied."""
    elsewhere = store_dir(tmp_path / "elsewhere")
    source = store_dir(tmp_path / "src.zarr")
    (source / "b").symlink_to(elsewhere / "a", target_is_directory=True)
    out = tmp_path / "out.zarrdb"
    assert_bad_input(run("copy", source, out, "--path", "b"), "'b/", "outside")
    assert not out.exists()


def test_copy_does_not_write_through_a_planted_folder_link(tmp_path):
    """An existing destination directory holding a link `g` to a folder outside it: a copy to
    --dest-path g is refused before anything is written, and the target stays empty."""
    victim = tmp_path / "victim"
    victim.mkdir()
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "zarr.json").write_bytes(hand_written_entries()["zarr.json"])
    (dest / "g").symlink_to(victim, target_is_directory=True)
    source = store_file(tmp_path / "src.zarrdb")
    line = assert_bad_input(run("copy", source, dest, "--dest-path", "g"), "'g/", "outside")
    assert "symbolic link" in line
    assert list(victim.iterdir()) == []
    assert sorted(p.name for p in dest.iterdir()) == ["g", "zarr.json"]


def test_a_folder_swapped_for_a_link_during_a_copy_is_not_written_through(tmp_path):
    """The check of links runs before a copy writes; a folder of the destination swapped for
    a link to elsewhere after it, while the copy runs, was followed and the copy written
    there. The moment is made exact: the source, a store of this test, holds its read of one
    chunk until another thread has put the link in place. Now no write leaves the
    destination: the copy fails with PermissionError and the victim's folder stays empty."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore, WrapperStore

    victim = tmp_path / "victim"
    victim.mkdir()
    dest = tmp_path / "out"
    (dest / "g").mkdir(parents=True)
    (dest / "zarr.json").write_bytes(hand_written_entries()["zarr.json"])
    checked, swapped = threading.Barrier(2, timeout=30), threading.Barrier(2, timeout=30)

    class Held(WrapperStore):
        """Reads a/c/1 only once the swap is done; sizes known without a read (so the one
        read of a/c/1 is the copy's, after its check)."""

        async def getsize(self, key: str) -> int:
            return len(hand_written_entries()[key])

        async def get_partial_values(self, prototype, key_ranges):  # noqa: ANN001
            key_ranges = list(key_ranges)
            if any(key == "a/c/1" for key, _ in key_ranges):
                checked.wait()
                swapped.wait()
            return await super().get_partial_values(prototype, key_ranges)

    def swap() -> None:
        checked.wait()  # the copy has checked the destination and is reading
        (dest / "g").rename(dest / "g-before")
        (dest / "g").symlink_to(victim, target_is_directory=True)
        swapped.wait()

    memory = {k: default_buffer_prototype().buffer.from_bytes(v)
              for k, v in hand_written_entries().items()}  # fmt: skip
    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        with pytest.raises(PermissionError, match="symbolic link"):
            zarrdb.copy(Held(MemoryStore(memory)), dest, dest_path="g")
    finally:
        swapper.join(timeout=30)
    assert list(victim.rglob("*")) == []


def test_a_link_inside_the_destination_is_still_followed(tmp_path):
    """A folder of an existing destination that is a link to another folder inside it: the
    copy writes through it, as the check allows."""
    source = store_file(tmp_path / "src.zarrdb")
    dest = tmp_path / "out"
    (dest / "real").mkdir(parents=True)
    (dest / "zarr.json").write_bytes(hand_written_entries()["zarr.json"])
    (dest / "g").symlink_to("real", target_is_directory=True)
    assert_ok(run("copy", source, dest, "--dest-path", "g"))
    assert (dest / "real/a/c/0").read_bytes() == hand_written_entries()["a/c/0"]


# --- 10: a predictable temporary name ---------------------------------------------------------


def hostile_store(path: Path) -> Path:
    """A valid .zarrdb whose trigger copies every key written into it to a table `loot`."""
    make_store_file(path, entries={"planted": b"from the racer"})
    con = sqlite3.connect(path)
    con.executescript(
        """CREATE TABLE loot(k, v);
        CREATE TRIGGER steal AFTER INSERT ON zarr
            BEGIN INSERT INTO loot VALUES (new.k, new.v); END;"""
    )
    con.close()
    return path


def schema_names(path: Path) -> set[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
    finally:
        con.close()


@pytest.mark.parametrize("command", ["copy", "snapshot"])
def test_a_file_planted_at_the_temporary_name_is_never_used(tmp_path, command):
    """A racer plants its own .zarrdb at the name the temporary file used to get
    (.NAME.partial-PID), before the run and again when the name is freed: the result holds the
    source's data only, and the planted file is neither used, changed nor removed."""
    hostile = hostile_store(tmp_path / "hostile.zarrdb")
    source = store_file(tmp_path / "src.zarrdb")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    dest = out_dir / "copy.zarrdb"
    planted = str(out_dir / ".copy.zarrdb.partial-{pid}")
    proc = run_child(command, source, dest, plant={"file": str(hostile), "name": planted})
    assert_ok(proc)
    assert sqlite_rows(dest) == sqlite_rows(source)
    assert "loot" not in schema_names(dest) and "steal" not in schema_names(dest)
    left = [p for p in out_dir.iterdir() if p != dest]
    assert len(left) == 1 and left[0].name.startswith(".copy.zarrdb.partial-")
    assert fingerprint(left[0]) == fingerprint(hostile)  # untouched


# --- 12: permissions --------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".zarrdb", ".zip", ".zarr"])
def test_a_new_copy_is_no_more_open_than_its_source(tmp_path, suffix):
    """A 0600 source gives a 0600 file (0700 directory) under umask 022, as `cp` does; a 0644
    source under umask 077 still gives 0600 (0700)."""
    private = store_file(tmp_path / "private.zarrdb", 0o600)
    out = tmp_path / f"copy{suffix}"
    assert_ok(run_child("copy", private, out, umask=0o022))
    assert mode(out) == (0o700 if suffix == ".zarr" else 0o600)
    public = store_file(tmp_path / "public.zarrdb", 0o644)
    again = tmp_path / f"again{suffix}"
    assert_ok(run_child("copy", public, again, umask=0o077))
    assert mode(again) == (0o700 if suffix == ".zarr" else 0o600)


def test_copy_overwrite_keeps_the_mode_of_what_it_replaces(tmp_path):
    """--overwrite of a 0600 file and of a 0700 directory from 0644 sources: 0600 and 0700."""
    source = store_file(tmp_path / "src.zarrdb", 0o644)
    target = store_file(tmp_path / "target.zarrdb", 0o600)
    assert_ok(run_child("copy", source, target, "--overwrite"))
    assert mode(target) == 0o600
    folder = store_dir(tmp_path / "target.zarr")
    folder.chmod(0o700)
    assert_ok(run_child("copy", source, folder, "--overwrite"))
    assert mode(folder) == 0o700
    assert (folder / "a/c/1").read_bytes() == hand_written_entries()["a/c/1"]


def test_snapshot_keeps_a_private_file_private(tmp_path):
    """snapshot of a 0600 file gives 0600; --overwrite of a 0600 file from a 0644 one keeps 0600."""
    private = store_file(tmp_path / "private.zarrdb", 0o600)
    snap = tmp_path / "snap.zarrdb"
    assert_ok(run_child("snapshot", private, snap))
    assert mode(snap) == 0o600
    public = store_file(tmp_path / "public.zarrdb", 0o644)
    assert_ok(run_child("snapshot", public, snap, "--overwrite"))
    assert mode(snap) == 0o600
    assert sqlite_rows(snap) == sqlite_rows(public)


# --- a hot journal ------------------------------------------------------------------------------

# Leaves `path` with a hot journal: a transaction that spilled pages into the file, then a
# process that ended without committing or rolling back.
INTERRUPTED_WRITER = r"""
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA cache_size = 2")
con.execute("BEGIN")
for i in range(200):
    con.execute("INSERT INTO zarr(k, v) VALUES (?, ?)", (f"x/c/{i}", os.urandom(3000)))
os._exit(0)
"""


@pytest.fixture
def hot_journal_file(tmp_path) -> Path:
    path = store_file(tmp_path / "crashed.zarrdb")
    subprocess.run([sys.executable, "-c", INTERRUPTED_WRITER, path], check=True, timeout=60)
    assert Path(f"{path}-journal").stat().st_size > 0
    return path


def planted(journal_file: Path) -> Path:
    """`journal_file`'s hot journal, made another user's (as one planted beside it would be)."""
    journal = Path(f"{journal_file}-journal")
    os.chown(journal, 65534, 65534)
    return journal


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving the journal another owner needs root (CI runs as root)"
)


@pytest.mark.parametrize("command", ["info", "tree", "check"])
def test_a_crashed_writers_journal_is_rolled_back_by_a_read_only_command(hot_journal_file, command):
    """A hot journal of the file's own owner (its writer crashed) is rolled back, as any
    connection that may write would, and the command reads the file as last committed."""
    before = sqlite_rows_after_rollback(hot_journal_file)
    assert_ok(run(command, hot_journal_file))
    assert not Path(f"{hot_journal_file}-journal").exists()
    assert sqlite_rows(hot_journal_file) == before


@needs_root
@pytest.mark.parametrize("command", ["info", "tree", "check"])
def test_a_planted_hot_journal_is_named_and_left_alone(hot_journal_file, command):
    """A hot journal of another user beside the file is never rolled back into it: read-only
    commands say what it is and what to do, in one line, and leave the file and the journal as
    they were (it was called "permission denied" before)."""
    planted(hot_journal_file)
    before = fingerprint(hot_journal_file)
    line = assert_bad_input(run(command, hot_journal_file), f"{hot_journal_file}-journal")
    assert "permission denied" not in line
    assert "another user" in line and "remove" in line
    assert fingerprint(hot_journal_file) == before


@needs_root
def test_a_planted_hot_journal_error_from_the_store_names_the_journal(hot_journal_file):
    """The library's own error (SidecarError, raised before SQLite opens anything) says which
    file and why."""
    planted(hot_journal_file)
    store = SQLiteStore(hot_journal_file, read_only=True)
    with pytest.raises(errors.SidecarError, match="-journal") as raised:
        store.ensure_open()
    store.close()
    assert "another user" in str(raised.value)
    assert Path(f"{hot_journal_file}-journal").stat().st_size > 0  # not rolled back


def sqlite_rows_after_rollback(path: Path) -> list:
    """The rows of a copy of `path` and its journal, rolled back by Python's own sqlite3."""
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "copy.zarrdb"
        shutil.copyfile(path, copy)
        shutil.copyfile(f"{path}-journal", f"{copy}-journal")
        con = sqlite3.connect(copy)  # may write: its first read rolls the journal back
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            con.close()
        assert not Path(f"{copy}-journal").exists() or Path(f"{copy}-journal").stat().st_size == 0
        return sqlite_rows(copy)
