"""Functions run in `spawn` child processes by test_zarr_end_to_end.py.

Kept out of the test module so a child imports only zarr, numpy and zarrdb. Each function takes
a pickled SQLiteStore, uses it, and closes it before returning.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import zarr


def array_checksum(store, path: str) -> tuple[int, str, tuple[int, ...], str]:
    """(pid, sha256 of the array's bytes, its shape, its dtype) as the child sees it."""
    try:
        assert not store._is_open, "an unpickled store must not arrive open"
        arr = zarr.open_array(store, path=path, mode="r")
        data = arr[:]
        return os.getpid(), hashlib.sha256(data.tobytes()).hexdigest(), data.shape, str(data.dtype)
    finally:
        store.close()


def write_rows(store, path: str, start: int, stop: int, value: float) -> int:
    """Write `value` into rows [start, stop) of the array; return the child's pid."""
    try:
        arr = zarr.open_array(store, path=path, mode="r+")
        arr[start:stop] = np.full((stop - start, *arr.shape[1:]), value, dtype=arr.dtype)
        return os.getpid()
    finally:
        store.close()


def dataset_mean(ds, name: str) -> tuple[int, float, list[str]]:
    """(pid, the mean of variable `name`, the dataset's variables) of an xarray Dataset sent
    to this process; closing it closes the store it reopened here."""
    try:
        return os.getpid(), float(ds[name].mean()), sorted(ds.variables)
    finally:
        ds.close()
