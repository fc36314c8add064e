"""Chunks of variable-length strings, checked before they are decoded.

numcodecs' `vlen-utf8` and `vlen-bytes` decoders (zarr's codecs of those names call them, for
Zarr v3 arrays and as v2 filters) read the number of items from a chunk's first four bytes and
make an array of that many Python objects before reading on: a junk chunk of 4 KB starting with
0x7fffffff made them touch 15 GB. Each item takes at least four bytes (its length), and zarr
then shapes the items as the chunk's shape; so a count that cannot fit the chunk's bytes, or
exceeds its shape's values, is damage, refused here with DamagedChunkError naming the key.

The check runs where zarrdb hands a store to someone else's decoding (the xarray backend):
`CheckedStrings` wraps the store and checks each whole chunk of an array whose codecs decode
through vlen-utf8 or vlen-bytes as it is read, on the bytes that are then decoded (after any
compressor, decoded here too), so nothing read later can differ from what was checked. A
sharded array's inner chunks are read by byte ranges of its shards and are not checked.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncGenerator, Iterable
from types import SimpleNamespace
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import WrapperStore

from zarrdb import _compat, errors

_VLEN = ("vlen-utf8", "vlen-bytes")
_NOT_STRINGS = "not strings"  # a node that is no array of strings: keys below are not checked
_GROUP = "group"  # a group, or no node: an array may lie below


class _Strings:
    """How the chunks of one array of strings are stored: the values in a chunk (None if the
    grid does not say) and the decoders of what the vlen codec's output went through."""

    def __init__(self, path: str, values: int | None, after: list[Any], v2: bool) -> None:
        self.path = path
        self.values = values
        self.after = after  # zarr v3 bytes-to-bytes codecs, or numcodecs codecs (v2), in order
        self.v2 = v2

    async def raw(self, data: Buffer) -> bytes:
        """The bytes the vlen decoder gets for the stored chunk `data`."""
        if self.v2:
            return self.raw_sync(data)
        for codec in reversed(self.after):
            data = await _compat.decode_bytes(codec, data, self._spec(data))
        return data.to_bytes()

    def raw_sync(self, data: Buffer) -> bytes:
        if self.v2:
            raw: Any = data.to_bytes()
            for codec in reversed(self.after):
                raw = codec.decode(raw)
            return bytes(memoryview(raw).cast("B"))
        for codec in reversed(self.after):
            data = _compat.decode_bytes_sync(codec, data, self._spec(data))
        return data.to_bytes()

    @staticmethod
    def _spec(data: Buffer) -> Any:
        # A compressor's decoding needs only where to put its output.
        return SimpleNamespace(prototype=default_buffer_prototype())

    def check(self, key: str, raw: bytes, filename: str) -> None:
        """DamagedChunkError if `raw` states more items than it can hold."""
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


def _v3(path: str, doc: dict[str, Any]) -> _Strings | str:
    from zarr.registry import get_codec_class

    codecs = doc.get("codecs")
    if not isinstance(codecs, list):
        return _NOT_STRINGS
    names = [c.get("name") if isinstance(c, dict) else c for c in codecs]
    at = next((i for i, name in enumerate(names) if name in _VLEN), None)
    if at is None:
        return _NOT_STRINGS
    after = []
    for codec in codecs[at + 1 :]:
        config = codec if isinstance(codec, dict) else {"name": codec}
        after.append(get_codec_class(config["name"]).from_dict(config))
    grid = doc.get("chunk_grid")
    shape = None
    if isinstance(grid, dict) and grid.get("name") == "regular":
        shape = (grid.get("configuration") or {}).get("chunk_shape")
    return _Strings(path, _values(shape), after, v2=False)


def _v2(path: str, doc: dict[str, Any]) -> _Strings | str:
    import numcodecs

    filters = doc.get("filters") or []
    ids = [f.get("id") if isinstance(f, dict) else None for f in filters]
    at = next((i for i, name in enumerate(ids) if name in _VLEN), None)
    if at is None:
        return _NOT_STRINGS
    after = [numcodecs.get_codec(dict(f)) for f in filters[at + 1 :]]
    if doc.get("compressor"):
        after.append(numcodecs.get_codec(dict(doc["compressor"])))
    return _Strings(path, _values(doc.get("chunks")), after, v2=True)


def _values(shape: Any) -> int | None:
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        return None
    return math.prod(shape)


class CheckedStrings(WrapperStore[Store]):
    """The store, its chunks of strings checked as they are read (see the module's doc)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._nodes: dict[str, _Strings | str] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"_store": self._store}  # what was learnt is learnt again

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._store = state["_store"]
        self._nodes = {}

    def _with_store(self, store: Store) -> CheckedStrings:
        return type(self)(store)

    def _filename(self) -> str:
        return str(getattr(self._store, "path", self._store))

    def _prefixes(self, key: str) -> list[str]:
        parts = key.split("/")
        if parts[-1] in ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"):
            return []
        return ["/".join(parts[:i]) for i in range(len(parts))]

    @staticmethod
    def _node(prefix: str, found: dict[str, Buffer | None]) -> _Strings | str:
        for name, parse in (("zarr.json", _v3), (".zarray", _v2)):
            value = found.get(name)
            if value is None:
                continue
            try:
                doc = json.loads(value.to_bytes())
            except ValueError:
                return _GROUP  # unreadable: zarr says so when it opens the node
            if not isinstance(doc, dict):
                return _GROUP
            if name == ".zarray" or doc.get("node_type") == "array":
                try:
                    return parse(prefix, doc)
                except (KeyError, TypeError, ValueError):
                    return _NOT_STRINGS  # a codec zarr will not open either
            return _GROUP
        return _GROUP

    async def _layout(self, key: str) -> _Strings | None:
        for prefix in self._prefixes(key):
            node = self._nodes.get(prefix)
            if node is None:
                found = {
                    name: await self._store.get(_join(prefix, name), default_buffer_prototype())
                    for name in ("zarr.json", ".zarray")
                }
                node = self._nodes[prefix] = self._node(prefix, found)
            if node is not _GROUP:
                return node if isinstance(node, _Strings) else None
        return None

    def _layout_sync(self, key: str) -> _Strings | None:
        for prefix in self._prefixes(key):
            node = self._nodes.get(prefix)
            if node is None:
                found = {
                    name: self._store.get_sync(_join(prefix, name))  # type: ignore[attr-defined]
                    for name in ("zarr.json", ".zarray")
                }
                node = self._nodes[prefix] = self._node(prefix, found)
            if node is not _GROUP:
                return node if isinstance(node, _Strings) else None
        return None

    async def _checked(self, key: str, value: Buffer | None, whole: bool) -> Buffer | None:
        if value is not None and whole:
            layout = await self._layout(key)
            if layout is not None:
                layout.check(key, await layout.raw(value), self._filename())
        return value

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        value = await self._store.get(key, prototype, byte_range)
        return await self._checked(key, value, byte_range is None)

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        value = super().get_sync(key, prototype=prototype, byte_range=byte_range)
        if value is not None and byte_range is None:
            layout = self._layout_sync(key)
            if layout is not None:
                layout.check(key, layout.raw_sync(value), self._filename())
        return value

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        requests = list(requests)
        whole = {key for key, _, byte_range in requests if byte_range is None}
        async for key, value in self._store._get_many(requests):
            yield key, await self._checked(key, value, key in whole)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name
