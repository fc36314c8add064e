"""How an array's chunks reach a decoder of variable-length strings, read from its metadata.

A layout says, for the stored bytes of one chunk, which codecs decode them before numcodecs'
`vlen-utf8`, `vlen-bytes` or `vlen-array` decoder gets them (`Strings`), or, for a sharded
array, how to find the inner chunks in a shard and the layout of each (`Shard`; shards nest).

Every source of metadata zarr may use is read, not only the array's own: `Claims` gathers,
for one path, what its own `zarr.json` or `.zarray` says and what the consolidated metadata
it holds (a v3 group's `consolidated_metadata`, or a v2 `.zmetadata`) says of each path below. A file whose sources disagree is checked against every
layout any of them gives, since xarray may open it through any of them.

Nothing here reads the store or decodes a chunk: `_string_chunks` does, with these.
"""

from __future__ import annotations

import functools
import json
import math
from types import SimpleNamespace
from typing import Any

from zarrdb import errors

# numcodecs' decoders that read an item count from a chunk's first four bytes and make that
# many objects before reading on; each item then takes at least four bytes (its length).
_V2_VLEN = ("vlen-utf8", "vlen-bytes", "vlen-array")
NO_ENTRY = (1 << 64) - 1  # a shard index's offset and length of an inner chunk not stored


@functools.cache
def spec() -> Any:
    """What a bytes-to-bytes codec needs of a chunk's spec: only where to put its output."""
    from zarr.core.buffer import default_buffer_prototype

    return SimpleNamespace(prototype=default_buffer_prototype())


class Strings:
    """Chunks decoded by a vlen decoder: the values a chunk holds (None if the metadata does not
    say), and the codecs (zarr v3 bytes-to-bytes codecs, or numcodecs codecs for v2) that
    decode the stored bytes first, in the order they were applied when writing."""

    def __init__(self, values: int | None, after: list[Any], v2: bool) -> None:
        self.values = values
        self.after = after
        self.v2 = v2

    def signature(self) -> tuple[Any, ...]:
        """What the check of a chunk depends on (equal for layouts that check alike)."""
        return ("strings", self.values, self.v2, tuple(repr(c) for c in self.after))

    def check(self, key: str, raw: bytes | memoryview, filename: str) -> None:
        """DamagedChunkError if `raw`, the bytes the vlen decoder gets, states more items than
        it can hold or than the chunk has values."""
        if len(raw) < 4:
            return  # numcodecs refuses it before allocating
        count = int.from_bytes(raw[:4], "little")
        room = (len(raw) - 4) // 4
        limit = room if self.values is None else min(room, self.values)
        if count <= limit:
            return
        why = (
            f"its {len(raw):,} bytes hold at most {room:,}"
            if count > room
            else f"the array's chunks hold {self.values:,}"
        )
        raise errors.DamagedChunkError(
            f"{filename!r}: the chunk {key!r} of strings says it holds {count:,} of them, but "
            f"{why}: it is damaged or crafted, and is not decoded (the decoder would allocate "
            "that many before finding out)"
        )


class Shard:
    """Chunks that are shards (zarr v3's `sharding_indexed`): `after` decodes the stored bytes
    into a shard; its index, `entries` pairs of 64-bit (offset, length) encoded by `index_after`
    (bytes-to-bytes codecs) in `endian` order, lies at its start or end, and each inner chunk
    it points to has the layout `inner`."""

    def __init__(
        self,
        after: list[Any],
        entries: int,
        at_end: bool,
        endian: str,
        index_after: list[Any],
        inner: Strings | Shard,
    ) -> None:
        self.after = after
        self.entries = entries
        self.at_end = at_end
        self.endian = endian
        self.index_after = index_after
        self.inner = inner
        size = 16 * entries
        for codec in index_after:  # NotImplementedError for a codec of variable size
            size = codec.compute_encoded_size(size, spec())
        self.index_size = size

    def signature(self) -> tuple[Any, ...]:
        return ("shard", self.entries, self.at_end, self.endian, tuple(repr(c) for c in self.after),
                tuple(repr(c) for c in self.index_after), self.inner.signature())  # fmt: skip

    def index_of(self, shard: memoryview) -> memoryview | None:
        """The encoded index of a whole decoded shard; None if the shard is too short to hold
        one (zarr refuses it too)."""
        if len(shard) < self.index_size:
            return None
        return shard[len(shard) - self.index_size :] if self.at_end else shard[: self.index_size]

    def pairs(self, index: bytes | memoryview) -> tuple[Any, Any] | None:
        """The starts and ends (numpy uint64 arrays) of the stored inner chunks that are not
        empty, from the decoded index bytes; None if the index has another size than its
        entries take. Computed as zarr does, in 64 bits: an end past 2^64 wraps below its start,
        an empty slice."""
        import numpy as np

        if len(index) != 16 * self.entries:
            return None
        dtype = np.dtype("<u8" if self.endian == "little" else ">u8")
        table = np.frombuffer(index, dtype).reshape(-1, 2).astype(np.uint64)
        offsets, lengths = table[:, 0], table[:, 1]
        stored = ~((offsets == NO_ENTRY) & (lengths == NO_ENTRY))
        starts = offsets[stored]
        ends = starts + lengths[stored]  # wraps, as zarr's sum of the two does
        keep = starts < ends
        return starts[keep], ends[keep]


class Refused:
    """An array whose chunks may reach a vlen decoder through a layout the check cannot
    follow (a shard index with array-to-array codecs, shards on an irregular grid): its chunks
    are refused rather than decoded unchecked."""

    def __init__(self, why: str) -> None:
        self.why = why

    def signature(self) -> tuple[Any, ...]:
        return ("refused", self.why)

    def refuse(self, key: str, filename: str) -> None:
        raise errors.DamagedChunkError(
            f"{filename!r}: the chunk {key!r} may hold strings through {self.why}, which zarrdb "
            "cannot check before they are decoded; it is not read"
        )


Layout = Strings | Shard | Refused


def _shape(shape: Any) -> list[int] | None:
    """A chunk shape from metadata, if it is one."""
    if not isinstance(shape, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        return None
    return shape


def _values(shape: Any) -> int | None:
    checked = _shape(shape)
    return None if checked is None else math.prod(checked)


def _codec(config: Any) -> tuple[type[Any], Any]:
    """The zarr codec class of a v3 codec entry, and its configuration as a dict."""
    from zarr.registry import get_codec_class

    if isinstance(config, str):
        config = {"name": config}
    if not isinstance(config, dict) or not isinstance(config.get("name"), str):
        raise ValueError("not a codec")
    return get_codec_class(config["name"]), config


def _through(classes: list[tuple[type[Any], Any]], shape: list[int] | None) -> list[int] | None:
    """The shape of a chunk after zarr's array-to-array codecs `classes` (None where the check
    does not know it: a codec other than transpose)."""
    from zarr.codecs import TransposeCodec

    for cls, config in classes:
        if shape is None:
            return None
        if not issubclass(cls, TransposeCodec):
            return None
        order = (config.get("configuration") or {}).get("order")
        if not isinstance(order, list) or sorted(order) != list(range(len(shape))):
            raise ValueError("a transpose that is no permutation of the chunk's axes")
        shape = [shape[i] for i in order]  # as zarr's TransposeCodec.resolve_metadata
    return shape


def v3_codecs(codecs: Any, chunk_shape: Any) -> Layout | None:
    """The layout of chunks of `chunk_shape` stored through the v3 `codecs`; None if they reach
    no vlen decoder. KeyError, TypeError or ValueError where zarr cannot build the codecs."""
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
    from zarr.codecs import BytesCodec, ShardingCodec, VLenBytesCodec, VLenUTF8Codec

    if not isinstance(codecs, list):
        raise ValueError("no list of codecs")
    classes = [_codec(c) for c in codecs]
    at = next((i for i, (cls, _) in enumerate(classes) if issubclass(cls, ArrayBytesCodec)), None)
    if at is None:
        return None
    cls, config = classes[at]
    if not all(issubclass(c, ArrayArrayCodec) for c, _ in classes[:at]) or not all(
        issubclass(c, BytesBytesCodec) for c, _ in classes[at + 1 :]
    ):
        raise ValueError("codecs out of order")
    after = [c.from_dict(conf) for c, conf in classes[at + 1 :]]
    shape = _through(classes[:at], _shape(chunk_shape))
    if issubclass(cls, (VLenUTF8Codec, VLenBytesCodec)):
        return Strings(_values(shape), after, v2=False)
    if not issubclass(cls, ShardingCodec):
        return None
    conf = config.get("configuration") or {}
    inner_shape = _shape(conf.get("chunk_shape"))
    inner = v3_codecs(conf.get("codecs"), inner_shape)
    if inner is None or isinstance(inner, Refused):
        return inner
    if shape is None or inner_shape is None:
        return Refused("shards whose shape the check cannot tell")
    if len(shape) != len(inner_shape) or 0 in inner_shape:
        raise ValueError("inner chunks that do not tile the shard")
    entries = math.prod(s // c for s, c in zip(shape, inner_shape, strict=True))
    index_codecs = conf.get("index_codecs", ["bytes", "crc32c"])
    if not isinstance(index_codecs, list) or not index_codecs:
        raise ValueError("no list of index codecs")
    index = [_codec(c) for c in index_codecs]
    if not issubclass(index[0][0], BytesCodec) or not all(
        issubclass(c, BytesBytesCodec) for c, _ in index[1:]
    ):
        return Refused("a shard index not stored as plain bytes")
    endian = (index[0][1].get("configuration") or {}).get("endian", "little")
    at_end = conf.get("index_location", "end") != "start"
    try:
        return Shard(after, entries, at_end, endian, [c.from_dict(x) for c, x in index[1:]], inner)
    except NotImplementedError:
        return Refused("a shard index of variable size")


def v3_array(doc: dict[str, Any]) -> Layout | None:
    """The layout of a v3 array's chunks, from its metadata document (None: no v3 array's)."""
    if "codecs" not in doc:
        return None
    grid = doc.get("chunk_grid")
    shape = None
    if isinstance(grid, dict) and grid.get("name") == "regular":
        shape = (grid.get("configuration") or {}).get("chunk_shape")
    return v3_codecs(doc.get("codecs"), shape)


def v2_array(doc: dict[str, Any]) -> Layout | None:
    """The layout of a v2 array's chunks, from its `.zarray`. zarr decodes a v2 chunk with its
    compressor, then its filters from the last to the first: the vlen decoder met first in
    that order gets bytes (as a compressor, the stored bytes themselves)."""
    import numcodecs
    from numcodecs.registry import codec_registry

    filters = doc.get("filters") or []
    compressor = doc.get("compressor")
    chain = [*filters, *([compressor] if compressor else [])]
    ids = [c.get("id") if isinstance(c, dict) else None for c in chain]
    vlen = tuple(codec_registry[name] for name in _V2_VLEN if name in codec_registry)
    at = next(
        (
            i
            for i in reversed(range(len(ids)))
            if isinstance(ids[i], str) and issubclass(codec_registry.get(ids[i], object), vlen)
        ),
        None,
    )
    if at is None:
        return None
    if any(isinstance(c, dict) and c.get("id") == "pickle" for c in chain[at + 1 :]):
        # (the check would decode with it: unpickling, where a program allowed that for itself)
        return Refused("a pickle codec")
    after = [numcodecs.get_codec(dict(c)) for c in chain[at + 1 :]]
    return Strings(_values(doc.get("chunks")), after, v2=True)


class Claims:
    """What one node's metadata, and the consolidated metadata it holds, say of the layouts of
    the arrays at paths relative to it ("" for itself): only the arrays whose chunks reach a
    vlen decoder are kept. Every document is read both as a v3 and as a v2 array's (zarr reads
    a consolidated member by the format it names, whatever the format of the group holding it),
    and filed under its path as written and as zarr normalizes it."""

    def __init__(self) -> None:
        self.layouts: dict[str, list[Layout]] = {}
        self._seen: set[tuple[str, tuple[Any, ...]]] = set()

    def add(self, path: str, doc: Any) -> None:
        if isinstance(doc, dict):
            for layout in layouts_of(doc):
                self._file(path, layout)

    def refuse(self, path: str, why: str) -> None:
        self._file(path, Refused(why))

    def _file(self, path: str, layout: Layout) -> None:
        # (a layout once per path: names that zarr normalizes alike, thousands of them, would
        # otherwise have every chunk of each checked against all of them)
        for name in {path, _normalized(path)}:
            seen = (name, layout.signature())
            if seen not in self._seen:
                self._seen.add(seen)
                self.layouts.setdefault(name, []).append(layout)

    def read_v3(self, doc: Any) -> None:
        """A `zarr.json`: an array, or a group with consolidated metadata (flat: "g/s" for an
        array in the group "g"; zarr reads only the consolidated metadata of the group it
        opens, so a group's entry there holding its own is not read)."""
        if not isinstance(doc, dict):
            return
        self.add("", doc)
        consolidated = doc.get("consolidated_metadata")
        members = consolidated.get("metadata") if isinstance(consolidated, dict) else None
        if isinstance(members, dict):
            for name, member in members.items():
                if isinstance(name, str):
                    self.add(name, member)

    def read_v2(self, doc: Any) -> None:
        """A `.zarray`."""
        self.add("", doc)

    def read_v2_consolidated(self, doc: Any) -> None:
        """A `.zmetadata`: its `metadata` maps `path/.zarray`, `path/.zattrs` and `path/.zgroup`
        to documents, which zarr merges into one per path, in their order; each is also read
        alone."""
        members = doc.get("metadata") if isinstance(doc, dict) else None
        if not isinstance(members, dict):
            return
        merged: dict[str, dict[str, Any]] = {}
        for name, member in members.items():
            if not isinstance(name, str) or "/." not in name or not isinstance(member, dict):
                continue
            path, kind = name.rsplit("/.", 1)
            self.add(path, member)
            if kind != "zattrs":
                merged.setdefault(path, {}).update(member)
        for path, member in merged.items():
            self.add(path, member)


def _normalized(path: str) -> str:
    """A path as zarr looks it up: without empty or "." segments."""
    return "/".join(part for part in path.replace("\\", "/").split("/") if part not in ("", "."))


def layouts_of(doc: dict[str, Any]) -> list[Layout]:
    """The layouts a metadata document gives, read as a v3 array's and as a v2 array's. Where
    the check cannot read a document that names a vlen codec, a refusal: what zarr makes of it
    is not known."""
    found: list[Layout] = []
    for parse in (v3_array, v2_array):
        try:
            layout = parse(doc)
        except (
            KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError,
            RecursionError,
        ):  # fmt: skip
            if _names_vlen(doc):
                found.append(Refused("metadata naming a vlen codec that the check cannot read"))
            continue
        if layout is not None:
            found.append(layout)
    return found


def _names_vlen(doc: Any) -> bool:
    """Whether "vlen" is written anywhere in `doc` (a document too deep to write out again
    counts as naming it)."""
    try:
        return "vlen" in json.dumps(doc, default=str)
    except (RecursionError, ValueError):
        return True


def distinct(layouts: list[Layout]) -> list[Layout]:
    """`layouts` without repeats; chunks of strings decoded alike checked once, against the
    fewest values any of them states."""
    strings: dict[tuple[Any, ...], Strings] = {}
    others: dict[tuple[Any, ...], Layout] = {}
    for layout in layouts:
        if isinstance(layout, Strings):
            how = (layout.v2, tuple(repr(c) for c in layout.after))
            kept = strings.get(how)
            if kept is None or (
                layout.values is not None and (kept.values is None or layout.values < kept.values)
            ):
                strings[how] = layout
        else:
            others.setdefault(layout.signature(), layout)
    return [*strings.values(), *others.values()]
