"""Chunks of variable-length strings, checked before they are decoded.

numcodecs' `vlen-utf8`, `vlen-bytes` and `vlen-array` decoders (zarr's codecs of those names
call them, for Zarr v3 arrays, as v2 filters and as a v2 compressor) read the number of items
from a chunk's first four bytes and make an array of that many Python objects before reading
on: a junk chunk of 4 KB starting with 0x7fffffff made them touch 15 GB. Each item takes at
least four bytes (its length), and zarr then shapes the items as the chunk's shape; so a count
that cannot fit the chunk's bytes, or exceeds its shape's values, is damage, refused here with
DamagedChunkError naming the key.

The check runs where zarrdb hands a store to someone else's decoding (the xarray backend):
`CheckedStrings` wraps the store and checks what each read returns, on the bytes that are then
decoded, so nothing read later can differ from what was checked:

- a whole chunk of an array whose codecs reach a vlen decoder, decoded by the codecs before it
  (`_string_layouts` reads the layout from every metadata zarr may use: the array's own and
  every consolidated metadata above it; a chunk is checked against each layout they give);
- a whole shard of such an array: every inner chunk its index points to, and shards in them;
- byte ranges of a shard (how zarr reads parts of one): the shard's index is read, and every
  inner chunk that lies inside a range returned is checked; zarr decodes an inner chunk only
  from the bytes its index gives, which are read whole in one range.

What the check cannot follow as zarr would is refused, never passed unchecked: a codec of the
layout refusing the bytes, a shard shorter than its index, an index of another size (a wrong
idea of the shard's shape reads a wrong index, which zarr would not), a layout it does not know
(`_string_layouts.Refused`).

Every read method of zarr's Store is overridden here (tests/security checks that none is
missing). The check assumes the file does not change during a read: an index read here and
the ranges zarr reads next come from two reads.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterable, Sequence
from typing import Any

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import WrapperStore

from zarrdb import _compat, errors
from zarrdb._string_layouts import Claims, Layout, Refused, Shard, Strings, distinct, spec

_METADATA = ("zarr.json", ".zarray", ".zmetadata")
_NOT_CHUNKS = (*_METADATA, ".zgroup", ".zattrs")


class _Damaged(Exception):
    """What the check found it cannot decode as the layout says (a codec refusing the bytes, a
    shard shorter than its index, an index of another size): refused, as a chunk that zarr
    could read otherwise than the check is a chunk the check did not look at."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


# A check, as a generator: it yields each (zarr v3 codec, Buffer) it needs decoded and is sent
# the result, so that one check runs with the codecs' synchronous or asynchronous methods alike.
Steps = Generator[tuple[Any, Buffer], Buffer, Any]
_END = (1 << 64) - 1  # the end of a piece read to the end of the value: past every entry's end
_BATCH = 65536  # inner chunks of a shard turned into Python numbers at a time


def _buffer(data: bytes) -> Buffer:
    return default_buffer_prototype().buffer.from_bytes(data)


def _view(data: Buffer | memoryview) -> memoryview:
    """The bytes of `data` without a copy: an inner chunk is a slice of its shard, not a copy
    of it (else entries that all point at one large range would cost their number times its
    size, where zarr's decoding of each reads a few bytes)."""
    if isinstance(data, memoryview):
        return data
    return memoryview(data.as_numpy_array()).cast("B")


def _decoded(codecs: list[Any], data: Buffer) -> Steps:
    for codec in reversed(codecs):
        data = yield codec, data
    return data


def _check_whole(layout: Layout, key: str, data: Buffer | memoryview, filename: str) -> Steps:
    """Checks one whole stored chunk (or inner chunk) `data` of `layout`."""
    if isinstance(layout, Refused):
        layout.refuse(key, filename)
        return
    raw = _view(data)
    if isinstance(layout, Strings) and layout.v2:
        for codec in reversed(layout.after):
            try:
                raw = memoryview(codec.decode(raw)).cast("B")
            except Exception as exc:
                raise _Damaged(_refused_by(codec, exc)) from exc
    elif layout.after:
        stored = _buffer(bytes(raw)) if isinstance(data, memoryview) else data
        raw = _view((yield from _decoded(layout.after, stored)))
    if isinstance(layout, Strings):
        layout.check(key, raw, filename)
        return
    index = layout.index_of(raw)
    if index is None:
        raise _Damaged(f"is a shard of {len(raw):,} bytes, shorter than its index")
    yield from _check_inside(layout, key, bytes(index), [(0, _END, raw)], filename)


def _check_inside(
    shard: Shard, key: str, index: bytes, pieces: list[tuple[int, int, memoryview]], filename: str
) -> Steps:
    """Checks every inner chunk of `shard`, by its encoded `index`, that lies inside one of the
    `pieces` read of it ((start, end asked, bytes) each; an end of _END reaches the value's
    end, where zarr's slices stop too)."""
    import numpy as np

    decoded = _view((yield from _decoded(shard.index_after, _buffer(index))))
    found = shard.pairs(decoded)
    if found is None:
        raise _Damaged(f"has a shard index of {len(decoded):,} bytes, not {16 * shard.entries:,}")
    starts, ends = found
    pieces = sorted(pieces, key=lambda piece: piece[0])
    first = np.array([piece[0] for piece in pieces], dtype=np.uint64)
    # reach[i]: of the first i + 1 pieces, the one that ends last
    reach = [0] * len(pieces)
    for i in range(1, len(pieces)):
        reach[i] = i if pieces[i][1] > pieces[reach[i - 1]][1] else reach[i - 1]
    last = np.array([min(pieces[r][1], _END) for r in reach], dtype=np.uint64)
    at = np.searchsorted(first, starts, side="right").astype(np.int64) - 1
    inside = (at >= 0) & (ends <= last[np.maximum(at, 0)])
    starts, ends, at = starts[inside], ends[inside], at[inside]
    for done in range(0, len(starts), _BATCH):
        batch = zip(
            starts[done : done + _BATCH].tolist(),
            ends[done : done + _BATCH].tolist(),
            at[done : done + _BATCH].tolist(),
            strict=True,
        )
        for start, end, piece in batch:
            begin, _, data = pieces[reach[piece]]
            yield from _check_whole(shard.inner, key, data[start - begin : end - begin], filename)


def _refused_by(codec: Any, exc: Exception) -> str:
    name = getattr(codec, "codec_id", None) or type(codec).__name__
    return f"cannot be decoded by its codec {name} ({type(exc).__name__}: {str(exc)[:200]})"


def _refusal(key: str, filename: str, damaged: _Damaged) -> errors.DamagedChunkError:
    return errors.DamagedChunkError(
        f"{filename!r}: the chunk {key!r} of strings {damaged.why}: it is damaged or crafted, "
        "and is not decoded"
    )


def _run_sync(steps: Steps, key: str, filename: str) -> None:
    """Runs the check `steps`, decoding with the codecs' synchronous methods."""
    try:
        step = next(steps)
        while True:
            codec, data = step
            try:
                out = _compat.decode_bytes_sync(codec, data, spec())
            except Exception as exc:
                raise _Damaged(_refused_by(codec, exc)) from exc
            step = steps.send(out)
    except StopIteration:
        return
    except _Damaged as damaged:
        raise _refusal(key, filename, damaged) from damaged.__cause__


async def _run(steps: Steps, key: str, filename: str) -> None:
    """Runs the check `steps`, decoding with the codecs' asynchronous methods."""
    try:
        step = next(steps)
        while True:
            codec, data = step
            try:
                out = await _compat.decode_bytes(codec, data, spec())
            except Exception as exc:
                raise _Damaged(_refused_by(codec, exc)) from exc
            step = steps.send(out)
    except StopIteration:
        return
    except _Damaged as damaged:
        raise _refusal(key, filename, damaged) from damaged.__cause__


def _span(request: ByteRequest, total: int | None) -> tuple[int, int]:
    """The (start, end) in the value that `request` asks for (`total`: the value's length,
    needed for a suffix); a request to the value's end ends at _END."""
    if isinstance(request, RangeByteRequest):
        return request.start, request.end
    if isinstance(request, OffsetByteRequest):
        return request.offset, _END
    assert isinstance(request, SuffixByteRequest) and total is not None
    return max(0, total - request.suffix), _END


def _index_request(shard: Shard) -> ByteRequest:
    if shard.at_end:
        return SuffixByteRequest(shard.index_size)
    return RangeByteRequest(0, shard.index_size)


Read = tuple[ByteRequest | None, Buffer | None]


class CheckedStrings(WrapperStore[Store]):
    """The store, its chunks of strings checked as they are read (see the module's doc)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._claims: dict[str, Claims] = {}  # by the path of each node read
        self._below: dict[str, list[Layout]] = {}  # by a key's folder: the layouts of its chunks

    def __getstate__(self) -> dict[str, Any]:
        return {"_store": self._store}  # what was learnt is learnt again

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._store = state["_store"]
        self._claims = {}
        self._below = {}

    def _with_store(self, store: Store) -> CheckedStrings:
        return type(self)(store)

    def _filename(self) -> str:
        return str(getattr(self._store, "path", self._store))

    # -- what the metadata says -------------------------------------------------------------

    @staticmethod
    def _prefixes(key: str) -> list[str]:
        parts = key.split("/")
        if parts[-1] in _NOT_CHUNKS:
            return []
        return ["/".join(parts[:i]) for i in range(len(parts))]

    @staticmethod
    def _parse(found: dict[str, Buffer | None]) -> Claims:
        claims = Claims()
        for name, read in (
            ("zarr.json", claims.read_v3),
            (".zarray", claims.read_v2),
            (".zmetadata", claims.read_v2_consolidated),
        ):
            value = found.get(name)
            if value is None:
                continue
            try:
                doc = json.loads(value.to_bytes())
            except ValueError:
                continue  # not JSON: zarr says so when it opens the node
            except RecursionError:
                # Nested deeper than this thread's stack lets the check read, where zarr, at
                # another depth, may have read it: what it says is not known.
                claims.refuse("", "metadata nested too deep for the check to read")
                continue
            read(doc)
        return claims

    def _layouts_of(self, prefixes: list[str]) -> list[Layout]:
        """Every layout the metadata at `prefixes` (each read) gives a chunk below them."""
        layouts: list[Layout] = []
        for i, prefix in enumerate(prefixes):
            said = self._claims[prefix].layouts
            if not said:
                continue
            for path in prefixes[i:]:
                relative = path[len(prefix) :].lstrip("/") if prefix else path
                layouts.extend(said.get(relative, ()))
        return distinct(layouts)

    def _known(self, key: str) -> list[Layout] | None:
        """The layouts of the chunks in the folder of `key`, if its metadata has been read."""
        folder, _, name = key.rpartition("/")
        if name in _NOT_CHUNKS:
            return []  # metadata: no chunk
        return self._below.get(folder)

    def _unread(self, key: str) -> list[str]:
        """The paths above `key` whose metadata has not been read yet."""
        return [prefix for prefix in self._prefixes(key) if prefix not in self._claims]

    async def _layouts(self, key: str) -> list[Layout]:
        known = self._known(key)
        if known is not None:
            return known
        proto = default_buffer_prototype()
        for prefix in self._unread(key):
            found = {n: await self._store.get(_join(prefix, n), proto) for n in _METADATA}
            self._claims[prefix] = self._parse(found)
        return self._remember(key)

    def _layouts_sync(self, key: str) -> list[Layout]:
        known = self._known(key)
        if known is not None:
            return known
        for prefix in self._unread(key):
            found = {n: self._store_get_sync(_join(prefix, n), None) for n in _METADATA}
            self._claims[prefix] = self._parse(found)
        return self._remember(key)

    def _remember(self, key: str) -> list[Layout]:
        layouts = self._below[key.rpartition("/")[0]] = self._layouts_of(self._prefixes(key))
        return layouts

    def _store_get_sync(self, key: str, byte_range: ByteRequest | None) -> Buffer | None:
        get_sync: Callable[..., Buffer | None] = getattr(self._store, "get_sync")
        return get_sync(key, byte_range=byte_range)

    # -- the checks ---------------------------------------------------------------------------

    @staticmethod
    def _plan(layout: Layout, reads: list[Read]) -> tuple[list[Buffer], list[tuple[ByteRequest, Buffer]]]:
        """The whole values among `reads`, and the ranges to check against a shard's index."""
        whole = [value for request, value in reads if request is None and value is not None]
        ranged: list[tuple[ByteRequest, Buffer]] = []
        if isinstance(layout, Shard) and not layout.after:
            # (zarr reads parts only of a shard stored as it is: ranges of a vlen chunk, or of
            # a compressed shard, are never decoded)
            ranged = [(r, v) for r, v in reads if r is not None and v is not None]
        return whole, ranged

    @staticmethod
    def _pieces(
        ranged: list[tuple[ByteRequest, Buffer]], total: int | None
    ) -> list[tuple[int, int, memoryview]]:
        return [(*_span(request, total), _view(value)) for request, value in ranged]

    @staticmethod
    def _needs_total(ranged: list[tuple[ByteRequest, Buffer]]) -> bool:
        return any(isinstance(request, SuffixByteRequest) for request, _ in ranged)

    async def _check(self, key: str, reads: list[Read]) -> None:
        if all(value is None for _, value in reads):
            return
        layouts = await self._layouts(key)
        filename = self._filename() if layouts else ""
        for layout in layouts:
            if isinstance(layout, Refused):
                layout.refuse(key, filename)
            whole, ranged = self._plan(layout, reads)
            for value in whole:
                await _run(_check_whole(layout, key, value, filename), key, filename)
            if ranged:
                assert isinstance(layout, Shard)
                proto = default_buffer_prototype()
                index = await self._store.get(key, proto, _index_request(layout))
                if index is None:
                    continue
                total = await self._store.getsize(key) if self._needs_total(ranged) else None
                pieces = self._pieces(ranged, total)
                await _run(_check_inside(layout, key, index.to_bytes(), pieces, filename), key, filename)

    def _check_sync(self, key: str, reads: list[Read]) -> None:
        if all(value is None for _, value in reads):
            return
        layouts = self._layouts_sync(key)
        filename = self._filename() if layouts else ""
        for layout in layouts:
            if isinstance(layout, Refused):
                layout.refuse(key, filename)
            whole, ranged = self._plan(layout, reads)
            for value in whole:
                _run_sync(_check_whole(layout, key, value, filename), key, filename)
            if ranged:
                assert isinstance(layout, Shard)
                index = self._store_get_sync(key, _index_request(layout))
                if index is None:
                    continue
                total = None
                if self._needs_total(ranged):
                    whole_value = self._store_get_sync(key, None)
                    total = None if whole_value is None else len(whole_value)
                    if total is None:
                        continue
                pieces = self._pieces(ranged, total)
                _run_sync(_check_inside(layout, key, index.to_bytes(), pieces, filename), key, filename)

    # -- every read of zarr's Store -----------------------------------------------------------

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        value = await self._store.get(key, prototype, byte_range)
        await self._check(key, [(byte_range, value)])
        return value

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        get_sync: Callable[..., Buffer | None] = getattr(self._store, "get_sync")
        value = get_sync(key, prototype=prototype, byte_range=byte_range)
        self._check_sync(key, [(byte_range, value)])
        return value

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        values = await self._store.get_partial_values(prototype, key_ranges)
        for key, reads in _by_key([(k, r, v) for (k, r), v in zip(key_ranges, values)]).items():
            await self._check(key, reads)
        return values

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        requests = list(requests)
        ranges = {key: byte_range for key, _, byte_range in requests}
        # (keys are unique in what zarr asks; a key asked twice is checked for the range kept)
        async for key, value in _compat.get_many(self._store, requests):
            await self._check(key, [(ranges[key], value)])
            yield key, value

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **coalescing: Any,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        # (zarr 3.1's Store has no get_ranges; zarrdb's has, and zarr 3.4 reads shards with it)
        get_ranges: Callable[..., AsyncIterator[Sequence[tuple[int, Buffer | None]]]] = getattr(
            self._store, "get_ranges"
        )
        async for group in get_ranges(key, byte_ranges, prototype=prototype, **coalescing):
            await self._check(key, [(byte_ranges[i], value) for i, value in group])
            yield group

    def get_ranges_sync(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **coalescing: Any,
    ) -> Sequence[tuple[int, Buffer | None]]:
        get_ranges_sync: Callable[..., Sequence[tuple[int, Buffer | None]]] = getattr(
            self._store, "get_ranges_sync"
        )
        got = get_ranges_sync(key, byte_ranges, prototype=prototype, **coalescing)
        self._check_sync(key, [(byte_ranges[i], value) for i, value in got])
        return got


def _by_key(reads: list[tuple[str, ByteRequest | None, Buffer | None]]) -> dict[str, list[Read]]:
    grouped: dict[str, list[Read]] = {}
    for key, request, value in reads:
        grouped.setdefault(key, []).append((request, value))
    return grouped


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name
