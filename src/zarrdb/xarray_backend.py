"""xarray opens `.zarrdb` files by name: the `zarrdb` backend (the `xarray.backends` entry point).

    xr.open_dataset("data.zarrdb")
    xr.open_dataset("s3://bucket/data.zarrdb", backend_kwargs={"storage_options": {...}})
    xr.open_dataset("any-name.db", engine="zarrdb")
    xr.open_datatree("data.zarrdb")

The file is opened read-only with `SQLiteStore` and the rest is xarray's own zarr backend:
`group=`, `consolidated=`, `chunks=` and the `decode_*` options mean what they mean there. The
store is closed when the dataset (or tree) is closed, lazily loaded (dask) ones included.
Writing stays `ds.to_zarr(SQLiteStore(path))`.

xarray reads every dimension coordinate whole when it opens a dataset (to build its index),
at the size its metadata declares, whatever the file holds: a 2.5 KB file declaring a
coordinate of 1.25e8 values made it allocate 1.9 GB. So the declared size of those is checked
first against `max_coordinate_bytes` (MAX_COORDINATE_BYTES unless given; None: no limit).
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from xarray.backends import BackendEntrypoint, ZarrBackendEntrypoint

from zarrdb import _compat, _format, errors
from zarrdb import remote as _remote
from zarrdb._live_stores import open_in_this_process
from zarrdb._string_chunks import CheckedStrings
from zarrdb.store import SQLiteStore

__all__ = ["ZarrDBBackendEntrypoint"]

SUFFIX = ".zarrdb"
_PROTOCOL = "zarrdb:"  # zarrdb::PATH, zarrdb://group::PATH (zarrdb.filesystem)
MAX_COORDINATE_BYTES = 256 * 1024 * 1024
"""What the dimension coordinates of one open may declare together, in bytes, by default: 32
million float64 values (a time axis of a second per step for a year is 31.5 million)."""
# Bytes counted per value of a type without a fixed size (strings of any length): a Python
# object of a short string, plus what the fill value holds (_value_bytes).
_VARIABLE_ITEM_BYTES = 64


def names_zarrdb(name: str) -> bool:
    """Whether a local path or a URL that zarrdb reads ends in `.zarrdb`."""
    if _remote.is_url(name):
        return urllib.parse.urlsplit(name).path.lower().endswith(SUFFIX)
    return name.lower().endswith(SUFFIX)


def is_sqlitestore_file(path: str) -> bool:
    """Whether `path` is an existing file whose header is SQLite's with SQLiteStore's
    application id."""
    if not os.path.isfile(path):
        return False
    if open_in_this_process(path):
        # A store of this process has it open, so it is one; and reading its header here
        # would drop that store's locks (closing any descriptor of a file drops every POSIX
        # lock the process holds on it).
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(72)
    except OSError:
        return False
    return (
        len(head) == 72
        and head[:16] == _format.SQLITE_HEADER
        and int.from_bytes(head[68:72], "big") == _format.APPLICATION_ID
    )


class ZarrDBBackendEntrypoint(BackendEntrypoint):
    """Opens `.zarrdb` files (and their URLs) read-only through `SQLiteStore`, then reads them
    with xarray's zarr backend.

    Chosen without `engine=` for a path or URL ending in `.zarrdb`, and for an existing file
    with SQLiteStore's application id; `engine="zarrdb"` opens any name. `storage_options`
    and `block_cache` are `SQLiteStore`'s, for URLs. A `SQLiteStore` passed in is used as it
    is, and left open when the dataset is closed.
    """

    description = "Open .zarrdb files (a Zarr hierarchy in one SQLite file) with zarrdb"
    url = "https://zarrdb.github.io/zarrdb/guide/xarray/"
    supports_groups = True
    open_dataset_parameters = (
        "filename_or_obj",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "drop_variables",
        "use_cftime",
        "decode_timedelta",
        "group",
        "consolidated",
        "zarr_format",
        "use_zarr_fill_value_as_mask",
        "storage_options",
        "block_cache",
        "max_coordinate_bytes",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if isinstance(filename_or_obj, SQLiteStore):
            return True
        if not isinstance(filename_or_obj, str | os.PathLike):
            return False
        name = os.fspath(filename_or_obj)
        if not isinstance(name, str):
            return False
        if names_zarrdb(name) or name.startswith(_PROTOCOL):
            return True
        return "://" not in name and is_sqlitestore_file(name)

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        consolidated: bool | None = None,
        zarr_format: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        block_cache: Any = None,
        max_coordinate_bytes: int | None = MAX_COORDINATE_BYTES,
    ) -> Any:
        filename_or_obj, group, storage_options = _unchain(filename_or_obj, group, storage_options)
        store, owned = _store(filename_or_obj, storage_options, block_cache)
        options = _zarr_options(
            group=group,
            consolidated=consolidated,
            zarr_format=zarr_format,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        )
        with _closed_on_error(store, owned):
            _check_coordinates(store, group, max_coordinate_bytes, tree=False)
            ds = ZarrBackendEntrypoint().open_dataset(
                _as_source(store),
                mode="r",
                mask_and_scale=mask_and_scale,
                decode_times=decode_times,
                concat_characters=concat_characters,
                decode_coords=decode_coords,
                drop_variables=drop_variables,
                use_cftime=use_cftime,
                decode_timedelta=decode_timedelta,
                **options,
            )
        if owned:
            _close_store_with(ds, store)
        return ds

    def open_datatree(self, filename_or_obj: Any, **options: Any) -> Any:
        """Every group below `group` as an xarray DataTree; the options of
        `open_groups_as_dict`."""
        return self._open_nodes("open_datatree", filename_or_obj, **options)

    def open_groups_as_dict(self, filename_or_obj: Any, **options: Any) -> dict[str, Any]:
        """Every group below `group` as a Dataset, by path. Options: `group`, `consolidated`,
        `zarr_format`, `storage_options`, `block_cache`, and xarray's decoding options."""
        groups: dict[str, Any] = self._open_nodes("open_groups_as_dict", filename_or_obj, **options)
        return groups

    def _open_nodes(
        self,
        method: str,
        filename_or_obj: Any,
        *,
        group: str | None = None,
        consolidated: bool | None = None,
        zarr_format: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        block_cache: Any = None,
        max_coordinate_bytes: int | None = MAX_COORDINATE_BYTES,
        **decoding: Any,
    ) -> Any:
        """xarray's zarr backend's `method` (open_datatree or open_groups_as_dict) on the
        store; an owned store is closed with the result (a tree's root closes every node; of a
        dict, the first group is the one asked for, the root of the others)."""
        filename_or_obj, group, storage_options = _unchain(filename_or_obj, group, storage_options)
        store, owned = _store(filename_or_obj, storage_options, block_cache)
        options = _zarr_options(group=group, consolidated=consolidated, zarr_format=zarr_format)
        with _closed_on_error(store, owned):
            _check_coordinates(store, group, max_coordinate_bytes, tree=True)
            opened = getattr(ZarrBackendEntrypoint(), method)(
                _as_source(store), mode="r", **options, **decoding
            )
        if owned:
            if method == "open_datatree":
                _close_store_with(opened, store)
            elif opened:
                _close_store_with(next(iter(opened.values())), store)
        return opened


def _unchain(
    name: Any, group: str | None, storage_options: Mapping[str, Any] | None
) -> tuple[Any, str | None, Mapping[str, Any] | None]:
    """The file, group and storage options a `zarrdb::` URL names (zarrdb.filesystem's form:
    `zarrdb://group::file`), for SQLiteStore; anything else as it is. Options given under the
    inner URL's protocol, as fsspec takes them (`{"s3": {...}}`), are that URL's."""
    if not isinstance(name, str) or not name.startswith(_PROTOCOL):
        return name, group, storage_options
    head, _, name = name.partition("::")
    inside = head[len(_PROTOCOL) :].removeprefix("//").strip("/")
    if inside:
        group = f"{inside}/{group.strip('/')}" if group else inside
    scheme = name.partition("://")[0] if "://" in name else None
    if storage_options is not None and scheme is not None and set(storage_options) == {scheme}:
        storage_options = storage_options[scheme]
    return name, group, storage_options


def _as_source(store: SQLiteStore) -> Any:
    """The store as xarray's zarr backend takes it (any zarr Store works there, though its
    signature names paths and xarray's own data stores only), its chunks of strings checked
    before they are decoded (_string_chunks: a junk chunk's first bytes made numcodecs
    allocate gigabytes)."""
    return CheckedStrings(store)


def _store(
    filename_or_obj: Any, storage_options: Mapping[str, Any] | None, block_cache: Any
) -> tuple[SQLiteStore, bool]:
    """The read-only store to read, and whether it was opened here (and is closed here)."""
    if isinstance(filename_or_obj, SQLiteStore):
        if storage_options is not None or block_cache is not None:
            raise ValueError(
                "storage_options and block_cache are for a path or URL; a SQLiteStore passed "
                "in has its own"
            )
        return filename_or_obj, False
    if not isinstance(filename_or_obj, str | os.PathLike):
        raise TypeError(
            "the zarrdb engine opens a path, a URL or a SQLiteStore, not "
            f"{type(filename_or_obj).__name__}"
        )
    remote_options: dict[str, Any] = {}
    if storage_options is not None:
        remote_options["storage_options"] = storage_options
    if block_cache is not None:
        remote_options["block_cache"] = block_cache
    store = SQLiteStore(filename_or_obj, read_only=True, **remote_options)
    try:
        store.ensure_open()  # a missing, foreign or damaged file raises here, by its name
    except BaseException:
        store.close()
        raise
    return store, True


def _check_coordinates(
    store: SQLiteStore, group: str | None, limit: int | None, *, tree: bool
) -> None:
    """CoordinateTooLargeError if the dimension coordinates xarray would read whole at open
    (1-D arrays named as their dimension) declare more than `limit` bytes together; of the
    group, or (`tree`) of every group below it. Only metadata is read."""
    import zarr

    if limit is None:
        return
    try:
        root = zarr.open_group(store, mode="r", path=group or "")
    except (FileNotFoundError, KeyError, ValueError, TypeError):
        return  # not a group: xarray's own error says so
    groups = [("", root)]
    if tree:
        groups += [
            (name, node)
            for name, node in root.members(max_depth=None)
            if isinstance(node, zarr.Group)
        ]
    total = 0
    seen: set[str] = set()
    for where, node in groups:
        for name, array in node.arrays():
            key = f"{where}/{name}"
            if key in seen or len(array.shape) != 1 or _dimensions(array) != [name]:
                continue
            seen.add(key)
            declared = int(array.shape[0]) * _value_bytes(array)
            total += declared
            if total > limit:
                raise errors.CoordinateTooLargeError(
                    f"{store.path!r}: the coordinate {key.lstrip('/')!r} declares "
                    f"{int(array.shape[0]):,} values ({declared:,} bytes), which xarray reads "
                    f"whole when it opens the dataset; with the others that is more than "
                    f"max_coordinate_bytes={limit:,}. If you trust the file, pass a larger "
                    "max_coordinate_bytes (or None) in backend_kwargs"
                )


def _value_bytes(array: Any) -> int:
    """What one value of `array` takes once xarray has read it. A type of variable length
    (numpy's StringDType, whose itemsize is that of a pointer, or objects) becomes a Python
    object per value, holding the fill value where no chunk is stored: a 1,000-character fill
    made a coordinate of a million strings, counted 16 MB by itemsize, take 3.3 GB."""
    dtype = array.dtype
    if getattr(dtype, "kind", "O") not in ("O", "T"):
        return max(int(getattr(dtype, "itemsize", 0) or _VARIABLE_ITEM_BYTES), 1)
    fill = getattr(array.metadata, "fill_value", None)
    # Up to four bytes a character in a str; what a bytes value holds, once.
    if isinstance(fill, str):
        return _VARIABLE_ITEM_BYTES + 4 * len(fill)
    return _VARIABLE_ITEM_BYTES + (len(fill) if isinstance(fill, bytes) else 0)


def _dimensions(array: Any) -> list[str] | None:
    """The dimension names xarray gives `array` (zarr v3's dimension_names, v2's
    _ARRAY_DIMENSIONS attribute)."""
    names = getattr(array.metadata, "dimension_names", None)
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS")
    return list(names) if isinstance(names, list | tuple) else None


def _zarr_options(**options: Any) -> dict[str, Any]:
    """The options given, for xarray's zarr backend (left out when not given, so that its
    defaults apply)."""
    return {name: value for name, value in options.items() if value is not None}


@contextlib.contextmanager
def _closed_on_error(store: SQLiteStore, owned: bool) -> Iterator[None]:
    """Close an owned store if xarray fails to read it."""
    try:
        yield
    except BaseException:
        if owned:
            store.close()
        raise


def _close_store_with(obj: Any, store: SQLiteStore) -> None:
    """Make closing `obj` (a Dataset or a DataTree node) close `store` after what closing it
    did before. xarray keeps that closer in `_close`, and reads it there itself to hand it on
    (to the dask-backed dataset `chunks=` makes, to the nodes of a tree)."""
    obj.set_close(_StoreCloser(_compat.xarray_closer(obj), store).close)


class _StoreCloser:
    """The closer of a dataset read from an owned store: a bound method of this, not a local
    function, because a dataset pickles with its closer (multiprocessing, a process pool), as
    one from xarray's own backends does. Both parts pickle: xarray's closer is a bound method
    of its own, and the store pickles as its path and options and reopens when first used."""

    __slots__ = ("before", "store")

    def __init__(self, before: Callable[[], None] | None, store: SQLiteStore) -> None:
        self.before = before
        self.store = store

    def close(self) -> None:
        try:
            if self.before is not None:
                self.before()
        finally:
            self.store.close()
