"""Bad files and bad input: each gives a specific zarrdb.errors exception (or the documented
builtin, FileNotFoundError for a missing file) whose message names the file, and leaves the
committed data intact. The files are committed fixtures (tests/data/bad/, made by
make_bad_files.py with the standard-library sqlite3; README.md there says what is wrong with
each) or made here with real file systems: permissions, an immutable file, a read-only mount, a
2 MiB tmpfs that fills up, a 2 GiB sparse file. Mutated (fuzzed) files: test_fuzz.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype

from zarrdb import SQLiteStore
from zarrdb.errors import (
    CantOpenError,
    DatabaseCorruptError,
    DiskFullError,
    FormatError,
    IncompatibleFlagError,
    InvalidKeyError,
    NotADatabaseError,
    NotAZarrDBError,
    ReadOnlyError,
    UnsupportedVersionError,
    ValueTooLargeError,
    ZarrDBError,
)

from .helpers import PYTHON, TESTS_DIR, child_env, opened, read_all, sha256_file, sidecars

FIXTURES = TESTS_DIR / "data" / "bad"
buf = default_buffer_prototype().buffer
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def fixture_copy(tmp_path: Path, stem: str) -> Path:
    path = tmp_path / f"{stem}.zarrdb"
    shutil.copyfile(FIXTURES / f"{stem}.zarrdb.fixture", path)
    return path


def use(path: Path, read_only: bool) -> dict[str, bytes]:
    """Open and read everything (the open happens at the first use)."""
    with opened(path, read_only=read_only) as store:
        return read_all(store)


def test_every_fixture_is_described():
    described = (FIXTURES / "README.md").read_text()
    names = sorted(p.name for p in FIXTURES.glob("*.fixture"))
    assert len(names) >= 12
    for name in names:
        assert f"`{name}`" in described, f"{name} has no line in tests/data/bad/README.md"


# --- files zarrdb must refuse ---------------------------------------------------------------------

REFUSED = [
    ("empty", True, NotAZarrDBError),
    ("random-bytes", True, NotADatabaseError),
    ("random-bytes", False, NotADatabaseError),
    ("truncated", True, DatabaseCorruptError),
    ("truncated", False, DatabaseCorruptError),
    ("foreign-app", True, NotAZarrDBError),
    ("foreign-app", False, NotAZarrDBError),
    ("wrong-application-id", False, FormatError),
    ("version-2.0", True, UnsupportedVersionError),
    ("version-2.0", False, UnsupportedVersionError),
    ("incompatible-flag", True, IncompatibleFlagError),
    ("incompatible-flag", False, IncompatibleFlagError),
]


@pytest.mark.parametrize(
    ("stem", "read_only", "expected"),
    REFUSED,
    ids=[f"{stem}-{'read' if ro else 'write'}" for stem, ro, _ in REFUSED],
)
def test_refused_with_a_specific_error_naming_the_file(tmp_path, stem, read_only, expected):
    path = fixture_copy(tmp_path, stem)
    before = sha256_file(path)
    with pytest.raises(expected) as excinfo:
        use(path, read_only)
    message = str(excinfo.value)
    assert str(path) in message, message
    assert "\n" not in message and "Traceback" not in message, message
    assert sha256_file(path) == before, "a refused open changed the file"
    assert sidecars(path) == []


def test_wrong_application_id_is_read_with_a_warning(tmp_path):
    path = fixture_copy(tmp_path, "wrong-application-id")
    with pytest.warns(UserWarning, match="application id") as record:
        contents = use(path, read_only=True)
    assert any(str(path) in str(w.message) for w in record)
    assert sorted(contents) == ["a/c/0", "a/c/1", "a/zarr.json", "zarr.json"]


def test_empty_file_is_initialised_for_writing(tmp_path):
    path = fixture_copy(tmp_path, "empty")
    with opened(path) as store:
        store.set_sync("k", buf.from_bytes(b"v"))
    assert use(path, read_only=True) == {"k": b"v"}


def test_directory_given_as_the_path(tmp_path):
    path = tmp_path / "folder.zarrdb"
    path.mkdir()
    for read_only in (True, False):
        with pytest.raises(CantOpenError) as excinfo:
            use(path, read_only)
        assert str(path) in str(excinfo.value) and "directory" in str(excinfo.value)
    assert list(path.iterdir()) == []


def test_missing_file_read_only(tmp_path):
    path = tmp_path / "missing.zarrdb"
    with pytest.raises(FileNotFoundError) as excinfo:
        use(path, read_only=True)
    assert str(path) in str(excinfo.value)
    assert list(tmp_path.iterdir()) == []


# --- files written by a foreign writer: NULLs and bytes that are not UTF-8 ------------------------------


def test_null_value(tmp_path):
    """'a/c/1' holds NULL (the spec: records must not contain NULL). Reading it must be an
    error naming the file and the key, not an empty value that looks like a stored one."""
    path = fixture_copy(tmp_path, "null-value")
    with opened(path, read_only=True) as store:
        assert store.get_sync("a/c/0").to_bytes() == (0).to_bytes(4, "little") + (1).to_bytes(
            4, "little"
        ) + (2).to_bytes(4, "little")
        with pytest.raises(ZarrDBError) as excinfo:
            value = store.get_sync("a/c/1")
            pytest.fail(f"a NULL value was read as {value and value.to_bytes()!r}")
        assert str(path) in str(excinfo.value) and "a/c/1" in str(excinfo.value)


def test_null_key(tmp_path):
    """One row has a NULL key. Listing must be an error naming the file, not a made-up key
    (the empty string, a valid key of its own, that then cannot be read)."""
    path = fixture_copy(tmp_path, "null-key")
    with opened(path, read_only=True) as store:
        assert store.get_sync("a/c/0") is not None  # committed data is intact
        with pytest.raises(ZarrDBError) as excinfo:
            keys = asyncio.run(_keys(store))
            pytest.fail(f"a NULL key was listed as {[k for k in keys if k in ('', None)]!r}")
        assert str(path) in str(excinfo.value)


async def _keys(store: SQLiteStore) -> list[str]:
    return [key async for key in store.list()]


def test_non_utf8_key(tmp_path):
    path = fixture_copy(tmp_path, "non-utf8-key")
    with opened(path, read_only=True) as store:
        # the hierarchy itself is intact and reads (its listing does not meet the bad key)
        np.testing.assert_array_equal(zarr.open_array(store, path="a", mode="r")[:], np.arange(6))
        with pytest.raises(InvalidKeyError) as excinfo:
            asyncio.run(_keys(store))
    message = str(excinfo.value)
    assert "UTF-8" in message and "\\xff" in message, message
    assert str(path) in message, f"the message does not name the file: {message}"


def test_non_utf8_informational_metadata(tmp_path):
    """`created_by` is informational (readers must not use it): a byte in it that is not UTF-8
    must not make the file unreadable as if a key were bad; it opens, or the refusal is a
    FormatError naming the file."""
    path = fixture_copy(tmp_path, "non-utf8-metadata")
    try:
        with opened(path, read_only=True) as store:
            data = zarr.open_array(store, path="a", mode="r")[:]
    except ZarrDBError as exc:
        assert isinstance(exc, FormatError) and str(path) in str(exc), (
            f"{type(exc).__name__}: {exc}"
        )
    else:
        np.testing.assert_array_equal(data, np.arange(6))


# --- permissions, immutable files, read-only mounts ----------------------------------------------------

PROBE = """
import json, sys
import zarr
from zarrdb import SQLiteStore, errors
from zarr.core.buffer import default_buffer_prototype
path = sys.argv[1]
out = {}
def attempt(name, fn):
    try:
        out[name] = ["ok", repr(fn())[:100]]
    except Exception as exc:
        out[name] = [type(exc).__name__, str(exc), isinstance(exc, errors.ZarrDBError)]
def read(read_only):
    store = SQLiteStore(path, read_only=read_only)
    try:
        return zarr.open_array(store, path="a", mode="r")[:].tolist()
    finally:
        store.close()
def write_key():
    store = SQLiteStore(path)
    try:
        store.set_sync("new", default_buffer_prototype().buffer.from_bytes(b"x"))
    finally:
        store.close()
def write_zarr():
    store = SQLiteStore(path)
    try:
        zarr.open_array(store, path="a", mode="r+")[:] = 7
    finally:
        store.close()
attempt("read", lambda: read(True))
attempt("read, opened for writing", lambda: read(False))
attempt("set", write_key)
attempt("zarr write", write_zarr)
print(json.dumps(out))
"""

# Root ignores file permission bits through the capabilities CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH; without them (dropped from the bounding set with util-linux's setpriv)
# root meets the bits like anybody else.
SETPRIV = shutil.which("setpriv")
WITHOUT_DAC = [SETPRIV, "--bounding-set=-dac_override,-dac_read_search"] if SETPRIV else []


def probe(path: Path, prefix: list[str] | None = None) -> dict:
    out = subprocess.run(
        [*(prefix or []), PYTHON, "-c", PROBE, str(path)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def permission_prefix() -> list[str]:
    if not IS_ROOT:
        return []
    if not SETPRIV:
        pytest.skip(
            "running as root, which ignores permission bits, and setpriv (util-linux) "
            "is not installed to drop CAP_DAC_OVERRIDE"
        )
    check = subprocess.run([*WITHOUT_DAC, "true"], capture_output=True)
    if check.returncode != 0:
        pytest.skip(
            f"running as root and setpriv cannot drop CAP_DAC_OVERRIDE here: {check.stderr!r}"
        )
    return WITHOUT_DAC


def test_file_without_read_permission(tmp_path):
    path = fixture_copy(tmp_path, "valid")
    before = sha256_file(path)
    prefix = permission_prefix()
    path.chmod(0)
    try:
        out = probe(path, prefix)
    finally:
        path.chmod(0o644)
    for name, outcome in out.items():
        assert outcome[0] == "CantOpenError", (name, outcome)
        assert str(path) in outcome[1], (name, outcome)
    assert sha256_file(path) == before
    assert sidecars(path) == []


def _read_only_outcomes(path: Path, out: dict) -> None:
    values = list(range(6))
    assert out["read"] == ["ok", repr(values)], out
    assert out["read, opened for writing"] == ["ok", repr(values)], out
    for name in ("set", "zarr write"):
        assert out[name][0] == "ReadOnlyError", (name, out[name])
        assert str(path) in out[name][1], (name, out[name])


def test_read_only_file_opened_for_writing(tmp_path):
    """Mode 0444 (as root: without CAP_DAC_OVERRIDE)."""
    path = fixture_copy(tmp_path, "valid")
    before = sha256_file(path)
    prefix = permission_prefix()
    path.chmod(0o444)
    try:
        out = probe(path, prefix)
    finally:
        path.chmod(0o644)
    _read_only_outcomes(path, out)
    assert sha256_file(path) == before
    assert issubclass(ReadOnlyError, PermissionError)


def test_immutable_file_opened_for_writing(tmp_path):
    """chattr +i: not even root may write it."""
    if not IS_ROOT or not shutil.which("chattr"):
        pytest.skip("chattr +i needs root (CAP_LINUX_IMMUTABLE) and e2fsprogs' chattr")
    path = fixture_copy(tmp_path, "valid")
    before = sha256_file(path)
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"this file system has no immutable flag: {made.stderr.strip()}")
    try:
        out = probe(path)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    _read_only_outcomes(path, out)
    assert sha256_file(path) == before


def test_file_on_a_read_only_mount_opened_for_writing(tmp_path):
    """A read-only bind mount of the folder: the file and its -wal/-shm cannot be written."""
    if not IS_ROOT or not shutil.which("mount"):
        pytest.skip("a read-only bind mount needs root")
    source, mount = tmp_path / "source", tmp_path / "mounted"
    source.mkdir()
    mount.mkdir()
    original = fixture_copy(source, "valid")
    before = sha256_file(original)
    made = subprocess.run(
        ["mount", "--bind", str(source), str(mount)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {made.stderr.strip()}")
    try:
        remount = subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(mount)], capture_output=True, text=True
        )
        if remount.returncode != 0:
            pytest.skip(f"cannot make the bind mount read-only: {remount.stderr.strip()}")
        out = probe(mount / original.name)
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    _read_only_outcomes(mount / original.name, out)
    assert sha256_file(original) == before
    assert sidecars(original) == []


# --- a value over the size limit --------------------------------------------------------------------


def test_value_over_the_size_limit_writes_nothing(tmp_path):
    """2 GiB + 1 bytes (a sparse file, memory-mapped and wrapped in a zarr Buffer without a
    copy): ValueTooLargeError before anything is written, whichever write call."""
    big = tmp_path / "sparse.bin"
    with open(big, "wb") as f:
        f.truncate(2**31 + 1)
    mapped = np.memmap(big, dtype=np.uint8, mode="r")
    huge = buf.from_array_like(mapped)
    assert len(huge) == 2**31 + 1
    path = tmp_path / "limit.zarrdb"
    with opened(path) as store:
        store.set_sync("before", buf.from_bytes(b"committed"))
        attempts = {
            "set_sync": lambda: store.set_sync("huge", huge),
            "set": lambda: asyncio.run(store.set("huge", huge)),
            "set_if_not_exists": lambda: asyncio.run(store.set_if_not_exists("huge", huge)),
            # one batch with a small value first: the whole batch is refused
            "_set_many": lambda: asyncio.run(
                store._set_many([("small", buf.from_bytes(b"s")), ("huge", huge)])
            ),
        }
        messages = {}
        for name, attempt in attempts.items():
            started = time.monotonic()
            with pytest.raises(ValueTooLargeError) as excinfo:
                attempt()
            assert time.monotonic() - started < 5, f"{name}: the value was read before refusing it"
            messages[name] = str(excinfo.value)
        assert read_all(store) == {"before": b"committed"}
        assert store.check() == []
    del mapped
    assert isinstance(excinfo.value, ValueError)
    for name, message in messages.items():
        assert "huge" in message and "2,147,483,649" in message, (name, message)
        assert str(path) in message, f"{name}: the message does not name the file: {message}"


# --- disk full ---------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs, mounted for this test."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    if not IS_ROOT:
        pytest.skip("mounting a small tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)


def test_disk_full_during_a_large_transaction(small_disk):
    """4 MB in one transaction on a 2 MiB disk: DiskFullError naming the file, the transaction
    rolled back, what was committed before intact, the store still usable, the file sound."""
    path = small_disk / "full.zarrdb"
    store = SQLiteStore(path, page_size=4096)
    try:
        arr = zarr.create_array(
            store, name="a", shape=(64,), chunks=(8,), dtype="int32", fill_value=0
        )
        arr[:] = np.arange(64)
        store.set_sync("before", buf.from_bytes(b"committed"))
        rng = np.random.default_rng(1)
        with pytest.raises(DiskFullError) as excinfo:
            with store.transaction():
                for i in range(40):  # incompressible values
                    store.set_sync(f"big/{i}", buf.from_bytes(rng.bytes(100_000)))
        message = str(excinfo.value)
        assert str(path) in message and "rolled back" in message, message
        assert isinstance(excinfo.value, OSError)
        assert store.get_sync("big/0") is None
        assert store.get_sync("before").to_bytes() == b"committed"
        np.testing.assert_array_equal(arr[:], np.arange(64))
        # the space of the rolled-back transaction is used again
        store.set_sync("after", buf.from_bytes(b"small"))
        arr[:8] = -1
        assert store.check() == []
    finally:
        store.close()
    assert sidecars(path) == []
    with opened(path, read_only=True) as reopened:
        assert reopened.check() == []
        contents = read_all(reopened)
        np.testing.assert_array_equal(
            zarr.open_array(reopened, path="a", mode="r")[:],
            np.r_[np.full(8, -1), np.arange(8, 64)],
        )
    assert contents["before"] == b"committed" and contents["after"] == b"small"
    assert not any(key.startswith("big/") for key in contents)


def test_disk_filled_by_zarr_writes_then_close(small_disk):
    """zarr writes 16 chunks of 256 KiB at once onto a 2 MiB disk. The group commit fails and
    is retried chunk by chunk, so some chunks are stored, each whole; the call raises
    DiskFullError naming the file. close() cannot checkpoint on the full disk: it may say so
    (DiskFullError naming the file), but must not claim a rollback: every write it reports
    about was committed, and is in the file when it is opened again."""
    path = small_disk / "filled.zarrdb"
    values = np.random.default_rng(2).standard_normal((1024, 1024), dtype=np.float32)
    store = SQLiteStore(path, page_size=4096)
    try:
        zarr.create_array(store, name="a", shape=(8,), chunks=(4,), dtype="int32", fill_value=0)[
            :
        ] = 5
        big = zarr.create_array(
            store,
            name="big",
            shape=(1024, 1024),
            chunks=(256, 256),
            dtype="float32",
            compressors=None,
        )
        with pytest.raises(DiskFullError) as excinfo:
            big[:] = values
        assert str(path) in str(excinfo.value)
    finally:
        try:
            store.close()
            close_error = None
        except DiskFullError as exc:
            close_error = exc
    with opened(path, read_only=True) as reopened:
        assert reopened.check() == []
        np.testing.assert_array_equal(
            zarr.open_array(reopened, path="a", mode="r")[:], np.full(8, 5)
        )
        stored = [key for key, _ in reopened.key_sizes("big/c/")]
        assert 0 < len(stored) < 16
        got = zarr.open_array(reopened, path="big", mode="r")[:]
    for key in stored:
        i, j = (int(x) for x in key.split("/")[-2:])
        block = (slice(256 * i, 256 * (i + 1)), slice(256 * j, 256 * (j + 1)))
        np.testing.assert_array_equal(got[block], values[block])
    if close_error is not None:
        message = str(close_error)
        assert str(path) in message, message
        assert "rolled back" not in message, (
            f"close() says a transaction was rolled back, but everything was committed: {message}"
        )



# --- a damaged chunk read through zarr's synchronous API ---------------------------------------


def _descriptors_on(path: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            out.append(target)
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_close_after_a_failed_zarr_read_leaves_no_descriptor(tmp_path):
    """When one chunk of arr[:] fails, zarr raises while its other reads of the same call go
    on in its own thread. close() waits for the read it meets under way (it used to raise
    ConcurrentUseError); a read that comes after it reopens the store, as any use after close
    does, and the next close() closes that too: no descriptor is left."""
    path = tmp_path / "junk-chunk.zarrdb"
    with opened(path) as store:
        arr = zarr.create_array(
            store,
            name="a",
            shape=(2000,),
            chunks=(1,),
            dtype="int32",
            compressors=zarr.codecs.GzipCodec(),
        )
        arr[:] = np.arange(2000)
        store.set_sync("a/c/0", buf.from_bytes(b"not gzip"))
    assert _descriptors_on(path) == []
    store = SQLiteStore(path, read_only=True)
    try:
        for _ in range(5):
            with pytest.raises(OSError):  # gzip.BadGzipFile
                zarr.open_array(store, path="a", mode="r")[:]
            store.close()  # while zarr's other reads of the call may be under way
        zarr.core.sync.sync(_zarr_tasks_done())  # zarr's remaining reads of the calls
        store.close()
        assert _descriptors_on(path) == []
    finally:
        # Whatever the outcome, no stray read of this test reaches the tests after it.
        zarr.core.sync.sync(_zarr_tasks_done())
        store.close()


async def _zarr_tasks_done() -> None:
    """Runs on zarr's event loop until every other task there has finished (30 s at most)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if not others:
            return
        await asyncio.wait(others, timeout=1)


# --- a key index out of order ------------------------------------------------------------------

LIST_DIR = """
import asyncio, sys
from zarrdb import SQLiteStore, errors
store = SQLiteStore(sys.argv[1], read_only=True)
async def children():
    return [name async for name in store.list_dir("")]
try:
    print("children", asyncio.run(children()))
except errors.ZarrDBError as exc:
    print("error", type(exc).__name__)
"""


def test_list_dir_over_a_key_index_out_of_order(tmp_path):
    """list_dir's skip-scan seeks past each sub-tree; in a damaged key index a seek can land
    on a key before the cursor: the listing stops with DatabaseCorruptError instead of going
    round for ever."""
    path = fixture_copy(tmp_path, "index-out-of-order")
    try:
        out = subprocess.run(
            [PYTHON, "-c", LIST_DIR, str(path)],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("list_dir('') did not end within 20 s")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(("children", "error")), out.stdout
