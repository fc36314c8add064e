"""The build: vendored SQLite unmodified, the version it reports, options, no exported symbols."""

import ast
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import zarrdb
from zarrdb import _core

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "vendor" / "sqlite3"

# The pinned amalgamation, as published upstream (not derived from the files in the tree).
PINNED_VERSION = "3.53.4"
PINNED_SOURCE_ID = (
    "2026-07-24 19:02:57 bf7c7f30031888f4e796e429ab3978879485813aaca6f641c7b33e4e09459bcc"
)
PINNED_SHA256 = {
    "sqlite3.c": "b1dd5d74ec7f29055a6684fa06fb3c2f6821c87dd38f9a458dfd2e8a1db28189",
    "sqlite3.h": "919e7f2e8ed1d8f56ac17b412b8971c76aa5d1a879752cc6058f75e7d5910e1d",
    "sqlite3ext.h": "ac9645e5c9ff0cf176efdd6e75cb5e98f46295d38e02db5c4d208826a39ab4be",
}

bundled_only = pytest.mark.skipif(
    not _core.BUNDLED_SQLITE, reason="built against the system SQLite (ZARRDB_SYSTEM_SQLITE=1)"
)
needs_source_tree = pytest.mark.skipif(
    not VENDOR.is_dir(), reason="vendor/ is not beside the tests (testing an installed wheel)"
)


@needs_source_tree
def test_vendored_files_match_their_recorded_and_pinned_checksums():
    recorded = {}
    for line in (VENDOR / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        recorded[name] = digest
    assert recorded == PINNED_SHA256
    for name, digest in PINNED_SHA256.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


@needs_source_tree
def test_vendored_version_file_and_licence():
    lines = (VENDOR / "VERSION").read_text().splitlines()
    assert lines[0] == PINNED_VERSION
    assert PINNED_SOURCE_ID in lines[1]
    licence = (VENDOR / "LICENSE.md").read_text()
    assert "public domain" in licence and "@appthreat/sqlite3" in licence


@bundled_only
def test_module_reports_the_vendored_sqlite():
    assert zarrdb.sqlite_version == PINNED_VERSION
    assert zarrdb.sqlite_source_id == PINNED_SOURCE_ID


def _setup_py_options():
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SQLITE_OPTIONS":
            return [tuple(elt.value for elt in item.elts) for item in node.value.elts]
    raise AssertionError("setup.py has no SQLITE_OPTIONS list")


@bundled_only
@needs_source_tree
def test_every_compile_option_in_setup_py_is_in_effect():
    in_effect = set(zarrdb.compile_options)
    for name, value in _setup_py_options():
        short = name.removeprefix("SQLITE_")
        # SQLite reports flag-like options without "=1", valued ones as NAME=VALUE.
        assert f"{short}={value}" in in_effect or (value == "1" and short in in_effect), name


@bundled_only
def test_required_options_in_effect():
    opts = set(zarrdb.compile_options)
    for required in (
        "THREADSAFE=2",
        "MAX_LENGTH=2147483647",
        "DQS=0",
        "DEFAULT_MEMSTATUS=0",
        "OMIT_DEPRECATED",
        "OMIT_SHARED_CACHE",
        "OMIT_LOAD_EXTENSION",
        "DEFAULT_WAL_SYNCHRONOUS=1",
    ):
        assert required in opts


API_NAMES = [
    "sqlite3_open_v2",
    "sqlite3_prepare_v3",
    "sqlite3_step",
    "sqlite3_blob_open",
    "sqlite3_libversion",
    "sqlite3_version",
    "sqlite3_temp_directory",
]


@bundled_only
def test_extension_exports_no_sqlite_symbol_to_the_dynamic_linker():
    # dlsym / GetProcAddress only see exported symbols: none of SQLite's may be among them.
    lib = ctypes.CDLL(_core.__file__)
    exported = [name for name in API_NAMES if hasattr(lib, name)]
    assert exported == []
    assert hasattr(lib, "PyInit__core")  # the lookup itself works


@bundled_only
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("nm") is None,
    reason="nm -D reads ELF dynamic symbol tables (Linux with binutils)",
)
def test_dynamic_symbol_table_has_no_sqlite3_symbol():
    out = subprocess.run(
        ["nm", "-D", "--defined-only", _core.__file__], check=True, capture_output=True, text=True
    ).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert "PyInit__core" in names
    assert [n for n in names if "sqlite3" in n.lower()] == []


@pytest.mark.skipif(
    os.environ.get("ZARRDB_TEST_VFS") != "1",
    reason="ZARRDB_TEST_VFS=1 marks a test build (scripts/dev.sh, scripts/memcheck.sh)",
)
def test_a_test_build_has_the_power_loss_simulator():
    # Otherwise the power-loss tests would skip where they are meant to run.
    assert _core._POWERLOSS_VFS


@pytest.mark.skipif(
    os.environ.get("ZARRDB_TEST_INSTALLED") != "1" or os.environ.get("ZARRDB_TEST_VFS") == "1",
    reason="ZARRDB_TEST_INSTALLED=1 (without ZARRDB_TEST_VFS=1) marks a run against a wheel",
)
def test_a_wheel_has_no_power_loss_simulator():
    assert _core._POWERLOSS_VFS is False
    with pytest.raises(NotImplementedError, match="ZARRDB_TEST_VFS=1"):
        _core._powerloss_enable(1)
    # None of the simulator's code is in the extension: not its VFS's name, nor (where the
    # function names stay, as on Linux) its functions.
    binary = Path(_core.__file__).read_bytes()
    assert b"zarrdb-powerloss" not in binary
    assert b"zplWrite" not in binary and b"zpl_power_off" not in binary


@pytest.mark.skipif(
    os.environ.get("ZARRDB_TEST_VFS") != "1",
    reason="ZARRDB_TEST_VFS=1 marks a test build (scripts/dev.sh, scripts/memcheck.sh)",
)
def test_a_test_build_has_the_pause_points(tmp_path):
    # Otherwise the schedule explorer would skip where it is meant to run. Armed, the points
    # of the Python layer and of the engine (its writer thread's too) call the hook.
    from zarr.core.buffer import cpu

    from zarrdb import SQLiteStore, _pause

    assert _core._PAUSE_POINTS
    seen = []
    _pause.arm(seen.append)
    try:
        with SQLiteStore(tmp_path / "p.zarrdb") as store:
            store.set_sync("k", cpu.Buffer.from_bytes(b"v"))
    finally:
        _pause.disarm()
    assert {"submit.queued", "writer.take", "writer.commit", "writer.committed"} <= set(seen)
    assert {"close", "connections.close", "writer.close"} <= set(seen)
    count = len(seen)
    with SQLiteStore(tmp_path / "q.zarrdb") as store:
        store.set_sync("k", cpu.Buffer.from_bytes(b"v"))
    assert len(seen) == count  # disarmed: nothing calls the hook


@pytest.mark.skipif(
    os.environ.get("ZARRDB_TEST_INSTALLED") != "1" or os.environ.get("ZARRDB_TEST_VFS") == "1",
    reason="ZARRDB_TEST_INSTALLED=1 (without ZARRDB_TEST_VFS=1) marks a run against a wheel",
)
def test_a_wheel_has_no_pause_points():
    from zarrdb import _pause

    assert _core._PAUSE_POINTS is False
    with pytest.raises(NotImplementedError, match="ZARRDB_TEST_VFS=1"):
        _pause.arm(print)
    assert _pause._hook is None
    # No point of the engine is compiled in: none of their names is in the extension.
    binary = Path(_core.__file__).read_bytes()
    for name in (b"writer.commit", b"submit.queued", b"txn.begin", b"writer.close"):
        assert name not in binary


@pytest.mark.skipif(
    os.environ.get("ZARRDB_TEST_VFS") != "1",
    reason="ZARRDB_TEST_VFS=1 marks a test build (scripts/dev.sh, scripts/memcheck.sh)",
)
def test_a_test_build_has_the_test_hooks(tmp_path):
    # Otherwise the engine's tests that use them would skip where they are meant to run.
    assert _core._TEST_HOOKS
    with _core.Database(tmp_path / "h.zarrdb") as db:
        db.execute("CREATE TABLE zarr (k TEXT PRIMARY KEY, v BLOB)")
        assert db.get_into("k", bytearray(1)) is None
        assert db.length_limit() > 0
        writer = _core.Writer(db)
        try:
            with writer.holding() as held:
                assert held is db
        finally:
            writer.close()


@pytest.mark.skipif(
    os.environ.get("ZARRDB_TEST_INSTALLED") != "1" or os.environ.get("ZARRDB_TEST_VFS") == "1",
    reason="ZARRDB_TEST_INSTALLED=1 (without ZARRDB_TEST_VFS=1) marks a run against a wheel",
)
def test_a_wheel_has_no_test_hooks(tmp_path):
    assert _core._TEST_HOOKS is False
    with _core.Database(tmp_path / "h.zarrdb") as db:
        db.execute("CREATE TABLE zarr (k TEXT PRIMARY KEY, v BLOB)")
        with pytest.raises(NotImplementedError, match="ZARRDB_TEST_VFS=1"):
            db.get_into("k", bytearray(1))
        with pytest.raises(NotImplementedError, match="ZARRDB_TEST_VFS=1"):
            db.length_limit()
        writer = _core.Writer(db)
        try:
            with pytest.raises(NotImplementedError, match="ZARRDB_TEST_VFS=1"):
                writer.holding()
        finally:
            writer.close()


def test_python_stdlib_sqlite3_is_a_separate_library():
    # Both SQLite libraries load side by side and keep their own versions.
    import sqlite3

    con = sqlite3.connect(":memory:")
    try:
        (std_version,) = con.execute("select sqlite_version()").fetchone()
    finally:
        con.close()
    assert std_version == sqlite3.sqlite_version
    if _core.BUNDLED_SQLITE and std_version != PINNED_VERSION:
        assert zarrdb.sqlite_version != std_version


def test_version_is_the_distribution_version():
    from importlib.metadata import version

    assert zarrdb.__version__ == version("zarrdb")
