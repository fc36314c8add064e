"""Zip files of a Zarr hierarchy, both ways: written in the layout of OME-Zarr's RFC-9 (`.ozx`),
and read only after their central directory has been checked.

Writing (`ZipWriter`): every entry stored uncompressed (Zarr's codecs compress the chunks
already), with ZIP64 fields in every local and central header and a ZIP64 end record whatever
the size, as RFC-9 recommends ("irrespective of the ZIP file size"). The caller gives the
entries in RFC-9's order (`rfc9_order`: the root `zarr.json` first, the other `zarr.json`
files breadth-first, then everything else); the central directory follows the same order. An
`.ozx` carries `{"ome": {"version": ...}}` as its archive comment (`ome_comment`), with the
`jsonFirst` flag other writers add.

Reading (`inspect_zip`): a zip from a stranger can claim anything. Before a value is read, each
entry must be a plain file entry (not encrypted, no duplicate name), stored or deflated, with
its data lying inside the archive, before the central directory and overlapping no other entry
(the overlapping entries of a "better zip bomb" would each expand the same bytes again); a
deflated entry may not claim more than deflate can expand its compressed bytes to. Python's
zipfile then never returns more than the declared size of an entry and checks its CRC.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import time
import zipfile
import zlib
from collections.abc import Iterable
from typing import BinaryIO

from zarrdb import errors

__all__ = ["ZIP_SUFFIXES", "ZipWriter", "inspect_zip", "is_zip_name", "ome_comment", "rfc9_order"]

ZIP_SUFFIXES = (".zip", ".ozx")  # .ozx: OME-Zarr's zipped form (RFC-9)
METADATA_NAMES = frozenset({"zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"})

_LOCAL = struct.Struct("<IHHHHHIIIHH")  # local file header, without name and extra
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # central directory header
_ZIP64_END = struct.Struct("<IQHHIIQQQQ")  # ZIP64 end of central directory record
_ZIP64_LOCATOR = struct.Struct("<IIQI")
_END = struct.Struct("<IHHHHIIH")  # end of central directory record
_ZIP64_EXTRA_ID = 0x0001
_VERSION = 45  # 4.5: ZIP64
_MADE_BY = (3 << 8) | _VERSION  # Unix, so that the file mode below means what it says
_UTF8 = 0x0800  # general purpose bit 11: the names are UTF-8
_FILE_MODE = (0o100644 << 16)  # a regular file, rw-r--r--
_U32 = 0xFFFF_FFFF
_U16 = 0xFFFF
# Deflate cannot expand its input by more than about 1032 to 1 (RFC 1951's longest match per
# bit pair): a claim beyond this (with room for a tiny entry) is a lie about the entry.
_DEFLATE_MAX_RATIO = 1032
_DEFLATE_SLACK = 1024
_LOCAL_HEADER_MIN = 30


def is_zip_name(path: str) -> bool:
    """Whether a path names a zip file by its suffix (`.zip`, `.ozx`)."""
    return path.lower().endswith(ZIP_SUFFIXES)


def is_metadata(key: str) -> bool:
    return key.rpartition("/")[2] in METADATA_NAMES


def rfc9_order(keys: Iterable[str]) -> list[str]:
    """`keys` in RFC-9's order: the root `zarr.json` first, the other metadata documents
    breadth-first (by depth, then by name: `zarr.json` of zarr v3 before zarr v2's), then
    every other key in key order."""
    keys = list(keys)
    metadata = [k for k in keys if is_metadata(k)]
    rest = sorted(k for k in keys if not is_metadata(k))

    def place(key: str) -> tuple[int, int, str]:
        depth = key.count("/")
        return depth, 0 if key.endswith("zarr.json") else 1, key

    return sorted(metadata, key=place) + rest


def ome_version(root_metadata: bytes | None) -> str | None:
    """The OME-Zarr version a root `zarr.json` declares (`attributes.ome.version`), or None."""
    if not root_metadata:
        return None
    try:
        document = json.loads(root_metadata)
        version = document["attributes"]["ome"]["version"]
    except (ValueError, KeyError, TypeError):
        return None
    return version if isinstance(version, str) and len(version) < 64 else None


def ome_comment(version: str) -> bytes:
    """RFC-9's archive comment: UTF-8 JSON naming the OME-Zarr version, with the `jsonFirst`
    flag by which readers (ngff-zarr, iohub) know that the central directory lists the
    `zarr.json` files first and can stop reading it after them."""
    ome = {"version": version, "zipFile": {"centralDirectory": {"jsonFirst": True}}}
    return json.dumps({"ome": ome}, separators=(",", ":")).encode()


def _dos_time(moment: float) -> tuple[int, int]:
    t = time.localtime(moment)
    year = max(t.tm_year, 1980)
    return (
        (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2),
        ((year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday,
    )


class ZipWriter:
    """A new zip file written front to back: `add` each entry (stored), then `close`.

    `comment` is the archive comment. Entries are written in the order added; the central
    directory lists them in the same order."""

    def __init__(self, file: BinaryIO, comment: bytes = b"") -> None:
        if len(comment) > _U16:
            raise ValueError("a zip comment holds at most 65535 bytes")
        self._file = file
        self._comment = comment
        self._offset = 0
        self._central: list[bytes] = []
        self._names: set[str] = set()
        self._time, self._date = _dos_time(time.time())

    def add(self, name: str, data: bytes | bytearray | memoryview) -> None:
        """Write one entry, stored uncompressed."""
        if name in self._names:
            raise ValueError(f"{name!r} is in the zip file already")
        self._names.add(name)
        raw_name = name.encode("utf-8")
        view = memoryview(data).cast("B")
        size = view.nbytes
        crc = zlib.crc32(view)
        local_extra = struct.pack("<HHQQ", _ZIP64_EXTRA_ID, 16, size, size)
        header = _LOCAL.pack(
            0x04034B50, _VERSION, _UTF8, zipfile.ZIP_STORED, self._time, self._date,
            crc, _U32, _U32, len(raw_name), len(local_extra),
        )  # fmt: skip
        self._file.write(header + raw_name + local_extra)
        self._file.write(view)
        central_extra = struct.pack("<HHQQQ", _ZIP64_EXTRA_ID, 24, size, size, self._offset)
        self._central.append(
            _CENTRAL.pack(
                0x02014B50, _MADE_BY, _VERSION, _UTF8, zipfile.ZIP_STORED, self._time,
                self._date, crc, _U32, _U32, len(raw_name), len(central_extra), 0, 0, 0,
                _FILE_MODE, _U32,
            )
            + raw_name
            + central_extra
        )
        self._offset += len(header) + len(raw_name) + len(local_extra) + size

    def close(self) -> None:
        """Write the central directory and the end records; the file stays open."""
        start = self._offset
        directory = b"".join(self._central)
        count = len(self._central)
        zip64_end = start + len(directory)
        self._file.write(directory)
        self._file.write(
            _ZIP64_END.pack(
                0x06064B50, _ZIP64_END.size - 12, _MADE_BY, _VERSION, 0, 0, count, count,
                len(directory), start,
            )
        )
        self._file.write(_ZIP64_LOCATOR.pack(0x07064B50, 0, zip64_end, 1))
        # The classic record repeats what fits, so that readers without ZIP64 support still
        # list a small archive; what does not fit says "see the ZIP64 record".
        self._file.write(
            _END.pack(
                0x06054B50, 0, 0, min(count, _U16), min(count, _U16),
                min(len(directory), _U32), min(start, _U32), len(self._comment),
            )
            + self._comment
        )


def write_zip(path: str, entries: Iterable[tuple[str, bytes]], comment: bytes = b"") -> None:
    """A new zip file at `path` (created exclusively) holding `entries` in the order given."""
    with open(path, "xb") as f:
        writer = ZipWriter(f, comment)
        for name, data in entries:
            writer.add(name, data)
        writer.close()


def inspect_zip(path: str | os.PathLike[str]) -> list[tuple[str, int]]:
    """`(name, size)` of every file entry of the zip file at `path`, in the archive's order.

    Raises
    ------
    zarrdb.errors.UnsafeZipError
        For an entry that could not be read safely (see the module's description).
    zipfile.BadZipFile
        If the file is not a zip file.
    """
    path = os.fspath(path)
    archive_size = os.path.getsize(path)
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        directory_start = zf.start_dir  # where the central directory begins
    seen: set[str] = set()
    spans: list[tuple[int, int, str]] = []
    out: list[tuple[str, int]] = []
    for info in infos:
        name = info.filename
        if name in seen:
            raise errors.UnsafeZipError(f"{path}: the name {name!r} is in the zip file twice")
        seen.add(name)
        if info.flag_bits & 0x1:
            raise errors.UnsafeZipError(f"{path}: {name!r} is encrypted")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.compress_size != info.file_size:
                raise errors.UnsafeZipError(
                    f"{path}: {name!r} is stored but claims {info.file_size:,} bytes from "
                    f"{info.compress_size:,}"
                )
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            if info.file_size > info.compress_size * _DEFLATE_MAX_RATIO + _DEFLATE_SLACK:
                raise errors.UnsafeZipError(
                    f"{path}: {name!r} claims {info.file_size:,} bytes from "
                    f"{info.compress_size:,} deflated bytes, more than deflate expands to"
                )
        else:
            raise errors.UnsafeZipError(
                f"{path}: {name!r} is compressed with method {info.compress_type}; only stored "
                "and deflated entries are read"
            )
        start = info.header_offset
        end = start + _LOCAL_HEADER_MIN + len(info.orig_filename.encode("utf-8", "replace"))
        end += info.compress_size
        if start < 0 or end > directory_start or end > archive_size:
            raise errors.UnsafeZipError(
                f"{path}: {name!r} claims {info.compress_size:,} bytes at offset {start:,}, "
                f"beyond the data of the archive ({archive_size:,} bytes)"
            )
        spans.append((start, end, name))
        if not name.endswith("/"):  # a folder's entry holds nothing
            out.append((name, info.file_size))
    spans.sort()
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        if start < end:
            raise errors.UnsafeZipError(
                f"{path}: the entries {first!r} and {second!r} overlap (a zip bomb's trick)"
            )
    return out
