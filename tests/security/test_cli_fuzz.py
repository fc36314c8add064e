"""The command line's promise on hostile input, for every command that reads a file: over the
files the other generators make (hostile schemas and metadata, test_schema_fuzz.py; planted
sidecars, cut, padded and sparse files, and servers stating 1 TiB or 2^64 - 1 bytes,
test_environment_fuzz.py;
declared coordinates, test_coordinate_fuzz.py), some of them under names holding escape
sequences, every command that takes a FILE exits 0, 1 or 2, never 3
(internal error) and never by a signal; with at most one line on stderr, and no raw control
character in what it prints; within DEADLINE seconds and PEAK_GROWTH bytes of memory.

The commands: `info` (and `--json`), `tree`, `check`, `copy FILE OUT`, `snapshot FILE OUT`,
then those that write the file, in place: `copy SOURCE FILE --dest-path`, `mv`, `vacuum`,
`upgrade` (a URL gets the first six). `view` serves until it is stopped; it opens the file as
`info` does. The commands run with zarrdb.cli.main in one child process (_fuzz_child.py),
which measures each one's time and peak memory; a watchdog ends a case that hangs.

ZARRDB_CLI_FUZZ_FILES sets the number of files (default 24; 120 with -m slow) and
ZARRDB_CLI_FUZZ_SEED the seed (default: a new one, printed on failure).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from format import builders
from reliability.helpers import over_peak, trials
from security import test_coordinate_fuzz, test_environment_fuzz, test_schema_fuzz
from security._hostile_http import HostileServer
from security.test_coordinate_fuzz import run_child

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="owners, modes, pipes, links; /proc, RLIMIT_AS"
)

DEADLINE = 30.0  # seconds for one command
PEAK_GROWTH = 100_000_000
CASE_SECONDS = 120.0  # for all the commands on one file (the watchdog)
ESCAPES = "\x1b]0;pwned\x07\x1b[2J"
TIB = 1 << 40
URL_OPTIONS = ["--storage-option", "timeout=5s", "--storage-option", "max_retries=0"]


def _commands(target: str, work: Path, n: int, source: Path, url: bool) -> list:
    out = str(work / f"out-{n}.zarrdb")
    reading = [
        ["info", ["info", target]],
        ["info --json", ["info", "--json", target]],
        ["tree", ["tree", target]],
        ["check", ["check", target]],
        ["copy", ["copy", target, out]],
        ["snapshot", ["snapshot", target, out + ".snapshot"]],
    ]
    if url:
        return [[name, [*argv, *URL_OPTIONS]] for name, argv in reading]
    return [
        *reading,
        ["copy --dest-path", ["copy", str(source), target, "--dest-path", "incoming"]],
        ["mv", ["mv", target, "a", "renamed"]],
        ["vacuum", ["vacuum", target]],
        ["upgrade", ["upgrade", target]],
    ]


def _schema_file(rng: random.Random, path: Path) -> Path:
    statements, records, _, blob_key = test_schema_fuzz._case(rng)
    # A record at its limits in every one (the schema generator puts one in some).
    records.append(test_schema_fuzz.METADATA[rng.choice(sorted(test_schema_fuzz.METADATA))])
    test_schema_fuzz._build(path, statements, records, blob_key)
    return path


def _named(rng: random.Random, path: Path) -> Path:
    """`path`, or the same file renamed to hold escape sequences."""
    if rng.random() < 0.3:
        renamed = path.with_name(f"{ESCAPES}{path.name}")
        path.rename(renamed)
        return renamed
    return path


def _make(rng: random.Random, folder: Path, n: int, servers: list) -> tuple[str, bool, str]:
    """One hostile file (or URL): its name, whether it is a URL, how it was made."""
    kind = rng.choice(["schema", "schema", "environment", "coordinates"])
    if kind == "schema":
        path = _schema_file(rng, folder / f"schema-{n}.zarrdb")
        return str(_named(rng, path)), False, "hostile schema or metadata"
    if kind == "coordinates":
        case = test_coordinate_fuzz.build(folder, n, rng)
        return str(_named(rng, Path(case["path"]))), False, f"coordinates {case['declared']}"
    spec = {name: rng.choice(values) for name, values in test_environment_fuzz.CHOICES.items()}
    # Files of 1 TiB: sparse ones (refused as mostly holes), and a server stating that size,
    # for the file's own header or one made to agree (a download or a snapshot of it is
    # refused for want of room), besides one stating 2^64 - 1.
    if spec["served"] == "claims 1 TiB" and rng.random() < 0.3:
        spec["served"] = "claims 2^64 - 1"
    if rng.random() < 0.3:  # more of them than the environment's own mix has
        spec["size"] = rng.choice(["sparse, header says", "sparse, count ignored"])
    room = folder / f"env-{n}"
    room.mkdir()
    built = test_environment_fuzz._build(room, n, spec)
    if spec["served"] is None:
        return built["target"], False, f"surroundings {spec}"
    with open(built["target"], "rb") as f:
        data = f.read(1 << 20)
    huge = {"as is": len(data), "claims 1 TiB": TIB}.get(spec["served"], (1 << 64) - 1)
    if huge == TIB and rng.random() < 0.5:
        data = _claiming(data, TIB // test_environment_fuzz.PAGE)
    server = HostileServer(data, "claim_size", huge=huge).__enter__()
    servers.append(server)
    return server.url(), True, f"served {spec}"


def _claiming(data: bytes, pages: int) -> bytes:
    """`data` with a header that says `pages` pages (a count SQLite trusts)."""
    out = bytearray(data)
    out[28:32] = pages.to_bytes(4, "big")
    return bytes(out)


def _problems(name: str, got: dict) -> list[str]:
    found = []
    code, err = got["code"], got["stderr"]
    if code not in (0, 1, 2):
        found.append(f"{name}: exit {code!r} {err.strip()[:300]!r}")
    if len(err.strip().splitlines()) > 1:
        found.append(f"{name}: {len(err.strip().splitlines())} lines on stderr: {err[:300]!r}")
    raw = [c for c in err.strip() if ord(c) < 32 or ord(c) == 127]
    if raw or "\x1b" in got["stdout"] or "\x07" in got["stdout"]:
        found.append(f"{name}: a raw control character reached the terminal: {err[:300]!r}")
    if got["seconds"] > DEADLINE:
        found.append(f"{name}: {got['seconds']} s")
    if over_peak(got["growth"], PEAK_GROWTH):
        found.append(f"{name}: peak +{got['growth']:,} bytes")
    return found


def run_files(folder: Path, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    source = builders.make_store_file(folder / "source.zarrdb")
    servers: list = []
    cases, made = [], []
    try:
        for n in range(count):
            target, url, how = _make(rng, folder, n, servers)
            cases.append({"n": n, "commands": _commands(target, folder, n, source, url)})
            made.append(how)
        results, ended = run_child("cli", cases, CASE_SECONDS)
    finally:
        for server in servers:
            server.__exit__(None, None, None)
    problems = [ended] if ended else []
    for result in results:
        for name, got in result["commands"].items():
            problems += [f"{p} (file {made[result['n']]})" for p in _problems(name, got)]
    return problems


def test_every_command_exits_cleanly_on_hostile_files(tmp_path):
    count = trials("ZARRDB_CLI_FUZZ_FILES", 24, 120, slow=False)
    seed = int(os.environ.get("ZARRDB_CLI_FUZZ_SEED", random.randrange(2**32)))
    problems = run_files(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:20])


@pytest.mark.slow
def test_every_command_exits_cleanly_on_hostile_files_at_length(tmp_path):
    count = trials("ZARRDB_CLI_FUZZ_FILES", 24, 120, slow=True)
    seed = int(os.environ.get("ZARRDB_CLI_FUZZ_SEED", random.randrange(2**32)))
    problems = run_files(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:20])
