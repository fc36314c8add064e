"""Peak memory of a 1 GiB ingest and a 1 GiB read through zarr into and out of a .zarrdb file.

    python benchmarks/peak_memory.py [--gib 1] [--dir /tmp] [--codec none|zstd] [--full-read]

Each phase runs in its own child process; its peak resident set (ru_maxrss from wait4) is what
is reported, next to the same figure for a child that only imports numpy, zarr and zarrdb and
opens the store (the baseline). The array is float32, 16384 x 16384 for 1 GiB, in 512 x 512
chunks (1 MiB each):

- ingest: written from a generator of row blocks (512 rows = 32 chunks = 32 MiB at a time), so
  the source never holds more than one block;
- read: read back block by block (the same 32 MiB row blocks), each checked against the
  generator;
- full read (--full-read): the whole array into one numpy array, which needs the 1 GiB of the
  result itself; for comparison.

The claim checked: the ingest and the block-wise read stay bounded by a few row blocks and
SQLite's page caches, whatever the size of the data set (run with --gib 0.25 and --gib 2 to
see that the peak does not grow with it). Resident memory is reported twice: ru_maxrss (all
resident pages, including the file's pages that SQLite's read connections memory-map, up to
256 MiB each, which the OS can drop at any time) and the peak of private memory (RssAnon,
sampled from /proc). Exit status 1 when a phase's private peak above the baseline exceeds
--limit-mib (default 512).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

MIB = 1024 * 1024
CHUNK = 512


def block_values(block: int, rows: int, cols: int):
    """Row block `block` of the array: deterministic, not compressible to nothing."""
    import numpy as np

    rng = np.random.default_rng(block)
    return rng.standard_normal((rows, cols), dtype=np.float32)


def child(phase: str, path: str, side: int, codec: str) -> dict:
    import numpy as np
    import zarr

    from zarrdb import SQLiteStore

    blocks = side // CHUNK
    started = time.perf_counter()
    result: dict = {"phase": phase}
    if phase == "baseline":
        store = SQLiteStore(path, read_only=True)
        zarr.open_array(store, mode="r")
        store.close()
    elif phase == "ingest":
        store = SQLiteStore(path)
        compressors = None if codec == "none" else zarr.codecs.ZstdCodec(level=1)
        arr = zarr.create_array(
            store,
            shape=(side, side),
            chunks=(CHUNK, CHUNK),
            dtype="float32",
            compressors=compressors,
        )
        for block in range(blocks):
            arr[block * CHUNK : (block + 1) * CHUNK, :] = block_values(block, CHUNK, side)
        store.close()
    elif phase == "read":
        store = SQLiteStore(path, read_only=True)
        arr = zarr.open_array(store, mode="r")
        for block in range(blocks):
            got = arr[block * CHUNK : (block + 1) * CHUNK, :]
            if not np.array_equal(got, block_values(block, CHUNK, side)):
                raise SystemExit(f"row block {block} differs")
            del got
        store.close()
    elif phase == "full-read":
        store = SQLiteStore(path, read_only=True)
        data = zarr.open_array(store, mode="r")[...]
        result["checksum"] = float(data[::997, ::991].sum())
        del data
        store.close()
    result["seconds"] = time.perf_counter() - started
    return result


def _sample(pid: int, peaks: dict[str, int], stop: threading.Event) -> None:
    """Poll /proc/PID/status: peak private (RssAnon) and file-backed (RssFile: SQLite's
    memory-mapped reads, shared libraries) resident memory, in KiB."""
    while not stop.is_set():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    name, _, value = line.partition(":")
                    if name in ("RssAnon", "RssFile"):
                        peaks[name] = max(peaks.get(name, 0), int(value.split()[0]))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            return
        stop.wait(0.005)


def run_phase(phase: str, path: str, side: int, codec: str) -> dict:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", phase, path, str(side), codec],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    peaks: dict[str, int] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(proc.pid, peaks, stop), daemon=True)
    sampler.start()
    output = proc.stdout.read()
    stop.set()
    sampler.join()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"phase {phase} failed (exit {proc.returncode})")
    result = json.loads(output)
    result["peak_mib"] = usage.ru_maxrss / 1024  # KiB on Linux
    result["anon_mib"] = peaks.get("RssAnon", 0) / 1024
    result["file_mib"] = peaks.get("RssFile", 0) / 1024
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0, help="data set size in GiB (default 1)")
    parser.add_argument("--dir", default=None, help="where to put the file (default: a temp dir)")
    parser.add_argument("--codec", choices=["none", "zstd"], default="none")
    parser.add_argument("--full-read", action="store_true", help="also read all of it at once")
    parser.add_argument("--limit-mib", type=float, default=512.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    side = int(round((args.gib * 1024**3 / 4) ** 0.5 / CHUNK)) * CHUNK
    nbytes = side * side * 4
    workdir = tempfile.mkdtemp(prefix="zarrdb-peak-", dir=args.dir)
    path = os.path.join(workdir, "peak.zarrdb")
    results = []
    try:
        results.append(run_phase("ingest", path, side, args.codec))
        file_size = os.path.getsize(path)
        results.append(run_phase("baseline", path, side, args.codec))
        results.append(run_phase("read", path, side, args.codec))
        if args.full_read:
            results.append(run_phase("full-read", path, side, args.codec))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    base = next(r for r in results if r["phase"] == "baseline")
    baseline, baseline_anon = base["peak_mib"], base["anon_mib"]
    block_mib = CHUNK * side * 4 / MIB
    report = {
        "array": f"{side} x {side} float32, chunks {CHUNK} x {CHUNK}, codec {args.codec}",
        "data_mib": nbytes / MIB,
        "file_mib": file_size / MIB,
        "row_block_mib": block_mib,
        "phases": results,
    }
    failed = False
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{report['array']}: {nbytes / MIB:,.0f} MiB of data, file {file_size / MIB:,.0f} MiB, "
            f"row block {block_mib:.0f} MiB"
        )
        print(
            f"{'phase':<10} {'peak RSS':>9} {'above base':>11} {'private':>9} {'above base':>11} "
            f"{'row blocks':>10} {'mapped':>8} {'time':>7} {'MiB/s':>6}"
        )
        for r in results:
            above = r["peak_mib"] - baseline
            private = r["anon_mib"] - baseline_anon
            rate = f"{nbytes / MIB / r['seconds']:6.0f}" if r["phase"] != "baseline" else "     -"
            print(
                f"{r['phase']:<10} {r['peak_mib']:>7.0f} M {above:>9.0f} M {r['anon_mib']:>7.0f} M "
                f"{private:>9.0f} M {private / block_mib:>10.1f} {r['file_mib']:>6.0f} M "
                f"{r['seconds']:>6.1f}s {rate}"
            )
        print(
            "peak RSS: ru_maxrss; private: peak RssAnon (heap); mapped: peak RssFile (the file's "
            "pages SQLite reads through mmap, and shared libraries); row blocks: private above "
            "the baseline in row blocks"
        )
    for r in results:
        if r["phase"] in ("ingest", "read") and r["anon_mib"] - baseline_anon > args.limit_mib:
            print(
                f"peak memory: {r['phase']} used {r['anon_mib'] - baseline_anon:.0f} MiB of private memory above the baseline, "
                f"over the limit of {args.limit_mib:.0f} MiB",
                file=sys.stderr,
            )
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        phase, path, side, codec = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
        print(json.dumps(child(phase, path, side, codec)))
        sys.exit(0)
    sys.exit(main())
