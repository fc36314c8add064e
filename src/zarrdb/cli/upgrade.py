"""`zarrdb upgrade`: a file of zarr-python 2's SQLiteStore made a SQLiteStore 1.0 file, in
place, through `zarrdb.zarr2.upgrade` (every check first, then one transaction)."""

from __future__ import annotations

import argparse

from zarrdb import errors
from zarrdb.cli import common
from zarrdb.cli.framework import EXIT_OK, BadInput, say
from zarrdb.cli.stores import require_local, require_zarrdb_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the file zarr-python 2's SQLiteStore wrote")
    parser.add_argument(
        "--to-v3",
        action="store_true",
        help="also convert the hierarchy's zarr v2 metadata to zarr v3 (zarr's own converter, "
        "zarr.metadata.migrate_v3); chunks keep their keys",
    )
    common.add_busy_timeout(parser)
    parser.epilog = common.epilog(
        "zarr-python 2's SQLiteStore wrote one table, zarr(k TEXT PRIMARY KEY, v BLOB), without\n"
        "the SQLiteStore metadata table and application id. The file is checked first (exactly\n"
        "that table, no NULL in any row, every key text that the format allows; with --to-v3,\n"
        "the metadata converted in memory), then changed in one transaction, all or nothing:\n"
        "the rows move to a table with the format's NOT NULL columns and the metadata table and\n"
        "application id are added. Last, the space the old table held is given back (VACUUM).\n"
        "Consolidated metadata (.zmetadata) is made again in v3 form. A SQLiteStore 1.0 file is\n"
        "left as it is (--to-v3 still converts its zarr v2 metadata). To keep the old file,\n"
        "copy it instead: zarrdb copy OLD NEW.zarrdb.",
        "zarrdb upgrade old.sqlite",
        "zarrdb upgrade old.sqlite --to-v3",
    )


def run(args: argparse.Namespace) -> int:
    from zarrdb.zarr2 import upgrade

    require_local(args.file, "upgrade")
    require_zarrdb_path(args.file)
    try:
        result = upgrade(args.file, to_v3=args.to_v3, busy_timeout=args.busy_timeout)
    except (errors.FormatError, errors.MetadataConversionError, errors.InvalidKeyError) as exc:
        raise BadInput(str(exc)) from None
    if args.json:
        common.emit_json(
            {
                "file": args.file,
                "upgraded": result.upgraded,
                "keys": result.keys,
                "converted_to_v3": [common.display(p) for p in result.converted],
                "consolidated": [common.display(p) for p in result.consolidated],
                "size_before": result.size_before,
                "size_after": result.size_after,
                "vacuumed": result.vacuumed,
            }
        )
        return EXIT_OK
    if result.upgraded:
        say(
            f"upgraded {args.file} to SQLiteStore 1.0: {result.keys:,} keys, "
            f"{common.human(result.size_before)} -> {common.human(result.size_after)}"
        )
    else:
        say(f"{args.file}: is a SQLiteStore 1.0 file already")
    if result.converted:
        nodes = len(result.converted)
        say(f"converted the metadata of {nodes:,} node{'s' * (nodes != 1)} to zarr v3")
        if result.consolidated:
            where = ", ".join(common.display(p) for p in result.consolidated)
            say(f"made the consolidated metadata of {where} again, in zarr v3 form")
    elif args.to_v3:
        say(f"{args.file}: no zarr v2 metadata to convert")
    return EXIT_OK
