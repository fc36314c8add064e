"""The local file system as a hostile party sees it: a file planted at the name of a
temporary file.

Commands run in a child Python process (the real `zarrdb` main()) with the umask set
explicitly; a racer that plants a file is made deterministic by planting it from an audit hook
at the very moment it would win (right after the command removed the name)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cli.helpers import assert_ok, fingerprint, sqlite_rows
from format.builders import make_store_file

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


def store_file(path: Path, file_mode: int = 0o644) -> Path:
    make_store_file(path)
    os.chmod(path, file_mode)
    return path



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
