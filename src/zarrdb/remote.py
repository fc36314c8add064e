"""Reading a .zarrdb file straight from object storage or a web server, by byte ranges.

    SQLiteStore("s3://bucket/data.zarrdb", read_only=True, storage_options={"region": ...})
    SQLiteStore.from_object_store(obstore_store, "path/data.zarrdb")

The file is read in place, read-only: SQLite's reads go through the engine's remote VFS to a
block cache shared by every thread of the store, filled by range requests made with obstore
(`pip install "zarrdb[remote]"`). The object's ETag (or, without one, its modification time)
is pinned when the store opens; if the object is replaced meanwhile, the next request fails
with RemoteFileChangedError instead of mixing two versions.

Everything here is public API for the command line as well: `is_url`, `parse_options`,
`open_remote` (the checked, opened file), `download` (a byte-for-byte copy) and `upload` (a
closed file published byte for byte, from zarrdb._upload).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from zarrdb import _format, _log, _tunables, errors
from zarrdb._core import RemoteDatabase, RemoteFile
from zarrdb._remote_location import (  # public here (zarrdb.remote), defined there
    DEFAULT_TIMEOUTS,
    MIB,
    SCHEMES,
    BlockCache,
    RemoteLocation,
    load_obstore,
    is_url,
    parse_options,
    request_error,
)
from zarrdb._remote_threads import (  # ReadPool and interrupt_requests are public here
    ReadPool,
    Slots,
    check_closing,
    interrupt_requests,
    interruptible,
    schedule,
)

__all__ = [
    "DEFAULT_TIMEOUTS",
    "SCHEMES",
    "UPLOAD_SCHEMES",
    "BlockCache",
    "RemoteLocation",
    "ReadPool",
    "RemoteObject",
    "UploadResult",
    "download",
    "interrupt_requests",
    "is_url",
    "open_remote",
    "parse_options",
    "release_caches",
    "upload",
]

class _WrongLength(Exception):
    """A body of another length than the range asked for."""


def _body(result: Any, expected: int) -> Any:
    """The body of an obstore GetResult, which must be `expected` bytes long.

    Read as a stream, so that a body longer than asked (a server's Content-Length far beyond
    its Content-Range) fails once it passes `expected` bytes, with about that much buffered,
    instead of being taken whole first. _WrongLength otherwise."""
    stream = result.stream(min_chunk_size=max(expected, 1))
    data = next(stream, b"")  # the whole body, or its first `expected` bytes and a little more
    if len(data) == expected and next(stream, None) is None:
        return data
    if len(data) < expected:
        raise _WrongLength(
            f"the answer is shorter than the {expected:,} bytes asked for ({len(data):,} bytes)"
        )
    raise _WrongLength(f"the answer is longer than the {expected:,} bytes asked for")


class RemoteObject:
    """An opened remote file: one request reads its start and its version (ETag), which is
    pinned; `connect()` gives read connections that share one block cache."""

    def __init__(
        self, location: RemoteLocation, cache: BlockCache, *, expect_etag: str | None = None
    ) -> None:
        obstore = load_obstore()
        self.location = location
        self.url = location.url
        self.pid = os.getpid()
        self._get = obstore.get
        self._store = location.object_store()
        self._changed = (obstore.exceptions.PreconditionError, FileNotFoundError)
        # Requests in flight for this file at most (the threads of every store reading it).
        self._slots = Slots(cache.max_requests)
        # The byte range of the last request that failed, until it is asked for again.
        self._failed: tuple[int, int] | None = None
        try:
            meta, head = interruptible(
                lambda: self._get_range(0, cache.first_read), location.deadline()
            )
        except FileNotFoundError:
            raise FileNotFoundError(f"no such SQLiteStore file: {self.url!r}") from None
        except errors.ClosedError:
            raise  # the store closed while its opening request waited: nothing went wrong
        except Exception as exc:
            raise request_error(
                errors.RemoteReadError, f"cannot open {self.url!r}", exc, location
            ) from exc
        self.size: int = int(meta["size"])
        if self.size > _LARGEST_FILE:
            # A claim (a Content-Range total up to 2**64 - 1) no SQLite file can make: refused
            # before it sizes anything.
            raise errors.RemoteReadError(
                f"{self.url!r}: the server says the file is {self.size:,} bytes long, more than "
                f"an SQLite database can be ({_LARGEST_FILE:,} bytes)",
                code=10,
                filename=self.url,
            )
        self.etag: str | None = meta.get("e_tag")
        self.version: str | None = meta.get("version")
        self.last_modified = meta.get("last_modified")
        if expect_etag is not None and self.etag != expect_etag:
            raise errors.RemoteFileChangedError(
                f"{self.url!r} changed since the store was opened elsewhere (ETag {expect_etag} "
                f"then, {self.etag} now); open the store again to read the new version",
                code=10,
                filename=self.url,
            )
        _check_header(bytes(memoryview(head)[:100]), self.url, self.size)
        self.head = head  # the first bytes of the file, as the opening request returned them
        self.file = RemoteFile(
            self.url,
            self.size,
            self.fetch,
            block_size=cache.block_size,
            cache_size=cache.size,
            readahead=cache.readahead,
            min_request=cache.min_request,
            schedule=schedule,
            head=head,
            waiting=check_closing,
        )

    def _get_range(
        self, offset: int, length: int, *, pinned: bool = False
    ) -> tuple[Mapping[str, Any], Any]:
        """(meta, body) of one request for bytes [offset, offset + length), fewer at the end of
        the object; `pinned`: of the version opened, else RemoteFileChangedError."""
        options: dict[str, Any] = {"range": (offset, offset + length)}
        if pinned and self.etag:
            options["if_match"] = self.etag
        result = self._get(self._store, self.location.path, options=options)
        meta = result.meta
        # Servers that ignore If-Match (or send no ETag) still say which version they send:
        # another one fails before its body is read.
        if pinned and (
            int(meta["size"]) != self.size
            or (
                meta.get("e_tag") != self.etag
                if self.etag
                else meta.get("last_modified") != self.last_modified
            )
        ):
            raise self._changed_error()
        return meta, _body(result, min(length, int(meta["size"]) - offset))

    def fetch(self, offset: int, length: int) -> Any:
        """Bytes [offset, offset + length) of the version opened, or RemoteReadError."""
        failed = self._failed
        if failed is not None and offset < failed[1] and failed[0] < offset + length:
            # obstore's own retries (of transient errors, within the client's timeouts) are
            # not seen here; this one is zarrdb's: a reader asking again for bytes whose
            # request failed (its read-ahead, or a read the caller repeats).
            self._failed = None
            _log.remote_logger.info(
                "asking again for bytes %s to %s of %r, whose last request failed",
                f"{offset:,}",
                f"{offset + length - 1:,}",
                self.url,
            )
        self._slots.acquire()

        def request() -> tuple[Mapping[str, Any], Any]:
            # The slot is given back when the request ends, not when its reader stops waiting
            # (an abandoned request is still in flight).
            try:
                return self._get_range(offset, length, pinned=True)
            finally:
                self._slots.release()

        try:
            return interruptible(request, self.location.deadline())[1]
        except (errors.RemoteFileChangedError, errors.ClosedError):
            raise
        except self._changed as exc:
            raise self._changed_error() from exc
        except Exception as exc:
            error = request_error(
                errors.RemoteReadError,
                f"cannot read bytes {offset:,} to {offset + length - 1:,} of {self.url!r}",
                exc,
                self.location,
                extended_code=266,  # SQLITE_IOERR_READ
            )
            self._failed = (offset, offset + length)
            _log.remote_logger.info("a request failed: %s", error)
            raise error from exc

    def _changed_error(self) -> errors.RemoteFileChangedError:
        return errors.RemoteFileChangedError(
            f"{self.url!r} was replaced or removed after it was opened (ETag {self.etag}); "
            "nothing of the new version was read. Open the store again to read the new version",
            code=10,
            extended_code=266,
            filename=self.url,
        )

    def connect(self, *, cache_size: int | None = None) -> RemoteDatabase:
        """A read connection (one per thread); cache_size is SQLite's page cache in KiB."""
        return RemoteDatabase(self.file, cache_size=cache_size)

    def stats(self) -> dict[str, int]:
        """The block cache's counters: requests, bytes, hits, misses, waits, failures, ..."""
        return self.file.stats()


# The remote files this process opened last, most recently used at the end. A store opened again
# on the same version of a file (a dask task unpickling its store, or a program opening the same
# URL twice) shares its block cache instead of starting cold; a store unpickled with the version
# it was opened at does so without any request. It keeps _tunables.REMOTE_SHARED_FILES.
_shared: OrderedDict[tuple[Any, ...], RemoteObject] = OrderedDict()
_shared_lock = threading.Lock()


def _forked() -> None:
    # A thread of the parent may have held the lock at fork(); the child opens its own files.
    global _shared_lock
    _shared_lock = threading.Lock()
    _shared.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forked)


def open_shared(
    location: RemoteLocation, cache: BlockCache, *, expect_etag: str | None = None
) -> RemoteObject:
    """The opened file at `location`: one of the last _tunables.REMOTE_SHARED_FILES opened in
    this process if it is the same version (the ETag pinned, or found by an opening request), else a new one."""
    key = (location.key(), cache)
    with _shared_lock:
        known = _shared.get(key)
        if known is not None and known.pid != os.getpid():
            _shared.clear()  # inherited through fork(): the child opens its own
            known = None
        if known is not None and expect_etag is not None and known.etag == expect_etag:
            _shared.move_to_end(key)
            return known
    opened = RemoteObject(location, cache, expect_etag=expect_etag)
    with _shared_lock:
        known = _shared.get(key)
        if (
            known is not None
            and opened.etag
            and (known.etag, known.size) == (opened.etag, opened.size)
        ):
            _shared.move_to_end(key)
            return known
        _shared[key] = opened
        _shared.move_to_end(key)
        while len(_shared) > _tunables.REMOTE_SHARED_FILES:
            _shared.popitem(last=False)
    return opened


def release_caches() -> None:
    """Forget the remote files this process keeps for reuse.

    A process keeps the last four remote files it opened, so that a store opened again on the
    same version (a dask task unpickling its store) starts with a warm cache. Their block
    caches are freed once no open store uses them.
    """
    with _shared_lock:
        _shared.clear()


# The largest SQLite database: 4,294,967,294 pages of 65,536 bytes.
_LARGEST_FILE = 4_294_967_294 * 65_536


def _check_header(header: bytes, url: str, size: int) -> None:
    """SQLite's header, not in WAL mode, and the object's size what the header says: SQLite
    bounds every read by the size the VFS gives it, which is the server's word."""
    if header[:16] != _format.SQLITE_HEADER:
        raise errors.NotADatabaseError(
            f"{url!r} is not an SQLite database (is this a .zarrdb file?)",
            code=26,
            filename=url,
        )
    if len(header) >= 20 and (header[18] == 2 or header[19] == 2):
        raise errors.UnclosedFileError(
            f"{url!r} is in WAL mode: the program that wrote it has not closed it, and its "
            "latest writes may be in a -wal file that is not read remotely. Close the store "
            "that writes it (zarrdb leaves a closed file in DELETE mode), then publish the file"
        )
    page_size = int.from_bytes(header[16:18], "big") if len(header) >= 18 else 0
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big") if len(header) >= 100 else 0
    # The page count is SQLite's to trust only where the change counter it was written with
    # (bytes 24-27) is the one it was valid for (92-95); every SQLite since 3.7.0 writes both.
    trusted = len(header) >= 100 and header[24:28] == header[92:96] and pages > 0
    if not trusted or pages * page_size != size:
        said = f"{pages:,} pages of {page_size:,} bytes" if trusted else "no page count it trusts"
        raise errors.DatabaseCorruptError(
            f"{url!r}: the server says the file has {size:,} bytes, but its header says "
            f"{said}: a partial upload, another object, or a server that is not to be trusted",
            code=errors.SQLITE_CORRUPT,
            filename=url,
        )


def open_remote(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    block_cache: BlockCache | Mapping[str, int] | None = None,
) -> RemoteObject:
    """The remote file at `url`, opened and checked (SQLite header, not in WAL mode)."""
    return RemoteObject(
        RemoteLocation(url, storage_options=storage_options), BlockCache.from_options(block_cache)
    )


def download(
    url: str,
    dest: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    chunk_size: int = _tunables.DOWNLOAD_PIECE_BYTES,
) -> int:
    """Copy a remote `.zarrdb` file byte for byte to a local file.

    The requests all ask for the version seen first. The header is checked first, so a file
    still in WAL mode is refused. A failure leaves no `dest` behind.

    Parameters
    ----------
    url
        The file's URL (`s3://`, `gs://`, `az://`, `http(s)://`).
    dest
        The local file to write; it must not exist.
    storage_options
        obstore's settings, as for `SQLiteStore`.
    chunk_size
        Bytes per request (default 16 MiB).

    Returns
    -------
    int
        The bytes written.

    Raises
    ------
    FileExistsError
        If `dest` exists.
    zarrdb.errors.UnclosedFileError
        If the remote file is still in WAL mode.
    zarrdb.errors.DiskFullError
        If the size the server states is more than the folder of `dest` has free (before
        anything is downloaded).
    zarrdb.errors.RemoteReadError
        If a request fails (`RemoteFileChangedError` if the file is replaced meanwhile).
    """
    target = os.fspath(dest)
    if os.path.exists(target):
        raise FileExistsError(f"{target!r} exists already")
    remote = RemoteObject(
        RemoteLocation(url, storage_options=storage_options),
        BlockCache(first_read=min(chunk_size, 1 * MIB)),
    )
    # A server may state any size, and the header agree with it: a terabyte of zeros would
    # download for hours to fail at the end.
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(target))).free
    if remote.size > free:
        raise errors.DiskFullError(
            f"{url}: downloading it needs {remote.size:,} bytes, and the folder of {target!r} "
            f"has {free:,} free",
            code=errors.SQLITE_FULL,
            filename=target,
        )
    written = 0
    try:
        with open(target, "xb") as out:
            # The opening request read the start of the file already: it is not fetched again.
            head = memoryview(remote.head)[: remote.size]
            out.write(head)
            written = len(head)
            while written < remote.size:
                length = min(chunk_size, remote.size - written)
                data = remote.fetch(written, length)
                out.write(memoryview(data))
                written += length
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(target)
        raise
    return written


# Publishing a closed file (its own module: writing, where everything above reads).
from zarrdb._upload import UPLOAD_SCHEMES, UploadResult, upload  # noqa: E402
