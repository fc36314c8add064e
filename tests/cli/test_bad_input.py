"""Bad input: one clear line on stderr naming the problem, exit code 2, no traceback, and
nothing written (inputs unchanged byte for byte, no output created)."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from .helpers import assert_bad_input, fingerprint, run, run_many


@pytest.fixture
def bad_files(tmp_path, sample_dir, sample_zip):
    """Paths that are not .zarrdb files, by what they are."""
    text = tmp_path / "notes.zarrdb"
    text.write_text("not a database\n")
    empty = tmp_path / "empty.zarrdb"
    empty.touch()
    other = tmp_path / "other.zarrdb"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE people(name TEXT)")
    con.commit()
    con.close()
    directory = tmp_path / "dir.zarr"
    shutil.copytree(sample_dir, directory)
    zipped = tmp_path / "data.zip"
    shutil.copy(sample_zip, zipped)
    return {
        "missing": (tmp_path / "missing.zarrdb", "no such file"),
        "directory": (directory, "is a directory"),
        "text": (text, "is not a .zarrdb file"),
        "empty": (empty, "is an empty file"),
        "other sqlite": (other, "without the SQLiteStore tables"),
        "zip": (zipped, "is not a .zarrdb file"),
    }


def _zarrdb_only_commands(path, out):
    """The commands that work on .zarrdb files only."""
    return {
        "check": ["check", path],
        "mv": ["mv", path, "/a", "/b"],
        "snapshot": ["snapshot", path, out],
        "vacuum": ["vacuum", path],
    }


def _any_store_commands(path, out):
    """The commands that take a .zarrdb, a .zip, a directory or a URL."""
    return {"info": ["info", path], "tree": ["tree", path], "copy": ["copy", path, out]}


def test_files_that_are_not_zarrdb(bad_files, tmp_path):
    """Each kind of bad file, through a real process."""
    out = tmp_path / "out.zarrdb"
    cases = [
        (f"info on {kind}", ["info", bad_files[kind][0]], (bad_files[kind][0].name, words))
        for kind, words in (("missing", "no such file"), ("text", "neither a .zarrdb"))
    ]
    cases += [
        (
            f"check on {kind}",
            ["check", bad_files[kind][0]],
            (bad_files[kind][0].name, bad_files[kind][1]),
        )
        for kind in ("directory", "zip")
    ]
    cases += [
        (
            "mv on empty",
            ["mv", bad_files["empty"][0], "/a", "/b"],
            ("empty.zarrdb", "is an empty file"),
        ),
        (
            "vacuum on other",
            ["vacuum", bad_files["other sqlite"][0]],
            ("other.zarrdb", "SQLiteStore tables"),
        ),
        (
            "copy from text",
            ["copy", bad_files["text"][0], out],
            ("notes.zarrdb", "neither a .zarrdb"),
        ),
    ]
    before = {kind: fingerprint(path) for kind, (path, _) in bad_files.items()}
    for (label, _, words), proc in zip(cases, run_many([argv for _, argv, _ in cases])):
        try:
            assert_bad_input(proc, *words)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
    assert {kind: fingerprint(path) for kind, (path, _) in bad_files.items()} == before
    assert not out.exists()


def test_every_command_on_every_bad_file(bad_files, tmp_path, capsys):
    """The whole matrix, in-process (the same main() the process runs; quicker)."""
    from zarrdb import cli

    out = tmp_path / "out.zarrdb"
    before = {kind: fingerprint(path) for kind, (path, _) in bad_files.items()}
    for kind, (path, words) in bad_files.items():
        commands = {name: (argv, words) for name, argv in _zarrdb_only_commands(path, out).items()}
        if kind in ("missing", "text", "empty", "other sqlite"):
            # Stores of any kind: a file that is none of them is refused by its content.
            store_words = "neither a .zarrdb" if kind in ("text", "empty") else words
            commands.update(
                (name, (argv, store_words)) for name, argv in _any_store_commands(path, out).items()
            )
        for name, (argv, expected) in commands.items():
            code = cli.main([str(a) for a in argv])
            captured = capsys.readouterr()
            lines = captured.err.strip().splitlines()
            label = f"{name} on {kind}"
            assert code == 2, f"{label}: exit {code}: {captured.err}"
            assert len(lines) == 1 and path.name in lines[0], f"{label}: {captured.err}"
            assert expected in lines[0], f"{label}: {lines[0]}"
    assert {kind: fingerprint(path) for kind, (path, _) in bad_files.items()} == before
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []


def test_locked_database(sample_copy, tmp_path):
    """Another process holds an exclusive lock: each command gives up after --busy-timeout."""
    # Read the file before taking the lock: closing any descriptor of the file in this process
    # would drop the lock (POSIX advisory locks belong to the process).
    before = fingerprint(sample_copy)
    con = sqlite3.connect(sample_copy, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    try:
        wait = ["--busy-timeout", "0.2"]
        out = tmp_path / "out.zarrdb"
        commands = [
            ["info", sample_copy, *wait],
            ["tree", sample_copy, *wait],
            ["check", sample_copy, *wait],
            ["mv", sample_copy, "/legacy", "/renamed", *wait],
            ["snapshot", sample_copy, out, *wait],
            ["vacuum", sample_copy, *wait],
            ["copy", sample_copy, tmp_path / "copy.zarr", *wait],
        ]
        results = run_many(commands)
    finally:
        con.rollback()
        con.close()
    for proc in results:
        assert_bad_input(proc, "locked", "--busy-timeout")
    assert fingerprint(sample_copy) == before
    assert not out.exists() and not (tmp_path / "copy.zarr").exists()
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []


def test_unknown_paths_and_existing_destinations(sample_file, sample_dir, sample_zip, tmp_path):
    existing_dir = tmp_path / "existing.zarr"
    shutil.copytree(sample_dir, existing_dir)
    existing_zip = tmp_path / "existing.zip"
    shutil.copy(sample_zip, existing_zip)
    watched = [sample_file, existing_dir, existing_zip]
    before = [fingerprint(p) for p in watched]
    cases = [
        (["tree", sample_file, "/no/such/group"], ("'/no/such/group'", "zarrdb tree")),
        (["mv", sample_file, "/nope", "/x"], ("'/nope'",)),
        (["copy", sample_file, tmp_path / "x.zarrdb", "--path", "/nope"], ("'/nope'",)),
        (["copy", sample_file, existing_dir], ("existing.zarr", "exists already", "--overwrite")),
        (["copy", sample_file, existing_zip], ("existing.zip", "exists already", "--overwrite")),
        (["copy", sample_file, sample_file], ("the source itself",)),
        (["snapshot", sample_file, existing_dir], ("is a directory",)),
        (["copy", sample_file, tmp_path / "no" / "such" / "x.zarrdb"], ("does not exist",)),
    ]
    for (_argv, words), proc in zip(cases, run_many([argv for argv, _ in cases])):
        assert_bad_input(proc, *words)
    assert [fingerprint(p) for p in watched] == before
    assert not (tmp_path / "x.zarrdb").exists()


def test_usage_errors_are_one_line(capsys):
    from zarrdb import cli

    assert_bad_input(run("frobnicate"), "invalid choice", "zarrdb --help")
    cases = [
        (["info"], ("required", "STORE")),
        (["copy", "a", "b", "--batch-bytes", "lots"], ("not a size",)),
        ([], ("required", "COMMAND")),
    ]
    for argv, words in cases:
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        assert exit_info.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and all(w in lines[0] for w in words), lines


def test_help_everywhere():
    """--help works for the command and each subcommand (in-process: it is argparse's)."""
    from zarrdb import cli

    main_help = run("--help")
    assert main_help.returncode == 0 and "exit codes" in main_help.stdout
    for command in cli.COMMANDS:
        if not command.available():
            continue
        parser = cli.build_parser([command.name])
        sub = parser._subparsers._group_actions[0].choices[command.name]
        text = sub.format_help()
        assert text.startswith(f"usage: zarrdb {command.name}"), text
        if command.shared_options:
            assert "--json" in text
