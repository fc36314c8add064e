"""zarrdb's measured constants, in one place: the writer's (passed to the engine's writer,
`zarrdb._core.Writer`, whose arguments have no defaults of their own, and to the bursts of
event-loop writes, _completions.py), the reads', a new file's and its connections', remote
files', copies' and uploads', and the engine's. Each says which benchmark in benchmarks/ chose
it, or that none did. A benchmark varies them by setting this module's attributes: its users
read them here when they use them (a store when it opens its file, a read when it runs), except
where a comment says a value is read once (the defaults of a public signature, which show the
value to its users; the engine's, at import).
"""

from __future__ import annotations

from typing import Any

# One group commit takes at most this many bytes (the rest waits for the next): bounds a
# transaction's size and the pages SQLite keeps for it (benchmarks/tunables.py --only commit:
# 8 / 64 / 256 MiB).
GROUP_COMMIT_MAX_BYTES = 64 * 1024 * 1024
# Submitters wait while this many bytes are queued: the values are the callers' own buffers
# (not copied), so this bounds the memory pinned by writes that have not been committed yet.
# (benchmarks/peak_memory.py checks that ingest's private memory stays bounded with it.)
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
# Closing leaves the file in DELETE mode, a switch that needs the file to itself. Two processes
# closing at once each found the other still open, each left the switch to the other, and the
# file stayed in WAL mode (the schedule explorer's programs/wal_left_after_exit.json); and a
# connection opening during another's switch can leave an empty log beside it. A close that
# found another connection open, or a log beside the file, tries again on a fresh connection
# once its own is closed, after each of these pauses (seconds, each drawn between it and twice
# it, so that two such closers part), and leaves it to the other connection after the last
# (_file_setup.leave_one_file). A close beside a store that stays open pays them all, about
# 33 ms, against 2 ms alone (tests/reliability/test_closing_together.py). With two pauses
# (0, 0.004: 9 ms) the explorer's program still failed 2 runs in 400; with these, none.
LAST_OUT_PAUSES = (0.0, 0.004, 0.016)
# Group commits update the modified_at record at most this often (seconds); closing the store
# writes the final time if a later commit left it out; explicit transactions always write it
# (benchmarks/tunables.py --only commit runs with it; no benchmark varies it yet).
MODIFIED_AT_INTERVAL = 0.5


# --- reads (_reading.py) ---------------------------------------------------------------------

# A read of at most this many bytes runs on the event loop's thread; a longer one is handed to
# a worker thread, so the loop is not stalled and the copies of the values zarr gathers run on
# several cores at once. One call alone is faster inline at every size, but zarr reading a
# whole array of 1 MiB chunks is faster through threads, and of 256 KiB chunks (64 KiB in 1-D)
# faster inline (benchmarks/tunables.py --only inline). Whole values only: byte ranges below.
INLINE_READ_MAX = 512 * 1024
# Byte ranges come from partial reads (a window out of a shard: the index and a few inner
# chunks), one or two at a time, where the thread hop costs more than the copy: a range of at
# most this many bytes is read inline (no benchmark varies it).
INLINE_RANGE_MAX = 1024 * 1024
# A batch of at most this many ranges is read inline; more go to a worker thread (no benchmark
# varies it).
INLINE_BATCH_MAX = 4

# --- a new file and its connections (_file_setup.py, store.py) --------------------------------

# New files get 64 KiB pages: a large value (a shard) is a chain of 16 times fewer overflow
# pages, so a byte range deep inside it is reached quickly and partial reads stay flat as shards
# grow from 1 to 16 MiB; large values also write faster (benchmarks/tunables.py --only page,
# deep).
DEFAULT_PAGE_SIZE = 65536
# New files keep a pointer map (SQLite's incremental auto-vacuum, which also lets deletes give
# free pages back): with it SQLite finds the next overflow page of a value without reading the
# current one, so a byte range near the end of a shard costs a few lookups in one hot page
# instead of touching every page of the chain. Random windows out of 4 and 16 MiB shards
# measured 5% and 8% faster; ingest of small chunks about 2% slower (benchmarks/tunables.py
# --only deep).
AUTO_VACUUM = "incremental"
# Page cache per connection, KiB (SQLite's default of 2 MiB holds only 31 pages of 64 KiB;
# reads mostly go through mmap, so more buys little: benchmarks/tunables.py --only cache).
DEFAULT_CACHE_KIB = 16384
# Read connections map this much of the file into memory: a value is copied straight from the
# OS page cache, and a byte range deep in a large value costs no page reads to reach
# (benchmarks/tunables.py --only cache: mmap_size 0 against 256 MiB).
DEFAULT_MMAP_BYTES = 256 * 1024 * 1024

# --- remote files (_remote_location.BlockCache, remote.py, the engine's RemoteFile) -----------

# The defaults of a remote file's block cache (zarrdb.remote.BlockCache, whose fields say what
# each is; read once, when the dataclass is made). benchmarks/remote.py measures reads with
# them (its --block-cache varies any field); no run of it chose these over others yet, but
# min_request: at an object store's latency a request of a few MiB takes hardly longer than
# one of a few KiB.
REMOTE_CACHE_BYTES = 64 * 1024 * 1024
REMOTE_BLOCK_BYTES = 1024 * 1024
REMOTE_READAHEAD_BYTES = 16 * 1024 * 1024
REMOTE_FIRST_READ_BYTES = 1024 * 1024
REMOTE_MIN_REQUEST_BYTES = 4 * 1024 * 1024
REMOTE_MAX_REQUESTS = 16
# The remote files a process keeps open for stores opened again on the same version (their
# block caches shared): a bound on memory, not measured for speed (no benchmark varies it).
REMOTE_SHARED_FILES = 4
# zarrdb.remote.download fetches a file in pieces of this many bytes (its chunk_size default,
# read once; no benchmark varies it).
DOWNLOAD_PIECE_BYTES = 16 * 1024 * 1024

# --- copies and uploads (copying.py, _copy_engine.py, _upload.py, cli/) ------------------------

# zarrdb.copy reads and writes batches of at most this many bytes (copying.DEFAULT_BATCH_BYTES,
# read once as its default argument) and COPY_BATCH_KEYS keys: with tiny values the per-key cost
# (a Buffer, a task) is what fills memory and the event loop, not the bytes
# (benchmarks/copy_stores.py measures the copy with them; none varies them).
COPY_BATCH_BYTES = 16 * 1024 * 1024
COPY_BATCH_KEYS = 4096
# Concurrent size requests while listing a store that reports no sizes in its listing (no
# benchmark varies it).
COPY_SIZE_REQUESTS = 256
# A directory's files are read and written in this many worker threads per batch, each taking
# a run of the batch: a thread hop per small file would cost more than the file
# (benchmarks/copy_stores.py, directory to directory, 4,096 files of 16 KiB).
COPY_FILE_THREADS = 4
# The command line's copy takes batches of this many bytes (zarrdb copy --batch-bytes), and its
# publish and verify steps at most CLI_BATCH_KEYS keys a batch (no benchmark varies them).
CLI_COPY_BATCH_BYTES = 64 * 1024 * 1024
CLI_BATCH_KEYS = 10_000
# zarrdb.remote.upload sends parts of at least this many bytes (object storage takes 5 MiB at
# least, the last part excepted), this many at once, each held in memory while it is sent (no
# benchmark varies them).
UPLOAD_PART_MIN_BYTES = 8 * 1024 * 1024
UPLOAD_CONCURRENCY = 4

# --- the engine (_core.pyx; read once, when it is imported) -----------------------------------

# Values at least this long are read with the blob API (no intermediate copy inside SQLite;
# no benchmark varies it).
BLOB_READ_MIN = 65536
# A long statement run by the main thread lets Python's signal handlers run every so many
# SQLite steps (Database._watch, and the writer's progress handler); each look takes the GIL
# (about a microsecond). At 100,000 a signal is seen within milliseconds, and counting 100,000
# keys takes no measurably longer (at 1,000 it took 12% longer; measured by hand, no benchmark
# varies it).
PROGRESS_STEPS = 100000
# The main thread waiting for the writer looks at Python's signals this often (milliseconds):
# Ctrl-C stops a long statement of the writer within about this long (not a speed setting).
SIGNAL_LOOK_MS = 100
# Pages a step of a whole backup (snapshot, Database.backup_to) copies before Ctrl-C and
# SIGTERM are looked at: 1,024 pages (64 MiB at 64 KiB a page) take a tenth of a second from a
# local disk, and a step costs little more than the pages it copies (measured by hand, no
# benchmark varies it).
BACKUP_STEP_PAGES = 1024

# --- waits: how long, not how fast (no benchmark varies them) ---------------------------------

# Seconds a connection waits for another process's lock before DatabaseLockedError: the
# default of every public `busy_timeout` (read once: the signatures show it) and the engine's.
BUSY_TIMEOUT = 5.0
# Closing waits this long (seconds) for a read still running in another thread to end before
# it interrupts it, and as long again for the interrupted read to return (_readers.py).
CLOSE_READ_GRACE = 5.0
# How long after a remote request's deadline zarrdb stops waiting for it, if the client has not
# ended it by then: the client's own error, which says more, normally comes first.
REMOTE_DEADLINE_GRACE = 2.0
# Seconds between looks at the count of interrupt_requests() while waiting for a request.
REMOTE_WAIT_STEP = 0.1
# SQLite steps between two looks at Python's signals in `zarrdb check`'s statements (Python's
# sqlite3 there, not the engine: each look is a call of a Python function, which runs the
# handlers at its start). A hundred times more often than the engine's PROGRESS_STEPS: the
# checker's statements are few and long (integrity_check), so its looks cost little in all
# (chosen by hand; no benchmark varies it).
CHECK_PROGRESS_STEPS = 1000


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
