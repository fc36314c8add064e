"""The `zarrdb` command: look into, check, copy and maintain `.zarrdb` files.

    zarrdb info FILE                 what is in a file: format, SQLite settings, every array
    zarrdb tree FILE [PATH]          the hierarchy as a tree
    zarrdb check FILE                every rule of the SQLiteStore 1.0 spec, SQLite's integrity
                                     check, the metadata documents and the chunk keys
    zarrdb copy SRC DST              a hierarchy between a .zarrdb, a .zip, a directory or a URL
    zarrdb mv FILE SRC_PATH DST_PATH rename an array or group atomically
    zarrdb snapshot FILE DEST        a consistent copy while other processes keep writing
    zarrdb vacuum FILE               give free pages back to the file system

Exit codes: 0 ok, 1 problems found (check, copy --verify), 2 usage or bad input (one line on
stderr, nothing written), 3 an unexpected internal error (a bug: please report it).

Subcommands live in one table, `COMMANDS`: a module and the names of its `add_arguments(parser)`
and `run(args) -> int` functions. A module is imported only when its command runs, so a command
defined elsewhere (`zarrdb.bench`) costs nothing to the others and is listed only when installed.

The command goes through the public API only (SQLiteStore and zarr stores); the spec checks of
`check` also read the file with Python's own `sqlite3`, an SQLite independent of ours.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import threading
import importlib
import importlib.util
import json
import operator
import os
import shutil
import sqlite3
import sys
import time
import urllib.parse
import warnings
import zipfile
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarrdb import _format, _nodes, errors

if TYPE_CHECKING:
    from zarr.abc.store import Store

    from zarrdb.store import SQLiteStore

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3

SQLITE_HEADER = b"SQLite format 3\x00"
ZARRDB_SUFFIXES = (".zarrdb", ".sqlite", ".sqlite3", ".db")
DEFAULT_BATCH_BYTES = 64 * 1024 * 1024


class BadInput(Exception):
    """Bad input from the user: printed as one line on stderr, exit code 2."""


# --- the command table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One subcommand: `module.add_arguments(parser)` declares its options, `module.run(args)`
    does the work and returns the exit code. `optional` commands are listed only when their
    module is installed; `shared_options` gives the command the options every built-in one has
    (--json)."""

    name: str
    summary: str
    module: str
    add_arguments: str
    run: str
    optional: bool = False
    shared_options: bool = True

    def available(self) -> bool:
        return not self.optional or importlib.util.find_spec(self.module) is not None

    def load(self) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[Any], int]]:
        module = importlib.import_module(self.module)
        return getattr(module, self.add_arguments), getattr(module, self.run)


COMMANDS: tuple[Command, ...] = (
    Command(
        "info",
        "describe a .zarrdb file and every array in it",
        __name__,
        "_info_arguments",
        "_info_run",
    ),
    Command(
        "tree",
        "show the hierarchy (groups and arrays) as a tree",
        __name__,
        "_tree_arguments",
        "_tree_run",
    ),
    Command(
        "check",
        "check a .zarrdb file against the SQLiteStore 1.0 spec and zarr",
        __name__,
        "_check_arguments",
        "_check_run",
    ),
    Command(
        "copy",
        "copy a hierarchy between .zarrdb, .zip, directory and URL stores",
        __name__,
        "_copy_arguments",
        "_copy_run",
    ),
    Command(
        "mv",
        "rename an array or group inside a .zarrdb file, atomically",
        __name__,
        "_mv_arguments",
        "_mv_run",
    ),
    Command(
        "snapshot",
        "consistent copy of a .zarrdb file while others keep writing",
        __name__,
        "_snapshot_arguments",
        "_snapshot_run",
    ),
    Command(
        "vacuum",
        "give a .zarrdb file's free pages back to the file system",
        __name__,
        "_vacuum_arguments",
        "_vacuum_run",
    ),
    # Benchmarks live in their own module, imported only for `zarrdb bench`; it declares its
    # own --json (a file to write), so it does not take the shared options.
    Command(
        "bench",
        "measure zarrdb against the other zarr stores",
        "zarrdb.bench",
        "add_arguments",
        "run_from_args",
        optional=True,
        shared_options=False,
    ),
)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr, exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


_EPILOG = """\
exit codes: 0 ok; 1 problems found (check, copy --verify); 2 usage or bad input;
3 internal error (a bug). Run 'zarrdb COMMAND --help' for the options of a command."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser. Only the command named in `argv` gets its options declared (and
    its module imported); with `argv` None, every available command does."""
    from zarrdb import __version__, sqlite_version

    parser = _Parser(
        prog="zarrdb",
        description="Look into, check, copy and maintain .zarrdb files (Zarr v3 hierarchies "
        "in one SQLite file, SQLiteStore 1.0).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"zarrdb {__version__} (SQLite {sqlite_version})"
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the result as JSON, for scripts")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    wanted = None
    if argv is not None:
        wanted = next((arg for arg in argv if not arg.startswith("-")), "")
    for command in COMMANDS:
        if not command.available():
            continue
        sub = subparsers.add_parser(
            command.name,
            help=command.summary,
            description=command.summary[0].upper() + command.summary[1:] + ".",
            epilog=_EPILOG,
            parents=[common] if command.shared_options else [],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if wanted is None or wanted == command.name:
            add_arguments, run = command.load()
            add_arguments(sub)
            sub.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    prog = f"zarrdb {args.command}"
    previous = warnings.showwarning
    warnings.showwarning = _warning_line
    _terminate_as_interrupt()
    try:
        return int(args._run(args) or 0)
    except BadInput as exc:
        _fail(prog, str(exc))
        return EXIT_USAGE
    except (errors.ZarrDBError, OSError) as exc:
        _fail(prog, _describe(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _fail(prog, "interrupted")
        return 130
    except BrokenPipeError:  # e.g. `zarrdb tree FILE | head`
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - a bug: one line, and the traceback on request
        if os.environ.get("ZARRDB_DEBUG"):
            raise
        _fail(
            prog,
            f"internal error: {type(exc).__name__}: {exc} (a bug; set ZARRDB_DEBUG=1 "
            "for the traceback and please report it)",
        )
        return EXIT_INTERNAL
    finally:
        warnings.showwarning = previous


def _terminate_as_interrupt() -> None:
    """SIGTERM (kill, a scheduler ending the job) unwinds like Ctrl-C, so `copy` and
    `snapshot` remove their unfinished output on either."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError, OSError, AttributeError):
        signal.signal(signal.SIGTERM, interrupt)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fail(prog: str, message: str) -> None:
    sys.stdout.flush()
    print(f"{prog}: error: {_one_line(message)}", file=sys.stderr, flush=True)


_warned: set[str] = set()


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    text = _one_line(str(message))
    if text in _warned:
        return
    _warned.add(text)
    print(f"zarrdb: warning: {text}", file=sys.stderr, flush=True)


def _describe(exc: BaseException) -> str:
    """One line saying what went wrong and what to do, for an exception from a store."""
    if isinstance(exc, errors.DatabaseLockedError):
        where = exc.filename or "the file"
        return (
            f"{where}: the database is locked by another process; retry when it is done, or "
            "wait longer with --busy-timeout SECONDS"
        )
    if isinstance(exc, FileExistsError):
        return f"{exc}; choose another destination or pass --overwrite"
    if isinstance(exc, PermissionError) and exc.filename:
        return f"{exc.filename}: permission denied ({exc.strerror or exc})"
    if isinstance(exc, OSError) and exc.filename and not isinstance(exc, errors.ZarrDBError):
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc) or type(exc).__name__


def _emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def _human(n: int | float | None) -> str:
    """A byte count as '12.3 MiB (12,897,484 bytes)'."""
    if n is None:
        return "?"
    if n < 1024:
        return f"{n:,} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit} ({n:,} bytes)"


def _shape(shape: Sequence[int] | None) -> str:
    if shape is None:
        return "-"
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _add_busy_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--busy-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long to wait for another process's lock on the file (default: 5)",
    )


def _inner_path(text: str) -> str:
    """A path inside a hierarchy as the user typed it ("/a/b/", "a/b") in the form "a/b"."""
    path = text.strip().strip("/")
    if "//" in path:
        raise BadInput(f"{text!r} is not a path inside a hierarchy (it contains '//')")
    return path


def _display(path: str) -> str:
    return "/" + path


# --- opening .zarrdb files -----------------------------------------------------------------------


def _sniff(path: str) -> str:
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


def _require_zarrdb_path(path: str) -> None:
    """BadInput unless `path` is an existing file that starts like an SQLite database."""
    if not os.path.exists(path):
        raise BadInput(f"{path}: no such file; give the path of a .zarrdb file")
    if os.path.isdir(path):
        raise BadInput(
            f"{path}: is a directory, not a .zarrdb file (to turn a directory store into one: "
            f"zarrdb copy {path} OUT.zarrdb)"
        )
    kind = _sniff(path)
    if kind == "empty":
        raise BadInput(f"{path}: is an empty file, not a .zarrdb file")
    if kind != "sqlite":
        raise BadInput(
            f"{path}: is not a .zarrdb file (not an SQLite database"
            + (
                "; it is a zip file: use 'zarrdb copy' to turn it into one)"
                if kind == "zip"
                else ")"
            )
        )


def open_zarrdb(
    path: str, *, busy_timeout: float, writable: bool = False, damage_is_bad_input: bool = True
) -> SQLiteStore:
    """An open SQLiteStore on the existing file `path`, validated before anything is written.

    The file is always opened read-only first, so a file that is not a SQLiteStore file (even
    an empty SQLite database) is never initialised or modified; BadInput says why."""
    from zarrdb import SQLiteStore

    _require_zarrdb_path(path)
    store = SQLiteStore(path, read_only=True, busy_timeout=busy_timeout)
    try:
        _open_store(store, path, damage_is_bad_input)
        if not writable:
            return store
    except BaseException:
        store.close()
        raise
    store.close()
    store = SQLiteStore(path, busy_timeout=busy_timeout)
    try:
        _open_store(store, path)
    except BaseException:
        store.close()
        raise
    return store


def _open_store(store: SQLiteStore, path: str, damage_is_bad_input: bool = True) -> None:
    try:
        store.ensure_open()
    except errors.NotAZarrDBError:
        raise BadInput(
            f"{path}: is not a .zarrdb file (an SQLite database without the SQLiteStore tables)"
        ) from None
    except errors.FormatError as exc:
        raise BadInput(str(exc)) from None
    except errors.NotADatabaseError:
        raise BadInput(f"{path}: is not a .zarrdb file (not an SQLite database)") from None
    except errors.DatabaseCorruptError as exc:
        if not damage_is_bad_input:
            raise
        raise BadInput(
            f"{path}: the file is damaged ({exc.sqlite_message}); 'zarrdb check {path}' lists "
            "what SQLite finds"
        ) from None
    except errors.DatabaseLockedError:
        raise BadInput(
            f"{path}: the database is locked by another process (waited {store.options['busy_timeout']:g} s); "
            "retry when it is done, or wait longer with --busy-timeout SECONDS"
        ) from None
    except (errors.ReadOnlyError, PermissionError):
        raise BadInput(
            f"{path}: permission denied (check the permissions of the file and its folder)"
        ) from None


@contextlib.contextmanager
def _closing(store: Store) -> Iterator[Store]:
    try:
        yield store
    finally:
        store.close()


# --- the hierarchy, from its metadata documents ----------------------------------------------------


async def _read_node(store: Store, path: str) -> tuple[_nodes.Node | None, str | None]:
    """The node whose metadata is at `path` (None if there is none) and the problem with its
    metadata, if any. Reads metadata documents only."""
    from zarr.core.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    prefix = _nodes.key_prefix(path)
    raw = await store.get(prefix + _nodes.V3_METADATA, prototype=proto)
    try:
        if raw is not None:
            doc = _nodes.parse_json(raw.to_bytes(), prefix + _nodes.V3_METADATA)
            return _nodes.node_from_v3(path, doc), None
        for name in (_nodes.V2_ARRAY, _nodes.V2_GROUP):
            raw = await store.get(prefix + name, prototype=proto)
            if raw is None:
                continue
            doc = _nodes.parse_json(raw.to_bytes(), prefix + name)
            attrs_raw = await store.get(prefix + _nodes.V2_ATTRS, prototype=proto)
            attrs = (
                {}
                if attrs_raw is None
                else _nodes.parse_json(attrs_raw.to_bytes(), prefix + _nodes.V2_ATTRS)
            )
            return _nodes.node_from_v2(path, name, doc, attrs), None
    except _nodes.MetadataError as exc:
        return _nodes.Node(path, "broken", 0), str(exc)
    return None, None


async def _discover(store: Store, path: str) -> tuple[list[_nodes.Node], list[str]]:
    """Every node at and below `path`, parents before children, found through list_dir (a
    group's children, never the chunks of an array) and the metadata documents alone. A sub-tree
    without metadata that has something below it is an "implicit" node. Returns the nodes and
    the problems met."""
    found: list[_nodes.Node] = []
    problems: list[str] = []

    async def visit(p: str, node: _nodes.Node | None) -> None:
        if node is not None:
            found.append(node)
            if node.node_type in ("array", "broken"):
                return
        names = sorted({name async for name in store.list_dir(p)})
        for name in names:
            if not name or name in _nodes.METADATA_NAMES:
                continue  # "" comes from a key breaking the key rules ('zarrdb check' says so)
            child = _nodes.join(p, name)
            if await store.is_empty(child):
                continue  # a key, not a sub-tree
            child_node, problem = await _read_node(store, child)
            if problem:
                problems.append(problem)
            if child_node is None:
                child_node = _nodes.Node(child, "implicit", 0)
            await visit(child, child_node)

    root, problem = await _read_node(store, path)
    if problem:
        problems.append(problem)
    if root is None and path:
        if await store.is_empty(path):
            return [], problems
        root = _nodes.Node(path, "implicit", 0)
    await visit(path, root if root is not None else _nodes.Node(path, "implicit", 0))
    return found, problems


def _metadata_keys(node: _nodes.Node) -> list[str]:
    prefix = _nodes.key_prefix(node.path)
    return [prefix + name for name in _nodes.METADATA_NAMES]


# --- zarrdb info ---------------------------------------------------------------------------------


def _info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the .zarrdb file")
    _add_busy_timeout(parser)
    parser.epilog = (
        "Chunk values are never read: sizes come from SQLite's record of each value's length.\n"
        "ratio = uncompressed bytes of the whole array / stored bytes of its chunks (as zarr's\n"
        "Array.info 'Storage ratio'; a partly written array shows a high ratio).\n\n"
        "example:\n  zarrdb info data.zarrdb\n  zarrdb info --json data.zarrdb | jq '.arrays[].path'\n\n"
        + _EPILOG
    )


def _array_summary(store: SQLiteStore, node: _nodes.Node) -> dict[str, Any]:
    sizes = store.key_sizes(_nodes.key_prefix(node.path))
    count = len(sizes)
    stored = sum(map(operator.itemgetter(1), sizes))
    own = set(_metadata_keys(node))
    for key in own:  # the array's own metadata documents are not chunks
        index = bisect_left(sizes, (key,))
        if index < count and sizes[index][0] == key:
            count -= 1
            stored -= sizes[index][1]
    nbytes = node.nbytes
    return {
        "path": _display(node.path),
        "zarr_format": node.zarr_format,
        "shape": list(node.shape),
        "dtype": node.dtype,
        "chunk_shape": None if node.chunk_shape is None else list(node.chunk_shape),
        "shard_shape": None if node.shard_shape is None else list(node.shard_shape),
        "codecs": node.codecs,
        "chunks_stored": count,
        "chunks_possible": node.chunks_possible,
        "stored_bytes": stored,
        "nbytes": nbytes,
        "ratio": None if not nbytes or not stored else round(nbytes / stored, 3),
    }


def _info_run(args: argparse.Namespace) -> int:
    store = open_zarrdb(args.file, busy_timeout=args.busy_timeout)
    with _closing(store):
        started = time.perf_counter()
        facts = store.file_info()
        nodes, problems = asyncio.run(_discover(store, ""))
        arrays = [_array_summary(store, node) for node in nodes if node.is_array]
        elapsed = time.perf_counter() - started
    groups = sum(1 for node in nodes if node.node_type == "group")
    free_bytes = facts["freelist_count"] * facts["page_size"]
    result = {
        "file": {
            "path": facts["path"],
            "format_version": facts["format_version"],
            "created_by": facts["created_by"],
            "modified_at": facts["modified_at"],
            "sqlite_version": facts["sqlite_version"],
            "page_size": facts["page_size"],
            "journal_mode": facts["journal_mode"],
            "file_size": facts["file_size"],
            "page_count": facts["page_count"],
            "free_pages": facts["freelist_count"],
            "free_bytes": free_bytes,
            "keys": facts["keys"],
            "stored_bytes": facts["stored_bytes"],
        },
        "groups": groups,
        "arrays": arrays,
        "problems": problems,
        "seconds": round(elapsed, 3),
    }
    if args.json:
        _emit_json(result)
        return EXIT_OK
    f = result["file"]
    rows = [
        ("file", f["path"]),
        ("format", f"SQLiteStore {f['format_version']}"),
        ("created by", f["created_by"] or "-"),
        ("modified at", f["modified_at"] or "-"),
        (
            "SQLite",
            f"{f['sqlite_version']} (page size {f['page_size']:,}, journal mode {f['journal_mode']})",
        ),
        ("file size", _human(f["file_size"])),
        (
            "free pages",
            f"{f['free_pages']:,} ({_human(free_bytes)}; 'zarrdb vacuum' gives them back)"
            if f["free_pages"]
            else "0",
        ),
        ("keys", f"{f['keys']:,}"),
        ("stored bytes", _human(f["stored_bytes"])),
        ("groups", f"{groups:,}"),
        ("arrays", f"{len(arrays):,}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for a in arrays:
        print()
        print(f"{a['path']}  (array, Zarr v{a['zarr_format']})")
        possible = "?" if a["chunks_possible"] is None else f"{a['chunks_possible']:,}"
        ratio = "-" if a["ratio"] is None else f"{a['ratio']:.2f}"
        lines = [
            ("shape", _shape(a["shape"])),
            ("dtype", a["dtype"]),
            ("chunks", _shape(a["chunk_shape"])),
            ("shards", _shape(a["shard_shape"])),
            ("codecs", ", ".join(a["codecs"])),
            (
                "chunks stored",
                f"{a['chunks_stored']:,} / {possible}" + (" shards" if a["shard_shape"] else ""),
            ),
            ("stored bytes", _human(a["stored_bytes"])),
            ("uncompressed", _human(a["nbytes"])),
            ("ratio", ratio),
        ]
        for name, value in lines:
            print(f"  {name:<14}{value}")
    _warn_problems(problems)
    return EXIT_OK


def _warn_problems(problems: Sequence[str]) -> None:
    for problem in problems:
        print(f"zarrdb: warning: {problem} ('zarrdb check' lists every problem)", file=sys.stderr)


# --- zarrdb tree ---------------------------------------------------------------------------------


def _tree_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the .zarrdb file")
    parser.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        default="",
        help="show only the sub-tree at PATH (default: the whole hierarchy)",
    )
    _add_busy_timeout(parser)
    parser.epilog = (
        "example:\n  zarrdb tree data.zarrdb\n  zarrdb tree data.zarrdb /climate\n\n" + _EPILOG
    )


def _node_label(node: _nodes.Node, name: str) -> str:
    if node.node_type == "array":
        return f"{name} {_shape(node.shape)} {node.dtype}"
    if node.node_type == "group":
        return f"{name} (group)"
    if node.node_type == "broken":
        return f"{name} (unreadable metadata)"
    return f"{name} (no metadata)"


def _node_json(node: _nodes.Node, children: dict[str, list[_nodes.Node]]) -> dict[str, Any]:
    out: dict[str, Any] = {"path": _display(node.path), "node_type": node.node_type}
    if node.is_array:
        out.update(shape=list(node.shape), dtype=node.dtype)
    else:
        out["children"] = [_node_json(c, children) for c in children.get(node.path, [])]
    return out


def _tree_run(args: argparse.Namespace) -> int:
    path = _inner_path(args.path)
    store = open_zarrdb(args.file, busy_timeout=args.busy_timeout)
    with _closing(store):
        nodes, problems = asyncio.run(_discover(store, path))
    if not nodes:
        raise BadInput(
            f"{args.file}: nothing at {_display(path)!r}; 'zarrdb tree {args.file}' shows what is there"
        )
    children: dict[str, list[_nodes.Node]] = {}
    for node in nodes[1:]:
        children.setdefault(_nodes.parent(node.path), []).append(node)
    top = nodes[0]
    if args.json:
        _emit_json(_node_json(top, children))
        return EXIT_OK
    lines = [_node_label(top, _display(path))]

    def draw(node: _nodes.Node, indent: str) -> None:
        kids = children.get(node.path, [])
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            name = kid.path.rsplit("/", 1)[-1]
            lines.append(f"{indent}{'└── ' if last else '├── '}{_node_label(kid, name)}")
            draw(kid, indent + ("    " if last else "│   "))

    draw(top, "")
    print("\n".join(lines))
    _warn_problems(problems)
    return EXIT_OK


# --- zarrdb check --------------------------------------------------------------------------------


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the .zarrdb file")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="count warnings (what the spec recommends) as problems too",
    )
    parser.add_argument(
        "--all", action="store_true", help="print every problem (default: at most 50 of each kind)"
    )
    _add_busy_timeout(parser)
    parser.epilog = (
        "Checks: the SQLiteStore 1.0 rules (application id, exactly the two tables with their\n"
        "columns, types, NOT NULL and BINARY keys, the metadata records, no NULLs, keys TEXT and\n"
        "values BLOB, the key rules on every key, journal mode); SQLite's integrity check; every\n"
        "zarr.json is a JSON object with zarr_format 3 and a node_type that zarr can read; every\n"
        "other key is a chunk of an array and lies inside its chunk grid (shards count as chunks\n"
        "of the outer grid; both the default and the v2 chunk key encoding are understood).\n"
        "Each problem is one line; 'ok' when there is none.\n\n"
        "example:\n  zarrdb check data.zarrdb && echo sound\n\n" + _EPILOG
    )


class _Findings:
    """Problems and warnings, each of a kind, capped per kind for printing."""

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self.counts: dict[tuple[str, str], int] = {}

    def _add(self, into: list[str], level: str, kind: str, message: str) -> None:
        n = self.counts.get((level, kind), 0) + 1
        self.counts[(level, kind)] = n
        if self.cap is None or n <= self.cap:
            into.append(message)

    def problem(self, kind: str, message: str) -> None:
        self._add(self.problems, "problem", kind, message)

    def warning(self, kind: str, message: str) -> None:
        self._add(self.warnings, "warning", kind, message)

    def total(self, level: str) -> int:
        return sum(n for (lvl, _), n in self.counts.items() if lvl == level)

    def elided(self, level: str) -> list[str]:
        if self.cap is None:
            return []
        return [
            f"... and {n - self.cap:,} more {kind} {level}s (--all prints them)"
            for (lvl, kind), n in self.counts.items()
            if lvl == level and n > self.cap
        ]


class _StdlibDatabase:
    """What `_format.read_facts` needs (pragma, execute) over Python's own sqlite3."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def pragma(self, name: str) -> Any:
        row = self.con.execute(f"PRAGMA {name}").fetchone()
        return None if row is None else row[0]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.con.execute(sql, params).fetchall()


_EXPECTED_COLUMNS = {
    _format.METADATA_TABLE: (("k", "TEXT", True), ("v", "TEXT", False)),
    _format.DATA_TABLE: (("k", "TEXT", True), ("v", "BLOB", False)),
}


def _spec_checks(path: str, busy_timeout: float, found: _Findings) -> bool:
    """The rules of the SQLiteStore 1.0 spec, read with Python's sqlite3 (read-only). Returns
    whether the file can be opened as a SQLiteStore file for the checks that follow."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None)
    except sqlite3.Error as exc:
        raise BadInput(f"{path}: cannot be opened ({exc})") from None
    try:
        db = _StdlibDatabase(con)
        try:
            facts = _format.read_facts(db)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                raise BadInput(
                    f"{path}: the database is locked by another process (waited {busy_timeout:g} s);"
                    " retry when it is done, or wait longer with --busy-timeout SECONDS"
                ) from None
            raise BadInput(f"{path}: cannot be read ({exc})") from None
        except sqlite3.DatabaseError as exc:
            raise BadInput(f"{path}: is not a .zarrdb file or is damaged ({exc})") from None
        readable = True
        try:
            for note in _format.validate(facts, path=path, writable=False):
                found.problem("format", f"format: {note.replace('; reading it anyway', '')}")
        except errors.NotAZarrDBError:
            raise BadInput(
                f"{path}: is not a .zarrdb file (an SQLite database without the SQLiteStore tables)"
            ) from None
        except errors.FormatError as exc:
            found.problem("format", f"format: {exc}")
            readable = False
        for checks in (_schema_checks, _metadata_checks, _row_checks):
            try:
                checks(db, facts, found)
            except sqlite3.DatabaseError as exc:
                found.problem("damage", f"damaged: SQLite cannot read the file through ({exc})")
        mode = str(db.pragma("journal_mode")).lower()
        if mode != "delete":
            found.warning(
                "journal",
                f"journal mode: the file is in {mode.upper()} mode; the spec recommends "
                "DELETE (a writer may have it open now, or it was not closed cleanly)",
            )
        wal = path + "-wal"
        if os.path.exists(wal) and os.path.getsize(wal) > 0:
            found.warning(
                "journal",
                f"journal mode: {wal} holds changes not yet in the file (the file is "
                "not self-contained until a writer checkpoints it)",
            )
        return readable
    finally:
        con.close()


def _schema_checks(db: _StdlibDatabase, facts: _format.FileFacts, found: _Findings) -> None:
    others = sorted(
        t for t in facts.tables if t not in _EXPECTED_COLUMNS and not t.startswith("sqlite_")
    )
    for table in others:
        found.problem(
            "schema",
            f"schema: extra table {table!r} (a SQLiteStore file has exactly "
            f"the tables {_format.METADATA_TABLE!r} and {_format.DATA_TABLE!r})",
        )
    for table, expected in _EXPECTED_COLUMNS.items():
        if table not in facts.tables:
            continue
        columns = db.execute(f'PRAGMA table_info("{table}")')
        names = [c[1] for c in columns]
        if names != [name for name, _, _ in expected]:
            found.problem(
                "schema",
                f"schema: table {table!r} has the columns {names}, not "
                f"{[name for name, _, _ in expected]}",
            )
            continue
        for (_, name, decl, notnull, _, pk), (_, want, want_pk) in zip(columns, expected):
            if decl.upper() != want:
                found.problem(
                    "schema",
                    f"schema: column {table}.{name} is declared {decl or 'untyped'!r}, not {want}",
                )
            if bool(pk) != want_pk:
                found.problem(
                    "schema",
                    f"schema: column {table}.{name} "
                    + ("is not the primary key" if want_pk else "is part of the primary key"),
                )
            if not notnull:
                found.warning(
                    "schema",
                    f"schema: column {table}.{name} lacks NOT NULL (the spec recommends it)",
                )
        for _, index, _, origin, _ in db.execute(f'PRAGMA index_list("{table}")'):
            if origin != "pk":
                continue
            for row in db.execute(f'PRAGMA index_xinfo("{index}")'):
                if row[1] == 0 and row[4] and str(row[4]).upper() != "BINARY":
                    found.problem(
                        "schema",
                        f"schema: keys of {table!r} compare with collation {row[4]}, not BINARY",
                    )


def _metadata_checks(db: _StdlibDatabase, facts: _format.FileFacts, found: _Findings) -> None:
    if _format.METADATA_TABLE not in facts.tables:
        return
    meta = facts.metadata
    for key in sorted(set(meta) - set(_format.KNOWN_METADATA)):
        found.problem(
            "metadata",
            f"metadata: unknown record {key!r} in {_format.METADATA_TABLE} "
            "(writers must not add records the spec does not describe)",
        )
    version = meta.get("sqlitestore_version", "")
    if version == "1.0":
        for name in ("compatible_flags", "incompatible_flags"):
            if meta.get(name, "") != "":
                found.problem(
                    "metadata",
                    f"metadata: {name} is {meta[name]!r}; SQLiteStore 1.0 "
                    "defines no flags, so it must be ''",
                )
    else:
        unknown = (
            _format.parse_flags(meta.get("compatible_flags", "")) - _format.KNOWN_COMPATIBLE_FLAGS
        )
        if unknown:
            found.warning(
                "metadata",
                f"metadata: unknown compatible flags {', '.join(sorted(unknown))} (ignored)",
            )
    modified = meta.get("modified_at")
    if modified is not None:
        if _format.parse_timestamp(modified) is None:
            found.problem(
                "metadata", f"metadata: modified_at {modified!r} is not an RFC 3339 timestamp"
            )
        elif not modified.endswith("Z"):
            found.warning(
                "metadata",
                f"metadata: modified_at {modified!r} is not in UTC with a "
                "trailing 'Z' (the spec recommends it)",
            )


def _row_checks(db: _StdlibDatabase, facts: _format.FileFacts, found: _Findings) -> None:
    checks = (
        (_format.METADATA_TABLE, "k IS NULL OR v IS NULL", "rows with NULL"),
        (
            _format.METADATA_TABLE,
            "typeof(k) != 'text' OR typeof(v) != 'text'",
            "records that are not TEXT",
        ),
        (_format.DATA_TABLE, "k IS NULL OR v IS NULL", "rows with a NULL key or value"),
        (_format.DATA_TABLE, "typeof(k) != 'text'", "keys that are not TEXT"),
        (_format.DATA_TABLE, "v IS NOT NULL AND typeof(v) != 'blob'", "values that are not BLOBs"),
    )
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    for table, where, what in checks:
        if table not in tables:
            continue
        rows = db.execute(f'SELECT count(*), quote(min(k)) FROM "{table}" WHERE {where}')
        count, example = rows[0]
        if count:
            found.problem("rows", f"rows: {table!r} has {count:,} {what} (e.g. key {example})")


def _zarr_can_read(doc: dict[str, Any]) -> str | None:
    """Why zarr cannot read a v3 metadata document, or None."""
    try:
        if doc.get("node_type") == "array":
            from zarr.core.metadata.v3 import ArrayV3Metadata

            ArrayV3Metadata.from_dict(dict(doc))
        else:
            from zarr.core.group import GroupMetadata

            GroupMetadata.from_dict(dict(doc))
    except Exception as exc:  # noqa: BLE001 - whatever zarr objects to
        return f"{type(exc).__name__}: {_one_line(str(exc))}"
    return None


def _check_hierarchy(store: SQLiteStore, found: _Findings) -> int:
    """Key rules, metadata documents and chunk keys; returns the number of keys."""
    import zarr
    from zarr.core.buffer import default_buffer_prototype

    sizes = store.key_sizes("")
    keys = [key for key, _ in sizes]
    del sizes
    bad_keys: set[str] = set()
    for key in keys:
        try:
            _format.check_key(key)
        except errors.InvalidKeyError:
            bad_keys.add(key)
            found.problem(
                "key",
                f"key {key!r}: breaks the key rules (a key must not start or end "
                "with '/' nor contain '//')",
            )
    # Metadata documents, and the nodes they make.
    proto = default_buffer_prototype()
    nodes: dict[str, _nodes.Node] = {}
    meta_keys: set[str] = set()
    for key in keys:
        path, _, name = key.rpartition("/")
        if name not in _nodes.METADATA_NAMES:
            continue
        meta_keys.add(key)
        raw = store.get_sync(key, prototype=proto)
        if raw is None:  # deleted meanwhile
            continue
        try:
            doc = _nodes.parse_json(raw.to_bytes(), key)
            if name == _nodes.V3_METADATA:
                node = _nodes.node_from_v3(path, doc)
                reason = _zarr_can_read(doc)
                if reason:
                    found.warning(
                        "zarr", f"{key}: zarr {zarr.__version__} cannot read it ({reason})"
                    )
            elif name in (_nodes.V2_ARRAY, _nodes.V2_GROUP):
                node = _nodes.node_from_v2(path, name, doc, {})
            else:
                continue  # .zattrs, .zmetadata: JSON objects is all we ask
        except _nodes.MetadataError as exc:
            found.problem("metadata document", str(exc))
            continue
        if path in nodes:
            found.problem(
                "metadata document", f"{_display(path)}: has both Zarr v3 and v2 metadata"
            )
        nodes[path] = node
    arrays = sorted((p for p, n in nodes.items() if n.is_array), key=lambda p: _nodes.key_prefix(p))
    for path in nodes:
        for above in _nodes.ancestors(path):
            if above in nodes and nodes[above].is_array and above != path:
                found.problem(
                    "node", f"{_display(path)}: a node inside the array {_display(above)}"
                )
                break
    # Chunk keys: each belongs to the array above it and lies inside its chunk grid.
    covered: list[tuple[int, int]] = []
    if "" in nodes and nodes[""].is_array:
        arrays = [""]
    for path in arrays:
        node = nodes[path]
        prefix = _nodes.key_prefix(path)
        lo = bisect_left(keys, prefix)
        hi = len(keys) if not prefix else bisect_left(keys, prefix[:-1] + "0")
        covered.append((lo, hi))
        start = len(prefix)
        for i in range(lo, hi):
            key = keys[i]
            if key in meta_keys:
                continue
            result = node.decode_chunk_key(key[start:])
            if isinstance(result, str):
                found.problem("chunk key", f"key {key!r}: {result} of the array {_display(path)}")
    covered.sort()
    position = 0
    for lo, hi in covered + [(len(keys), len(keys))]:
        for i in range(position, max(position, lo)):
            key = keys[i]
            if key not in meta_keys and key not in bad_keys:
                found.problem(
                    "stray key", f"key {key!r}: belongs to no array (no array metadata above it)"
                )
        position = max(position, hi)
    return len(keys)


def _check_run(args: argparse.Namespace) -> int:
    path = args.file
    _require_zarrdb_path(path)
    found = _Findings(None if args.all else 50)
    readable = _spec_checks(path, args.busy_timeout, found)
    nkeys = None
    if readable:
        try:
            with warnings.catch_warnings():  # what opening warns about is listed already
                warnings.simplefilter("ignore")
                store = open_zarrdb(path, busy_timeout=args.busy_timeout, damage_is_bad_input=False)
            with _closing(store), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for line in store.check():
                    found.problem("integrity", f"integrity: {line}")
                nkeys = _check_hierarchy(store, found)
        except errors.DatabaseCorruptError as exc:
            found.problem("damage", f"damaged: {exc}")
    problems = found.total("problem") + (found.total("warning") if args.strict else 0)
    if args.json:
        _emit_json(
            {
                "path": os.path.abspath(path),
                "ok": problems == 0,
                "keys": nkeys,
                "problem_count": found.total("problem"),
                "warning_count": found.total("warning"),
                "problems": found.problems,
                "warnings": found.warnings,
            }
        )
    else:
        for line in found.problems + found.elided("problem"):
            print(line)
        for line in found.warnings + found.elided("warning"):
            print(f"warning: {line}")
        if problems:
            print(f"{found.total('problem'):,} problem(s), {found.total('warning'):,} warning(s)")
        else:
            print("ok")
    return EXIT_PROBLEMS if problems else EXIT_OK


# --- zarrdb copy ---------------------------------------------------------------------------------


def _byte_size(text: str) -> int:
    """'1048576', '64M', '1GiB' as a number of bytes."""
    units = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    number, unit = (t[:-1], t[-1]) if t and t[-1] in "kmgt" else (t, "")
    try:
        value = int(float(number) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size (e.g. 67108864, 64M, 1G)"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be positive")
    return value


def _copy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source", metavar="SRC", help="a .zarrdb file, a .zip file, a directory, or a URL (fsspec)"
    )
    parser.add_argument(
        "dest",
        metavar="DST",
        help="where to copy to: a .zarrdb or .zip path, a directory, or a URL",
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
        type=_byte_size,
        default=DEFAULT_BATCH_BYTES,
        metavar="N",
        help="values held in memory and written per transaction, at most N bytes "
        "(one larger value goes alone); accepts 64M, 1G (default: 64M)",
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
    _add_busy_timeout(parser)
    parser.epilog = (
        "Values are copied byte for byte (no decoding), in batches of at most --batch-bytes,\n"
        "each written in one transaction. The kind of store is told by the file's content for\n"
        "existing files, else by the name: .zarrdb (also .sqlite, .db) and .zip are files,\n"
        "anything with '://' is a URL opened through fsspec (pip install fsspec), and anything\n"
        "else is a directory. A new .zarrdb, .zip or directory is written under a temporary name\n"
        "and renamed into place when complete, so an interrupted copy leaves nothing behind.\n\n"
        "examples:\n"
        "  zarrdb copy data.zarr data.zarrdb            # directory store -> one file\n"
        "  zarrdb copy data.zarrdb data.zip --verify\n"
        "  zarrdb copy data.zarrdb small.zarrdb --path /climate/temperature --dest-path /\n"
        "  zarrdb copy s3://bucket/data.zarr data.zarrdb   # needs fsspec and s3fs\n\n" + _EPILOG
    )


@dataclass
class _Endpoint:
    """One side of a copy: where it is, what kind of store, and how to open it."""

    location: str
    kind: str  # "zarrdb" | "zip" | "dir" | "url"
    exists: bool

    @property
    def local(self) -> bool:
        return self.kind != "url"


def _classify(location: str, role: str) -> _Endpoint:
    if "://" in location:
        return _Endpoint(location, "url", True)
    if os.path.isdir(location):
        return _Endpoint(location, "dir", True)
    if os.path.exists(location):
        kind = _sniff(location)
        if kind == "sqlite":
            return _Endpoint(location, "zarrdb", True)
        if kind == "zip":
            return _Endpoint(location, "zip", True)
        if (
            kind == "empty"
            and role == "destination"
            and location.lower().endswith(ZARRDB_SUFFIXES + (".zip",))
        ):
            return _Endpoint(
                location, "zarrdb" if not location.lower().endswith(".zip") else "zip", False
            )
        raise BadInput(
            f"{location}: is neither a .zarrdb file, a .zip file nor a directory"
            + ("; choose another destination" if role == "destination" else "")
        )
    if role == "source":
        raise BadInput(f"{location}: no such file or directory")
    parent = os.path.dirname(os.path.abspath(location))
    if not os.path.isdir(parent):
        raise BadInput(f"{location}: the folder {parent} does not exist; create it first")
    lower = location.lower()
    if lower.endswith(ZARRDB_SUFFIXES):
        return _Endpoint(location, "zarrdb", False)
    if lower.endswith(".zip"):
        return _Endpoint(location, "zip", False)
    return _Endpoint(location, "dir", False)


def _open_endpoint(
    end: _Endpoint, *, at: str, read_only: bool, busy_timeout: float, zip_mode: str = "r"
) -> Store:
    """The zarr store for `end`, opened at the path `at` (the real location, or a temporary
    sibling while it is being written)."""
    from zarr.storage import LocalStore, ZipStore

    if end.kind == "zarrdb":
        from zarrdb import SQLiteStore

        if os.path.exists(at) and os.path.getsize(at) > 0:
            return open_zarrdb(at, busy_timeout=busy_timeout, writable=not read_only)
        store = SQLiteStore(at, read_only=read_only, busy_timeout=busy_timeout)
        _open_store(store, at)
        return store
    if end.kind == "zip":
        store = ZipStore(at, mode="r" if read_only else zip_mode, read_only=read_only)
        try:
            store._sync_open()
        except (zipfile.BadZipFile, OSError) as exc:
            raise BadInput(f"{end.location}: cannot be opened as a zip file ({exc})") from None
        return store
    if end.kind == "dir":
        return LocalStore(at, read_only=read_only)
    try:
        import fsspec  # noqa: F401
    except ImportError:
        raise BadInput(
            f"{end.location}: URLs are opened through fsspec, which is not installed "
            "(pip install fsspec, plus the package for the protocol, e.g. s3fs)"
        ) from None
    from zarr.storage import FsspecStore

    options = None
    if not read_only and end.location.split("://", 1)[0] in ("file", "local"):
        options = {"auto_mkdir": True}  # fsspec's local file system makes no folders by itself
    try:
        return FsspecStore.from_url(end.location, storage_options=options, read_only=read_only)
    except (ImportError, ValueError, TypeError) as exc:
        raise BadInput(
            f"{end.location}: cannot be opened through fsspec ({_one_line(str(exc))})"
        ) from None


async def _source_listing(store: Store, end: _Endpoint, prefix: str) -> list[tuple[str, int]]:
    """(key, size) of every key below `prefix` in the source, sorted, values unread."""
    from zarrdb import SQLiteStore

    if isinstance(store, SQLiteStore):
        return store.key_sizes(prefix)
    if end.kind == "zip":
        with zipfile.ZipFile(end.location) as zf:
            listing = {
                info.filename: info.file_size
                for info in zf.infolist()
                if info.filename.startswith(prefix) and not info.filename.endswith("/")
            }
        return sorted(listing.items())
    keys = sorted({key async for key in store.list_prefix(prefix)})
    sizes: list[int] = []
    for start in range(0, len(keys), 512):
        sizes.extend(await asyncio.gather(*(store.getsize(k) for k in keys[start : start + 512])))
    return list(zip(keys, sizes))


# Keys per batch at most: with tiny values the per-key cost (a Buffer, a tuple) is what fills
# memory, not the bytes.
BATCH_KEYS = 10_000


def _batches(listing: Sequence[tuple[str, int]], limit: int) -> Iterator[list[tuple[str, int]]]:
    batch: list[tuple[str, int]] = []
    total = 0
    for key, size in listing:
        if batch and (total + size > limit or len(batch) >= BATCH_KEYS):
            yield batch
            batch, total = [], 0
        batch.append((key, size))
        total += size
    if batch:
        yield batch


class _Progress:
    """A rich progress bar of keys, bytes and throughput on stderr, or nothing."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None

    def __enter__(self) -> _Progress:
        if self.enabled and importlib.util.find_spec("rich") is None:
            print(
                "zarrdb: warning: no progress bar: it needs rich (pip install rich)",
                file=sys.stderr,
            )
            self.enabled = False
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[keys]:,}/{task.fields[total_keys]:,} keys"),
                DownloadColumn(binary_units=True),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def task(self, description: str, total_keys: int, total_bytes: int) -> Any:
        if self.bar is None:
            return None
        return self.bar.add_task(description, total=total_bytes, keys=0, total_keys=total_keys)

    def advance(self, task: Any, keys: int, nbytes: int) -> None:
        if self.bar is not None and task is not None:
            done = self.bar.tasks[task].fields["keys"] + keys
            self.bar.update(task, advance=nbytes, keys=done)


def _temporary_sibling(location: str) -> str:
    head, tail = os.path.split(os.path.abspath(location))
    return os.path.join(head, f".{tail}.partial-{os.getpid()}")


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)


def _put_in_place(temporary: str, location: str) -> None:
    """Rename the finished copy to `location`, replacing what is there."""
    if os.path.isdir(temporary):
        if os.path.isdir(location):
            old = _temporary_sibling(location) + ".old"
            os.rename(location, old)
            os.rename(temporary, location)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(temporary, location)
    else:
        os.replace(temporary, location)


def _looks_like_hierarchy(store: Store, prefix: str) -> bool:
    """Whether some Zarr metadata document lies below `prefix` (what --overwrite may replace:
    never a folder of other files)."""

    async def probe() -> bool:
        for name in (_nodes.V3_METADATA, _nodes.V2_GROUP, _nodes.V2_ARRAY):
            if await store.exists(prefix + name):
                return True
        async for key in store.list_prefix(prefix):
            if key.rpartition("/")[2] in _nodes.METADATA_NAMES:
                return True
        return False

    return asyncio.run(probe())


def _copy_run(args: argparse.Namespace) -> int:
    from zarr.core.buffer import default_buffer_prototype

    src_path = _inner_path(args.path)
    dst_path = src_path if args.dest_path is None else _inner_path(args.dest_path)
    src_end = _classify(args.source, "source")
    dst_end = _classify(args.dest, "destination")
    if src_end.local and dst_end.local and dst_end.exists and os.path.exists(args.dest):
        if os.path.samefile(args.source, args.dest):
            raise BadInput(f"{args.dest}: is the source itself; copy to another place")
    src_prefix = _nodes.key_prefix(src_path)
    dst_prefix = _nodes.key_prefix(dst_path)
    json_out = args.json
    show = args.progress if args.progress is not None else (sys.stderr.isatty() and not json_out)

    source = _open_endpoint(
        src_end, at=src_end.location, read_only=True, busy_timeout=args.busy_timeout
    )
    with _closing(source):
        listing = asyncio.run(_source_listing(source, src_end, src_prefix))
        if not listing:
            where = f" at {_display(src_path)!r}" if src_path else ""
            raise BadInput(
                f"{args.source}: holds nothing{where}; 'zarrdb tree' shows what is there"
            )
        if dst_end.kind == "zarrdb":
            for key, _ in listing:
                try:
                    _format.check_key(dst_prefix + key[len(src_prefix) :])
                except errors.InvalidKeyError as exc:
                    raise BadInput(f"{args.source}: {exc}; a .zarrdb file cannot hold it") from None
        # Metadata documents go last: a reader of a partial copy sees no node whose chunks are
        # still missing.
        listing.sort(
            key=lambda item: (item[0].rpartition("/")[2] in _nodes.METADATA_NAMES, item[0])
        )

        # Where to write: a new (or wholly replaced) local store is built under a temporary name.
        temporary: str | None = None
        in_place_clear = False
        if dst_end.exists:
            probe = (
                _open_endpoint(
                    dst_end, at=dst_end.location, read_only=True, busy_timeout=args.busy_timeout
                )
                if not (dst_end.kind in ("zarrdb", "zip") and os.path.getsize(args.dest) == 0)
                else None
            )
            occupied = False
            if probe is not None:
                with _closing(probe):
                    occupied = not asyncio.run(probe.is_empty(dst_prefix))
                    hierarchy = occupied and _looks_like_hierarchy(probe, dst_prefix)
            if occupied and not args.overwrite:
                where = f" at {_display(dst_path)!r}" if dst_path else ""
                raise BadInput(
                    f"{args.dest}: exists already and holds data{where}; pass --overwrite to "
                    "replace it, or choose another destination"
                )
            if occupied and not hierarchy:
                raise BadInput(
                    f"{args.dest}: is not empty and holds no Zarr hierarchy{' at ' + repr(_display(dst_path)) if dst_path else ''}; "
                    "refusing to overwrite it"
                )
            if occupied and dst_end.local and not dst_path:
                temporary = _temporary_sibling(args.dest)
            elif occupied:
                if dst_end.kind == "zip":
                    raise BadInput(
                        f"{args.dest}: keys in a zip file cannot be replaced; write a new zip file"
                    )
                in_place_clear = True
        elif dst_end.local:
            temporary = _temporary_sibling(args.dest)

        target_location = temporary or args.dest
        zip_mode = "w" if temporary else "a"
        if temporary:
            _remove(temporary)
        started = time.perf_counter()
        total_bytes = sum(size for _, size in listing)
        copied_keys = copied_bytes = batches = 0
        try:
            dest = _open_endpoint(
                dst_end,
                at=target_location,
                read_only=False,
                busy_timeout=args.busy_timeout,
                zip_mode=zip_mode,
            )
            with _closing(dest), _Progress(show) as progress:
                if in_place_clear:
                    asyncio.run(dest.delete_dir(dst_prefix))
                task = progress.task("copy", len(listing), total_bytes)
                proto = default_buffer_prototype()

                async def copy_all() -> None:
                    nonlocal copied_keys, copied_bytes, batches
                    for batch in _batches(listing, args.batch_bytes):
                        keys = [key for key, _ in batch]
                        values = await source.get_partial_values(proto, [(k, None) for k in keys])
                        if any(value is None for value in values):
                            gone = next(k for k, v in zip(keys, values) if v is None)
                            raise BadInput(
                                f"{args.source}: the key {gone!r} vanished during the copy"
                            )
                        if src_prefix != dst_prefix:
                            keys = [dst_prefix + key[len(src_prefix) :] for key in keys]
                        await dest._set_many(zip(keys, values))
                        del values
                        nbytes = sum(size for _, size in batch)
                        copied_keys += len(keys)
                        copied_bytes += nbytes
                        batches += 1
                        progress.advance(task, len(keys), nbytes)

                asyncio.run(copy_all())
            if temporary:
                _put_in_place(temporary, args.dest)
                temporary = None
        except BaseException:
            if temporary:
                _remove(temporary)
            raise
        elapsed = time.perf_counter() - started

        mismatches: list[str] = []
        if args.verify:
            check = _open_endpoint(
                dst_end, at=args.dest, read_only=True, busy_timeout=args.busy_timeout
            )
            with _closing(check), _Progress(show) as progress:
                task = progress.task("verify", len(listing), total_bytes)
                mismatches = asyncio.run(
                    _verify(
                        source,
                        check,
                        listing,
                        src_prefix,
                        dst_prefix,
                        args.batch_bytes,
                        progress,
                        task,
                    )
                )
    rate = copied_bytes / elapsed if elapsed > 0 else None
    result = {
        "source": args.source,
        "destination": args.dest,
        "path": _display(src_path),
        "dest_path": _display(dst_path),
        "keys": copied_keys,
        "bytes": copied_bytes,
        "batches": batches,
        "seconds": round(elapsed, 3),
        "bytes_per_second": None if rate is None else round(rate),
        "verified": (not mismatches) if args.verify else None,
        "mismatches": mismatches,
    }
    if json_out:
        _emit_json(result)
    else:
        speed = "" if rate is None else f", {_human(round(rate)).split(' (')[0]}/s"
        print(
            f"copied {copied_keys:,} keys, {_human(copied_bytes)} in {elapsed:.2f} s{speed}: "
            f"{args.source}{_display(src_path) if src_path else ''} -> {args.dest}"
            f"{_display(dst_path) if dst_path else ''}"
        )
        for line in mismatches:
            print(line)
        if args.verify:
            print(
                f"verify: {len(mismatches):,} difference(s)"
                if mismatches
                else f"verify: all {copied_keys:,} keys and values are identical"
            )
    return EXIT_PROBLEMS if mismatches else EXIT_OK


async def _verify(
    source: Store,
    dest: Store,
    listing: Sequence[tuple[str, int]],
    src_prefix: str,
    dst_prefix: str,
    batch_bytes: int,
    progress: _Progress,
    task: Any,
) -> list[str]:
    """Lines for every difference between the copy and the source."""
    from zarr.core.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    out: list[str] = []
    expected = {dst_prefix + key[len(src_prefix) :] for key, _ in listing}
    actual = {key async for key in dest.list_prefix(dst_prefix)}
    out.extend(f"key {k!r}: in the destination only" for k in sorted(actual - expected))
    for batch in _batches(listing, max(1, batch_bytes // 2)):
        keys = [k for k, _ in batch]
        theirs = await dest.get_partial_values(
            proto, [(dst_prefix + k[len(src_prefix) :], None) for k in keys]
        )
        ours = await source.get_partial_values(proto, [(k, None) for k in keys])
        for key, a, b in zip(keys, ours, theirs):
            if b is None:
                out.append(f"key {key!r}: missing in the destination")
            elif a is None or a.to_bytes() != b.to_bytes():
                out.append(f"key {key!r}: the value differs")
        progress.advance(task, len(keys), sum(size for _, size in batch))
    return out


# --- zarrdb mv -----------------------------------------------------------------------------------


def _mv_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the .zarrdb file")
    parser.add_argument("source", metavar="SRC_PATH", help="the array or group to rename")
    parser.add_argument(
        "dest", metavar="DST_PATH", help="its new path (must not exist; its parent must be a group)"
    )
    _add_busy_timeout(parser)
    parser.epilog = (
        "Every key of the node moves in one SQLite transaction: a reader sees the hierarchy\n"
        "before or after the move, never between. Consolidated metadata of the groups above\n"
        "is refreshed right after (a second transaction).\n\n"
        "example:\n  zarrdb mv data.zarrdb /raw/temperature /climate/temperature\n\n" + _EPILOG
    )


def _consolidated_groups(store: SQLiteStore, paths: Sequence[str]) -> list[str]:
    """Groups among `paths` whose metadata holds consolidated metadata, deepest first."""
    from zarr.core.buffer import default_buffer_prototype

    out = []
    for path in paths:
        prefix = _nodes.key_prefix(path)
        for name in (_nodes.V3_METADATA, _nodes.V2_CONSOLIDATED):
            raw = store.get_sync(prefix + name, prototype=default_buffer_prototype())
            if raw is None:
                continue
            if name == _nodes.V2_CONSOLIDATED:
                out.append(path)
                break
            try:
                doc = _nodes.parse_json(raw.to_bytes(), prefix + name)
            except _nodes.MetadataError:
                continue
            if doc.get("node_type") == "group" and doc.get("consolidated_metadata") is not None:
                out.append(path)
                break
    return sorted(set(out), key=lambda p: -len(p))


def _mv_run(args: argparse.Namespace) -> int:
    src = _inner_path(args.source)
    dst = _inner_path(args.dest)
    if not src or not dst:
        raise BadInput("the root of the hierarchy cannot be moved, nor be the destination")
    if src == dst or dst.startswith(src + "/") or src.startswith(dst + "/"):
        raise BadInput(
            f"cannot move {_display(src)!r} to {_display(dst)!r}: one contains the other"
        )
    # Everything is checked on a read-only store first: a move that cannot be made leaves the
    # file untouched, byte for byte (opening for writing alone would change its header).
    store = open_zarrdb(args.file, busy_timeout=args.busy_timeout)
    with _closing(store):
        node, _ = asyncio.run(_read_node(store, src))
        if node is None:
            if asyncio.run(store.is_empty(src)):
                raise BadInput(
                    f"{args.file}: nothing at {_display(src)!r}; 'zarrdb tree {args.file}' "
                    "shows the paths"
                )
            raise BadInput(
                f"{args.file}: {_display(src)!r} is not an array or group (no metadata "
                "document there)"
            )
        if not asyncio.run(store.is_empty(dst)) or asyncio.run(store.exists(dst)):
            raise BadInput(f"{args.file}: {_display(dst)!r} exists already; choose another name")
        up = _nodes.parent(dst)
        if up:
            parent, _ = asyncio.run(_read_node(store, up))
            if parent is None or parent.node_type != "group":
                what = (
                    "does not exist"
                    if parent is None
                    else f"is {'an' if parent.is_array else 'a'} {parent.node_type}"
                )
                raise BadInput(
                    f"{args.file}: the parent {_display(up)!r} of the destination {what}; "
                    "it must be a group"
                )
        consolidated = _consolidated_groups(
            store, sorted(set(_nodes.ancestors(src) + _nodes.ancestors(dst)))
        )
    store = open_zarrdb(args.file, busy_timeout=args.busy_timeout, writable=True)
    with _closing(store):
        moved = store.rename(src, dst)
        refreshed = []
        if consolidated:
            import zarr

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for group in consolidated:
                    zarr.consolidate_metadata(store, path=group or None)
                    refreshed.append(_display(group))
    if args.json:
        _emit_json(
            {
                "file": args.file,
                "source": _display(src),
                "dest": _display(dst),
                "keys": moved,
                "refreshed_consolidated_metadata": refreshed,
            }
        )
    else:
        print(f"moved {_display(src)} to {_display(dst)} ({moved:,} keys)")
        if refreshed:
            print(f"refreshed the consolidated metadata of {', '.join(refreshed)}")
    return EXIT_OK


# --- zarrdb snapshot -----------------------------------------------------------------------------


def _snapshot_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the .zarrdb file")
    parser.add_argument("dest", metavar="DEST", help="the new file")
    parser.add_argument("--overwrite", action="store_true", help="replace DEST if it exists")
    _add_busy_timeout(parser)
    parser.epilog = (
        "SQLite's online backup copies the file as of one moment, while other processes keep\n"
        "reading and writing it. The copy is one self-contained file in DELETE journal mode;\n"
        "it is written under a temporary name and renamed to DEST when complete.\n\n"
        "example:\n  zarrdb snapshot live.zarrdb backup-$(date +%F).zarrdb\n\n" + _EPILOG
    )


def _snapshot_run(args: argparse.Namespace) -> int:
    dest = args.dest
    if os.path.isdir(dest):
        raise BadInput(f"{dest}: is a directory; give the path of the new .zarrdb file")
    if os.path.exists(dest) and not args.overwrite:
        raise BadInput(
            f"{dest}: exists already; pass --overwrite to replace it, or choose another name"
        )
    parent = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(parent):
        raise BadInput(f"{dest}: the folder {parent} does not exist; create it first")
    if os.path.exists(dest) and os.path.samefile(dest, args.file):
        raise BadInput(f"{dest}: is the file itself; choose another name")
    store = open_zarrdb(args.file, busy_timeout=args.busy_timeout)
    temporary = _temporary_sibling(dest)
    _remove(temporary)
    started = time.perf_counter()
    try:
        with _closing(store):
            store.backup(temporary)
        copy = open_zarrdb(temporary, busy_timeout=args.busy_timeout)
        with _closing(copy):
            facts = copy.file_info()
        os.replace(temporary, dest)
    except BaseException:
        _remove(temporary)
        raise
    elapsed = time.perf_counter() - started
    size = os.path.getsize(dest)
    if args.json:
        _emit_json(
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
        print(
            f"snapshot of {args.file} written to {dest}: {facts['keys']:,} keys, {_human(size)}, "
            f"journal mode {facts['journal_mode']}, in {elapsed:.2f} s"
        )
    return EXIT_OK


# --- zarrdb vacuum -------------------------------------------------------------------------------


def _vacuum_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the .zarrdb file")
    _add_busy_timeout(parser)
    parser.epilog = (
        "Rebuilds the file without its free pages (space left by deleted or overwritten values).\n"
        "Needs free disk space of about the file's size, and no other writer meanwhile.\n\n"
        "example:\n  zarrdb vacuum data.zarrdb\n\n" + _EPILOG
    )


def _vacuum_run(args: argparse.Namespace) -> int:
    before = open_zarrdb(args.file, busy_timeout=args.busy_timeout)
    with _closing(before):
        facts_before = before.file_info()
    store = open_zarrdb(args.file, busy_timeout=args.busy_timeout, writable=True)
    with _closing(store):
        store.vacuum()
    after = open_zarrdb(args.file, busy_timeout=args.busy_timeout)
    with _closing(after):
        facts_after = after.file_info()
    size_before, size_after = facts_before["file_size"], facts_after["file_size"]
    if args.json:
        _emit_json(
            {
                "file": args.file,
                "size_before": size_before,
                "size_after": size_after,
                "free_pages_before": facts_before["freelist_count"],
                "free_pages_after": facts_after["freelist_count"],
            }
        )
    else:
        print(
            f"{args.file}: {_human(size_before)} -> {_human(size_after)} "
            f"(reclaimed {_human(max(0, size_before - size_after))}; free pages "
            f"{facts_before['freelist_count']:,} -> {facts_after['freelist_count']:,})"
        )
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
