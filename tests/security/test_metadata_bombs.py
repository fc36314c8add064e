"""Metadata bombs (issue 23, item 11).

A metadata document is a claim, not a fact. A 300-byte `zarr.json` claiming shape [1e8] and
chunks [1] made `info` and `tree` build its chunk grid (835 MB); JSON nested 100k deep, an
integer of 5,000 digits, a key 2,000 levels deep and a chunk index of 5,000 digits ended
`info`, `tree` or `check` with a traceback. The commands now work from the keys that exist and
report each such document as a problem of the file: a warning line from `info` and `tree`
(exit 0, as for any unreadable metadata), a problem from `check` (exit 1)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli.helpers import run_here
from format.builders import hand_written_entries, make_store_file

# Runs one command in this interpreter and prints its exit code and peak resident memory (KiB).
PEAK = textwrap.dedent(
    """
    import resource, sys
    from zarrdb.cli import main
    code = main(sys.argv[1:])
    sys.stdout.flush()
    print("PEAK", code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
    """
)
# Memory a command may use beyond what it uses on a tiny file (the bombs asked for 800 MB+).
ALLOWANCE_KIB = 64 * 1024


def array_doc(shape, chunks=None, *, grid=None, data_type="uint8") -> bytes:
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": data_type,
        "chunk_grid": grid
        or {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def store_with(folder: Path, name: str, entries: dict[str, bytes]) -> Path:
    return make_store_file(folder / f"{name}.zarrdb", entries={**hand_written_entries(), **entries})


def peak(*args: object) -> tuple[int, int, str]:
    """(exit code, peak RSS in KiB, stdout + stderr) of `zarrdb ARGS` in a new process."""
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, *map(str, args)], capture_output=True, text=True, timeout=120
    )
    line = next((s for s in proc.stderr.splitlines() if s.startswith("PEAK ")), None)
    assert line is not None, proc.stdout + proc.stderr
    _, code, kib = line.split()
    return int(code), int(kib), proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict[str, int]:
    """Peak RSS of each command on the tiny hierarchy."""
    small = make_store_file(tmp_path_factory.mktemp("small") / "small.zarrdb")
    return {command: peak(command, small)[1] for command in ("info", "tree", "check")}


# --- grids claimed, not built ----------------------------------------------------------------


BIG_GRIDS = {
    "regular": array_doc([100_000_000], [1]),
    "rectilinear": array_doc(
        [100_000_000],
        grid={"name": "rectilinear", "configuration": {"chunk_shapes": [[[1, 100_000_000]]]}},
    ),
}


@pytest.mark.parametrize(
    "grid, command",
    [("regular", "info"), ("regular", "tree"), ("regular", "check"), ("rectilinear", "info")],
)
def test_a_claimed_grid_is_never_built(tmp_path, baseline, command, grid):
    assert len(BIG_GRIDS[grid]) < 400
    bomb = store_with(tmp_path, "bomb", {"big/zarr.json": BIG_GRIDS[grid]})
    code, kib, out = peak(command, bomb)
    assert code == 0, out
    assert kib < baseline[command] + ALLOWANCE_KIB, (
        f"{command} peaked at {kib // 1024} MiB (tiny file: {baseline[command] // 1024} MiB)"
    )


def test_a_v2_grid_is_never_built(tmp_path, baseline):
    zarray = {"zarr_format": 2, "shape": [100_000_000], "chunks": [1], "dtype": "|u1",
              "compressor": None, "fill_value": 0, "order": "C", "filters": None}  # fmt: skip
    bomb = store_with(tmp_path, "v2", {"big/.zarray": json.dumps(zarray).encode()})
    code, kib, out = peak("info", bomb)
    assert code == 0, out
    assert kib < baseline["info"] + ALLOWANCE_KIB, f"info peaked at {kib // 1024} MiB"


def test_a_grid_of_1e18_chunks(tmp_path, capsys):
    bomb = store_with(tmp_path, "huge", {"big/zarr.json": array_doc([10**18], [1])})
    code, out, err = run_here(capsys, "info", bomb)
    assert code == 0, out + err
    assert "0 / 1,000,000,000,000,000,000" in out
    code, out, err = run_here(capsys, "tree", bomb)
    assert code == 0 and "big (1000000000000000000,) uint8" in out, out + err
    code, out, err = run_here(capsys, "check", bomb)
    assert code == 0 and out.strip().endswith("ok"), out + err


def test_sizes_past_what_a_float_holds(tmp_path, capsys):
    # 64 dimensions of 2**62 elements: the byte count has 1,200 digits.
    bomb = store_with(tmp_path, "wide", {"big/zarr.json": array_doc([2**62] * 64, [2**62] * 64)})
    code, out, err = run_here(capsys, "info", bomb)
    assert code == 0, out + err
    assert "Traceback" not in err and "internal error" not in err


# --- documents that cannot be parsed safely ------------------------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000
HUGE_INT = b'{"zarr_format": 3, "node_type": "array", "shape": [1' + b"0" * 5000 + b"]}"
BAD_DOCS = {
    "deep": DEEP,
    "deep-attribute": b'{"zarr_format": 3, "node_type": "group", "attributes": {"x": '
    + DEEP
    + b"}}",
    "huge-int": HUGE_INT,
    "huge-dim": array_doc([10**30], [1]),
    "raw-bits": array_doc([4], [2], data_type="r" + "8" * 5000),
    "too-many-dims": array_doc([1] * 100, [1] * 100),
}


@pytest.mark.parametrize("doc", list(BAD_DOCS))
def test_unparseable_documents_are_problems_of_the_file(tmp_path, capsys, doc):
    bomb = store_with(tmp_path, doc, {"bad/zarr.json": BAD_DOCS[doc]})
    for command in ("info", "tree"):
        code, out, err = run_here(capsys, command, bomb)
        assert code == 0, f"{command}: {out}{err}"
        warnings = [line for line in err.splitlines() if line.startswith("zarrdb: warning: ")]
        assert any("bad/zarr.json" in line for line in warnings), f"{command}: {err}"
        assert "Traceback" not in err and "internal error" not in err
        assert max(map(len, (out + err).splitlines())) < 2000  # messages quote, not dump
    code, out, err = run_here(capsys, "check", bomb)
    assert code == 1, out + err
    assert any(line.startswith("bad/zarr.json") for line in out.splitlines()), out
    assert "internal error" not in err


def test_a_key_2000_levels_deep(tmp_path, capsys):
    deep = "/".join(["d"] * 2000)
    bomb = store_with(
        tmp_path, "deep", {f"{deep}/zarr.json": b'{"zarr_format": 3, "node_type": "group"}'}
    )
    for command in ("info", "tree"):
        code, out, err = run_here(capsys, command, bomb)
        assert code == 0, f"{command}: {out}{err}"
        assert "levels deep" in err, f"{command}: {err}"
        assert "internal error" not in err
    code, out, err = run_here(capsys, "tree", "--json", bomb)
    assert code == 0, err
    json.loads(out)
    code, out, err = run_here(capsys, "check", bomb)
    assert code in (0, 1) and "internal error" not in err, out + err


def test_a_chunk_index_of_5000_digits(tmp_path, capsys):
    bomb = store_with(tmp_path, "index", {"a/c/" + "9" * 5000: b"x"})
    code, out, err = run_here(capsys, "check", bomb)
    assert code == 1, out + err
    assert "internal error" not in err
    assert any("chunk index" in line and "too large" in line for line in out.splitlines()), out
