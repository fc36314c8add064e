"""What a copy or an upload does, decided before anything is written (`Plan`), the listing it
works through, the batches it reads in, checking the copy against its source (`verify`) and the
progress bar: shared by `zarrdb copy` and `zarrdb publish`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from zarrdb import _tunables
from zarrdb.cli import hierarchy, stores


@dataclass
class Plan:
    """What a copy does, decided before anything is written."""

    source: stores.Location
    dest: stores.Location
    src_path: str
    dst_path: str
    listing: list[tuple[str, int]]  # (key, size) in the source, metadata documents last
    temporary: str | None = None  # a new local store is built here, then renamed into place
    clear_first: bool = False  # replace a sub-tree of an existing store in place

    @property
    def src_prefix(self) -> str:
        return hierarchy.key_prefix(self.src_path)

    @property
    def dst_prefix(self) -> str:
        return hierarchy.key_prefix(self.dst_path)

    def dest_key(self, key: str) -> str:
        return self.dst_prefix + key[len(self.src_prefix) :]

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.listing)


async def listing(
    src: Any, source: stores.Location, path: str, sizes: bool
) -> list[tuple[str, int]]:
    """(key, size) of every key below `path`, metadata documents last (a reader of a partial
    copy sees no node whose chunks are still missing); sizes are 0 unless `sizes`."""
    prefix = hierarchy.key_prefix(path)
    if sizes:
        listing = await stores.key_sizes(src, source, prefix)
    else:
        listing = [(key, 0) async for key in src.list_prefix(prefix)]
    listing.sort(key=lambda item: (item[0].rpartition("/")[2] in hierarchy.METADATA_NAMES, item[0]))
    return listing


async def verify(src: Any, dst: Any, plan: Plan, batch_bytes: int, progress: Progress) -> list[str]:
    """Lines for every difference between the copy and the source."""
    from zarr.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    task = progress.task("verify", len(plan.listing), plan.total_bytes)
    expected = {plan.dest_key(key) for key, _ in plan.listing}
    actual = {key async for key in dst.list_prefix(plan.dst_prefix)}
    out = [f"key {k!r}: in the destination only" for k in sorted(actual - expected)]
    for batch in batches(plan.listing, max(1, batch_bytes // 2)):
        keys = [k for k, _ in batch]
        theirs = await dst.get_partial_values(proto, [(plan.dest_key(k), None) for k in keys])
        ours = await src.get_partial_values(proto, [(k, None) for k in keys])
        for key, a, b in zip(keys, ours, theirs):
            if b is None:
                out.append(f"key {key!r}: missing in the destination")
            elif a is None or a.to_bytes() != b.to_bytes():
                out.append(f"key {key!r}: the value differs")
        progress.advance(task, len(keys), sum(size for _, size in batch))
    return out


def batches(listing: Sequence[tuple[str, int]], limit: int) -> Iterator[list[tuple[str, int]]]:
    """Runs of `listing` of at most `limit` bytes and _tunables.CLI_BATCH_KEYS keys (a larger value alone)."""
    batch: list[tuple[str, int]] = []
    total = 0
    for key, size in listing:
        if batch and (total + size > limit or len(batch) >= _tunables.CLI_BATCH_KEYS):
            yield batch
            batch, total = [], 0
        batch.append((key, size))
        total += size
    if batch:
        yield batch


class Progress:
    """A rich progress bar of keys, bytes and throughput on stderr, or nothing."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None

    def __enter__(self) -> Progress:
        if self.enabled and importlib.util.find_spec("rich") is None:
            print(
                "zarrdb: warning: no progress bar: it needs rich (pip install rich)",
                file=sys.stderr,
            )
            self.enabled = False
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[keys]:,}/{task.fields[total_keys]:,} keys"),
                DownloadColumn(binary_units=True),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def task(self, description: str, total_keys: int, total_bytes: int) -> Any:
        if self.bar is None:
            return None
        return self.bar.add_task(description, total=total_bytes, keys=0, total_keys=total_keys)

    def advance(self, task: Any, keys: int, nbytes: int) -> None:
        if self.bar is not None and task is not None:
            done = self.bar.tasks[task].fields["keys"] + keys
            self.bar.update(task, advance=nbytes, keys=done)
