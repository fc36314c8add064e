"""Every argument of every subcommand is checked before any work starts: a bad value ends the
run with exit code 2 and one line on stderr naming the argument and what it accepts, never a
traceback, and nothing is written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .helpers import assert_bad_input, fingerprint, run_here, run_many


def bad_arguments(file, tmp_path):
    """(argv, words the error line must hold) for every subcommand."""
    out = tmp_path / "out.zarrdb"
    exists = tmp_path / "exists.zarrdb"
    exists.write_bytes(b"")
    folder = tmp_path / "folder"
    folder.mkdir()
    missing = tmp_path / "no" / "such"
    wait = "--busy-timeout"
    option = "--storage-option"
    url = "s3://bucket/data.zarrdb"  # refused before any request is made
    return [
        (["info"], ["STORE", "required"]),
        (["info", file, wait, "-1"], [wait, ">= 0"]),
        (["info", file, wait, "nan"], [wait, ">= 0"]),
        (["info", file, option, "region"], [option, "KEY=VALUE", "'region'"]),
        (["info", file, option, "region=eu-west-1"], [option, "URLs only", str(file)]),
        (["info", file, "--bogus"], ["unrecognized arguments", "--bogus"]),
        (["tree", file, "a//b"], ["'a//b'", "'//'"]),
        (["tree", file, wait, "soon"], [wait, "number of seconds"]),
        (["tree", url, option, "=eu-west-1"], [option, "KEY=VALUE"]),
        (["tree", url, option, "max_retries=few"], [option, "max_retries", "'few'"]),
        (["check", file, wait, "inf"], [wait, ">= 0"]),
        (["check", file, "extra"], ["unrecognized arguments", "extra"]),
        (["check", url, option, "colour=blue"], [option, "colour", url]),
        (["check", "--quick", "ftp://host/data.zarrdb"], ["ftp://host/data.zarrdb", "s3, "]),
        (["check"], ["FILE", "required"]),
        (["copy", file, out, "--batch-bytes", "0"], ["--batch-bytes", "positive", "64M"]),
        (["copy", file, out, "--batch-bytes", "lots"], ["--batch-bytes", "64M"]),
        (["copy", file, out, "--path", "a//b"], ["'a//b'", "'//'"]),
        (["copy", file, out, "--dest-path", "x//y"], ["'x//y'", "'//'"]),
        (["copy", file], ["DST", "required"]),
        (["copy", file, out, "--progress", "--no-progress"], ["--no-progress", "not allowed"]),
        (["copy", file, out, wait, "-2"], [wait, ">= 0"]),
        (["copy", file, out, option, "endpoint"], [option, "KEY=VALUE"]),
        (["copy", file, out, option, "region=x"], [option, "URLs only", "local paths"]),
        (["copy", file, "https://example.org/d.zarrdb"], ["example.org", "HTTP server is read-only"]),
        (["copy", file, url, "--path", "/a"], [url, "sends the whole file", "--path"]),
        (["mv", file, "/", "/x"], ["root"]),
        (["mv", file, "/a", "/a/b"], ["one contains the other"]),
        (["mv", file, "/a//b", "/c"], ["'/a//b'", "'//'"]),
        (["mv", file, "/a"], ["DST_PATH", "required"]),
        (["mv", url, "/a", "/b"], [url, "read-only", "'zarrdb mv' changes the file"]),
        (["snapshot", file, missing / "x.zarrdb"], ["does not exist"]),
        (["snapshot", file, exists], ["exists already", "--overwrite"]),
        (["snapshot", file, out, wait, "-5"], [wait, ">= 0"]),
        (["snapshot", file, url], [url, "read-only", "give a local path"]),
        (["snapshot", file, out, option, "x"], [option, "KEY=VALUE"]),
        (["vacuum", file, wait, ""], [wait, "number of seconds"]),
        (["vacuum"], ["FILE", "required"]),
        (["vacuum", "https://example.org/data.zarrdb"], ["read-only", "'zarrdb vacuum'"]),
        (["upgrade"], ["FILE", "required"]),
        (["upgrade", file, wait, "-1"], [wait, ">= 0"]),
        (["upgrade", file, "--to-v4"], ["unrecognized arguments", "--to-v4"]),
        (["upgrade", url], [url, "read-only", "'zarrdb upgrade' changes the file"]),
        (["view"], ["FILE", "required"]),
        (["view", file, "--port", "http"], ["--port", "0 to 65535", "'http'"]),
        (["view", file, "--port", "70000"], ["--port", "0 to 65535"]),
        (["view", missing / "x.zarrdb"], ["no such file"]),
        (["view", file, "--viewer-dir", folder], ["viewer page is not built", "npm run build"]),
        (["bench", "--size", "0"], ["--size", ">= 1"]),
        (["bench", "--size", "abc"], ["--size", ">= 1"]),
        (["bench", "--size", "256"], ["--size", "multiple of the large chunk edge 512"]),
        (["bench", "--chunks", "64"], ["--chunks", "64,512"]),
        (["bench", "--chunks", "a,b"], ["--chunks", "64,512"]),
        (["bench", "--chunks", "0,64"], ["--chunks", "64,512"]),
        (["bench", "--chunks", "512,64"], ["--chunks", "SMALL must be less than LARGE"]),
        (["bench", "--cube", "100,30"], ["--cube", "multiple of CHUNK"]),
        (["bench", "--cube", "big"], ["--cube", "EDGE,CHUNK"]),
        (["bench", "--stores", "foo"], ["--stores", "foo", "accepted: zarrdb", "local"]),
        (["bench", "--stores", ""], ["--stores", "accepted: zarrdb"]),
        (["bench", "--repeat", "0"], ["--repeat", ">= 1"]),
        (["bench", "--repeat", "-1"], ["--repeat", ">= 1"]),
        (["bench", "--plot", tmp_path / "chart.txt"], ["--plot", ".png or .svg or .pdf"]),
        (["bench", "--plot", missing / "chart.png"], ["--plot", "does not exist"]),
        (["bench", "--json", missing / "out.json"], ["--json", "does not exist"]),
        (["bench", "--markdown", folder], ["--markdown", "is a directory"]),
        (["bench", "--dir", exists], ["--dir", "not a directory"]),
        (["bench", "--frobnicate"], ["unrecognized arguments"]),
    ]


def test_bad_arguments_of_every_subcommand(sample_copy, tmp_path, capsys):
    """The whole table in-process (the same main() the command runs)."""
    from zarrdb import cli

    cases = bad_arguments(sample_copy, tmp_path)
    assert {argv[0] for argv, _ in cases} == {c.name for c in cli.COMMANDS if c.available()}
    before = fingerprint(sample_copy), sorted(p.name for p in tmp_path.iterdir())
    for argv, words in cases:
        label = "zarrdb " + " ".join(map(str, argv))
        code, out, err = run_here(capsys, *argv)
        assert code == 2, f"{label}: exit {code}\n{out}\n{err}"
        assert "Traceback" not in err and out == "", f"{label}: {out}{err}"
        lines = err.strip().splitlines()
        assert len(lines) == 1, f"{label}: {len(lines)} lines:\n{err}"
        for word in words:
            assert word in lines[0], f"{label}: {word!r} not in {lines[0]!r}"
    assert (fingerprint(sample_copy), sorted(p.name for p in tmp_path.iterdir())) == before


def test_bad_arguments_in_real_processes(sample_copy, tmp_path):
    """One bad argument of each subcommand through `python -m zarrdb` itself."""
    cases = list(
        {argv[0]: (argv, words) for argv, words in bad_arguments(sample_copy, tmp_path)}.values()
    )
    for (_, words), proc in zip(cases, run_many([argv for argv, _ in cases], timeout=60)):
        assert_bad_input(proc, *words)


def test_plot_without_matplotlib_fails_before_the_run(tmp_path):
    """--plot needs matplotlib: without it (hidden from this interpreter) the run stops at
    once, before any workload, with one line saying what to install."""
    hide = "import sys; sys.modules['matplotlib'] = None; from zarrdb.cli import main; "
    argv = ["bench", "--plot", str(tmp_path / "chart.png"), "--dir", str(tmp_path / "scratch")]
    proc = subprocess.run(
        [sys.executable, "-c", hide + f"sys.exit(main({argv!r}))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "zarrdb bench: error: argument --plot: needs matplotlib, which is not installed "
        "(pip install 'zarrdb[plot]')"
    ]
    assert proc.stdout == "" and not (tmp_path / "scratch").exists()


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "x"])
def test_busy_timeout_values(sample_copy, value, capsys):
    """In-process (the same main()): a bad --busy-timeout stops at the parser, exit code 2."""
    from zarrdb import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(["info", str(sample_copy), "--busy-timeout", value])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--busy-timeout" in lines[0], lines
