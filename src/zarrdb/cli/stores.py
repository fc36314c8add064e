"""Opening the stores the commands work on, validated before anything is written.

A location is a `.zarrdb` file, a `.zip` file, a directory or a URL. An existing file is
recognised by its content, a new one by its name. A URL whose name ends like a .zarrdb file
(s3://bucket/data.zarrdb, https://host/data.zarrdb) is a remote .zarrdb, read in place and
read-only through zarrdb's remote reader (obstore); any other URL is opened through fsspec.
Everything goes through the public API of zarrdb (`SQLiteStore`, `zarrdb.remote`) and of zarr
(`zarr.storage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import urllib.parse
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from zarrdb import errors, remote
from zarrdb._format import SQLITE_HEADER, ZARRDB_SUFFIXES
from zarrdb._zipfiles import ZIP_SUFFIXES
from zarrdb.cli.framework import BadInput, one_line

if TYPE_CHECKING:
    from zarr.abc.store import Store

    from zarrdb import SQLiteStore

STORE_KINDS = "a .zarrdb file, a .zip file, a directory or a URL"
# For the help of the commands that take a URL.
URL_HELP = (
    "A URL that ends in .zarrdb (s3://, gs://, az://, http(s)://) is read in place by range\n"
    "requests, read-only (pip install 'zarrdb[remote]'); --storage-option gives the endpoint,\n"
    "region, credentials. Any other URL is opened through fsspec."
)


def sniff(path: str) -> str:
    """'sqlite', 'zip', 'empty' or 'other' by the first bytes of an existing file."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except PermissionError:
        raise BadInput(f"{path}: permission denied (the file cannot be read)") from None
    if not head:
        return "empty"
    if head == SQLITE_HEADER:
        return "sqlite"
    if zipfile.is_zipfile(path):
        return "zip"
    return "other"


def require_zarrdb_path(path: str) -> None:
    """BadInput unless `path` is an existing file that starts like an SQLite database."""
    if not os.path.exists(path):
        raise BadInput(f"{path}: no such file; give the path of a .zarrdb file")
    if os.path.isdir(path):
        raise BadInput(
            f"{path}: is a directory, not a .zarrdb file (to turn a directory store into one: "
            f"zarrdb copy {path} OUT.zarrdb)"
        )
    kind = sniff(path)
    if kind == "empty":
        raise BadInput(f"{path}: is an empty file, not a .zarrdb file")
    if kind == "zip":
        raise BadInput(
            f"{path}: is not a .zarrdb file (it is a zip file: to turn it into one, "
            f"zarrdb copy {path} OUT.zarrdb)"
        )
    if kind != "sqlite":
        raise BadInput(f"{path}: is not a .zarrdb file (not an SQLite database)")


def open_zarrdb(
    path: str, *, busy_timeout: float, writable: bool = False, checking: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> SQLiteStore:  # fmt: skip
    """An open SQLiteStore on the existing file `path` (or, read-only, on a URL), validated
    before anything is written.

    The file is always opened read-only first, so a file that is not a SQLiteStore file (even
    an empty SQLite database) is never initialised or modified; BadInput says why (`checking`:
    see ensure_open). The command line reads files from anyone: SQLite checks the cells of
    every page it loads (check_pages)."""
    from zarrdb import SQLiteStore

    if remote.is_url(path):
        if writable:
            raise BadInput(f"{path}: .zarrdb files at a URL are read-only")
        return open_remote_zarrdb(path, storage_options or {}, checking=checking)
    require_zarrdb_path(path)
    store = SQLiteStore(path, read_only=True, busy_timeout=busy_timeout, check_pages=True)
    with _closed_on_error(store):
        ensure_open(store, path, checking=checking)
    if not writable:
        return store
    store.close()
    store = SQLiteStore(path, busy_timeout=busy_timeout, check_pages=True)
    with _closed_on_error(store):
        ensure_open(store, path)
    return store


@contextlib.contextmanager
def _closed_on_error(store: Store) -> Iterator[None]:
    try:
        yield
    except BaseException:
        store.close()
        raise


def ensure_open(store: SQLiteStore, path: str, *, checking: bool = False) -> None:
    """Open `store` now; what makes the file unusable becomes BadInput. For `zarrdb check`
    (`checking`), damage and a format this zarrdb cannot read are raised as they are, to be
    listed as problems."""
    try:
        store.ensure_open()
    except errors.Zarr2FileError:
        raise BadInput(zarr2_file(path)) from None
    except errors.NotAZarrDBError:
        raise BadInput(
            f"{path}: is not a .zarrdb file (an SQLite database without the SQLiteStore tables)"
        ) from None
    except errors.UnclosedFileError as exc:
        raise BadInput(str(exc)) from None
    except errors.FormatError as exc:
        if checking:
            raise
        raise BadInput(str(exc)) from None
    except errors.NotADatabaseError:
        raise BadInput(f"{path}: is not a .zarrdb file (not an SQLite database)") from None
    except errors.DatabaseCorruptError as exc:
        if checking:
            raise
        raise BadInput(
            f"{path}: the file is damaged ({exc.sqlite_message}); 'zarrdb check {path}' lists "
            "what SQLite finds"
        ) from None
    except errors.DatabaseLockedError:
        raise BadInput(
            f"{path}: the database is locked by another process (waited "
            f"{store.options['busy_timeout']:g} s); retry when it is done, or wait longer with "
            "--busy-timeout SECONDS"
        ) from None
    except errors.ReadOnlyError as exc:
        if exc.extended_code == errors.SQLITE_READONLY_ROLLBACK:
            raise BadInput(hot_journal(path, exc)) from None
        raise BadInput(
            f"{path}: permission denied (check the permissions of the file and its folder)"
        ) from None
    except PermissionError:
        raise BadInput(
            f"{path}: permission denied (check the permissions of the file and its folder)"
        ) from None


def zarr2_file(path: str) -> str:
    """What a command that needs a SQLiteStore file says of a file of zarr-python 2's."""
    return (
        f"{path}: was written by zarr-python 2's SQLiteStore and is not a SQLiteStore 1.0 "
        f"file: convert it in place with 'zarrdb upgrade {path}' (--to-v3 also converts its "
        f"zarr v2 metadata to v3), or copy it into a new file with 'zarrdb copy {path} "
        "NEW.zarrdb'"
    )


def hot_journal(path: str, exc: BaseException) -> str:
    """What a read-only command says of a file left with a hot journal that the store would not
    roll back (one of another user's, or one it may not write): the store's own reason."""
    reason = str(exc).split("cannot be read: ", 1)[-1]
    return f"{path}: cannot be read: {reason}"


# --- .zarrdb files at a URL (read-only) ---------------------------------------------------------


def names_zarrdb(url: str) -> bool:
    """Whether `url` is one zarrdb reads remotely and its name ends like a .zarrdb file."""
    return remote.is_url(url) and urllib.parse.urlsplit(url).path.lower().endswith(
        ZARRDB_SUFFIXES
    )


def require_local(path: str, command: str) -> None:
    """BadInput if `path` is a URL: .zarrdb files are written locally (`command` would)."""
    if "://" not in path:
        return
    if command in ("mv", "vacuum", "upgrade"):
        what = (
            f"'zarrdb {command}' changes the file: download it (zarrdb copy {path} "
            "local.zarrdb), change the local copy, and upload that"
        )
    else:
        what = f"'zarrdb {command}' writes a local .zarrdb file: give a local path, then upload it"
    raise BadInput(f"{path}: .zarrdb files at a URL are read-only, and {what}")


def remote_options(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The storage_options for reading `url`: `max_retries=N` is obstore's retry_config, and
    plain HTTP is allowed when the URL, or the endpoint (an option, else a variable obstore
    reads: AWS_ENDPOINT, ...), says http://, unless an option or a variable says whether to
    allow it."""
    out = dict(options)
    if "max_retries" in out:
        out["retry_config"] = {"max_retries": int(out.pop("max_retries"))}
    given = [(key.lower(), value) for key, value in out.items()]
    env = [
        (name.lower(), value)
        for name, value in os.environ.items()
        if name.startswith(("AWS_", "GOOGLE_", "AZURE_"))
    ]
    if any(key.endswith("allow_http") for key, _ in given + env):
        return out
    endpoints = [v for k, v in given if "endpoint" in k] or [v for k, v in env if "endpoint" in k]
    if any(str(where).lower().startswith("http://") for where in [url, *endpoints]):
        out["allow_http"] = True
    return out


@contextlib.contextmanager
def remote_errors(url: str) -> Iterator[None]:
    """What makes a .zarrdb at `url` unreadable, as BadInput (a failed request is left to
    the framework: one line, exit code 2)."""
    try:
        yield
    except ImportError as exc:
        raise BadInput(f"{url}: {exc}") from None
    except FileNotFoundError:
        raise BadInput(
            f"{url}: no such file (nothing at this URL; check the bucket and the path, and "
            "the endpoint or region given with --storage-option)"
        ) from None
    except errors.UnclosedFileError as exc:
        raise BadInput(str(exc)) from None
    except errors.NotADatabaseError:
        raise BadInput(f"{url}: is not a .zarrdb file (not an SQLite database)") from None
    except ValueError as exc:
        text = one_line(str(exc))
        raise BadInput(
            f"argument --storage-option: {text}" if "storage_options" in text else text
        ) from None


def open_remote_zarrdb(
    url: str, storage_options: Mapping[str, Any], *, checking: bool = False
) -> SQLiteStore:
    """An open, read-only SQLiteStore on the .zarrdb at `url`; BadInput says why it cannot
    be read."""
    from zarrdb import SQLiteStore

    with remote_errors(url):
        store = SQLiteStore(
            url, read_only=True, storage_options=remote_options(url, storage_options)
        )
        with _closed_on_error(store):
            ensure_open(store, url, checking=checking)
    return store


_S = TypeVar("_S", bound="Store")


@contextlib.contextmanager
def closing(store: _S) -> Iterator[_S]:
    try:
        yield store
    finally:
        store.close()


# --- any kind of store ---------------------------------------------------------------------------


@dataclass
class Location:
    """Where a store is, what kind it is, and whether it exists; a URL's storage_options."""

    path: str
    kind: str  # "zarrdb" | "zip" | "dir" | "url" (fsspec)
    exists: bool
    storage_options: dict[str, Any] = field(default_factory=dict)

    @property
    def remote(self) -> bool:
        """A .zarrdb file at a URL: read in place (read-only) as a source, uploaded whole as a
        destination."""
        return self.kind == "zarrdb" and "://" in self.path

    @property
    def local(self) -> bool:
        return self.kind != "url" and not self.remote


def classify(path: str, role: str, storage_options: Mapping[str, Any] | None = None) -> Location:
    """The store at `path`; `role` is "source" (must exist) or "destination"."""
    if "://" in path:
        options = dict(storage_options or {})
        if names_zarrdb(path):
            # As a destination: an upload of a whole local .zarrdb (cli/publish.py).
            return Location(path, "zarrdb", role == "source", options)
        return Location(path, "url", True, options)
    if os.path.isdir(path):
        return Location(path, "dir", True)
    lower = path.lower()
    if os.path.exists(path):
        kind = sniff(path)
        if kind == "sqlite":
            return Location(path, "zarrdb", True)
        if kind == "zip":
            return Location(path, "zip", True)
        if (
            kind == "empty"
            and role == "destination"
            and lower.endswith(ZARRDB_SUFFIXES + ZIP_SUFFIXES)
        ):
            return Location(path, "zip" if lower.endswith(ZIP_SUFFIXES) else "zarrdb", False)
        raise BadInput(
            f"{path}: is neither a .zarrdb file, a .zip file nor a directory"
            + ("; choose another destination" if role == "destination" else "")
        )
    if role == "source":
        raise BadInput(f"{path}: no such file or directory; give {STORE_KINDS}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise BadInput(f"{path}: the folder {parent} does not exist; create it first")
    if lower.endswith(ZARRDB_SUFFIXES):
        return Location(path, "zarrdb", False)
    if lower.endswith(ZIP_SUFFIXES):
        return Location(path, "zip", False)
    return Location(path, "dir", False)


async def open_store(
    where: Location, *, at: str | None = None, read_only: bool, busy_timeout: float,
    zip_mode: str = "r", zarr2: bool = False,
) -> Store:  # fmt: skip
    """The zarr store for `where`, opened at the path `at` (default: where it is; a copy
    writes to a temporary sibling). `zarr2`: a file of zarr-python 2's SQLiteStore is opened
    read-only as it is (a copy's source), instead of refused."""
    from zarr.storage import LocalStore, ZipStore

    at = where.path if at is None else at
    if where.remote:
        return open_remote_zarrdb(where.path, where.storage_options)
    if where.kind == "zarrdb":
        from zarrdb import SQLiteStore
        from zarrdb.zarr2 import Zarr2SQLiteStore, is_zarr2_file

        if zarr2 and read_only and is_zarr2_file(at):
            old = Zarr2SQLiteStore(at, busy_timeout=busy_timeout, check_pages=True)
            with _closed_on_error(old):
                ensure_open(old, at)
            return old
        if os.path.exists(at) and os.path.getsize(at) > 0:
            return open_zarrdb(at, busy_timeout=busy_timeout, writable=not read_only)
        store = SQLiteStore(at, read_only=read_only, busy_timeout=busy_timeout, check_pages=True)
        with _closed_on_error(store):
            ensure_open(store, at)
        return store
    if where.kind == "zip":
        try:
            return await ZipStore.open(at, mode="r" if read_only else zip_mode, read_only=read_only)
        except (zipfile.BadZipFile, OSError) as exc:
            raise BadInput(f"{where.path}: cannot be opened as a zip file ({exc})") from None
    if where.kind == "dir":
        if read_only:
            return LocalStore(at, read_only=True)
        from zarrdb._confined import ConfinedLocalStore

        return ConfinedLocalStore(at, read_only=False)  # no write leaves it, links swapped or not
    try:
        import fsspec  # noqa: F401
    except ImportError:
        raise BadInput(
            f"{where.path}: URLs are opened through fsspec, which is not installed "
            "(pip install fsspec, plus the package for the protocol, e.g. s3fs)"
        ) from None
    from zarr.storage import FsspecStore

    options = dict(where.storage_options)
    if not read_only and where.path.split("://", 1)[0] in ("file", "local"):
        options["auto_mkdir"] = True  # fsspec's local file system makes no folders by itself
    try:
        return FsspecStore.from_url(
            where.path, storage_options=options or None, read_only=read_only
        )
    except (ImportError, ValueError, TypeError) as exc:
        raise BadInput(
            f"{where.path}: cannot be opened through fsspec ({one_line(str(exc))})"
        ) from None


async def key_sizes(store: Store, where: Location, prefix: str) -> list[tuple[str, int]]:
    """(key, size) of every key below `prefix`, sorted; values are not read."""
    from zarrdb import SQLiteStore

    if isinstance(store, SQLiteStore):
        return store.key_sizes(prefix)
    if where.kind == "zip":
        with zipfile.ZipFile(where.path) as zf:
            sizes = {
                info.filename: info.file_size
                for info in zf.infolist()
                if info.filename.startswith(prefix) and not info.filename.endswith("/")
            }
        return sorted(sizes.items())
    keys = sorted({key async for key in store.list_prefix(prefix)})
    out: list[int] = []
    for start in range(0, len(keys), 512):
        out.extend(await asyncio.gather(*(store.getsize(k) for k in keys[start : start + 512])))
    return list(zip(keys, out))

