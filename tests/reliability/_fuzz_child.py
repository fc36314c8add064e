"""The child process of the fuzz test (test_fuzz.py): opens and reads every *.zarrdb file of a
directory (mutated copies of valid files) and reports how far each got, one JSON line per file.

    python -m reliability._fuzz_child DIRECTORY

Before each file it prints "start NAME", so a crash (the process killed by a signal) is
attributed to the file that caused it. The layers of a file, each reached only when the one
before it passed, each stopping at its first exception:
- "open": SQLiteStore read-only, opened (format checks);
- "listing": every key listed;
- "read": every listed key read whole (get, get_sync), exists, getsize, byte ranges of each,
  list_dir, getsize_prefix, key_sizes, file_info, check() (SQLite's integrity check);
- "zarr": zarr's open_group on it, every member and its attributes, every array of at most
  1 MB read whole (reached when the listing passed);
- "write-open" (for every file): SQLiteStore opened for writing, check();
- "write": one set, then close() (checkpoint, back to DELETE mode).
After each file it reports the file descriptors and threads the process has beyond those it
had before the first file (a store that leaves a connection open leaves its descriptor), and by
how much the file raised the process's peak resident memory (a value that claims gigabytes must
be refused, not allocated). A
file that takes longer than SECONDS_PER_FILE (ZARRDB_FUZZ_FILE_SECONDS, default 20) is a hang:
faulthandler prints every thread's stack to stderr and the process exits with status 1.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import sys
import threading
import traceback
import warnings

MAX_ARRAY_BYTES = 1_000_000
SECONDS_PER_FILE = float(os.environ.get("ZARRDB_FUZZ_FILE_SECONDS", "20"))


def describe(exc: BaseException) -> dict:
    import zarrdb
    from zarrdb.errors import ZarrDBError

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    origin = tb.tb_frame.f_code.co_filename if tb is not None else ""
    return {
        "origin": origin,
        # raised by zarrdb's own code (then it must be a zarrdb.errors exception)
        "from_zarrdb": origin.startswith(os.path.dirname(zarrdb.__file__) + os.sep),
        "ok": False,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "zarrdb_error": isinstance(exc, ZarrDBError),
        "builtin_bases": sorted(
            {c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins"}
        ),
        "message": str(exc)[:500],
        "traceback": traceback.format_exc()[-3000:],
    }


def stage(report: dict, layer: str, fn) -> bool:
    """Runs one layer; records {"ok": True, ...} or the exception; True when it passed."""
    try:
        report[layer] = {"ok": True, **(fn() or {})}
    except Exception as exc:  # noqa: BLE001 - classified by the parent
        report[layer] = describe(exc)
    return report[layer]["ok"]


async def _keys(store) -> list[str]:
    return [key async for key in store.list()]


async def _read_everything(store, keys: list[str]) -> None:
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    for key in keys:
        await store.get(key, proto)
        store.get_sync(key)
        await store.exists(key)
        await store.getsize(key)
    await store.get_partial_values(
        proto,
        [(k, RangeByteRequest(1, 7)) for k in keys] + [(k, SuffixByteRequest(3)) for k in keys],
    )
    for prefix in ("", "a", "g"):
        [k async for k in store.list_dir(prefix)]
        await store.getsize_prefix(prefix)


def read_layers(path: str, report: dict) -> None:
    from zarrdb import SQLiteStore

    store = SQLiteStore(path, read_only=True)
    try:
        if not stage(report, "open", store.ensure_open):
            return
        keys: list[str] = []

        def listing() -> dict:
            keys.extend(asyncio.run(_keys(store)))
            return {"keys": len(keys)}

        if not stage(report, "listing", listing):
            return

        def read() -> dict:
            asyncio.run(_read_everything(store, keys))
            store.key_sizes("")
            store.file_info()
            return {"integrity": len(store.check())}

        stage(report, "read", read)
    finally:
        store.close()
    stage(report, "zarr", lambda: zarr_layer(path))


async def _zarr_read(store) -> int:
    import zarr
    import zarr.api.asynchronous as zarr_async

    root = await zarr_async.open_group(store=store, mode="r")
    dict(root.attrs)
    arrays = 0
    async for _, node in root.members(max_depth=None):
        dict(node.attrs)
        if isinstance(node, zarr.AsyncArray) and node.nbytes <= MAX_ARRAY_BYTES:
            await node.getitem(...)
            arrays += 1
    return arrays


def zarr_layer(path: str) -> dict:
    """Through zarr's asynchronous API on a loop of our own: when one chunk fails, zarr's
    other gathered reads of the same call are still running; asyncio.run() waits for them
    before the store is closed (with zarr's synchronous API they go on in zarr's own thread
    after the call has raised, see test_bad_files.py)."""
    from zarrdb import SQLiteStore

    store = SQLiteStore(path, read_only=True)
    try:
        return {"arrays": asyncio.run(_zarr_read(store))}
    finally:
        store.close()


def write_layers(path: str, report: dict) -> None:
    from zarr.core.buffer import default_buffer_prototype

    from zarrdb import SQLiteStore

    store = SQLiteStore(path)
    try:
        opened = stage(report, "write-open", lambda: {"integrity": len(store.check())})
        if opened:

            def write() -> None:
                store.set_sync(
                    "fuzz/written", default_buffer_prototype().buffer.from_bytes(b"x" * 100)
                )
                store.close()

            stage(report, "write", write)
    finally:
        store.close()
    report["sidecars"] = [s for s in ("-wal", "-shm", "-journal") if os.path.exists(path + s)]


def open_descriptors() -> int | None:
    for where in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(where):
            return len(os.listdir(where))
    return None


def peak_memory() -> int | None:
    """The process's peak resident memory in bytes (Linux's VmHWM), None where unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def os_threads() -> int:
    """Threads of the process as the OS sees them (C threads included), else Python's."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def warm_up() -> None:
    """zarr's event-loop thread and codec workers, started before the baseline is taken."""
    import numpy as np
    import zarr
    from zarr.storage import MemoryStore

    arr = zarr.create_array(MemoryStore(), shape=(64,), chunks=(4,), dtype="int32")
    arr[:] = np.arange(64)
    arr[:]


def main(directory: str) -> None:
    warnings.simplefilter("ignore")  # a foreign application id is read with a warning
    warm_up()
    descriptors, threads = open_descriptors(), os_threads()
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".zarrdb"):
            continue
        path = os.path.join(directory, name)
        print(f"start {name}", flush=True)
        peak = peak_memory()
        faulthandler.dump_traceback_later(SECONDS_PER_FILE, exit=True)
        report: dict = {"file": name}
        read_layers(path, report)
        write_layers(path, report)
        faulthandler.cancel_dump_traceback_later()
        now = open_descriptors()
        report["extra_descriptors"] = None if now is None else now - descriptors
        report["extra_threads"] = os_threads() - threads
        now = peak_memory()
        report["peak_growth"] = None if now is None or peak is None else now - peak
        print(json.dumps(report), flush=True)
    print("end", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
