"""Reading a .zarrdb from S3 by byte ranges, against zarr's ObjectStore on the same data (issue 14).

    python benchmarks/remote.py [--size 4096] [--repeat 3] [--windows 100] [--no-dask]
                                [--block-size BYTES] [--markdown FILE] [--json FILE]

One moto S3 server on 127.0.0.1 (the counting server of tests/remote/servers.py) holds, in one
bucket, the same hierarchy twice:

- `data.zarrdb`: one file written by zarrdb and closed: `small`, the bench's SIZE x SIZE float32
  field in 64x64 chunks (uncompressed), and `sharded`, the same data in 1024x1024 shards of
  64x64 chunks;
- `data.zarr/`: the same group and arrays written through zarr's `zarr.storage.ObjectStore`
  (one object per chunk or shard).

Both are read through zarr: `SQLiteStore(url, read_only=True)` and `ObjectStore(S3Store)`.
Requests and bytes are counted by the server, so the counts are exact; times are medians of
--repeat runs, each with newly opened stores, reported as ObjectStore's time over zarrdb's
(>1: zarrdb is faster). moto copies the whole object for every range request, so a range
request into the 150 MiB file costs the server far more than a GET of a 16 KiB chunk object
(the "server" row measures both); the times include that.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the counting S3 server of the remote tests

from remote.servers import S3Server  # noqa: E402

from zarrdb import SQLiteStore, remote  # noqa: E402
from zarrdb.cli.bench.harness import synthetic_field  # noqa: E402
from zarrdb.remote import BlockCache  # noqa: E402

CHUNK = 64
SHARD = 1024
WINDOW = 64


def write_zarrdb(path: Path, data: np.ndarray, shard: int) -> None:
    with SQLiteStore(path) as store:
        write_group(store, data, shard)


def write_group(store: Any, data: np.ndarray, shard: int) -> None:
    root = zarr.open_group(store, mode="w")
    for name, shards in (("small", None), ("sharded", (shard, shard))):
        arr = root.create_array(
            name,
            shape=data.shape,
            chunks=(CHUNK, CHUNK),
            shards=shards,
            dtype="f4",
            compressors=None,
            fill_value=0,
        )
        arr[:] = data


class Bench:
    def __init__(self, server: S3Server, bucket: str, block_cache: BlockCache) -> None:
        self.server = server
        self.bucket = bucket
        self.block_cache = block_cache
        self.url = f"s3://{bucket}/bench/data.zarrdb"
        self.rows: list[dict[str, Any]] = []

    # --- the two stores --------------------------------------------------------------------

    def zarrdb(self) -> SQLiteStore:
        """A newly opened store with a cold block cache (none kept from earlier stores)."""
        remote.release_caches()
        return SQLiteStore(
            self.url,
            read_only=True,
            storage_options=self.server.storage_options,
            block_cache=self.block_cache,
        )

    def object_store(self) -> Any:
        from zarr.storage import ObjectStore

        return ObjectStore(self.server.object_store(self.bucket, "bench/data.zarr"), read_only=True)

    def counted(self, fn: Any) -> tuple[Any, int, int, float]:
        """fn()'s result, the requests and body bytes the server saw meanwhile, the seconds."""
        self.server.traffic.reset()
        start = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - start
        return result, len(self.server.traffic.requests), self.server.traffic.bytes_sent(), elapsed

    def row(self, target: str, zarrdb: str, object_store: str, met: bool | None) -> None:
        self.rows.append(
            {
                "target": target,
                "zarrdb": zarrdb,
                "ObjectStore": object_store,
                "met": "-" if met is None else ("yes" if met else "NO"),
            }
        )

    # --- the targets ------------------------------------------------------------------------

    def open_and_list(self) -> None:
        counts = {}
        for name, make in (("zarrdb", self.zarrdb), ("ObjectStore", self.object_store)):
            store = make()
            members, counts[name], _, _ = self.counted(
                lambda: sorted(n for n, _ in zarr.open_group(store, mode="r").members())
            )
            assert members == ["sharded", "small"], members
            store.close()
        self.row(
            "open + open_group + list members: requests (<= 4)",
            f"{counts['zarrdb']}",
            f"{counts['ObjectStore']}",
            counts["zarrdb"] <= 4,
        )

    def one_window(self, data: np.ndarray) -> None:
        i, j = data.shape[0] * 3 // 10 + 18, data.shape[1] * 57 // 100 + 11  # across four chunks
        result = {}
        for name, make in (("zarrdb", self.zarrdb), ("ObjectStore", self.object_store)):
            store = make()
            arr = zarr.open_array(store, path="small", mode="r")
            cold, cold_n, _, _ = self.counted(lambda: arr[i : i + WINDOW, j : j + WINDOW])
            warm, warm_n, _, _ = self.counted(lambda: arr[i : i + WINDOW, j : j + WINDOW])
            assert np.array_equal(cold, data[i : i + WINDOW, j : j + WINDOW])
            assert np.array_equal(warm, cold)
            result[name] = (cold_n, warm_n)
            store.close()
        z, o = result["zarrdb"], result["ObjectStore"]
        self.row(
            "one 64x64 window after open, cold: requests (<= 3)", f"{z[0]}", f"{o[0]}", z[0] <= 3
        )
        self.row("the same window again: requests (0)", f"{z[1]}", f"{o[1]}", z[1] == 0)

    def full_read(self, data: np.ndarray, file_size: int, repeat: int) -> None:
        times: dict[str, list[float]] = {"zarrdb": [], "ObjectStore": []}
        counts: dict[str, tuple[int, int]] = {}
        for _ in range(repeat):
            for name, make in (("zarrdb", self.zarrdb), ("ObjectStore", self.object_store)):
                store = make()
                arr = zarr.open_array(store, path="small", mode="r")
                values, n, nbytes, elapsed = self.counted(lambda: arr[:])
                assert np.array_equal(values, data), name
                times[name].append(elapsed)
                counts[name] = (n, nbytes)
                store.close()
        z_n, z_bytes = counts["zarrdb"]
        o_n, _ = counts["ObjectStore"]
        self.row(
            "full read of `small`: bytes fetched / file size (<= 1.1)",
            f"{z_bytes / file_size:.2f} ({z_bytes / 2**20:.1f} of {file_size / 2**20:.1f} MiB)",
            "-",
            z_bytes <= 1.1 * file_size,
        )
        self.row(
            "full read: requests (<= 1/10 of ObjectStore's)", f"{z_n}", f"{o_n}", z_n * 10 <= o_n
        )
        z_t, o_t = statistics.median(times["zarrdb"]), statistics.median(times["ObjectStore"])
        self.row(
            "full read: seconds (ObjectStore / zarrdb > 1)",
            f"{z_t:.2f} ({o_t / z_t:.2f}x)",
            f"{o_t:.2f}",
            o_t > z_t,
        )

    def random_windows(self, data: np.ndarray, count: int) -> None:
        corners = np.random.default_rng(1).integers(0, data.shape[0] - WINDOW, size=(count, 2))
        result = {}
        for name, make in (("zarrdb", self.zarrdb), ("ObjectStore", self.object_store)):
            store = make()
            arr = zarr.open_array(store, path="sharded", mode="r")

            def run() -> None:
                for i, j in corners:
                    window = arr[i : i + WINDOW, j : j + WINDOW]
                    if (
                        window[0, 0] != data[i, j]
                        or window[-1, -1] != data[i + WINDOW - 1, j + WINDOW - 1]
                    ):
                        raise AssertionError(f"{name}: wrong window at {i},{j}")

            _, n, _, elapsed = self.counted(run)
            result[name] = (n / count, elapsed / count)
            store.close()
        z, o = result["zarrdb"], result["ObjectStore"]
        self.row(
            f"{count} random windows of `sharded`: requests per window (<= ObjectStore's)",
            f"{z[0]:.2f}",
            f"{o[0]:.2f}",
            z[0] <= o[0],
        )
        self.row(
            f"{count} random windows of `sharded`: ms per window",
            f"{z[1] * 1e3:.1f} ({o[1] / z[1]:.2f}x)",
            f"{o[1] * 1e3:.1f}",
            None,
        )

    def server_cost(self) -> None:
        """What one request costs the server: moto copies the whole object for every range
        request, so a range of the large file costs far more than a GET of a small object."""
        import obstore

        store = self.server.object_store(self.bucket, "bench")

        def median_ms(path: str, options: dict[str, Any]) -> float:
            times = []
            for _ in range(5):
                start = time.perf_counter()
                obstore.get(store, path, options=options).bytes()
                times.append(time.perf_counter() - start)
            return statistics.median(times) * 1e3

        block = self.block_cache.block_size
        file_ms = median_ms("data.zarrdb", {"range": (block, 2 * block)})
        chunk_ms = median_ms("data.zarr/small/c/0/0", {})
        self.row(
            f"the server: ms per request ({block >> 10} KiB of data.zarrdb; one chunk object)",
            f"{file_ms:.1f}",
            f"{chunk_ms:.1f}",
            None,
        )

    def dask_reduction(self, local_path: Path) -> None:
        import dask.array as da
        from dask.distributed import Client, LocalCluster

        with SQLiteStore(local_path, read_only=True) as local:
            expected = float(
                np.asarray(zarr.open_array(local, path="small", mode="r")[:], "f8").sum()
            )
        result = {}
        with (
            LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            ) as cluster,
            Client(cluster) as client,
        ):
            client.wait_for_workers(2, timeout=120)
            for name, make in (("zarrdb", self.zarrdb), ("ObjectStore", self.object_store)):
                store = make()
                arr = da.from_zarr(zarr.open_array(store, path="small", mode="r"))
                result[name] = self.counted(lambda: float(arr.astype("f8").sum().compute()))
                store.close()
        z_total, z_n, _, z_t = result["zarrdb"]
        o_total, o_n, _, o_t = result["ObjectStore"]
        self.row(
            "dask LocalCluster, 2 worker processes: sum of `small` equals the local sum",
            f"{z_total == expected} ({z_t:.1f} s, {z_n} requests)",
            f"{o_total == expected} ({o_t:.1f} s, {o_n} requests)",
            z_total == expected,
        )


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| target | zarrdb | ObjectStore | met |", "| --- | ---: | ---: | :---: |"]
    lines += [f"| {r['target']} | {r['zarrdb']} | {r['ObjectStore']} | {r['met']} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size", type=int, default=4096, help="edge of the square array (default 4096)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="full reads per store (default 3)")
    parser.add_argument("--windows", type=int, default=100, help="random windows (default 100)")
    parser.add_argument("--no-dask", action="store_true", help="leave out the dask cluster")
    parser.add_argument(
        "--block-size",
        type=int,
        default=BlockCache().block_size,
        help="zarrdb's block size in bytes (default: BlockCache's)",
    )
    parser.add_argument("--markdown", type=Path, help="write the table as Markdown here")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.size % CHUNK or args.size < 2 * WINDOW + 2:
        parser.error(f"--size must be a multiple of {CHUNK} and at least {2 * WINDOW + 64}")
    shard = min(SHARD, args.size)

    data = synthetic_field(args.size)
    server = S3Server().start()
    try:
        bucket = server.new_bucket()
        bench = Bench(server, bucket, BlockCache(block_size=args.block_size))
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "data.zarrdb"
            write_zarrdb(local, data, shard)
            file_size = os.path.getsize(local)
            server.put(bucket, "bench/data.zarrdb", local.read_bytes())
            from zarr.storage import ObjectStore

            write_group(ObjectStore(server.object_store(bucket, "bench/data.zarr")), data, shard)
            print(
                f"zarrdb file {file_size / 2**20:.1f} MiB; S3 server {server.endpoint}",
                file=sys.stderr,
            )
            bench.open_and_list()
            bench.one_window(data)
            bench.full_read(data, file_size, args.repeat)
            bench.random_windows(data, args.windows)
            bench.server_cost()
            if not args.no_dask:
                bench.dask_reduction(local)
    finally:
        server.stop()
    table = markdown(bench.rows)
    print(table, end="")
    if args.markdown:
        args.markdown.write_text(table)
    if args.json:
        args.json.write_text(
            json.dumps(
                {"size": args.size, "block_size": args.block_size, "rows": bench.rows}, indent=2
            )
        )
    return 0 if all(r["met"] != "NO" for r in bench.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
