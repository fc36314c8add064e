"""`zarrdb copy`: a whole hierarchy, or one sub-tree, between any two stores, byte for byte.

The run has four steps: `plan` (what to copy, where to write, refusing bad input before
anything is written), `transfer` (batches of values, under a temporary name for a new store;
a whole .zarrdb at a URL copied to a new .zarrdb is downloaded byte for byte instead),
`verify` (every key and value of the copy against the source, with --verify) and `report`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from zarrdb import _tunables, conformance, errors, remote
from zarrdb.cli import common, hierarchy, outputs, plans, publish, stores
from zarrdb.cli.plans import Plan, Progress, verify
from zarrdb.cli.framework import EXIT_OK, EXIT_PROBLEMS, BadInput, say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        metavar="SRC",
        help="a .zarrdb file (also at a URL), a .zip or .ozx file, a directory, or a URL (fsspec)",
    )
    parser.add_argument(
        "dest",
        metavar="DST",
        help="where to copy to: a .zarrdb, .zip or .ozx path, a directory, or a URL",
    )
    parser.add_argument(
        "--path",
        default="",
        metavar="P",
        help="copy only the group or array at P (default: the whole hierarchy)",
    )
    parser.add_argument(
        "--dest-path",
        default=None,
        metavar="Q",
        help="where the copy goes inside DST (default: the same path as --path)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="afterwards, compare every key and value of DST with SRC",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what DST already holds at the destination path",
    )
    parser.add_argument(
        "--batch-bytes",
        type=common.byte_size,
        default=_tunables.CLI_COPY_BATCH_BYTES,
        metavar="N",
        help="values read and written together (one transaction on a .zarrdb), at most N "
        "bytes (one larger value goes alone); at most three batches are in memory; accepts "
        "64M, 1G (default: 64M)",
    )
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    parser.epilog = common.epilog(
        "Values are copied byte for byte (no decoding) by zarrdb.copy, in batches of at most\n"
        "--batch-bytes, the next batch read while the last is written. The kind of store is told\n"
        "by the file's content for existing files, else by the name: .zarrdb (also .sqlite, .db),\n"
        ".zip and .ozx are files, anything with '://' is a URL (see below), and anything else is\n"
        "a directory. A new zip file is written in the layout of OME-Zarr's RFC-9 (entries\n"
        "stored, ZIP64, zarr.json first; an .ozx names its OME-Zarr version in the archive\n"
        "comment). A new .zarrdb, zip file or directory is written under a temporary name\n"
        "and renamed into place when complete, so an interrupted copy leaves nothing behind.\n"
        + stores.URL_HELP
        + "\nA whole .zarrdb at a URL copied to a new .zarrdb file is downloaded byte for byte;\n"
        "a closed local .zarrdb copied to such a URL (s3://, gs://, az://) is uploaded byte for\n"
        "byte (a multipart upload; its size and ETag checked after). A file of zarr-python 2's\n"
        "SQLiteStore is read as it is: copied to a new .zarrdb, it becomes a SQLiteStore 1.0 file.",
        "zarrdb copy data.zarr data.zarrdb            # directory store -> one file",
        "zarrdb copy data.zarrdb data.zip --verify",
        "zarrdb copy image.zarrdb image.ozx          # OME-Zarr's zipped form, to publish",
        "zarrdb copy image.ozx image.zarrdb          # and back, to work in",
        "zarrdb copy data.zarrdb small.zarrdb --path /climate/temperature --dest-path /",
        "zarrdb copy s3://bucket/data.zarr data.zarrdb   # needs fsspec and s3fs",
        "zarrdb copy s3://bucket/data.zarrdb data.zarr --storage-option region=eu-west-1",
        "zarrdb copy data.zarrdb s3://bucket/data.zarrdb --verify   # an upload",
        "zarrdb copy old.sqlite new.zarrdb   # a file of zarr-python 2's SQLiteStore",
    )
    common.add_opening_options(parser)


@dataclass
class Outcome:
    keys: int = 0
    bytes: int = 0
    batches: int = 0
    seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)
    downloaded: bool = False  # a .zarrdb at a URL, downloaded whole (bytes: the file's size)


def whole_file(plan: Plan) -> bool:
    """Whether the copy is a whole .zarrdb at a URL to a new .zarrdb file: a download."""
    return (
        plan.source.remote
        and plan.dest.kind == "zarrdb"
        and plan.temporary is not None
        and not plan.src_path
        and not plan.dst_path
    )


async def run(args: argparse.Namespace) -> int:
    show = args.progress if args.progress is not None else (sys.stderr.isatty() and not args.json)
    options = common.storage_options(args, args.source, args.dest)
    source = stores.classify(args.source, "source", options)
    dest = stores.classify(args.dest, "destination", options)
    if dest.remote:  # a .zarrdb at a URL: the whole local file, uploaded
        return await publish.run_upload(source, dest, args, show)
    src = await stores.open_store(
        source, read_only=True, busy_timeout=args.busy_timeout, zarr2=True
    )
    with stores.closing(src):
        plan = await make_plan(src, source, dest, args)
        with Progress(show) as progress:
            if whole_file(plan):
                outcome = download(plan)
            else:
                outcome = await transfer(src, plan, args, progress)
            if args.verify:
                check = await stores.open_store(
                    dest, read_only=True, busy_timeout=args.busy_timeout
                )
                with stores.closing(check):
                    if outcome.downloaded:  # the sizes that batch the reads, from the copy
                        sizes = dict(await stores.key_sizes(check, dest, plan.dst_prefix))
                        plan.listing = [(key, sizes.get(key, 0)) for key, _ in plan.listing]
                    outcome.mismatches = await verify(src, check, plan, args.batch_bytes, progress)
    report(plan, outcome, args)
    return EXIT_PROBLEMS if outcome.mismatches else EXIT_OK


async def make_plan(
    src: Any, source: stores.Location, dest: stores.Location, args: argparse.Namespace
) -> Plan:
    """What to copy and where; BadInput for anything that cannot be done."""
    src_path = common.inner_path(args.path)
    dst_path = src_path if args.dest_path is None else common.inner_path(args.dest_path)
    if source.local and dest.local and os.path.exists(dest.path):
        if os.path.samefile(source.path, dest.path):
            raise BadInput(f"{dest.path}: is the source itself; copy to another place")
    # A whole .zarrdb at a URL copied to a new .zarrdb is downloaded: its keys are all the plan
    # needs (listing the sizes of values reads every page that holds small values, which for a
    # file of small chunks is about the whole file).
    sizes = not (source.remote and dest.kind == "zarrdb" and not src_path and not dst_path)
    plan = Plan(source, dest, src_path, dst_path, await plans.listing(src, source, src_path, sizes))
    await _place(plan, args)
    if not sizes and not whole_file(plan):
        plan.listing = await plans.listing(src, source, src_path, True)
    if source.kind == "dir":
        outputs.require_inside(source, (key for key, _ in plan.listing), "source")
    if dest.kind == "dir" and dest.exists and not plan.temporary:
        outputs.require_inside(dest, (plan.dest_key(k) for k, _ in plan.listing), "destination")
    return plan


async def _place(plan: Plan, args: argparse.Namespace) -> None:
    """Where and how the copy is written (plan.temporary, plan.clear_first); BadInput for an
    empty source, keys the destination cannot hold, or a destination that may not be replaced."""
    source, dest, src_path, dst_path = plan.source, plan.dest, plan.src_path, plan.dst_path
    if not plan.listing:
        where = f" at {common.display(src_path)!r}" if src_path else ""
        raise BadInput(
            f"{source.path}: holds nothing{where}; 'zarrdb tree {source.path}' shows what is there"
        )
    _check_keys(plan)
    if not dest.exists:
        plan.temporary = outputs.temporary_sibling(dest.path) if dest.local else None
        return
    if not await _occupied(dest, plan, args):
        return
    if not args.overwrite:
        where = f" at {common.display(dst_path)!r}" if dst_path else ""
        raise BadInput(
            f"{dest.path}: exists already and holds data{where}; pass --overwrite to replace it, "
            "or choose another destination"
        )
    if dest.local and not dst_path:
        plan.temporary = outputs.temporary_sibling(dest.path)
    elif dest.kind == "zip":
        raise BadInput(f"{dest.path}: keys in a zip file cannot be replaced; write a new zip file")
    else:
        plan.clear_first = True


# What each kind of destination cannot hold: a zip file is unzipped anywhere, Windows too.
_KEY_FLAVOURS = {"zarrdb": "store", "zip": "windows"}
_HOLDERS = {"zarrdb": "a .zarrdb file", "zip": "a zip file", "dir": "a directory", "url": "a URL"}


def _check_keys(plan: Plan) -> None:
    """BadInput naming the first key the destination cannot hold safely (a '..' segment would
    climb out of a directory or out of wherever a zip is unzipped), before anything is
    written."""
    local = "windows" if os.name == "nt" else "posix"
    flavour = _KEY_FLAVOURS.get(plan.dest.kind, local)
    for key, _ in plan.listing:
        problem = conformance.key_problem(plan.dest_key(key), flavour)
        if problem:
            raise BadInput(
                f"{plan.source.path}: {problem}; {_HOLDERS[plan.dest.kind]} cannot hold it "
                "(nothing was written)"
            )


async def _occupied(dest: stores.Location, plan: Plan, args: argparse.Namespace) -> bool:
    """Whether the destination holds something at the destination path; BadInput if what it
    holds is not a Zarr hierarchy (never overwritten)."""
    probe = await stores.open_store(dest, read_only=True, busy_timeout=args.busy_timeout)
    with stores.closing(probe):
        if await probe.is_empty(plan.dst_prefix):
            return False
        if not await _holds_hierarchy(probe, plan.dst_prefix):
            where = f" at {common.display(plan.dst_path)!r}" if plan.dst_path else ""
            raise BadInput(
                f"{dest.path}: is not empty and holds no Zarr hierarchy{where}; refusing to "
                "overwrite it"
            )
    return True


async def _holds_hierarchy(store: Any, prefix: str) -> bool:
    """Whether some Zarr metadata document lies below `prefix` (what --overwrite may replace:
    never a folder of other files)."""
    for name in (hierarchy.V3_METADATA, hierarchy.V2_GROUP, hierarchy.V2_ARRAY):
        if await store.exists(prefix + name):
            return True
    async for key in store.list_prefix(prefix):
        if key.rpartition("/")[2] in hierarchy.METADATA_NAMES:
            return True
    return False


async def transfer(src: Any, plan: Plan, args: argparse.Namespace, progress: Progress) -> Outcome:
    """Copy the values with zarrdb.copy; a new store is renamed into place only when complete.
    A new zip file is written whole, in RFC-9's layout."""
    import zarrdb

    outcome = Outcome()
    if plan.temporary:
        outputs.make_private(plan.temporary)
    started = time.perf_counter()
    try:
        if plan.dest.kind == "zip" and plan.temporary:
            dst: Any = plan.temporary  # a path: zarrdb.copy writes the zip file itself
        else:
            dst = await stores.open_store(
                plan.dest, at=plan.temporary, read_only=False, busy_timeout=args.busy_timeout,
                zip_mode="a",
            )  # fmt: skip
        with contextlib.ExitStack() as stack:
            if not isinstance(dst, str):
                stack.enter_context(stores.closing(dst))
            task = progress.task("copy", len(plan.listing), plan.total_bytes)
            try:
                result = await zarrdb.copy_async(
                    src, dst, path=plan.src_path, dest_path=plan.dst_path,
                    if_exists="replace" if plan.clear_first else "raise",
                    callback=_Bar(progress, task), batch_bytes=args.batch_bytes,
                )  # fmt: skip
            except FileNotFoundError as exc:
                raise BadInput(f"{plan.source.path}: {exc}") from None
            except errors.UnsafeZipError as exc:
                raise BadInput(str(exc)) from None
            except ValueError as exc:  # what the copy cannot do, e.g. an .ozx of a sub-tree
                raise BadInput(f"{plan.dest.path}: {exc}") from None
        outcome.keys, outcome.bytes, outcome.batches = result.keys, result.bytes, result.batches
        if plan.temporary:
            outputs.put_in_place(plan.temporary, plan.dest.path, local_source(plan))
    except BaseException:
        if plan.temporary:
            outputs.discard(plan.temporary)
        raise
    outcome.seconds = time.perf_counter() - started
    return outcome


class _Bar:
    """zarrdb.copy's progress callback (fsspec's interface), shown on the progress bar: keys
    from the copy's own counts, bytes from each value's branch."""

    def __init__(self, progress: Progress, task: Any) -> None:
        self.progress, self.task = progress, task

    def set_size(self, size: int) -> None:
        """The bar was sized from the plan."""

    def relative_update(self, inc: int = 1) -> None:
        self.progress.advance(self.task, inc, 0)

    def branched(self, path_1: str, path_2: str, **kwargs: Any) -> _Bytes:
        return _Bytes(self)


class _Bytes:
    def __init__(self, bar: _Bar) -> None:
        self.bar = bar

    def set_size(self, size: int) -> None:
        """One value's size: its bytes come with relative_update."""

    def relative_update(self, inc: int = 1) -> None:
        self.bar.progress.advance(self.bar.task, 0, inc)

    def close(self) -> None:
        """Nothing to release."""


def local_source(plan: Plan) -> str | None:
    """The source's local file or directory, whose permissions a new copy does not exceed."""
    return plan.source.path if plan.source.local else None


def download(plan: Plan) -> Outcome:
    """The whole .zarrdb at the source URL, byte for byte, to the new file."""
    assert plan.temporary is not None
    url = plan.source.path
    outputs.make_private(plan.temporary)
    started = time.perf_counter()
    try:
        with stores.remote_errors(url):
            size = remote.download(
                url,
                plan.temporary,
                storage_options=stores.remote_options(url, plan.source.storage_options),
            )
        outputs.put_in_place(plan.temporary, plan.dest.path)
    except BaseException:
        outputs.discard(plan.temporary)
        raise
    return Outcome(
        keys=len(plan.listing), bytes=size, seconds=time.perf_counter() - started, downloaded=True
    )


def report(plan: Plan, outcome: Outcome, args: argparse.Namespace) -> None:
    rate = outcome.bytes / outcome.seconds if outcome.seconds > 0 else None
    if args.json:
        common.emit_json(
            {
                "source": plan.source.path,
                "destination": plan.dest.path,
                "path": common.display(plan.src_path),
                "dest_path": common.display(plan.dst_path),
                "keys": outcome.keys,
                "bytes": outcome.bytes,
                "batches": outcome.batches,
                "seconds": round(outcome.seconds, 3),
                "bytes_per_second": None if rate is None else round(rate),
                "verified": (not outcome.mismatches) if args.verify else None,
                "mismatches": outcome.mismatches,
                "downloaded": outcome.downloaded,
            }
        )
        return
    speed = "" if rate is None else f", {common.human(round(rate)).split(' (')[0]}/s"
    if outcome.downloaded:
        speed += " (the file, downloaded byte for byte)"
    src_at = common.display(plan.src_path) if plan.src_path else ""
    dst_at = common.display(plan.dst_path) if plan.dst_path else ""
    say(
        f"copied {outcome.keys:,} keys, {common.human(outcome.bytes)} in {outcome.seconds:.2f} s{speed}: "
        f"{plan.source.path}{src_at} -> {plan.dest.path}{dst_at}"
    )
    say(*outcome.mismatches)
    if args.verify:
        say(
            f"verify: {len(outcome.mismatches):,} difference(s)"
            if outcome.mismatches
            else f"verify: all {outcome.keys:,} keys and values are identical"
        )
