"""Fuzzing what is planted beside a file while a store has it open (test_environment_fuzz.py
plants before the open): a `-wal`, `-journal` or `-shm` (the log or a hot journal of a copy
whose values all differ, empty, or junk; of this user or another; of any mode; a pipe, or a
link to such a file), put there between two writes of a store in its rollback journal
(journal="auto", which turns to WAL after a few small commits) or in WAL mode, while a second,
read-only store reads the file too; taken away again between two later writes, or only after
the stores are closed.

The property, for every case:
- each operation succeeds, or raises a zarrdb error while something is planted: SidecarError
  for what is not the file's own (another user's, writable by others, not a regular file),
  whatever SQLite made of the refusal; any beside the user's own junk. None while nothing is
  (before the plant, after its removal); never another exception, a crash or a hang (a
  deadline per operation);
- every read gives the value of the last write the store acknowledged: no planted page is
  ever read, and no acknowledged write is lost, then or when the file is opened again;
- a planted file that is not the file's own is never opened by any connection of the process
  (inotify), and keeps its owner and mode;
- once it is gone, the store works again: reopened, it holds every acknowledged write, takes
  a write, and closing leaves the file alone (no -wal, -shm or -journal).

Each batch of cases runs in a child process (_after_open_child.py), so that a crash or a hang
fails the batch instead of ending the run. ZARRDB_AFTER_OPEN_FUZZ_EXAMPLES sets the number of
batches (default 2; 30 with -m slow).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from format.builders import make_planted_log, make_store_file
from reliability.helpers import PYTHON, child_env, generated, trials
from security.test_environment_fuzz import CHOICES, IS_ROOT

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="owners, modes, pipes, links; inotify"
)

NOBODY = 65534
BATCH = 8
SECONDS = 20.0  # for one operation
KEYS = ["zarr.json", *(f"k{i}" for i in range(6))]
INITIAL = {"zarr.json": b'{"zarr_format": 3, "node_type": "group"}',
           **{k: f"initial {k}".encode() for k in KEYS[1:]}}  # fmt: skip
PLANTED = b"PLANTED"  # the copy's values (_after_open_child.py says a read of one so)


def _copy(path: Path, other: Path) -> sqlite3.Connection:
    """A connection to a copy of `path` in which every value starts with PLANTED."""
    shutil.copyfile(path, other)
    con = sqlite3.connect(other, isolation_level=None)
    con.execute("UPDATE zarr SET v = CAST(? || k AS BLOB)", (PLANTED,))
    return con


def _sources(folder: Path) -> dict[str, Path]:
    """What a planted file may hold: the log of a copy still open, the journal of a copy in the
    middle of a transaction (made hot: its count of pages written in, as a sync writes it),
    junk."""
    base = folder / "base.zarrdb"
    make_store_file(base, entries=INITIAL, page_size=1024)
    made = {"junk": folder / "junk"}
    made["junk"].write_bytes(os.urandom(4096))
    made["-wal"] = make_planted_log(base, folder / "wal-copy.zarrdb", folder / "wal",
                                    "UPDATE zarr SET v = CAST(? || k || ' again' AS BLOB)",
                                    (PLANTED,))
    with closing(_copy(base, folder / "journal-copy.zarrdb")) as con:
        con.execute("BEGIN")
        con.execute("UPDATE zarr SET v = X'00'")
        journal = bytearray((folder / "journal-copy.zarrdb-journal").read_bytes())
        con.execute("ROLLBACK")
    header = int.from_bytes(journal[20:24], "big")  # the sector size: the header's length
    page = int.from_bytes(journal[24:28], "big")
    journal[0:8] = bytes.fromhex("d9d505f920a163d7")  # (written by that sync too)
    journal[8:12] = ((len(journal) - header) // (page + 8)).to_bytes(4, "big")
    made["-journal"] = folder / "journal"
    made["-journal"].write_bytes(bytes(journal))
    made["base"] = base
    return made


op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(KEYS[1:]), st.sampled_from([16, 16, 3000])),
    st.tuples(st.just("read"), st.sampled_from(KEYS), st.sampled_from(["writer", "reader"])),
)
spec = st.fixed_dictionaries(
    {
        "journal": st.sampled_from(["auto", "auto", "wal"]),
        "side": st.sampled_from(["-wal", "-journal", "-shm"]),
        "content": st.sampled_from(["copy", "empty", "junk"]),
        # (as test_environment_fuzz.py plants them before the open)
        **{name: st.sampled_from(CHOICES[name]) for name in ("owner", "mode", "kind")},
        # journal="auto" turns to WAL after a few small commits (_after_open_child.py):
        # planted before, or after.
        "before": st.lists(op, max_size=12),
        "during": st.lists(op, min_size=1, max_size=10),
        "removed": st.booleans(),
        "after": st.lists(op, min_size=1, max_size=6),
    }
)


def _case(folder: Path, sources: dict[str, Path], n: int, s: dict) -> dict:
    path = folder / f"case{n}.zarrdb"
    shutil.copyfile(sources["base"], path)
    os.chmod(path, 0o644)
    foreign = s["owner"] == "nobody" or s["kind"] != "file" or bool(s["mode"] & 0o022)
    content, side = s["content"], s["side"]
    if s["journal"] == "wal":
        side = "-journal"  # (the -wal and the -shm are there, the store's own, from the open)
    if content == "copy" and not foreign:
        # The user's own hot journal is played back and the user's own log read, as after a
        # crash: nothing tells them from a copy's. Junk, then.
        content = "junk"
    source = None
    if content == "copy":
        source = sources.get(side, sources["junk"])  # (a -shm: junk)
    elif content == "junk":
        source = sources["junk"]
    if s["kind"] == "link":
        # Its own target, so that the child sees who opens it.
        target = folder / f"target{n}"
        if source is not None:
            shutil.copyfile(source, target)
        else:
            target.write_bytes(b"")
        os.chmod(target, s["mode"])
        if IS_ROOT:
            os.chown(target, NOBODY, NOBODY)
        source = target
    ops = [*s["before"], ["plant"], *s["during"]]
    if s["removed"]:
        ops += [["remove"], *s["after"]]
    return {"n": n, "path": str(path), "journal": s["journal"], "side": side,
            "source": None if source is None else str(source), "kind": s["kind"],
            "owner": NOBODY if s["owner"] == "nobody" else os.geteuid(), "mode": s["mode"],
            "foreign": foreign, "initial": {k: v.decode() for k, v in INITIAL.items()},
            "ops": [list(o) for o in ops], "said": f"{n}: {side} ({content}, {s['owner']}, "
            f"{oct(s['mode'])}, {s['kind']}), journal={s['journal']}"}  # fmt: skip


def _run(cases: list[dict], folder: Path) -> list[str]:
    listing = folder / "cases.json"
    listing.write_text(json.dumps(cases))
    args = [PYTHON, "-m", "security._after_open_child", str(listing), str(SECONDS)]
    try:
        out = subprocess.run(args, capture_output=True, text=True, env=child_env(), check=False,
                             timeout=SECONDS * 4 + 60 * len(cases))  # fmt: skip
        stdout, stderr, code = out.stdout, out.stderr, out.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode(errors="replace") if exc.stdout else ""
        stderr, code = "(killed after the batch's deadline)", "hung"
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if "problems" in line]
    problems = [
        f"{cases[r['n']]['said']}: {p}\n    {cases[r['n']]['ops']}\n    {r['outcomes']}"
        for r in results
        for p in r["problems"]
    ]
    if code != 0 or len(results) != len(cases):
        last = next((line for line in reversed(lines) if "at" in line), None)
        where = f"{cases[last['n']]['said']}, at {last['at']}" if last else "before any case"
        problems.append(f"the child ended with {code} ({where}):\n{stderr[-3000:]}")
    return problems


def _check(specs: list[dict]) -> None:
    with tempfile.TemporaryDirectory(prefix="zarrdb-afteropen-") as name:
        folder = Path(name)
        sources = _sources(folder)
        if IS_ROOT:
            for made in ("-wal", "-journal", "junk"):
                os.chown(sources[made], NOBODY, NOBODY)
        problems = _run([_case(folder, sources, n, s) for n, s in enumerate(specs)], folder)
    assert not problems, "\n".join(problems[:20])


@generated(trials("ZARRDB_AFTER_OPEN_FUZZ_EXAMPLES", 2, 30, slow=False))
@given(st.lists(spec, min_size=BATCH, max_size=BATCH))
def test_what_is_planted_after_the_open_is_never_read(specs):
    _check(specs)


@pytest.mark.slow
@generated(trials("ZARRDB_AFTER_OPEN_FUZZ_EXAMPLES", 2, 30, slow=True))
@given(st.lists(spec, min_size=BATCH, max_size=BATCH))
def test_what_is_planted_after_the_open_is_never_read_at_length(specs):
    _check(specs)
