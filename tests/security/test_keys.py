"""Keys that climb out of their hierarchy (issue 23, item 2).

A file's `zarr` table can hold any text as a key. `g/../../x` or `../x` exported to a directory
would land outside it (enough `../` reaches `~/.bashrc`), stored in a zip they wait for whoever
unzips it, and a NUL or a Windows drive letter means something else again to a file system.
One validator (`zarrdb._format.key_problem`) decides; the store refuses such keys on every write,
`copy` refuses a source holding one before it writes anything (exit 2, naming the key), and
`check` reports each as an unsafe key (exit 1)."""

from __future__ import annotations

import asyncio
import os
import zipfile
from pathlib import Path

import pytest
from zarr.core.buffer import default_buffer_prototype

from cli.helpers import run, run_here
from format.builders import hand_written_entries, make_store_file
from zarrdb import SQLiteStore, _format, errors

HOSTILE = ["../x", "g/../../x", "a/./b", "a\x00b"]
IDS = ["dotdot", "climbs", "dot", "nul"]


def evil_file(folder: Path, key: str) -> Path:
    """A valid SQLiteStore file with the tiny hierarchy plus one value at `key`."""
    entries = {**hand_written_entries(), key: b"pwned"}
    return make_store_file(folder / "evil.zarrdb", entries=entries)


def tree_of(folder: Path) -> list[str]:
    """Every path below `folder`, relative to it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --- the validator ----------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["store", "posix", "windows"])
@pytest.mark.parametrize(
    "key", ["..", ".", "../x", "a/..", "g/../../x", "a/./b", "a\x00b", "a//b", "/a", "a/"]
)
def test_every_flavour_refuses_climbing_and_empty_segments(key, flavour):
    assert _format.key_problem(key, flavour)
    if flavour == "store":
        with pytest.raises(errors.InvalidKeyError, match="invalid key"):
            _format.check_key(key)


@pytest.mark.parametrize("flavour", ["store", "posix", "windows"])
@pytest.mark.parametrize("key", ["zarr.json", "a/c/0/1", "a/0.1", "a/..b/.c", "é/日本", "a b/c"])
def test_ordinary_keys_pass(key, flavour):
    assert _format.key_problem(key, flavour) is None


@pytest.mark.parametrize("key", ["...", ".. /x", "a/... /x", "g/.. ", "a.", "a /b", "x/c/0."])
def test_windows_refuses_segments_it_would_trim(key):
    """Windows drops the trailing dots and spaces of a name as it opens it: '.. ' would be
    '..' (out of the folder), 'a.' the file 'a'. Such keys are fine elsewhere."""
    assert "Windows drops" in _format.key_problem(key, "windows")
    assert _format.key_problem(key, "posix") is None
    assert _format.key_problem(key, "store") is None


@pytest.mark.parametrize("key", ["a\\b", "..\\x", "C:", "a/C:/b", "d:evil", "g/z:x"])
def test_windows_refuses_backslash_and_drive_letters(key):
    # Written for Windows, tested on any system: only the "windows" flavour refuses these.
    assert "Windows" in _format.key_problem(key, "windows")
    assert _format.key_problem(key, "posix") is None
    assert _format.key_problem(key, "store") is None


def test_the_empty_key_is_a_valid_key_but_names_no_file():
    assert _format.key_problem("", "store") is None  # the spec: "The empty string is a valid key"
    assert _format.key_problem("", "posix")
    assert _format.key_problem("", "windows")


# --- the store --------------------------------------------------------------------------------


def _buf(data: bytes):
    return default_buffer_prototype().buffer.from_bytes(data)


@pytest.mark.parametrize("key", HOSTILE, ids=IDS)
def test_store_refuses_unsafe_keys_on_every_write_and_delete(tmp_path, key):
    path = tmp_path / "s.zarrdb"

    async def attempt() -> None:
        store = await SQLiteStore.open(path)
        try:
            await store.set("ok", _buf(b"fine"))
            with pytest.raises(errors.InvalidKeyError, match="invalid key"):
                await store.set(key, _buf(b"bad"))
            with pytest.raises(errors.InvalidKeyError):
                await store.set_if_not_exists(key, _buf(b"bad"))
            with pytest.raises(errors.InvalidKeyError):  # refused before anything is queued
                await store.set_many([("fine/1", _buf(b"1")), (key, _buf(b"bad"))])
            with pytest.raises(errors.InvalidKeyError):
                store.set_sync(key, _buf(b"bad"))
            # deleting checks the key as writing it does
            with pytest.raises(errors.InvalidKeyError, match="invalid key"):
                await store.delete(key)
            with pytest.raises(errors.InvalidKeyError):
                store.delete_sync(key)
            assert [k async for k in store.list()] == ["ok"]
        finally:
            store.close()

    asyncio.run(attempt())


def test_move_refuses_a_climbing_destination(tmp_path):
    path = make_store_file(tmp_path / "m.zarrdb")
    with SQLiteStore(path) as store:
        with pytest.raises(errors.InvalidKeyError):
            store.rename("a", "b/../../c")
    with SQLiteStore(path, read_only=True) as store:
        assert sorted(k for k, _ in store.key_sizes()) == sorted(hand_written_entries())


# --- zarrdb copy ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", HOSTILE, ids=IDS)
def test_copy_to_a_directory_refuses_and_writes_nothing(tmp_path, capsys, key):
    evil = evil_file(tmp_path, key)
    out = tmp_path / "out"
    out.mkdir()
    code, stdout, stderr = run_here(capsys, "copy", evil, out / "sub")
    assert code == 2, stdout + stderr
    assert repr(key) in stderr and "nothing was written" in stderr, stderr
    assert tree_of(out) == []
    assert tree_of(tmp_path) == ["evil.zarrdb", "out"]


@pytest.mark.parametrize("key", HOSTILE, ids=IDS)
def test_copy_to_a_zip_refuses_and_writes_nothing(tmp_path, capsys, key):
    evil = evil_file(tmp_path, key)
    code, stdout, stderr = run_here(capsys, "copy", evil, tmp_path / "out.zip")
    assert code == 2, stdout + stderr
    assert repr(key) in stderr, stderr
    assert tree_of(tmp_path) == ["evil.zarrdb"]


@pytest.mark.parametrize("key", HOSTILE, ids=IDS)
def test_copy_to_a_zarrdb_refuses_and_writes_nothing(tmp_path, capsys, key):
    evil = evil_file(tmp_path, key)
    code, stdout, stderr = run_here(capsys, "copy", evil, tmp_path / "out.zarrdb")
    assert code == 2, stdout + stderr
    assert repr(key) in stderr, stderr
    assert tree_of(tmp_path) == ["evil.zarrdb"]


def test_copy_into_an_existing_store_refuses_before_writing(tmp_path, capsys):
    evil = evil_file(tmp_path, "g/../../x")
    dest = make_store_file(tmp_path / "dest.zarrdb")
    before = dest.read_bytes()
    code, _, stderr = run_here(capsys, "copy", evil, dest, "--overwrite")
    assert code == 2, stderr
    assert dest.read_bytes() == before


def test_a_zip_is_written_for_windows_too(tmp_path, capsys):
    # A zip is unzipped anywhere: a backslash there separates folders on Windows.
    evil = evil_file(tmp_path, "a\\..\\..\\x")
    code, _, stderr = run_here(capsys, "copy", evil, tmp_path / "out.zip")
    assert code == 2, stderr
    assert "'a\\\\..\\\\..\\\\x'" in stderr and "Windows" in stderr, stderr
    assert not (tmp_path / "out.zip").exists()


def test_copy_from_a_zip_holding_a_climbing_name(tmp_path, capsys):
    source = tmp_path / "evil.zip"
    with zipfile.ZipFile(source, "w") as zf:
        for key, value in hand_written_entries().items():
            zf.writestr(key, value)
        zf.writestr("../x", b"pwned")
    out = tmp_path / "out"
    out.mkdir()
    code, _, stderr = run_here(capsys, "copy", source, out / "sub")
    assert code == 2, stderr
    assert "'../x'" in stderr
    assert tree_of(out) == []


def test_dest_path_may_not_climb(tmp_path, capsys):
    source = make_store_file(tmp_path / "good.zarrdb")
    out = tmp_path / "out"
    out.mkdir()
    code, _, stderr = run_here(capsys, "copy", source, out / "sub", "--dest-path", "../../up")
    assert code == 2, stderr
    assert tree_of(out) == [] and not (tmp_path / "up").exists()


def test_copy_in_a_new_process_exits_2_naming_the_key(tmp_path):
    evil = evil_file(tmp_path, "g/../../x")
    out = tmp_path / "out"
    out.mkdir()
    proc = run("copy", evil, out / "sub", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "'g/../../x'" in proc.stderr, proc.stderr
    assert tree_of(out) == [] and not os.path.exists(tmp_path / "x")


# --- zarrdb check -----------------------------------------------------------------------------


@pytest.mark.parametrize("key", HOSTILE, ids=IDS)
def test_check_reports_an_unsafe_key(tmp_path, capsys, key):
    evil = evil_file(tmp_path, key)
    code, stdout, stderr = run_here(capsys, "check", evil)
    assert code == 1, stdout + stderr
    lines = [line for line in stdout.splitlines() if "unsafe key" in line]
    assert len(lines) == 1 and repr(key) in lines[0], stdout
    # said once, as what it is (not also as a stray or a bad chunk key)
    assert sum(repr(key) in line for line in stdout.splitlines()) == 1, stdout


def test_check_quick_reports_an_unsafe_key(tmp_path, capsys):
    evil = evil_file(tmp_path, "../x")
    code, stdout, _ = run_here(capsys, "check", "--quick", evil)
    assert code == 1 and "key '../x': unsafe key" in stdout, stdout
