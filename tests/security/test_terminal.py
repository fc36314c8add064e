"""Terminal escapes (issue 23, item 8).

Keys, node names, dtype and codec names, `created_by` and the messages about them come from the
file; printed raw, an escape sequence in them sets the terminal's title (OSC 0), erases the
screen (CSI 2J), blinks, or plants a hyperlink (OSC 8), and a newline forges a line of output.
Every human-readable output escapes control and format characters as Python does (`\\x1b`,
`\\n`); JSON output is escaped by JSON itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.helpers import run, run_here
from format.builders import hand_written_entries, make_store_file

TITLE = "\x1b]0;pwned\x07"
ERASE = "\x1b[2J"
BLINK = "\x1b[5m"
LINK = "\x1b]8;;mailto:x@evil.example\x1b\\click me\x1b]8;;\x1b\\"
CSI_C1 = "\x9b2J"  # CSI as one C1 character
BIDI = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: reverses what follows on screen
FORGED = "\nFORGED zarrdb: ok"
# What must never reach a terminal from the file.
RAW = ("\x1b", "\x07", "\x9b", BIDI)


def _array(dtype: str = "int32", codec: str = "bytes") -> bytes:
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [6],
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": codec}],
    }
    return json.dumps(doc).encode()


GROUP = b'{"zarr_format": 3, "node_type": "group"}'


@pytest.fixture
def hostile(tmp_path) -> Path:
    """A valid file whose names, types, codecs and created_by carry escapes and newlines."""
    entries = {
        **hand_written_entries(),
        f"g{TITLE}/zarr.json": GROUP,
        f"{ERASE}{BLINK}erase/zarr.json": GROUP,
        f"{LINK}/zarr.json": _array(),
        f"x{FORGED}/zarr.json": GROUP,
        f"r{BIDI}tl/zarr.json": GROUP,
        "typed/zarr.json": _array(dtype=f"int32{ERASE}{TITLE}", codec=f"zstd{TITLE}{FORGED}"),
        f"a/c/{CSI_C1}{TITLE}": b"stray",
        f"broken{ERASE}/zarr.json": b"{not json" + TITLE.encode(),
    }
    return make_store_file(
        tmp_path / "hostile.zarrdb",
        metadata={"created_by": f"me{TITLE}{ERASE}{BLINK}{LINK}{FORGED}"},
        entries=entries,
    )


def assert_harmless(out: str) -> None:
    for char in RAW:
        assert char not in out, f"{char!r} reached the output:\n{out!r}"
    lines = [line.lstrip("│├└─ ") for line in out.splitlines()]
    forged = [line for line in lines if line.startswith("FORGED")]
    assert not forged, f"a newline from the file forged a line:\n{out}"


def test_tree(hostile, capsys):
    code, out, err = run_here(capsys, "tree", hostile)
    assert code == 0, out + err
    assert_harmless(out + err)
    assert "g\\x1b]0;pwned\\x07 (group)" in out  # shown escaped, not dropped
    assert "x\\nFORGED zarrdb: ok (group)" in out
    assert "int32\\x1b[2J" in out


def test_info(hostile, capsys):
    code, out, err = run_here(capsys, "info", hostile)
    assert code == 0, out + err
    assert_harmless(out + err)
    assert "me\\x1b]0;pwned\\x07" in out
    assert "zstd\\x1b]0;pwned\\x07\\nFORGED" in out
    assert "broken\\x1b[2J/zarr.json is not valid JSON" in err  # the warning line


def test_check(hostile, capsys):
    code, out, err = run_here(capsys, "check", hostile)
    assert code == 1, out + err
    assert_harmless(out + err)
    assert "broken\\x1b[2J/zarr.json is not valid JSON" in out


def test_check_quick_in_a_new_process(hostile):
    proc = run("check", "--quick", hostile, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_harmless(proc.stdout + proc.stderr)


def test_copy_report_and_errors(hostile, tmp_path, capsys):
    out_file = tmp_path / f"out{TITLE}.zarrdb"
    code, out, err = run_here(capsys, "copy", hostile, out_file)
    assert code == 0, out + err
    assert_harmless(out + err)
    assert "out\\x1b]0;pwned\\x07.zarrdb" in out
    code, out, err = run_here(capsys, "copy", hostile, out_file)  # exists: refused, one line
    assert code == 2
    assert_harmless(out + err)
    assert err.count("\n") == 1


def test_error_printer_escapes_a_path(tmp_path, capsys):
    # A name from an unpacked archive, passed by a script: `for f in *; do zarrdb info "$f"`.
    code, out, err = run_here(capsys, "info", tmp_path / f"{ERASE}{FORGED}.zarrdb")
    assert code == 2
    assert_harmless(out + err)
    assert err.count("\n") == 1 and "\\x1b[2J" in err, err


def test_json_output_is_unchanged(hostile, capsys):
    code, out, _ = run_here(capsys, "info", "--json", hostile)
    assert code == 0
    assert_harmless(out)
    facts = json.loads(out)
    assert facts["file"]["created_by"] == f"me{TITLE}{ERASE}{BLINK}{LINK}{FORGED}"


@pytest.mark.parametrize("command", ["vacuum", "snapshot"])
def test_vacuum_and_snapshot_escape_the_file_name(tmp_path, capsys, command):
    """Their one-line reports name FILE (and DEST) as given (issue 37)."""
    path = make_store_file(tmp_path / f"in{TITLE}{ERASE}{FORGED}.zarrdb")
    extra = [tmp_path / f"copy{TITLE}.zarrdb"] if command == "snapshot" else []
    code, out, err = run_here(capsys, command, path, *extra)
    assert code == 0, out + err
    assert_harmless(out + err)
    assert "in\\x1b]0;pwned\\x07\\x1b[2J\\nFORGED zarrdb: ok.zarrdb" in out, out
    assert out.count("\n") == 1
