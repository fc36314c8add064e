"""xarray opens .zarrdb files by name through the `zarrdb` engine (the `xarray.backends` entry
point of the installed package): local paths and names, explicit engine=, groups, trees, lazily
loaded (dask) datasets, closing, errors, and URLs on the real S3 (moto) and HTTP servers."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sqlite3
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

from zarrdb import SQLiteStore, errors
from zarrdb._live_stores import open_in_this_process

from . import _spawn_child

xr = pytest.importorskip("xarray", reason="xarray is not installed (pip install 'zarrdb[dask]')")
pd = pytest.importorskip("pandas", reason="pandas (an xarray dependency) is not installed")

from zarrdb.xarray_backend import ZarrDBBackendEntrypoint  # noqa: E402

TEMPERATURE = np.random.default_rng(3).normal(10, 3, (6, 5, 4)).astype("f4")


def dataset(scale: float = 1.0) -> xr.Dataset:
    return xr.Dataset(
        {"temperature": (("time", "y", "x"), TEMPERATURE * scale, {"units": "degC"})},
        coords={"time": pd.date_range("2024-01-01", periods=6, freq="D"), "y": np.arange(5)},
        attrs={"title": "xarray backend test"},
    )


def write(path, consolidated: bool = True) -> None:
    """The dataset at the root and, scaled by 2, in the group `sub` (closed: one file)."""
    with SQLiteStore(path) as store, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: consolidated metadata is not in the v3 spec
        dataset().to_zarr(store, mode="w", consolidated=consolidated)
        dataset(2.0).to_zarr(store, group="sub", mode="w", consolidated=consolidated)


@pytest.fixture
def weather(tmp_path):
    path = tmp_path / "weather.zarrdb"
    write(path)
    return path


def descriptors_of(path) -> int | None:
    """File descriptors this process has open on `path` (None where /proc does not say)."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    target = os.path.realpath(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.path.realpath(f"/proc/self/fd/{fd}") == target
        except OSError:  # the descriptor listdir itself used
            continue
    return count


def assert_closed(path) -> None:
    """No store of this process has the file open any more, and no descriptor points at it;
    the file is one file in DELETE mode."""
    assert not open_in_this_process(str(path))
    assert descriptors_of(path) in (0, None)
    assert not os.path.exists(f"{path}-wal") and not os.path.exists(f"{path}-shm")
    header = open(path, "rb").read(20)
    assert (header[18], header[19]) == (1, 1)  # SQLite's legacy (rollback journal) format


def assert_same(ds, expected) -> None:
    xr.testing.assert_identical(ds.load(), expected)


def test_the_installed_package_registers_the_engine():
    engines = xr.backends.list_engines()
    assert isinstance(engines["zarrdb"], ZarrDBBackendEntrypoint)


def test_open_dataset_by_name_reads_the_file_and_closes_it(weather):
    ds = xr.open_dataset(weather)  # no engine=: the name says .zarrdb
    assert open_in_this_process(str(weather))
    assert_same(ds, dataset())
    ds.close()
    assert_closed(weather)


def test_a_context_manager_closes_the_store(weather):
    with xr.open_dataset(str(weather)) as ds:
        assert float(ds.temperature.mean()) == pytest.approx(float(TEMPERATURE.mean()), rel=1e-6)
    assert_closed(weather)


def test_a_lazily_loaded_dataset_closes_the_store_too(weather):
    ds = xr.open_dataset(weather, chunks={})
    assert type(ds.temperature.data).__module__.startswith("dask")
    total = float(ds.temperature.sum().compute())  # dask's threads read through the store
    assert total == pytest.approx(float(TEMPERATURE.astype("f8").sum()), rel=1e-5)
    assert open_in_this_process(str(weather))
    ds.close()
    assert_closed(weather)


def test_a_file_of_any_name_is_recognised_by_its_application_id(weather, tmp_path):
    other = tmp_path / "weather.db"
    os.rename(weather, other)
    with xr.open_dataset(other) as ds:
        assert_same(ds, dataset())
    assert_closed(other)


def test_engine_zarrdb_opens_any_name(weather, tmp_path):
    renamed = tmp_path / "weather.data"
    os.rename(weather, renamed)
    with xr.open_dataset(renamed, engine="zarrdb", consolidated=False) as ds:
        assert_same(ds, dataset())
    assert_closed(renamed)


def test_group_selection_and_decoding_options_pass_through(weather):
    with xr.open_dataset(weather, group="sub") as ds:
        assert_same(ds, dataset(2.0))
    with xr.open_dataset(weather, decode_times=False) as raw:
        assert raw.time.dtype.kind in "iu"  # xarray's encoding of the dates, not decoded
        assert "since" in raw.time.attrs["units"]
    with xr.open_dataset(weather, drop_variables=["y"]) as dropped:
        assert "y" not in dropped.variables
    assert_closed(weather)


def test_open_datatree_and_open_groups(weather):
    tree = xr.open_datatree(weather)
    assert set(tree.children) == {"sub"}
    xr.testing.assert_identical(tree["sub"].to_dataset().load(), dataset(2.0))
    assert open_in_this_process(str(weather))
    tree.close()
    assert_closed(weather)

    groups = xr.open_groups(weather)
    assert set(groups) == {"/", "/sub"}
    assert_same(groups["/"], dataset())
    for ds in groups.values():
        ds.close()
    assert_closed(weather)


def test_a_dataset_opened_by_name_pickles_and_reads_again(weather):
    """multiprocessing and process pools send a dataset with the standard pickle, its closer
    included; the copy reopens the file and closing it closes that store."""
    with xr.open_dataset(weather) as ds:
        copy = pickle.loads(pickle.dumps(ds))
    assert_same(copy, dataset())
    copy.close()
    with xr.open_dataset(weather, chunks={}) as lazy:
        copy = pickle.loads(pickle.dumps(lazy))
    assert type(copy.temperature.data).__module__.startswith("dask")
    assert_same(copy, dataset())
    copy.close()
    assert_closed(weather)


def test_a_datatree_opened_by_name_pickles(weather):
    with xr.open_datatree(weather) as tree:
        copy = pickle.loads(pickle.dumps(tree))
    xr.testing.assert_identical(copy["sub"].to_dataset().load(), dataset(2.0))
    copy.close()
    assert_closed(weather)


def test_a_process_pool_task_receives_a_dataset_and_computes(weather):
    with (
        xr.open_dataset(weather) as ds,
        ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool,
    ):
        pid, mean, names = pool.submit(_spawn_child.dataset_mean, ds, "temperature").result(60)
    assert pid != os.getpid()
    assert mean == pytest.approx(float(TEMPERATURE.astype("f8").mean()), rel=1e-6)
    assert names == sorted(dataset().variables)
    assert_closed(weather)


def test_a_store_passed_in_is_read_and_left_open(weather):
    with SQLiteStore(weather, read_only=True) as store:
        ds = xr.open_dataset(store)  # chosen by guess_can_open: the object is a SQLiteStore
        assert_same(ds, dataset())
        ds.close()
        assert open_in_this_process(str(weather))  # the caller's store, still open
    assert_closed(weather)


def test_guess_can_open(weather, tmp_path):
    entry = ZarrDBBackendEntrypoint()
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (a)")
    db.close()
    (tmp_path / "data.zarr").mkdir()
    assert entry.guess_can_open(str(weather))
    assert entry.guess_can_open(weather)  # a Path
    assert entry.guess_can_open("missing.ZARRDB")  # by name, even before it exists
    assert entry.guess_can_open("s3://bucket/path/data.zarrdb")
    assert entry.guess_can_open("https://example.org/data.zarrdb")
    assert not entry.guess_can_open("https://example.org/data.nc")
    assert not entry.guess_can_open(str(foreign))  # SQLite, but not SQLiteStore's id
    assert not entry.guess_can_open(str(tmp_path / "data.zarr"))
    assert not entry.guess_can_open(str(tmp_path / "missing.db"))
    assert not entry.guess_can_open(b"bytes")


def test_bad_input_raises_the_stores_errors_and_leaves_nothing_open(tmp_path):
    with pytest.raises(FileNotFoundError):
        xr.open_dataset(tmp_path / "missing.zarrdb")
    foreign = tmp_path / "foreign.zarrdb"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (a)")
    db.close()
    with pytest.raises(errors.NotAZarrDBError):
        xr.open_dataset(foreign)
    assert_closed(foreign)
    empty_group = tmp_path / "empty.zarrdb"
    with SQLiteStore(empty_group) as store:
        import zarr

        zarr.open_group(store, mode="w")
    with pytest.raises(FileNotFoundError):  # zarr's GroupNotFoundError
        xr.open_dataset(empty_group, group="nowhere", consolidated=False)
    assert_closed(empty_group)


# --- URLs on the project's test servers -----------------------------------------------------


def test_open_dataset_from_s3_by_url(s3, weather):
    server, bucket = s3
    server.put(bucket, "files/weather.zarrdb", weather.read_bytes())
    url = f"s3://{bucket}/files/weather.zarrdb"
    ds = xr.open_dataset(url, backend_kwargs={"storage_options": server.storage_options})
    assert_same(ds, dataset())
    ranged = server.traffic.reads("weather.zarrdb")
    assert ranged and all(r.range for r in ranged)  # read in place, by ranges
    ds.close()
    with xr.open_dataset(url, group="sub", chunks={}, storage_options=server.storage_options) as sub:
        assert_same(sub, dataset(2.0))


def test_open_dataset_from_an_http_server_by_url(http, weather):
    http.put("weather.zarrdb", weather.read_bytes())
    url = f"{http.url}weather.zarrdb"
    with xr.open_dataset(url, storage_options={"allow_http": True}) as ds:  # plain http://
        assert_same(ds, dataset())
    assert http.traffic.count("weather.zarrdb") >= 1
