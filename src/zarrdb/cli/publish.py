"""`zarrdb copy FILE s3://bucket/NAME.zarrdb`: a closed .zarrdb file uploaded byte for byte to
object storage (`zarrdb.remote.upload`: a multipart upload, the object's size and ETag checked
after), then with --verify read back in place and compared key by key with the file."""

from __future__ import annotations

import argparse
import os
from typing import Any

from zarrdb import remote
from zarrdb.cli import common, plans, stores
from zarrdb.cli.framework import EXIT_OK, EXIT_PROBLEMS, BadInput, say


async def run_upload(
    source: stores.Location, dest: stores.Location, args: argparse.Namespace, show: bool
) -> int:
    url = dest.path
    if source.kind != "zarrdb" or not source.local:
        raise BadInput(
            f"{url}: a URL that names a .zarrdb file takes a whole local .zarrdb file, uploaded "
            f"as it is; copy {source.path} into a local .zarrdb file first, then upload that"
        )
    if args.path or args.dest_path is not None:
        raise BadInput(
            f"{url}: an upload sends the whole file (no --path or --dest-path); copy the part "
            "into a local .zarrdb file first, then upload that"
        )
    if url.partition("://")[0].lower() not in remote.UPLOAD_SCHEMES:
        raise BadInput(
            f"{url}: files are uploaded to object storage (s3://, gs://, az://); an HTTP "
            "server is read-only here"
        )
    # The file must be a SQLiteStore file (a file of zarr-python 2's is refused, naming the
    # commands that convert it); its store is closed before the file is read as bytes.
    with stores.closing(stores.open_zarrdb(source.path, busy_timeout=args.busy_timeout)) as src:
        listing = await plans.listing(src, source, "", True) if args.verify else []
    options = stores.remote_options(url, dest.storage_options)
    plan = plans.Plan(source, dest, "", "", listing)
    with plans.Progress(show) as progress:
        task = progress.task("upload", 1, os.path.getsize(source.path))

        def sent(nbytes: int) -> None:
            progress.advance(task, 0, nbytes)

        with stores.remote_errors(url):
            try:
                result = remote.upload(
                    source.path, url, storage_options=options, overwrite=args.overwrite,
                    progress=sent,
                )  # fmt: skip
            except FileExistsError:
                raise BadInput(
                    f"{url}: exists already; pass --overwrite to replace it, or choose another "
                    "name"
                ) from None
        progress.advance(task, 1, 0)
        mismatches = list(result.problems)
        if args.verify:
            mismatches += await _verify(plan, args, options, progress)
    _report(plan, result, mismatches, args)
    return EXIT_PROBLEMS if mismatches else EXIT_OK


async def _verify(
    plan: Any, args: argparse.Namespace, options: dict[str, Any], progress: Any
) -> list[str]:
    """Every key and value of the object, read in place, against the local file."""
    check = stores.open_remote_zarrdb(plan.dest.path, options)
    with stores.closing(check):
        local = stores.open_zarrdb(plan.source.path, busy_timeout=args.busy_timeout)
        with stores.closing(local):
            return await plans.verify(local, check, plan, args.batch_bytes, progress)


def _report(plan: Any, result: Any, mismatches: list[str], args: argparse.Namespace) -> None:
    rate = result.size / result.seconds if result.seconds > 0 else None
    if args.json:
        common.emit_json(
            {
                "source": plan.source.path,
                "destination": plan.dest.path,
                "uploaded": True,
                "bytes": result.size,
                "parts": result.parts,
                "seconds": round(result.seconds, 3),
                "bytes_per_second": None if rate is None else round(rate),
                "etag": result.etag,
                "etag_checked": result.etag_checked,
                "keys": len(plan.listing) if args.verify else None,
                "verified": (not mismatches) if args.verify else None,
                "mismatches": mismatches,
            }
        )
        return
    speed = "" if rate is None else f", {common.human(round(rate)).split(' (')[0]}/s"
    parts = f"{result.parts:,} part{'s' * (result.parts != 1)}"
    say(
        f"uploaded {plan.source.path} to {plan.dest.path}: {common.human(result.size)} in "
        f"{result.seconds:.2f} s{speed} ({parts})"
    )
    checked = "size and ETag (MD5 of the parts) checked" if result.etag_checked else "size checked"
    say(checked if not result.problems else "the object differs from the file:")
    say(*mismatches)
    if args.verify:
        say(
            f"verify: {len(mismatches):,} difference(s)"
            if mismatches
            else f"verify: all {len(plan.listing):,} keys and values, read in place, are identical"
        )
