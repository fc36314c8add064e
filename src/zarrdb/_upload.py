"""Publishing a closed .zarrdb file to object storage, byte for byte: `zarrdb.remote.upload`.

The file goes up in parts (a multipart upload through obstore), so that the object appears
only once every part has arrived; a failure, an interruption or a file that changes meanwhile
aborts the upload and publishes nothing. Afterwards the object's size is checked, and on S3
its ETag against the MD5 digests of the parts sent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from zarrdb import _tunables, errors
from zarrdb._format import SQLITE_HEADER
from zarrdb._live_stores import open_in_this_process
from zarrdb._remote_location import RemoteLocation, load_obstore, request_error

MIB = 1024 * 1024
# Object storage takes at most 10,000 parts (and parts of 5 MiB at least, the last excepted:
# _tunables.UPLOAD_PART_MIN_BYTES, sent _tunables.UPLOAD_CONCURRENCY at once).
MAX_PARTS = 10_000
UPLOAD_SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl")
"""The URL schemes `upload` writes to: object storage (a web server is read-only here)."""
_S3_ETAG = re.compile(r'^"?([0-9a-f]{32})(?:-(\d+))?"?$')


@dataclasses.dataclass
class UploadResult:
    """What `upload` sent and found.

    Attributes
    ----------
    url : str
        The object written.
    size : int
        Bytes sent (the file's size).
    parts : int
        Parts of the multipart upload.
    seconds : float
        Time taken.
    etag : str or None
        The object's ETag, as the service gives it.
    etag_checked : bool
        Whether the ETag was compared with the MD5 digests of the parts sent (S3 and services
        that compute ETags as S3 does).
    problems : list of str
        What the checks after the upload found: a size or an ETag other than the file's. Empty
        when all is well.
    """

    url: str
    size: int
    parts: int
    seconds: float
    etag: str | None = None
    etag_checked: bool = False
    problems: list[str] = dataclasses.field(default_factory=list)


def part_size_for(size: int) -> int:
    """The part size for a file of `size` bytes: _tunables.UPLOAD_PART_MIN_BYTES, larger (in
    whole MiB) where that would make more than MAX_PARTS parts."""
    needed = -(-size // MAX_PARTS)
    return max(_tunables.UPLOAD_PART_MIN_BYTES, -(-needed // MIB) * MIB)


def check_closed(path: str) -> None:
    """UnclosedFileError unless `path` is an SQLite file that no program has open for writing
    as far as its files tell: not in WAL mode, no -wal or -journal beside it, no store of this
    process on it. (A closed SQLiteStore is one self-contained file in DELETE mode.)"""
    if open_in_this_process(path):
        raise errors.UnclosedFileError(
            f"{path!r} is open in this program: close its store first (a closed store leaves "
            "one self-contained file), then upload it"
        )
    with open(path, "rb") as f:
        header = f.read(100)
    if header[:16] != SQLITE_HEADER:
        raise errors.NotADatabaseError(
            f"{path!r} is not an SQLite database (is this a .zarrdb file?)", code=26, filename=path
        )
    if header[18] == 2 or header[19] == 2:
        raise errors.UnclosedFileError(
            f"{path!r} is in WAL mode: the program that writes it has not closed it, and its "
            "latest writes may be in a -wal file beside it, which would not be uploaded. Close "
            "the store that writes it (zarrdb leaves a closed file in DELETE mode), then upload"
        )
    for suffix, why in (
        ("-wal", "a write-ahead log"),
        ("-journal", "a rollback journal (a program has it open for writing, or crashed while "
         "writing it)"),
    ):  # fmt: skip
        if os.path.exists(path + suffix):
            raise errors.UnclosedFileError(
                f"{path!r} has {why} beside it, {path + suffix!r}: close the store that "
                "writes it (or open it once for writing, which rolls back what a crash left), "
                "then upload"
            )


def upload(
    path: str | os.PathLike[str],
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    part_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> UploadResult:
    """Upload a closed `.zarrdb` file to object storage, byte for byte.

    The file is sent as a multipart upload: the object appears only when every part has
    arrived, and a failure, Ctrl-C or a change to the file while it is read aborts the upload,
    leaving nothing at `url`. Then the object's size is compared with the file's, and where the
    service computes ETags as S3 does, its ETag with the MD5 digests of the parts sent;
    what differs is listed in `UploadResult.problems`.

    Parameters
    ----------
    path
        The local file: closed (not in WAL mode, no -wal or -journal beside it).
    url
        Where to (`s3://`, `gs://`, `az://`, ...; a web server is read-only here).
    storage_options
        obstore's settings, as for `SQLiteStore(url, ...)`.
    overwrite
        Replace an object already at `url` (without it, that raises FileExistsError).
    part_size
        Bytes per part (default: 8 MiB, more for files over 78 GiB).
    progress
        Called with the number of bytes each time a part is read for sending.

    Returns
    -------
    UploadResult

    Raises
    ------
    zarrdb.errors.UnclosedFileError
        If the file is not closed, or changed while it was uploaded (nothing published).
    FileExistsError
        If an object exists at `url` and `overwrite` is false.
    zarrdb.errors.RemoteWriteError
        If the upload fails (the network, the service, permissions); nothing was published.
    ValueError
        For a URL that is not object storage or names no file, or bad storage_options.
    """
    obstore = load_obstore()
    source = os.fspath(path)
    scheme = url.partition("://")[0].lower()
    if scheme not in UPLOAD_SCHEMES:
        raise ValueError(
            f"{url!r}: files are uploaded to object storage ({', '.join(UPLOAD_SCHEMES)}); "
            "an HTTP server is read-only here"
        )
    location = RemoteLocation(url, storage_options=storage_options)
    store = location.object_store()
    check_closed(source)
    if not overwrite and _exists(obstore, store, location):
        raise FileExistsError(f"{url!r} exists already")
    size = os.path.getsize(source)
    part = part_size or part_size_for(size)
    digests: list[bytes] = []
    started = time.perf_counter()
    with open(source, "rb") as f:
        before = _state(f)

        def parts() -> Iterator[bytes]:
            while True:
                data = f.read(part)
                if not data:
                    break
                digests.append(hashlib.md5(data, usedforsecurity=False).digest())
                if progress is not None:
                    progress(len(data))
                yield data
            # The object is complete only after this: a file that changed aborts the upload.
            if _state(f) != before:
                raise errors.UnclosedFileError(
                    f"{source!r} changed while it was uploaded: a program writes it. Nothing "
                    "was published; close the store that writes it, then upload again"
                )

        try:
            put = obstore.put(
                store, location.path, parts(), chunk_size=part, max_concurrency=_tunables.UPLOAD_CONCURRENCY
            )
        except (errors.ZarrDBError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            raise request_error(
                errors.RemoteWriteError, f"cannot upload {source!r} to {url!r}", exc, location,
                then="; nothing was published",
            ) from exc
    result = UploadResult(url, size, len(digests), time.perf_counter() - started)
    _check_object(obstore, store, location, put, digests, result)
    return result


def _state(f: Any) -> tuple[int, int, bytes]:
    """What tells whether the open file changed: its size, its modification time, and SQLite's
    file change counter (bytes 24-27 of the header, bumped by every commit)."""
    info = os.fstat(f.fileno())
    at = f.tell()
    f.seek(24)
    counter = f.read(4)
    f.seek(at)
    return info.st_size, info.st_mtime_ns, counter


def _exists(obstore: Any, store: Any, location: Any) -> bool:
    try:
        obstore.head(store, location.path)
    except FileNotFoundError:
        return False
    except Exception as exc:
        raise request_error(
            errors.RemoteWriteError, f"cannot look at {location.url!r}", exc, location,
            then="; nothing was published",
        ) from exc
    return True


def _check_object(
    obstore: Any,
    store: Any,
    location: Any,
    put: Mapping[str, Any],
    digests: list[bytes],
    result: UploadResult,
) -> None:
    """Compare the object now at the location with what was sent: its size; its ETag with the
    upload's answer and, for S3, with the MD5 digests of the parts."""
    try:
        meta = obstore.head(store, location.path)
    except Exception as exc:
        raise request_error(
            errors.RemoteWriteError, f"{location.url!r} was uploaded, but cannot be looked at",
            exc, location,
        ) from exc
    result.etag = meta.get("e_tag")
    if int(meta["size"]) != result.size:
        result.problems.append(
            f"the object is {int(meta['size']):,} bytes long, the file {result.size:,} bytes"
        )
    sent = put.get("e_tag")
    if sent and result.etag and sent != result.etag:
        result.problems.append(
            f"the object's ETag is {result.etag}, not {sent} as the upload answered: another "
            "program has written it meanwhile"
        )
        return
    scheme = location.url.partition("://")[0].lower()
    match = _S3_ETAG.match(result.etag or "")
    if scheme not in ("s3", "s3a") or match is None:
        return  # other services' ETags are not MD5 digests of the content
    digest, count = match.group(1), match.group(2)
    if count is None and len(digests) == 1:  # one part sent as one object: the MD5 of it
        expected = digests[0].hex()
    elif count is not None and int(count) == len(digests):  # the MD5 of the parts' MD5s
        expected = hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()
    else:
        return  # split otherwise than it was sent: nothing to compare with
    result.etag_checked = True
    if digest != expected:
        result.problems.append(
            f"the object's ETag {result.etag} is not the MD5 digest of the parts sent "
            f"({expected}); the object may differ from the file (a bucket that encrypts with "
            "KMS keys gives ETags that are not MD5 digests: compare with --verify)"
        )
