"""A seeded schedule of writers, transactions and closes on one store, run as a child process by
test_transaction_stateful.py (under a watchdog: a hang ends the process with the stacks).

    python _transaction_schedule.py PATH SEED SECONDS

Eight writers write unique keys through the store (six threads with set_sync, two event
loops with gathered `store.set`) while two threads open transactions (sync and async, so one
waits for the other), write their own keys, sometimes nest a savepoint that fails, and commit
or roll back; the main thread closes the store now and then (it reopens by itself). Every call
is recorded with its start and end (monotonic clock) and its outcome; the last line of stdout
is the JSON record.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import random
import sys
import threading
import time
import zlib

from zarr.core.buffer import cpu

from zarrdb import SQLiteStore, errors


class Boom(Exception):
    pass


def expected_value(key: str) -> bytes:
    """The value written at `key` (the checker computes it again)."""
    return key.encode() * (1 + zlib.crc32(key.encode()) % 300)


def main() -> None:
    path, seed, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    faulthandler.dump_traceback_later(seconds + 30, exit=True)
    rng = random.Random(seed)
    store = SQLiteStore(path, busy_timeout=30)
    deadline = time.monotonic() + seconds
    writes: list[tuple[str, float, float]] = []  # acknowledged: key, start, end
    transactions: list[dict[str, object]] = []
    savepoints: list[tuple[float, float]] = []  # failed nested levels: start, end
    problems: list[str] = []
    lock = threading.Lock()

    def value(key: str) -> cpu.Buffer:
        return cpu.Buffer.from_bytes(expected_value(key))

    def acknowledged(key: str, start: float) -> None:
        with lock:
            writes.append((key, start, time.monotonic()))

    def sync_writer(n: int, seed: int) -> None:
        r = random.Random(seed)
        i = 0
        while time.monotonic() < deadline:
            key = f"s{n}/{i}"
            i += 1
            start = time.monotonic()
            try:
                store.set_sync(key, value(key))
            except errors.ClosedError:
                continue  # closed under it: not acknowledged
            acknowledged(key, start)
            time.sleep(r.random() * 0.004)

    def loop_writer(n: int, seed: int) -> None:
        r = random.Random(seed)

        async def one(key: str) -> None:
            start = time.monotonic()
            try:
                await store.set(key, value(key))
            except errors.ClosedError:
                return
            acknowledged(key, start)

        async def run() -> None:
            i = 0
            while time.monotonic() < deadline:
                keys = [f"l{n}/{i + j}" for j in range(r.randint(1, 6))]
                i += len(keys)
                await asyncio.gather(*(one(k) for k in keys))
                await asyncio.sleep(r.random() * 0.004)

        asyncio.run(run())

    def record(t: int, started: float, keys: list[str], failed_inner: list[str], how: str) -> None:
        """`how`: "committed", "rolled back", or "closed" (close() ended it: rolled back, and
        the writes after the close went to the store reopened, on their own)."""
        with lock:
            transactions.append(
                {
                    "start": started,
                    "end": time.monotonic(),
                    "keys": keys,
                    "failed_inner": failed_inner,
                    "how": how,
                    "thread": t,
                }
            )

    def transaction_thread(t: int, seed: int) -> None:
        r = random.Random(seed)
        i = 0
        while time.monotonic() < deadline:
            keys: list[str] = []
            failed_inner: list[str] = []
            commit = r.random() < 0.5
            started = time.monotonic()
            how = "rolled back"
            try:
                with store.transaction():
                    for _ in range(r.randint(1, 8)):
                        key = f"t{t}/{i}"
                        i += 1
                        store.set_sync(key, value(key))
                        keys.append(key)
                    if r.random() < 0.3:
                        inner_start = time.monotonic()
                        try:
                            with store.transaction():
                                key = f"t{t}/{i}"
                                i += 1
                                store.set_sync(key, value(key))
                                failed_inner.append(key)
                                raise Boom
                        except Boom:
                            pass
                        # A savepoint is the session's: its rollback undoes what other threads
                        # wrote through the store meanwhile, too.
                        with lock:
                            savepoints.append((inner_start, time.monotonic()))
                    time.sleep(r.random() * 0.01)
                    if not commit:
                        raise Boom
                how = "committed"
            except Boom:
                pass
            except errors.ClosedError:
                how = "closed"
            record(t, started, keys, failed_inner, how)

    def async_transaction_thread(t: int, seed: int) -> None:
        r = random.Random(seed)

        async def run() -> None:
            i = 0
            while time.monotonic() < deadline:
                keys: list[str] = []
                commit = r.random() < 0.5
                started = time.monotonic()
                how = "rolled back"
                try:
                    async with store.transaction():
                        for _ in range(r.randint(1, 8)):
                            key = f"t{t}/{i}"
                            i += 1
                            await store.set(key, value(key))
                            keys.append(key)
                        await asyncio.sleep(r.random() * 0.01)
                        if not commit:
                            raise Boom
                    how = "committed"
                except Boom:
                    pass
                except errors.ClosedError:
                    how = "closed"
                record(t, started, keys, [], how)

        asyncio.run(run())

    def guard(fn, *args):  # noqa: ANN001, ANN202
        def run() -> None:
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - reported
                with lock:
                    problems.append(f"{fn.__name__}{args}: {exc!r}")

        return run

    threads = [
        threading.Thread(target=guard(sync_writer, n, rng.randrange(1 << 30))) for n in range(6)
    ]
    threads += [
        threading.Thread(target=guard(loop_writer, n, rng.randrange(1 << 30))) for n in range(2)
    ]
    threads.append(threading.Thread(target=guard(transaction_thread, 0, rng.randrange(1 << 30))))
    threads.append(
        threading.Thread(target=guard(async_transaction_thread, 1, rng.randrange(1 << 30)))
    )
    for t in threads:
        t.start()
    closes: list[float] = []
    while time.monotonic() < deadline:
        time.sleep(rng.random() * seconds / 2)
        if time.monotonic() < deadline and rng.random() < 0.6:
            store.close()
            closes.append(time.monotonic())
    for t in threads:
        t.join()
    store.close()
    print(
        json.dumps(
            {
                "writes": writes,
                "transactions": transactions,
                "savepoints": savepoints,
                "problems": problems,
            }
        )
    )


if __name__ == "__main__":
    main()
