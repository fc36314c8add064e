"""Power loss: what the durability table promises, checked on a disk that loses power.

A child process (_power_loss_child.py) forks one trial after another. Each trial turns on the
engine's power-loss simulation (a VFS under SQLite: writes not yet synced are kept, torn or
dropped at random when the power goes out, directory entries not yet synced come and go; see
src/zarrdb/_vfs_powerloss.h), creates a file and ingests through the real store (zarr
`arr[...] = data`, explicit transactions, single and gathered writes, deletes, renames,
resizes, close and reopen, vacuum; the writer's group commits and checkpoints), until the power
goes out at a random file operation. Here the file is then opened with the real engine (no
simulation) and checked:
- it opens (read-only too, unless a rollback journal is left, which only a writer may roll
  back: ReadOnlyError, as documented), SQLite's integrity check passes, every key reads, the
  zarr hierarchy reads, the store writes and closes to one file in DELETE mode;
- its contents are those after some prefix of the workload's steps, plus part of the step that
  was running (a transaction all or nothing, other steps key by key): nothing half done;
- durability "full": that prefix holds every step that returned;
- "normal": any prefix (a power loss may drop the last commits);
- "off": the file is counted as damaged when it fails any of the checks above, and the rate is
  printed; nothing is asserted.
Every journal mode is covered: "auto" (a rollback journal, switching to WAL after a run of small
commits; the summary shows how many cuts fell in either phase), "wal" and "delete".

Trials: 17 per durability level and journal mode in the default run (51 per level); in the slow
one 334 for "full" and "normal" (1,002 per level) and 100 for "off" (300);
ZARRDB_POWERLOSS_TRIALS overrides them all. ZARRDB_POWERLOSS_SEED
fixes the seed (every failure names it); ZARRDB_POWERLOSS_TRIAL=N runs trial N alone. A replay
repeats the workload, the moment of the cut and every choice of the simulated disk; the threads'
timing (group commits, checkpoints) can still differ.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import zarr

from zarrdb import _core
from zarrdb._file_setup import compiled_default
from zarrdb.errors import ReadOnlyError

from . import _power_loss_child as child
from .helpers import (
    PYTHON,
    TESTS_DIR,
    child_env,
    header_journal_mode,
    needs_powerloss_vfs,
    opened,
    read_all,
    remove_leftover,
    sidecars,
)

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(os, "fork"),
    reason="the power-loss simulation is POSIX-only and its trials fork",
)

SEED = int(os.environ.get("ZARRDB_POWERLOSS_SEED") or random.SystemRandom().randrange(1 << 30))
ONLY = os.environ.get("ZARRDB_POWERLOSS_TRIAL")
LEVELS = ("full", "normal", "off")
JOURNALS = ("auto", "wal", "delete")
# Cuts per durability level and journal mode: 51 per level by default; with -m slow, 1,002 per
# level for the promises and 300 for the rate of "off".
DEFAULT_TRIALS = 17
SLOW_TRIALS = {"full": 334, "normal": 334, "off": 100}


def power_trials(durability: str, slow: bool) -> int:
    text = os.environ.get("ZARRDB_POWERLOSS_TRIALS")
    if text:
        return max(1, min(100_000, int(text)))
    return SLOW_TRIALS[durability] if slow else DEFAULT_TRIALS


# --- what a trial reported ------------------------------------------------------------------------


@dataclass
class Step:
    name: str
    atomic: bool
    changes: dict[str, str | None]  # key -> hash of its new value, None: deleted


@dataclass
class Trial:
    number: int
    seed: int
    path: Path
    exit: int
    info: dict = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    acked: int = -1  # the last step that returned
    error: str | None = None

    @classmethod
    def parse(cls, record: dict) -> Trial:
        trial = cls(record["trial"], record["seed"], Path(record["path"]), record["exit"])
        for line in record["lines"]:
            kind, _, rest = line.partition(" ")
            if kind == "I":
                trial.info = json.loads(rest)
            elif kind == "S":
                n, atomic, name, changes = rest.split(" ", 3)
                assert int(n) == len(trial.steps), line[:80]
                trial.steps.append(Step(name, atomic == "1", json.loads(changes)))
            elif kind == "A":
                trial.acked = int(rest)
            elif kind == "E":
                trial.error = rest.replace(" | ", "\n")
        return trial

    @property
    def running(self) -> str:
        """The step the power went out in."""
        if self.acked + 1 < len(self.steps):
            return self.steps[self.acked + 1].name
        return "between steps"


def hashes(contents: dict[str, bytes]) -> dict[str, str]:
    return {key: child.value_hash(value) for key, value in contents.items()}


def consistent_prefixes(steps: list[Step], found: dict[str, str]) -> list[int]:
    """Every k such that `found` is the state after steps[:k] with part of steps[k] on top (all
    or none of its keys if it is atomic, any of them otherwise)."""
    state: dict[str, str] = {}
    valid = []
    for k in range(len(steps) + 1):
        changes = steps[k].changes if k < len(steps) else {}
        differ = {key for key in found.keys() | state.keys() if found.get(key) != state.get(key)}
        if all(key in changes and found.get(key) == changes[key] for key in differ):
            changed = {key for key, value in changes.items() if value != state.get(key)}
            if not (k < len(steps) and steps[k].atomic and differ and differ != changed):
                valid.append(k)
        for key, value in changes.items():
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    return valid


def state_after(steps: list[Step], k: int) -> dict[str, str]:
    state: dict[str, str] = {}
    for step in steps[:k]:
        for key, value in step.changes.items():
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    return state


# --- checking a file after the power came back --------------------------------------------------


def read_hierarchy(store) -> int:
    """Read every array of the zarr hierarchy through zarr; the number of arrays."""
    root = zarr.open_group(store, mode="r")
    arrays = 0
    with warnings.catch_warnings():
        # The workload's raw keys sit beside the hierarchy ("raw/..."): not zarr nodes.
        warnings.filterwarnings("ignore", "Object at raw is not recognized", UserWarning)
        members = root.members(max_depth=None)
    for _, node in members:
        node.attrs.asdict()
        if isinstance(node, zarr.Array):
            node[...]
            arrays += 1
    return arrays


def recover(path: Path) -> tuple[dict[str, str] | None, str | None]:
    """Open the file as a user would after the power came back, check it, and read it all:
    (its keys with the hashes of their values, or None if there is no file; what is wrong with
    the file, or None)."""
    if not path.exists():
        return None, None
    hot_journal = os.path.exists(f"{path}-journal")
    seen_by_reader = None
    try:
        with opened(path, read_only=True) as store:
            problems = store.check()
            if problems:
                return None, f"integrity check (read-only open): {problems[:5]}"
            seen_by_reader = hashes(read_all(store))
    except ReadOnlyError as exc:
        if not (hot_journal and exc.extended_code == 776):
            return None, f"read-only open: {exc!r}"
    except Exception as exc:  # noqa: BLE001 - every failure here is a finding
        return None, f"read-only open: {exc!r}"
    try:
        # The checks write nothing that needs to last: no fsync.
        with opened(path, durability="off") as store:
            problems = store.check()
            if problems:
                return None, f"integrity check: {problems[:5]}"
            found = hashes(read_all(store))
            if "zarr.json" in found:
                read_hierarchy(store)
            store.set_sync("powerloss-probe", store_buffer(b"probe"))
            store.delete_sync("powerloss-probe")
    except Exception as exc:  # noqa: BLE001
        return None, f"open, read or write: {exc!r}"
    if seen_by_reader is not None and seen_by_reader != found:
        return None, "a reader and a writer see different data"
    # A -shm file may stay: one the power loss left beside a file whose switch to WAL mode did
    # not reach the disk (SQLite ignores it outside WAL mode and removes it after the next
    # time the file is in WAL mode).
    if [s for s in sidecars(path) if s != "-shm"]:
        return None, f"closing left {sidecars(path)}"
    if header_journal_mode(path) != "delete":
        return None, f"closed in journal mode {header_journal_mode(path)}"
    return found, None


def store_buffer(data: bytes):
    from zarr.core.buffer import default_buffer_prototype

    return default_buffer_prototype().buffer.from_bytes(data)


def phase_at_cut(path: Path) -> str:
    """'wal' if the file was in WAL mode when the power went out, else 'rollback'. Only for a
    file no store of this process has open (it reads the header with plain file I/O)."""
    if os.path.exists(f"{path}-wal"):
        return "wal"
    return "wal" if path.exists() and header_journal_mode(path) == "wal" else "rollback"


@dataclass
class Verdict:
    damage: str | None = None  # the file is damaged (for "off": counted)
    broken: str | None = None  # a promise about the contents does not hold
    phase: str = "rollback"


def judge(trial: Trial, durability: str) -> Verdict:
    verdict = Verdict()
    # (The child runs the next trial meanwhile, in the same directory.)
    mine = [p.name for p in trial.path.parent.iterdir() if trial.path.name in p.name]
    leftovers = [name for name in mine if ".powerloss-deleted-" in name]
    assert not leftovers, f"the simulation left {leftovers}"
    verdict.phase = phase_at_cut(trial.path)
    found, verdict.damage = recover(trial.path)
    if verdict.damage is not None:
        return verdict
    if found is None:  # no file: the power went out before its creation returned
        if trial.acked >= 0:
            verdict.damage = "the file is gone"
        return verdict
    valid = consistent_prefixes(trial.steps, found)
    if not valid:
        verdict.broken = "the contents are not those after any prefix of the steps " + (
            "(a transaction half there, or a later write kept while an earlier one was lost)"
        )
    elif durability == "full" and max(valid) <= trial.acked:
        lost = state_after(trial.steps, trial.acked + 1)
        missing = sorted(k for k in lost.keys() | found.keys() if lost.get(k) != found.get(k))
        verdict.broken = (
            f"acknowledged writes lost: the file holds the state after step {max(valid)} at "
            f"most, step {trial.acked} ({trial.steps[trial.acked].name}) had returned; keys "
            f"that differ: {missing[:10]}"
        )
    return verdict


# --- running the trials ---------------------------------------------------------------------------


@dataclass
class Summary:
    trials: int = 0
    seconds: float = 0.0
    damaged: int = 0
    broken: int = 0
    phases: Counter = field(default_factory=Counter)
    running: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def add(self, other: Summary) -> None:
        self.trials += other.trials
        self.seconds += other.seconds
        self.damaged += other.damaged
        self.broken += other.broken
        self.phases.update(other.phases)
        self.running.update(other.running)
        self.failures += other.failures


class Children:
    """The child process that runs the trials (one for the whole module: it imports zarr once),
    its stderr in a file."""

    def __init__(self, directory: Path) -> None:
        self.stderr_path = directory / "child.stderr"
        self.stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "reliability._power_loss_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=TESTS_DIR,
            env=child_env(),
        )

    def run(self, directory: Path, durability: str, journal: str, first: int, count: int):
        """The trials' records, as the child finishes them."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        command = f"{directory} {durability} {journal} {SEED} {first} {count}\n"
        self.proc.stdin.write(command.encode())
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            record = json.loads(line)
            if not record:
                return
            yield record
        raise AssertionError(f"the child died:\n{self.errors()}")

    def errors(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-6000:]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)
        self.stderr.close()


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    runner = Children(tmp_path_factory.mktemp("power-loss-child"))
    yield runner
    runner.close()


def run_trials(children: Children, tmp_path: Path, durability: str, journal: str,
               count: int, first: int = 0) -> Summary:
    first, count = (int(ONLY), 1) if ONLY else (first, count)
    summary = Summary()
    started = time.perf_counter()
    for record in children.run(tmp_path, durability, journal, first, count):
        trial = Trial.parse(record)
        where = (
            f"durability={durability} journal={journal} trial {trial.number} "
            f"{trial.info} (replay: ZARRDB_POWERLOSS_SEED={SEED} "
            f"ZARRDB_POWERLOSS_TRIAL={trial.number} pytest "
            f"tests/reliability/test_power_loss.py -k '{durability} and {journal}')"
        )
        summary.trials += 1
        if trial.exit != child.CUT_EXIT or trial.error:
            summary.failures.append(
                f"{where}: the workload failed (exit {trial.exit}):\n{trial.error}"
            )
            continue
        verdict = judge(trial, durability)
        summary.phases[verdict.phase] += 1
        summary.running[trial.running] += 1
        if verdict.damage is not None:
            summary.damaged += 1
        elif verdict.broken is not None:
            summary.broken += 1
        problem = verdict.damage or verdict.broken
        if problem is not None and durability != "off":
            summary.failures.append(
                f"{where}, power out in step {trial.acked + 1} ({trial.running}): {problem}"
            )
        for leftover in tmp_path.glob(f"*{trial.path.name}*"):
            remove_leftover(leftover)
    summary.seconds = time.perf_counter() - started
    assert summary.trials == count, children.errors()
    return summary


def report(summary: Summary, durability: str, journal: str, capsys) -> None:
    line = (
        f"power loss, durability={durability} journal={journal}: {summary.trials} cuts in "
        f"{summary.seconds:.1f} s (seed {SEED}); damaged files {summary.damaged} "
        f"({100 * summary.damaged / max(1, summary.trials):.1f}%), sound files with writes "
        f"lost out of order or a transaction half there {summary.broken}; phase at the cut "
        f"{dict(summary.phases)}; in close/reopen {summary.running['close_and_reopen']}"
    )
    with capsys.disabled():
        print("\n" + line)


def check(children, tmp_path, durability, journal, count, capsys) -> Summary:
    summary = run_trials(children, tmp_path, durability, journal, count)
    if journal == "auto" and count >= 15 and not ONLY:
        # Both phases of "auto" must be under test: the rollback journal and, after the
        # switch, WAL. The seeds decide where each cut falls, and only one cut in four to
        # six falls after the switch, so 17 cuts hold none about once in a hundred runs: the
        # trials numbered after them run too until both phases are there (four times as
        # many at most).
        while summary.trials < 5 * count and not (
            summary.phases["rollback"] and summary.phases["wal"]
        ):
            summary.add(run_trials(children, tmp_path, durability, journal, count,
                                   first=summary.trials))
    report(summary, durability, journal, capsys)
    assert not summary.failures, (
        f"{len(summary.failures)} of {summary.trials} power losses broke the promise of "
        f"durability={durability!r}:\n" + "\n".join(summary.failures[:10])
    )
    if journal == "auto" and summary.trials >= 15:
        assert summary.phases["rollback"] and summary.phases["wal"], dict(summary.phases)
    return summary


@needs_powerloss_vfs
@pytest.mark.parametrize("journal", JOURNALS)
@pytest.mark.parametrize("durability", LEVELS)
def test_power_loss(children, tmp_path, durability, journal, capsys):
    check(children, tmp_path, durability, journal, power_trials(durability, False), capsys)


@needs_powerloss_vfs
@pytest.mark.slow
@pytest.mark.parametrize("journal", JOURNALS)
@pytest.mark.parametrize("durability", LEVELS)
def test_power_loss_many(children, tmp_path, durability, journal, capsys):
    check(children, tmp_path, durability, journal, power_trials(durability, True), capsys)


# --- the checker itself ---------------------------------------------------------------------------


def _steps() -> list[Step]:
    return [
        Step("create", True, {}),
        Step("raw_set", True, {"a": "1"}),
        Step("raw_transaction", True, {"b": "2", "c": "2"}),
        Step("raw_gather", False, {"d": "3", "e": "3"}),
        Step("raw_delete", True, {"a": None}),
    ]


@pytest.mark.parametrize("found, prefixes", [
    ({}, [0, 1]),  # nothing survived (the first write may be lost too: step 1 partly)
    ({"a": "1"}, [1, 2]),  # after step 1 (step 2 wholly lost)
    ({"a": "1", "b": "2", "c": "2", "d": "3"}, [3]),  # the gathered writes: key by key
    ({"b": "2", "c": "2", "d": "3", "e": "3"}, [4, 5]),  # everything (step 4 in full)
])
def test_checker_finds_the_prefixes(found, prefixes):
    assert consistent_prefixes(_steps(), found) == prefixes


@pytest.mark.parametrize("found", [
    {"a": "1", "b": "2"},  # half of the transaction
    {"b": "2", "c": "2"},  # a later write kept, an earlier one lost
    {"a": "1", "b": "2", "c": "2", "d": "3", "e": "3", "z": "9"},  # a key nobody wrote
    {"a": "2"},  # a value nobody wrote
])
def test_checker_rejects_states_no_prefix_explains(found):
    assert consistent_prefixes(_steps(), found) == []


def test_checker_reports_a_lost_acknowledged_write(tmp_path):
    trial = Trial(0, 0, tmp_path / "f.zarrdb", child.CUT_EXIT, steps=_steps(), acked=2)
    # The file (opened through zarrdb) holds step 1's write only: step 2 had returned.
    with opened(trial.path) as store:
        store.set_sync("a", store_buffer(b"x"))
    trial.steps[1].changes["a"] = child.value_hash(b"x")
    verdict = judge(trial, "full")
    assert verdict.damage is None
    assert verdict.broken is not None and "acknowledged writes lost" in verdict.broken
    assert judge(trial, "normal").broken is None  # "normal" may lose the last commits


# --- the settings the trials prove ------------------------------------------------------------------


# The bundled SQLite's defaults when synchronous is not set: FULL in a rollback journal, NORMAL
# in WAL mode (setup.py); another library's (ZARRDB_SYSTEM_SQLITE=1) may use FULL in both.
LIBRARY_ROLLBACK = compiled_default("DEFAULT_SYNCHRONOUS")
LIBRARY_WAL = compiled_default("DEFAULT_WAL_SYNCHRONOUS")


def test_the_bundled_sqlite_syncs_fully_in_a_rollback_journal_and_normally_in_wal():
    if not _core.BUNDLED_SQLITE:
        pytest.skip("built against the system SQLite (ZARRDB_SYSTEM_SQLITE=1)")
    assert (LIBRARY_ROLLBACK, LIBRARY_WAL) == (2, 1)


@pytest.mark.parametrize("durability, journal, rollback, wal", [
    ("full", "auto", 3, 3),  # EXTRA throughout
    ("full", "wal", None, 3),
    ("full", "delete", 3, None),
    # SQLite's defaults: FULL with the rollback journal, NORMAL after the switch (bundled)
    ("normal", "auto", LIBRARY_ROLLBACK, LIBRARY_WAL),
    ("normal", "wal", None, 1),
    ("normal", "delete", 3, None),  # EXTRA: a rollback journal throughout
    ("off", "auto", 0, 0),
])
def test_synchronous_follows_durability_and_journal(tmp_path, durability, journal, rollback, wal):
    """PRAGMA synchronous of the write connection (0 off, 1 normal, 2 full, 3 extra) before
    and after journal="auto" moves the file to WAL mode (after a run of small commits)."""
    if durability == "normal" and journal == "auto" and (LIBRARY_ROLLBACK or 0) < 2:
        rollback = wal = 2  # a library that would sync less: zarrdb sets FULL itself

    def synchronous(store) -> tuple[bool, int]:
        writing = store._open_file.submitter
        return writing.call_holding(lambda db: (writing.writer.in_wal, db.pragma("synchronous")))

    with opened(tmp_path / "f.zarrdb", durability=durability, journal=journal) as store:
        store.set_sync("k", store_buffer(b"1"))
        in_wal, level = synchronous(store)
        assert (wal if in_wal else rollback) == level
        if journal == "auto":
            assert not in_wal
            for i in range(20):
                store.set_sync(f"k{i}", store_buffer(b"1"))
            assert synchronous(store) == (True, wal)
