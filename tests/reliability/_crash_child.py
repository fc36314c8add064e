"""The child process of test_crash.py: ingests into a .zarrdb file with many writers at once and
reports every acknowledged write on stdout, until the parent kills it.

    python -m reliability._crash_child PATH DURABILITY MODE

MODE "ingest" writes until killed (or for at most 60 s); MODE "close" writes a fixed amount,
prints "closing", closes the stores (the WAL checkpoint) and prints "closed SECONDS".

Writers, all at the same time, with group commit on:
- two threads write chunk-aligned blocks of the zarr array "arr" with `arr[rows] = values`
  (zarr's synchronous API: each call is an asyncio.gather of store.set on zarr's loop thread),
  each thread its own blocks, generation after generation: "Z BLOCK GEN";
- two threads call store.set_sync on keys "raw/sN/SLOT", overwriting the slots in turn:
  "K sN N" (N-th write, slot N % SLOTS);
- one thread runs its own event loop and writes 8 keys at a time with asyncio.gather of
  store.set on "raw/g/SLOT": "K g N" for each once the gather returned;
- one thread writes "pair/a" and "pair/b" with the same value inside `with store.transaction():`
  on a second SQLiteStore object of the same file (its own writer connection, so the transaction
  holds only its own writes): "T N".
A line is printed only after the call returned, with one os.write (atomic on a pipe), so every
line the parent reads is an acknowledged write. The values are functions of the numbers in the
line (below), so the parent knows what each acknowledged key must hold.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import traceback

import numpy as np

ARRAY = "arr"
CHUNK = 16
BLOCK_ROWS = 16
NBLOCKS = 24
COLS = 64
SHAPE = (NBLOCKS * BLOCK_ROWS, COLS)
ZARR_THREADS = 2
SET_THREADS = 2
SLOTS = 40  # keys per key writer; a multiple of GATHER
GATHER = 8
KEY_WRITERS = [f"s{i}" for i in range(SET_THREADS)] + ["g"]
BULK_KEYS = 40  # "close" mode: 1 MiB values, so the checkpoint at close has work to do
BULK_SIZE = 1 << 20


def block_value(block: int, gen: int) -> np.ndarray:
    """What generation `gen` of `block` writes (never 0, the fill value)."""
    base = np.arange(BLOCK_ROWS * COLS, dtype=np.int32).reshape(BLOCK_ROWS, COLS)
    return base + np.int32(block * 1_000_003 + (gen + 1) * 7919)


def block_rows(block: int) -> slice:
    return slice(block * BLOCK_ROWS, (block + 1) * BLOCK_ROWS)


def _writer_number(writer: str) -> int:
    return {"g": 1000, "b": 2000, "p": 3000}.get(writer) or int(writer[1:])


def key_value(writer: str, n: int) -> bytes:
    """The value of the n-th write of key writer `writer` (64 .. 30,000 bytes)."""
    rng = np.random.default_rng([_writer_number(writer), n])
    size = 64 + int(rng.integers(0, 30_000))
    return f"{writer}:{n}|".encode() + rng.bytes(size)


def key_name(writer: str, n: int) -> str:
    return f"raw/{writer}/{n % SLOTS}"


def bulk_value(i: int) -> bytes:
    return np.random.default_rng([_writer_number("b"), i]).bytes(BULK_SIZE)


def pair_value(n: int) -> bytes:
    rng = np.random.default_rng([_writer_number("p"), n])
    return f"{n}|".encode() + rng.bytes(int(rng.integers(10, 5000)))


_emit_lock = threading.Lock()


def emit(line: str) -> None:
    data = (line + "\n").encode()
    with _emit_lock:
        os.write(1, data)  # one write of < PIPE_BUF bytes: whole on the pipe or not at all


def main(path: str, durability: str, mode: str) -> None:
    import zarr
    from zarr.core.buffer import default_buffer_prototype

    from zarrdb import SQLiteStore

    buffer = default_buffer_prototype().buffer
    store = SQLiteStore(path, durability=durability)
    store2 = SQLiteStore(path, durability=durability)  # the transactions' own writer
    arr = zarr.create_array(
        store, name=ARRAY, shape=SHAPE, chunks=(CHUNK, CHUNK), dtype="int32", fill_value=0
    )
    stop = threading.Event()
    failed = threading.Event()
    rounds = 3 if mode == "close" else 1 << 30  # "close": a fixed amount of work per writer

    def guarded(fn):
        def run(*args):
            try:
                fn(*args)
            except BaseException:
                failed.set()
                emit("ERROR " + traceback.format_exc().replace("\n", " | "))
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(3)

        return run

    @guarded
    def zarr_writer(t: int) -> None:
        blocks = [b for b in range(NBLOCKS) if b % ZARR_THREADS == t]
        for gen in range(rounds):
            for b in blocks:
                if stop.is_set():
                    return
                arr[block_rows(b), :] = block_value(b, gen)
                emit(f"Z {b} {gen}")

    @guarded
    def set_writer(writer: str) -> None:
        for n in range(rounds * SLOTS):
            if stop.is_set():
                return
            store.set_sync(key_name(writer, n), buffer.from_bytes(key_value(writer, n)))
            emit(f"K {writer} {n}")

    @guarded
    def gather_writer() -> None:
        async def go() -> None:
            for first in range(0, rounds * SLOTS, GATHER):
                if stop.is_set():
                    return
                ns = range(first, first + GATHER)
                await asyncio.gather(
                    *(store.set(key_name("g", n), buffer.from_bytes(key_value("g", n))) for n in ns)
                )
                for n in ns:
                    emit(f"K g {n}")

        asyncio.run(go())

    @guarded
    def pair_writer() -> None:
        for n in range(rounds * 10):
            if stop.is_set():
                return
            value = buffer.from_bytes(pair_value(n))
            with store2.transaction():
                store2.set_sync("pair/a", value)
                store2.set_sync("pair/b", value)
            emit(f"T {n}")
            # A second writer connection that retakes the lock at once starves the first one
            # (SQLite's busy handler sleeps and polls): leave it room.
            time.sleep(0.01)

    threads = [threading.Thread(target=zarr_writer, args=(t,)) for t in range(ZARR_THREADS)]
    threads += [threading.Thread(target=set_writer, args=(f"s{i}",)) for i in range(SET_THREADS)]
    threads += [threading.Thread(target=gather_writer), threading.Thread(target=pair_writer)]
    emit("ready")
    for thread in threads:
        thread.start()
    if mode == "ingest":
        # Until killed; a parent that forgot us must not leave us running for ever.
        time.sleep(60)
        stop.set()
    for thread in threads:
        thread.join()
    if mode == "close":
        for i in range(BULK_KEYS):
            store.set_sync(f"bulk/{i}", buffer.from_bytes(bulk_value(i)))
            emit(f"B {i}")
        emit("closing")
        started = time.perf_counter()
        store2.close()
        store.close()
        emit(f"closed {time.perf_counter() - started:.4f}")
    else:
        store2.close()
        store.close()
        emit("done")


if __name__ == "__main__":
    main(*sys.argv[1:4])
