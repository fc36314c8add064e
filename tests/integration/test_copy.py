"""`zarrdb.copy` between real stores of every kind: a .zarrdb file, a directory, a zip file, an
.ozx, zarr's MemoryStore and an FsspecStore over fsspec's memory file system, given as store
objects or as what zarr takes for one. Each copy is read back with an independent reader
(Python's sqlite3, os, zipfile, the store's own dict) and compared key by key, byte for byte."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
import zipfile
from pathlib import Path

import fsspec
import numpy as np
import pytest
import zarr
from fsspec.callbacks import Callback
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import FsspecStore, LocalStore, MemoryStore, WrapperStore, ZipStore

import zarrdb
from zarrdb import SQLiteStore, errors


def _sample() -> dict[str, bytes]:
    """The keys and bytes of a small OME-flavoured hierarchy, written by zarr."""
    held: dict = {}
    group = zarr.open_group(
        MemoryStore(held), mode="w", attributes={"ome": {"version": "0.5", "multiscales": []}}
    )
    raw = group.create_array("images/raw", shape=(40, 30), chunks=(8, 8), dtype="u2")
    raw[:] = np.arange(1200, dtype="u2").reshape(40, 30)
    group.create_group("labels").create_array("mask", shape=(10,), chunks=(4,), dtype="u1")[:] = 1
    group.create_array("scalar", shape=(), dtype="f8")[()] = 2.5
    return {key: value.to_bytes() for key, value in held.items()}


SAMPLE = _sample()
BUF = default_buffer_prototype().buffer


# --- sources: the sample written into each kind of store, without zarrdb.copy ----------------


def _source(kind: str, tmp_path: Path, items: dict[str, bytes]) -> object:
    if kind == "zarrdb":
        path = tmp_path / "src.zarrdb"
        with SQLiteStore(path) as store:
            for key, value in items.items():
                store.set_sync(key, BUF.from_bytes(value))
        return str(path)
    if kind == "dir":
        for key, value in items.items():
            (tmp_path / "src.zarr" / key).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "src.zarr" / key).write_bytes(value)
        return tmp_path / "src.zarr"
    if kind == "zip":  # deflated, as a generic zip tool writes it
        path = tmp_path / "src.zip"
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for key, value in items.items():
                zf.writestr(key, value)
        return str(path)
    if kind == "memory":
        return MemoryStore({k: BUF.from_bytes(v) for k, v in items.items()})
    if kind == "fsspec":
        url = f"memory://copy-src-{uuid.uuid4().hex}"
        fs = fsspec.filesystem("memory")
        for key, value in items.items():
            fs.pipe(f"{url}/{key}", value)
        return url
    raise AssertionError(kind)


# --- destinations, and an independent reader for each ----------------------------------------


def _dest(kind: str, tmp_path: Path) -> object:
    return {
        "zarrdb": lambda: str(tmp_path / "out.zarrdb"),
        "dir": lambda: str(tmp_path / "out.zarr"),
        "zip": lambda: str(tmp_path / "out.zip"),
        "ozx": lambda: tmp_path / "out.ozx",
        "memory": lambda: MemoryStore({}),
        "fsspec": lambda: f"memory://copy-dst-{uuid.uuid4().hex}",
        "sqlitestore": lambda: SQLiteStore(tmp_path / "obj.zarrdb"),
        "localstore": lambda: LocalStore(tmp_path / "obj.zarr"),
        "zipstore": lambda: ZipStore(tmp_path / "obj.zip", mode="w"),
    }[kind]()


def read_back(dest: object) -> dict[str, bytes]:
    """Every key and value of a copy, read without zarrdb's engine."""
    if isinstance(dest, SQLiteStore | ZipStore):
        dest.close()
        dest = str(dest.path)
    if isinstance(dest, LocalStore):
        dest = str(dest.root)
    if isinstance(dest, MemoryStore):
        return {k: v.to_bytes() for k, v in dest._store_dict.items()}
    if isinstance(dest, str) and dest.startswith("memory://"):
        fs = fsspec.filesystem("memory")
        root = dest[len("memory://") :]
        return {p.split(root + "/", 1)[1]: fs.cat(p) for p in fs.find(root)}
    path = os.fspath(dest)  # type: ignore[arg-type]
    if os.path.isdir(path):
        return {
            os.path.relpath(os.path.join(d, f), path).replace(os.sep, "/"): Path(d, f).read_bytes()
            for d, _, files in os.walk(path)
            for f in files
        }
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            return {info.filename: zf.read(info) for info in zf.infolist()}
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(con.execute("SELECT k, v FROM zarr"))
    finally:
        con.close()


SOURCES = ["zarrdb", "dir", "zip", "memory", "fsspec"]
DESTS = ["zarrdb", "dir", "zip", "ozx", "memory", "fsspec", "sqlitestore", "localstore", "zipstore"]


@pytest.mark.parametrize("dest_kind", DESTS)
@pytest.mark.parametrize("source_kind", SOURCES)
def test_every_kind_to_every_kind(tmp_path, source_kind, dest_kind):
    source = _source(source_kind, tmp_path, SAMPLE)
    dest = _dest(dest_kind, tmp_path)
    result = zarrdb.copy(source, dest, verify=True)
    assert (result.keys, result.bytes) == (len(SAMPLE), sum(map(len, SAMPLE.values())))
    assert result.verified and result.skipped == 0
    assert read_back(dest) == SAMPLE
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]  # no temporary left


def test_the_copy_opens_in_zarr(tmp_path):
    zarrdb.copy(_source("dir", tmp_path, SAMPLE), tmp_path / "c.zarrdb")
    with SQLiteStore(tmp_path / "c.zarrdb", read_only=True) as store:
        raw = zarr.open_array(store, path="images/raw", mode="r")
        np.testing.assert_array_equal(raw[:], np.arange(1200).reshape(40, 30))


def test_a_sub_tree_to_another_path(tmp_path):
    source = _source("zarrdb", tmp_path, SAMPLE)
    dest = tmp_path / "part.zarrdb"
    result = zarrdb.copy(source, dest, path="/images/raw", dest_path="moved/raw", verify=True)
    want = {"moved/raw/" + k[len("images/raw/") :]: v for k, v in SAMPLE.items() if k.startswith("images/raw/")}
    assert result.keys == len(want) and read_back(dest) == want
    # a StorePath says where as well
    target = MemoryStore({})
    zarrdb.copy(zarr.storage.StorePath(SQLiteStore(source, read_only=True), "labels"), target)
    assert read_back(target) == {k[len("labels/") :]: v for k, v in SAMPLE.items() if k.startswith("labels/")}


def test_if_exists(tmp_path):
    source = _source("memory", tmp_path, SAMPLE)
    dest = tmp_path / "d.zarrdb"
    zarrdb.copy(source, dest)
    with SQLiteStore(dest) as store:  # a stale chunk, and a changed one
        store.set_sync("images/raw/c/99/99", BUF.from_bytes(b"stale"))
        store.set_sync("images/raw/c/0/0", BUF.from_bytes(b"changed"))
    before = read_back(str(dest))
    with pytest.raises(FileExistsError, match="if_exists"):
        zarrdb.copy(source, dest)
    assert read_back(str(dest)) == before  # nothing written
    kept = zarrdb.copy(source, dest, if_exists="skip")
    assert kept.keys == 0 and kept.skipped == len(SAMPLE)
    assert read_back(str(dest)) == before  # what was there is kept
    # "skip" copies what is missing (an interrupted copy, resumed)
    with SQLiteStore(dest) as store:
        store.delete_sync("labels/mask/c/0")
    resumed = zarrdb.copy(source, dest, if_exists="skip")
    assert resumed.keys == 1 and read_back(str(dest))["labels/mask/c/0"] == SAMPLE["labels/mask/c/0"]
    replaced = zarrdb.copy(source, dest, if_exists="replace", verify=True)
    assert replaced.keys == len(SAMPLE)
    assert read_back(str(dest)) == SAMPLE  # the stale chunk is gone too
    with pytest.raises(ValueError, match="if_exists"):
        zarrdb.copy(source, dest, if_exists="overwrite")  # type: ignore[arg-type]


def test_replace_never_deletes_what_is_no_zarr_hierarchy(tmp_path):
    folder = tmp_path / "home"
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "todo.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="no Zarr hierarchy"):
        zarrdb.copy(_source("memory", tmp_path, SAMPLE), folder, if_exists="replace")
    assert (folder / "notes" / "todo.txt").read_text() == "keep me"
    assert sorted(p.name for p in folder.rglob("*")) == ["notes", "todo.txt"]


def test_skip_then_verify_compares_the_kept_keys_with_the_source(tmp_path):
    source = _source("memory", tmp_path, SAMPLE)
    dest = MemoryStore({})
    zarrdb.copy(source, dest)
    dest._store_dict["scalar/c"] = BUF.from_bytes(b"not the source's")
    with pytest.raises(errors.CopyMismatchError) as caught:
        zarrdb.copy(source, dest, if_exists="skip", verify=True)
    assert caught.value.mismatches == ["key 'scalar/c': the value differs"]


class _Flipping(WrapperStore[MemoryStore]):
    """A real MemoryStore whose writes of one key land changed, as a faulty medium would."""

    async def set(self, key, value):
        if key == "images/raw/c/1/1":
            value = BUF.from_bytes(value.to_bytes()[::-1])
        await self._store.set(key, value)


def test_verify_catches_a_destination_that_changes_a_value(tmp_path):
    source = _source("memory", tmp_path, SAMPLE)
    with pytest.raises(errors.CopyMismatchError, match="images/raw/c/1/1"):
        zarrdb.copy(source, _Flipping(MemoryStore({})), verify=True)
    zarrdb.copy(source, _Flipping(MemoryStore({})))  # unverified, it goes unnoticed


def test_a_new_file_that_fails_verification_is_not_put_in_place(tmp_path):
    """What was written differs from what was read (here: the digest recorded for one value
    is not the value's): the new file stays away."""
    source = MemoryStore({k: BUF.from_bytes(v) for k, v in SAMPLE.items()})
    dest = tmp_path / "never.zarrdb"
    real = zarrdb._copy_engine.compare

    async def after_a_change(src, dst, items, prefix, batch_bytes):
        items[0].digest = b"\x00" * 16  # as if the copy had read other bytes
        return await real(src, dst, items, prefix, batch_bytes)

    zarrdb._copy_engine.compare = after_a_change
    try:
        with pytest.raises(errors.CopyMismatchError):
            zarrdb.copy(source, dest, verify=True)
    finally:
        zarrdb._copy_engine.compare = real
    assert not dest.exists() and list(tmp_path.iterdir()) == []


class _Recorder(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.branch_bytes: list[int] = []

    def branched(self, path_1, path_2, **kwargs):
        parent = self

        class Child(Callback):
            def close(self) -> None:
                parent.branch_bytes.append(self.value)

        child = Child()
        return child


def test_an_fsspec_callback_counts_keys_and_each_values_bytes(tmp_path):
    source = _source("zarrdb", tmp_path, SAMPLE)
    callback = _Recorder()
    zarrdb.copy(source, tmp_path / "c.zip", callback=callback)
    assert callback.size == len(SAMPLE) and callback.value == len(SAMPLE)
    assert sorted(callback.branch_bytes) == sorted(map(len, SAMPLE.values()))
    # fsspec's own callbacks work as they are
    seen: list[tuple[int, int]] = []
    zarrdb.copy(source, MemoryStore({}), callback=Callback(hooks={"h": lambda s, v: seen.append((s, v))}))
    assert seen[-1] == (len(SAMPLE), len(SAMPLE))


class _Timeline:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.in_memory = 0  # bytes read from the source and not yet written
        self.peak = 0


class _CountingSource(WrapperStore[MemoryStore]):
    timeline: _Timeline

    async def get_partial_values(self, prototype, key_ranges):
        self.timeline.events.append(("read", 0))
        values = await self._store.get_partial_values(prototype, key_ranges)
        self.timeline.in_memory += sum(len(v) for v in values if v is not None)
        self.timeline.peak = max(self.timeline.peak, self.timeline.in_memory)
        return values


class _SlowDest(WrapperStore[MemoryStore]):
    timeline: _Timeline

    async def set(self, key, value):
        self.timeline.events.append(("write-start", 0))
        await asyncio.sleep(0.001)
        await self._store.set(key, value)
        self.timeline.in_memory -= len(value)
        self.timeline.events.append(("write-end", 0))


def test_memory_is_bounded_and_reads_overlap_writes():
    """64 values of 64 KiB through batches of 256 KiB: never more than three batches in
    memory, and the source is read while the destination is being written."""
    value = bytes(range(256)) * 256
    items = {f"a/c/{i}": value for i in range(64)}
    timeline = _Timeline()
    source = _CountingSource(MemoryStore({k: BUF.from_bytes(v) for k, v in items.items()}))
    dest = _SlowDest(MemoryStore({}))
    source.timeline = dest.timeline = timeline
    batch = 256 * 1024
    zarrdb.copy(source, dest, batch_bytes=batch)
    assert read_back(dest._store) == items
    assert timeline.peak <= 3 * batch
    writing = False
    overlapped = 0
    for name, _ in timeline.events:
        writing = {"write-start": True, "write-end": False}.get(name, writing)
        overlapped += name == "read" and writing
    assert overlapped > 0


def test_a_failed_copy_leaves_no_file_and_no_temporary(tmp_path):
    class Failing(WrapperStore[MemoryStore]):
        calls = 0

        async def get_partial_values(self, prototype, key_ranges):
            Failing.calls += 1
            if Failing.calls == 3:
                raise OSError("the source went away")
            return await self._store.get_partial_values(prototype, key_ranges)

    source = Failing(MemoryStore({k: BUF.from_bytes(v) for k, v in SAMPLE.items()}))
    for name in ("f.zarrdb", "f.zip", "f.ozx", "f.zarr"):
        Failing.calls = 0
        with pytest.raises(OSError, match="went away"):
            zarrdb.copy(source, tmp_path / name, batch_bytes=512)
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key", ["../outside", "a/../../outside", "/abs", "a/./b", "nul\x00"])
@pytest.mark.parametrize("dest_kind", ["dir", "zarrdb", "zip", "memory"])
def test_a_key_the_destination_cannot_hold_stops_the_copy_before_writing(tmp_path, key, dest_kind):
    source = MemoryStore({**{k: BUF.from_bytes(v) for k, v in SAMPLE.items()}, key: BUF.from_bytes(b"x")})
    dest = _dest(dest_kind, tmp_path)
    with pytest.raises(errors.InvalidKeyError, match="nothing was written"):
        zarrdb.copy(source, dest)
    if isinstance(dest, MemoryStore):
        assert dest._store_dict == {}
    else:
        assert list(tmp_path.iterdir()) == []
    assert not (tmp_path.parent / "outside").exists()


def test_a_backslash_is_refused_for_a_zip_file(tmp_path):
    source = MemoryStore({"zarr.json": BUF.from_bytes(b"{}"), "a\\..\\..\\x": BUF.from_bytes(b"x")})
    with pytest.raises(errors.InvalidKeyError, match="backslash"):
        zarrdb.copy(source, tmp_path / "w.zip")


def test_a_copy_into_itself_is_refused(tmp_path):
    path = _source("zarrdb", tmp_path, SAMPLE)
    with pytest.raises(ValueError, match="overlaps the source"):
        zarrdb.copy(path, SQLiteStore(path), path="images", dest_path="images/again", if_exists="replace")
    zarrdb.copy(path, SQLiteStore(path), path="images", dest_path="copy-of-images")
    assert read_back(path)["copy-of-images/raw/c/0/0"] == SAMPLE["images/raw/c/0/0"]


def test_nothing_to_copy(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds nothing"):
        zarrdb.copy(_source("memory", tmp_path, SAMPLE), MemoryStore({}), path="nope")
    with pytest.raises(FileNotFoundError):
        zarrdb.copy(tmp_path / "missing.zarrdb", MemoryStore({}))


def test_an_existing_zip_file_is_only_replaced_whole(tmp_path):
    source = _source("memory", tmp_path, SAMPLE)
    out = tmp_path / "w.zip"
    zarrdb.copy(source, out)
    with pytest.raises(FileExistsError, match="written whole"):
        zarrdb.copy(source, out, path="labels", dest_path="more")
    zarrdb.copy(source, out, path="labels", dest_path="", if_exists="replace")
    assert read_back(str(out)) == {k[len("labels/") :]: v for k, v in SAMPLE.items() if k.startswith("labels/")}


async def test_copy_async_in_a_running_loop(tmp_path):
    source = FsspecStore.from_url(f"memory://async-{uuid.uuid4().hex}", read_only=False)
    for key, value in SAMPLE.items():
        await source.set(key, BUF.from_bytes(value))
    result = await zarrdb.copy_async(source, tmp_path / "a.zarrdb", verify=True)
    assert result.keys == len(SAMPLE) and read_back(str(tmp_path / "a.zarrdb")) == SAMPLE
