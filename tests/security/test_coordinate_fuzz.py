"""A generator of hostile array metadata for xarray (issue 37, finding 5): files whose groups
hold dimension coordinates (1-D arrays named as their dimension, which xarray reads whole at
open to build its index) and data variables on them, with the shape, data type, chunk grid and
fill value of each drawn from values at and past their limits, no chunk or a junk chunk stored
(for strings: counts of items past what the chunk holds, compressed or not), in one group or
several (a tree opened with `open_datatree`, or one of its groups).

The property, for every file: `xr.open_dataset(path, engine="zarrdb")` (or `open_datatree`)
succeeds, or raises a zarrdb error or the clean exception of zarr or xarray refusing the
metadata (never MemoryError, RecursionError or SystemError, never a signal); within DEADLINE
seconds; and the process's peak resident memory grows by at most PEAK_GROWTH. The files are
built with the standard-library sqlite3, metadata written by hand, and opened in one child
process (_fuzz_child.py), whose address space is bounded, so that a claim of gigabytes fails
at once instead of filling the machine.

ZARRDB_COORD_FUZZ_CASES sets the number of files (default 40; 300 with -m slow) and
ZARRDB_COORD_FUZZ_SEED the seed (default: a new one, printed on failure).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numcodecs
import pytest

from format import builders
from reliability.helpers import PYTHON, child_env, over_peak, trials

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc for the peak, RLIMIT_AS"
)

CHILD = Path(__file__).with_name("_fuzz_child.py")
DEADLINE = 30.0  # seconds for one file
PEAK_GROWTH = 100_000_000
CAP = 256 * 1024 * 1024  # zarrdb.xarray_backend.MAX_COORDINATE_BYTES, from the docs
ITEMSIZE = {"float64": 8, "int8": 1, "bool": 1, "uint64": 8, "complex128": 16, "float16": 2,
            "string": 64}  # fmt: skip
FILL = {"float64": [0.0, "NaN", "Infinity", 1e308], "int8": [0, 7, -128, 300],
        "bool": [False, True, 0], "uint64": [0, 2**64 - 1, -1], "complex128": [[0.0, 0.0],
        ["NaN", 1.0]], "float16": [0.0, "NaN", 65504.0], "string": ["", "x" * 1000, 0]}  # fmt: skip
GROUPS = ("", "g1", "g1/g2")
ZSTD = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}


def _length(rng: random.Random, dtype: str) -> int:
    """A declared length: small, just past the cap, gigabytes, or past what any index takes
    (strings: small more often, so that their chunks are read)."""
    small = 15 if dtype == "string" else 5
    kind = rng.choices(["small", "past the cap", "gigabytes", "huge"], [small, 2, 2, 1])[0]
    if kind == "small":
        return rng.choice([0, 1, 10, 1000])
    if kind == "past the cap":
        return CAP // ITEMSIZE[dtype] + rng.choice([1, 1000])
    if kind == "gigabytes":
        return rng.choice([1 << 31, 125_000_000 * 8]) // ITEMSIZE[dtype]
    return rng.choice([1 << 40, 1 << 62, (1 << 63) - 1])


def _array(rng: random.Random, name: str, length: int, dtype: str) -> dict:
    chunk = rng.choice([1, max(length, 1), 1_000_000, 1 << 62])
    codecs = [{"name": "vlen-utf8"}] if dtype == "string" else [
        {"name": "bytes", "configuration": {"endian": "little"}}]  # fmt: skip
    if dtype == "string" and rng.random() < 0.5:
        codecs.append(ZSTD)  # a junk chunk then reaches the strings' decoder decompressed
    return {
        "zarr_format": 3, "node_type": "array", "shape": [length], "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": rng.choice(FILL[dtype]), "codecs": codecs, "attributes": {},
        "dimension_names": [name],
    }  # fmt: skip


def _junk_strings(rng: random.Random, array: dict) -> bytes:
    """A chunk for the array of strings `array`: random bytes, or a count at or past what its
    bytes and its chunk shape hold (numcodecs' vlen-utf8 makes an array of the count's objects
    before it reads on: 2^31 of them touched 15 GB), followed by a few items; compressed with
    zstd if the array's codecs say so."""
    values = array["chunk_grid"]["configuration"]["chunk_shape"][0]
    if rng.random() < 0.4:
        raw = rng.randbytes(rng.choice([3, 8, 4096]))
    else:
        count = rng.choice([(1 << 31) - 1, (1 << 32) - 1, 20_000_000, min(values + 1, 2**32 - 1)])
        items = rng.choice([0, 1, 3])
        raw = count.to_bytes(4, "little") + b"".join(
            len(s).to_bytes(4, "little") + s for s in [b"x" * rng.choice([0, 5])] * items
        )
    if ZSTD in array["codecs"]:
        raw = numcodecs.Zstd().encode(raw)
    return raw


def _case(rng: random.Random) -> tuple[dict[str, bytes], dict]:
    """(zarr table rows, how to open) of one hostile file."""
    rows = {"zarr.json": json.dumps({"zarr_format": 3, "node_type": "group"}).encode()}
    groups = GROUPS[: rng.choice([1, 1, 2, 3])]
    how = rng.choice(["dataset", "datatree", "datatree"] if len(groups) > 1 else ["dataset"])
    # Several groups each under the cap, over it together: what open_datatree reads at once.
    shared = rng.random() < 0.25 and how == "datatree"
    for group in groups:
        prefix = f"{group}/" if group else ""
        if group:
            rows[f"{group}/zarr.json"] = rows["zarr.json"]
        # Strings more often than the other types: their chunks have a decoder of their own.
        dtype = "string" if rng.random() < 0.25 else rng.choice(sorted(ITEMSIZE))
        name = rng.choice(["x", "time"])
        length = (CAP // 2 + 1000) // ITEMSIZE[dtype] if shared else _length(rng, dtype)
        coordinate = _array(rng, name, length, dtype)
        variable = _array(rng, name, length, "float64")
        rows[f"{prefix}{name}/zarr.json"] = json.dumps(coordinate).encode()
        rows[f"{prefix}v/zarr.json"] = json.dumps(variable).encode()
        if dtype == "string" and rng.random() < 0.7:
            rows[f"{prefix}{name}/c/0"] = _junk_strings(rng, coordinate)
        elif rng.random() < 0.3:
            rows[f"{prefix}{name}/c/0"] = rng.randbytes(rng.choice([0, 8, 4096]))
    opened = {"open": how}
    if how == "dataset" and len(groups) > 1:
        opened["group"] = rng.choice(groups[1:])
    return rows, opened


def build(folder: Path, n: int, rng: random.Random) -> dict:
    """One hostile file in `folder`, and the case for the child (its path, how to open it)."""
    rows, opened = _case(rng)
    path = builders.make_store_file(folder / f"coordinates-{n}.zarrdb", entries=rows)
    shapes = {k: json.loads(v).get("shape") for k, v in rows.items() if k.endswith("zarr.json")}
    return {"n": n, "path": str(path), **opened, "declared": {k: v for k, v in shapes.items() if v}}


def run_child(mode: str, cases: list[dict], deadline: float) -> tuple[list[dict], str | None]:
    """The results of `cases` run by _fuzz_child.py in `mode`; and, if the child ended early
    (a signal, a hang, an exit), what it said and on which case."""
    proc = subprocess.run(
        [PYTHON, str(CHILD), mode, str(deadline)],
        input="".join(json.dumps(case) + "\n" for case in cases), capture_output=True,
        text=True, env=child_env(MALLOC_ARENA_MAX="2"), timeout=deadline * len(cases) + 120,
    )  # fmt: skip
    results, current = [], None
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        result = json.loads(line)
        if "start" in result:
            current = cases[result["n"]]
        else:
            results.append(result)
            current = None
    if proc.returncode != 0 or len(results) != len(cases):
        where = f"on {json.dumps(current)[:600]}" if current else "between cases"
        return results, f"the child ended with {proc.returncode} {where}: {proc.stderr[-1500:]}"
    return results, None


def run_cases(folder: Path, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    cases = [build(folder, n, rng) for n in range(count)]
    return judged(
        cases, lambda case: f"({case['open']} {case.get('group') or ''}, declared {case['declared']})"
    )


def judged(cases: list[dict], describe: Callable[[dict], str]) -> list[str]:
    """Runs `cases` in the child (xarray mode); what broke the property, each case told by
    `describe`: a clean refusal or none, within DEADLINE and PEAK_GROWTH."""
    results, ended = run_child("xarray", cases, DEADLINE)
    problems = [ended] if ended else []
    for result in results:
        got, said = result["xarray"], describe(cases[result["n"]])
        if got["outcome"].startswith("raised"):
            problems.append(f"{got['outcome']} {said}")
        if over_peak(got["growth"], PEAK_GROWTH):
            problems.append(f"peak +{got['growth']:,} bytes, {got['outcome']} {said}")
        if got["seconds"] > DEADLINE:
            problems.append(f"{got['seconds']} s {said}")
    return problems


def test_declared_coordinates_never_take_memory_at_open(tmp_path):
    count = trials("ZARRDB_COORD_FUZZ_CASES", 40, 300, slow=False)
    seed = int(os.environ.get("ZARRDB_COORD_FUZZ_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:20])


@pytest.mark.slow
def test_declared_coordinates_never_take_memory_at_open_at_length(tmp_path):
    count = trials("ZARRDB_COORD_FUZZ_CASES", 40, 300, slow=True)
    seed = int(os.environ.get("ZARRDB_COORD_FUZZ_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:20])
