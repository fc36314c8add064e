"""The child process of the fuzz test in test_bad_files.py: opens and reads every *.zarrdb file of
a directory (mutated copies of valid files) and reports what happened, one JSON line per file.

    python -m reliability._fuzz_child DIRECTORY

Before each file it prints "start NAME", so a crash (the process killed by a signal) is
attributed to the file that caused it. Three layers per file, each stopping at its first
exception:
- "store": SQLiteStore read-only: list every key, get / exists / getsize each, byte ranges,
  key_sizes, file_info, check();
- "zarr": zarr.open_group on it, every member, every array of at most 1 MB read whole;
- "writer": SQLiteStore opened for writing: check(), one set, close() (checkpoint, DELETE mode).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
import warnings

MAX_ARRAY_BYTES = 1_000_000


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


def store_layer(path: str) -> dict:
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype

    from zarrdb import SQLiteStore

    store = SQLiteStore(path, read_only=True)
    try:

        async def go() -> int:
            keys = [key async for key in store.list()]
            proto = default_buffer_prototype()
            for key in keys:
                await store.get(key, proto)
                store.get_sync(key)
                await store.exists(key)
                await store.getsize(key)
            await store.get_partial_values(
                proto,
                [(k, RangeByteRequest(1, 7)) for k in keys]
                + [(k, SuffixByteRequest(3)) for k in keys],
            )
            for prefix in ("", "a", "g"):
                [k async for k in store.list_dir(prefix)]
                await store.getsize_prefix(prefix)
            return len(keys)

        count = asyncio.run(go())
        store.key_sizes("")
        store.file_info()
        problems = store.check()
        return {"ok": True, "keys": count, "integrity": len(problems)}
    finally:
        store.close()


def zarr_layer(path: str) -> dict:
    import zarr

    from zarrdb import SQLiteStore

    store = SQLiteStore(path, read_only=True)
    try:
        root = zarr.open_group(store, mode="r")
        dict(root.attrs)
        arrays = 0
        for _, node in root.members(max_depth=None):
            dict(node.attrs)
            if isinstance(node, zarr.Array) and node.nbytes <= MAX_ARRAY_BYTES:
                node[...]
                arrays += 1
        return {"ok": True, "arrays": arrays}
    finally:
        store.close()


def writer_layer(path: str) -> dict:
    from zarr.core.buffer import default_buffer_prototype

    from zarrdb import SQLiteStore

    store = SQLiteStore(path)
    try:
        store.check()
        store.set_sync("fuzz/written", default_buffer_prototype().buffer.from_bytes(b"x" * 100))
        return {"ok": True}
    finally:
        store.close()


def main(directory: str) -> None:
    warnings.simplefilter("ignore")  # a foreign application id is read with a warning
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".zarrdb"):
            continue
        path = os.path.join(directory, name)
        print(f"start {name}", flush=True)
        report = {"file": name}
        for layer, fn in (("store", store_layer), ("zarr", zarr_layer), ("writer", writer_layer)):
            try:
                report[layer] = fn(path)
            except Exception as exc:  # noqa: BLE001 - classified by the parent
                report[layer] = describe(exc)
        print(json.dumps(report), flush=True)
    print("end", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
