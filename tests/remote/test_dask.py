"""dask.distributed reading a remote .zarrdb: a LocalCluster of two worker processes computes a
reduction over an array published on the S3 server; each worker gets the store by pickling (its
URL, options and version) and opens the file itself.

Needs the `dask` extra (dask[distributed]); skipped without it.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import zarr

from zarrdb import SQLiteStore

distributed = pytest.importorskip(
    "dask.distributed", reason="dask.distributed is not installed (pip install 'zarrdb[dask]')"
)
da = pytest.importorskip("dask.array", reason="dask is not installed (pip install 'zarrdb[dask]')")


def test_two_worker_processes_reduce_a_remote_array(s3, hierarchy_file):
    server, bucket = s3
    data, arrays = hierarchy_file
    server.put(bucket, "cluster/data.zarrdb", data)
    store = SQLiteStore(
        f"s3://{bucket}/cluster/data.zarrdb", read_only=True, storage_options=server.storage_options
    )
    with (
        distributed.LocalCluster(
            processes=True,
            n_workers=2,
            threads_per_worker=2,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.wait_for_workers(2, timeout=120)
        for name in ("plain", "sharded"):
            remote_array = da.from_zarr(zarr.open_array(store, path=name, mode="r"))
            with distributed.get_task_stream(client) as stream:
                total, column_max = da.compute(
                    remote_array.astype("f8").sum(), remote_array.max(axis=0)
                )
            workers = {task["worker"] for task in stream.data}
            assert len(workers) == 2, f"tasks ran on {workers}"
            assert os.getpid() not in set(client.run(os.getpid).values())
            assert total == pytest.approx(arrays[name].astype("f8").sum(), rel=1e-12)
            np.testing.assert_array_equal(column_max, arrays[name].max(axis=0))
    store.close()
    # Every worker read the file itself, by ranges.
    assert server.traffic.count("cluster/data.zarrdb") >= 2
