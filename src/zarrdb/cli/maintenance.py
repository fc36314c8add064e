"""`zarrdb mv`, `zarrdb snapshot` and `zarrdb vacuum`: changing a .zarrdb file as a whole, each
checked on a read-only store before the file is opened for writing."""

from __future__ import annotations

import argparse
import os
import shutil
import time
import warnings
from collections.abc import Sequence
from typing import Any

from zarrdb.cli import common, hierarchy
from zarrdb.cli.framework import EXIT_OK, BadInput, say
from zarrdb.cli.outputs import building, put_in_place, temporary_sibling
from zarrdb.cli.stores import closing, open_zarrdb, remote_errors, remote_options, require_local

# --- zarrdb mv -----------------------------------------------------------------------------------


def add_mv_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the .zarrdb file")
    parser.add_argument("source", metavar="SRC_PATH", help="the array or group to rename")
    parser.add_argument(
        "dest", metavar="DST_PATH", help="its new path (must not exist; its parent must be a group)"
    )
    common.add_busy_timeout(parser)
    parser.epilog = common.epilog(
        "Every key of the node moves in one SQLite transaction: a reader sees the hierarchy\n"
        "before or after the move, never between. Consolidated metadata of the groups above\n"
        "is refreshed right after (a second transaction).",
        "zarrdb mv data.zarrdb /raw/temperature /climate/temperature",
    )


async def _consolidated_groups(store: Any, paths: Sequence[str]) -> list[str]:
    """Groups among `paths` whose metadata holds consolidated metadata, deepest first."""
    out = []
    for path in paths:
        if await store.exists(hierarchy.key_prefix(path) + hierarchy.V2_CONSOLIDATED):
            out.append(path)
            continue
        node, _ = await hierarchy.read_node(store, path)
        if node is not None and node.node_type == "group" and node.consolidated:
            out.append(path)
    return sorted(set(out), key=lambda p: -len(p))


async def _check_move(store: Any, file: str, src: str, dst: str) -> None:
    """BadInput unless the node at `src` can be renamed to `dst`."""
    node, _ = await hierarchy.read_node(store, src)
    if node is None:
        if await store.is_empty(src):
            raise BadInput(
                f"{file}: nothing at {common.display(src)!r}; 'zarrdb tree {file}' shows the paths"
            )
        raise BadInput(
            f"{file}: {common.display(src)!r} is not an array or group (no metadata document there)"
        )
    if not await store.is_empty(dst) or await store.exists(dst):
        raise BadInput(f"{file}: {common.display(dst)!r} exists already; choose another name")
    up = hierarchy.parent(dst)
    if up:
        above, _ = await hierarchy.read_node(store, up)
        if above is None or above.node_type != "group":
            what = (
                "does not exist"
                if above is None
                else f"is {'an' if above.is_array else 'a'} {above.node_type}"
            )
            raise BadInput(
                f"{file}: the parent {common.display(up)!r} of the destination {what}; it must be a group"
            )


async def run_mv(args: argparse.Namespace) -> int:
    import zarr.api.asynchronous as zarr_async

    require_local(args.file, "mv")
    src = common.inner_path(args.source)
    dst = common.inner_path(args.dest)
    if not src or not dst:
        raise BadInput("the root of the hierarchy cannot be moved, nor be the destination")
    if src == dst or dst.startswith(src + "/") or src.startswith(dst + "/"):
        raise BadInput(
            f"cannot move {common.display(src)!r} to {common.display(dst)!r}: one contains the other"
        )
    # Everything is checked on a read-only store first: a move that cannot be made leaves the
    # file untouched, byte for byte (opening for writing alone would change its header).
    with closing(open_zarrdb(args.file, busy_timeout=args.busy_timeout)) as store:
        await _check_move(store, args.file, src, dst)
        above = sorted(set(hierarchy.ancestors(src) + hierarchy.ancestors(dst)))
        consolidated = await _consolidated_groups(store, above)
    with closing(open_zarrdb(args.file, busy_timeout=args.busy_timeout, writable=True)) as store:
        moved = store.rename(src, dst)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for group in consolidated:
                await zarr_async.consolidate_metadata(store, path=group or None)
    refreshed = [common.display(group) for group in consolidated]
    if args.json:
        common.emit_json(
            {
                "file": args.file,
                "source": common.display(src),
                "dest": common.display(dst),
                "keys": moved,
                "refreshed_consolidated_metadata": refreshed,
            }
        )
    else:
        say(f"moved {common.display(src)} to {common.display(dst)} ({moved:,} keys)")
        if refreshed:
            say(f"refreshed the consolidated metadata of {', '.join(refreshed)}")
    return EXIT_OK


# --- zarrdb snapshot -----------------------------------------------------------------------------


def add_snapshot_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the .zarrdb file, or its URL")
    parser.add_argument("dest", metavar="DEST", help="the new file (a local path)")
    parser.add_argument("--overwrite", action="store_true", help="replace DEST if it exists")
    common.add_opening_options(parser)
    parser.epilog = common.epilog(
        "SQLite's online backup copies the file as of one moment, while other processes keep\n"
        "reading and writing it. The copy is one self-contained file in DELETE journal mode;\n"
        "it is written under a temporary name and renamed to DEST when complete. A .zarrdb at\n"
        "a URL is read page by page through zarrdb's remote reader (one version of it).",
        "zarrdb snapshot live.zarrdb backup-$(date +%F).zarrdb",
        "zarrdb snapshot s3://bucket/data.zarrdb data.zarrdb --storage-option region=eu-west-1",
    )


def run_snapshot(args: argparse.Namespace) -> int:
    dest = args.dest
    options = common.storage_options(args, args.file)
    require_local(dest, "snapshot")
    if os.path.isdir(dest):
        raise BadInput(f"{dest}: is a directory; give the path of the new .zarrdb file")
    if os.path.exists(dest) and not args.overwrite:
        raise BadInput(
            f"{dest}: exists already; pass --overwrite to replace it, or choose another name"
        )
    parent = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(parent):
        raise BadInput(f"{dest}: the folder {parent} does not exist; create it first")
    if os.path.exists(dest) and os.path.exists(args.file) and os.path.samefile(dest, args.file):
        raise BadInput(f"{dest}: is the file itself; choose another name")
    store = open_zarrdb(args.file, busy_timeout=args.busy_timeout, storage_options=options)
    temporary = temporary_sibling(dest)
    started = time.perf_counter()
    with closing(store), building(temporary):
        _require_room(args.file, options, parent)
        store.backup(temporary)
        with closing(open_zarrdb(temporary, busy_timeout=args.busy_timeout)) as copy:
            facts = copy.file_info()
        put_in_place(temporary, dest, None if "://" in args.file else args.file)
    elapsed = time.perf_counter() - started
    size = os.path.getsize(dest)
    if args.json:
        common.emit_json(
            {
                "file": args.file,
                "dest": dest,
                "keys": facts["keys"],
                "file_size": size,
                "journal_mode": facts["journal_mode"],
                "seconds": round(elapsed, 3),
            }
        )
    else:
        say(
            f"snapshot of {args.file} written to {dest}: {facts['keys']:,} keys, {common.human(size)}, "
            f"journal mode {facts['journal_mode']}, in {elapsed:.2f} s"
        )
    return EXIT_OK


def _require_room(file: str, options: dict[str, Any], folder: str) -> None:
    """BadInput if `folder` has no room for a copy of `file` (its size: a URL's as the server
    states it, which the header's page count agrees with), before a page is copied. A server
    can state a terabyte; copying it would run for hours and fill the disk, to fail at the
    end."""
    if "://" in file:
        from zarrdb import remote

        with remote_errors(file):
            size = remote.open_remote(file, storage_options=remote_options(file, options)).size
    else:
        size = os.path.getsize(file)
    free = shutil.disk_usage(folder).free
    if size > free:
        raise BadInput(
            f"{file}: a snapshot needs {common.human(size)}, and {folder} has "
            f"{common.human(free)} free; choose a folder with room"
        )


# --- zarrdb vacuum -------------------------------------------------------------------------------


def add_vacuum_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the .zarrdb file")
    common.add_busy_timeout(parser)
    parser.epilog = common.epilog(
        "Rebuilds the file without its free pages (space left by deleted or overwritten values).\n"
        "Needs free disk space of about the file's size, and no other writer meanwhile.",
        "zarrdb vacuum data.zarrdb",
    )


def _facts(args: argparse.Namespace) -> dict[str, Any]:
    require_local(args.file, "vacuum")
    with closing(open_zarrdb(args.file, busy_timeout=args.busy_timeout)) as store:
        return store.file_info()


def run_vacuum(args: argparse.Namespace) -> int:
    before = _facts(args)
    with closing(open_zarrdb(args.file, busy_timeout=args.busy_timeout, writable=True)) as store:
        store.vacuum()
    after = _facts(args)
    if args.json:
        common.emit_json(
            {
                "file": args.file,
                "size_before": before["file_size"],
                "size_after": after["file_size"],
                "free_pages_before": before["freelist_count"],
                "free_pages_after": after["freelist_count"],
            }
        )
    else:
        reclaimed = max(0, before["file_size"] - after["file_size"])
        say(
            f"{args.file}: {common.human(before['file_size'])} -> {common.human(after['file_size'])} "
            f"(reclaimed {common.human(reclaimed)}; free pages "
            f"{before['freelist_count']:,} -> {after['freelist_count']:,})"
        )
    return EXIT_OK
