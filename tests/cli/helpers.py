"""Running `python -m zarrdb` in a subprocess, and looking at files without zarrdb."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CLI = [sys.executable, "-m", "zarrdb"]


def run(
    *args: object, timeout: float = 120, cwd: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess[str]:
    """`zarrdb ARGS...` in a new process (`env`: variables added to this process's)."""
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env=None if env is None else {**os.environ, **env},
    )  # fmt: skip


def run_here(capsys, *args: object) -> tuple[int, str, str]:
    """`zarrdb ARGS...` in this process (the same main() the command runs): (exit code,
    stdout, stderr). Quicker than a new process, and it reaches servers this process runs."""
    from zarrdb import cli

    try:
        code = cli.main([str(a) for a in args])
    except SystemExit as stop:  # argparse's own errors leave through SystemExit
        code = stop.code
    captured = capsys.readouterr()
    return int(code or 0), captured.out, captured.err


def run_many(
    commands: Sequence[Sequence[object]], timeout: float = 120
) -> list[subprocess.CompletedProcess[str]]:
    """Several independent `zarrdb` runs at once (each in its own process)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda argv: run(*argv, timeout=timeout), commands))


def run_json(*args: object) -> dict:
    proc = run(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )


def assert_bad_input(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit code 2, one line on stderr (naming `words`), no traceback; returns the line."""
    argv = " ".join(proc.args[3:])
    assert proc.returncode == 2, (
        f"zarrdb {argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    assert "Traceback" not in proc.stderr, f"zarrdb {argv}:\n{proc.stderr}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, f"zarrdb {argv}: stderr has {len(lines)} lines:\n{proc.stderr}"
    for word in words:
        assert word in lines[0], f"zarrdb {argv}: {word!r} not in {lines[0]!r}"
    return lines[0]


def fingerprint(path: Path) -> object:
    """What a path holds: the bytes of a file (and of its -wal/-journal), or every file of a
    directory; None if it does not exist."""
    path = Path(path)
    if path.is_dir():
        return {
            str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*"))
            if p.is_file()
        }
    if not path.exists():
        return None
    extra = {suffix: Path(str(path) + suffix).exists() for suffix in ("-wal", "-shm", "-journal")}
    return hashlib.sha256(path.read_bytes()).hexdigest(), os.path.getsize(path), extra


def sqlite_rows(path: Path) -> list[tuple[str, bytes]]:
    """Every (key, value) of a .zarrdb file, read with Python's own sqlite3."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT k, v FROM zarr ORDER BY k").fetchall()
    finally:
        con.close()


def directory_items(root: Path) -> dict[str, bytes]:
    """Every file of a directory store as key -> bytes."""
    root = Path(root)
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def journal_mode(path: Path) -> str:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        con.close()
