"""The two ends of a copy: what `zarrdb.copy` makes of a source and a destination (a store
object, a `StorePath`, a path, a URL, what zarr takes for a store), which stores it opened
itself (and closes), and where a new destination is built before it is put in place."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from zarrdb import _copy_engine as engine
from zarrdb import _compat, _places, _zipfiles
from zarrdb._format import SQLITE_HEADER, ZARRDB_SUFFIXES

if TYPE_CHECKING:
    from zarr.abc.store import Store

IfExists = Literal["raise", "replace", "skip"]


@dataclass
class Source:
    store: Store
    prefix: str  # of a StorePath
    owned: bool
    zip_entries: list[tuple[str, int]] | None = None

    def close(self) -> None:
        if self.owned:
            self.store.close()


@dataclass
class Dest:
    store: Store | None  # None: a new zip file, written by `zip_path`
    prefix: str
    owned: bool
    kind: str  # "zarrdb" | "zip" | "ozx" | "dir" | "other"
    existed: bool  # whether what it names existed before (False: it is built at `temporary`)
    temporary: str | None = None
    final: str | None = None
    zip_target: engine.ZipTarget | None = None

    @property
    def flavour(self) -> str:
        """The key rules of what the destination writes: a zip is unzipped anywhere."""
        if self.kind in ("zip", "ozx"):
            return "windows"
        if self.kind == "dir":
            return "windows" if os.name == "nt" else "posix"
        return "store"

    def put_in_place(self) -> None:
        if self.owned and self.store is not None:
            self.store.close()
        if self.temporary is not None and self.final is not None:
            if os.path.isdir(self.final) and not os.path.islink(self.final):
                os.rename(self.final, os.path.join(os.path.dirname(self.temporary), "replaced"))
            os.replace(self.temporary, self.final)
            _places.discard(self.temporary)

    def abandon(self) -> None:
        if self.zip_target is not None:
            self.zip_target.abandon()
        if self.owned and self.store is not None:
            self.store.close()
        if self.temporary is not None:
            _places.discard(self.temporary)


def _local_path(value: Any) -> str | None:
    """The local path a str or PathLike names, or None (a URL, or not a path at all)."""
    if isinstance(value, os.PathLike) and not type(value).__module__.startswith("upath"):
        return str(os.fspath(value))  # a UPath may name a URL: zarr decides
    if isinstance(value, str) and "://" not in value:
        return value
    return None


def _sniff(path: str) -> str:
    """'zarrdb', 'zip' or 'other' by the first bytes of an existing file."""
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_HEADER))
    if head == SQLITE_HEADER:
        return "zarrdb"
    import zipfile

    return "zip" if zipfile.is_zipfile(path) else "other"


async def open_source(source: Any) -> Source:
    from zarr.abc.store import Store
    from zarr.storage import LocalStore, StorePath, ZipStore

    from zarrdb import SQLiteStore, remote

    if isinstance(source, StorePath):
        await _compat.ensure_open(source.store)
        return await _checked_source(source.store, source.path, owned=False)
    if isinstance(source, Store):
        await _compat.ensure_open(source)
        return await _checked_source(source, "", owned=False)
    local = _local_path(source)
    if local is not None:
        if os.path.isdir(local):
            store: Store = LocalStore(local, read_only=True)
        elif not os.path.exists(local):
            raise FileNotFoundError(f"{local}: no such file or directory")
        elif _sniff(local) == "zarrdb":
            from zarrdb.zarr2 import Zarr2SQLiteStore, is_zarr2_file

            store = (Zarr2SQLiteStore if is_zarr2_file(local) else SQLiteStore)(
                local, read_only=True
            )
        elif _sniff(local) == "zip":
            entries = _zipfiles.inspect_zip(local)
            store = await ZipStore.open(local, mode="r", read_only=True)
            return Source(store, "", True, entries)
        else:
            raise ValueError(f"{local}: is neither a .zarrdb file, a zip file nor a directory")
        await _compat.ensure_open(store)
        return Source(store, "", True)
    if isinstance(source, str) and remote.is_url(source):
        lower = source.split("?", 1)[0].lower()
        if lower.endswith(ZARRDB_SUFFIXES):
            remote_store = SQLiteStore(source, read_only=True)
            await _compat.ensure_open(remote_store)
            return Source(remote_store, "", True)
        if _zipfiles.is_zip_name(lower):
            raise ValueError(f"{source}: a zip file at a URL is not read in place; download it")
    store_path = await _compat.store_path(source, mode="r")  # what zarr's own functions accept
    return await _checked_source(store_path.store, store_path.path, owned=True)


async def _checked_source(store: Store, prefix: str, *, owned: bool) -> Source:
    from zarr.storage import ZipStore

    entries = None
    if isinstance(store, ZipStore) and store.path is not None:
        entries = _zipfiles.inspect_zip(store.path)
    return Source(store, prefix, owned, entries)


async def open_dest(dest: Any, if_exists: IfExists, dest_path: str | None) -> Dest:
    from zarr.abc.store import Store
    from zarr.storage import LocalStore, StorePath

    from zarrdb import SQLiteStore
    from zarrdb._confined import ConfinedLocalStore

    if isinstance(dest, StorePath | Store):
        store = dest.store if isinstance(dest, StorePath) else dest
        if store.read_only:
            raise ValueError(f"{store}: the destination store is read-only")
        await _compat.ensure_open(store)
        kind = _kind_of(store)
        prefix = dest.path if isinstance(dest, StorePath) else ""
        return Dest(store, prefix, False, kind, existed=True)
    local = _local_path(dest)
    if local is None:
        single_file = ZARRDB_SUFFIXES + _zipfiles.ZIP_SUFFIXES
        if isinstance(dest, str) and dest.split("?", 1)[0].lower().endswith(single_file):
            raise ValueError(
                f"{dest}: a .zarrdb or zip file is written locally; upload it when complete "
                "(`zarrdb copy FILE URL` uploads a .zarrdb)"
            )
        store_path = await _compat.store_path(dest, mode="a")
        return Dest(store_path.store, store_path.path, True, "other", existed=True)
    lower = local.lower()
    exists = os.path.lexists(local)
    if exists and os.path.isdir(local):
        kind = "dir"
    elif exists:
        kind = {"zarrdb": "zarrdb", "zip": "ozx" if lower.endswith(".ozx") else "zip"}.get(
            _sniff(local), ""
        )
        if not kind:
            raise ValueError(f"{local}: is neither a .zarrdb file, a zip file nor a directory")
    elif lower.endswith(ZARRDB_SUFFIXES):
        kind = "zarrdb"
    elif _zipfiles.is_zip_name(lower):
        kind = "ozx" if lower.endswith(".ozx") else "zip"
    else:
        kind = "dir"
    if kind in ("zip", "ozx"):
        if exists and not (if_exists == "replace" and not (dest_path or "").strip("/")):
            raise FileExistsError(
                f"{local}: exists already, and a zip file is written whole: give a new file, or "
                "replace it entirely (if_exists='replace', dest_path='')"
            )
        temporary = _places.temporary_sibling(local)
        _places.make_private(temporary)
        return Dest(None, "", True, kind, exists, temporary, local)
    if exists:
        # An existing directory may hold links, and someone may swap one in while the copy
        # writes: no write leaves it (_confined).
        store = SQLiteStore(local) if kind == "zarrdb" else ConfinedLocalStore(local)
        await _compat.ensure_open(store)
        return Dest(store, "", True, kind, existed=True, final=local)
    temporary = _places.temporary_sibling(local)
    _places.make_private(temporary)
    try:
        store = SQLiteStore(temporary) if kind == "zarrdb" else LocalStore(temporary)
        await _compat.ensure_open(store)
    except BaseException:
        _places.discard(temporary)
        raise
    return Dest(store, "", True, kind, False, temporary, local)


def _kind_of(store: Store) -> str:
    """What a given store writes to, for the rules its keys follow."""
    from zarr.storage import LocalStore, ZipStore

    from zarrdb import SQLiteStore

    if isinstance(store, ZipStore):
        return "zip"
    if isinstance(store, LocalStore):
        return "dir"
    return "zarrdb" if isinstance(store, SQLiteStore) else "other"
