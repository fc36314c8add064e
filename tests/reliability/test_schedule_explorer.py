"""The schedule explorer: Hypothesis generates programs over two to four callers (threads, and
tasks on one event loop) writing through one store, and the schedules they run in, through the
named pause points of the write path (zarrdb._pause, test builds only); each program runs in a
fresh process (_schedule_child.py) and is checked against the oracle.

A program: sets (small, large, or a bad non-contiguous value), set_sync (on the loop's thread
from a task), sets started and awaited later, deletes, gathered small sets (a burst), outer and
nested transactions ending in a commit or an error (with callers started inside them, awaited
before the block ends or not), close(), a fork whose child writes, another process holding the
write lock for a while, a small queue (a full queue), a caller waiting until some point is
reached; and the schedule: gates (the k-th thread to reach point P waits until point Q is
reached), SIGINT sent to the main thread at a point, after which the program ends while its
threads go on (the exit hook closes the store), and a fork at a point (the k-th thread to reach
it is held there while another thread forks a child that writes through the inherited store).
Each program starts from a shape (ScheduleExplorer.shape_*), explored with its own share of
the budget.

The oracle:
- every operation ends within the child's deadline (a hang fails in seconds, with every
  thread's stack), and so does a forked child's write;
- after the process has exited, the store is one file in DELETE mode;
- each key holds what its caller's operations, in their order, leave: an acknowledged write
  is there unless its transaction ended in an error (a write of another caller made while a
  transaction that failed was open may have joined it); a transaction is all or nothing;
  a write that failed is not there; a forked child's write inside its parent's transaction
  fails; a write made in a level by a caller its block does not wait for goes with that
  level, and fails (NestingError) once the block has ended;
- a good value is never refused because of another caller's; a write is not failed with
  ClosedError by a close() that its own thread started after it.

Budget: programs per shape (BUDGET: 100 in all; 700 in the slow run), derandomized
unless ZARRDB_EXPLORER_RANDOM=1; ZARRDB_EXPLORER_SHRINK seconds at most for shrinking a failure
(default 60). ZARRDB_EXPLORER_WITHOUT leaves features out of the programs, to look for one kind
of defect at a time: a comma-separated list of thread, task, set_sync, fire, delete, bad,
full_queue, lock, txn, nested, children, join, detach, close, fork, opener, wait, gate, signal,
same_key. ZARRDB_EXPLORER_IGNORE=hang:,... looks past failures whose message starts so; the
open defects in KNOWN are looked past unless ZARRDB_EXPLORER_KNOWN=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from zarrdb import _core

from ._schedule_oracle import check
from ._schedule_shapes import WITHOUT, Shapes
from .helpers import PYTHON, child_env

pytestmark = pytest.mark.skipif(
    not _core._PAUSE_POINTS or not hasattr(os, "fork"),
    reason="the pause points are in test builds only (ZARRDB_TEST_VFS=1); the runner forks",
)

HERE = Path(__file__).resolve().parent
# Failures whose message starts so are looked past (e.g. "hang:" while looking for another).
IGNORE = tuple(filter(None, os.environ.get("ZARRDB_EXPLORER_IGNORE", "").split(",")))
# Open defects the explorer finds on the current code (docs/development.md, "Schedules"):
# looked past unless ZARRDB_EXPLORER_KNOWN=1, so that a run tells of new ones.
KNOWN: tuple[str, ...] = ()
if not os.environ.get("ZARRDB_EXPLORER_KNOWN"):
    IGNORE += KNOWN
POINTS = [
    "burst.queue", "burst.backlog", "backlog.wait", "room.wait", "submit.queued",
    "submit.full", "flush", "writer.take", "writer.commit", "writer.committed", "settle",
    "txn.enter", "txn.begin", "txn.end", "txn.exit", "close", "close.done",
    "connections.close", "writing.close", "writer.close", "close.switched", "open.switch",
    "open.beside", "fork.child", "settle.backlog", "txn.retry",
]  # fmt: skip
MARKS = [f"a{i}.{j}" for i in range(4) for j in range(4)]  # caller i before its j-th step
ANY_POINT = st.sampled_from(POINTS + MARKS)
# What a caller may wait for: the moments where the write path holds something others need.
MILESTONE = st.sampled_from([
    "txn.begin", "txn.end", "writer.take", "writer.commit", "submit.queued", "submit.full",
    "burst.backlog", "close", "writing.close", "connections.close", "settle", "txn.retry",
])  # fmt: skip
# Where a fork may find another thread of the parent: holding the store's lock (closing), the
# connection (a level opening or ending), the queue.
# Where another process may open the file and write: in the middle of closing, of a commit,
# of a switch out of WAL mode (a point of the guarded VFS, test builds), of an open's switch,
# between a transaction's two BEGINs (txn.retry: it let the lock go for what came before).
OPENER_POINT = st.sampled_from([
    "close", "connections.close", "writing.close", "close.switched", "close.done",
    "writer.commit", "writer.committed", "txn.begin", "open.switch", "vfs.relock_after_wal",
    "open.beside", "txn.retry",
])  # fmt: skip
# Where the other process, kept open after its write, closes (leaving WAL mode if it is the
# last out): in the middle of an open (after it sized the files beside the database, or in its
# switch), of a close, of a commit.
OPENER_UNTIL = st.one_of(st.none(), st.tuples(st.sampled_from([
    "open.beside", "open.switch", "close", "close.switched", "close.done", "writer.commit",
    "txn.begin",
]), st.integers(1, 2)))  # fmt: skip
FORK_POINT = st.sampled_from([
    "connections.close", "writing.close", "close", "writer.close", "txn.begin", "txn.end",
    "writer.take", "writer.commit", "submit.queued", "submit.full", "burst.backlog", "settle",
    "txn.retry",
])  # fmt: skip
# The shapes a program may start from (ScheduleExplorer.shape_*), each explored with its own
# share of the budget (a shape drawn among others came up in runs, some hardly at all).
SHAPES = [
    "siblings", "outer_first", "deferred", "began", "exit", "backlog_sync", "backlog_close",
    "fork", "switch", "reopen", "free",
]  # fmt: skip
# Most steps may first wait for such a moment (the step's `after`).
AFTER = st.one_of(st.none(), MILESTONE) if "wait" not in WITHOUT else st.none()
KINDS = [k for k in ("thread", "task") if k not in WITHOUT]
WRITES = [k for k in ("set", "set", "set_sync", "fire", "fire", "delete") if k not in WITHOUT]
JOIN = [j for j, name in ((True, "join"), (False, "detach")) if name not in WITHOUT]
BAD = st.just(False) if "bad" in WITHOUT else st.integers(0, 5).map(lambda n: n == 0)
SIZE = st.sampled_from(["small", "small", "large"])
WRITE = st.fixed_dictionaries(
    {"op": st.sampled_from(WRITES), "key": st.integers(0, 1), "size": SIZE, "bad": BAD}
)
# A caller started inside a transaction: (a nested transaction of its own?, it commits?, writes)
CHILD = st.tuples(st.booleans(), st.booleans(), st.lists(WRITE, min_size=1, max_size=2))


class Runner:
    """The server process that forks one child per program (started once per test)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [PYTHON, str(HERE / "_schedule_child.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        self.dir = Path(tempfile.mkdtemp(prefix="zarrdb-explorer-"))
        self.n = 0

    def run(self, program: dict) -> tuple[int, list[dict], str, Path]:
        code, events, stderr, path = self.run_once(program)
        if not any("started" in e for e in events):  # the child never ran it: the runner's fault
            code, events, stderr, path = self.run_once(program)
        return code, events, stderr, path

    def run_once(self, program: dict) -> tuple[int, list[dict], str, Path]:
        self.n += 1
        base = self.dir / f"p{self.n}"
        request = {
            "program": program,
            "path": f"{base}.zarrdb",
            "events": f"{base}.events",
            "stderr": f"{base}.stderr",
        }
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        events = []
        if os.path.exists(request["events"]):
            with open(request["events"]) as f:
                events = [json.loads(line) for line in f if line.endswith("\n")]
        stderr = Path(request["stderr"]).read_text(errors="replace")
        return answer["exit"], events, stderr, Path(request["path"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


RUNNER: Runner | None = None


def runner() -> Runner:
    global RUNNER
    if RUNNER is None or RUNNER.proc.poll() is not None or not RUNNER.dir.exists():
        RUNNER = Runner()
    return RUNNER


# --- the programs ----------------------------------------------------------------------------


class ScheduleExplorer(Shapes, RuleBasedStateMachine):
    """Builds a program step by step (each rule adds to it); the teardown runs and checks it."""

    shape = "free"  # the shape its programs start from (explore() makes a class per shape)

    def __init__(self) -> None:
        super().__init__()
        self.program: dict = {"actors": [], "gates": [], "signal": None}
        # Per caller: the stack of (list being added to, the transaction whose block it is).
        self.open: list[list[tuple[list, dict | None]]] = []
        self.next_id = 0

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    @initialize(
        kinds=st.lists(st.sampled_from(KINDS), min_size=2, max_size=4),
        small_queue=st.sampled_from([True, True, False]),
        lock_ms=st.sampled_from([0, 300]),
    )
    def callers(self, kinds: list[str], small_queue: bool, lock_ms: int) -> None:
        for kind in kinds:
            ops: list = []
            self.program["actors"].append({"kind": kind, "ops": ops})
            self.open.append([(ops, None)])
        if small_queue and "full_queue" not in WITHOUT:
            self.program["queue_bytes"] = 96 * 1024  # one large value fills it
        if lock_ms and "lock" not in WITHOUT:
            self.program["lock_ms"] = lock_ms
        getattr(self, f"shape_{self.shape}")()

    def add(self, caller: int, op: dict) -> dict:
        op["id"] = self.new_id()
        if "same_key" in WITHOUT and "key" in op:
            op["key"] = 10 + op["id"]  # no two writes of one key: order cannot show
        self.open[caller % len(self.open)][-1][0].append(op)
        return op

    @rule(
        caller=st.integers(0, 3),
        kind=st.sampled_from(WRITES),
        key=st.integers(0, 1),
        size=SIZE,
        bad=BAD,
        times=st.integers(1, 3),
        after=AFTER,
    )
    def write(
        self, caller: int, kind: str, key: int, size: str, bad: bool, times: int, after: str | None
    ) -> None:
        self.wait(caller, after)
        for _ in range(times):  # the same write again: more of them in flight at once
            self.add(caller, {"op": kind, "key": key, "size": size, "bad": bad})

    @rule(
        caller=st.integers(0, 3),
        n=st.integers(2, 5),
        bad=st.just(-1) if "bad" in WITHOUT else st.integers(-3, 4),
    )
    def gather(self, caller: int, n: int, bad: int) -> None:
        ops = [
            {"op": "set", "key": 0, "size": "small", "bad": i == bad, "id": self.new_id()}
            for i in range(n)
        ]
        self.add(caller, {"op": "gather", "ops": ops})

    @precondition(lambda self: "txn" not in WITHOUT)
    @rule(
        caller=st.integers(0, 3),
        ok=st.booleans(),
        join=st.sampled_from(JOIN or [True]),
        body=st.lists(WRITE, max_size=2),
        children=st.lists(CHILD, max_size=2) if "children" not in WITHOUT else st.just([]),
        stay_open=st.booleans(),
        after=AFTER,
    )
    def transaction(
        self,
        caller: int,
        ok: bool,
        join: bool,
        body: list,
        children: list,
        stay_open: bool,
        after: str | None,
    ) -> None:
        """A transaction (nested in one the caller has open) with its block's writes and the
        callers started inside it (each a nested transaction with writes, or writes);
        `stay_open`: the caller's next steps go into its block until end_block."""
        if "nested" in WITHOUT and len(self.open[caller % len(self.open)]) > 1:
            return
        self.wait(caller, after)
        op = self.add(caller, {"op": "txn", "ok": ok, "join": join, "body": [], "children": []})
        for write in body:
            op["body"].append(self.numbered(write))
        for nested, child_ok, writes in children:
            ops = [self.numbered(write) for write in writes]
            if nested and "nested" not in WITHOUT:
                inner = self.numbered(
                    {"op": "txn", "ok": child_ok, "join": True, "body": ops, "children": []}
                )
                ops = [inner]
            op["children"].append(ops)
        if stay_open:
            self.open[caller % len(self.open)].append((op["body"], op))

    def wait(self, caller: int, until: str | None) -> None:
        if until is not None:
            self.add(caller, {"op": "wait", "until": until})

    def numbered(self, op: dict) -> dict:
        return {**op, "id": self.new_id()}

    def _inside(self, caller: int, txn_only: bool) -> list[tuple[list, dict | None]] | None:
        """The stack of the `caller`-th caller that has a block open (its innermost one a
        transaction's block, with `txn_only`), if any has."""
        stacks = [
            stack for stack in self.open
            if len(stack) > 1 and (stack[-1][1] is not None or not txn_only)
        ]  # fmt: skip
        return stacks[caller % len(stacks)] if stacks else None

    @precondition(
        lambda self: "txn" not in WITHOUT and "children" not in WITHOUT
        and self._inside(0, True) is not None
    )  # fmt: skip
    @rule(caller=st.integers(0, 3))
    def start_caller_inside(self, caller: int) -> None:
        """Inside a caller's innermost open transaction, a caller of its own (a thread or task
        started in the block's context): the caller's next steps go to it."""
        stack = self._inside(caller, True)
        assert stack is not None
        txn = stack[-1][1]
        assert txn is not None
        child: list = []
        txn["children"].append(child)
        stack.append((child, None))

    @precondition(lambda self: self._inside(0, False) is not None)
    @rule(caller=st.integers(0, 3))
    def end_block(self, caller: int) -> None:
        """A caller with a block open ends it (the rest of its steps go after it)."""
        stack = self._inside(caller, False)
        assert stack is not None
        stack.pop()

    @precondition(lambda self: "close" not in WITHOUT)
    @rule(caller=st.integers(0, 3), after=AFTER)
    def close(self, caller: int, after: str | None) -> None:
        self.wait(caller, after)
        self.add(caller, {"op": "close"})

    @precondition(lambda self: "fork" not in WITHOUT)
    @rule(caller=st.integers(0, 3), key=st.integers(0, 1), after=AFTER)
    def fork_and_write(self, caller: int, key: int, after: str | None) -> None:
        self.wait(caller, after)
        self.add(caller, {"op": "fork", "key": 2 + key})

    @precondition(lambda self: "fork" not in WITHOUT and not self.program.get("fork_at"))
    @rule(at=FORK_POINT, k=st.integers(1, 2), key=st.integers(0, 1))
    def fork_at_point(self, at: str, k: int, key: int) -> None:
        """The k-th thread to reach point `at` is held there while another thread forks a
        child that writes through the inherited store."""
        self.program["fork_at"] = [at, k, key, self.new_id()]

    @precondition(lambda self: "opener" not in WITHOUT and not self.program.get("opener_at"))
    @rule(
        at=OPENER_POINT, k=st.integers(1, 2), key=st.integers(0, 1), wal=st.booleans(),
        until=OPENER_UNTIL,
    )  # fmt: skip
    def open_at_point(
        self, at: str, k: int, key: int, wal: bool, until: tuple[str, int] | None
    ) -> None:
        """The k-th thread to reach point `at` is held there while another process opens the
        file (journal="wal") and writes; that process closes then, or (`until`) keeps the file
        open until the k-th thread to reach another point has it close there; the program's
        store in WAL mode from the start, or not."""
        self.program["opener_at"] = [at, k, key, self.new_id(), *(until or ())]
        if wal:
            self.program["journal"] = "wal"

    @precondition(lambda self: "wait" not in WITHOUT)
    @rule(caller=st.integers(0, 3), until=MILESTONE)
    def wait_for(self, caller: int, until: str) -> None:
        self.add(caller, {"op": "wait", "until": until})

    @precondition(lambda self: "gate" not in WITHOUT)
    @rule(at=ANY_POINT, k=st.integers(1, 2), until=ANY_POINT)
    def gate(self, at: str, k: int, until: str) -> None:
        if at != until:
            self.program["gates"].append([at, k, until])

    @precondition(lambda self: "signal" not in WITHOUT and self.program["signal"] is None)
    @rule(at=ANY_POINT, k=st.integers(1, 2))
    def signal_at(self, at: str, k: int) -> None:
        self.program["signal"] = [at, k]

    def teardown(self) -> None:
        if not self.program["actors"]:
            return
        text = json.dumps(self.program)
        # A program fails again as it did, unrun: a schedule that failed once is a failure,
        # and Hypothesis replays the smallest one at the end (from this same line).
        message = PROGRESS["failed"].get(text)
        first = PROGRESS["first_failure"]
        if message is None:
            spent = time.monotonic() - PROGRESS["started"]
            if first is not None and spent > first[1] + SHRINK_SECONDS:
                return
            code, events, stderr, path = runner().run(self.program)
            PROGRESS["programs"] += 1
            try:
                check(self.program, code, events, stderr, path)
            except AssertionError as exc:
                if str(exc).startswith(IGNORE):
                    return  # a kind of failure the run is told to look past
                if first is None:
                    PROGRESS["first_failure"] = (
                        PROGRESS["programs"], time.monotonic() - PROGRESS["started"]
                    )
                message = PROGRESS["failed"][text] = f"{exc}\nprogram: {text}"
            else:
                for leftover in path.parent.glob(f"{path.stem}.*"):
                    leftover.unlink()
        if message is not None:
            raise AssertionError(message)



PROGRESS: dict = {"started": 0.0, "programs": 0, "first_failure": None, "failed": {}}
# Seconds spent shrinking a failure (a hang costs the child's whole deadline each time): once
# they are spent, a program not seen failing already passes unrun, so the shrinker ends with
# the smallest failing program found so far.
SHRINK_SECONDS = float(os.environ.get("ZARRDB_EXPLORER_SHRINK", 60))


def explore(examples: int, shape: str) -> None:
    """Runs the explorer on programs starting from `shape`; prints how many programs ran and
    how long it took until the first failing one (before shrinking)."""
    PROGRESS.update(started=time.monotonic(), programs=0, first_failure=None, failed={})
    machine = type(f"ScheduleExplorer_{shape}", (ScheduleExplorer,), {"shape": shape})
    override = os.environ.get("ZARRDB_EXPLORER_EXAMPLES")  # programs in all, over the shapes
    if override:
        examples = round(int(override) * BUDGET[shape] / sum(BUDGET.values()))
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=max(1, examples),
                stateful_step_count=12,
                deadline=None,
                # Reproducible unless a run asks for fresh programs.
                derandomize=not os.environ.get("ZARRDB_EXPLORER_RANDOM"),
                database=None,
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
                phases=[Phase.generate, Phase.shrink],
            ),
        )
    finally:
        if RUNNER is not None:
            RUNNER.close()
            shutil.rmtree(RUNNER.dir, ignore_errors=True)
        first = PROGRESS["first_failure"]
        found = f"; first failure after {first[0]} programs, {first[1]:.1f} s" if first else ""
        print(f"explorer ({shape}): {PROGRESS['programs']} programs, "
              f"{time.monotonic() - PROGRESS['started']:.1f} s{found}", file=sys.stderr)


# The default budget: programs per shape (100 in all, about a minute here); the large one is 7
# times as many (700). ZARRDB_EXPLORER_EXAMPLES=N: N in all, shared out in these proportions.
BUDGET = {shape: 6 for shape in SHAPES} | {"free": 40}


@pytest.mark.parametrize("shape", SHAPES)
def test_schedule_explorer_finds_no_defect(shape: str) -> None:
    explore(BUDGET[shape], shape)


@pytest.mark.slow
@pytest.mark.explore
@pytest.mark.parametrize("shape", SHAPES)
def test_schedule_explorer_large_budget(shape: str) -> None:
    explore(BUDGET[shape] * 7, shape)


# The programs that found a defect, kept to show it stays fixed (a rare one fails a few runs in
# a hundred: replayed REPLAYS times each, ZARRDB_EXPLORER_REPLAYS).
SAVED = sorted((HERE / "programs").glob("*.json"))
REPLAYS = int(os.environ.get("ZARRDB_EXPLORER_REPLAYS", "60"))


def _saved(path: Path) -> dict:
    text = path.read_text()
    return json.loads(text[text.index("{"):])


@pytest.mark.slow
@pytest.mark.explore
@pytest.mark.parametrize("saved", SAVED, ids=lambda path: path.stem)
def test_saved_programs_pass_every_replay(saved: Path) -> None:
    program = _saved(saved)
    failures = []
    for n in range(REPLAYS):
        code, events, stderr, path = runner().run(program)
        try:
            check(program, code, events, stderr, path)
        except AssertionError as exc:
            failures.append(f"run {n + 1}: {str(exc)[:500]}")
    assert len(SAVED) >= 2 and REPLAYS > 0
    assert not failures, f"{len(failures)} of {REPLAYS} runs of {saved.name} failed:\n" + (
        "\n".join(failures[:5])
    )


def replay(program: dict, times: int) -> int:
    """Run one program `times` times (a failure's `program:` line, to see how often it fails
    and its stacks); returns how many runs failed."""
    failed = 0
    try:
        for n in range(times):
            code, events, stderr, path = runner().run(program)
            try:
                check(program, code, events, stderr, path)
            except AssertionError as exc:
                failed += 1
                print(f"run {n + 1}: {exc}\nevents: {events}\n", file=sys.stderr)
    finally:
        if RUNNER is not None:
            RUNNER.close()
            shutil.rmtree(RUNNER.dir, ignore_errors=True)
    print(f"{failed} of {times} runs failed", file=sys.stderr)
    return failed


if __name__ == "__main__":
    # cd tests && python -m reliability.test_schedule_explorer PROGRAM.json [TIMES]
    replay(_saved(Path(sys.argv[1])), int(sys.argv[2]) if len(sys.argv) > 2 else 10)
