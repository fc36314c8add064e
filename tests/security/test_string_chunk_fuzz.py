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
reads, or is refused cleanly, within DEADLINE seconds and PEAK_GROWTH bytes of peak memory.
Every declared size is small: memory beyond that is a decoder allocating a junk count.

ZARRDB_STRING_FUZZ_CASES sets the number of files (default 100; 500 with -m slow) and
ZARRDB_STRING_FUZZ_SEED the seed (default: a new one, printed on failure).
"""

from __future__ import annotations

import json
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
from security.test_coordinate_fuzz import DEADLINE, PEAK_GROWTH, run_child

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


class _V3:
    """A v3 layout of chunks of strings, drawn: codecs and how to make a stored chunk."""

    def __init__(self, rng: random.Random, chunk: int, depth: int = 0) -> None:
        self.rng, self.chunk = rng, chunk
        self.shard = depth < 2 and chunk % 2 == 0 and chunk > 1 and rng.random() < 0.6
        if self.shard:
            self.inner = _V3(rng, chunk // rng.choice([2, chunk]), depth + 1)
            self.at_end = rng.random() < 0.7
            self.crc = rng.random() < 0.3
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
            "chunk_shape": [self.inner.chunk], "codecs": self.inner.codecs(),
            "index_codecs": index, "index_location": "end" if self.at_end else "start"}}]  # fmt: skip

    def stored(self, junk: float) -> bytes:
        """A stored chunk, each (inner) chunk junk with probability `junk`."""
        if not self.shard:
            raw = _chunk(self.rng, self.chunk, self.rng.random() < junk)
            return numcodecs.Zstd().encode(raw) if self.compressed else raw
        inner = [
            None if self.rng.random() < 0.2 else self.inner.stored(junk)
            for _ in range(self.chunk // self.inner.chunk)
        ]
        size = 16 * len(inner) + (4 if self.crc else 0)
        body, table, offset = b"", [], 0 if self.at_end else size
        for data in inner:
            if data is None:
                table.append((2**64 - 1, 2**64 - 1))
            else:
                table.append((offset + len(body), len(data)))
                body += data
        index = b"".join(struct.pack("<QQ", o, n) for o, n in table)
        if self.crc:
            index += bytes(numcodecs.CRC32C().encode(index))[-4:]
        return body + index if self.at_end else index + body


def _v3_array(codecs: list, chunk: int, dtype: str, dim: str) -> dict:
    return {
        "zarr_format": 3, "node_type": "array", "shape": [N], "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0 if dtype == "int64" else "", "codecs": codecs, "attributes": {},
        "dimension_names": [dim],
    }  # fmt: skip


def _v3_case(rng: random.Random, where: str) -> tuple[dict, dict]:
    chunk = rng.choice([2, 4, 8])
    layout = _V3(rng, chunk)
    strings = _v3_array(layout.codecs(), chunk, layout.dtype(), "x")
    ints = _v3_array(INTS, N, "int64", "x")
    name = rng.choice(["x", "s", "s"])  # the dimension coordinate itself, or a variable on one
    rows: dict[str, bytes | dict] = {}
    if name == "s":
        rows[f"{where}x/zarr.json"] = ints
        rows[f"{where}x/c/0"] = np.arange(N, dtype="<i8").tobytes()
    junk = rng.choice([0.0, 0.3, 1.0])
    for i in range(N // chunk):
        rows[f"{where}{name}/c/{i}"] = layout.stored(junk)
    own = rng.choices(["kept", "deleted", "ints", "group"], [2, 2, 1, 1])[0]
    if own == "kept":
        rows[f"{where}{name}/zarr.json"] = strings
    elif own == "ints":
        rows[f"{where}{name}/zarr.json"] = dict(ints, shape=[N], chunk_grid=strings["chunk_grid"])
    elif own == "group":
        rows[f"{where}{name}/zarr.json"] = GROUP
    consolidated = own != "kept" or rng.random() < 0.3
    members = {name: strings, **({"x": ints} if name == "s" else {})}
    group = dict(GROUP)
    if consolidated:
        group["consolidated_metadata"] = {"kind": "inline", "must_understand": False,
                                          "metadata": members}  # fmt: skip
    rows[f"{where}zarr.json"] = group
    return rows, {"consolidated": None}


def _v2_case(rng: random.Random, where: str) -> tuple[dict, dict]:
    chunk = rng.choice([2, 4, 8])
    meta = {"zarr_format": 2, "shape": [N], "chunks": [chunk], "dtype": "|O", "fill_value": None,
            "order": "C", "dimension_separator": "."}  # fmt: skip
    place = rng.choice(["filter", "filter behind a compressor", "compressor"])
    compressor = None
    if place == "compressor":
        meta.update(filters=None, compressor={"id": rng.choice(["vlen-utf8", "vlen-bytes"])})
    else:
        meta["filters"] = [{"id": rng.choice(["vlen-utf8", "vlen-bytes"])}]
        if place == "filter behind a compressor":
            compressor = numcodecs.Zstd(level=1)
        meta["compressor"] = compressor.get_config() if compressor else None
    attrs = {"_ARRAY_DIMENSIONS": ["x"]}
    rows: dict[str, bytes | dict] = {f"{where}.zgroup": {"zarr_format": 2}}
    junk = rng.choice([0.0, 0.5, 1.0])
    for i in range(N // chunk):
        raw = _chunk(rng, chunk, rng.random() < junk)
        rows[f"{where}x/{i}"] = compressor.encode(raw) if compressor else raw
    own = rng.choice(["kept", "ints"])
    ints = dict(meta, dtype="<i8", fill_value=0, filters=None, compressor=None)
    rows[f"{where}x/.zarray"] = meta if own == "kept" else ints
    rows[f"{where}x/.zattrs"] = attrs
    consolidated = own != "kept" or rng.random() < 0.3
    if consolidated:
        rows[f"{where}.zmetadata"] = {"zarr_consolidated_format": 1, "metadata": {
            ".zgroup": {"zarr_format": 2}, "x/.zarray": meta, "x/.zattrs": attrs}}  # fmt: skip
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
            rows["a/.zarray"] = dict(rows["a/b/x/.zarray"], dtype="<i8", filters=None,
                                     compressor=None, fill_value=0)  # fmt: skip
        else:
            rows["zarr.json"] = GROUP
            rows["a/zarr.json"] = _v3_array(INTS, N, "int64", "a")
        opened.update(group="a/b", consolidated=opened["consolidated"] or False)
    opened.update(open="dataset", read=rng.choice(["whole", "part"]))
    encoded = {k: json.dumps(v).encode() if isinstance(v, dict) else v for k, v in rows.items()}
    return encoded, opened


def build(folder: Path, n: int, rng: random.Random) -> dict:
    rows, opened = _case(rng)
    path = builders.make_store_file(folder / f"strings-{n}.zarrdb", entries=rows)
    metadata = {k: v.decode()[:300] for k, v in rows.items() if k.endswith((".json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"))}
    return {"n": n, "path": str(path), **opened, "metadata": metadata}


def run_cases(folder: Path, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    cases = [build(folder, n, rng) for n in range(count)]
    results, ended = run_child("xarray", cases, DEADLINE)
    problems = [ended] if ended else []
    for result in results:
        got, case = result["xarray"], cases[result["n"]]
        how = {k: case[k] for k in ("group", "read", "consolidated") if k in case}
        said = f"(case {case['n']}: {json.dumps(how)} {case['metadata']})"
        if got["outcome"].startswith("raised"):
            problems.append(f"{got['outcome']} {said}")
        if got["growth"] > PEAK_GROWTH:
            problems.append(f"peak +{got['growth']:,} bytes, {got['outcome']} {said}")
        if got["seconds"] > DEADLINE:
            problems.append(f"{got['seconds']} s {said}")
    return problems


def test_chunks_of_strings_never_take_memory(tmp_path):
    count = trials("ZARRDB_STRING_FUZZ_CASES", 100, 500, slow=False)
    seed = int(os.environ.get("ZARRDB_STRING_FUZZ_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:10])


@pytest.mark.slow
def test_chunks_of_strings_never_take_memory_at_length(tmp_path):
    count = trials("ZARRDB_STRING_FUZZ_CASES", 100, 500, slow=True)
    seed = int(os.environ.get("ZARRDB_STRING_FUZZ_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:10])
