"""Large values and shards against a directory (issue 29): ingest time, bytes written per byte
of value, and sharded reads, zarrdb next to LocalStore in one process.

    python benchmarks/large_values.py [--only ingest shard gathered] [--reps N] [--mib 256]
                                      [--sizes 1 4 32 128] [--dir DIR] [--jsonl out.jsonl]
                                      [--label NAME]
    python benchmarks/large_values.py --summarize out.jsonl [out2.jsonl ...]

Sections:

    ingest    zarr `arr[:] = data` of a 1-D float32 array of --mib MiB in chunks of each of --sizes
              MiB, raw and zstd (level 1), into: zarrdb (default durability), zarrdb
              durability="off", LocalStore, LocalStore + an fsync of every file and directory
              (timed with the ingest); with --wal also zarrdb journal="wal". For zarrdb it
              also reports the process's write_bytes, wchar and rchar (/proc/self/io) per
              byte of stored value (wchar counts every byte passed to write calls, write_bytes
              only the page-cache pages first dirtied: a page written twice before writeback
              counts once there).
    shard     a 512^3 uint16 volume in 256^3 shards of 32^3 inner chunks (uncompressed), laid
              out like the community's zarr_benchmarks: read all, read shard by shard, read all
              shards at once (asyncio.gather), from a warm OS page cache.
    gathered  `store.set` of 1 KiB values, 100 at a time under asyncio.gather, against
              MemoryStore: 2,000 of them into a new file ("new file": the default journal
              starts as a rollback journal; the file is opened first, untimed), then the
              median of 3 x 2,000 more. The kinds ending in "-single" queue each write on
              its own, as before bursts (see _tunables.BURST_VALUE_MAX); "-whole" queues a
              turn's burst only when the turn ends, as before bursts were queued early (see
              _tunables.BURST_MAX_BYTES).

Method: `sync` before each timed run; stores run round-robin within each repetition (odd
repetitions in reverse), so a slow spell of the shared machine hits all of them. The page cache
is not dropped between repetitions (that would disturb other work on the machine). Each record
(one store, one workload, one repetition) is printed as a JSON line and appended to --jsonl;
--summarize prints, per workload and label, the median time of each store, zarrdb's ratio to its
peer (the median of the per-repetition ratios) and the spread (max/min - 1) of those ratios.
Comparing two builds: run this script with each build's Python alternately, with --label old /
--label new and the same --jsonl, then summarize.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

MIB = 1 << 20


def io_counters() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def fsync_tree(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(str(root.parent), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(path) + suffix).unlink(missing_ok=True)


def make_store(kind: str, path: Path, read_only: bool = False) -> Any:
    from zarr.storage import LocalStore, MemoryStore

    from zarrdb import SQLiteStore

    if kind == "zarrdb":
        return SQLiteStore(path, read_only=read_only)
    if kind == "zarrdb-off":
        return SQLiteStore(path, read_only=read_only, durability="off")
    if kind == "zarrdb-wal":
        return SQLiteStore(path, read_only=read_only, journal="wal")
    if kind in ("local", "local-fsync"):
        return LocalStore(path, read_only=read_only)
    if kind == "memory":
        return MemoryStore()
    raise ValueError(kind)


def close(store: Any) -> None:
    closer = getattr(store, "close", None)
    if closer is not None:
        closer()


def emit(out: list[dict[str, Any]], args: argparse.Namespace, **record: Any) -> None:
    record["label"] = args.label
    out.append(record)
    line = json.dumps(record)
    print(line, flush=True)
    if args.jsonl:
        with open(args.jsonl, "a") as f:
            f.write(line + "\n")


def ingest(args: argparse.Namespace, root: Path, out: list[dict[str, Any]], rep: int) -> None:
    import numpy as np
    import zarr
    import zarr.codecs

    n = args.mib * MIB // 4
    x = np.arange(n, dtype=np.float32)
    data = (np.sin(x / 997.0) * 1000).astype(np.float32) + (x % 7)  # zstd: about 2x
    kinds = ["zarrdb", "zarrdb-off", "local", "local-fsync"] + (["zarrdb-wal"] if args.wal else [])
    for size in args.sizes:
        for codec in ("raw", "zstd"):
            order = kinds if rep % 2 == 0 else kinds[::-1]
            for kind in order:
                path = root / f"ingest-{kind}{'.zarrdb' if kind.startswith('zarrdb') else '.zarr'}"
                remove(path)
                store = make_store(kind, path)
                arr = zarr.create_array(
                    store,
                    shape=data.shape,
                    chunks=(size * MIB // 4,),
                    dtype=data.dtype,
                    compressors=zarr.codecs.ZstdCodec(level=1) if codec == "zstd" else None,
                    fill_value=0,
                )
                os.sync()
                before = io_counters()
                started = time.perf_counter()
                arr[:] = data
                close(store)
                if kind == "local-fsync":
                    fsync_tree(path)
                seconds = time.perf_counter() - started
                after = io_counters()
                record: dict[str, Any] = {
                    "workload": f"ingest {size}MiB {codec}", "store": kind, "rep": rep,
                    "seconds": seconds,
                }
                if kind.startswith("zarrdb"):
                    import sqlite3

                    con = sqlite3.connect(path)
                    stored = con.execute("SELECT sum(length(v)) FROM zarr").fetchone()[0]
                    con.close()
                    record["stored_bytes"] = stored
                    record["write_bytes_per_byte"] = (
                        after["write_bytes"] - before["write_bytes"]) / stored
                    record["wchar_per_byte"] = (after["wchar"] - before["wchar"]) / stored
                    record["rchar_per_byte"] = (after["rchar"] - before["rchar"]) / stored
                emit(out, args, **record)
                remove(path)


def shard_reads(args: argparse.Namespace, root: Path, out: list[dict[str, Any]], rep: int) -> None:
    import numpy as np
    import zarr

    edge, shard, inner = 512, 256, 32
    rng = np.random.default_rng(0)
    data = rng.integers(0, 4096, size=(edge,) * 3, dtype=np.uint16)
    kinds = ["zarrdb", "local"]
    paths = {k: root / f"shard-{k}{'.zarrdb' if k == 'zarrdb' else '.zarr'}" for k in kinds}
    if rep == 0 or not all(p.exists() for p in paths.values()):
        for kind, path in paths.items():
            remove(path)
            store = make_store(kind, path)
            zarr.create_array(store, shape=data.shape, chunks=(inner,) * 3, shards=(shard,) * 3,
                              dtype=data.dtype, compressors=None, fill_value=0)[:] = data
            close(store)
    blocks = [(i, j, k) for i in range(0, edge, shard) for j in range(0, edge, shard)
              for k in range(0, edge, shard)]

    def read_all(arr: Any) -> None:
        arr[:]

    def by_block(arr: Any) -> None:
        for i, j, k in blocks:
            arr[i:i + shard, j:j + shard, k:k + shard]

    def all_blocks(arr: Any) -> None:
        async def go() -> None:
            from zarrdb import _compat

            aarr = _compat.async_array(arr)
            await asyncio.gather(*(aarr.getitem((slice(i, i + shard), slice(j, j + shard),
                                                 slice(k, k + shard))) for i, j, k in blocks))
        asyncio.run(go())

    for name, fn in (("read all", read_all), ("read shard by shard", by_block),
                     ("read all shards at once", all_blocks)):
        order = kinds if rep % 2 == 0 else kinds[::-1]
        for kind in order:
            store = make_store(kind, paths[kind], read_only=True)
            arr = zarr.open_array(store, mode="r")
            if not np.array_equal(arr[:], data):  # and warm: the OS page cache, connections
                raise AssertionError(f"{kind}: the sharded array read back differs")
            fn(arr)
            times = []
            for _ in range(3):
                started = time.perf_counter()
                fn(arr)
                times.append(time.perf_counter() - started)
            close(store)
            emit(out, args, workload=f"shard {name}", store=kind, rep=rep,
                 seconds=statistics.median(times))


def gathered(args: argparse.Namespace, root: Path, out: list[dict[str, Any]], rep: int) -> None:
    from zarr.buffer import default_buffer_prototype

    from zarrdb import _compat, _tunables

    value = default_buffer_prototype().buffer.from_bytes(os.urandom(1024))
    kinds = ["zarrdb", "zarrdb-whole", "zarrdb-single", "zarrdb-wal", "memory"]
    defaults = {name: getattr(_tunables, name)
                for name in ("BURST_VALUE_MAX", "BURST_MAX_BYTES", "WAKE_WRITER_BYTES")}
    variants = {"single": {"BURST_VALUE_MAX": -1},
                "whole": {"BURST_MAX_BYTES": 1 << 20, "WAKE_WRITER_BYTES": 256 << 10}}
    for kind in kinds if rep % 2 == 0 else kinds[::-1]:
        path = root / "gathered.zarrdb"
        remove(path)
        variant = kind.removeprefix("zarrdb-")
        if variant not in variants:
            variant = ""
        try:
            for name, setting in variants.get(variant, {}).items():
                setattr(_tunables, name, setting)
            store = make_store("zarrdb" if variant else kind, path)
            asyncio.run(_compat.ensure_open(store))  # the file made, as a store opened by zarr

            async def writes(store: Any, base: int) -> None:
                for start in range(0, 2000, 100):
                    await asyncio.gather(*(store.set(f"g/{base}/{i}", value)
                                           for i in range(start, start + 100)))

            times = []
            for n in range(4):
                started = time.perf_counter()
                asyncio.run(writes(store, n))  # new keys each time
                times.append(time.perf_counter() - started)
            close(store)
        finally:
            for name, setting in defaults.items():
                setattr(_tunables, name, setting)
        remove(path)
        emit(out, args, workload="gathered set 1KiB x100, new file", store=kind, rep=rep,
             seconds=times[0])
        emit(out, args, workload="gathered set 1KiB x100", store=kind, rep=rep,
             seconds=statistics.median(times[1:]))


PEERS = {"zarrdb": "local-fsync", "zarrdb-wal": "local-fsync", "zarrdb-off": "local"}


def summarize(files: list[str]) -> None:
    records = []
    for name in files:
        with open(name) as f:
            records += [json.loads(line) for line in f if line.strip()]
    by: dict[tuple[str, str], dict[tuple[str, int], dict[str, Any]]] = defaultdict(dict)
    for r in records:
        by[(r["workload"], r["label"])][(r["store"], r["rep"])] = r
    print("| workload | label | store | zarrdb s | peer | peer s | ratio (speed) | spread | "
          "write_bytes/B | wchar/B |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|")
    for (workload, label), rows in sorted(by.items()):
        stores = {s for s, _ in rows}
        for store in sorted(s for s in stores if s.startswith("zarrdb")):
            peer = PEERS.get(store, "local")
            if workload.startswith("shard"):
                peer = "local"
            if workload.startswith("gathered"):
                peer = "memory"
            reps = sorted(r for s, r in rows if s == store and (peer, r) in rows)
            if not reps:
                continue
            ratios = [rows[(peer, r)]["seconds"] / rows[(store, r)]["seconds"] for r in reps]
            mine = statistics.median(rows[(store, r)]["seconds"] for r in reps)
            theirs = statistics.median(rows[(peer, r)]["seconds"] for r in reps)
            wb = [rows[(store, r)].get("write_bytes_per_byte") for r in reps]
            wc = [rows[(store, r)].get("wchar_per_byte") for r in reps]
            spread = max(ratios) / min(ratios) - 1
            print(f"| {workload} | {label} | {store} | {mine:.3f} | {peer} | {theirs:.3f} | "
                  f"{statistics.median(ratios):.2f}x (n={len(reps)}) | {spread:.0%} | "
                  + (f"{statistics.median(wb):.2f} | {statistics.median(wc):.2f} |"
                     if wb[0] is not None else "- | - |"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=["ingest", "shard", "gathered"])
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--first-rep", type=int, default=0)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1, 4, 32, 128])
    parser.add_argument("--wal", action="store_true",
                        help="ingest into a file in WAL mode too (journal='wal'), for its bytes")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--jsonl", default=None)
    parser.add_argument("--label", default="")
    parser.add_argument("--summarize", nargs="*", default=None)
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="zarrdb-large-") as tmp:
        root = Path(tmp)
        for rep in range(args.first_rep, args.first_rep + args.reps):
            if "ingest" in args.only:
                ingest(args, root, out, rep)
            if "shard" in args.only:
                shard_reads(args, root, out, rep)
            if "gathered" in args.only:
                gathered(args, root, out, rep)


if __name__ == "__main__":
    sys.exit(main())
