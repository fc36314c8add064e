"""dask and xarray across processes: a dask.distributed LocalCluster of two worker processes
(one thread each) writes into and reads from one .zarrdb file. The store travels to the workers
by pickling (its path and options) and opens lazily in each of them. One cluster for the module.

Needs the `dask` extra (dask[distributed], xarray); skipped without it.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import zarr

from zarrdb import SQLiteStore

from .helpers import opened, read_all, sha256_file

distributed = pytest.importorskip(
    "dask.distributed", reason="dask.distributed is not installed (pip install 'zarrdb[dask]')"
)
xr = pytest.importorskip("xarray", reason="xarray is not installed (pip install 'zarrdb[dask]')")
da = pytest.importorskip("dask.array", reason="dask is not installed (pip install 'zarrdb[dask]')")
pd = pytest.importorskip("pandas", reason="pandas (an xarray dependency) is not installed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        processes=True,
        n_workers=2,
        threads_per_worker=1,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )
    client = distributed.Client(cluster)
    try:
        client.wait_for_workers(2, timeout=120)
        yield client
    finally:
        client.close()
        cluster.close()


def worker_pids(client) -> set[int]:
    return set(client.run(os.getpid).values())


def run_on_both_workers(client, compute) -> object:
    """Run compute() with a task stream and check tasks ran in both worker processes (and not
    in this one)."""
    with distributed.get_task_stream(client) as stream:
        result = compute()
    workers = {task["worker"] for task in stream.data}
    assert len(workers) == 2, f"tasks ran on {workers}"
    assert os.getpid() not in worker_pids(client)
    return result


def make_dataset() -> xr.Dataset:
    rng = np.random.default_rng(5)
    time = pd.date_range("2024-01-01", periods=24, freq="h")
    y, x = np.arange(60), np.arange(80) * 0.5
    return xr.Dataset(
        {
            "temperature": (
                ("time", "y", "x"),
                rng.standard_normal((24, 60, 80)).astype("float32"),
                {"units": "K"},
            ),
            "pressure": (
                ("time", "y", "x"),
                rng.uniform(900, 1100, (24, 60, 80)),
                {"units": "hPa"},
            ),
            "station": (("y",), rng.integers(0, 1000, 60).astype("int32")),
            "land": (("y", "x"), rng.random((60, 80)) > 0.5),
        },
        coords={"time": time, "y": y, "x": x},
        attrs={"title": "zarrdb across processes", "answer": 42},
    )


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part")
@pytest.mark.parametrize("consolidated", [False, True], ids=["plain", "consolidated"])
def test_xarray_dataset_written_and_read_by_workers(client, tmp_path, consolidated):
    source = make_dataset()
    chunked = source.chunk({"time": 6, "y": 30, "x": 40})
    path = tmp_path / "dataset.zarrdb"
    store = SQLiteStore(path)
    try:
        run_on_both_workers(
            client,
            lambda: chunked.to_zarr(store, mode="w", zarr_format=3, consolidated=consolidated),
        )
    finally:
        store.close()
    with opened(path, read_only=True) as reader:
        assert reader.check() == []
        assert len(reader.key_sizes("temperature/c/")) == 4 * 2 * 2
        loaded = run_on_both_workers(
            client, lambda: xr.open_zarr(reader, consolidated=consolidated).compute()
        )
    xr.testing.assert_identical(loaded, source)


def test_dask_array_to_zarr_regions_from_several_workers(client, tmp_path):
    path = tmp_path / "regions.zarrdb"
    values = np.arange(400 * 600, dtype="int64").reshape(400, 600) * 3 - 7
    x = da.from_array(values, chunks=(100, 100))
    store = SQLiteStore(path)
    try:
        # the whole array with dask.array.to_zarr, one task per chunk
        whole = zarr.create_array(
            store, name="whole", shape=x.shape, chunks=(100, 100), dtype="int64"
        )
        run_on_both_workers(client, lambda: da.to_zarr(x, whole))
        # two bands written as regions of one array, in one graph
        bands = zarr.create_array(
            store, name="bands", shape=x.shape, chunks=(100, 100), dtype="int64", fill_value=-1
        )
        run_on_both_workers(
            client,
            lambda: da.store(
                [x[:200], x[200:] * 2],
                [bands, bands],
                regions=[(slice(0, 200), slice(None)), (slice(200, 400), slice(None))],
                lock=False,
            ),
        )
        np.testing.assert_array_equal(zarr.open_array(store, path="whole", mode="r")[:], values)
        expected = values.copy()
        expected[200:] *= 2
        np.testing.assert_array_equal(zarr.open_array(store, path="bands", mode="r")[:], expected)
        assert store.check() == []
    finally:
        store.close()


@pytest.mark.parametrize("option", ["read_only", "immutable"])
def test_read_only_file_read_by_all_workers_at_once(client, tmp_path, option):
    path = tmp_path / "read-only.zarrdb"
    values = np.random.default_rng(9).standard_normal((512, 512))
    with opened(path) as store:
        zarr.create_array(store, name="v", shape=values.shape, chunks=(64, 64), dtype="float64")[
            :
        ] = values
        expected_contents = read_all(store)
    before = sha256_file(path)
    reader = SQLiteStore(path, **{option: True})
    try:
        x = da.from_zarr(zarr.open_array(reader, path="v", mode="r"))
        assert x.numblocks == (8, 8)
        total, copy = run_on_both_workers(client, lambda: da.compute(x.sum(), x))
    finally:
        reader.close()
    np.testing.assert_allclose(total, values.sum())
    np.testing.assert_array_equal(copy, values)
    assert sha256_file(path) == before, "read-only workers changed the file"
    with opened(path, read_only=True) as store:
        assert read_all(store) == expected_contents
