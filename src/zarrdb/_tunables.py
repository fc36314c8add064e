"""The writer's measured constants, in one place: the store passes them to the engine's writer
(`zarrdb._core.Writer`), whose arguments have no defaults of their own, and to the bursts of
event-loop writes (_completions.py). Each says which benchmark in benchmarks/ chose it; a
benchmark varies them by setting this module's attributes (read when a store opens its file).
"""

from __future__ import annotations

from typing import Any

# One group commit takes at most this many bytes (the rest waits for the next): bounds a
# transaction's size and the pages SQLite keeps for it (benchmarks/tunables.py --only commit:
# 8 / 64 / 256 MiB).
GROUP_COMMIT_MAX_BYTES = 64 * 1024 * 1024
# Submitters wait while this many bytes are queued: the values are the callers' own buffers
# (not copied), so this bounds the memory pinned by writes that have not been committed yet.
# A write that joins an open transaction is not counted against the writes that transaction
# deferred until its end (room only its end makes): at most twice this while one is open
# (benchmarks/peak_memory.py checks that ingest's private memory stays bounded with it).
QUEUE_MAX_BYTES = 128 * 1024 * 1024
# Values at least this long are written in place through the blob API after inserting a
# zero-filled value of their length; shorter ones are bound to the INSERT. SQLite copies a bound
# value into a record buffer of its own first (for a 32 MiB value a fresh 32 MiB allocation);
# 32 MiB values wrote 2.2x faster, 1 MiB 1.3x, 64 KiB the same (benchmarks/tunables.py).
BLOB_WRITE_MIN = 128 * 1024
# Batches larger than this spill their pages as SQLite does by default: holding the pages of a
# value of gigabytes until the commit would double the memory it takes (its bytes, held by the
# caller, and its pages) (benchmarks/peak_memory.py).
HOLD_SPILL_MAX = 512 * 1024 * 1024
# Writes from an event loop are committed once the loop has queued all it has in that turn
# (zarr gathers a chunk write from every task it runs at once): the writer applies them as they
# arrive and commits when the loop says it is done, or at the latest this long (seconds) after
# the commit's first write. One commit then carries the whole burst, which costs far less per
# write than a commit each (with 64 KiB pages a commit writes at least two 64 KiB pages)
# (benchmarks/tunables.py --only commit: 0.5 / 2 / 8 ms).
GROUP_COMMIT_MAX_AGE = 2e-3
# Writes from an event loop wake the writer thread only once this many bytes of them are queued,
# or when the loop's turn ends (its flush()): a few small writes cost one wake-up instead of one
# each, and large ones start at once (0: every write wakes it) (benchmarks/large_values.py
# --only gathered).
WAKE_WRITER_BYTES = 64 * 1024
# Small writes from an event loop in one turn of it (zarr's gathered chunk writes, one task per
# chunk) go to the writer together, as one submission: one queue entry, one completion and one
# lock round instead of one each. A write of a value larger than BURST_VALUE_MAX, or another kind
# of write, or one inside an explicit transaction, is queued at once on its own (after the turn's
# burst so far and the loop's backlog, which keeps their order). A burst is queued once it holds
# BURST_MAX_BYTES, and what is left when the turn ends: the writer applies the first while the
# loop still runs the turn, and commits them all after the turn (100 sets of 1 KiB: 9.0 against
# 9.7 us each with the whole turn in one submission, benchmarks/large_values.py --only gathered).
BURST_VALUE_MAX = 64 * 1024
BURST_MAX_BYTES = 64 * 1024
# In WAL mode a checkpointer thread with its own connection copies the write-ahead log into the
# file beside ingest, once the log holds this many pages (SQLite's own automatic checkpoint runs
# inside a commit, every 1000 pages); a commit waits for it only when the log exceeds the limit
# (benchmarks/tunables.py --only commit: checkpoints of 256 / 1024 pages).
CHECKPOINT_PAGES = 256
WAL_LIMIT_PAGES = 1024
# Journal mode "auto" (the default) opens the file with a rollback journal, in which pages
# appended to the file are written once: bulk loads of large chunks and large explicit
# transactions write about half as much as in WAL mode, where every page goes to the log first
# and is copied into the file by a checkpoint. A rollback journal syncs twice at every commit,
# though, which a stream of small commits (zarr writing small chunks one cohort at a time) pays
# dearly for; after this many commits in a row of less than AUTO_SMALL_COMMIT bytes each, the
# writer switches the file to WAL mode for good ("Rollback journal or WAL" in
# docs/guide/writes.md; benchmarks/large_values.py --only ingest, with and without --wal).
AUTO_WAL_AFTER = 8
AUTO_SMALL_COMMIT = 512 * 1024
# After deletes, the writer gives free pages back to the file system while it has nothing else
# to write, this many pages per step (each step its own short transaction, so a write that
# arrives meanwhile waits for one step at most), until fewer than VACUUM_MIN_PAGES are free
# (chosen for the bound on a write's wait, not measured for speed; benchmarks/tunables.py
# --only deep measures what the incremental vacuum's pointer map costs reads).
VACUUM_STEP_PAGES = 256
VACUUM_MIN_PAGES = 16
# Group commits update the modified_at record at most this often (seconds); closing the store
# writes the final time if a later commit left it out; explicit transactions always write it
# (benchmarks/tunables.py --only commit runs with it; no benchmark varies it yet).
MODIFIED_AT_INTERVAL = 0.5


def writer_options() -> dict[str, Any]:
    """The engine writer's tunables, as its keyword arguments (read now: a benchmark or a test
    may have changed them)."""
    return {
        "batch_bytes": GROUP_COMMIT_MAX_BYTES,
        "queue_bytes": QUEUE_MAX_BYTES,
        "blob_min": BLOB_WRITE_MIN,
        "hold_spill_max": HOLD_SPILL_MAX,
        "touch_every": MODIFIED_AT_INTERVAL,
        "max_age": GROUP_COMMIT_MAX_AGE,
        "checkpoint_pages": CHECKPOINT_PAGES,
        "wal_limit_pages": WAL_LIMIT_PAGES,
        "small_bytes": AUTO_SMALL_COMMIT,
        "vacuum_pages": VACUUM_STEP_PAGES,
        "vacuum_min": VACUUM_MIN_PAGES,
    }
