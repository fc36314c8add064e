"""The `zarrdb` command: look into, check, copy and maintain `.zarrdb` files.

    zarrdb info STORE                what is in a store: format, SQLite settings, every array
    zarrdb tree STORE [PATH]         the hierarchy as a tree
    zarrdb check FILE                every rule of the SQLiteStore 1.0 spec, SQLite's integrity
                                     check, the metadata documents and the chunk keys (--quick:
                                     through the store only)
    zarrdb copy SRC DST              a hierarchy between a .zarrdb, a .zip, a directory or a URL
    zarrdb mv FILE SRC_PATH DST_PATH rename an array or group atomically
    zarrdb snapshot FILE DEST        a consistent copy while other processes keep writing
    zarrdb vacuum FILE               give free pages back to the file system
    zarrdb upgrade FILE [--to-v3]    a file of zarr-python 2's SQLiteStore made a SQLiteStore
                                     1.0 file, in place (--to-v3: its metadata zarr v3 too)
    zarrdb view FILE                 the file in the browser viewer, served on 127.0.0.1
    zarrdb bench                     zarrdb against the other zarr stores

info, tree, check, copy and snapshot also read a .zarrdb file at a URL (s3://, gs://, az://,
http(s)://), read-only, with --storage-option KEY=VALUE for obstore's settings.

Exit codes: 0 ok, 1 problems found (check, copy --verify), 2 usage or bad input (one line on
stderr, nothing written), 3 an unexpected internal error (a bug: please report it).

The package: `framework` (the command table, the parser, how a run ends), `common` (argument
types and output), `stores` (opening every kind of store), `hierarchy` (nodes from metadata
documents), then one module per command family: `inspect` (info, tree), `check`, `copy`,
`maintenance` (mv, snapshot, vacuum), `upgrade` and `bench` (the benchmark). The command line goes through
the public API of zarrdb and zarr only.
"""

from zarrdb.cli.framework import COMMANDS, BadInput, Command, build_parser, main

__all__ = ["COMMANDS", "BadInput", "Command", "build_parser", "main"]
