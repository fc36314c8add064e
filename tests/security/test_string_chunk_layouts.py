"""Chunks of strings reached by every layout zarr reads (issue 37, after finding 5).

The xarray backend checks a chunk of strings before numcodecs decodes it (a junk count in its
first bytes made the decoder allocate gigabytes). The check read each array's own metadata, and
only whole chunks; a file of 384 KB still made xarray allocate 1.6 GB three ways: consolidated
metadata saying an array holds strings while its own `zarr.json` is gone or says otherwise
(xarray opens through the consolidated metadata first), `vlen-utf8` inside a shard (inner
chunks, read by byte ranges), and `vlen-utf8` as a Zarr v2 compressor. A fourth: metadata at a
path above a group (here an array at "a") hid the arrays below it from the check.

Each file here is made by hand with the standard library's sqlite3 (tests/format/builders.py).
A junk count of 20 million items is 160 MB of objects: well within the machine, well over what
a refused read takes (measured with tracemalloc).
"""

from __future__ import annotations

import inspect
import json
import struct
import tracemalloc

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.abc.store import Store

from format import builders
from zarrdb import SQLiteStore, errors
from zarrdb._string_chunks import CheckedStrings

COUNT = 20_000_000
JUNK = COUNT.to_bytes(4, "little") + b"\x01\x00\x00\x00a" * 2  # says 20 million, holds 2
PEAK = 50_000_000


def good(*items: str) -> bytes:
    """A sound vlen-utf8 chunk of `items`."""
    return len(items).to_bytes(4, "little") + b"".join(
        len(s.encode()).to_bytes(4, "little") + s.encode() for s in items
    )


def shard(inner: list[bytes | None], *, at_end: bool = True) -> bytes:
    """A shard of the inner chunks `inner` (None: not stored), its index in bytes-little order
    without a checksum (index codecs [bytes])."""
    body, index, offset = b"", [], 16 * len(inner) if not at_end else 0
    for chunk in inner:
        if chunk is None:
            index.append((2**64 - 1, 2**64 - 1))
            continue
        index.append((offset + len(body), len(chunk)))
        body += chunk
    table = b"".join(struct.pack("<QQ", o, n) for o, n in index)
    return body + table if at_end else table + body


def sharding(chunk: int, codecs: list, *, at_end: bool = True) -> dict:
    return {"name": "sharding_indexed", "configuration": {
        "chunk_shape": [chunk], "codecs": codecs,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_location": "end" if at_end else "start"}}  # fmt: skip


def array(n: int, chunk: int, codecs: list, dtype: str = "string", dim: str = "x") -> dict:
    fill = "" if dtype == "string" else 0
    return {
        "zarr_format": 3, "node_type": "array", "shape": [n], "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill, "codecs": codecs, "attributes": {}, "dimension_names": [dim],
    }  # fmt: skip


INTS = [{"name": "bytes", "configuration": {"endian": "little"}}]
GROUP = {"zarr_format": 3, "node_type": "group", "attributes": {}}


def group(members: dict | None = None) -> bytes:
    doc = dict(GROUP)
    if members is not None:
        doc["consolidated_metadata"] = {"kind": "inline", "must_understand": False,
                                        "metadata": members}  # fmt: skip
    return json.dumps(doc).encode()


def make(path, rows: dict[str, bytes | dict]) -> str:
    entries = {k: json.dumps(v).encode() if isinstance(v, dict) else v for k, v in rows.items()}
    builders.make_store_file(path, entries=entries)
    return str(path)


def refused(action, key: str) -> None:
    """`action()` raises DamagedChunkError naming `key`, within PEAK bytes of Python memory."""
    tracemalloc.start()
    try:
        with pytest.raises(errors.DamagedChunkError, match=repr(key)):
            action()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK, peak


def load(path, **kwargs):
    def action():
        with xr.open_dataset(path, engine="zarrdb", **kwargs) as ds:
            ds.load()

    return action


# -- consolidated metadata --------------------------------------------------------------------


@pytest.mark.parametrize("own", ["deleted", "ints", "group"])
def test_consolidated_metadata_saying_strings_is_checked_whatever_the_arrays_own_says(
    tmp_path, own
):
    """xarray opens through the consolidated metadata: the root's says "s" holds strings, while
    "s/zarr.json" is gone, says 64-bit integers, or says a group. The chunk is checked against
    the layout the consolidated metadata gives."""
    strings = array(4, 4, [{"name": "vlen-utf8"}], dim="x")
    ints = array(4, 4, INTS, dtype="int64", dim="x")
    rows: dict[str, bytes | dict] = {
        "zarr.json": group({"s": strings, "x": ints}),
        "x/zarr.json": ints, "x/c/0": np.arange(4, dtype="<i8").tobytes(), "s/c/0": JUNK,
    }  # fmt: skip
    if own == "ints":
        rows["s/zarr.json"] = ints
    elif own == "group":
        rows["s/zarr.json"] = GROUP
    path = make(tmp_path / "consolidated.zarrdb", rows)
    refused(load(path), "s/c/0")


def test_v2_consolidated_metadata_saying_strings_is_checked(tmp_path):
    """The same through a v2 hierarchy's .zmetadata: the array's own .zarray says int64 with no
    filter; the consolidated one says an object array with the vlen-utf8 filter."""
    own = {"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<i8", "fill_value": 0,
           "order": "C", "filters": None, "compressor": None, "dimension_separator": "."}  # fmt: skip
    said = dict(own, dtype="|O", fill_value=None, filters=[{"id": "vlen-utf8"}])
    attrs = {"_ARRAY_DIMENSIONS": ["x"]}
    consolidated = {"zarr_consolidated_format": 1, "metadata": {
        ".zgroup": {"zarr_format": 2}, "s/.zarray": said, "s/.zattrs": attrs}}  # fmt: skip
    path = make(tmp_path / "v2.zarrdb", {
        ".zgroup": {"zarr_format": 2}, ".zmetadata": consolidated, "s/.zarray": own,
        "s/.zattrs": attrs, "s/0": JUNK})  # fmt: skip
    refused(load(path), "s/0")


def test_consolidated_metadata_of_the_root_is_checked_for_a_subgroups_arrays(tmp_path):
    """open_datatree opens the root through its consolidated metadata, which names "g/s" (an
    array of strings) while "g/s" has no metadata of its own."""
    strings = array(4, 4, [{"name": "vlen-utf8"}])
    path = make(tmp_path / "tree.zarrdb", {
        "zarr.json": group({"g": GROUP, "g/s": strings}), "g/zarr.json": GROUP,
        "g/s/c/0": JUNK})  # fmt: skip

    def tree():
        with xr.open_datatree(path, engine="zarrdb") as dt:
            dt.load()

    refused(tree, "g/s/c/0")


def test_an_array_above_a_group_does_not_hide_the_arrays_below(tmp_path):
    """zarr opens a group by its path without looking at the paths above it: "a" says it is an
    array of integers, "a/b" a group holding strings. Opening group "a/b" reads "a/b/s/c/0"."""
    path = make(tmp_path / "above.zarrdb", {
        "zarr.json": group(), "a/zarr.json": array(4, 4, INTS, dtype="int64"),
        "a/b/zarr.json": group(), "a/b/s/zarr.json": array(4, 4, [{"name": "vlen-utf8"}]),
        "a/b/s/c/0": JUNK})  # fmt: skip
    refused(load(path, group="a/b", consolidated=False), "a/b/s/c/0")


# -- shards -------------------------------------------------------------------------------------


@pytest.mark.parametrize("at_end", [True, False], ids=["index at end", "index at start"])
def test_a_junk_inner_chunk_of_a_whole_shard_is_refused(tmp_path, at_end):
    """A shard read whole (a dimension coordinate, loaded at open): every inner chunk its index
    points to is checked, here the third of four."""
    codecs = [sharding(2, [{"name": "vlen-utf8"}], at_end=at_end)]
    path = make(tmp_path / "shard.zarrdb", {
        "zarr.json": group(), "x/zarr.json": array(8, 8, codecs),
        "x/c/0": shard([good("a", "b"), good("c", "d"), JUNK, None], at_end=at_end)})  # fmt: skip
    refused(load(path), "x/c/0")


def _partial(tmp_path, inner_codecs: list, chunks: list[bytes | None]) -> str:
    """A data variable "s" of 8 strings in one shard of four inner chunks of 2, on an integer
    coordinate "x"."""
    return make(tmp_path / "part.zarrdb", {
        "zarr.json": group(), "x/zarr.json": array(8, 8, INTS, dtype="int64"),
        "x/c/0": np.arange(8, dtype="<i8").tobytes(),
        "s/zarr.json": array(8, 8, [sharding(2, inner_codecs)]), "s/c/0": shard(chunks)})  # fmt: skip


def test_a_junk_inner_chunk_read_by_its_byte_range_is_refused(tmp_path):
    """Part of a shard is read by byte ranges (zarr reads the index, then the inner chunks it
    needs): the inner chunk read is checked, and a sound one beside it reads."""
    path = _partial(tmp_path, [{"name": "vlen-utf8"}],
                    [good("a", "b"), good("c", "d"), good("e", "f"), JUNK])  # fmt: skip

    def last():
        with xr.open_dataset(path, engine="zarrdb") as ds:
            ds["s"].isel(x=slice(6, 8)).load()

    refused(last, "s/c/0")
    with xr.open_dataset(path, engine="zarrdb") as ds:
        assert list(ds["s"].isel(x=slice(2, 4)).values) == ["c", "d"]


def test_a_junk_inner_chunk_of_a_shard_in_a_shard_is_refused(tmp_path):
    """Shards nest: the inner chunks of an inner shard are checked too."""
    inner = [sharding(1, [{"name": "vlen-utf8"}])]
    path = _partial(tmp_path, inner, [shard([good("a"), good("b")]), shard([good("c"), JUNK]),
                                      None, None])  # fmt: skip
    refused(load(path), "s/c/0")


def test_a_compressed_inner_chunk_is_checked_decompressed(tmp_path):
    zstd = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
    junk = numcodecs.Zstd().encode(JUNK)
    path = _partial(tmp_path, [{"name": "vlen-utf8"}, zstd], [junk, None, None, None])
    refused(load(path), "s/c/0")


def _crc(table: bytes) -> bytes:
    return bytes(numcodecs.CRC32C().encode(table))[-4:]


def test_a_transpose_before_a_shard_is_followed(tmp_path):
    """A transpose before the sharding codec: zarr takes the shard's shape after it (6 x 4, so
    3 inner chunks of 2 x 3), while the chunk grid says 4 x 6 (4 of them); reading 4 entries
    the check's index failed its checksum and the check gave up, while zarr's passed and it
    decoded the junk inner chunk."""
    no = 2**64 - 1
    table = b"".join(struct.pack("<QQ", o, n) for o, n in [(0, len(JUNK)), (no, no), (no, no)])
    codecs = [{"name": "transpose", "configuration": {"order": [1, 0]}},
              {"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 3],
               "codecs": [{"name": "vlen-utf8"}], "index_codecs": [
                   {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
               "index_location": "end"}}]  # fmt: skip
    doc = dict(array(4, 4, codecs), shape=[4, 6], dimension_names=["x", "y"],
               chunk_grid={"name": "regular", "configuration": {"chunk_shape": [4, 6]}})  # fmt: skip
    path = make(tmp_path / "transposed.zarrdb", {
        "zarr.json": group(), "s/zarr.json": doc,
        "s/c/0/0": JUNK + b"\xaa" * 16 + table + _crc(table)})  # fmt: skip
    refused(load(path), "s/c/0/0")


def test_an_inner_chunk_running_past_the_shards_end_is_checked(tmp_path):
    """An index entry of 2^40 bytes from offset 0: zarr's slice stops at the shard's end and
    decodes the whole shard as the inner chunk; the check skipped an entry ending past the
    bytes it had."""
    table = struct.pack("<QQ", 0, 1 << 40)
    path = make(tmp_path / "past.zarrdb", {
        "zarr.json": group(), "x/zarr.json": array(2, 2, [sharding(2, [{"name": "vlen-utf8"}])]),
        "x/c/0": JUNK + table})  # fmt: skip
    refused(load(path), "x/c/0")


def test_a_shard_index_not_stored_as_plain_bytes_is_refused(tmp_path):
    """zarr 3.1 accepts any index codecs of a fixed size, a shard among them: it decodes the
    32 bytes of the index as a shard of one inner chunk (16 bytes) and its own index, and a
    vlen decoder reads that inner chunk. zarr 3.4 refuses such metadata. The check reads only
    an index of `bytes`, and refuses the others."""
    index_codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [1, 2], "codecs": [{"name": "vlen-bytes"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_location": "end"}}]  # fmt: skip
    codec = sharding(4, [{"name": "vlen-utf8"}])
    codec["configuration"]["index_codecs"] = index_codecs
    sound = good("abcdefgh")  # 16 bytes
    region = JUNK.ljust(16, b"\0") + struct.pack("<QQ", 0, 16)
    path = make(tmp_path / "index.zarrdb", {
        "zarr.json": group(), "x/zarr.json": array(4, 4, [codec]), "x/c/0": sound + region})  # fmt: skip
    if zarr.__version__.startswith("3.1."):
        refused(load(path), "x/c/0")
    else:
        with pytest.raises(ValueError, match="index_codecs"):
            load(path)()


V2_STRINGS = {"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "|O", "fill_value": None,
              "order": "C", "filters": [{"id": "vlen-utf8"}], "compressor": None,
              "dimension_separator": "."}  # fmt: skip
V3_STRINGS = array(4, 4, [{"name": "vlen-utf8"}])


@pytest.mark.parametrize("member", ["v2 in v3", "v3 in v2"])
def test_a_consolidated_member_of_the_other_format_is_read_by_its_own(tmp_path, member):
    """zarr reads each consolidated member by the format it names: a v2 array's document in a
    v3 group's consolidated metadata, a v3 array's in a v2 `.zmetadata`."""
    if member == "v2 in v3":
        rows = {"zarr.json": group({"s": dict(V2_STRINGS, attributes={
            "_ARRAY_DIMENSIONS": ["x"]})}), "s/0": JUNK}  # fmt: skip
    else:
        rows = {".zgroup": {"zarr_format": 2}, ".zmetadata": {
            "zarr_consolidated_format": 1,
            "metadata": {".zgroup": {"zarr_format": 2}, "s/.zarray": V3_STRINGS}}, "s/c/0": JUNK}  # fmt: skip
    path = make(tmp_path / "other.zarrdb", rows)
    key = "s/0" if member == "v2 in v3" else "s/c/0"
    refused(load(path), key)


@pytest.mark.parametrize("how", ["under .zgroup", ".zgroup over .zarray"])
def test_v2_consolidated_entries_are_merged_as_zarr_merges_them(tmp_path, how):
    """zarr merges a `.zmetadata`'s `s/.zarray`, `s/.zgroup` (and `s/.zattrs`) into one
    document per path: an array described under `s/.zgroup`, or its filters put there over an
    integer `s/.zarray`, holds strings."""
    ints = dict(V2_STRINGS, dtype="<i8", fill_value=0, filters=None)
    members = {".zgroup": {"zarr_format": 2}, "s/.zattrs": {"_ARRAY_DIMENSIONS": ["x"]}}
    if how == "under .zgroup":
        members["s/.zgroup"] = V2_STRINGS
    else:
        members["s/.zarray"] = ints
        members["s/.zgroup"] = {"dtype": "|O", "fill_value": None,
                                "filters": [{"id": "vlen-utf8"}]}  # fmt: skip
    path = make(tmp_path / "merged.zarrdb", {
        ".zgroup": {"zarr_format": 2}, ".zmetadata": {"zarr_consolidated_format": 1,
                                                      "metadata": members}, "s/0": JUNK})  # fmt: skip
    refused(load(path), "s/0")


def test_an_index_that_does_not_decode_is_refused_not_skipped(tmp_path):
    """A shard whose index fails its checksum: the check refuses it (before, it gave up and
    let zarr decide, which is safe only if zarr reads the same index)."""
    table = struct.pack("<QQ", 0, len(JUNK))
    codec = sharding(2, [{"name": "vlen-utf8"}])
    codec["configuration"]["index_codecs"].append({"name": "crc32c"})
    path = make(tmp_path / "crc.zarrdb", {
        "zarr.json": group(), "x/zarr.json": array(2, 2, [codec]),
        "x/c/0": JUNK + table + b"\0\0\0\0"})  # fmt: skip
    with pytest.raises(errors.DamagedChunkError, match="crc32c|Crc32c"):
        load(path)()


def test_metadata_too_deep_for_the_check_is_a_refusal(tmp_path):
    """A document the check cannot parse for its depth (which depends on the stack of the
    thread reading it: zarr, parsing the same bytes at open from a shallower stack, may read
    it) refuses the chunks below it, instead of leaving them unchecked (with zarr 3.1 and a
    root `zarr.json` 981 lists deep, the chunks of its consolidated array were decoded
    unchecked)."""
    deep = "[" * 100_000 + "]" * 100_000
    group_doc = json.dumps(dict(GROUP, consolidated_metadata={
        "kind": "inline", "must_understand": False, "metadata": {"s": array(4, 4, [
            {"name": "vlen-utf8"}])}})).encode()  # fmt: skip
    deep_doc = group_doc[:-1] + b', "x": ' + deep.encode() + b"}"
    path = make(tmp_path / "deep.zarrdb", {"zarr.json": deep_doc, "s/c/0": good("a", "b")})
    with SQLiteStore(path, read_only=True) as store:
        with pytest.raises(errors.DamagedChunkError, match="too deep"):
            CheckedStrings(store).get_sync("s/c/0")


def test_inner_chunks_are_checked_without_copying_them(tmp_path):
    """4,096 index entries all pointing at one range of 4 MB: zarr decodes each from a view of
    the shard (a count of 1: it stops at once); the check copied the range for each entry
    (16 GB copied, seconds, for a file of 4 MB; 65,536 entries took 20 s against zarr's 0.1 s).
    Checked through views, the read with the check takes less than a second more than zarr's
    own."""
    import time

    entries, size = 4096, 4 << 20
    codec = sharding(1, [{"name": "vlen-utf8"}])
    path = make(tmp_path / "overlap.zarrdb", {
        "zarr.json": group(), "s/zarr.json": array(entries, entries, [codec]),
        "s/c/0": good("a").ljust(size, b"\0") + struct.pack("<QQ", 0, size) * entries})  # fmt: skip
    with SQLiteStore(path, read_only=True) as store:
        started = time.perf_counter()
        plain = zarr.open_array(store, path="s", mode="r")[:]
        zarr_alone = time.perf_counter() - started
        started = time.perf_counter()
        checked = zarr.open_array(CheckedStrings(store), path="s", mode="r")[:]
        with_check = time.perf_counter() - started
    assert list(checked) == list(plain) == ["a"] * entries
    assert with_check < zarr_alone + 1.0, (with_check, zarr_alone)


def test_names_zarr_reads_alike_give_one_layout():
    """3,000 consolidated members whose names zarr normalizes to one path (`\\p`, `\\\\p`,
    ...) gave that path 3,000 layouts, and each of its chunks was checked against all of them
    (16 to 19 s for a file zarr opened in 2 s)."""
    from zarrdb._string_layouts import Claims

    claims = Claims()
    strings = array(4, 4, [{"name": "vlen-utf8"}])
    claims.read_v3(dict(GROUP, consolidated_metadata={"kind": "inline", "must_understand": False,
        "metadata": {"\\" * n + "p": strings for n in range(1, 3001)}}))  # fmt: skip
    assert len(claims.layouts["p"]) == 1


def test_a_pickle_codec_in_a_v2_layout_is_refused_not_run():
    """A v2 array whose filters decode through `pickle` before the vlen decoder: the check
    would unpickle the chunk (where a program allowed numcodecs to) to check it. Refused."""
    from zarrdb._string_layouts import Refused, layouts_of

    found = layouts_of(dict(V2_STRINGS, filters=[{"id": "vlen-utf8"}, {"id": "pickle"}]))
    assert [type(layout) for layout in found] == [Refused]


# -- zarr v2 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["compressor", "filter after a compressor"])
def test_a_v2_vlen_codec_is_checked_wherever_it_stands(tmp_path, where):
    """zarr decodes a v2 chunk with its compressor, then its filters: vlen-utf8 as the
    compressor gets the stored bytes themselves."""
    meta = {"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "|O", "fill_value": None,
            "order": "C", "dimension_separator": "."}  # fmt: skip
    if where == "compressor":
        meta.update(filters=None, compressor={"id": "vlen-utf8"})
        chunk = JUNK
    else:
        meta.update(filters=[{"id": "vlen-utf8"}], compressor={"id": "zstd", "level": 1})
        chunk = numcodecs.Zstd(level=1).encode(JUNK)
    path = make(tmp_path / "v2.zarrdb", {
        ".zgroup": {"zarr_format": 2}, "s/.zarray": meta,
        "s/.zattrs": {"_ARRAY_DIMENSIONS": ["x"]}, "s/0": chunk})  # fmt: skip
    refused(load(path, consolidated=False), "s/0")


# -- what reads as before ----------------------------------------------------------------------


NAMES = np.array([f"station-{i}" for i in range(1000)])


@pytest.mark.parametrize("format", [2, 3])
def test_sound_strings_written_by_zarr_read_through_every_layout(tmp_path, format):
    """Strings written by zarr (consolidated; sharded in v3) read whole and in parts."""
    path = tmp_path / f"names{format}.zarrdb"
    ds = xr.Dataset({"s": ("x", NAMES.astype(object))}, coords={"x": NAMES.astype(object)})
    encoding = {"s": {"chunks": (100,)}}
    if format == 3:
        encoding["s"]["shards"] = (500,)
    with SQLiteStore(path) as store:
        ds.to_zarr(store, zarr_format=format, consolidated=True, encoding=encoding)
    for consolidated in (True, False):
        with xr.open_dataset(path, engine="zarrdb", consolidated=consolidated) as got:
            assert list(got["x"].values) == list(NAMES)
            assert list(got["s"].isel(x=slice(120, 130)).values) == list(NAMES[120:130])
            assert list(got["s"].values) == list(NAMES)


def test_every_read_method_of_zarrs_store_is_checked():
    """A read method zarr adds to its Store would reach the store unchecked unless the wrapper
    overrides it: each method of zarr's Store that returns stored bytes is overridden."""
    reads = {
        name for name, member in inspect.getmembers(Store)
        if callable(member) and (name.startswith("get") or name in ("_get_many",))
        and not name.startswith("getsize")
    }  # fmt: skip
    assert {"get", "get_partial_values", "_get_many"} <= reads, reads
    missing = {name for name in reads if name not in vars(CheckedStrings)}
    assert not missing, f"read methods of zarr's Store not checked: {sorted(missing)}"


def test_a_read_of_a_sound_sharded_file_through_each_method(tmp_path):
    """Each read method of the wrapper returns what the store holds, for a sound shard and a
    junk one, whole and by ranges."""
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    path = _partial(tmp_path, [{"name": "vlen-utf8"}],
                    [good("a", "b"), good("c", "d"), JUNK, None])  # fmt: skip
    proto = default_buffer_prototype()
    with SQLiteStore(path, read_only=True) as store:
        checked = CheckedStrings(store)
        first = RangeByteRequest(0, len(good("a", "b")))
        third = RangeByteRequest(2 * len(good("a", "b")), 2 * len(good("a", "b")) + len(JUNK))
        assert sync(checked.get("s/c/0", proto, first)).to_bytes() == good("a", "b")
        assert checked.get_sync("s/c/0", byte_range=first).to_bytes() == good("a", "b")
        assert sync(checked.get("s/c/0", proto, SuffixByteRequest(64))) is not None  # the index
        for read in (
            lambda: sync(checked.get("s/c/0", proto)),
            lambda: checked.get_sync("s/c/0"),
            lambda: sync(checked.get("s/c/0", proto, third)),
            lambda: checked.get_sync("s/c/0", byte_range=third),
            lambda: sync(checked.get_partial_values(proto, [("s/c/0", third)])),
            lambda: sync(_collect(checked._get_many([("s/c/0", proto, third)]))),
            lambda: sync(_collect(checked.get_ranges("s/c/0", [first, third], prototype=proto))),
            lambda: checked.get_ranges_sync("s/c/0", [first, third], prototype=proto),
        ):
            refused(read, "s/c/0")


async def _collect(iterator):
    return [item async for item in iterator]


def test_zarr_3_itself_reads_the_files_made_here(tmp_path):
    """The crafted shards are what zarr reads: with sound chunks, zarr returns their strings."""
    path = _partial(tmp_path, [{"name": "vlen-utf8"}],
                    [good("a", "b"), good("c", "d"), good("e", "f"), None])  # fmt: skip
    with SQLiteStore(path, read_only=True) as store:
        got = zarr.open_array(store, path="s", mode="r")[:]
    assert list(got) == ["a", "b", "c", "d", "e", "f", "", ""]
