"""Invariants of SQLiteStore under concurrency, with real threads and processes (issue 5).

- A reader never sees part of a transaction: a writer keeps replacing a pair of keys that must
  agree (inside `with store.transaction():`, `async with store.transaction():`, or in one
  `_set_many` call) while readers in the same store, in a second store object on the file, and
  in another process read both keys in one call (`_get_many`, `get_partial_values`) and check
  every read. (Two separate gets are not one snapshot, so they are not checked for agreement.)
- Every acknowledged write is there after close and reopen (16 threads with set_sync, 16
  coroutines with `await store.set`), also when another thread's transaction fails meanwhile.
- A failed transaction leaves nothing behind (sync `with` and `async with`).
- Group commit under 16 concurrent writers loses nothing and batches: commits are counted in
  the WAL file (commit frames of its current generation), not timed.
- zarr's codec pipelines (BatchedCodecPipeline and, where zarr has it, FusedCodecPipeline)
  writing and reading an array from threads, sharded and unsharded, against numpy.
- Memory stays bounded: `arr[:] = data` of 256 MiB does not queue the data set in the store.
- Threads that come and go reuse read connections instead of each leaving one open.

Two SQLite libraries in one process do not share POSIX locks, so nothing here opens the file
with the standard `sqlite3` module while a store has it open; the WAL file is only read as
bytes (SQLite takes no locks on it).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.core.codec_pipeline
from zarr.codecs import ZstdCodec
from zarr.core.buffer import cpu

from store._lock_holder import LockHolder
from store.helpers import buf
from zarrdb import SQLiteStore

from . import _concurrency_child as child
from ._concurrency_child import KEY_A, KEY_B, SIZE_A, SIZE_B, PairReader, pair_value

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")

CHILD_SCRIPT = Path(child.__file__).resolve()
FUSED_PIPELINE = "zarr.core.codec_pipeline.FusedCodecPipeline"
HAS_FUSED_PIPELINE = hasattr(zarr.core.codec_pipeline, "FusedCodecPipeline")
needs_fused = pytest.mark.skipif(
    not HAS_FUSED_PIPELINE,
    reason=f"zarr {zarr.__version__} has no {FUSED_PIPELINE}",
)
JOIN_TIMEOUT = 60  # seconds; a thread still alive after it is a hang, reported as a failure


def run_threads(targets: list[Callable[[], None]], timeout: float = JOIN_TIMEOUT) -> None:
    """Run each target in its own thread; re-raise the first exception, fail on a hang."""
    errors: list[BaseException] = []

    def wrap(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(t,), daemon=True) for t in targets]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"threads still running after {timeout} s"
    if errors:
        raise errors[0]


def contents(store: SQLiteStore) -> dict[str, bytes]:
    """Every key and value of the store (read from the calling thread)."""
    out = {}
    for key, _size in store.key_sizes(""):
        value = store.get_sync(key)
        assert value is not None, key
        out[key] = value.to_bytes()
    return out


def reopened_contents(path: Path) -> dict[str, bytes]:
    """The store's contents as a new read-only store object sees them; the file must have been
    left as one file (no WAL) by the close before."""
    assert not os.path.exists(f"{path}-wal"), "close left a WAL file behind"
    ro = SQLiteStore(path, read_only=True)
    try:
        return contents(ro)
    finally:
        ro.close()


def wal_commits(path: Path) -> tuple[tuple[int, int, int], int]:
    """((checkpoint sequence, salt-1, salt-2), number of commit frames) of the current
    generation of the file's WAL. A frame belongs to it while its salts match the header's;
    a commit frame has a non-zero "database size after commit" field."""
    with open(f"{path}-wal", "rb") as f:
        header = f.read(32)
        _magic, _version, page_size, sequence, salt1, salt2 = struct.unpack(">6I", header[:24])
        commits = 0
        while True:
            frame = f.read(24)
            if len(frame) < 24:
                break
            _page, size_after, s1, s2 = struct.unpack(">4I", frame[:16])
            if (s1, s2) != (salt1, salt2):
                break
            f.seek(page_size, os.SEEK_CUR)
            commits += size_after != 0
    return (sequence, salt1, salt2), commits


# --- a reader never sees part of a transaction -----------------------------------------------

GENERATIONS = 150  # at least this many pairs are written ...
MIN_WRITE_SECONDS = 0.5  # ... and for at least this long, so every reader overlaps the writer


def _generations() -> Iterator[int]:
    start = time.monotonic()
    gen = 0
    while gen < GENERATIONS or time.monotonic() - start < MIN_WRITE_SECONDS:
        gen += 1
        yield gen


def _write_pairs_sync_transaction(store: SQLiteStore) -> int:
    for gen in _generations():
        with store.transaction():
            store.set_sync(KEY_A, buf(pair_value(gen, SIZE_A)))
            store.set_sync(KEY_B, buf(pair_value(gen, SIZE_B)))
    return gen


async def _write_pairs_async_transaction(store: SQLiteStore) -> int:
    for gen in _generations():
        async with store.transaction():
            await store.set(KEY_A, buf(pair_value(gen, SIZE_A)))
            await store.set(KEY_B, buf(pair_value(gen, SIZE_B)))
    return gen


async def _write_pairs_set_many(store: SQLiteStore) -> int:
    for gen in _generations():
        await store._set_many(
            [(KEY_A, buf(pair_value(gen, SIZE_A))), (KEY_B, buf(pair_value(gen, SIZE_B)))]
        )
    return gen


WRITERS: dict[str, Callable[[SQLiteStore], int]] = {
    "transaction": _write_pairs_sync_transaction,
    "async-transaction": lambda store: asyncio.run(_write_pairs_async_transaction(store)),
    "set_many": lambda store: asyncio.run(_write_pairs_set_many(store)),
}


class _ThreadReaders:
    """Reader threads, each with its own event loop, reading through `store`."""

    def __init__(self, store: SQLiteStore, name: str, n: int = 2) -> None:
        self.readers = [PairReader(store, f"{name} thread {i}") for i in range(n)]
        self.stop = threading.Event()
        self.ready = [threading.Event() for _ in range(n)]
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._run, args=(r, e), daemon=True)
            for r, e in zip(self.readers, self.ready, strict=True)
        ]

    def _run(self, reader: PairReader, ready: threading.Event) -> None:
        try:
            asyncio.run(reader.run_until(self.stop, ready))
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.errors.append(exc)
            ready.set()

    def start(self) -> None:
        for t in self.threads:
            t.start()
        for e in self.ready:
            assert e.wait(JOIN_TIMEOUT)

    def finish(self) -> list[dict[str, Any]]:
        self.stop.set()
        for t in self.threads:
            t.join(JOIN_TIMEOUT)
        assert not any(t.is_alive() for t in self.threads), "a reader thread hangs"
        if self.errors:
            raise self.errors[0]
        return [r.summary() for r in self.readers]


class _ProcessReader:
    """The same reads from a separate process (its own read-only store)."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD_SCRIPT), "reader", str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def start(self) -> None:
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            raise AssertionError(f"reader process: {line!r} {self.proc.stderr.read()}")

    def finish(self) -> list[dict[str, Any]]:
        try:
            out, err = self.proc.communicate(input="", timeout=JOIN_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        assert self.proc.returncode == 0, err
        return [json.loads(out.strip().splitlines()[-1])]


@pytest.mark.parametrize(
    ("writer", "where"),
    [
        (writer, where)
        for writer in WRITERS
        for where in ("same-store", "second-store", "other-process")
        # The store object is the session: its own reads see its open transaction's writes
        # (as an SQLite connection does), so only other store objects are held to this.
        if not (where == "same-store" and "transaction" in writer)
    ],
)
def test_reader_never_sees_part_of_a_write(writer: str, where: str, tmp_path: Path) -> None:
    path = tmp_path / "pairs.zarrdb"
    store = SQLiteStore(path)
    second = None
    try:
        asyncio.run(
            store._set_many(
                [(KEY_A, buf(pair_value(0, SIZE_A))), (KEY_B, buf(pair_value(0, SIZE_B)))]
            )
        )
        if where == "same-store":
            readers: Any = _ThreadReaders(store, "same store")
        elif where == "second-store":
            second = SQLiteStore(path, read_only=True)
            readers = _ThreadReaders(second, "second store")
        else:
            readers = _ProcessReader(path)
        readers.start()
        last = -1
        try:
            last = WRITERS[writer](store)
        finally:
            summaries = readers.finish()
    finally:
        if second is not None:
            second.close()
        store.close()

    failures = [f for s in summaries for f in s["failures"]]
    assert not failures, "\n".join(failures)
    for s in summaries:
        # The reads overlapped the writer: each reader saw several committed generations.
        assert s["reads"] >= 10 and s["distinct_generations"] >= 2, s
    assert reopened_contents(path) == {
        KEY_A: pair_value(last, SIZE_A),
        KEY_B: pair_value(last, SIZE_B),
    }


# --- every acknowledged write is there after close and reopen ---------------------------------

WRITERS_N = 16
SIZES = [100, 5_000, 70_000, 300_000, 1_500_000]  # inline rows .. long overflow chains


def _value(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


def test_acknowledged_set_sync_from_16_threads(tmp_path: Path) -> None:
    path = tmp_path / "acked.zarrdb"
    store = SQLiteStore(path)
    acked: list[dict[str, bytes]] = [{} for _ in range(WRITERS_N)]
    barrier = threading.Barrier(WRITERS_N)

    def writer(i: int) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(i)
            mine = acked[i]
            barrier.wait()
            for j in range(24):
                key, value = f"t{i:02d}/k{j:03d}", _value(rng, SIZES[(i + j) % len(SIZES)])
                store.set_sync(key, buf(value))
                mine[key] = value  # recorded only once set_sync has returned
                last = f"{i}:{j}".encode()
                store.set_sync(f"t{i:02d}/last", buf(last))  # the same key, over and over
                mine[f"t{i:02d}/last"] = last

        return run

    try:
        run_threads([writer(i) for i in range(WRITERS_N)])
    finally:
        store.close()
    expected = {k: v for mine in acked for k, v in mine.items()}
    assert len(expected) == WRITERS_N * 25
    got = reopened_contents(path)
    assert sorted(got) == sorted(expected)
    wrong = [k for k in expected if got[k] != expected[k]]
    assert not wrong, f"{len(wrong)} keys hold another value than the one acknowledged: {wrong[:5]}"


async def test_acknowledged_set_from_16_coroutines(tmp_path: Path) -> None:
    path = tmp_path / "acked.zarrdb"
    store = SQLiteStore(path)
    acked: dict[str, bytes] = {}

    async def writer(i: int) -> None:
        rng = random.Random(100 + i)
        for j in range(24):
            key, value = f"c{i:02d}/k{j:03d}", _value(rng, SIZES[(i * 7 + j) % len(SIZES)])
            await store.set(key, buf(value))
            acked[key] = value  # recorded only once the set has returned
            last = f"{i}:{j}".encode()
            await store.set(f"c{i:02d}/last", buf(last))
            acked[f"c{i:02d}/last"] = last
        # and one 5 MiB value from each at once: 80 MiB queued, over one group commit's cap
        big = f"c{i:02d}/big"
        value = _value(rng, 5 * 1024 * 1024)
        await store.set(big, buf(value))
        acked[big] = value

    try:
        await asyncio.wait_for(asyncio.gather(*(writer(i) for i in range(WRITERS_N))), JOIN_TIMEOUT)
    finally:
        store.close()
    assert len(acked) == WRITERS_N * 26
    got = reopened_contents(path)
    assert sorted(got) == sorted(acked)
    wrong = [k for k in acked if got[k] != acked[k]]
    assert not wrong, f"{len(wrong)} keys hold another value than the one acknowledged: {wrong[:5]}"


def test_acknowledged_write_survives_another_threads_failed_transaction(tmp_path: Path) -> None:
    """set_sync returned on one thread, through its own store object, while another store
    object's transaction was open and then failed: the acknowledged value must still be there
    (the failed block leaves nothing of its own behind, and only its own writes). A writer
    that must stay out of a transaction uses its own SQLiteStore: through the same store
    object, its writes would be the transaction's."""
    path = tmp_path / "acked.zarrdb"
    store = SQLiteStore(path)
    own = SQLiteStore(path, busy_timeout=JOIN_TIMEOUT)
    store.ensure_open()
    own.ensure_open()
    opened = threading.Event()
    acked: dict[str, bytes] = {}

    def transaction() -> None:
        with pytest.raises(RuntimeError, match="fail the block"):
            with store.transaction():
                store.set_sync("txn/x", buf(b"inside the failed block"))
                opened.set()
                time.sleep(0.5)  # the other thread writes meanwhile
                raise RuntimeError("fail the block")

    def other() -> None:
        assert opened.wait(JOIN_TIMEOUT)
        for j in range(3):
            value = f"acknowledged {j}".encode()
            own.set_sync(f"other/{j}", buf(value))
            acked[f"other/{j}"] = value

    try:
        run_threads([transaction, other])
        assert "txn/x" not in contents(store)
    finally:
        own.close()
        store.close()
    got = reopened_contents(path)
    assert "txn/x" not in got
    lost = {k for k in acked if got.get(k) != acked[k]}
    assert not lost, (
        f"writes acknowledged to another thread were rolled back with the failed transaction: "
        f"{sorted(lost)} (set_sync returned while the transaction was open, so the write joined "
        "it instead of being committed)"
    )


# --- a failed transaction leaves nothing behind --------------------------------------------------

BEFORE = {
    "keep": b"kept",
    "over": b"old value",
    "gone": b"to be deleted inside",
    "dir/a": b"1",
    "dir/b": b"2",
}
BIG = 3 * 1024 * 1024  # over BLOB_WRITE_MIN: written by the writer through the incremental blob API


def _seed(store: SQLiteStore) -> None:
    for key, value in BEFORE.items():
        store.set_sync(key, buf(value))


def _inside_sync(store: SQLiteStore) -> None:
    store.set_sync("new/0", buf(b"n0"))
    store.set_sync("new/big", buf(b"\x01" * BIG))
    store.set_sync("over", buf(b"new value"))
    store.delete_sync("gone")
    asyncio.run(store._set_many([("new/1", buf(b"n1")), ("new/2", buf(b"n2"))]))
    asyncio.run(store.delete_dir("dir"))


async def _inside_async(store: SQLiteStore) -> None:
    await store.set("new/0", buf(b"n0"))
    await store.set("new/big", buf(b"\x01" * BIG))
    await store.set("over", buf(b"new value"))
    await store.delete("gone")
    await store._set_many([("new/1", buf(b"n1")), ("new/2", buf(b"n2"))])
    await store.delete_dir("dir")
    await store.set_if_not_exists("new/3", buf(b"n3"))


INSIDE = {"new/0", "new/big", "new/1", "new/2"}


def _assert_inside_sees_the_writes(seen: dict[str, bytes]) -> None:
    assert INSIDE <= set(seen), sorted(seen)
    assert seen["over"] == b"new value"
    assert "gone" not in seen and "dir/a" not in seen


@pytest.mark.parametrize("raised", [RuntimeError, KeyboardInterrupt])
def test_failed_transaction_leaves_nothing_sync(tmp_path: Path, raised: type) -> None:
    # Any exception, an Exception or not, rolls the block back.
    path = tmp_path / "failed.zarrdb"
    store = SQLiteStore(path)
    try:
        _seed(store)
        with pytest.raises(raised, match="fail the block"):
            with store.transaction():
                _inside_sync(store)
                _assert_inside_sees_the_writes(contents(store))
                raise raised("fail the block")
        assert contents(store) == BEFORE
        # the store goes on working: the next block commits
        with store.transaction():
            store.set_sync("after", buf(b"committed"))
    finally:
        store.close()
    assert reopened_contents(path) == {**BEFORE, "after": b"committed"}


async def test_failed_transaction_leaves_nothing_async(tmp_path: Path) -> None:
    path = tmp_path / "failed.zarrdb"
    store = SQLiteStore(path)
    try:
        _seed(store)
        with pytest.raises(RuntimeError, match="fail the block"):
            async with store.transaction():
                await _inside_async(store)
                _assert_inside_sees_the_writes(contents(store))
                assert (await store.get("new/3")).to_bytes() == b"n3"
                raise RuntimeError("fail the block")
        assert contents(store) == BEFORE
        async with store.transaction():
            await store.set("after", buf(b"committed"))
    finally:
        store.close()
    assert reopened_contents(path) == {**BEFORE, "after": b"committed"}


# --- group commit: loses nothing, and batches -------------------------------------------------


def test_group_commit_16_threads_batches_and_loses_nothing(tmp_path: Path) -> None:
    """16 threads, each calling set_sync in a loop with durability="full" (one fsync per
    commit): while one commit runs, the other 15 writers are waiting, so a group commit takes
    several writes at once. Commits are counted in the WAL (journal="wal"); 4 KiB pages keep
    all of them in one WAL generation (below the checkpointer's limit)."""
    path = tmp_path / "group.zarrdb"
    per_thread = 16
    total = WRITERS_N * per_thread
    store = SQLiteStore(path, durability="full", page_size=4096, journal="wal")
    barrier = threading.Barrier(WRITERS_N)

    def writer(i: int) -> Callable[[], None]:
        def run() -> None:
            barrier.wait()
            for j in range(per_thread):
                store.set_sync(f"g{i:02d}/{j:03d}", buf(f"{i}/{j}".encode() * 8))

        return run

    try:
        store.set_sync("warm-up", buf(b"x"))
        generation0, commits0 = wal_commits(path)
        run_threads([writer(i) for i in range(WRITERS_N)])
        generation1, commits1 = wal_commits(path)
        got = contents(store)
    finally:
        store.close()
    assert generation1 == generation0, (
        "the WAL was checkpointed and restarted during the writes: over 1000 pages were "
        "committed, far more commits than a group commit makes"
    )
    commits = commits1 - commits0
    assert len(got) == total + 1 and all(
        got[f"g{i:02d}/{j:03d}"] == f"{i}/{j}".encode() * 8
        for i in range(WRITERS_N)
        for j in range(per_thread)
    )
    # Without group commit: one commit per write. With it, the writes waiting while a commit
    # runs go into the next one: 4 to 8 per commit on two idle cores, 3.8 seen on two busy ones.
    # Two on average is the bar, far from both ends (how many wait is a matter of timing).
    assert 1 <= commits <= total // 2, (
        f"{total} set_sync calls from {WRITERS_N} threads took {commits} commits "
        f"({total / max(commits, 1):.1f} writes per commit)"
    )




async def test_gathered_coroutines_waiting_for_a_lock_are_committed_together(
    tmp_path: Path,
) -> None:
    """16 `store.set` coroutines started together while another process holds the write lock:
    the writer thread takes the first one as soon as it is queued and waits for the lock; the
    others queue up meanwhile and go into the next commit together. So at most two commits
    for 16 writes (counted in the WAL, not by the store), for 16 KiB and for 300 KiB values
    (the blob-writing path)."""
    path = tmp_path / "gathered.zarrdb"
    store = SQLiteStore(path, page_size=4096, busy_timeout=30, journal="wal")
    try:
        await store.set("warm-up", buf(b"x"))
        for size in (16 * 1024, 300 * 1024):
            generation0, commits0 = wal_commits(path)
            holder = LockHolder(path)
            try:
                values = {f"s{size}/{i:02d}": os.urandom(size) for i in range(WRITERS_N)}
                writes = asyncio.gather(*(store.set(k, buf(v)) for k, v in values.items()))
                await asyncio.sleep(0.3)  # every set is queued; none can commit yet
                assert wal_commits(path)[1] == commits0
                holder.let_go()
                await writes
            finally:
                holder.release()
            generation1, commits1 = wal_commits(path)
            assert generation1 == generation0
            assert 1 <= commits1 - commits0 <= 2, f"{WRITERS_N} gathered sets of {size} bytes"
            for key, value in values.items():
                assert (await store.get(key)).to_bytes() == value
    finally:
        store.close()


_HOLD_ON_LOOP = """
import asyncio, sys
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore

async def main():
    store = SQLiteStore(sys.argv[1])
    await store.set("warm-up", cpu.Buffer.from_bytes(b"x"))
    task = asyncio.ensure_future(store.set("old/k", cpu.Buffer.from_bytes(b"small")))
    await asyncio.sleep(0)  # the write is queued; the loop's turn has not ended
    moved = store.rename("old", "new")  # on the loop's thread, in the same turn
    await task
    got = await store.get("new/k")
    store.close()
    print(moved, got.to_bytes().decode())

asyncio.run(main())
"""


def test_a_hold_on_the_loops_thread_takes_the_loops_writes_at_once(tmp_path: Path) -> None:
    """A small write from an event loop wakes the writer only when the loop's turn ends (one
    wake-up for a burst of them). If the loop's own thread then waits, in the same turn, for the
    write connection once everything queued is written (a rename, which blocks the loop), that
    wait must take the loop's write at once: the turn it would wait for never ends. (In a child
    process: a loop blocked for good cannot be freed.)"""
    proc = subprocess.run(
        [sys.executable, "-c", _HOLD_ON_LOOP, str(tmp_path / "hold-on-loop.zarrdb")],
        capture_output=True,
        text=True,
        timeout=JOIN_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "small"]


async def test_writes_during_another_threads_transaction_join_it_in_one_commit(
    tmp_path: Path,
) -> None:
    """While another thread's explicit transaction is open, writes through the same store
    object join it (the store object is the session): they return without waiting for its
    end, and the transaction and the 16 writes are one commit."""
    path = tmp_path / "deferred.zarrdb"
    store = SQLiteStore(path, page_size=4096, journal="wal")
    try:
        await store.set("warm-up", buf(b"x"))
        generation0, commits0 = wal_commits(path)
        opened, finish = threading.Event(), threading.Event()

        def transaction() -> None:
            with store.transaction():
                store.set_sync("in-transaction", buf(b"t"))
                opened.set()
                finish.wait(10)

        owner = threading.Thread(target=transaction)
        owner.start()
        assert opened.wait(10)
        values = {f"w/{i:02d}": os.urandom(1000) for i in range(WRITERS_N)}
        writes = asyncio.gather(*(store.set(k, buf(v)) for k, v in values.items()))
        await asyncio.wait_for(writes, 10)  # joined: not waiting for the transaction's end
        assert wal_commits(path)[1] == commits0  # nothing committed yet
        finish.set()
        await asyncio.to_thread(owner.join, 10)
        generation1, commits1 = wal_commits(path)
        assert generation1 == generation0
        assert commits1 - commits0 == 1
        for key, value in values.items():
            assert (await store.get(key)).to_bytes() == value
        assert (await store.get("in-transaction")).to_bytes() == b"t"
    finally:
        store.close()


# --- zarr's codec pipelines, from threads -----------------------------------------------------

ROWS_PER_THREAD = 128
STEP = 32  # rows per write; one shard when sharded
N_WRITERS = 4


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
@pytest.mark.parametrize(
    "pipeline",
    [
        pytest.param(None, id="BatchedCodecPipeline"),
        pytest.param(FUSED_PIPELINE, id="FusedCodecPipeline", marks=needs_fused),
    ],
)
def test_codec_pipeline_threads_write_and_read(
    pipeline: str | None, sharded: bool, tmp_path: Path
) -> None:
    """4 threads write their own shard-aligned row blocks step by step and read each back,
    while 2 threads read the whole array over and over: every chunk (every shard, when
    sharded) they see is either still the fill value or exactly the data written to it."""
    path = tmp_path / "pipeline.zarrdb"
    shape = (N_WRITERS * ROWS_PER_THREAD, 96)
    chunks = (8, 32)
    shards = (STEP, 96) if sharded else None
    unit = shards or chunks  # what one key holds, written atomically
    expected = np.random.default_rng(11).standard_normal(shape)
    store = SQLiteStore(path)
    config: dict[str, Any] = {}
    if pipeline:
        config = {"codec_pipeline.path": pipeline, "codec_pipeline.max_workers": 2}
    zarr.create_array(
        store,
        name="a",
        shape=shape,
        dtype="float64",
        chunks=chunks,
        shards=shards,
        compressors=ZstdCodec(level=1),
        fill_value=0.0,
    )
    with zarr.config.set(config):  # the pipeline is chosen when an array is opened
        arrays = [zarr.open_array(store, path="a") for _ in range(N_WRITERS + 2)]
    if pipeline:
        assert type(arrays[0]._async_array.codec_pipeline).__name__ == "FusedCodecPipeline"
    writers_done = threading.Event()
    remaining = [N_WRITERS]
    lock = threading.Lock()
    whole_reads = [0, 0]

    def writer(i: int) -> Callable[[], None]:
        def run() -> None:
            arr = arrays[i]
            for step in range(ROWS_PER_THREAD // STEP):
                lo = i * ROWS_PER_THREAD + step * STEP
                arr[lo : lo + STEP] = expected[lo : lo + STEP]
                np.testing.assert_array_equal(arr[lo : lo + STEP], expected[lo : lo + STEP])
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    writers_done.set()

        return run

    def reader(r: int) -> Callable[[], None]:
        def run() -> None:
            arr = arrays[N_WRITERS + r]
            while True:
                done = writers_done.is_set()
                seen = arr[:]
                whole_reads[r] += 1
                for lo in range(0, shape[0], unit[0]):
                    for co in range(0, shape[1], unit[1]):
                        part = seen[lo : lo + unit[0], co : co + unit[1]]
                        want = expected[lo : lo + unit[0], co : co + unit[1]]
                        assert (part == 0).all() or np.array_equal(part, want), (
                            f"a torn {'shard' if sharded else 'chunk'} at {(lo, co)}"
                        )
                if done:
                    np.testing.assert_array_equal(seen, expected)
                    return

        return run

    try:
        run_threads([writer(i) for i in range(N_WRITERS)] + [reader(0), reader(1)])
        assert min(whole_reads) >= 2
        np.testing.assert_array_equal(zarr.open_array(store, path="a")[:], expected)
    finally:
        store.close()
    ro = SQLiteStore(path, read_only=True)
    try:
        np.testing.assert_array_equal(zarr.open_array(ro, path="a", mode="r")[:], expected)
    finally:
        ro.close()


# --- memory stays bounded ------------------------------------------------------------------------

INGEST_MIB = 256


@pytest.mark.parametrize(
    "pipeline",
    [
        pytest.param("-", id="BatchedCodecPipeline"),
        pytest.param(FUSED_PIPELINE, id="FusedCodecPipeline", marks=needs_fused),
    ],
)
def test_large_assignment_keeps_memory_bounded(pipeline: str, tmp_path: Path) -> None:
    """`arr[:] = data` of 256 MiB (1 MiB chunks) in a child process: the most bytes ever
    queued for the writer (its own high-water mark) stay within the queue's bound, and the
    child's peak RSS grows by less than twice the source array (by less
    than half of it while writing, the source itself aside)."""
    path = tmp_path / "ingest.zarrdb"
    proc = subprocess.run(
        [sys.executable, str(CHILD_SCRIPT), "ingest", str(path), str(INGEST_MIB), pipeline],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(facts, indent=1))
    source = facts["source_bytes"]
    assert source == INGEST_MIB * 1024 * 1024
    assert facts["equal"], "the array read back differs from what was written"
    cap = facts["queue_max_bytes"]
    assert 0 < facts["queued_high_water"] <= cap, (
        f"{facts['queued_high_water']:,} bytes queued at once (the queue's bound: {cap:,})"
    )
    growth = facts["rss_written"] - facts["rss_start"]  # the source array included
    writing = facts["rss_written"] - facts["rss_data"]  # what the write added to it
    mib = 2**20
    note = (
        f"peak RSS grew by {growth / mib:.0f} MiB for a {source / mib:.0f} MiB array, "
        f"{writing / mib:.0f} MiB of it while writing (the same write to a LocalStore adds "
        "about 15 MiB; one connection's page cache is 32 MiB)"
    )
    assert growth < 2 * source, note
    assert writing < source // 2, note


def _open_descriptors() -> int | None:
    fd_dir = Path("/proc/self/fd")
    return len(os.listdir(fd_dir)) if fd_dir.is_dir() else None


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_threads_that_come_and_go_reuse_read_connections(read_only: bool, tmp_path: Path) -> None:
    """Each reading thread gets its own connection, but a thread that has ended hands its
    connection to the next one: 200 short-lived threads, four at a time, leave at most five
    connections (and file descriptors) open, and every read is right."""
    path = tmp_path / "threads.zarrdb"
    with SQLiteStore(path) as writer:
        for i in range(8):
            writer.set_sync(f"k/{i}", buf(bytes([i]) * 1000))
    store = SQLiteStore(path, read_only=read_only)
    proto = cpu.buffer_prototype
    assert store.get_sync("k/0", prototype=proto).to_bytes() == b"\0" * 1000
    descriptors = _open_descriptors()
    wrong: list[str] = []

    def read(i: int) -> None:
        got = store.get_sync(f"k/{i % 8}", prototype=proto)
        if got is None or got.to_bytes() != bytes([i % 8]) * 1000:
            wrong.append(f"k/{i % 8}")

    for start in range(0, 200, 4):
        run_threads([lambda i=i: read(i) for i in range(start, start + 4)])
    assert not wrong
    conns = store._open_file
    assert conns is not None
    assert len(conns.readers.readers) <= 5, len(conns.readers.readers)
    if descriptors is not None:
        # each SQLite connection in WAL mode holds the file and its -shm; allow one spare
        assert _open_descriptors() <= descriptors + 2 * 4 + 2
    store.close()
    assert conns.readers.readers == [] and conns.readers.idle == []
