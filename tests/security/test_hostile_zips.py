"""Zip files from strangers, as a copy's source (`zarrdb.copy`, `zarrdb copy`).

A zip's central directory can claim anything: entries that overlap so that the same
compressed bytes expand again and again (the "better zip bomb"), sizes beyond the archive,
deflated entries claiming more than deflate can expand to, names twice, encrypted entries,
names that climb out of the hierarchy. Each is refused before any value is read or written;
the zip files are built byte by byte here, each documenting what is wrong with it."""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path

import pytest
from zarr.storage import MemoryStore

import zarrdb
from cli.helpers import run_here
from zarrdb import errors

ROOT = b'{"zarr_format":3,"node_type":"group","attributes":{}}'


def craft(path: Path, entries: list[dict]) -> Path:
    """A zip file from `entries`, each: name, data (the bytes stored), and optionally method,
    size (the uncompressed size claimed), flags, and `same_as` (the index of an earlier entry
    whose local header this central record points at, writing no data of its own)."""
    body = b""
    central = b""
    offsets: list[int] = []
    for entry in entries:
        name = entry["name"].encode()
        data = entry.get("data", b"")
        method = entry.get("method", 0)
        size = entry.get("size", len(data))
        crc = entry.get("crc", zlib.crc32(data) if method == 0 else 0)
        flags = entry.get("flags", 0)
        if "same_as" in entry:
            offset = offsets[entry["same_as"]]
        else:
            offset = len(body)
            body += struct.pack(
                "<IHHHHHIIIHH", 0x04034B50, 20, flags, method, 0, 0x21, crc, len(data), size,
                len(name), 0,
            ) + name + data  # fmt: skip
        offsets.append(offset)
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, flags, method, 0, 0x21, crc, len(data),
            size, len(name), 0, 0, 0, 0, 0, offset,
        ) + name  # fmt: skip
    end = struct.pack(
        "<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), len(body), 0
    )
    path.write_bytes(body + central + end)
    return path


def deflated(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def test_a_crafted_zip_of_plain_entries_is_read(tmp_path):
    """The builder itself makes readable zip files: the refusals below are the checks'."""
    chunk = deflated(b"\x00" * 4096)
    good = craft(
        tmp_path / "good.zip",
        [
            {"name": "zarr.json", "data": ROOT},
            {"name": "a/c/0", "data": chunk, "method": 8, "size": 4096, "crc": zlib.crc32(b"\x00" * 4096)},
        ],
    )
    dest = MemoryStore({})
    zarrdb.copy(good, dest, verify=True)
    assert dest._store_dict["a/c/0"].to_bytes() == b"\x00" * 4096


def test_overlapping_entries_are_refused(tmp_path):
    """Many central records pointing at one deflated entry: each would expand it again."""
    bomb = deflated(b"\x00" * 1_000_000)
    crc = zlib.crc32(b"\x00" * 1_000_000)
    entries = [{"name": "zarr.json", "data": ROOT}]
    entries.append({"name": "a/c/0", "data": bomb, "method": 8, "size": 1_000_000, "crc": crc})
    entries += [
        {"name": f"a/c/{i}", "data": bomb, "method": 8, "size": 1_000_000, "crc": crc, "same_as": 1}
        for i in range(1, 50)
    ]
    path = craft(tmp_path / "bomb.zip", entries)
    dest = MemoryStore({})
    with pytest.raises(errors.UnsafeZipError, match="overlap"):
        zarrdb.copy(path, dest)
    assert dest._store_dict == {}


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        # stored, but claiming more bytes than it holds
        ({"name": "a/c/0", "data": b"abc", "size": 10**9}, "stored but claims"),
        # deflated, claiming more than deflate can expand its bytes to
        ({"name": "a/c/0", "data": deflated(b"x" * 100), "method": 8, "size": 10**9}, "more than deflate"),
        # bzip2 and others: expansion without a bound we can check
        ({"name": "a/c/0", "data": b"BZh9", "method": 12, "size": 10}, "method 12"),
        # encrypted
        ({"name": "a/c/0", "data": b"abc", "flags": 1}, "encrypted"),
    ],
    ids=["stored-lie", "deflate-ratio", "bzip2", "encrypted"],
)
def test_an_entry_that_lies_is_refused(tmp_path, entry, why):
    path = craft(tmp_path / "bad.zip", [{"name": "zarr.json", "data": ROOT}, entry])
    dest = tmp_path / "out.zarrdb"
    with pytest.raises(errors.UnsafeZipError, match=why):
        zarrdb.copy(path, dest)
    assert not dest.exists()


def test_data_beyond_the_archive_is_refused(tmp_path):
    path = craft(tmp_path / "short.zip", [{"name": "zarr.json", "data": ROOT}])
    raw = bytearray(path.read_bytes())
    central = raw.index(b"PK\x01\x02")
    # the central record claims 1 GB stored at its local header (sizes at +20 and +24)
    raw[central + 20 : central + 28] = struct.pack("<II", 10**9, 10**9)
    path.write_bytes(bytes(raw))
    with pytest.raises(errors.UnsafeZipError, match="beyond the data"):
        zarrdb.copy(path, MemoryStore({}))


def test_a_name_twice_is_refused(tmp_path):
    path = craft(
        tmp_path / "twice.zip",
        [{"name": "zarr.json", "data": ROOT}, {"name": "zarr.json", "data": b"{}"}],
    )
    with pytest.raises(errors.UnsafeZipError, match="twice"):
        zarrdb.copy(path, MemoryStore({}))


@pytest.mark.parametrize("name", ["../../evil", "/etc/evil", "a/../../evil"])
def test_names_that_climb_out_are_refused(tmp_path, name):
    path = craft(tmp_path / "climb.zip", [{"name": "zarr.json", "data": ROOT}, {"name": name, "data": b"x"}])
    out = tmp_path / "out" / "dir.zarr"
    out.parent.mkdir()
    with pytest.raises(errors.InvalidKeyError, match="nothing was written"):
        zarrdb.copy(path, out)
    assert list(out.parent.iterdir()) == [] and not (tmp_path / "evil").exists()


def test_the_command_line_refuses_a_bomb(tmp_path, capsys):
    bomb = deflated(b"\x00" * 100_000)
    crc = zlib.crc32(b"\x00" * 100_000)
    entries = [{"name": "zarr.json", "data": ROOT}]
    entries.append({"name": "a/c/0", "data": bomb, "method": 8, "size": 100_000, "crc": crc})
    entries.append({"name": "a/c/1", "data": bomb, "method": 8, "size": 100_000, "crc": crc, "same_as": 1})
    path = craft(tmp_path / "bomb.ozx", entries)
    assert zipfile.is_zipfile(path)
    code, out, err = run_here(capsys, "copy", path, tmp_path / "out.zarrdb")
    assert code == 2 and "overlap" in err
    assert not (tmp_path / "out.zarrdb").exists()
