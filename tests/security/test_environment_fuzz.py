"""Fuzzing the file's surroundings, not its pages: sound files and overflow bombs with files
planted beside them (`-wal` logs of another copy, empty or junk sidecars, of this user or
another, of any mode, as pipes or links), made sparse or cut or padded, their header's
versions changed, and served by a server that states another size for the object.

The property, for every combination: the open is refused with a zarrdb error (or OSError), or
every value read is the file's own; never a crash, never a hang (a deadline per batch), never
a large allocation (the reading process's peak memory grows by at most PEAK_GROWTH). Each case
is read in a child process, a batch per child, so a crash or a hang fails the batch instead of
ending the run.

With the sidecar checks (_beside.py) or the chain walk (zarrdb_blob_chain_check) taken out,
this finds what they close within its default number of examples: a planted log read as the
file's content, a sparse or served bomb's 200 MB values. A second generator puts a log of
another copy beside every header SQLite opens in rollback mode (the header's versions changed):
with the rule read by both versions (not the read version alone), or with a second look that
always takes the log for gone, its default batches read the planted values.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from format.builders import make_planted_log
from reliability.helpers import PYTHON, child_env, generated, over_peak, trials
from security._hostile_http import HostileServer
from security._overflow import _entries, bomb_file, sound_file

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="owners, modes, pipes, links; /proc for the peak"
)

PEAK_GROWTH = 100_000_000
TIB = 1 << 40
PAGE = 1024  # the page size of the sound file and the bomb
BATCH = 12
EXAMPLES = trials("ZARRDB_ENV_FUZZ_EXAMPLES", 4, 40, slow=False)  # batches
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

# One case: open the file (or URL) read-only and read every value; print one JSON
# line per case: what happened, the values that were not the file's own, the peak's growth.
CHILD = textwrap.dedent(
    """
    import hashlib, json, sys
    from zarrdb import SQLiteStore, errors

    def peak():
        with open("/proc/self/status") as f:
            return int(next(l.split()[1] for l in f if l.startswith("VmHWM:"))) * 1024

    for case in json.load(open(sys.argv[1])):
        before = peak()
        wrong, outcome = [], "read"
        try:
            options = {"storage_options": case["options"]} if case.get("options") else {}
            with SQLiteStore(case["target"], read_only=True, **options) as store:
                for key, digest in case["expected"].items():
                    value = store.get_sync(key)
                    got = None if value is None else hashlib.sha256(value.to_bytes()).hexdigest()
                    if got != digest:
                        wrong.append(key)
        except (errors.ZarrDBError, OSError) as exc:
            outcome = "refused: " + type(exc).__name__
        print(json.dumps({"case": case["name"], "outcome": outcome, "wrong": wrong,
                          "growth": peak() - before}), flush=True)
    """
)


def _digests(entries: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in entries.items()}


def _with_count(path: Path, pages: int, trusted: bool) -> None:
    data = bytearray(path.read_bytes()[:100])
    data[28:32] = pages.to_bytes(4, "big")
    if not trusted:
        data[92:96] = (int.from_bytes(data[24:28], "big") + 1).to_bytes(4, "big")
    with open(path, "r+b") as f:
        f.write(bytes(data))


def _planted_wal(path: Path, into: Path) -> None:
    """A log of another copy of `path` (made before any change of its size) in which the root
    group's zarr.json says something else."""
    other = path.parent / f"other-{path.name}"
    planted = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {"x": 1}})
    make_planted_log(path, other, into, "UPDATE zarr SET v = ? WHERE k = 'zarr.json'",
                     (planted.encode(),))
    other.unlink()


SUFFIX = {"-wal of another copy": "-wal", "empty -wal": "-wal", "junk -shm": "-shm",
          "empty -journal": "-journal", "junk -journal": "-journal",
          "-journal of holes": "-journal"}  # fmt: skip

# What each part of a case may be (test_cli_fuzz.py draws from these too).
CHOICES = {
    "base": ["sound", "bomb"],
    "size": ["as is", "sparse, header says", "sparse, count ignored", "padded", "cut"],
    "sidecar": [None, "-wal of another copy", "empty -wal", "junk -shm", "empty -journal",
                "junk -journal", "-journal of holes"],
    "owner": ["mine", "nobody"] if IS_ROOT else ["mine"],
    "mode": [0o600, 0o644, 0o664, 0o666],
    "kind": ["file", "file", "file", "fifo", "link"],
    "served": [None, None, "as is", "claims 1 TiB"],
    # The header's write and read versions (bytes 18 and 19; the file is in rollback mode):
    # SQLite opens the file in rollback mode at any read version below 2 (and reads a log
    # beside it), only reads it at a write version above 2.
    "versions": ["as is", "as is", "write 2", "read 0", "both 0", "write 3"],
}  # fmt: skip
VERSIONS = {"write 2": (2, 1), "read 0": (1, 0), "both 0": (0, 0), "write 3": (3, 1)}
case = st.fixed_dictionaries({name: st.sampled_from(values) for name, values in CHOICES.items()})


def _build(folder: Path, n: int, spec: dict) -> dict:
    """Make the file (and what is beside it) of one case; the case for the child."""
    path = folder / f"case{n}.zarrdb"
    (bomb_file if spec["base"] == "bomb" else sound_file)(path)
    side = spec["sidecar"]
    if side is not None and spec["served"] is None:
        target = Path(f"{path}{SUFFIX[side]}")
        if spec["kind"] == "fifo":
            os.mkfifo(target)
        elif spec["kind"] == "link":
            os.symlink(folder / "nowhere", target)
        else:
            if side == "-wal of another copy":
                _planted_wal(path, target)
            elif side.startswith("empty") or side == "-journal of holes":
                target.write_bytes(b"")  # (the one of holes is made as long as the file below)
            else:
                target.write_bytes(os.urandom(4096))
            os.chmod(target, spec["mode"])
            if spec["owner"] == "nobody":
                os.chown(target, 65534, 65534)
    if spec.get("versions", "as is") != "as is":
        with open(path, "r+b") as f:
            f.seek(18)
            f.write(bytes(VERSIONS[spec["versions"]]))
    size = path.stat().st_size
    if spec["size"].startswith("sparse"):
        _with_count(path, TIB // PAGE, trusted=spec["size"].endswith("says"))
        os.truncate(path, TIB)
    elif spec["size"] == "padded":
        os.truncate(path, size + PAGE)
    elif spec["size"] == "cut":
        os.truncate(path, size - PAGE)
    if side == "-journal of holes" and spec["served"] is None and spec["kind"] == "file":
        os.truncate(f"{path}-journal", path.stat().st_size)  # no data, the file's length
    expected = _digests(_entries())
    return {"name": f"{n}: {spec}", "target": str(path), "expected": expected,
            "served": spec["served"]}  # fmt: skip


def _run(cases: list[dict], folder: Path) -> list[dict]:
    listing = folder / "cases.json"
    listing.write_text(json.dumps(cases))
    try:
        out = subprocess.run(
            [PYTHON, "-c", CHILD, str(listing)], capture_output=True, text=True, timeout=90,
            env=child_env(),
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        done = (exc.stdout or b"").decode(errors="replace").strip().splitlines()
        raise AssertionError(f"a batch hung after {len(done)} cases: {cases[len(done)]['name']}")
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0 and len(lines) == len(cases), (
        f"the child ended with {out.returncode} after {len(lines)} of {len(cases)} cases "
        f"(next: {cases[len(lines)]['name'] if len(lines) < len(cases) else '-'}):\n"
        f"{out.stderr[-3000:]}"
    )
    return lines


@pytest.mark.filterwarnings("ignore")
@generated(EXAMPLES)
@given(st.lists(case, min_size=BATCH, max_size=BATCH))
def test_every_environment_is_refused_or_read_as_the_files_own(specs):
    _check_batch(specs)


# A log of another copy of the file (this user's, of the file's mode) beside each header SQLite
# opens in rollback mode, in every layout of the rest: the case the rule on logs is for, which
# the mix above draws about once in 90.
logged = st.fixed_dictionaries({
    "base": st.sampled_from(CHOICES["base"]),
    "size": st.sampled_from(["as is", "padded", "cut"]),
    "sidecar": st.just("-wal of another copy"),
    "owner": st.just("mine"),
    "mode": st.sampled_from([0o600, 0o644]),
    "kind": st.just("file"),
    "served": st.none(),
    "versions": st.sampled_from(CHOICES["versions"]),
})  # fmt: skip


@pytest.mark.filterwarnings("ignore")
@generated(max(1, EXAMPLES // 2))
@given(st.lists(logged, min_size=BATCH, max_size=BATCH))
def test_a_log_beside_every_header_is_refused_or_read_as_the_files_own(specs):
    _check_batch(specs)


def _check_batch(specs: list[dict]) -> None:
    with tempfile.TemporaryDirectory(prefix="zarrdb-envfuzz-") as name:
        folder = Path(name)
        cases = [_build(folder, n, spec) for n, spec in enumerate(specs)]
        servers = []
        try:
            for c in cases:
                if c["served"] is not None:
                    with open(c["target"], "rb") as f:
                        data = f.read(1 << 20)  # the whole file, or a sparse one's start
                    huge = TIB if c["served"] == "claims 1 TiB" else len(data)
                    server = HostileServer(data, "claim_size", huge=huge).__enter__()
                    servers.append(server)
                    c["target"] = server.url()
                    c["options"] = {"allow_http": True, "retry_config": {"max_retries": 0}}
            results = _run(cases, folder)
        finally:
            for server in servers:
                server.__exit__(None, None, None)
    bad = [r for r in results if r["wrong"] or over_peak(r["growth"], PEAK_GROWTH)]
    assert not bad, "\n".join(
        f"{r['case']}: {r['outcome']}, not the file's own: {r['wrong']}, peak +{r['growth']:,}"
        for r in bad
    )
