"""A coordinate that declares more than the file holds (issue 37, finding 5).

xarray reads each dimension coordinate whole when it opens a dataset, to build its index, at
the size the metadata declares: a 2.5 KB file declaring a coordinate of 1.25e8 float64 values
and storing no chunk made `xr.open_dataset("x.zarrdb")` allocate 1.9 GB. The backend checks the
declared size first against `max_coordinate_bytes`, which the caller can raise.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import xarray as xr
import zarr

from zarrdb import SQLiteStore, errors
from zarrdb.xarray_backend import MAX_COORDINATE_BYTES

DECLARED = 40_000_000  # float64 values: 320 MB, above the default limit


def declaring(path, n: int, *, group: str = ""):
    """A file whose (sub)group has a coordinate "x" of `n` float64 values, none stored, and a
    variable on it."""
    with SQLiteStore(path) as store:
        root = zarr.open_group(store, mode="w")
        node = root.create_group(group) if group else root
        node.create_array("x", shape=(n,), chunks=(1_000_000,), dtype="float64",
                          dimension_names=["x"], fill_value=0.0)  # fmt: skip
        node.create_array("v", shape=(n,), chunks=(1_000_000,), dtype="float32",
                          dimension_names=["x"], fill_value=0.0)  # fmt: skip
    return path


def test_a_file_declaring_a_huge_coordinate_is_refused_before_xarray_reads_it(tmp_path):
    path = declaring(tmp_path / "bomb.zarrdb", DECLARED)
    assert path.stat().st_size < 1_000_000  # 64 KiB pages: a few of them
    tracemalloc.start()
    try:
        with pytest.raises(errors.CoordinateTooLargeError, match="max_coordinate_bytes") as raised:
            xr.open_dataset(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50_000_000
    assert "'x'" in str(raised.value) and f"{DECLARED:,}" in str(raised.value)


def test_open_datatree_checks_every_group(tmp_path):
    path = declaring(tmp_path / "deep.zarrdb", DECLARED, group="inner")
    with pytest.raises(errors.CoordinateTooLargeError, match="inner/x"):
        xr.open_datatree(path)


def test_the_limit_is_the_callers(tmp_path):
    """A small coordinate opens by default; a lower limit refuses it, a higher one lets a
    larger one through."""
    path = declaring(tmp_path / "small.zarrdb", 1000)
    with xr.open_dataset(path) as ds:
        assert np.all(ds["x"].values == 0)
    with pytest.raises(errors.CoordinateTooLargeError):
        xr.open_dataset(path, max_coordinate_bytes=4000)
    with xr.open_dataset(path, max_coordinate_bytes=8000) as ds:
        assert ds.sizes["x"] == 1000
    big = declaring(tmp_path / "big.zarrdb", MAX_COORDINATE_BYTES // 8 + 1)
    with pytest.raises(errors.CoordinateTooLargeError):
        xr.open_dataset(big)


def test_a_string_coordinate_counts_its_fill_value(tmp_path):
    """A coordinate of strings is read as a Python object per value, holding the fill value
    where no chunk is stored: a million values with a 1,000-character fill took 3.3 GB while
    counted 16 MB (numpy's StringDType has the itemsize of a pointer)."""
    path = tmp_path / "strings.zarrdb"
    with SQLiteStore(path) as store:
        root = zarr.open_group(store, mode="w")
        root.create_array("x", shape=(10_000,), chunks=(10_000,), dtype=str,
                          dimension_names=["x"], fill_value="f" * 1000)  # fmt: skip
    with pytest.raises(errors.CoordinateTooLargeError, match="'x'"):
        xr.open_dataset(path, max_coordinate_bytes=1_000_000)  # 10,000 strings of 1,000
    with xr.open_dataset(path, max_coordinate_bytes=50_000_000) as ds:
        assert ds["x"].values[0] == "f" * 1000


def _junk_string_coordinate(path, chunk: bytes, codecs: list) -> None:
    """A file with a string coordinate "x" of 10 values in one chunk, stored as `chunk`."""
    import json

    from format import builders

    array = {
        "zarr_format": 3, "node_type": "array", "shape": [10], "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [10]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "", "codecs": codecs, "attributes": {}, "dimension_names": ["x"],
    }  # fmt: skip
    builders.make_store_file(path, entries={
        "zarr.json": json.dumps({"zarr_format": 3, "node_type": "group"}).encode(),
        "x/zarr.json": json.dumps(array).encode(), "x/c/0": chunk})  # fmt: skip


@pytest.mark.parametrize("compressed", [False, True], ids=["raw", "zstd"])
@pytest.mark.parametrize("count", [20_000_000, 11], ids=["past its bytes", "past its shape"])
def test_a_junk_chunk_of_strings_is_refused_before_it_is_decoded(tmp_path, compressed, count):
    """A chunk of strings whose first four bytes state more items than its bytes hold:
    numcodecs' vlen-utf8 decoder made an array of that many objects before reading on (2^31 - 1
    of them: 15 GB touched for a 4 KB file; 20 million here, 160 MB). The backend refuses it,
    naming the key, as it does a count past the chunk's shape."""
    import numcodecs

    codecs = [{"name": "vlen-utf8"}]
    raw = count.to_bytes(4, "little") + b"".join(b"\x01\x00\x00\x00a" for _ in range(11))
    if compressed:
        codecs.append({"name": "zstd", "configuration": {"level": 0, "checksum": False}})
        raw = numcodecs.Zstd().encode(raw)
    path = tmp_path / "junk.zarrdb"
    _junk_string_coordinate(path, raw, codecs)
    tracemalloc.start()
    try:
        with pytest.raises(errors.DamagedChunkError, match="'x/c/0'"):
            xr.open_dataset(path, engine="zarrdb")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50_000_000


def test_a_sound_chunk_of_strings_reads_as_before(tmp_path):
    """Strings written by zarr (compressed, the default) read back through the check."""
    path = tmp_path / "names.zarrdb"
    names = np.array([f"station-{i}" for i in range(1000)])
    with SQLiteStore(path) as store:
        root = zarr.open_group(store, mode="w")
        x = root.create_array("x", shape=(1000,), chunks=(300,), dtype=str, dimension_names=["x"])
        x[:] = names
        v = root.create_array("v", shape=(1000,), chunks=(300,), dtype=str, dimension_names=["x"])
        v[:] = names[::-1]
    with xr.open_dataset(path, engine="zarrdb") as ds:
        assert list(ds["x"].values) == list(names)
        assert list(ds["v"].values) == list(names[::-1])
