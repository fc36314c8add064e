"""A generator of hostile files of strings for xarray (issue 37, after finding 5): arrays whose
chunks reach numcodecs' vlen decoders (which allocate the item count a chunk's first bytes
state) through every layout zarr reads, with junk counts among sound chunks:

- Zarr v3: `vlen-utf8` or `vlen-bytes`, compressed or not, or inside a shard (the index at its
  start or end, shards in shards);
- Zarr v2: `vlen-utf8` as a filter, behind a compressor, or as the compressor itself;
- metadata from several sources that disagree: consolidated metadata at the root saying an
  array holds strings while the array's own metadata is missing or says integers or a group;
- an array of strings in a group below a path whose own metadata says it is an array;
- read whole, or in part (the last values: an inner chunk of a shard read by its byte range).

The property, as in test_coordinate_fuzz.py (whose child runs the files): every file opens and
reads, or is refused cleanly, within its DEADLINE seconds and PEAK_GROWTH bytes of peak memory.
Every declared size is small: memory beyond that is a decoder allocating a junk count.

ZARRDB_STRING_FUZZ_CASES sets the number of files (default 250; 1000 with -m slow) and
ZARRDB_STRING_FUZZ_SEED the seed (default: a new one, printed on failure).
"""

from __future__ import annotations

import json
import math
import os
import random
import struct
import sys
from pathlib import Path

import numcodecs
import numpy as np
import pytest

from format import builders
from reliability.helpers import trials
from security.test_coordinate_fuzz import judged

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc for the peak, RLIMIT_AS"
)

N = 8  # values of every array
ZSTD_V3 = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
INTS = [{"name": "bytes", "configuration": {"endian": "little"}}]
GROUP = {"zarr_format": 3, "node_type": "group", "attributes": {}}


def _chunk(rng: random.Random, values: int, junk: bool) -> bytes:
    """The vlen bytes of a chunk of `values` strings; if `junk`, its count says far more (2^31
    - 1 objects fill any machine; 20 million are 160 MB) or one more than the chunk holds."""
    items = [b"v" * rng.choice([0, 1, 5]) for _ in range(values)]
    count = len(items)
    if junk:
        count = rng.choice([(1 << 31) - 1, 20_000_000, (1 << 32) - 1])
    return count.to_bytes(4, "little") + b"".join(len(s).to_bytes(4, "little") + s for s in items)


def _divide(rng: random.Random, shape: list[int]) -> list[int]:
    """An inner chunk shape that tiles `shape`."""
    return [d // rng.choice([k for k in (1, 2, 3, 4, 8) if d % k == 0]) for d in shape]


class _V3:
    """A v3 layout of chunks of strings of `shape` (as zarr sees them, after any transpose),
    drawn: codecs and how to make a stored chunk."""

    def __init__(
        self, rng: random.Random, shape: list[int], depth: int = 0, tiles: list[int] | None = None
    ) -> None:
        self.rng, self.shape = rng, shape
        self.values = math.prod(shape)
        self.shard = depth < 2 and self.values > 1 and rng.random() < 0.6
        if self.shard:
            # (zarr checks that the inner chunks tile the chunk grid's shape, `tiles`, not the
            # shard's after a transpose, and counts inner chunks rounding down)
            self.inner = _V3(rng, _divide(rng, tiles or shape), depth + 1)
            self.inner_chunks = math.prod(
                s // i for s, i in zip(shape, self.inner.shape, strict=True)
            )
            self.at_end = rng.random() < 0.7
            self.crc = rng.random() < 0.3
            self.past_end = rng.random() < 0.3  # an entry whose length runs past the shard
            self.compressed = False
        else:
            self.compressed = rng.random() < 0.4
            self.name = rng.choice(["vlen-utf8", "vlen-bytes"])

    def dtype(self) -> str:
        """zarr's data type for the decoder at the bottom (strings, or bytes)."""
        if self.shard:
            return self.inner.dtype()
        return "string" if self.name == "vlen-utf8" else "variable_length_bytes"

    def codecs(self) -> list:
        if not self.shard:
            return [{"name": self.name}, *([ZSTD_V3] if self.compressed else [])]
        index = [*INTS, *([{"name": "crc32c"}] if self.crc else [])]
        return [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": self.inner.shape, "codecs": self.inner.codecs(),
            "index_codecs": index, "index_location": "end" if self.at_end else "start"}}]  # fmt: skip

    def v2(self) -> dict | None:
        """The same layout as a v2 array's filters and compressor (None for a shard)."""
        if self.shard:
            return None
        return {"filters": [{"id": self.name}],
                "compressor": {"id": "zstd", "level": 0} if self.compressed else None}  # fmt: skip

    def stored(self, junk: float) -> bytes:
        """A stored chunk, each (inner) chunk junk with probability `junk`."""
        if not self.shard:
            raw = _chunk(self.rng, self.values, self.rng.random() < junk)
            return numcodecs.Zstd(level=0).encode(raw) if self.compressed else raw
        inner = [
            None if self.rng.random() < 0.2 else self.inner.stored(junk)
            for _ in range(self.inner_chunks)
        ]
        size = 16 * len(inner) + (4 if self.crc else 0)
        body, table, offset = b"", [], 0 if self.at_end else size
        for data in inner:
            if data is None:
                table.append((2**64 - 1, 2**64 - 1))
            else:
                table.append((offset + len(body), len(data)))
                body += data
        stored = [i for i, (o, _) in enumerate(table) if o != 2**64 - 1]
        if self.past_end and stored:
            at = self.rng.choice(stored)
            table[at] = (table[at][0], 1 << 40)
        index = b"".join(struct.pack("<QQ", o, n) for o, n in table)
        if self.crc:
            index += bytes(numcodecs.CRC32C().encode(index))[-4:]
        return body + index if self.at_end else index + body


def _v3_array(codecs: list, chunks: list[int], dtype: str, dims: list[str]) -> dict:
    return {
        "zarr_format": 3, "node_type": "array", "shape": [N, 3][: len(chunks)],
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0 if dtype == "int64" else "", "codecs": codecs, "attributes": {},
        "dimension_names": dims,
    }  # fmt: skip


def _v2_array(layout: dict, chunks: list[int], dtype: str = "|O") -> dict:
    return {"zarr_format": 2, "shape": [N, 3][: len(chunks)], "chunks": chunks, "dtype": dtype,
            "fill_value": None if dtype == "|O" else 0, "order": "C",
            "dimension_separator": ".", **layout}  # fmt: skip


def _v3_case(rng: random.Random, where: str) -> tuple[dict, dict]:
    name = rng.choice(["x", "s", "s"])  # the dimension coordinate itself, or a variable on one
    chunks = [rng.choice([2, 4, 8])]
    if name == "s" and rng.random() < 0.5:
        chunks.append(3)  # a variable of two dimensions, stored transposed (or not)
    transposed = len(chunks) == 2 and rng.random() < 0.7
    layout = _V3(rng, chunks[::-1] if transposed else chunks, tiles=chunks)
    codecs = layout.codecs()
    if transposed:
        codecs = [{"name": "transpose", "configuration": {"order": [1, 0]}}, *codecs]
    dims = ["x", "y"][: len(chunks)]
    strings = _v3_array(codecs, chunks, layout.dtype(), dims)
    ints = _v3_array(INTS, [N], "int64", ["x"])
    rows: dict[str, bytes | dict] = {}
    if name == "s":
        rows[f"{where}x/zarr.json"] = ints
        rows[f"{where}x/c/0"] = np.arange(N, dtype="<i8").tobytes()
    own = rng.choices(["kept", "deleted", "ints", "group"], [2, 2, 1, 1])[0]
    # a consolidated member of the other format: a v2 array's document in the v3 group
    other = own != "kept" and layout.v2() is not None and rng.random() < 0.5
    junk = rng.choice([0.0, 0.3, 1.0])
    for i in range(N // chunks[0]):
        key = f"{name}/{i}" + (".0" if len(chunks) == 2 else "") if other else (
            f"{name}/c/{i}" + ("/0" if len(chunks) == 2 else ""))  # fmt: skip
        rows[f"{where}{key}"] = layout.stored(junk)
    if own == "kept":
        rows[f"{where}{name}/zarr.json"] = strings
    elif own == "ints":
        rows[f"{where}{name}/zarr.json"] = dict(ints, shape=strings["shape"],
                                                chunk_grid=strings["chunk_grid"],
                                                dimension_names=dims)  # fmt: skip
    elif own == "group":
        rows[f"{where}{name}/zarr.json"] = GROUP
    consolidated = own != "kept" or rng.random() < 0.3
    member = strings
    if other:
        layout_v2 = layout.v2()
        assert layout_v2 is not None
        member = dict(_v2_array(layout_v2, chunks), attributes={"_ARRAY_DIMENSIONS": dims})
    members = {name: member, **({"x": ints} if name == "s" else {})}
    group = dict(GROUP)
    if consolidated:
        group["consolidated_metadata"] = {"kind": "inline", "must_understand": False,
                                          "metadata": members}  # fmt: skip
    rows[f"{where}zarr.json"] = group
    return rows, {"consolidated": None}


def _v2_case(rng: random.Random, where: str) -> tuple[dict, dict]:
    chunk = rng.choice([2, 4, 8])
    place = rng.choice(["filter", "filter behind a compressor", "compressor"])
    name = rng.choice(["vlen-utf8", "vlen-bytes"])
    compressor = None
    if place == "compressor":
        layout = {"filters": None, "compressor": {"id": name}}
    else:
        if place == "filter behind a compressor":
            compressor = numcodecs.Zstd(level=1)
        layout = {"filters": [{"id": name}],
                  "compressor": compressor.get_config() if compressor else None}  # fmt: skip
    meta = _v2_array(layout, [chunk])
    attrs = {"_ARRAY_DIMENSIONS": ["x"]}
    rows: dict[str, bytes | dict] = {f"{where}.zgroup": {"zarr_format": 2}}
    own = rng.choice(["kept", "ints"])
    consolidated = own != "kept" or rng.random() < 0.3
    # how .zmetadata files the array: under x/.zarray; as a v3 array's document there; under
    # x/.zgroup (zarr merges both); or an integer x/.zarray with the strings' codecs in x/.zgroup
    filed = rng.choices(["zarray", "v3", "zgroup", "split"], [3, 1, 1, 1])[0]
    if not consolidated:
        filed = "zarray"
    junk = rng.choice([0.0, 0.5, 1.0])
    for i in range(N // chunk):
        raw = _chunk(rng, chunk, rng.random() < junk)
        key = f"x/c/{i}" if filed == "v3" else f"x/{i}"
        rows[f"{where}{key}"] = compressor.encode(raw) if compressor else raw
    ints = _v2_array({"filters": None, "compressor": None}, [chunk], dtype="<i8")
    rows[f"{where}x/.zarray"] = meta if own == "kept" else ints
    rows[f"{where}x/.zattrs"] = attrs
    if consolidated:
        members: dict[str, dict] = {".zgroup": {"zarr_format": 2}, "x/.zattrs": attrs}
        if filed == "zarray":
            members["x/.zarray"] = meta
        elif filed == "v3":
            codecs = [{"name": name}, *([ZSTD_V3] if compressor else [])]
            dtype = "string" if name == "vlen-utf8" else "variable_length_bytes"
            members["x/.zarray"] = _v3_array(codecs, [chunk], dtype, ["x"])
        elif filed == "zgroup":
            members["x/.zgroup"] = meta
        else:
            members["x/.zarray"] = ints
            members["x/.zgroup"] = {"dtype": "|O", "fill_value": None, **layout}
        rows[f"{where}.zmetadata"] = {"zarr_consolidated_format": 1, "metadata": members}
    return rows, {"consolidated": None if consolidated else False}


def _case(rng: random.Random) -> tuple[dict[str, bytes], dict]:
    """(zarr table rows, how to open and read) of one hostile file."""
    v2 = rng.random() < 0.4
    # At the root, or in the group "a/b" below "a", whose own metadata may say it is an array.
    below = rng.random() < 0.25
    where = "a/b/" if below else ""
    rows, opened = (_v2_case if v2 else _v3_case)(rng, where)
    if below:
        if v2:
            rows[".zgroup"] = {"zarr_format": 2}
            rows["a/.zarray"] = _v2_array({"filters": None, "compressor": None}, [N], "<i8")
        else:
            rows["zarr.json"] = GROUP
            rows["a/zarr.json"] = _v3_array(INTS, [N], "int64", ["a"])
        opened.update(group="a/b", consolidated=opened["consolidated"] or False)
    opened.update(open="dataset", read=rng.choice(["whole", "part"]))
    encoded = {k: json.dumps(v).encode() if isinstance(v, dict) else v for k, v in rows.items()}
    return encoded, opened


def build(folder: Path, n: int, rng: random.Random) -> dict:
    rows, opened = _case(rng)
    path = builders.make_store_file(folder / f"strings-{n}.zarrdb", entries=rows)
    names = (".json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")
    metadata = {k: v.decode()[:300] for k, v in rows.items() if k.endswith(names)}
    return {"n": n, "path": str(path), **opened, "metadata": metadata}


def run_cases(folder: Path, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    cases = [build(folder, n, rng) for n in range(count)]
    return judged(cases, _told)


def _told(case: dict) -> str:
    how = {k: case[k] for k in ("group", "read", "consolidated") if k in case}
    return f"(case {case['n']}: {json.dumps(how)} {case['metadata']})"


def test_chunks_of_strings_never_take_memory(tmp_path):
    count = trials("ZARRDB_STRING_FUZZ_CASES", 250, 1000, slow=False)
    seed = int(os.environ.get("ZARRDB_STRING_FUZZ_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:10])


@pytest.mark.slow
def test_chunks_of_strings_never_take_memory_at_length(tmp_path):
    count = trials("ZARRDB_STRING_FUZZ_CASES", 250, 1000, slow=True)
    seed = int(os.environ.get("ZARRDB_STRING_FUZZ_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:10])
