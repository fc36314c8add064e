"""Zarr hierarchies read from their metadata documents only (never from chunk values).

The commands describe, draw and check a hierarchy from here: a node's metadata document
(`zarr.json` for Zarr v3; `.zarray` / `.zgroup` for Zarr v2) is parsed into a `Node`, and an
array node says which keys are its chunks and whether a chunk key lies inside its chunk grid
(shards count as chunks of the outer grid). `read_node` and `discover` find the nodes of any
zarr store through its listing; everything else is pure functions on JSON.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zarr.abc.store import Store

V3_METADATA = "zarr.json"
V2_ARRAY = ".zarray"
V2_GROUP = ".zgroup"
V2_ATTRS = ".zattrs"
V2_CONSOLIDATED = ".zmetadata"
# Every key name that holds metadata rather than chunks.
METADATA_NAMES = frozenset({V3_METADATA, V2_ARRAY, V2_GROUP, V2_ATTRS, V2_CONSOLIDATED})

# Bytes per element of the Zarr v3 data types with a fixed size.
_V3_ITEMSIZE = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
    "numpy.datetime64": 8,
    "numpy.timedelta64": 8,
}
_RAW_BITS = re.compile(r"^r(\d+)$")
# Bounds on what a document may claim, so that no claim sizes an allocation or a number too
# large to print: numpy's dimensions, int64 extents, and a depth of nesting no real hierarchy
# approaches (deeper ones would exhaust Python's recursion in drawing or dumping the tree).
MAX_DIMS = 64
MAX_EXTENT = 2**63 - 1
MAX_DEPTH = 100
MAX_SHARD_NESTING = 16

_QUOTE = reprlib.Repr()
_QUOTE.maxstring = _QUOTE.maxother = 60
_QUOTE.maxlevel = 3


def quote(value: Any) -> str:
    """A short repr of a value from a document, for messages (long or deep values cut)."""
    return _QUOTE.repr(value)


class MetadataError(ValueError):
    """A metadata document that cannot describe a node; the message says what is wrong."""


def join(path: str, name: str) -> str:
    """`name` below the node at `path` ("" is the root)."""
    return f"{path}/{name}" if path else name


def key_prefix(path: str) -> str:
    """The prefix every key below the node at `path` starts with ("" for the root)."""
    return f"{path}/" if path else ""


def parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def ancestors(path: str) -> list[str]:
    """Paths of the groups above `path`, the root ("") first."""
    out = [""]
    parts = path.split("/")[:-1] if path else []
    for i in range(len(parts)):
        out.append("/".join(parts[: i + 1]))
    return out


def parse_json(raw: bytes, key: str) -> dict[str, Any]:
    """A metadata document as a JSON object; MetadataError if it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetadataError(f"{key} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetadataError(f"{key} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:  # json's own bound on nesting, met before any memory is spent
        raise MetadataError(f"{key} nests JSON deeper than can be read") from None
    except ValueError as exc:  # an integer past Python's limit on digits (sys.int_info)
        raise MetadataError(f"{key} holds a number too large to read ({exc})") from None
    if not isinstance(doc, dict):
        raise MetadataError(f"{key} holds a JSON {type(doc).__name__}, not an object")
    return doc


@dataclass
class Node:
    """A group or an array, as its metadata describes it."""

    path: str
    node_type: str  # "group" | "array"
    zarr_format: int
    attributes: dict[str, Any] = field(default_factory=dict)
    # Arrays only:
    shape: tuple[int, ...] = ()
    dtype: str = ""
    itemsize: int | None = None
    # Chunks (shards for a sharded array) along each dimension of the outer grid, counted
    # without building the grid: a document can claim 10**18 of them.
    grid_counts: tuple[int, ...] | None = None
    grid_chunk_shape: tuple[int, ...] | None = None  # the regular outer grid's chunk shape
    chunk_shape: tuple[int, ...] | None = None  # the chunk (inner chunk of a shard)
    shard_shape: tuple[int, ...] | None = None
    codecs: list[str] = field(default_factory=list)
    key_encoding: str = "default"  # "default" ("c" prefix) | "v2"
    separator: str = "/"
    consolidated: bool = False  # a group holding consolidated metadata

    @property
    def is_array(self) -> bool:
        return self.node_type == "array"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int | None:
        """Bytes of the whole array uncompressed (None for variable-size data types)."""
        if self.itemsize is None:
            return None
        return math.prod(self.shape) * self.itemsize

    @property
    def chunks_possible(self) -> int | None:
        counts = self.grid_counts
        return None if counts is None else math.prod(counts)

    def chunk_key(self, coords: tuple[int, ...]) -> str:
        """The key (relative to the array) of the chunk at `coords` of the outer grid."""
        if self.key_encoding == "v2":
            return self.separator.join(map(str, coords)) if coords else "0"
        return self.separator.join(("c", *map(str, coords)))

    def decode_chunk_key(self, rel: str) -> tuple[int, ...] | str:
        """The grid coordinates of the chunk key `rel` (relative to the array), or a message
        saying why `rel` is not a chunk key of this array."""
        sep = self.separator
        if self.key_encoding == "v2":
            if not self.shape:
                return () if rel == "0" else "not a chunk key (a 0-d array's only chunk is '0')"
            parts = rel.split(sep)
        else:
            if not self.shape:
                return () if rel == "c" else "not a chunk key (a 0-d array's only chunk is 'c')"
            if not rel.startswith("c" + sep):
                return f"not a chunk key (chunk keys start with 'c{sep}')"
            parts = rel[2:].split(sep)
        if len(parts) != len(self.shape):
            return (
                f"not a chunk key of this {len(self.shape)}-d array "
                f"({len(parts)} coordinates, separator {sep!r})"
            )
        coords = []
        for part in parts:
            if not (part.isascii() and part.isdecimal()):
                return f"not a chunk key ({quote(part)} is not a chunk index)"
            if len(part) > len(str(MAX_EXTENT)):  # int() refuses past 4,300 digits
                return f"chunk index of {len(part):,} digits is too large for any chunk grid"
            coords.append(int(part))
        counts = self.grid_counts
        if counts is not None:
            for dim, (index, count) in enumerate(zip(coords, counts)):
                if index >= count:
                    return (
                        f"chunk index {index} of dimension {dim} is outside the chunk grid "
                        f"({count} {'shards' if self.shard_shape else 'chunks'} along it)"
                    )
        return tuple(coords)


# --- Zarr v3 -----------------------------------------------------------------------------------


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise MetadataError(f"{what} must be a list of non-negative integers, not {quote(value)}")
    if len(value) > MAX_DIMS:
        raise MetadataError(f"{what} has {len(value):,} dimensions; arrays have at most {MAX_DIMS}")
    if any(v > MAX_EXTENT for v in value):
        raise MetadataError(f"{what} {quote(value)} exceeds 2**63 - 1 in a dimension")
    return tuple(value)


def _named(value: Any, what: str) -> tuple[str, dict[str, Any]]:
    """(name, configuration) of a Zarr v3 extension point written as a name or an object."""
    if isinstance(value, str):
        return value, {}
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        config = value.get("configuration", {})
        if not isinstance(config, dict):
            raise MetadataError(f"{what} configuration must be an object, not {quote(config)}")
        return value["name"], config
    raise MetadataError(f"{what} must be a name or an object with a 'name', not {quote(value)}")


def _v3_dtype(value: Any) -> tuple[str, int | None]:
    name, config = _named(value, "data_type")
    itemsize = _V3_ITEMSIZE.get(name)
    raw = _RAW_BITS.match(name)
    if raw and len(raw.group(1)) > 18:  # past int64 (and, at 4,300 digits, past int())
        raise MetadataError(f"data_type {quote(name)}: more bits than any array holds")
    if raw and int(raw.group(1)) % 8 == 0:
        itemsize = int(raw.group(1)) // 8
    length = config.get("length_bytes")
    if isinstance(length, int) and not isinstance(length, bool):
        if not 0 <= length <= MAX_EXTENT:
            raise MetadataError(f"data_type length_bytes {quote(length)} is out of range")
        itemsize = length
    label = name
    if config:
        label += "[" + ", ".join(f"{v}" for v in config.values()) + "]"
    return label, itemsize


def _count_chunks(spec: Any, extent: int, dim: int) -> int:
    """How many chunks of a regular or rectilinear grid cover `extent` in one dimension,
    counted, never listed (a run [size, count] may claim 10**18 chunks)."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec <= 0:
            raise MetadataError(f"chunk size {spec} of dimension {dim} must be positive")
        return -(-extent // spec)
    if not isinstance(spec, list):
        raise MetadataError(f"chunk sizes of dimension {dim} must be an integer or a list")
    count = covered = 0
    for item in spec:
        if isinstance(item, int) and not isinstance(item, bool) and item > 0:
            size, repeat = item, 1
        elif (
            isinstance(item, list)
            and len(item) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in item)
        ):
            size, repeat = item  # run-length encoded [size, count]
        else:
            raise MetadataError(f"bad chunk edge {quote(item)} in dimension {dim}")
        if covered >= extent:
            continue  # edges past the extent are not chunks of the grid
        used = min(repeat, -(-(extent - covered) // size))
        count += used
        covered += used * size
    if covered < extent:
        raise MetadataError(f"the chunk edges of dimension {dim} cover {covered} < {extent}")
    return count


def _codec_names(codecs: Any, nesting: int = 0) -> tuple[list[str], tuple[int, ...] | None]:
    """Display names of a v3 codec list and the inner chunk shape of a sharding codec."""
    if not isinstance(codecs, list) or not codecs:
        raise MetadataError(f"codecs must be a non-empty list, not {quote(codecs)}")
    if nesting > MAX_SHARD_NESTING:
        raise MetadataError(f"shards nest more than {MAX_SHARD_NESTING} levels deep")
    names: list[str] = []
    inner: tuple[int, ...] | None = None
    for codec in codecs:
        name, config = _named(codec, "codec")
        if name == "sharding_indexed":
            inner = _int_tuple(config.get("chunk_shape"), "sharding_indexed chunk_shape")
            sub, _ = _codec_names(config.get("codecs", [{"name": "bytes"}]), nesting + 1)
            names.append(f"sharding_indexed({', '.join(sub)})")
        else:
            names.append(name)
    return names, inner


def node_from_v3(path: str, doc: dict[str, Any]) -> Node:
    """The node a `zarr.json` document describes; MetadataError if it does not."""
    where = join(path, V3_METADATA)
    fmt = doc.get("zarr_format")
    if fmt != 3:
        raise MetadataError(f"{where}: zarr_format is {quote(fmt)}, not 3")
    node_type = doc.get("node_type")
    attrs = doc.get("attributes", {})
    if not isinstance(attrs, dict):
        raise MetadataError(f"{where}: attributes must be an object")
    if node_type == "group":
        consolidated = doc.get("consolidated_metadata") is not None
        return Node(path, "group", 3, attributes=attrs, consolidated=consolidated)
    if node_type != "array":
        raise MetadataError(f"{where}: node_type is {quote(node_type)}, not 'group' or 'array'")
    missing = [
        name
        for name in (
            "shape",
            "data_type",
            "chunk_grid",
            "chunk_key_encoding",
            "codecs",
            "fill_value",
        )
        if name not in doc
    ]
    if missing:
        raise MetadataError(f"{where}: the array metadata lacks {', '.join(missing)}")
    try:
        shape = _int_tuple(doc["shape"], "shape")
        dtype, itemsize = _v3_dtype(doc["data_type"])
        grid_name, grid_config = _named(doc["chunk_grid"], "chunk_grid")
        grid: tuple[int, ...] | None
        grid_chunk_shape: tuple[int, ...] | None = None
        if grid_name == "regular":
            grid_chunk_shape = _int_tuple(grid_config.get("chunk_shape"), "chunk_shape")
            if len(grid_chunk_shape) != len(shape):
                raise MetadataError(
                    f"chunk_shape {list(grid_chunk_shape)} does not match shape {list(shape)}"
                )
            grid = tuple(
                _count_chunks(c, s, d) for d, (c, s) in enumerate(zip(grid_chunk_shape, shape))
            )
        elif grid_name == "rectilinear":
            specs = grid_config.get("chunk_shapes")
            if not isinstance(specs, list) or len(specs) != len(shape):
                raise MetadataError("rectilinear chunk_shapes must list one entry per dimension")
            grid = tuple(_count_chunks(spec, s, d) for d, (spec, s) in enumerate(zip(specs, shape)))
        else:
            grid = None  # an unknown grid: chunk keys cannot be checked against it
        enc_name, enc_config = _named(doc["chunk_key_encoding"], "chunk_key_encoding")
        if enc_name not in ("default", "v2"):
            raise MetadataError(f"unknown chunk_key_encoding {quote(enc_name)}")
        separator = enc_config.get("separator", "/" if enc_name == "default" else ".")
        if separator not in ("/", "."):
            raise MetadataError(f"chunk key separator {quote(separator)} is not '/' or '.'")
        codecs, inner = _codec_names(doc["codecs"])
    except MetadataError as exc:
        raise MetadataError(f"{where}: {exc}") from None
    sharded = inner is not None
    return _array_node(
        path, 3, attrs, shape, (dtype, itemsize), grid, grid_chunk_shape, codecs,
        (enc_name, separator), chunk_shape=inner if sharded else grid_chunk_shape,
        shard_shape=grid_chunk_shape if sharded else None,
    )  # fmt: skip


# --- Zarr v2 -----------------------------------------------------------------------------------


def node_from_v2(path: str, name: str, doc: dict[str, Any], attrs: dict[str, Any]) -> Node:
    """The node a `.zarray` or `.zgroup` document describes; MetadataError if it does not."""
    where = join(path, name)
    fmt = doc.get("zarr_format")
    if fmt != 2:
        raise MetadataError(f"{where}: zarr_format is {quote(fmt)}, not 2")
    if name == V2_GROUP:
        return Node(path, "group", 2, attributes=attrs)
    try:
        shape = _int_tuple(doc.get("shape"), "shape")
        chunks = _int_tuple(doc.get("chunks"), "chunks")
        if len(chunks) != len(shape):
            raise MetadataError(f"chunks {list(chunks)} do not match shape {list(shape)}")
        dtype_spec = doc.get("dtype")
        dtype, itemsize = dtype_spec if isinstance(dtype_spec, str) else quote(dtype_spec), None
        try:
            import numpy as np

            np_dtype = np.dtype(
                dtype_spec if not isinstance(dtype_spec, list) else [tuple(f) for f in dtype_spec]
            )
            if np_dtype.kind != "O":
                itemsize = np_dtype.itemsize
            dtype = np_dtype.str if not isinstance(dtype_spec, list) else "structured"
        except (TypeError, ValueError, RecursionError):
            pass
        separator = doc.get("dimension_separator") or "."
        if separator not in ("/", "."):
            raise MetadataError(f"dimension_separator {quote(separator)} is not '/' or '.'")
        codecs = []
        for filt in doc.get("filters") or []:
            codecs.append(str(filt.get("id", "?")) if isinstance(filt, dict) else "?")
        compressor = doc.get("compressor")
        if isinstance(compressor, dict):
            codecs.append(str(compressor.get("id", "?")))
        grid = tuple(_count_chunks(c, s, d) for d, (c, s) in enumerate(zip(chunks, shape)))
    except MetadataError as exc:
        raise MetadataError(f"{where}: {exc}") from None
    return _array_node(
        path, 2, attrs, shape, (dtype, itemsize), grid, chunks, codecs or ["(none)"],
        ("v2", separator), chunk_shape=chunks,
    )  # fmt: skip


def _array_node(
    path: str, zarr_format: int, attrs: dict[str, Any], shape: tuple[int, ...],
    dtype: tuple[str, int | None], grid: tuple[int, ...] | None,
    grid_chunk_shape: tuple[int, ...] | None, codecs: list[str], encoding: tuple[str, str],
    *, chunk_shape: tuple[int, ...] | None, shard_shape: tuple[int, ...] | None = None,
) -> Node:  # fmt: skip
    """An array node; `dtype` is (name, itemsize), `grid` the chunks along each dimension,
    `encoding` (chunk key encoding, separator)."""
    return Node(
        path, "array", zarr_format, attributes=attrs, shape=shape, dtype=dtype[0],
        itemsize=dtype[1], grid_counts=grid, grid_chunk_shape=grid_chunk_shape,
        chunk_shape=chunk_shape, shard_shape=shard_shape, codecs=codecs, key_encoding=encoding[0],
        separator=encoding[1],
    )  # fmt: skip


# --- reading nodes from a store ------------------------------------------------------------------


def metadata_keys(path: str) -> list[str]:
    """Every key that may hold metadata of the node at `path`."""
    prefix = key_prefix(path)
    return [prefix + name for name in sorted(METADATA_NAMES)]


async def read_node(store: Store, path: str) -> tuple[Node | None, str | None]:
    """The node whose metadata is at `path` (None if there is none) and the problem with its
    metadata, if any. Reads metadata documents only."""
    from zarr.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    prefix = key_prefix(path)
    raw = await store.get(prefix + V3_METADATA, prototype=proto)
    try:
        if raw is not None:
            return node_from_v3(path, parse_json(raw.to_bytes(), prefix + V3_METADATA)), None
        for name in (V2_ARRAY, V2_GROUP):
            raw = await store.get(prefix + name, prototype=proto)
            if raw is None:
                continue
            doc = parse_json(raw.to_bytes(), prefix + name)
            attrs_raw = await store.get(prefix + V2_ATTRS, prototype=proto)
            attrs = {} if attrs_raw is None else parse_json(attrs_raw.to_bytes(), prefix + V2_ATTRS)
            return node_from_v2(path, name, doc, attrs), None
    except MetadataError as exc:
        return Node(path, "broken", 0), str(exc)
    return None, None


async def discover(store: Store, path: str) -> tuple[list[Node], list[str]]:
    """Every node at and below `path`, parents before children, found through list_dir (a
    group's children, never the chunks of an array) and the metadata documents alone. A sub-tree
    without metadata that has something below it is an "implicit" node. Nothing deeper than
    MAX_DEPTH levels is visited (a problem says so). Returns the nodes and the problems met."""
    found: list[Node] = []
    problems: list[str] = []
    root, problem = await read_node(store, path)
    if problem:
        problems.append(problem)
    if root is None and path and await store.is_empty(path):
        return [], problems
    # Depth first, children in name order, each read just before it is visited; a stack, not
    # recursion, since the depth is the file's to choose.
    stack: list[tuple[str, Node | None]] = [(path, root or Node(path, "implicit", 0))]
    while stack:
        p, node = stack.pop()
        if node is None:
            node, problem = await read_node(store, p)
            if problem:
                problems.append(problem)
            node = node or Node(p, "implicit", 0)
        found.append(node)
        if node.node_type in ("array", "broken"):
            continue
        children = []
        for name in sorted({name async for name in store.list_dir(p)}):
            if not name or name in METADATA_NAMES:
                continue  # "" comes from a key breaking the key rules ('zarrdb check' says so)
            child = join(p, name)
            if not await store.is_empty(child):  # else a key, not a sub-tree
                children.append(child)
        if children and p.count("/") + 1 >= MAX_DEPTH:
            problems.append(
                f"/{p}: the hierarchy nests more than {MAX_DEPTH} levels deep here; what lies "
                "below is not shown"
            )
            continue
        stack.extend((child, None) for child in reversed(children))
    return found, problems
