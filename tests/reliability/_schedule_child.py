"""The schedule explorer's runner (test_schedule_explorer.py): a server that imports zarrdb once
and forks one child per program, so that each program runs in a fresh process that ends as a
program does (exit handlers, interpreter finalization) in milliseconds rather than seconds.

    python _schedule_child.py            (one JSON line per program on stdin)

For each line {"program": ..., "path": ..., "events": ..., "stderr": ...} the child runs the
program's callers on one store (threads, and tasks on one event loop thread), with the pause
points armed: the k-th arrival at a gate's point waits until the other point has been reached
(or GATE_WAIT passes: a schedule that cannot happen is no failure), and a signal point sends
SIGINT to the main thread. Every operation's outcome is appended to the events file as it ends
(one JSON line), so an interrupted or hung child still reports what was acknowledged. A child
that outlives its deadline (DEADLINE, longer on a loaded machine) dumps every thread's stack
(faulthandler) and ends. The server answers
one JSON line per program: the child's exit status.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import faulthandler
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable


_programs: list[Run] = []  # the program this process runs (in a child of the server)


def _stores_closed_at_exit() -> None:
    """Registered before zarrdb is imported, so that it runs after zarrdb's exit hook (atexit
    runs the last registered first): when every store was closed for good."""
    for run in _programs:
        run.record(exit_closed=time.monotonic())


atexit.register(_stores_closed_at_exit)

import numpy as np  # noqa: E402 - after the exit handler above
from zarr.core.buffer import cpu  # noqa: E402

from zarrdb import SQLiteStore, _pause, _tunables  # noqa: E402

# Seconds for a whole program, exit included: a hang fails in seconds. On a machine busier
# than it has processors (load average per processor above 1), the program's threads get a
# share of a processor only: the deadline grows with the load, up to four times (a hang still
# fails, in at most 24 s); set per program by serve(), as the load changes.
BASE_DEADLINE = 6.0
DEADLINE = BASE_DEADLINE


def deadline_for_load() -> float:
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return BASE_DEADLINE * min(4.0, max(1.0, load))

GATE_WAIT = 0.25  # seconds a gate holds a thread at most
FORK_WAIT = 4.0  # seconds a forked child has for its write (a lock held meanwhile included)
FORK_HOLD = 1.0  # seconds a thread at the fork's point waits for the fork at most
SIZES = {"small": 100, "large": 96 * 1024}


class Boom(Exception):
    """The error a program raises to end a transaction's level with a rollback."""


def value(op_id: int, size: str, bad: bool = False) -> cpu.Buffer:
    """The value an operation writes: its id first (the checker reads it back), then filler;
    `bad`: the same bytes as a non-contiguous view, which a write must refuse."""
    data = op_id.to_bytes(8, "little") + bytes(SIZES[size] - 8)
    if bad:
        return cpu.Buffer(np.frombuffer(data * 2, dtype="u1")[::2])
    return cpu.Buffer.from_bytes(data)


# Another process opening the file and writing one value (Run.open_and_write); it keeps the store
# open after its write until told to close (a line on stdin) or its last argument's seconds have
# passed (0: it closes at once); exits 0 once the write is acknowledged and the store closed,
# 3 if a lock kept it out.
_OPENER = """
import select, sys
from zarr.core.buffer import cpu
from zarrdb import SQLiteStore, errors
try:
    with SQLiteStore(sys.argv[1], journal="wal", busy_timeout=float(sys.argv[4])) as store:
        store.set_sync(sys.argv[2], cpu.Buffer.from_bytes(bytes.fromhex(sys.argv[3])))
        print("wrote", flush=True)
        if float(sys.argv[5]):
            select.select([sys.stdin], [], [], float(sys.argv[5]))
except errors.DatabaseLockedError:
    sys.exit(3)
"""
OPENER_WAIT = 1.0  # seconds the other process waits for a lock before it gives up
OPENER_HOLD = 1.0  # seconds it keeps the file open at most, where the program has it do so


class Scheduler:
    """What the armed pause points do."""

    def __init__(
        self, gates: list[list], signal_at: list | None, fork_at: list | None,
        opener_at: list | None = None, opener: Callable[[], None] | None = None,
        opener_close: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        self.pid = os.getpid()
        # The k-th arrival at this point runs `opener` (another process opening the file and
        # writing) before it goes on, holding whatever it holds there; where the program
        # keeps the other process open (opener_at[4:6]: a point and k), the k-th arrival there
        # runs `opener_close` (it closes the store and ends) before it goes on.
        self.opener_at = tuple(opener_at[:2]) if opener_at else None
        self.opener = opener
        self.opener_until = tuple(opener_at[4:6]) if opener_at and len(opener_at) > 4 else None
        self.opener_close = opener_close
        self.cond = threading.Condition()
        self.counts: dict[str, int] = {}
        self.gates = {(at, k): until for at, k, until in gates}
        self.signal_at = tuple(signal_at) if signal_at else None
        # The k-th arrival at this point is held while another thread forks (Run.forker).
        self.fork_at = tuple(fork_at[:2]) if fork_at else None
        self.fork_go = threading.Event()
        self.forked = threading.Event()
        self.main = threading.main_thread().ident

    def __call__(self, name: str) -> None:
        if os.getpid() != self.pid:  # a forked child: its locks may be held by no thread
            return
        with self.cond:
            n = self.counts[name] = self.counts.get(name, 0) + 1
            self.cond.notify_all()
            until = self.gates.get((name, n))
        if self.signal_at == (name, n):
            signal.pthread_kill(self.main, signal.SIGINT)
        if self.opener_at == (name, n) and self.opener is not None:
            self.opener()
        if self.opener_until == (name, n) and self.opener_close is not None:
            self.opener_close()
        if self.fork_at == (name, n):
            # Held here (with whatever this thread holds at the point) until the fork is made.
            self.fork_go.set()
            self.forked.wait(FORK_HOLD)
        if until is not None:
            self.wait_for(until)

    def wait_for(self, name: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.counts.get(name, 0) > 0, GATE_WAIT)


class Run:
    """One program in this process."""

    def __init__(self, program: dict, path: str, events: str) -> None:
        self.program = program
        self.path = path
        self.events = open(events, "a", buffering=1)  # noqa: SIM115 - ends with the process
        self.events_lock = threading.Lock()
        # No syncs: what is explored is the order of things, not what a disk keeps.
        self.store = SQLiteStore(
            path, busy_timeout=DEADLINE, durability="off", journal=program.get("journal", "auto")
        )
        self.sched = Scheduler(
            program["gates"], program.get("signal"), program.get("fork_at"),
            program.get("opener_at"), self.open_and_write, self.close_opener,
        )  # fmt: skip
        self.held: tuple[subprocess.Popen, float] | None = None  # the other process kept open
        self.held_lock = threading.Lock()
        self.started: list[threading.Thread] = []
        self.over = threading.Event()  # the program has ended: no fork at a point any more
        self.fork_lock = threading.Lock()  # held to fork, and to end the program's forks
        self.children: list[tuple[int, int, float]] = []  # forked: (pid, operation, when)

    def record(self, **event: object) -> None:
        with self.events_lock:
            self.events.write(json.dumps(event) + "\n")

    # --- one operation, from a thread or from the loop's thread ---------------------------

    def op_sync(self, op: dict, ns: str) -> None:
        kind = op["op"]
        t0 = time.monotonic()
        try:
            if kind in ("set", "set_sync", "fire"):
                self.store.set_sync(f"{ns}/{op['key']}", value(op["id"], op["size"], op["bad"]))
            elif kind == "delete":
                self.store.delete_sync(f"{ns}/{op['key']}")
            elif kind == "close":
                self.store.close()
            elif kind == "fork":
                self.fork(op, ns)
                return  # its outcome is recorded as the program ends
            elif kind == "wait":
                self.sched.wait_for(op["until"])
        except Exception as exc:
            self.record(id=op["id"], s="err", e=type(exc).__name__, m=str(exc)[:200],
                        t0=t0, t1=time.monotonic(), th=threading.get_ident())  # fmt: skip
            raise
        self.record(id=op["id"], s="ok", t0=t0, t1=time.monotonic(), th=threading.get_ident())

    def fork(self, op: dict, ns: str, forked: threading.Event | None = None) -> None:
        """Fork a child that writes the operation's value through the inherited store and
        closes it (`forked` is set as soon as the fork is made). Its outcome is recorded when
        the program has ended (wait_children): a child may wait for the file's lock, which a
        transaction of this process around the fork holds until its block ends."""
        # (the program's end and a fork exclude each other: a child forked as the program ended
        # would not be waited for, and would still have the file open when it is looked at)
        with self.fork_lock:
            if self.over.is_set():
                return  # the program has ended: a child now would outlive the wait for it
            t0 = time.monotonic()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads is the point
                pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    # A key of its own: children run side by side, in no order.
                    self.store.set_sync(f"{ns}/f{op['id']}", value(op["id"], "small"))
                    code = 0
                    self.store.close()  # a child leaves the file whole too, then ends at once
                finally:
                    os._exit(code)
            with self.events_lock:
                self.children.append((pid, op["id"], t0))
        if forked is not None:
            forked.set()

    def open_and_write(self) -> None:
        """Another process opens the file (journal="wal") and writes the value of the
        program's opener_at operation under o/KEY, waiting OPENER_WAIT seconds at most for a
        lock; its outcome is recorded as that operation's (a refusal: "err"). Where the program
        keeps it open (opener_at[4:6]), it holds the file (OPENER_HOLD seconds at most) until
        close_opener; else it closes at once."""
        _, _, key, op_id = self.program["opener_at"][:4]
        hold = OPENER_HOLD if len(self.program["opener_at"]) > 4 else 0
        t0 = time.monotonic()
        # Started under the fork lock: a child that another thread forked while Popen starts
        # this process would inherit Popen's pipes (the one it reads to learn that the program
        # started, and this process's output), and Popen would wait until that child ended.
        with self.fork_lock:
            proc = subprocess.Popen(
                [sys.executable, "-c", _OPENER, self.path, f"o/{key}",
                 value(op_id, "small").to_bytes().hex(), str(OPENER_WAIT), str(hold)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        with self.held_lock:
            self.held = (proc, t0)
        assert proc.stdout is not None
        proc.stdout.readline()  # "wrote", or nothing: it ended (a lock kept it out)
        if not hold:
            self.close_opener()

    def close_opener(self) -> None:
        """The other process kept open closes its store and ends; its outcome is recorded (once:
        at the program's point, or as the program ends)."""
        with self.held_lock:
            held, self.held = self.held, None
        if held is None:
            return
        proc, t0 = held
        try:
            assert proc.stdin is not None
            proc.stdin.write("close\n")
            proc.stdin.flush()
        except OSError:
            pass  # it ended already
        _, stderr = proc.communicate(timeout=OPENER_HOLD + DEADLINE)
        op_id = self.program["opener_at"][3]
        if proc.returncode == 0:
            self.record(id=op_id, s="ok", t0=t0, t1=time.monotonic(), th=0)
        else:
            locked = proc.returncode == 3
            self.record(id=op_id, s="err", e="DatabaseLockedError" if locked else "OpenerFailed",
                        m=stderr[-300:], t0=t0, t1=time.monotonic(), th=0)  # fmt: skip

    def wait_children(self) -> None:
        """Wait for the forked children (FORK_WAIT at most from now) and record each one's
        outcome; a child still running then hung: its stack is shown, and it is killed."""
        deadline = time.monotonic() + FORK_WAIT * DEADLINE / BASE_DEADLINE
        for pid, op_id, t0 in self.children:
            status = None
            while status is None and time.monotonic() < deadline:
                done, code = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = os.waitstatus_to_exitcode(code)
                else:
                    time.sleep(0.01)
            if status is None:
                print(f"the child forked by operation {op_id} hung:", file=sys.stderr, flush=True)
                os.kill(pid, signal.SIGABRT)  # faulthandler (inherited) shows its stack
                time.sleep(0.5)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                self.record(id=op_id, s="hang", t0=t0, t1=time.monotonic())
            elif status == 0:
                self.record(id=op_id, s="ok", t0=t0, t1=time.monotonic(), th=0)
            else:
                self.record(id=op_id, s="err", e="ForkedWriteFailed", m=f"status {status}",
                            t0=t0, t1=time.monotonic(), th=0)  # fmt: skip

    def forker(self) -> None:
        """The program's fork at a point: once a thread is held at the point, fork a child
        that writes through the inherited store (as op_sync's fork, from this thread)."""
        key, op_id = self.program["fork_at"][2:]
        while not self.sched.fork_go.wait(0.05):
            if self.over.is_set():
                return
        if not self.over.is_set():
            self.fork({"op": "fork", "key": key, "id": op_id}, "f", self.sched.forked)

    # --- callers on threads ----------------------------------------------------------------

    def run_sync(self, ops: list[dict], ns: str, in_txn: bool) -> None:
        for index, op in enumerate(ops):
            self.sched(f"{ns}.{index}")
            try:
                self.one_sync(op, ns)
            except Exception:
                if in_txn:
                    raise  # ends the level with the error, as user code would
                if isinstance(op, dict) and op["op"] == "txn":
                    continue

    def one_sync(self, op: dict, ns: str) -> None:
        kind = op["op"]
        if kind == "gather":
            self.threads([[each] for each in op["ops"]], f"{ns}g{op['id']}", join=True)
        elif kind == "txn":
            t0 = time.monotonic()
            try:
                with self.store.transaction():
                    children = self.threads(op["children"], f"{ns}t{op['id']}", join=False)
                    try:
                        self.run_sync(op["body"], f"{ns}t{op['id']}", True)
                    finally:
                        if op["join"]:
                            for thread in children:
                                thread.join()
                        else:  # they outlive the block; the program waits for them at its end
                            self.started.extend(children)
                    if not op["ok"]:
                        raise Boom()
            except Exception as exc:
                self.record(id=op["id"], s="err", e=type(exc).__name__, m=str(exc)[:200],
                            t0=t0, t1=time.monotonic())  # fmt: skip
                raise
            self.record(id=op["id"], s="ok", t0=t0, t1=time.monotonic())
        else:
            self.op_sync(op, ns)

    def threads(self, lists: list[list[dict]], ns: str, join: bool) -> list[threading.Thread]:
        """Each list of operations in a thread of its own, started in the caller's context."""
        started = []
        for index, ops in enumerate(lists):
            ctx = contextvars.copy_context()
            thread = threading.Thread(
                target=ctx.run, args=(self.run_sync, ops, f"{ns}c{index}", False), daemon=True
            )
            thread.start()
            started.append(thread)
        if join:
            for thread in started:
                thread.join()
        return started

    # --- callers as tasks on the event loop --------------------------------------------------

    async def run_async(self, ops: list[dict], ns: str, in_txn: bool) -> None:
        fired: list[asyncio.Future] = []
        try:
            for index, op in enumerate(ops):
                self.sched(f"{ns}.{index}")
                try:
                    if op["op"] == "fire":  # started now, awaited at the end of the list
                        fired.append(asyncio.ensure_future(self.one_async(op, ns)))
                        await asyncio.sleep(0)
                    else:
                        await self.one_async(op, ns)
                except Exception:
                    if in_txn:
                        raise
        finally:
            await asyncio.gather(*fired, return_exceptions=True)

    async def one_async(self, op: dict, ns: str) -> None:
        kind = op["op"]
        if kind in ("set", "fire", "delete"):
            key = f"{ns}/{op['key']}"
            t0 = time.monotonic()
            try:
                if kind == "delete":
                    await self.store.delete(key)
                else:
                    await self.store.set(key, value(op["id"], op["size"], op["bad"]))
            except Exception as exc:
                self.record(id=op["id"], s="err", e=type(exc).__name__, m=str(exc)[:200],
                            t0=t0, t1=time.monotonic(), th=threading.get_ident())  # fmt: skip
                raise
            self.record(id=op["id"], s="ok", t0=t0, t1=time.monotonic(),
                        th=threading.get_ident())  # fmt: skip
        elif kind == "gather":
            sub = f"{ns}g{op['id']}"
            await asyncio.gather(
                *(self.run_async([each], f"{sub}c{i}", False) for i, each in enumerate(op["ops"])),
                return_exceptions=True,
            )
        elif kind == "wait":
            await asyncio.to_thread(self.op_sync, op, ns)
        elif kind == "txn":
            sub = f"{ns}t{op['id']}"
            t0 = time.monotonic()
            try:
                async with self.store.transaction():
                    children = [
                        asyncio.ensure_future(self.run_async(each, f"{sub}c{i}", False))
                        for i, each in enumerate(op["children"])
                    ]
                    self.pending.extend(children)
                    try:
                        await self.run_async(op["body"], sub, True)
                    finally:
                        if op["join"]:
                            await asyncio.gather(*children, return_exceptions=True)
                    if not op["ok"]:
                        raise Boom()
            except Exception as exc:
                self.record(id=op["id"], s="err", e=type(exc).__name__, m=str(exc)[:200],
                            t0=t0, t1=time.monotonic())  # fmt: skip
                raise
            self.record(id=op["id"], s="ok", t0=t0, t1=time.monotonic())
        else:  # set_sync, close, fork: on the loop's own thread, as a program may do
            self.op_sync(op, ns)

    async def tasks(self, callers: list[tuple[list[dict], str]]) -> None:
        self.pending: list[asyncio.Future] = []
        await asyncio.gather(
            *(self.run_async(ops, ns, False) for ops, ns in callers), return_exceptions=True
        )
        await asyncio.gather(*self.pending, return_exceptions=True)

    # --- the program --------------------------------------------------------------------

    def threads_of_program(self) -> list[threading.Thread]:
        """A thread per caller that is a thread, and one running the event loop of the tasks."""
        actors = self.program["actors"]
        threads = []
        on_loop = [(a["ops"], f"a{i}") for i, a in enumerate(actors) if a["kind"] == "task"]
        if on_loop:
            threads.append(
                threading.Thread(target=asyncio.run, args=(self.tasks(on_loop),), daemon=True)
            )
        for i, actor in enumerate(actors):
            if actor["kind"] == "thread":
                threads.append(
                    threading.Thread(
                        target=self.run_sync, args=(actor["ops"], f"a{i}", False), daemon=True
                    )
                )
        return threads

    def end_forks(self) -> None:
        """No fork at a point once the program has ended (the exit hook's close, say): forking
        while the interpreter finalizes is not what a program does."""
        with self.fork_lock:
            self.sched.fork_at = None
            self.over.set()
        self.sched.forked.set()

    def main(self) -> int:
        self.store.ensure_open()
        holder = timer = None
        if self.program.get("lock_ms"):
            # Another process holds the file's write lock for a while (the helper module is
            # imported by its file's directory: the tests are not a package here).
            here = os.path.dirname(os.path.abspath(__file__))
            sys.path.insert(0, os.path.join(here, "..", "store"))
            from _lock_holder import LockHolder

            holder = LockHolder(self.path, timeout=DEADLINE)
            timer = threading.Timer(self.program["lock_ms"] / 1000, holder.let_go)
            timer.daemon = True
            timer.start()
        forker = None
        _pause.arm(self.sched)
        try:  # SIGINT may come at any point from here on
            if self.program.get("fork_at"):
                forker = threading.Thread(target=self.forker, daemon=True)
                forker.start()
            for thread in self.threads_of_program():
                thread.start()
                self.started.append(thread)
            for thread in self.started:  # (the list grows by the callers started late)
                while thread.is_alive():
                    thread.join(0.05)
            self.sched.signal_at = None  # the program is over: a SIGINT now would be the runner's
            self.end_forks()
            while forker is not None and forker.is_alive():
                forker.join(0.05)
        except KeyboardInterrupt:
            self.sched.signal_at = None
            self.end_forks()
            self.record(interrupted=True)
            self.wait_children()
            self.close_opener()
            return 130  # the program ends here: exit handlers run while the threads go on
        self.wait_children()
        self.close_opener()
        if holder is not None and timer is not None:
            timer.join()  # it lets go of the lock
            holder.proc.wait(DEADLINE)
        return 0


def child(request: dict) -> int:
    fd = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    os.dup2(fd, 1)  # stdout is the server's answer line
    os.close(fd)
    faulthandler.enable()
    global DEADLINE
    DEADLINE = request["deadline"]
    faulthandler.dump_traceback_later(DEADLINE, exit=True)
    with open(request["events"], "a") as f:
        f.write(json.dumps({"started": os.getpid()}) + "\n")
    program = request["program"]
    if program.get("queue_bytes"):
        _tunables.QUEUE_MAX_BYTES = program["queue_bytes"]
    run = Run(program, request["path"], request["events"])
    _programs.append(run)
    return run.main()


def serve() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        request["deadline"] = deadline_for_load()
        pid = os.fork()
        if pid == 0:
            # Ends as a program does: SystemExit unwinds to the interpreter, which runs the
            # exit handlers (the stores' exit hook among them) and finalizes.
            raise SystemExit(child(request))
        deadline = time.monotonic() + request["deadline"] + 3
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:  # faulthandler could not end it
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.005)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    serve()
