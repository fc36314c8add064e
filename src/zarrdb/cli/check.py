"""`zarrdb check`: the SQLiteStore 1.0 rules and SQLite's integrity check (`zarrdb.conformance`,
through Python's own sqlite3), then the hierarchy: metadata documents and chunk keys.

`--quick` checks through zarrdb's store only (what opening a file checks, then the hierarchy),
which is how a file at a URL is checked in place; without it, a URL is downloaded to a
temporary file and checked whole, as a local file is.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import warnings
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from zarrdb import conformance, errors, remote
from zarrdb.cli import common, hierarchy
from zarrdb.cli.framework import EXIT_OK, EXIT_PROBLEMS, BadInput, one_line, say
from zarrdb.cli.hierarchy import MetadataError, Node
from zarrdb.cli.outputs import remove
from zarrdb.cli.stores import (
    closing,
    hot_journal,
    open_zarrdb,
    remote_errors,
    remote_options,
    require_zarrdb_path,
)

CAP = 50  # findings of one kind printed at most, without --all


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file", metavar="FILE", help="the .zarrdb file, or its URL (s3://, gs://, az://, https://)"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="count warnings (what the spec recommends) as problems too",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help=f"print every problem (default: at most {CAP} of each kind)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="check through zarrdb's store only (a URL is read in place): what opening the file "
        "checks, the metadata documents and the chunk keys (and, for a local file, that the "
        "values' lengths fit in the file); skips the checks that read the whole file with "
        "Python's sqlite3",
    )
    common.add_opening_options(parser)
    parser.epilog = common.epilog(
        "Checks: the SQLiteStore 1.0 rules (application id, exactly the two tables with their\n"
        "columns, types, NOT NULL and BINARY keys, the metadata records, no NULLs, keys TEXT and\n"
        "values BLOB, the key rules on every key, journal mode); SQLite's integrity check (also\n"
        "on a damaged file); every zarr.json is a JSON object with zarr_format 3 and a node_type\n"
        "that zarr can read; every other key is a chunk of an array and lies inside its chunk\n"
        "grid (shards count as chunks of the outer grid; both the default and the v2 chunk key\n"
        "encoding are understood). Each problem is one line; 'ok' when there is none.\n"
        "--quick skips SQLite's integrity check and the spec's checks of the schema, metadata\n"
        "records, rows and journal mode (and says so). A URL is read in place with --quick;\n"
        "without it, the file is downloaded to a temporary file (in TMPDIR) and checked whole.",
        "zarrdb check data.zarrdb && echo sound",
        "zarrdb check --quick s3://bucket/data.zarrdb --storage-option region=eu-west-1",
    )


class Findings:
    """Problems and warnings, each of a kind, capped per kind for printing."""

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self.counts: dict[tuple[str, str], int] = {}

    def add(self, level: str, kind: str, message: str) -> None:
        n = self.counts.get((level, kind), 0) + 1
        self.counts[(level, kind)] = n
        if self.cap is None or n <= self.cap:
            (self.problems if level == "problem" else self.warnings).append(message)

    def problem(self, kind: str, message: str) -> None:
        self.add("problem", kind, message)

    def warning(self, kind: str, message: str) -> None:
        self.add("warning", kind, message)

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


def skipped_by_quick(path: str) -> str:
    """The line that says what --quick left out."""
    how = f"zarrdb check {path}" + (" downloads the file and runs them" if "://" in path else "")
    return (
        "quick check: SQLite's integrity check and the spec's checks of the schema, metadata "
        f"records, rows and journal mode were skipped (they read the whole file; {how})"
    )


async def run(args: argparse.Namespace) -> int:
    path = args.file
    options = common.storage_options(args, path)
    found = Findings(None if args.all else CAP)
    if "://" in path and not remote.is_url(path):
        raise BadInput(
            f"{path}: is not a URL zarrdb reads .zarrdb files from ({', '.join(remote.SCHEMES)})"
        )
    if args.quick:
        nkeys = await quick_check(path, options, found, args.busy_timeout)
    elif "://" in path:
        with downloaded(path, options) as copy:
            nkeys = await full_check(copy, found, args.busy_timeout, shown=path)
    else:
        nkeys = await full_check(path, found, args.busy_timeout)
    problems = found.total("problem") + (found.total("warning") if args.strict else 0)
    if args.json:
        common.emit_json(
            {
                "path": path if "://" in path else os.path.abspath(path),
                "ok": problems == 0,
                "keys": nkeys,
                "problem_count": found.total("problem"),
                "warning_count": found.total("warning"),
                "problems": found.problems,
                "warnings": found.warnings,
                "skipped": [skipped_by_quick(path)] if args.quick else [],
            }
        )
    else:
        if args.quick:
            say(skipped_by_quick(path))
        say(*found.problems, *found.elided("problem"))
        say(*(f"warning: {line}" for line in found.warnings + found.elided("warning")))
        if problems:
            say(f"{found.total('problem'):,} problem(s), {found.total('warning'):,} warning(s)")
        else:
            say("ok")
    return EXIT_PROBLEMS if problems else EXIT_OK


async def full_check(
    path: str, found: Findings, busy_timeout: float, shown: str = ""
) -> int | None:
    """Every check, on a local file; returns the number of keys (None if it cannot be read).
    `shown` names the file in messages instead of `path` (a download's source URL)."""

    def named(text: str) -> str:
        return text.replace(path, shown) if shown else text

    require_zarrdb_path(path)
    if os.path.exists(f"{path}-journal"):
        _settle_journal(path, busy_timeout, named)
    try:
        report = conformance.check_file(path, busy_timeout=busy_timeout)
    except errors.DatabaseLockedError:
        raise BadInput(
            f"{path}: the database is locked by another process (waited {busy_timeout:g} s);"
            " retry when it is done, or wait longer with --busy-timeout SECONDS"
        ) from None
    except errors.ZarrDBError as exc:
        raise BadInput(named(str(exc))) from None
    for finding in report.findings:
        found.add(finding.level, finding.kind, named(finding.message))
    if not report.readable:
        return None
    try:
        with warnings.catch_warnings():  # what opening warns about is listed already
            warnings.simplefilter("ignore")
            with closing(open_zarrdb(path, busy_timeout=busy_timeout, checking=True)) as store:
                return await check_hierarchy(store, found)
    except errors.DatabaseCorruptError as exc:
        found.problem("damage", named(f"damaged: {exc}"))
    return None


def _settle_journal(path: str, busy_timeout: float, named: Callable[[str], str]) -> None:
    """A hot journal beside `path` is rolled back by the store where it is one of the file's
    owner (a crashed writer), as any connection that may write would, or refused, naming it,
    where it is another user's; before SQLite's own check opens it. Other errors are left to
    the checks."""
    from zarrdb import SQLiteStore

    store = SQLiteStore(path, read_only=True, busy_timeout=busy_timeout)
    try:
        store.ensure_open()
    except errors.ReadOnlyError as exc:
        if exc.extended_code == errors.SQLITE_READONLY_ROLLBACK:
            raise BadInput(named(hot_journal(path, exc))) from None
    except errors.ZarrDBError:
        pass
    finally:
        store.close()


async def quick_check(
    path: str, options: dict[str, Any], found: Findings, busy_timeout: float
) -> int | None:
    """What opening the file through zarrdb's store checks (the format), then the hierarchy;
    returns the number of keys (None if the file cannot be read)."""
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always")
            store = open_zarrdb(
                path, busy_timeout=busy_timeout, checking=True, storage_options=options
            )
    except errors.FormatError as exc:  # a version or flags this zarrdb cannot read
        found.problem("format", f"format: {exc}")
        return None
    except errors.DatabaseCorruptError as exc:
        found.problem("damage", f"damaged: {exc}")
        return None
    for note in notes:  # what the store warns about a file it reads anyway: a foreign app id
        if issubclass(note.category, UserWarning):
            text = str(note.message).replace("; reading it anyway", "")
            found.problem("format", f"format: {text}")
    try:
        with closing(store):
            if not remote.is_url(path):
                await _check_lengths(store, found)
            return await check_hierarchy(store, found)
    except errors.DatabaseCorruptError as exc:
        found.problem("damage", f"damaged: {exc}")
    return None


async def _check_lengths(store: Any, found: Findings) -> None:
    """The values' lengths, read from the rows (not the values): in a sound file they add up
    to no more than the file. A crafted overflow chain that loops makes a few pages claim
    gigabytes; the full check's integrity check finds the loop itself. Local files only: the
    rows of small values are most of a file, which a check in place of a URL must not fetch
    (reading such a value is refused all the same)."""
    try:
        await store.getsize_prefix("")
    except errors.DatabaseCorruptError as exc:
        found.problem("damage", f"damaged: {exc}")


@contextlib.contextmanager
def downloaded(url: str, options: dict[str, Any]) -> Iterator[str]:
    """A local copy of the .zarrdb at `url`, byte for byte, in a new private folder of
    TMPDIR; the copy and the folder are removed afterwards, and nothing else. BadInput if
    the URL names no file (before any request) or the folder has no room for the copy."""
    settings = remote_options(url, options)
    with remote_errors(url):
        remote.RemoteLocation(url, storage_options=settings)  # refuses a URL naming no file
    folder = tempfile.mkdtemp(prefix="zarrdb-check-")
    copy = os.path.join(folder, "file.zarrdb")  # never a name from the URL (".." is one)
    try:
        with remote_errors(url):
            size = remote.open_remote(url, storage_options=settings).size
            free = shutil.disk_usage(folder).free
            if size > free:
                raise BadInput(
                    f"{url}: checking it whole needs a local copy of {common.human(size)}, and "
                    f"{os.path.dirname(folder)} has {common.human(free)} free; set TMPDIR to a folder "
                    f"with room, or check it in place with 'zarrdb check --quick {url}'"
                )
            remote.download(url, copy, storage_options=settings)
        yield copy
    finally:
        remove(copy)
        with contextlib.suppress(OSError):
            os.rmdir(folder)


async def _zarr_cannot_read(store: Any, node: Node) -> str | None:
    """Why the installed zarr cannot open the node described by a zarr.json, or None."""
    import zarr.api.asynchronous as zarr_async

    try:
        if node.is_array:
            await zarr_async.open_array(store=store, path=node.path, mode="r", zarr_format=3)
        else:
            await zarr_async.open_group(store=store, path=node.path, mode="r", zarr_format=3)
    except Exception as exc:  # noqa: BLE001 - whatever zarr objects to
        return f"{type(exc).__name__}: {one_line(str(exc))}"
    return None


async def _metadata_nodes(store: Any, keys: list[str], found: Findings) -> dict[str, Node]:
    """The nodes the metadata documents among `keys` describe (problems go to `found`)."""
    import zarr
    from zarr.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    nodes: dict[str, Node] = {}
    for key in keys:
        path, _, name = key.rpartition("/")
        raw = await store.get(key, prototype=proto)
        if raw is None:  # deleted meanwhile
            continue
        try:
            doc = hierarchy.parse_json(raw.to_bytes(), key)
            if name == hierarchy.V3_METADATA:
                node = hierarchy.node_from_v3(path, doc)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    reason = await _zarr_cannot_read(store, node)
                if reason:
                    found.warning(
                        "zarr", f"{key}: zarr {zarr.__version__} cannot read it ({reason})"
                    )
            elif name in (hierarchy.V2_ARRAY, hierarchy.V2_GROUP):
                node = hierarchy.node_from_v2(path, name, doc, {})
            else:
                continue  # .zattrs, .zmetadata: JSON objects is all we ask
        except MetadataError as exc:
            found.problem("metadata document", str(exc))
            continue
        if path in nodes:
            found.problem(
                "metadata document", f"{common.display(path)}: has both Zarr v3 and v2 metadata"
            )
        nodes[path] = node
    return nodes


async def check_hierarchy(store: Any, found: Findings) -> int:
    """Key rules, metadata documents and chunk keys; returns the number of keys."""
    # From the index of keys alone: listing sizes would read every page of small values.
    keys = sorted([key async for key in store.list_prefix("")])
    bad_keys = set()
    for key in keys:
        problem = conformance.key_problem(key)
        if not problem:
            continue
        bad_keys.add(key)
        if problem.endswith(conformance.KEY_RULES):
            found.problem(
                "key",
                f"key {key!r}: breaks the key rules (a key must not start or end with '/' nor "
                "contain '//')",
            )
        else:  # a '..' segment, a NUL: a copy to a folder or a zip would refuse it
            reason = problem.removeprefix(f"invalid key {key!r}: ")
            found.problem("unsafe key", f"key {key!r}: unsafe key: {reason}")
    meta_keys = [k for k in keys if k.rpartition("/")[2] in hierarchy.METADATA_NAMES]
    nodes = await _metadata_nodes(store, meta_keys, found)
    for path in nodes:
        for above in hierarchy.ancestors(path):
            if above != path and above in nodes and nodes[above].is_array:
                found.problem(
                    "node",
                    f"{common.display(path)}: a node inside the array {common.display(above)}",
                )
                break
    arrays = sorted((p for p, n in nodes.items() if n.is_array), key=hierarchy.key_prefix)
    if "" in nodes and nodes[""].is_array:
        arrays = [""]
    _check_chunk_keys(keys, set(meta_keys), bad_keys, nodes, arrays, found)
    return len(keys)


def _check_chunk_keys(
    keys: list[str], meta_keys: set[str], bad_keys: set[str], nodes: dict[str, Node],
    arrays: list[str], found: Findings,
) -> None:  # fmt: skip
    """Each chunk key belongs to the array above it and lies inside its chunk grid."""
    covered: list[tuple[int, int]] = []
    for path in arrays:
        node = nodes[path]
        prefix = hierarchy.key_prefix(path)
        lo = bisect_left(keys, prefix)
        hi = len(keys) if not prefix else bisect_left(keys, prefix[:-1] + "0")
        covered.append((lo, hi))
        for key in keys[lo:hi]:
            if key in meta_keys or key in bad_keys:
                continue
            result = node.decode_chunk_key(key[len(prefix) :])
            if isinstance(result, str):
                found.problem(
                    "chunk key", f"key {key!r}: {result} of the array {common.display(path)}"
                )
    position = 0
    for lo, hi in sorted(covered) + [(len(keys), len(keys))]:
        for key in keys[position : max(position, lo)]:
            if key not in meta_keys and key not in bad_keys:
                found.problem(
                    "stray key", f"key {key!r}: belongs to no array (no array metadata above it)"
                )
        position = max(position, hi)
