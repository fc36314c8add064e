"""The reads of the community's zarr_benchmarks (github.com/zarrs/zarr_benchmarks) on the
cube: the whole array, block by block, all blocks at once and a round trip, each from a
dropped OS page cache, on a data set an ingest of `workloads` wrote."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zarr
import zarr.api.asynchronous

from zarrdb.cli.bench.harness import StoreKind, close, remove, run_async, settle
from zarrdb.cli.bench.context import Context, create_array


def _blocks(shape: tuple[int, ...], block: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """The selections of every block (chunk or shard) of an array, in C order."""
    ranges = [range(0, n, b) for n, b in zip(shape, block, strict=True)]
    grid = np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, len(shape))
    return [tuple(slice(int(o), int(o) + b) for o, b in zip(at, block, strict=True)) for at in grid]


def cold_reads(ctx: Context, kind: StoreKind, data: str, codec: str) -> None:
    """The reads of the community's zarr_benchmarks on a data set already ingested, each from
    a dropped OS page cache (where that can be done) and timed from opening the store: the
    whole array at once (`read all`), block by block (a block is a chunk, or a shard: what the
    array's layout writes as one value), all blocks at once (asyncio.gather of their reads),
    and a round trip (block by block into a new array of the same layout in a new store of the
    same kind, closed). Each checks what it read or wrote."""
    label = f"{data}-{codec}"
    path = kind.path(ctx.root, label)
    layout = ctx.config.layouts()[data]
    expected = ctx.data(data)
    blocks = _blocks(expected.shape, layout.shards or layout.chunks)
    nbytes = expected.nbytes

    def cold_timed(run: Callable[[Any], Any]) -> tuple[float, Any]:
        settle()
        ctx.page_cache.drop()
        out: list[Any] = []
        start = time.perf_counter()
        store = kind.make(path, True)
        try:
            out.append(run(store))
        finally:
            close(store)
        return time.perf_counter() - start, out[0]

    def check(what: str, got: Any, sel: tuple[slice, ...] = ()) -> None:
        if not np.array_equal(got, expected[sel] if sel else expected):
            raise AssertionError(f"{kind.name}: {what} of {label} differs from what was written")

    record = ctx.results.record
    seconds, got = cold_timed(lambda store: zarr.open_array(store, mode="r")[:])
    check("read all", got)
    record(f"cold read all {label}", kind.name, "s", seconds, nbytes)

    def by_block(store: Any) -> list[Any]:
        arr = zarr.open_array(store, mode="r")
        return [arr[sel] for sel in blocks]

    seconds, parts = cold_timed(by_block)
    for sel, part in zip(blocks, parts, strict=True):
        check("a block", part, sel)
    record(f"cold read by block {label}", kind.name, "s", seconds, nbytes)

    def at_once(store: Any) -> list[Any]:
        async def read() -> list[Any]:
            arr = await zarr.api.asynchronous.open_array(store=store, mode="r")
            return list(await asyncio.gather(*(arr.getitem(sel) for sel in blocks)))

        return run_async(read())

    seconds, parts = cold_timed(at_once)
    for sel, part in zip(blocks, parts, strict=True):
        check("a block read at once", part, sel)
    record(f"cold read blocks at once {label}", kind.name, "s", seconds, nbytes)

    copy_path = kind.path(ctx.root, f"copy-{label}")
    remove(copy_path)

    def round_trip(store: Any) -> None:
        source = zarr.open_array(store, mode="r")
        target_store = kind.make(copy_path, False)
        try:
            target = create_array(target_store, expected, layout.chunks, codec, layout.shards)
            for sel in blocks:
                target[sel] = source[sel]
        finally:
            close(target_store)
        if kind.finish is not None:
            kind.finish(copy_path)

    seconds, _ = cold_timed(round_trip)
    copy = kind.make(copy_path, True)
    try:
        check("the round trip's copy", np.asarray(zarr.open_array(copy, mode="r")[:]))
    finally:
        close(copy)
    remove(copy_path)
    record(f"round trip {label}", kind.name, "s", seconds, nbytes)
