"""Reading a closed .zarrdb in place over HTTP at an object store's latency, against zarr's
ObjectStore reading the same data stored as a directory, from the same server (issue 25).

    python benchmarks/remote.py [--latency 0,20,50] [--size 4096] [--chunk 256] [--repeat 3]
                                [--no-dask] [--markdown FILE] [--json FILE]

The server (tests/remote/latency_server.py) runs on 127.0.0.1 in a process of its own, one
thread per connection, and waits LATENCY milliseconds before answering each request, as an object store's time to first
byte; it counts requests, body bytes and the most requests in flight at once. It serves

- `data.zarrdb`: a file written by zarrdb and closed, holding `field`, a SIZE x SIZE float32
  array in CHUNK x CHUNK chunks (uncompressed);
- `data.zarr/`: the same array written by zarr's LocalStore, one object per chunk, read through
  `zarr.storage.ObjectStore(obstore HTTPStore)`.

Every run opens new stores with cold caches (zarrdb's block caches of earlier stores are
released). Times are medians of --repeat runs; the ratio is zarrdb's time over ObjectStore's
(< 1: zarrdb is faster). The targets of each row are in its name; "met" says whether every
latency met it. At the end, `arr[:]` at a bandwidth limit of 100 MB/s for all connections
together, against the time the bytes of the file need at that rate.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import zarr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the latency server of the remote tests

from remote.latency_server import LatencyServerProcess  # noqa: E402

from zarrdb import SQLiteStore, remote  # noqa: E402
from zarrdb.cli.bench.harness import synthetic_field  # noqa: E402

WINDOW = 512
WINDOWS = 12
THREADS = 4
BANDWIDTH = 100e6  # bytes per second, for the last row


class Bench:
    def __init__(
        self, server: LatencyServerProcess, data: np.ndarray, file_size: int, repeat: int,
        block_cache: dict[str, int],
    ) -> None:
        self.block_cache = block_cache
        self.server = server
        self.data = data
        self.file_size = file_size
        self.repeat = repeat
        # results[row][latency] = (zarrdb, ObjectStore) pairs of measurements
        self.results: dict[str, dict[int, dict[str, Any]]] = {}

    # --- the stores -----------------------------------------------------------------------

    def zarrdb(self) -> Any:
        remote.release_caches()
        store = SQLiteStore(
            self.server.url + "data.zarrdb", read_only=True, storage_options={"allow_http": True},
            block_cache=self.block_cache,
        )
        return store, zarr.open_array(store, path="field", mode="r")

    def object_store(self) -> Any:
        from obstore.store import HTTPStore
        from zarr.storage import ObjectStore

        http = HTTPStore.from_url(self.server.url + "data.zarr", client_options={"allow_http": True})
        store = ObjectStore(http, read_only=True)
        return store, zarr.open_array(store, path="field", mode="r")

    def measure(self, make: Callable[[], Any], work: Callable[[Any], None]) -> dict[str, float]:
        """Median seconds of `work(array)` over --repeat fresh stores, and the server's counts
        (requests, bytes, peak in flight) of the last run; the opening is not timed."""
        times = []
        counts: dict[str, float] = {}
        for _ in range(self.repeat):
            store, arr = make()
            self.server.reset()
            start = time.perf_counter()
            work(arr)
            times.append(time.perf_counter() - start)
            seen = self.server.snapshot()
            counts = {"requests": seen.requests, "bytes": seen.bytes, "peak": seen.peak_in_flight}
            store.close()
        return {"seconds": statistics.median(times), **counts}

    def record(self, row: str, latency: int, work: Callable[[Any], None]) -> None:
        self.results.setdefault(row, {})[latency] = {
            "zarrdb": self.measure(self.zarrdb, work),
            "ObjectStore": self.measure(self.object_store, work),
        }

    # --- the workloads ----------------------------------------------------------------------

    def windows(self) -> list[tuple[int, int]]:
        n = self.data.shape[0] - WINDOW
        rng = np.random.default_rng(25)
        return [(int(i), int(j)) for i, j in rng.integers(0, n, size=(WINDOWS, 2))]

    def read_window(self, arr: Any, corner: tuple[int, int]) -> None:
        i, j = corner
        window = arr[i : i + WINDOW, j : j + WINDOW]
        if not np.array_equal(window, self.data[i : i + WINDOW, j : j + WINDOW]):
            raise AssertionError(f"wrong window at {corner}")

    def run(self, latency: int, dask: bool) -> None:
        self.server.set(latency=latency / 1000)
        corners = self.windows()

        def full(arr: Any) -> None:
            if not np.array_equal(arr[:], self.data):
                raise AssertionError("arr[:] differs from the data written")

        def one_after_another(arr: Any) -> None:
            for corner in corners:
                self.read_window(arr, corner)

        def from_threads(arr: Any) -> None:
            with ThreadPoolExecutor(THREADS) as pool:
                list(pool.map(lambda c: self.read_window(arr, c), corners))

        self.record("arr[:]", latency, full)
        self.record(f"{WINDOWS} random {WINDOW}x{WINDOW} windows, one after another", latency,
                    one_after_another)
        self.record(f"the same windows from {THREADS} threads", latency, from_threads)
        if dask:
            self.record_dask(latency)

    def record_dask(self, latency: int) -> None:
        import dask.array as da
        from dask.distributed import Client, LocalCluster

        expected = float(self.data.astype("f8").sum())
        with (
            LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                         dashboard_address=None, silence_logs=logging.ERROR) as cluster,
            Client(cluster) as client,
        ):
            client.wait_for_workers(2, timeout=120)

            def total(arr: Any) -> None:
                got = float(da.from_zarr(arr).astype("f8").sum().compute())
                if abs(got - expected) > 1e-6 * abs(expected):
                    raise AssertionError(f"dask sum {got} != {expected}")

            self.record("dask LocalCluster, 2 workers x 2 threads, sum", latency, total)

    def economy(self) -> list[tuple[str, int, bool]]:
        """zarrdb's requests to open the file and list the group, and for a window read twice."""
        remote.release_caches()
        self.server.reset()
        store = SQLiteStore(
            self.server.url + "data.zarrdb", read_only=True, storage_options={"allow_http": True},
            block_cache=self.block_cache,
        )
        members = [name for name, _ in zarr.open_group(store, mode="r").members()]
        assert members == ["field"], members
        opening = self.server.snapshot().requests
        arr = zarr.open_array(store, path="field", mode="r")
        corner = self.windows()[0]
        self.server.reset()
        self.read_window(arr, corner)
        cold = self.server.snapshot().requests
        self.server.reset()
        self.read_window(arr, corner)
        warm = self.server.snapshot().requests
        store.close()
        return [
            ("zarrdb: open + open_group + members, requests (<= 4)", opening, opening <= 4),
            (f"zarrdb: one {WINDOW}x{WINDOW} window after that, requests", cold, True),
            ("zarrdb: the same window again, requests (0)", warm, warm == 0),
        ]

    def bandwidth_row(self, latency: int) -> dict[str, Any]:
        self.server.set(latency=latency / 1000, bandwidth=BANDWIDTH)
        try:
            measured = self.measure(self.zarrdb, lambda arr: arr[:])
        finally:
            self.server.set(bandwidth=0)
        return {"latency": latency, **measured, "bound": self.file_size / BANDWIDTH}


TARGETS = {  # row -> (time ratio bound, extra checks)
    "arr[:]": 0.5,
    f"{WINDOWS} random {WINDOW}x{WINDOW} windows, one after another": 0.7,
    f"the same windows from {THREADS} threads": 0.7,
    "dask LocalCluster, 2 workers x 2 threads, sum": 0.7,
}


def table(
    bench: Bench, latencies: list[int], band: dict[str, Any] | None,
    economy: list[tuple[str, int, bool]],
) -> tuple[str, list[dict[str, Any]], bool]:
    head = "| workload (target) | " + " | ".join(f"{ms} ms" for ms in latencies) + " | met |"
    lines = [head, "| --- |" + " ---: |" * len(latencies) + " :---: |"]
    rows = []
    all_met = True
    for row, by_latency in bench.results.items():
        bound = TARGETS.get(row)
        cells = []
        met = True
        for ms in latencies:
            got = by_latency.get(ms)
            if got is None:
                cells.append("-")
                continue
            z, o = got["zarrdb"], got["ObjectStore"]
            ratio = z["seconds"] / o["seconds"]
            cells.append(
                f"{ratio:.2f}x ({z['seconds'] * 1e3:.0f} / {o['seconds'] * 1e3:.0f} ms; "
                f"{z['requests']} / {o['requests']} req)"
            )
            if ms > 0 and bound is not None:  # the targets are at 20 and 50 ms
                met = met and ratio <= bound
            if row == "arr[:]":
                met = met and z["requests"] * 10 <= o["requests"]
                met = met and z["bytes"] <= 1.1 * bench.file_size
            rows.append({"workload": row, "latency_ms": ms, "ratio": ratio, **{
                f"zarrdb_{k}": v for k, v in z.items()}, **{f"objectstore_{k}": v for k, v in o.items()}})
        name = f"{row} (<= {bound}x ObjectStore)" if bound else row
        if row == "arr[:]":
            name = "arr[:] (<= 0.5x time, <= 1/10 requests, <= 1.1x file size in bytes)"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'yes' if met else 'NO'} |")
        all_met = all_met and met
    if band is not None:
        met = band["seconds"] <= 1.2 * band["bound"]
        all_met = all_met and met
        lines.append(
            f"| arr[:] at 100 MB/s, {band['latency']} ms (<= 1.2x file size / bandwidth) | "
            + " | ".join(
                f"{band['seconds']:.2f} s / {band['bound']:.2f} s ({band['seconds'] / band['bound']:.2f}x)"
                if ms == band["latency"] else "-"
                for ms in latencies
            )
            + f" | {'yes' if met else 'NO'} |"
        )
        rows.append({"workload": "bandwidth", **band})
    for name, count, met in economy:
        all_met = all_met and met
        lines.append(f"| {name} | " + " | ".join(str(count) if i == 0 else "-" for i in range(len(latencies)))
                     + f" | {'yes' if met else 'NO'} |")
        rows.append({"workload": name, "zarrdb_requests": count, "met": met})
    return "\n".join(lines) + "\n", rows, all_met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", default="0,20,50",
                        help="milliseconds per request, comma-separated (default 0,20,50)")
    parser.add_argument("--size", type=int, default=4096, help="edge of the square array")
    parser.add_argument("--chunk", type=int, default=256, help="edge of a chunk")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--no-dask", action="store_true", help="leave out the dask cluster")
    parser.add_argument("--no-bandwidth", action="store_true", help="leave out the 100 MB/s row")
    parser.add_argument("--block-cache", action="append", default=[], metavar="FIELD=BYTES",
                        help="a field of zarrdb's BlockCache (e.g. min_request=2097152); repeatable")
    parser.add_argument("--markdown", type=Path, help="write the table as Markdown here")
    parser.add_argument("--json", type=Path, help="write the measurements as JSON here")
    args = parser.parse_args(argv)
    latencies = [int(x) for x in args.latency.split(",") if x.strip()]
    if args.size % args.chunk or args.size < WINDOW + args.chunk:
        parser.error(f"--size must be a multiple of --chunk and at least {WINDOW} + chunk")

    data = synthetic_field(args.size)
    with LatencyServerProcess() as server, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.zarrdb"
        with SQLiteStore(path) as store:
            arr = zarr.create_array(store, name="field", shape=data.shape, dtype="f4",
                                    chunks=(args.chunk, args.chunk), compressors=None, fill_value=0)
            arr[:] = data
        file_size = os.path.getsize(path)
        server.put("data.zarrdb", path.read_bytes())
        directory = Path(tmp) / "data.zarr"
        arr = zarr.create_array(zarr.storage.LocalStore(directory), name="field", shape=data.shape,
                                dtype="f4", chunks=(args.chunk, args.chunk), compressors=None,
                                fill_value=0)
        arr[:] = data
        server.put_tree(directory, "data.zarr")
        print(f"data.zarrdb {file_size / 2**20:.1f} MiB; {(args.size // args.chunk) ** 2} chunks; "
              f"server {server.url}; {os.cpu_count()} cores", file=sys.stderr)
        block_cache = {k: int(v) for k, _, v in (f.partition("=") for f in args.block_cache)}
        bench = Bench(server, data, file_size, args.repeat, block_cache)
        for ms in latencies:
            started = time.perf_counter()
            bench.run(ms, dask=not args.no_dask)
            print(f"{ms} ms done in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        band = None
        if not args.no_bandwidth:
            band = bench.bandwidth_row(max(latencies))
        bench.server.set(latency=latencies[0] / 1000)
        economy = bench.economy()
    text, rows, met = table(bench, latencies, band, economy)
    print(text, end="")
    print("each cell: zarrdb's time / ObjectStore's (ms), requests zarrdb / ObjectStore", file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"size": args.size, "chunk": args.chunk,
                                         "threads": threading.active_count(), "rows": rows},
                                        indent=2))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
