"""A generator of slow servers (issue 37, finding 6): a sound file served by a server that
trickles its answers (a byte every `interval` seconds, never silent long enough for the read
timeout), stalls (answers nothing), or does either only after an honest first answer; read
with a short stated deadline (storage option `timeout`) by a store reading every value, and
by every command that takes a URL (`info`, `tree`, `check`, `copy`, `snapshot`); with the
default retries, none, or a few.

The property, for every case: each operation ends within the stated deadline of a request
(retries included; an operation ends at the first request that fails), plus zarrdb's grace
(_tunables.REMOTE_DEADLINE_GRACE) and MARGIN for the process's own work; with exit code 0,
1 or 2 and at most one line on stderr for a command, zarrdb's error or OSError for the store. The operations run in one child process
(_fuzz_child.py) against servers on 127.0.0.1.

ZARRDB_SLOW_SERVER_CASES sets the number of cases (default 5; 40 with -m slow) and
ZARRDB_SLOW_SERVER_SEED the seed (default: a new one, printed on failure).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from reliability.helpers import trials
from security._hostile_http import HostileServer
from security._overflow import _entries, sound_file
from security.test_coordinate_fuzz import run_child

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc for the peak")

GRACE = 2.0  # _tunables.REMOTE_DEADLINE_GRACE, as the docs state it
MARGIN = 3.0
BEHAVIOURS = ("trickle", "trickle_after_first", "stall", "stall_after_first")
# A small first read and blocks, so that a store makes several requests after the first.
CACHE = {"first_read": 1024, "block_size": 1024}
OPERATIONS = ("store", "info", "tree", "check", "copy", "snapshot")


def _case(rng: random.Random, n: int, folder: Path, url: str) -> tuple[dict, float]:
    """The child's case for one server: the operations on `url`, and the seconds allowed
    for each."""
    timeout = rng.choice([1, 1, 2])
    # Retries as they are by default (a failed request is tried again for up to read_timeout,
    # 10 s), or none, or a few: the deadline is of the whole wait, retries included.
    retries = rng.choice([None, None, 0, 3])
    options = [f"timeout={timeout}s", *([] if retries is None else [f"max_retries={retries}"])]
    flags = [arg for option in options for arg in ("--storage-option", option)]
    argv = {
        "info": ["info", url, *flags],
        "tree": ["tree", url, *flags],
        "check": ["check", url, *flags],
        "copy": ["copy", url, str(folder / f"copy-{n}.zarrdb"), *flags],
        "snapshot": ["snapshot", url, str(folder / f"snapshot-{n}.zarrdb"), *flags],
    }
    store: dict = {"timeout": f"{timeout}s"}
    if retries is not None:
        store["retry_config"] = {"max_retries": retries}
    chosen = rng.sample(OPERATIONS, rng.choice([1, 1, 2]))
    read = ["store", [url, store, CACHE, sorted(_entries())]]
    commands = [read if name == "store" else [name, argv[name]] for name in chosen]
    return {"n": n, "commands": commands}, timeout + GRACE + MARGIN


def run_cases(folder: Path, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    served = sound_file(folder / "sound.zarrdb").read_bytes()
    servers, cases, allowed, said = [], [], [], []
    try:
        for n in range(count):
            behaviour = rng.choice(BEHAVIOURS)
            interval = rng.choice([0.05, 0.3, 1.5])
            server = HostileServer(served, behaviour, interval=interval).__enter__()
            servers.append(server)
            case, seconds = _case(rng, n, folder, server.url())
            cases.append(case)
            allowed.append(seconds)
            said.append(f"{behaviour} every {interval} s")
        per_case = max(allowed) * 2 + 10
        results, ended = run_child("cli", cases, per_case)
    finally:
        for server in servers:
            server.__exit__(None, None, None)
    problems = [ended] if ended else []
    for result in results:
        n = result["n"]
        for name, got in result["commands"].items():
            where = f"{name} ({said[n]}, {cases[n]['commands']})"
            lines = got["stderr"].strip().splitlines()
            if got["code"] not in (0, 1, 2):
                problems.append(f"{where}: exit {got['code']!r} {got['stderr'][:300]}")
            if len(lines) > 1:
                problems.append(f"{where}: {len(lines)} lines on stderr: {got['stderr'][:300]}")
            if got["seconds"] > allowed[n]:
                problems.append(f"{where}: {got['seconds']} s, past {allowed[n]} s")
    return problems


def test_slow_servers_end_every_operation_at_its_deadline(tmp_path):
    count = trials("ZARRDB_SLOW_SERVER_CASES", 5, 40, slow=False)
    seed = int(os.environ.get("ZARRDB_SLOW_SERVER_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:20])


@pytest.mark.slow
def test_slow_servers_end_every_operation_at_its_deadline_at_length(tmp_path):
    count = trials("ZARRDB_SLOW_SERVER_CASES", 5, 40, slow=True)
    seed = int(os.environ.get("ZARRDB_SLOW_SERVER_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:20])
