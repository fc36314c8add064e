"""The looping-overflow bomb where the file's size is a claim (issue 37, finding 4).

A value's claim was bounded by the file's size (page count x page size). That size is what a
server says an object has, or a local file's apparent size: the 11 KB bomb of
test_overflow_bombs.py, its header saying 2^30 pages and truncated to a sparse 1 TiB (or served
as a 1 TiB object), read as three values of 200 MB. Now a chain that comes back to a page it
passed is refused before anything is allocated, and a remote object's size must be the one
its header gives.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from zarr.abc.store import RangeByteRequest
from zarr.core.buffer import default_buffer_prototype

from security._hostile_http import HostileServer
from security._overflow import bomb_file, run_measured, sound_file
from zarrdb import SQLiteStore
from zarrdb.errors import DatabaseCorruptError

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="sparse files, and /proc for the peak (Linux)"
)

proto = default_buffer_prototype()
TIB = 1 << 40
PAGE = 1024  # the bomb's page size
CHUNK_KEY = "a/c/1"
REMOTE = {"allow_http": True, "retry_config": {"max_retries": 0}}


def claiming(data: bytes, pages: int, *, trusted: bool = True) -> bytes:
    """`data` with a header that says `pages` pages (`trusted`: a count SQLite uses; else one
    it ignores for the file's size)."""
    out = bytearray(data)
    out[28:32] = pages.to_bytes(4, "big")
    if not trusted:
        out[92:96] = (int.from_bytes(out[24:28], "big") + 1).to_bytes(4, "big")
    return bytes(out)


@pytest.fixture(params=["header says 1 TiB", "header count ignored"])
def sparse_bomb(request, tmp_path) -> Path:
    """The bomb as a sparse file of 1 TiB (a few KB on disk)."""
    path = bomb_file(tmp_path / "sparse.zarrdb")
    path.write_bytes(claiming(path.read_bytes(), TIB // PAGE, trusted="says" in request.param))
    os.truncate(path, TIB)
    assert path.stat().st_blocks * 512 < 1 << 20
    return path


def all_reads(store: SQLiteStore) -> dict:
    return {
        "get_sync": lambda: store.get_sync(CHUNK_KEY),
        "get": lambda: asyncio.run(store.get(CHUNK_KEY, proto)),
        "range": lambda: asyncio.run(
            store.get(CHUNK_KEY, proto, RangeByteRequest(100_000_000, 100_000_100))
        ),
        "batch": lambda: asyncio.run(
            store.get_partial_values(proto, [(CHUNK_KEY, None), ("a/c/0", None)])
        ),
    }


@pytest.mark.parametrize("read", ["get_sync", "get", "range", "batch"])
def test_a_sparse_file_does_not_lift_the_bound(sparse_bomb, read):
    """Every read of a value on the looping chain raises DatabaseCorruptError (before: 200 MB
    returned by each get): the file is refused at open as mostly holes, and the chain walk
    behind that check (which the served bombs below reach) names the chain."""
    with pytest.raises(DatabaseCorruptError, match="comes back to a page|are holes"):
        with SQLiteStore(sparse_bomb, read_only=True) as store:
            all_reads(store)[read]()


def test_copy_of_a_sparse_bomb_stays_small(sparse_bomb, tmp_path):
    """The command line on the sparse file: one line, exit 2, and the memory of a small file."""
    sound = run_measured("info", sound_file(tmp_path / "sound.zarrdb"))
    out = run_measured("copy", sparse_bomb, tmp_path / "out.zarrdb")
    assert out.returncode in (1, 2) and "Traceback" not in out.stderr, out.stderr
    assert out.peak_rss < sound.peak_rss + 50_000_000, (out.peak_rss, sound.peak_rss)


def test_a_sound_file_with_long_values_reads_as_before(tmp_path):
    """Chains of many distinct pages, read whole and in ranges, are walked and accepted."""
    path = tmp_path / "long.zarrdb"
    values = {f"v/{n}": os.urandom(n) for n in (70_000, 300_000, 5_000_000)}
    with SQLiteStore(path, page_size=1024) as store:
        for key, value in values.items():
            store.set_sync(key, proto.buffer.from_bytes(value))
    with SQLiteStore(path, read_only=True) as store:
        for key, value in values.items():
            assert store.get_sync(key).to_bytes() == value
            window = RangeByteRequest(len(value) - 5000, len(value) - 10)
            got = asyncio.run(store.get(key, proto, window))
            assert got.to_bytes() == value[-5000:-10]
        got = asyncio.run(store.get_partial_values(proto, [(k, None) for k in values]))
        assert [g.to_bytes() for g in got] == list(values.values())


@pytest.fixture
def served_bomb(tmp_path) -> bytes:
    return bomb_file(tmp_path / "bomb.zarrdb").read_bytes()


def test_a_server_that_claims_another_size_is_refused_at_open(served_bomb):
    """The 11 KB bomb served as a 1 TiB object (its header says otherwise): refused when the
    store opens, naming both sizes (before: 200 MB per get, about 1 MiB of traffic)."""
    with HostileServer(served_bomb, "claim_size", huge=TIB) as server:
        store = SQLiteStore(server.url(), read_only=True, storage_options=REMOTE)
        try:
            with pytest.raises(DatabaseCorruptError, match="server says") as raised:
                store.get_sync(CHUNK_KEY)
        finally:
            store.close()
    assert f"{TIB:,}" in str(raised.value)


def test_a_served_bomb_whose_header_agrees_with_the_claim_is_refused(served_bomb):
    """The header made to say 1 TiB too: the sizes agree, and the chain is refused."""
    data = claiming(served_bomb, TIB // PAGE)
    with HostileServer(data, "claim_size", huge=TIB) as server:
        with SQLiteStore(server.url(), read_only=True, storage_options=REMOTE) as store:
            with pytest.raises(DatabaseCorruptError, match="comes back to a page"):
                store.get_sync(CHUNK_KEY)
        assert server.sent < 4 << 20


# --- the commands that go through every page, on a file that is mostly holes ---------------

COMMANDS = {
    "check": lambda path, out: ["check", path],
    "mv": lambda path, out: ["mv", path, "a", "renamed"],
    "vacuum": lambda path, out: ["vacuum", path],
    "snapshot": lambda path, out: ["snapshot", path, out],
}


@pytest.fixture(params=["sound", "bomb"])
def sparse_tib(request, tmp_path) -> Path:
    """A file of 11 KB truncated to a sparse 1 TiB, its header saying so."""
    make = sound_file if request.param == "sound" else bomb_file
    path = make(tmp_path / "sparse.zarrdb")
    path.write_bytes(claiming(path.read_bytes(), TIB // PAGE))
    os.truncate(path, TIB)
    return path


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_file_of_holes_is_refused_by_every_command(sparse_tib, tmp_path, command):
    """A sparse file of 1 TiB holding 11 KB: SQLite reads it as 2^30 pages. Before, `snapshot`
    copied them for hours (SIGTERM answered after 32 s), `check` took +134 MB for its map of
    pages and `mv` and `vacuum` worked through it; now each command refuses it as damaged in
    a moment, naming the holes, with the memory of a small file."""
    sound = run_measured("info", sound_file(tmp_path / "small.zarrdb"))
    argv = COMMANDS[command](sparse_tib, tmp_path / "snapshot.zarrdb")
    out = run_measured(*argv, timeout=20)
    assert out.returncode == (1 if command == "check" else 2), (out.stdout, out.stderr)
    assert "holes" in out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) <= 1
    assert out.peak_rss < sound.peak_rss + 20_000_000, (out.peak_rss, sound.peak_rss)
    assert not (tmp_path / "snapshot.zarrdb").exists()


def test_a_store_refuses_a_file_of_holes(sparse_tib):
    with pytest.raises(DatabaseCorruptError, match="holes"):
        SQLiteStore(sparse_tib, read_only=True).ensure_open()


@pytest.mark.parametrize("sidecar", ["-journal", "-wal"])
def test_a_journal_of_holes_beside_a_file_of_holes_does_not_lift_the_check(tmp_path, sidecar):
    """A -journal (or, beside a file whose header says WAL, a -wal) as long as the file but all
    holes held no page the file's holes could be waiting for: it is not counted (its length
    was, and `snapshot` then copied 16 GiB)."""
    path = tmp_path / "holes.zarrdb"
    with SQLiteStore(path, journal="delete") as store:
        store.set_sync("a", default_buffer_prototype().buffer.from_bytes(b"x" * 5000))
    with open(path, "r+b") as f:
        head = bytearray(f.read(100))
        # The header's page count no longer trusted: SQLite goes by the file's length.
        head[92:96] = (int.from_bytes(head[24:28], "big") + 1).to_bytes(4, "big")
        if sidecar == "-wal":
            head[18:20] = b"\x02\x02"  # WAL mode: a -wal beside it is the file's own
        f.seek(0)
        f.write(head)
    size = 16 << 30
    os.truncate(path, size)
    journal = Path(str(path) + sidecar)
    journal.touch()
    os.truncate(journal, size)
    if journal.stat().st_blocks * 512 >= size:
        pytest.skip("this file system keeps no holes")
    with pytest.raises(DatabaseCorruptError, match="holes"):
        SQLiteStore(path, read_only=True).ensure_open()


def test_a_sparse_copy_of_a_sound_file_opens(tmp_path):
    """A copy made sparse (cp --sparse=always keeps every zero block as a hole) of a file with
    free pages and values of zeros: its holes are what SQLite may leave as zeros, and it
    opens and reads as before, through every command that goes through its pages."""
    import numpy as np
    import zarr

    path = tmp_path / "sound.zarrdb"
    with SQLiteStore(path, page_size=1024) as store:
        root = zarr.open_group(store, mode="w")
        # Chunks of zeros with a fill value of 1 are stored; no compressor keeps them zeros.
        z = root.create_array("z", shape=(400 * 3000,), chunks=(3000,), dtype="uint8",
                              fill_value=1, compressors=None)  # fmt: skip
        z[:] = 0
        r = root.create_array("r", shape=(400 * 700,), chunks=(700,), dtype="uint8",
                              compressors=None)  # fmt: skip
        r[:] = np.frombuffer(os.urandom(400 * 700), dtype="uint8")
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA secure_delete = ON")
        con.execute("DELETE FROM zarr WHERE k LIKE 'r/c/%'")  # free pages, zeroed
    copy = tmp_path / "copy.zarrdb"
    subprocess.run(["cp", "--sparse=always", str(path), str(copy)], check=True)
    if copy.stat().st_blocks * 512 >= copy.stat().st_size:
        pytest.skip("this file system keeps no holes")
    with SQLiteStore(copy, read_only=True) as store:
        assert not zarr.open_array(store, path="z", mode="r")[:].any()
    for command in ("check", "snapshot"):
        argv = COMMANDS[command](copy, tmp_path / "snap.zarrdb")
        out = run_measured(*argv)
        assert out.returncode == 0, (command, out.stdout, out.stderr)


@pytest.mark.parametrize(
    "command, says", [("snapshot", "needs 1.0 TiB"), ("copy", f"needs {TIB:,} bytes")]
)
def test_a_whole_copy_of_a_served_terabyte_is_refused_for_room(tmp_path, command, says):
    """A server stating 1 TiB, the header agreeing (zeros past 11 KB): `snapshot` copied it
    page by page for hours, and `copy URL new.zarrdb`, which downloads the file whole,
    downloaded zeros for hours; now each is refused before a byte is copied when the
    destination's folder has no room for it."""
    if shutil.disk_usage(tmp_path).free >= TIB:
        pytest.skip("this folder has room for a terabyte")
    data = claiming(sound_file(tmp_path / "sound.zarrdb").read_bytes(), TIB // PAGE)
    with HostileServer(data, "claim_size", huge=TIB) as server:
        out = run_measured(command, server.url(), tmp_path / "copy.zarrdb",
                           "--storage-option", "max_retries=0", timeout=20)  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "copy.zarrdb").exists()


_BACKUP_CHILD = """
import os, signal, sys, threading, time
from zarrdb import SQLiteStore
store = SQLiteStore(sys.argv[1], read_only=True, storage_options={"allow_http": True})
store.ensure_open()
sent = []
def interrupt():
    sent.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)
threading.Timer(1.0, interrupt).start()
try:
    store.backup(sys.argv[2])
except KeyboardInterrupt:
    print("interrupted after", round(time.monotonic() - sent[0], 2), flush=True)
"""


def test_a_backup_hears_ctrl_c(tmp_path):
    """A backup of a whole file (here a server's terabyte of zeros) copies in steps and hears
    Ctrl-C between them: before, one step of every page ran deaf to it (SIGTERM answered after
    32 s for a sparse terabyte, here not within 20 s)."""
    data = claiming(sound_file(tmp_path / "sound.zarrdb").read_bytes(), TIB // PAGE)
    with HostileServer(data, "claim_size", huge=TIB) as server:
        try:
            out = subprocess.run(
                [sys.executable, "-c", _BACKUP_CHILD, server.url(), str(tmp_path / "copy")],
                capture_output=True, text=True, timeout=20,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise AssertionError("the backup did not stop within 19 s of Ctrl-C") from None
    assert out.stdout.startswith("interrupted after"), (out.stdout, out.stderr[-2000:])
    assert float(out.stdout.split()[-1]) < 2.0, out.stdout


_BACKUP_WAITING_CHILD = """
import os, signal, sys, threading
from zarrdb import SQLiteStore
store = SQLiteStore(sys.argv[1], read_only=True, storage_options={"allow_http": True})
store.ensure_open()
print("open", flush=True)
sys.stdin.readline()  # the server holds every request from now on
threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    store.backup(sys.argv[2])
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_ctrl_c_during_a_backups_read_of_a_url_is_a_keyboard_interrupt(tmp_path):
    """Ctrl-C while a step of a backup waits for the server: the read ends with the signal's
    KeyboardInterrupt, which the backup raised as DiskIOError ("disk I/O error"), as SQLite
    saw the read fail (under AddressSanitizer, where reads take longer, the test above met it
    one run in two). The server holds every request once the store is open, so the signal
    comes during a read."""
    data = claiming(sound_file(tmp_path / "sound.zarrdb").read_bytes(), TIB // PAGE)
    with HostileServer(data, "claim_size", huge=TIB) as server:
        child = subprocess.Popen(
            [sys.executable, "-c", _BACKUP_WAITING_CHILD, server.url(), str(tmp_path / "copy")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert child.stdout.readline() == "open\n", child.stderr.read()[-2000:]
            server.stalling.set()
            child.stdin.write("go\n")
            child.stdin.flush()
            out, err = child.communicate(timeout=20)
        finally:
            child.kill()
        assert server.stalled.is_set(), "no read was held: the signal did not come during one"
    assert out == "interrupted\n", (out, err[-2000:])


_VACUUM_CHILD = """
import contextlib, io, json, sys, threading, time
from zarrdb.cli import main
peak, stop = [0], []
def anonymous():
    with open("/proc/self/status") as f:
        return int(next(l.split()[1] for l in f if l.startswith("RssAnon:"))) * 1024
def poll():
    while not stop:
        peak[0] = max(peak[0], anonymous())
        time.sleep(0.002)
before = anonymous()
watcher = threading.Thread(target=poll)
watcher.start()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["vacuum", sys.argv[1]])
stop.append(1)
watcher.join()
print(json.dumps({"code": code, "growth": peak[0] - before}))
"""


def test_vacuum_takes_no_memory_by_the_size_of_the_file(tmp_path):
    """VACUUM builds the new file in a temporary database, which the build kept in memory,
    with caches at the connection's 16 MiB: this file of 131 MB took 84 MB more of the
    process's own memory (not counting the file's pages mapped), one of 219 MB 128 MB. Now
    its memory is SQLite's default cache's, whatever the file's size."""
    path = tmp_path / "big.zarrdb"
    value = proto.buffer.from_bytes(os.urandom(10_000))
    with SQLiteStore(path) as store:
        with store.transaction():
            for i in range(12_000):
                store.set_sync(f"a/c/{i}", value)
        with store.transaction():
            for i in range(0, 12_000, 2):
                store.delete_sync(f"a/c/{i}")
    out = subprocess.run([sys.executable, "-c", _VACUUM_CHILD, str(path)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["code"] == 0, out.stderr
    assert got["growth"] < 50_000_000, got
