"""`zarrdb info` and `zarrdb tree`: what a store holds, from its metadata documents and the
sizes of its values (chunk values are never read). Both take every kind of store `zarrdb copy`
takes: a .zarrdb file (also one at a URL, read in place), a .zip file, a directory or a URL."""

from __future__ import annotations

import argparse
import time
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from zarrdb.cli import common, hierarchy, stores
from zarrdb.cli.framework import EXIT_OK, BadInput, say
from zarrdb.cli.hierarchy import Node

# --- shared by both commands ---------------------------------------------------------------------


def _add_store_options(parser: argparse.ArgumentParser) -> None:
    common.add_opening_options(parser)


async def _open_source(args: argparse.Namespace) -> tuple[stores.Location, Any]:
    where = stores.classify(args.store, "source", common.storage_options(args, args.store))
    store = await stores.open_store(where, read_only=True, busy_timeout=args.busy_timeout)
    return where, store


def _warn_problems(where: stores.Location, problems: Sequence[str]) -> None:
    quick = "--quick " if where.remote else ""
    hint = (
        f" ('zarrdb check {quick}{where.path}' lists every problem)"
        if where.kind == "zarrdb"
        else ""
    )
    for problem in problems:
        common.warn(problem + hint)


# --- zarrdb info -----------------------------------------------------------------------------


def add_info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="STORE", help=stores.STORE_KINDS)
    _add_store_options(parser)
    parser.epilog = common.epilog(
        "Chunk values are never read: sizes come from the store's record of each value's\n"
        "length. ratio = uncompressed bytes of the whole array / stored bytes of its chunks (as\n"
        "zarr's Array.info 'Storage ratio'; a partly written array shows a high ratio).\n"
        + stores.URL_HELP,
        "zarrdb info data.zarrdb",
        "zarrdb info data.zarr",
        "zarrdb info --json data.zarrdb | jq '.arrays[].path'",
        "zarrdb info s3://bucket/data.zarrdb --storage-option region=eu-west-1",
    )


def _array_summary(node: Node, sizes: list[tuple[str, int]]) -> dict[str, Any]:
    prefix = hierarchy.key_prefix(node.path)
    lo = bisect_left(sizes, (prefix,))
    hi = len(sizes) if not prefix else bisect_left(sizes, (prefix[:-1] + "0",))
    own = set(hierarchy.metadata_keys(node.path))  # its metadata documents are not chunks
    chunks = [size for key, size in sizes[lo:hi] if key not in own]
    stored = sum(chunks)
    nbytes = node.nbytes
    return {
        "path": common.display(node.path),
        "zarr_format": node.zarr_format,
        "shape": list(node.shape),
        "dtype": node.dtype,
        "chunk_shape": None if node.chunk_shape is None else list(node.chunk_shape),
        "shard_shape": None if node.shard_shape is None else list(node.shard_shape),
        "codecs": node.codecs,
        "chunks_stored": len(chunks),
        "chunks_possible": node.chunks_possible,
        "stored_bytes": stored,
        "nbytes": nbytes,
        "ratio": _ratio(nbytes, stored),
    }


def _ratio(nbytes: int | None, stored: int) -> float | None:
    """Uncompressed / stored bytes; None when either is unknown or 0, or when the size a
    document claims makes it larger than a float holds."""
    if not nbytes or not stored or nbytes // stored > 2**1000:
        return None
    return round(nbytes / stored, 3)


def _file_facts(store: Any) -> dict[str, Any]:
    facts = store.file_info()
    return {
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
        "auto_vacuum": facts.get("auto_vacuum"),
        "free_bytes": facts["freelist_count"] * facts["page_size"],
        "keys": facts["keys"],
        "stored_bytes": facts["stored_bytes"],
    }


async def run_info(args: argparse.Namespace) -> int:
    where, store = await _open_source(args)
    with stores.closing(store):
        started = time.perf_counter()
        facts = _file_facts(store) if where.kind == "zarrdb" else None
        sizes = await stores.key_sizes(store, where, "")
        nodes, problems = await hierarchy.discover(store, "")
        arrays = [_array_summary(node, sizes) for node in nodes if node.is_array]
        elapsed = time.perf_counter() - started
    if not sizes and where.kind != "zarrdb":
        raise BadInput(
            f"{where.path}: holds nothing (no keys); give {stores.STORE_KINDS} with data"
        )
    result = {
        "store": {
            "path": where.path,
            "kind": where.kind,
            "keys": len(sizes),
            "stored_bytes": sum(size for _, size in sizes),
        },
        "file": facts,
        "groups": sum(1 for node in nodes if node.node_type == "group"),
        "arrays": arrays,
        "problems": problems,
        "seconds": round(elapsed, 3),
    }
    if args.json:
        common.emit_json(result)
        return EXIT_OK
    _print_info(result)
    _warn_problems(where, problems)
    return EXIT_OK


def _print_info(result: dict[str, Any]) -> None:
    s, f = result["store"], result["file"]
    if f is not None:
        rows = [
            ("file", f["path"]),
            ("format", f"SQLiteStore {f['format_version']}"),
            ("created by", f["created_by"] or "-"),
            ("modified at", f["modified_at"] or "-"),
            (
                "SQLite",
                f"{f['sqlite_version']} (page size {f['page_size']:,}, "
                f"journal mode {f['journal_mode']})",
            ),
            ("file size", common.human(f["file_size"])),
            (
                "free pages",
                f"{f['free_pages']:,} ({common.human(f['free_bytes'])}; {_give_back_hint(f)})"
                if f["free_pages"]
                else "0",
            ),
        ]
    else:
        kinds = {"zip": "zip file", "dir": "directory", "url": "URL"}
        rows = [("store", s["path"]), ("kind", kinds[s["kind"]])]
    rows += [
        ("keys", f"{s['keys']:,}"),
        ("stored bytes", common.human(s["stored_bytes"])),
        ("groups", f"{result['groups']:,}"),
        ("arrays", f"{len(result['arrays']):,}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        say(f"{name:<{width}}  {value}")
    for a in result["arrays"]:
        say("", f"{a['path']}  (array, Zarr v{a['zarr_format']})")
        possible = "?" if a["chunks_possible"] is None else f"{a['chunks_possible']:,}"
        lines = [
            ("shape", common.shape(a["shape"])),
            ("dtype", a["dtype"]),
            ("chunks", common.shape(a["chunk_shape"])),
            ("shards", common.shape(a["shard_shape"])),
            ("codecs", ", ".join(a["codecs"])),
            (
                "chunks stored",
                f"{a['chunks_stored']:,} / {possible}" + (" shards" if a["shard_shape"] else ""),
            ),
            ("stored bytes", common.human(a["stored_bytes"])),
            ("uncompressed", common.human(a["nbytes"])),
            ("ratio", "-" if a["ratio"] is None else f"{a['ratio']:.2f}"),
        ]
        for name, value in lines:
            say(f"  {name:<14}{value}")


# --- zarrdb tree -------------------------------------------------------------------------------


def add_tree_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="STORE", help=stores.STORE_KINDS)
    parser.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        default="",
        help="show only the sub-tree at PATH (default: the whole hierarchy)",
    )
    _add_store_options(parser)
    parser.epilog = common.epilog(
        stores.URL_HELP,
        "zarrdb tree data.zarrdb",
        "zarrdb tree data.zarrdb /climate",
        "zarrdb tree data.zip",
        "zarrdb tree https://example.org/files/data.zarrdb",
    )


def _node_label(node: Node, name: str) -> str:
    if node.node_type == "array":
        return f"{name} {common.shape(node.shape)} {node.dtype}"
    if node.node_type == "group":
        return f"{name} (group)"
    if node.node_type == "broken":
        return f"{name} (unreadable metadata)"
    return f"{name} (no metadata)"


def _node_json(node: Node, children: dict[str, list[Node]]) -> dict[str, Any]:
    out: dict[str, Any] = {"path": common.display(node.path), "node_type": node.node_type}
    if node.is_array:
        out.update(shape=list(node.shape), dtype=node.dtype)
    else:
        out["children"] = [_node_json(c, children) for c in children.get(node.path, [])]
    return out


def _draw(top: Node, children: dict[str, list[Node]], label: str) -> list[str]:
    lines = [_node_label(top, label)]

    def draw(node: Node, indent: str) -> None:
        kids = children.get(node.path, [])
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            name = kid.path.rsplit("/", 1)[-1]
            lines.append(f"{indent}{'└── ' if last else '├── '}{_node_label(kid, name)}")
            draw(kid, indent + ("    " if last else "│   "))

    draw(top, "")
    return lines


async def run_tree(args: argparse.Namespace) -> int:
    path = common.inner_path(args.path)
    where, store = await _open_source(args)
    with stores.closing(store):
        nodes, problems = await hierarchy.discover(store, path)
    if not nodes:
        raise BadInput(
            f"{where.path}: nothing at {common.display(path)!r}; 'zarrdb tree {where.path}' shows "
            "what is there"
        )
    children: dict[str, list[Node]] = {}
    for node in nodes[1:]:
        children.setdefault(hierarchy.parent(node.path), []).append(node)
    if args.json:
        common.emit_json(_node_json(nodes[0], children))
        return EXIT_OK
    say(*_draw(nodes[0], children, common.display(path)))
    _warn_problems(where, problems)
    return EXIT_OK


def _give_back_hint(facts: dict[str, Any]) -> str:
    """How the free pages of this file go back to the file system."""
    if "://" in facts["path"]:
        return "vacuum the local file before publishing it"
    if facts.get("auto_vacuum") == "incremental":
        return "the next store to open it for writing gives them back when it closes"
    return "'zarrdb vacuum' gives them back"
