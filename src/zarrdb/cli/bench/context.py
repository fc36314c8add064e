"""The configuration of a benchmark run, the data sets it writes and how they are cut, and the
context its workloads share (the stores taking part, the results, the data sets written).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.codecs

from zarrdb.cli.bench.harness import (
    PageCache,
    Results,
    StoreKind,
    close,
    remove,
    synthetic_cube,
    synthetic_field,
)

WINDOW = 64  # edge of a random window, and of the chunks inside shards


@dataclass
class Config:
    size: int = 4096  # edge of the float32 field
    small: int = 64  # small chunk edge (64: 16 KiB)
    large: int = 512  # large chunk edge (512: 1 MiB)
    shard: int = 1024  # edge of the field's shards (of 64x64 chunks) in the sharded ingest
    cube: int = 512  # edge of the uint16 volume (0: none)
    cube_chunk: int = 256  # its chunk edge (256: 32 MiB), and its shards' edge
    cube_inner: int = 32  # the edge of the chunks inside the cube's shards
    values_mib: tuple[int, ...] = (1, 4, 32, 128)  # values of these sizes, cut from the cube
    cold: bool = False  # drop the OS page cache before each full read (root only)
    repeat: int = 3
    windows: int = 200
    list_children: int = 200
    list_keys_per_child: int = 500
    hierarchy_arrays: int = 200
    threads: tuple[int, ...] = (2, 4)
    shard_sizes: tuple[int, ...] = (512, 1024, 2048)  # shard edges, 64x64 chunks inside
    single_calls: int = 2000  # store.get/set calls per sample

    def chunk_bytes(self, data: str) -> int:
        """Bytes of one value (a chunk, or a shard) of the data set `data`."""
        layout = self.layouts()[data]
        item = 2 if layout.cube else 4
        return int(np.prod(layout.shards or layout.chunks)) * item

    def layouts(self) -> dict[str, Layout]:
        """The data sets an ingest writes, by name: the float32 field in small and large
        chunks and in shards, the uint16 cube in chunks and in shards, and the cube in values
        of each of `values_mib` (stacks of whole planes)."""
        out = {
            "small": Layout(False, (self.small, self.small)),
            "large": Layout(False, (self.large, self.large)),
            "shard": Layout(False, (WINDOW, WINDOW), (self.shard, self.shard)),
        }
        if self.cube:
            edge, inner = self.cube_chunk, self.cube_inner
            out["cube"] = Layout(True, (edge,) * 3)
            out["cube-shard"] = Layout(True, (inner,) * 3, (edge,) * 3)
            plane = self.cube * self.cube * 2
            for mib in self.values_mib:
                planes, rest = divmod(mib << 20, plane)
                if planes and not rest and planes <= self.cube:
                    out[f"value-{mib}MiB"] = Layout(True, (planes, self.cube, self.cube))
        return out


@dataclass(frozen=True)
class Layout:
    """How a data set is cut: the field (float32, 2-D) or the cube (uint16, 3-D), its chunks,
    and the shards holding them (None: every chunk is a value of its own)."""

    cube: bool
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None = None


def size_label(nbytes: int) -> str:
    return f"{nbytes >> 20}MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KiB"


@dataclass
class Context:
    config: Config
    root: Path
    kinds: list[StoreKind]
    results: Results = field(default_factory=Results)
    prepared: set[tuple[str, str]] = field(default_factory=set)  # (store, data set) written
    page_cache: PageCache = field(default_factory=PageCache)

    @functools.cached_property
    def field(self) -> np.ndarray:
        return synthetic_field(self.config.size)

    @functools.cached_property
    def cube(self) -> np.ndarray:
        return synthetic_cube(self.config.cube)

    def data(self, name: str) -> np.ndarray:
        return self.cube if self.config.layouts()[name].cube else self.field

    def written(self, kind: StoreKind, label: str, fill: Callable[[Any], None]) -> Path:
        """The path of the data set `label` of `kind`, written by `fill(store)` the first time
        it is asked for (later repetitions read the same one)."""
        path = kind.path(self.root, label)
        if (kind.name, label) not in self.prepared:
            remove(path)
            store = kind.make(path, False)
            try:
                fill(store)
            finally:
                close(store)
            self.prepared.add((kind.name, label))
        return path


CODECS = ("raw", "zstd", "blosc")


def create_array(
    store: Any,
    data: np.ndarray,
    chunks: int | tuple[int, ...],
    compressed: bool | str,
    shards: int | tuple[int, ...] | None = None,
) -> zarr.Array[Any]:
    """A new array for `data`; `compressed` is True (zstd), False (raw) or a name of CODECS
    (blosc: zstd level 1 with bit shuffling)."""
    ndim = data.ndim
    codec = compressed if isinstance(compressed, str) else ("zstd" if compressed else "raw")
    compressors: Any = {
        "raw": None,
        "zstd": zarr.codecs.ZstdCodec(level=1),
        "blosc": zarr.codecs.BloscCodec(cname="zstd", clevel=1, shuffle="bitshuffle"),
    }[codec]
    return zarr.create_array(
        store,
        shape=data.shape,
        chunks=(chunks,) * ndim if isinstance(chunks, int) else chunks,
        shards=(shards,) * ndim if isinstance(shards, int) else shards,
        dtype=data.dtype,
        compressors=compressors,
        fill_value=0,
    )
