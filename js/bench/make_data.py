"""The data of the measurements, written three ways by zarr-python: a .zarrdb file, a directory
and a zip file (entries stored). python make_data.py OUTDIR"""

import os
import shutil
import sys
import zipfile

import numpy as np
import zarr
from zarr.storage import LocalStore

import zarrdb

out = sys.argv[1]


def write(store) -> None:
    root = zarr.open_group(store, mode="w")
    # 64 MiB of float32 in uncompressed chunks of 256 KiB (256 x 256).
    big = root.create_array(
        "big", shape=(4096, 4096), chunks=(256, 256), dtype="float32", compressors=None
    )
    big[:] = np.random.default_rng(1).random((4096, 4096), dtype="float32")
    # Shards of 4 MiB (1024 x 1024), inner chunks of 256 KiB.
    sharded = root.create_array(
        "sharded",
        shape=(2048, 2048),
        chunks=(256, 256),
        shards=(1024, 1024),
        dtype="float32",
        compressors=None,
    )
    sharded[:] = np.random.default_rng(2).random((2048, 2048), dtype="float32")


store = zarrdb.SQLiteStore(os.path.join(out, "data.zarrdb"))
write(store)
store.close()
directory = os.path.join(out, "data.zarr")
shutil.rmtree(directory, ignore_errors=True)
write(LocalStore(directory))
with zipfile.ZipFile(os.path.join(out, "data.zip"), "w", zipfile.ZIP_STORED) as archive:
    for folder, _, files in os.walk(directory):
        for name in sorted(files):
            path = os.path.join(folder, name)
            archive.write(path, os.path.relpath(path, directory))
