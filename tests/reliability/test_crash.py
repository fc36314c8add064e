"""Crashes: a child process writes through zarrdb and is killed with SIGKILL at a random moment;
afterwards the file must open, pass SQLite's integrity check, hold every write the child had
acknowledged (with the right bytes), show no transaction half done, and read back through zarr.

- test_kill_during_ingest: many writers at once, group commit on (see _crash_child.py), with
  durability "normal" and "full"; "off" only has to leave a file that opens and is sound.
- test_kill_during_close: the kill lands in close(), i.e. in the WAL checkpoint and the switch
  back to DELETE mode.
- test_kill_during_copy: `python -m zarrdb copy SRC DST` killed part-way: DST does not exist or is
  a complete copy (docs/cli.md: the copy is written under a temporary name and renamed into
  place), and SRC is untouched.
- test_acknowledged_write_from_another_thread_during_a_transaction: a set_sync from a thread
  outside an open `store.transaction()` must not return before its data is committed.

A process crash is what these tests make; a power loss (what durability "full" adds over
"normal") cannot be made here.

Trial counts: ZARRDB_CRASH_TRIALS (per durability level and per kind of kill) overrides the
defaults, which are small in the default run and 30 in the slow one. ZARRDB_CRASH_SEED fixes the
random kill moments (every failure message names the seed to rerun it).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype

from zarrdb.errors import ReadOnlyError

from . import _crash_child as model
from .helpers import (
    PYTHON,
    TESTS_DIR,
    ReportingChild,
    child_env,
    header_journal_mode,
    opened,
    read_all,
    remove_leftover,
    sha256_file,
    sidecars,
    trials,
)

buf = default_buffer_prototype().buffer
SEED = int(os.environ.get("ZARRDB_CRASH_SEED") or random.SystemRandom().randrange(1 << 30))


def crash_trials(slow: bool, default: int = 3) -> int:
    return trials("ZARRDB_CRASH_TRIALS", default, 30, slow=slow)


# --- what the child acknowledged ----------------------------------------------------------------


@dataclass
class Acknowledged:
    """The writes a child reported before it died."""

    blocks: dict[int, int] = field(default_factory=dict)  # block -> last generation
    keys: dict[str, dict[int, int]] = field(default_factory=dict)  # writer -> slot -> last n
    pair: int | None = None  # last transaction
    bulk: set[int] = field(default_factory=set)
    events: list[str] = field(default_factory=list)  # ready, closing, closed, done, ERROR

    @classmethod
    def parse(cls, lines: list[str]) -> Acknowledged:
        ack = cls()
        for line in lines:
            kind, _, rest = line.partition(" ")
            if kind == "Z":
                block, gen = map(int, rest.split())
                ack.blocks[block] = max(gen, ack.blocks.get(block, -1))
            elif kind == "K":
                writer, n = rest.split()
                slots = ack.keys.setdefault(writer, {})
                slot = int(n) % model.SLOTS
                slots[slot] = max(int(n), slots.get(slot, -1))
            elif kind == "T":
                ack.pair = max(int(rest), -1 if ack.pair is None else ack.pair)
            elif kind == "B":
                ack.bulk.add(int(rest))
            else:
                ack.events.append(line)
        return ack

    @property
    def count(self) -> int:
        return (
            sum(g + 1 for g in self.blocks.values())
            + sum(n // model.SLOTS + 1 for slots in self.keys.values() for n in slots.values())
            + (0 if self.pair is None else self.pair + 1)
            + len(self.bulk)
        )


def check_file(path: Path, ack: Acknowledged, context: str) -> dict[str, bytes]:
    """Every promise about the file after the crash; returns its contents."""
    assert not [e for e in ack.events if e.startswith("ERROR")], f"{context}: {ack.events}"
    # A reader first (what `zarrdb info` would do right after the crash), then a writer.
    # One state a reader cannot use: a kill while close() rewrites the header for the switch
    # from WAL back to DELETE mode (SQLite journals that page) leaves a hot rollback journal,
    # which only a writer can roll back: SQLITE_READONLY_ROLLBACK (776), with advice to open
    # the store for writing. The writer below must then recover the file.
    hot_journal = os.path.exists(f"{path}-journal")
    try:
        with opened(path, read_only=True) as store:
            assert store.check() == [], f"{context}: integrity check (read-only open)"
            seen_by_reader = read_all(store)
    except ReadOnlyError as exc:
        assert hot_journal and exc.extended_code == 776, f"{context}: {exc!r}"
        assert str(path) in str(exc) and "open the store for writing" in str(exc), str(exc)
        seen_by_reader = None
    with opened(path) as store:
        assert store.check() == [], f"{context}: integrity check"
        contents = read_all(store)
        array = zarr.open_array(store, path=model.ARRAY, mode="r+")
        assert array.shape == model.SHAPE, context
        data = array[...]
        # The store stays usable for writing after the crash.
        array[0:1, 0:1] = array[0:1, 0:1]
    if seen_by_reader is None:  # recovered by the writer: now a reader can open it
        with opened(path, read_only=True) as store:
            seen_by_reader = read_all(store)
    assert seen_by_reader == contents, f"{context}: a reader and a writer see different data"
    assert sidecars(path) == [], f"{context}: close() left {sidecars(path)}"
    assert header_journal_mode(path) == "delete", context

    problems: list[str] = []
    # zarr blocks: chunk by chunk, the last acknowledged generation or the one after it (in
    # flight at the kill, possibly committed); a block never acknowledged may be unwritten.
    for block in range(model.NBLOCKS):
        got_rows = data[model.block_rows(block)]
        last = ack.blocks.get(block)
        allowed = [
            model.block_value(block, g) for g in ((last, last + 1) if last is not None else (0,))
        ]
        for c0 in range(0, model.COLS, model.CHUNK):
            cols = slice(c0, c0 + model.CHUNK)
            got = got_rows[:, cols]
            if any(np.array_equal(got, value[:, cols]) for value in allowed):
                continue
            if last is None and not got.any():
                continue  # never written (fill value)
            problems.append(
                f"block {block} columns {c0}..: not generation {last} or {last and last + 1}"
            )
    # keys: each slot holds its last acknowledged value or the next one written to it
    for writer in model.KEY_WRITERS:
        slots = ack.keys.get(writer, {})
        for slot in range(model.SLOTS):
            key = f"raw/{writer}/{slot}"
            got = contents.get(key)
            last = slots.get(slot)
            if last is None:
                if got is not None and got != model.key_value(writer, slot):
                    problems.append(f"{key}: unacknowledged and not the first value")
            elif got not in (
                model.key_value(writer, last),
                model.key_value(writer, last + model.SLOTS),
            ):
                problems.append(
                    f"{key}: acknowledged write {last} lost"
                    + (" (key missing)" if got is None else f" (holds {got[:20]!r})")
                )
    for i in ack.bulk:
        if contents.get(f"bulk/{i}") != model.bulk_value(i):
            problems.append(f"bulk/{i}: acknowledged write lost")
    # the transaction pairs: both or neither, never half
    a, b = contents.get("pair/a"), contents.get("pair/b")
    if a != b:
        problems.append(
            f"transaction half visible: pair/a={a and a[:12]!r} pair/b={b and b[:12]!r}"
        )
    elif a is not None:
        n = int(a.split(b"|", 1)[0])
        if a != model.pair_value(n):
            problems.append(f"pair holds a wrong value for transaction {n}")
        if ack.pair is not None and n not in (ack.pair, ack.pair + 1):
            problems.append(f"pair holds transaction {n}, acknowledged up to {ack.pair}")
        if ack.pair is None and n != 0:
            problems.append(f"pair holds transaction {n}, none acknowledged")
    elif ack.pair is not None:
        problems.append(f"acknowledged transaction {ack.pair} lost (no pair)")
    assert not problems, f"{context}: {len(problems)} problem(s):\n" + "\n".join(problems[:30])
    return contents


def run_and_kill(
    tmp_path: Path, durability: str, trial: int, mode: str, delay: float
) -> tuple[Path, Acknowledged]:
    path = tmp_path / f"crash-{durability}-{mode}-{trial}.zarrdb"
    child = ReportingChild(
        ["-m", "reliability._crash_child", str(path), durability, mode],
        tmp_path / f"crash-{durability}-{mode}-{trial}.stderr",
        cwd=TESTS_DIR,
    )
    started = child.wait_for("ready", timeout=60)
    assert started, f"the child did not start:\n{child.stderr()}"
    if mode == "close":
        assert child.wait_for("closing", timeout=120), (
            f"the child did not reach close():\n{child.stderr()}"
        )
    time.sleep(delay)
    child.kill()
    lines = child.finish()
    assert child.proc.returncode in (-signal.SIGKILL, 0), (child.proc.returncode, child.stderr())
    return path, Acknowledged.parse(lines)


# --- kills during ingest -----------------------------------------------------------------------------


def _ingest_trials(tmp_path: Path, durability: str, count: int) -> None:
    rng = random.Random(f"{SEED}-{durability}")
    acknowledged_trials = 0
    for trial in range(count):
        delay = rng.uniform(0.05, 1.5)
        context = f"durability={durability} trial {trial} kill after {delay:.3f} s (ZARRDB_CRASH_SEED={SEED})"
        path, ack = run_and_kill(tmp_path, durability, trial, "ingest", delay)
        assert ack.count > 0 or delay < 1.0, f"{context}: nothing was acknowledged"
        acknowledged_trials += ack.count > 0
        if durability == "off":
            # No promise about acknowledged writes; the file must still open and be sound.
            with opened(path) as store:
                assert store.check() == [], context
                read_all(store)
                zarr.open_array(store, path=model.ARRAY, mode="r")[...]
        else:
            check_file(path, ack, context)
        for leftover in path.parent.glob(path.name + "*"):
            remove_leftover(leftover)
    # A trial killed before anything was acknowledged checks only that the file opens; at least
    # one must have had acknowledged writes to find missing.
    assert acknowledged_trials > 0 or durability == "off", (
        f"no trial of {count} had an acknowledged write when it was killed (ZARRDB_CRASH_SEED={SEED})"
    )


@pytest.mark.parametrize("durability", ["normal", "full", "off"])
def test_kill_during_ingest(tmp_path, durability):
    _ingest_trials(
        tmp_path, durability, crash_trials(False, default=3 if durability != "off" else 1)
    )


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["normal", "full", "off"])
def test_kill_during_ingest_many(tmp_path, durability):
    _ingest_trials(tmp_path, durability, crash_trials(True))


# --- kills during close() -------------------------------------------------------------------------


def _close_trials(tmp_path: Path, durability: str, count: int) -> None:
    rng = random.Random(f"{SEED}-close-{durability}")
    for trial in range(count):
        # close() takes some 20-100 ms here (checkpoint of ~50 MiB of WAL); aim inside it.
        delay = rng.uniform(0.0, 0.08)
        context = f"kill in close(), durability={durability}, trial {trial}, {delay:.3f} s after 'closing' (ZARRDB_CRASH_SEED={SEED})"
        path, ack = run_and_kill(tmp_path, durability, trial, "close", delay)
        assert len(ack.bulk) == model.BULK_KEYS, context
        contents = check_file(path, ack, context)
        # Everything was acknowledged before close(): the whole of it is there.
        assert all(f"bulk/{i}" in contents for i in range(model.BULK_KEYS)), context
        for leftover in path.parent.glob(path.name + "*"):
            remove_leftover(leftover)


@pytest.mark.parametrize("durability", ["normal", "full"])
def test_kill_during_close(tmp_path, durability):
    _close_trials(tmp_path, durability, crash_trials(False, default=2))


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["normal", "full"])
def test_kill_during_close_many(tmp_path, durability):
    _close_trials(tmp_path, durability, crash_trials(True))


# --- kills during `zarrdb copy` ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def copy_source(tmp_path_factory) -> tuple[Path, str, dict[str, bytes]]:
    """A ~32 MiB .zarrdb (two arrays, a nested group, ~520 keys), its sha256 and contents."""
    path = tmp_path_factory.mktemp("copy-src") / "source.zarrdb"
    rng = np.random.default_rng(7)
    with opened(path) as store:
        root = zarr.open_group(store, mode="w")
        root.attrs["purpose"] = "killed copies"
        a = root.create_array(
            "a", shape=(1024, 2048), chunks=(64, 128), dtype="float64", compressors=None
        )
        a[...] = rng.standard_normal((1024, 2048))
        b = root.create_group("g").create_array(
            "b", shape=(2048, 2048), chunks=(128, 128), dtype="int32", compressors=None
        )
        b[...] = rng.integers(-(2**31), 2**31 - 1, size=(2048, 2048), dtype=np.int32)
        contents = read_all(store)
    return path, sha256_file(path), contents


def _copy_process(source: Path, dest: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            PYTHON,
            "-m",
            "zarrdb",
            "copy",
            str(source),
            str(dest),
            "--batch-bytes",
            "1M",
            "--no-progress",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env(),
    )


def _partial_files(dest: Path) -> list[Path]:
    return sorted(p for p in dest.parent.iterdir() if p.name.startswith(f".{dest.name}.partial-"))


def _wait_for_partial(proc: subprocess.Popen, dest: Path, timeout: float = 60) -> bool:
    """Wait until the copy has started writing (its temporary file exists)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _partial_files(dest) or dest.exists():
            return True
        time.sleep(0.002)
    return proc.poll() is None


def _check_after_copy_kill(source, source_sha, source_contents, dest: Path, context: str) -> str:
    assert sha256_file(source) == source_sha, f"{context}: the source file changed"
    assert sidecars(source) == [], context
    if not dest.exists():
        outcome = "no destination"
    else:
        with opened(dest, read_only=True) as store:
            assert store.check() == [], context
            assert read_all(store) == source_contents, f"{context}: the destination is incomplete"
        assert sidecars(dest) == [], context
        outcome = "complete destination"
    others = {p.name for p in dest.parent.iterdir()} - {source.name, dest.name}
    stray = [n for n in others if not n.startswith(f".{dest.name}.partial-")]
    assert not stray, f"{context}: unexpected files {stray}"
    return outcome


def _copy_kill_trials(tmp_path, copy_source, count):
    source, source_sha, contents = copy_source
    # How long a whole copy takes once it has started writing.
    dest = tmp_path / "timed.zarrdb"
    proc = _copy_process(source, dest)
    assert _wait_for_partial(proc, dest)
    started = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    writing = time.monotonic() - started
    _check_after_copy_kill(source, source_sha, contents, dest, "an uninterrupted copy")
    dest.unlink()

    rng = random.Random(f"{SEED}-copy")
    outcomes = []
    for trial in range(count):
        dest = tmp_path / f"copy-{trial}.zarrdb"
        delay = rng.uniform(0.0, writing * 1.1)
        context = f"copy trial {trial} killed {delay:.3f} s into writing (ZARRDB_CRASH_SEED={SEED})"
        proc = _copy_process(source, dest)
        assert _wait_for_partial(proc, dest), context
        time.sleep(delay)
        proc.kill()
        proc.communicate(timeout=60)
        outcomes.append(_check_after_copy_kill(source, source_sha, contents, dest, context))
        # After SIGKILL nothing can clean up: at most the hidden temporary file stays.
        for leftover in [*_partial_files(dest), dest]:
            remove_leftover(leftover)
    return outcomes


def test_kill_during_copy(tmp_path, copy_source):
    _copy_kill_trials(tmp_path, copy_source, crash_trials(False, default=2))


@pytest.mark.slow
def test_kill_during_copy_many(tmp_path, copy_source):
    _copy_kill_trials(tmp_path, copy_source, crash_trials(True))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_copy_leaves_nothing_behind(tmp_path, copy_source, signum):
    """docs/cli.md: "an interrupted run leaves nothing behind". Ctrl-C (SIGINT) and a polite
    kill (SIGTERM, what `timeout` and service managers send) part-way through the copy."""
    source, source_sha, contents = copy_source
    dest = tmp_path / "interrupted.zarrdb"
    proc = _copy_process(source, dest)
    assert _wait_for_partial(proc, dest)
    time.sleep(0.05)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    context = f"copy interrupted by {signum.name} (exit {proc.returncode}: {err.decode().strip()})"
    _check_after_copy_kill(source, source_sha, contents, dest, context)
    assert sorted(p.name for p in tmp_path.iterdir()) == ([dest.name] if dest.exists() else []), (
        context
    )


# --- acknowledged means committed, also next to a transaction ---------------------------------------


def test_acknowledged_write_from_another_thread_during_a_transaction(tmp_path):
    """A thread calls set_sync, through a store object of its own (a writer that must stay out
    of a transaction: through the same store object its write would be the transaction's),
    while another thread holds `store.transaction()` open. If the call returned, its data must
    be committed ("a call returns once its data is committed") and survive a SIGKILL that lands
    before the transaction ends (and a rollback of the block, which is not the caller's)."""
    path = tmp_path / "joined.zarrdb"
    script = (
        "import os, sys, threading, time\n"
        "from zarrdb import SQLiteStore\n"
        "from zarr.core.buffer import default_buffer_prototype\n"
        "buf = default_buffer_prototype().buffer\n"
        f"store = SQLiteStore({str(path)!r})\n"
        f"own = SQLiteStore({str(path)!r})\n"
        "store.set_sync('before', buf.from_bytes(b'0'))\n"
        "own.ensure_open()\n"
        "inside = threading.Event()\n"
        "def other():\n"
        "    inside.wait()\n"
        "    own.set_sync('other-thread', buf.from_bytes(b'acknowledged'))\n"
        "    os.write(1, b'acknowledged\\n')\n"
        "threading.Thread(target=other).start()\n"
        "os.write(1, b'started\\n')\n"
        "with store.transaction():\n"
        "    store.set_sync('in-transaction', buf.from_bytes(b't'))\n"
        "    inside.set()\n"
        "    time.sleep(60)  # killed in here\n"
    )
    child = ReportingChild(["-c", script], tmp_path / "joined.stderr")
    assert child.wait_for("started", timeout=60), child.stderr()
    # A call that joined the transaction would return at once; one of its own waits for the
    # transaction's lock.
    acknowledged = child.wait_for("acknowledged", timeout=3)
    if acknowledged:
        time.sleep(0.2)
    child.kill()
    child.finish()
    with opened(path, read_only=True) as store:
        contents = read_all(store)
    assert "in-transaction" not in contents  # the open transaction is rolled back: right
    assert not acknowledged or contents.get("other-thread") == b"acknowledged", (
        "set_sync from another thread returned while store.transaction() was open in this "
        "thread, and its write was lost when the process died before the transaction ended: "
        "the call, through its own store object, joined a transaction it does not own and "
        "returned before any commit"
    )
    if not acknowledged:  # it waited for the transaction instead: also a correct answer
        assert "other-thread" not in contents


OTHER_THREAD_WRITES = {
    "set_sync": lambda store, arr: store.set_sync("other-thread", buf.from_bytes(b"acknowledged")),
    "async set": lambda store, arr: asyncio.run(
        store.set("other-thread", buf.from_bytes(b"acknowledged"))
    ),
    # zarr's synchronous API: the write itself runs on zarr's event-loop thread
    "zarr": lambda store, arr: arr.__setitem__(slice(None), 7),
}


@pytest.mark.parametrize("how", sorted(OTHER_THREAD_WRITES))
def test_rolled_back_transaction_keeps_other_threads_writes(tmp_path, how):
    """The same in one process: the block that holds the transaction raises, its own writes
    are rolled back, and a write that another thread made through a store object of its own
    (and that returned) must stay, whichever API that thread used."""
    path = tmp_path / "rollback.zarrdb"
    with opened(path) as store, opened(path) as own:
        zarr.create_array(
            store, name="other", shape=(4,), chunks=(2,), dtype="int32", fill_value=0
        )
        arr = zarr.open_array(own, path="other", mode="r+")
        inside, returned = threading.Event(), threading.Event()
        failures: list[BaseException] = []

        def other():
            inside.wait()
            try:
                OTHER_THREAD_WRITES[how](own, arr)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
            returned.set()

        thread = threading.Thread(target=other)
        thread.start()
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.set_sync("in-transaction", buf.from_bytes(b"t"))
                inside.set()
                joined = returned.wait(1)  # a write that waits for the transaction is right too
                raise RuntimeError("the block fails")
        thread.join(30)
        assert not failures, failures
        assert store.get_sync("in-transaction") is None
        if how == "zarr":
            kept = (arr[:] == 7).all()
        else:
            value = store.get_sync("other-thread")
            kept = value is not None and value.to_bytes() == b"acknowledged"
        assert kept, f"another thread's write ({how}) " + (
            "returned during the transaction, and the rollback of the block erased it"
            if joined
            else "was lost"
        )
