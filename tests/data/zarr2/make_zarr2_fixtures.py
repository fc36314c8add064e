"""Regenerate the files zarr-python 2's `zarr.storage.SQLiteStore` wrote, which
tests/format/test_zarr2.py and tests/cli/test_upgrade.py read with zarrdb.

zarr-python 2 and zarr-python 3 cannot be installed in one environment, so this script makes a
throwaway virtual environment with zarr 2 and runs itself there:

    python tests/data/zarr2/make_zarr2_fixtures.py

(any Python >= 3.11 with the `venv` module; `pip install "zarr<3" "numcodecs<0.16"` must reach
PyPI). The files are made by zarr 2 alone, and so is what the tests compare them with:

- hierarchy.sqlite.fixture: groups with attributes; arrays compressed with Blosc, Zlib and Zstd,
  with Delta and FixedScaleOffset filters, fill values, an unwritten chunk, '/' as the
  dimension separator; consolidated metadata (.zmetadata). Every codec has a zarr v3 form, so
  `zarrdb upgrade --to-v3` converts it.
- strings.sqlite.fixture: one array of variable-length strings (object dtype, VLenUTF8 filter),
  which zarr 3 reads in zarr v2 form but whose metadata its converter does not take.
- expected.npz: every array as zarr 2 reads it back from the file (`z[...]`), by path.
- expected.json: zarr 2's view of each file: every node's path, kind and attributes, and each
  array's shape, chunks, dtype, fill value, compressor and filters; the zarr 2 and numcodecs
  versions that wrote them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = ("hierarchy.sqlite.fixture", "strings.sqlite.fixture")


def in_throwaway_venv() -> int:
    """Run this script again in a new virtual environment holding zarr 2."""
    with tempfile.TemporaryDirectory(prefix="zarr2-fixtures-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "zarr<3", "numcodecs<0.16"],
            check=True,
        )
        return subprocess.run([str(python), __file__, "--here"]).returncode


def write_hierarchy(path: Path, arrays: dict) -> None:
    import numcodecs
    import numpy as np
    import zarr

    store = zarr.storage.SQLiteStore(str(path))
    root = zarr.group(store=store, overwrite=True)
    root.attrs.update({"title": "written by zarr-python 2", "answer": 42})
    climate = root.create_group("climate")
    climate.attrs["source"] = {"kind": "synthetic", "seeds": [7, 8]}

    rng = np.random.default_rng(7)
    temperature = climate.create_dataset(
        "temperature",
        shape=(20, 30),
        chunks=(8, 10),
        dtype="f4",
        fill_value=float("nan"),
        compressor=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    )
    temperature.attrs["units"] = "degC"
    temperature[:] = rng.normal(15, 5, (20, 30)).astype("f4")

    station = climate.create_dataset(
        "station",
        shape=(25,),
        chunks=(10,),
        dtype="i8",
        compressor=numcodecs.Zlib(level=5),
        filters=[numcodecs.Delta(dtype="i8")],
    )
    station[:] = np.arange(1000, 1025)

    scaled = root.create_dataset(
        "scaled",
        shape=(16,),
        chunks=(6,),
        dtype="f8",
        compressor=numcodecs.Zstd(level=3),
        filters=[numcodecs.FixedScaleOffset(offset=100, scale=10, dtype="f8", astype="u2")],
    )
    scaled[:] = np.linspace(100, 110, 16).round(1)

    # Only some chunks written: the others read as the fill value.
    sparse = root.create_dataset(
        "sparse", shape=(12, 12), chunks=(4, 4), dtype="u2", fill_value=9, compressor=None
    )
    sparse[0:4, 4:8] = np.arange(16, dtype="u2").reshape(4, 4)

    # Chunk keys with '/' between the indices ("tiles/0/1"), not '.'.
    nested = root.create_group("nested")
    nested.attrs["note"] = "chunk keys with '/' between the indices"
    tiles = nested.create_dataset(
        "tiles",
        shape=(6, 6),
        chunks=(3, 3),
        dtype="i2",
        dimension_separator="/",
        compressor=numcodecs.Zlib(level=1),
    )
    tiles[:] = np.arange(36, dtype="i2").reshape(6, 6) - 18

    # zarr 2's consolidate_metadata(store) reads the keys while iterating over them, and
    # SQLiteStore's listing shares one cursor with its reads (only the first key would be
    # consolidated): the same function runs on an in-memory copy of the metadata, and the
    # document it writes is stored in the file.
    keys = list(store.keys())
    metadata = {key: store[key] for key in keys if key.rsplit("/", 1)[-1].startswith(".z")}
    copy = zarr.storage.KVStore(metadata)
    zarr.consolidate_metadata(copy)
    store[".zmetadata"] = copy[".zmetadata"]
    assert set(zarr.open_consolidated(store, mode="r").array_keys()) == {"scaled", "sparse"}
    record(root, arrays)
    store.close()


def write_strings(path: Path, arrays: dict) -> None:
    import numcodecs
    import numpy as np
    import zarr

    store = zarr.storage.SQLiteStore(str(path))
    root = zarr.group(store=store, overwrite=True)
    names = root.create_dataset(
        "names", shape=(4,), chunks=(2,), dtype=object, object_codec=numcodecs.VLenUTF8()
    )
    names[:] = np.array(["alpha", "beta", "gamma", "delta"], dtype=object)
    record(root, arrays)
    store.close()


def record(root, arrays: dict) -> None:
    """Every array of `root` as zarr 2 reads it back, into `arrays` by path."""
    for path, array in _walk(root):
        arrays[path] = array[...]


def _walk(group, prefix=""):
    for name, array in group.arrays():
        yield prefix + name, array
    for name, sub in group.groups():
        yield from _walk(sub, prefix + name + "/")


def describe(path: Path) -> dict:
    """zarr 2's view of the hierarchy in the file at `path`."""
    import zarr

    store = zarr.storage.SQLiteStore(str(path))
    root = zarr.open_group(store=store, mode="r")
    nodes = {"": {"kind": "group", "attributes": dict(root.attrs)}}

    def visit(name, node):
        entry = {"attributes": dict(node.attrs)}
        if isinstance(node, zarr.Array):
            entry.update(
                kind="array",
                shape=list(node.shape),
                chunks=list(node.chunks),
                dtype=str(node.dtype),
                fill_value=None if node.fill_value is None else _json_value(node.fill_value),
                compressor=None if node.compressor is None else node.compressor.get_config(),
                filters=[f.get_config() for f in node.filters or []],
            )
        else:
            entry["kind"] = "group"
        nodes[name] = entry

    root.visititems(visit)
    keys = sorted(store.keys())
    store.close()
    return {"nodes": nodes, "keys": keys}


def _json_value(value):
    import math

    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def main() -> int:
    import numcodecs
    import numpy as np
    import zarr

    assert zarr.__version__.startswith("2."), zarr.__version__
    arrays: dict = {}
    files = {}
    for name, write in zip(FIXTURES, (write_hierarchy, write_strings)):
        target = HERE / name
        target.unlink(missing_ok=True)
        found: dict = {}
        write(target, found)
        files[name] = describe(target)
        arrays.update({f"{name}:{path}": value for path, value in found.items()})
    # Object arrays are kept as lists in the JSON file (an .npz holds them only pickled).
    plain = {k: v for k, v in arrays.items() if v.dtype != object}
    strings = {k: v.tolist() for k, v in arrays.items() if v.dtype == object}
    np.savez(HERE / "expected.npz", **plain)
    with open(HERE / "expected.json", "w") as f:
        json.dump(
            {
                "written_by": {"zarr": zarr.__version__, "numcodecs": numcodecs.__version__},
                "files": files,
                "object_arrays": strings,
            },
            f,
            indent=1,
            sort_keys=True,
        )
        f.write("\n")
    for name in FIXTURES:
        print(f"{name}: {(HERE / name).stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    if "--here" in sys.argv:
        sys.exit(main())
    try:
        import zarr

        have_zarr2 = zarr.__version__.startswith("2.")
    except ImportError:
        have_zarr2 = False
    sys.exit(main() if have_zarr2 else in_throwaway_venv())
