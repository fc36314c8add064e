"""The child process of test_power_loss.py: ingests through the real store on a disk that loses
power (zarrdb._core's power-loss simulation), trial after trial.

    python -m reliability._power_loss_child
    (then on stdin, one line per run of trials: DIR DURABILITY JOURNAL SEED FIRST COUNT)

For each trial of a run (numbers FIRST .. FIRST+COUNT-1) this process forks; the fork turns the
simulation on, creates DIR/trial-N.zarrdb and runs a random workload on it (seeded by the
trial's seed) until the power goes out at a random file operation (see CUT_STEPS), which ends
the fork (exit code CUT_EXIT). This process then prints one JSON line for the trial: its seed,
the file, the fork's exit status and the fork's report; after the last trial of the line, "{}".
The parent checks the files meanwhile. ZARRDB_POWERLOSS_TRACE=1 has the forks print every file
operation and every choice of the simulated disk on stderr.

The report, one line per event, written to a pipe only by the workload's own thread:
- "I {json}": the trial's settings (page size, cache size, where the power goes out, the odds);
- "S N ATOMIC NAME {json}": step N (what it does: NAME) is about to run; the json maps every key
  the step changes to the hash of its new value (null: deleted). ATOMIC 1: the step is one
  transaction (all or none of it may survive); 0: each of its keys is written on its own
  (zarr's chunk writes, gathered writes).
- "A N": step N returned (it was acknowledged).
- "E text": the workload failed (not a power loss); the fork then exits with code 3.
The expected changes come from running every step on a zarr MemoryStore first, with the same
zarr calls; the parent rebuilds the expected states from them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import sys
import traceback

import numpy as np

CUT_EXIT = 77
# The power goes out in a step drawn from the first CUT_STEPS (the first five create the file,
# the group and the arrays), at an event drawn from 1 .. 2**k events into it, k from 0 .. 12
# (an event: a write, truncation, sync, file creation or deletion; a step makes from a few of
# them to a thousand), so short and long steps are cut near their start, middle and end;
# a cut further on than the step's own events falls in the steps after it.
CUT_STEPS = 40
MAX_STEPS = 2000  # a bound the trials never reach (they end at the cut)
PAGE_SIZES = (4096, 4096, 65536)  # small pages reach the checkpointer's threshold sooner

SMALL = "small"  # int32 64x64 in 8x8 chunks (256-byte chunks)
LARGE = "large"  # float32 512x512 in 256x256 chunks (256 KiB chunks; a full write is 1 MiB)
GROUPS = ("grp", "grp2")  # one group with one array, renamed back and forth
RAW_A = 24
RAW_B = 12


def value_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=10).hexdigest()


def trial_seed(seed: int, durability: str, journal: str, trial: int) -> int:
    return random.Random(f"{seed}-{durability}-{journal}-{trial}").getrandbits(63)


class Workload:
    """One trial: the store under test, a MemoryStore with the same history, the report."""

    def __init__(self, path: str, durability: str, journal: str, seed: int, report: int) -> None:
        import zarr
        from zarr.core.buffer import default_buffer_prototype
        from zarr.storage import MemoryStore

        from zarrdb import SQLiteStore, _core

        self.zarr = zarr
        self.buffer = default_buffer_prototype().buffer
        self.SQLiteStore = SQLiteStore
        self.core = _core
        self.report = report
        self.rng = random.Random(seed)
        self.data = np.random.default_rng(seed)
        self.options = {
            "durability": durability,
            "journal": journal,
            "page_size": self.rng.choice(PAGE_SIZES),
            # a small page cache in half the trials: values from 128 KiB are then larger than
            # half of it and written without their pages spilled before they are complete
            "cache_size": self.rng.choice([None, 256]),
        }
        self.path = path
        self.cut_step = self.rng.randrange(CUT_STEPS)
        self.cut_after = self.rng.randint(1, 2 ** self.rng.randint(0, 12))
        self.keep = self.rng.random()
        self.tear = self.rng.random() * (1.0 - self.keep)
        self.model: dict = {}  # key -> Buffer: what the store must hold after every step
        self.mirror = MemoryStore(self.model)
        self.store = None
        self.steps = 0
        self.group = GROUPS[0]
        self.small_rows = 64

    # --- reporting ----------------------------------------------------------------------------

    def emit(self, line: str) -> None:
        data = (line + "\n").encode()
        while data:
            data = data[os.write(self.report, data) :]

    def step(self, name: str, atomic: bool, on_mirror, on_store) -> None:
        """Run one step: on the MemoryStore (what it changes is announced), then on zarrdb."""
        before = dict(self.model)
        on_mirror()
        changes = {
            key: value_hash(value.to_bytes())
            for key, value in self.model.items()
            if before.get(key) is not value
            and (key not in before or before[key].to_bytes() != value.to_bytes())
        }
        changes.update({key: None for key in before if key not in self.model})
        n = self.steps
        self.steps += 1
        self.emit(f"S {n} {int(atomic)} {name} {json.dumps(changes, sort_keys=True)}")
        if n == self.cut_step:
            self.core._powerloss_cut(self.cut_after)
        on_store()
        self.emit(f"A {n}")

    # --- the workload ---------------------------------------------------------------------------

    def run(self) -> None:
        self.emit(
            "I "
            + json.dumps(
                {
                    "page_size": self.options["page_size"],
                    "cache_size": self.options["cache_size"],
                    "cut_step": self.cut_step,
                    "cut_after": self.cut_after,
                    "keep": round(self.keep, 4),
                    "tear": round(self.tear, 4),
                }
            )
        )
        self.core._powerloss_enable(
            self.rng.getrandbits(63), keep=self.keep, tear=self.tear, exit_code=CUT_EXIT,
            trace=bool(os.environ.get("ZARRDB_POWERLOSS_TRACE")),
        )
        self.step("create", True, lambda: None, self.open_store)
        self.setup()
        actions = [
            (self.zarr_write_small, 12),
            (self.zarr_write_large, 4),
            (self.zarr_transaction, 5),
            (self.raw_set, 10),
            (self.raw_gather, 6),
            (self.raw_delete, 4),
            (self.raw_delete_prefix, 2),
            (self.raw_transaction, 5),
            (self.rename_group, 3),
            (self.resize, 2),
            (self.close_and_reopen, 3),
            (self.vacuum, 1),
        ]
        functions = [f for f, _ in actions]
        weights = [w for _, w in actions]
        for _ in range(MAX_STEPS):
            self.rng.choices(functions, weights)[0]()
        self.core._powerloss_cut()

    def open_store(self) -> None:
        self.store = self.SQLiteStore(self.path, **self.options)
        self.store.ensure_open()

    def setup(self) -> None:
        zarr = self.zarr
        self.step(
            "root_group",
            False,
            lambda: zarr.open_group(self.mirror, mode="w"),
            lambda: zarr.open_group(self.store, mode="w"),
        )
        specs = [
            (SMALL, dict(shape=(64, 64), chunks=(8, 8), dtype="int32")),
            (LARGE, dict(shape=(512, 512), chunks=(256, 256), dtype="float32")),
            (f"{self.group}/data", dict(shape=(40,), chunks=(8,), dtype="int16")),
        ]
        for name, spec in specs:
            self.step(
                "create_array",
                False,
                lambda name=name, spec=spec: self.create(self.mirror, name, spec),
                lambda name=name, spec=spec: self.create(self.store, name, spec),
            )

    def create(self, store, name: str, spec: dict) -> None:
        self.zarr.create_array(
            store, name=name, fill_value=0, compressors=None, zarr_format=3, **spec
        )

    def array(self, store, name: str):
        return self.zarr.open_array(store, path=name, mode="r+")

    def both(self, name: str, atomic: bool, fn) -> None:
        """A step that makes the same zarr calls on either store: fn(store)."""
        self.step(name, atomic, lambda: fn(self.mirror), lambda: fn(self.store))

    def zarr_write_small(self, inside=None) -> None:
        rows = self.small_rows
        r0 = self.rng.randrange(rows)
        r1 = self.rng.randint(r0 + 1, min(rows, r0 + 24))
        c0 = self.rng.randrange(64)
        c1 = self.rng.randint(c0 + 1, min(64, c0 + 24))
        values = self.data.integers(-(2**31), 2**31 - 1, size=(r1 - r0, c1 - c0), dtype=np.int32)
        if self.rng.random() < 0.1:
            values[...] = 0  # chunks that become all fill value are deleted by zarr
        def write(store) -> None:
            self.array(store, SMALL)[r0:r1, c0:c1] = values

        self.both("zarr_write_small", False, write)

    def zarr_write_large(self) -> None:
        rows = self.rng.choice([(0, 256), (256, 512), (0, 512), (100, 300)])
        values = self.data.standard_normal((rows[1] - rows[0], 512), dtype=np.float32)
        def write(store) -> None:
            self.array(store, LARGE)[rows[0] : rows[1], :] = values

        self.both("zarr_write_large", False, write)

    def zarr_transaction(self) -> None:
        rows = self.small_rows
        r0 = self.rng.randrange(rows)
        r1 = self.rng.randint(r0 + 1, rows)
        values = self.data.integers(0, 1000, size=(r1 - r0, 64), dtype=np.int32)
        large = self.rng.random() < 0.3
        big = self.data.standard_normal((256, 512), dtype=np.float32) if large else None
        generation = self.steps

        def on(store) -> None:
            self.array(store, SMALL)[r0:r1, :] = values
            if large:
                self.array(store, LARGE)[0:256, :] = big
            root = self.zarr.open_group(store, mode="r+")
            root.attrs["generation"] = generation

        def on_store() -> None:
            with self.store.transaction():
                on(self.store)

        self.step("zarr_transaction", True, lambda: on(self.mirror), on_store)

    def raw_value(self) -> bytes:
        size = self.rng.choice(
            [
                self.rng.randint(1, 2000),
                self.rng.randint(1, 2000),
                self.rng.randint(20_000, 100_000),
                self.rng.randint(150_000, 400_000),  # written through the blob API
            ]
        )
        return self.data.bytes(size)

    def raw_set(self) -> None:
        key = f"raw/a/{self.rng.randrange(RAW_A)}"
        value = self.buffer.from_bytes(self.raw_value())
        self.step(
            "raw_set",
            True,
            lambda: self.model.__setitem__(key, value),
            lambda: self.store.set_sync(key, value),
        )

    def raw_gather(self) -> None:
        """Several writes at once from an event loop: the writer commits them together, in
        one or more group commits (each write is atomic on its own)."""
        keys = self.rng.sample(
            [f"raw/a/{i}" for i in range(RAW_A)] + [f"raw/b/{i}" for i in range(RAW_B)],
            self.rng.randint(2, 8),
        )
        values = [self.buffer.from_bytes(self.raw_value()) for _ in keys]

        async def gather() -> None:
            await asyncio.gather(*(self.store.set(k, v) for k, v in zip(keys, values)))

        self.step(
            "raw_gather",
            False,
            lambda: self.model.update(zip(keys, values)),
            lambda: asyncio.run(gather()),
        )

    def raw_delete(self) -> None:
        present = sorted(k for k in self.model if k.startswith("raw/"))
        key = self.rng.choice(present) if present else "raw/a/0"
        self.step(
            "raw_delete",
            True,
            lambda: self.model.pop(key, None),
            lambda: self.store.delete_sync(key),
        )

    def raw_delete_prefix(self) -> None:
        def on_mirror() -> None:
            for key in [k for k in self.model if k.startswith("raw/b/")]:
                del self.model[key]

        async def on_store() -> None:
            await self.store.delete_dir("raw/b")

        self.step("raw_delete_prefix", True, on_mirror, lambda: asyncio.run(on_store()))

    def raw_transaction(self) -> None:
        writes = [
            (f"raw/{self.rng.choice('ab')}/{self.rng.randrange(RAW_B)}",
             self.buffer.from_bytes(self.raw_value()))
            for _ in range(self.rng.randint(2, 5))
        ]
        present = sorted(k for k in self.model if k.startswith("raw/a/"))
        doomed = self.rng.choice(present) if present and self.rng.random() < 0.5 else None

        def on_mirror() -> None:
            self.model.update(writes)
            if doomed is not None:
                self.model.pop(doomed, None)

        def on_store() -> None:
            with self.store.transaction():
                for key, value in writes:
                    self.store.set_sync(key, value)
                if doomed is not None:
                    self.store.delete_sync(doomed)

        self.step("raw_transaction", True, on_mirror, on_store)

    def rename_group(self) -> None:
        old = self.group
        new = GROUPS[1 - GROUPS.index(old)]
        self.group = new

        def on_mirror() -> None:
            for key in [k for k in self.model if k.startswith(old + "/")]:
                self.model[new + key[len(old) :]] = self.model.pop(key)

        self.step("rename_group", True, on_mirror, lambda: self.store.rename(old, new))

    def resize(self) -> None:
        rows = self.rng.choice([16, 40, 64])
        self.small_rows = rows
        self.both("resize", False, lambda s: self.array(s, SMALL).resize((rows, 64)))

    def close_and_reopen(self) -> None:
        def on_store() -> None:
            self.store.close()  # checkpoint, back to DELETE mode
            self.open_store()

        self.step("close_and_reopen", True, lambda: None, on_store)

    def vacuum(self) -> None:
        self.step("vacuum", True, lambda: None, lambda: self.store.vacuum())


def run_trial(path: str, durability: str, journal: str, seed: int, report: int) -> None:
    """In the fork: the workload until the power goes out. Any other end is a failure."""
    workload = None
    try:
        workload = Workload(path, durability, journal, seed, report)
        workload.run()
    except BaseException:
        # A read that races the power cut can fail: asking for the simulation's count waits
        # for a cut under way, which ends the process before this reports anything.
        from zarrdb import _core

        _core._powerloss_events()
        text = traceback.format_exc()
        try:
            os.write(report, ("E " + text.replace("\n", " | ") + "\n").encode())
        finally:
            sys.stderr.write(text)
            sys.stderr.flush()
            os._exit(3)


def run_trials(directory: str, durability: str, journal: str, seed: int, first: int,
               count: int) -> None:
    for trial in range(first, first + count):
        tseed = trial_seed(seed, durability, journal, trial)
        path = os.path.join(directory, f"trial-{trial}.zarrdb")
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                run_trial(path, durability, journal, tseed, write_end)
            finally:
                os._exit(4)  # run_trial never returns
        os.close(write_end)
        chunks = []
        while True:
            data = os.read(read_end, 1 << 16)
            if not data:
                break
            chunks.append(data)
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
        # A line the cut interrupted (no newline) was never finished: dropped.
        lines = b"".join(chunks).decode().split("\n")[:-1]
        record = {
            "trial": trial,
            "seed": tseed,
            "path": path,
            "exit": os.waitstatus_to_exitcode(status),
            "lines": lines,
        }
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


def main() -> None:
    """One run of trials per line on stdin ("DIR DURABILITY JOURNAL SEED FIRST COUNT"), each
    answered by a JSON line per trial and then "{}"."""
    # Imported once here, used in the forks (which do not import them again).
    import zarr  # noqa: F401

    import zarrdb  # noqa: F401

    for command in sys.stdin:
        directory, durability, journal, seed, first, count = command.split()
        run_trials(directory, durability, journal, int(seed), int(first), int(count))
        sys.stdout.write("{}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
