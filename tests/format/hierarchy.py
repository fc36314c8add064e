"""A sample zarr hierarchy used by the conformance and interoperability tests.

`write_hierarchy` creates it through zarr in any store; the expected contents (`ARRAYS`,
`ATTRS`) are plain numpy expressions, so a reader's result is compared with values no store
produced.
"""

from __future__ import annotations

import numpy as np
import zarr
import zarr.codecs


def _partial() -> np.ndarray:
    out = np.full(10, -1, dtype="i2")
    out[:5] = np.arange(5)
    return out


# path -> (expected data, create_array keyword arguments)
ARRAYS: dict[str, tuple[np.ndarray, dict]] = {
    "int8": (
        (np.arange(40, dtype="i1") - 20).reshape(5, 8),
        {"chunks": (2, 3)},
    ),
    "int32": (
        np.arange(48, dtype="i4").reshape(6, 8) * -7,
        {"chunks": (3, 4)},  # zarr's default compressor (zstd)
    ),
    "int64": (
        np.arange(12, dtype="i8") * (2**40 + 1),
        {"chunks": (5,), "compressors": None},
    ),
    "sub/float32": (
        (np.arange(30, dtype="f4") / 8).reshape(3, 10),
        {"chunks": (2, 4), "compressors": zarr.codecs.BloscCodec(cname="lz4", clevel=5)},
    ),
    "sub/float64": (
        np.arange(10, dtype="f8") / 4 - 1.25,
        {"chunks": (4,), "compressors": None},
    ),
    "sub/deeper/bools": (
        np.arange(25).reshape(5, 5) % 3 == 0,
        # (not gzip: its header holds the time in seconds, so two writes could differ)
        {"chunks": (5, 5), "compressors": zarr.codecs.ZstdCodec(level=9, checksum=True)},
    ),
    "sub/deeper/complex": (
        np.arange(6, dtype="c16") * (1 + 2j),
        {"chunks": (4,)},
    ),
    "sharded": (
        np.arange(256, dtype="u2").reshape(16, 16),
        {"shards": (8, 8), "chunks": (4, 4)},
    ),
    "partial": (_partial(), {"chunks": (5,), "fill_value": -1}),
}

ATTRS: dict[str, dict] = {
    "": {"title": "format tests", "n": 3, "nested": {"list": [1, 2.5, "x"], "none": None}},
    "sub": {"unit": "m", "description": "sub group"},
    "sub/deeper": {"level": 2},
}


def write_hierarchy(store) -> None:
    """Create the hierarchy in `store` (mode "w") and write its data."""
    root = zarr.open_group(store, mode="w")
    root.attrs.update(ATTRS[""])
    for path in ("sub", "sub/deeper"):
        root.create_group(path).attrs.update(ATTRS[path])
    for path, (data, kwargs) in ARRAYS.items():
        arr = root.create_array(path, shape=data.shape, dtype=data.dtype, **kwargs)
        if path == "partial":
            arr[:5] = data[:5]  # the other chunk stays unwritten: read as fill_value
        else:
            arr[...] = data


def check_hierarchy(group, *, listing: bool = True) -> None:
    """`group` (opened on any store) holds exactly the sample hierarchy's contents."""
    for path, attrs in ATTRS.items():
        node = group if path == "" else group[path]
        assert isinstance(node, zarr.Group), path
        assert dict(node.attrs) == attrs, path
    for path, (expected, _) in ARRAYS.items():
        arr = group[path]
        assert isinstance(arr, zarr.Array), path
        assert arr.dtype == expected.dtype, path
        assert arr.shape == expected.shape, path
        np.testing.assert_array_equal(arr[...], expected, err_msg=path)
    if listing:
        assert sorted(group.group_keys()) == ["sub"]
        assert sorted(group.array_keys()) == ["int32", "int64", "int8", "partial", "sharded"]
        assert sorted(group["sub"].keys()) == ["deeper", "float32", "float64"]
