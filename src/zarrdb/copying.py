"""`zarrdb.copy`: a Zarr hierarchy, or a part of it, byte for byte from any zarr store to any
other: a .zarrdb file, a directory, a zip file (an RFC-9 `.ozx` too), memory, an object store.

    zarrdb.copy("data.zarr", "data.zarrdb")                  # a directory into one file
    zarrdb.copy("data.zarrdb", "image.ozx")                  # OME-Zarr's zipped form (RFC-9)
    zarrdb.copy(store, "s3://bucket/data.zarr", path="raw")  # one group, to an object store

Values are not decoded: what is copied is the stored bytes of every key below `path`. The
copy reads batches of values while the previous batch is written, with a bounded number of
bytes in memory, and reports progress to an fsspec-style callback.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarrdb import _copy_ends as ends
from zarrdb import _copy_engine as engine
from zarrdb import _format, _places, _tunables, _zipfiles, errors
from zarrdb._copy_ends import IfExists
from zarrdb._copy_engine import ProgressCallback

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = ["DEFAULT_BATCH_BYTES", "CopyResult", "ProgressCallback", "copy", "copy_async"]

# The batches' default size in bytes (its home: _tunables.COPY_BATCH_BYTES).
DEFAULT_BATCH_BYTES = _tunables.COPY_BATCH_BYTES


@dataclass
class CopyResult:
    """What a copy did."""

    keys: int
    """Values written."""
    bytes: int
    """Bytes of the values written."""
    skipped: int
    """Keys the destination held already and kept (`if_exists="skip"`)."""
    batches: int
    """Batches written (one transaction each on a .zarrdb)."""
    seconds: float
    """Wall time of the whole copy, verification included."""
    verified: bool
    """Whether the copy was read back and found identical (`verify=True`)."""


def copy(
    source: Any,
    dest: Any,
    *,
    path: str = "",
    dest_path: str | None = None,
    if_exists: IfExists = "raise",
    verify: bool = False,
    callback: ProgressCallback | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> CopyResult:
    """Copy the keys below `path` of `source`, byte for byte, to `dest_path` of `dest`.

    Parameters
    ----------
    source, dest
        A zarr `Store` or `StorePath`, or anything zarr takes for one (a directory's path, a
        URL opened through fsspec, a dict for memory). A path ending in `.zarrdb` (also
        `.sqlite`, `.db`) is a zarrdb file, one ending in `.zip` or `.ozx` a zip file; an
        existing file is recognised by its content. A `.zarrdb` URL (`s3://`, `https://`)
        is read in place as a source. A new file or directory is built under a temporary
        name beside its place and renamed into place when complete (and verified).
    path
        The group or array to copy (default: the whole hierarchy).
    dest_path
        Where it goes in `dest` (default: the same path).
    if_exists
        What to do when `dest` holds something below `dest_path`: `"raise"` (the default)
        raises FileExistsError before anything is written; `"replace"` deletes what is there
        first, so that the copy holds exactly the source's keys (never what holds no Zarr
        metadata document, such as a folder of other files: FileExistsError); `"skip"` keeps
        each key the destination holds already and copies the others (resuming an
        interrupted copy).
    verify
        Read the copy back and compare every value with what was read from the source
        (a digest per value; keys kept by `"skip"` are compared with the source itself).
    callback
        An fsspec `Callback` (or anything with its `set_size`, `relative_update` and
        `branched`): sized in keys, advanced per key; each value's branch counts its bytes.
    batch_bytes
        Values read and written together, at most this many bytes (a larger value goes
        alone); at most three batches are in memory at once. On a .zarrdb each batch is one
        transaction.

    Returns
    -------
    CopyResult

    Raises
    ------
    FileExistsError
        If `dest` holds something below `dest_path` and `if_exists="raise"`.
    FileNotFoundError
        If the source holds nothing below `path`, or a source path does not exist.
    zarrdb.errors.InvalidKeyError
        For a key the destination cannot hold safely (a `..` segment, an absolute name, a
        NUL; on a zip file or on Windows also a backslash or a drive letter), before
        anything is written.
    zarrdb.errors.UnsafeZipError
        For a zip source with an entry that cannot be read safely (a zip bomb's tricks).
    zarrdb.errors.CopyMismatchError
        If `verify` finds a difference (a new destination is then not put in place).
    """
    from zarr.core.sync import sync

    return sync(
        copy_async(
            source, dest, path=path, dest_path=dest_path, if_exists=if_exists, verify=verify,
            callback=callback, batch_bytes=batch_bytes,
        )
    )  # fmt: skip


async def copy_async(
    source: Any,
    dest: Any,
    *,
    path: str = "",
    dest_path: str | None = None,
    if_exists: IfExists = "raise",
    verify: bool = False,
    callback: ProgressCallback | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> CopyResult:
    """The asynchronous form of [`copy`][zarrdb.copy], for code already in an event loop."""
    if if_exists not in ("raise", "replace", "skip"):
        raise ValueError(f"if_exists must be 'raise', 'replace' or 'skip', not {if_exists!r}")
    if batch_bytes < 1:
        raise ValueError(f"batch_bytes must be positive, not {batch_bytes!r}")
    started = time.perf_counter()
    src = await ends.open_source(source)
    try:
        dst = await ends.open_dest(dest, if_exists, dest_path)
        try:
            result = await _copy(src, dst, path, dest_path, if_exists, verify, callback, batch_bytes)
            dst.put_in_place()
        except BaseException:
            dst.abandon()
            raise
    finally:
        src.close()
    result.seconds = time.perf_counter() - started
    return result


def _inner(path: str, what: str) -> str:
    """A group path as a key prefix ("" or "a/b/"); ValueError for one that climbs out."""
    path = path.strip("/")
    if path:
        problem = _format.key_problem(path)
        if problem:
            raise errors.InvalidKeyError(f"{what} {path!r}: {problem}")
    return f"{path}/" if path else ""


def _join(prefix: str, inner: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{inner}" if prefix else inner


async def _copy(
    src: ends.Source, dst: ends.Dest, path: str, dest_path: str | None, if_exists: IfExists,
    verify: bool, callback: ProgressCallback | None, batch_bytes: int,
) -> CopyResult:  # fmt: skip
    src_prefix = _join(src.prefix, _inner(path, "path"))
    dst_prefix = _join(dst.prefix, _inner(path if dest_path is None else dest_path, "dest_path"))
    _refuse_overlap(src, dst, src_prefix, dst_prefix)
    listing = await engine.key_sizes(src.store, src_prefix, src.zip_entries)
    if not listing:
        raise FileNotFoundError(f"{src.store}: holds nothing at {path.strip('/') or '/'!r}")
    items = [engine.Item(k, dst_prefix + k[len(src_prefix) :], n) for k, n in listing]
    for it in items:
        problem = _format.key_problem(it.dst, dst.flavour)
        if problem:
            raise errors.InvalidKeyError(
                f"invalid key {it.src!r} (as {it.dst!r} in the destination): {problem}; "
                "nothing was written"
            )
    _require_inside(src, dst, items)
    kept: list[engine.Item] = []
    if dst.store is not None and dst.existed:
        present = {key async for key in dst.store.list_prefix(dst_prefix)}
        if present and if_exists == "raise":
            raise FileExistsError(
                f"{dst.store}: holds data at {dst_prefix.rstrip('/') or '/'!r}; pass "
                "if_exists='replace' to replace it, or 'skip' to keep what is there"
            )
        if present and if_exists == "replace":
            if not any(_zipfiles.is_metadata(key) for key in present):
                # What holds no Zarr metadata is no hierarchy: a folder of other files, which
                # a copy must never delete.
                raise FileExistsError(
                    f"{dst.store}: holds data at {dst_prefix.rstrip('/') or '/'!r} that is no "
                    "Zarr hierarchy (no zarr.json, .zgroup or .zarray); refusing to replace it"
                )
            await dst.store.delete_dir(dst_prefix)
        elif present:
            kept = [it for it in items if it.dst in present]
            items = [it for it in items if it.dst not in present]
    if callback is not None:
        callback.set_size(len(items))
    if dst.store is None:  # a new zip file: RFC-9's layout
        assert dst.temporary is not None
        items = engine.rfc9_first(items)
        comment = await _ozx_comment(src, items) if dst.kind == "ozx" else b""
        dst.zip_target = engine.ZipTarget(dst.temporary, comment)
        tally = await engine.pipeline(
            src.store, dst.zip_target.write, items, batch_bytes, callback, verify
        )
        dst.zip_target.finish()
        dst.zip_target = None
    else:
        from zarr.storage import ZipStore

        target = dst.store
        ordered = (
            engine.rfc9_first(items) if isinstance(target, ZipStore) else engine.metadata_last(items)
        )

        async def write(pairs: list[tuple[str, Any]]) -> None:
            await engine.write_batch_to_store(target, pairs)

        tally = await engine.pipeline(src.store, write, ordered, batch_bytes, callback, verify)
    if verify:
        await _verify(src, dst, tally.written + kept, dst_prefix, batch_bytes)
    return CopyResult(tally.keys, tally.bytes, len(kept), tally.batches, 0.0, verify)


def _refuse_overlap(src: ends.Source, dst: ends.Dest, src_prefix: str, dst_prefix: str) -> None:
    """ValueError for a copy into its own source (it would read what it writes, or replace
    what it reads)."""
    same = dst.store is not None and src.store == dst.store
    here, there = _location(src.store), dst.final or (dst.store and _location(dst.store))
    if not same and here and there and os.path.exists(here) and os.path.exists(there):
        same = os.path.samefile(here, there)
    if not same:
        return
    if dst.store is None or src_prefix.startswith(dst_prefix) or dst_prefix.startswith(src_prefix):
        raise ValueError("the destination overlaps the source: copy to another place")


def _location(store: Store) -> str | None:
    """The local file or directory of a store, if it has one."""
    from zarr.storage import LocalStore, ZipStore

    from zarrdb import SQLiteStore

    if isinstance(store, LocalStore):
        return str(store.root)
    if isinstance(store, ZipStore | SQLiteStore) and "://" not in str(store.path):
        return str(store.path)
    return None


def _require_inside(src: ends.Source, dst: ends.Dest, items: list[engine.Item]) -> None:
    """PermissionError if a symbolic link leads a key of a directory store outside it (for a
    source: its value would be read from elsewhere; for a destination: written elsewhere)."""
    from zarr.storage import LocalStore

    checks = []
    if isinstance(src.store, LocalStore):
        checks.append((str(src.store.root), [it.src for it in items], "source"))
    if isinstance(dst.store, LocalStore) and dst.existed:
        checks.append((str(dst.store.root), [it.dst for it in items], "destination"))
    for root, keys, role in checks:
        found = _places.outside(root, keys)
        if found is not None:
            key, target = found
            raise PermissionError(
                f"{root}: {key!r} leads through a symbolic link to {target}, outside the "
                f"{role}; nothing was copied"
            )


async def _ozx_comment(src: ends.Source, items: list[engine.Item]) -> bytes:
    """RFC-9's archive comment from the root `zarr.json` copied, or none (with a warning)
    where the hierarchy declares no OME-Zarr version."""
    import warnings

    root = next((it for it in items if it.dst == "zarr.json"), None)
    if root is None:
        raise ValueError(
            "an .ozx file holds one OME-Zarr hierarchy at its root, and the copy has no root "
            "zarr.json: copy a group to dest_path='' (or write a .zip)"
        )
    (value,) = await engine.read_batch(src.store, [root.src])
    version = _zipfiles.ome_version(None if value is None else value.to_bytes())
    if version is None:
        warnings.warn(
            "the root zarr.json declares no OME-Zarr version (attributes.ome.version): the .ozx "
            "is written without RFC-9's archive comment",
            stacklevel=4,
        )
        return b""
    return _zipfiles.ome_comment(version)


async def _verify(
    src: ends.Source, dst: ends.Dest, items: list[engine.Item], prefix: str, batch_bytes: int
) -> None:
    from zarr.storage import ZipStore

    check: Store | None = dst.store
    opened = None
    if check is None:  # the new zip file, read back through zarr's own ZipStore
        assert dst.temporary is not None
        check = opened = await ZipStore.open(dst.temporary, mode="r", read_only=True)
    try:
        mismatches = await engine.compare(src.store, check, items, prefix, batch_bytes)
    finally:
        if opened is not None:
            opened.close()
    if mismatches:
        raise errors.CopyMismatchError(mismatches)

