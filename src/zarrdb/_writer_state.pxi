# The writer's state, shared by its C threads and its Python class (Writer, _writer.pxi): the
# structs, and beside each field the thread that owns it or the lock that guards it. Included
# into _core.pyx after _writer_ops.pxi (whose WOp a submission holds) and before the writer's
# other rooms (see the top of _writer.pxi).

# Result codes of our own (SQLite's are all below 1 << 16 with extended codes).
cdef enum:
    W_ERR_CLOSED = -101  # the writer closed before the operation could run
    W_ERR_NO_TRANSACTION = -102  # the explicit transaction was rolled back by an earlier error
    W_ERR_NOMEM = -103

cdef enum:
    SUB_QUEUED = 0
    SUB_RUNNING = 1
    SUB_DONE = 2

# Threads and locks. Three kinds of thread touch the state below: the writer thread (one per
# Writer, never holding the GIL), the checkpointer thread (one per Writer in WAL mode, never
# holding the GIL), and Python threads (submitters, waiters, event loops, the caller holding the
# connection, close()). One mutex, WState.mu, guards what they share. The order is fixed: the
# GIL first, then mu, and mu is only ever taken without the GIL (inside `with nogil`), so no
# thread waits for the GIL while it holds mu; the C threads never take the GIL at all (the pause
# points, which do in test builds, are never reached under mu). Beside each field:
#   [mu]      read and written under WState.mu;
#   [init]    set by Writer.__init__ before the threads start, read-only afterwards;
#   [writer]  the writer thread's alone while it runs;
#   [holder]  whoever has the connection: the writer thread, or the Python caller holding it
#             (between Writer._hold and _release, when `held` is set), or Python once stopped;
#   [atomic]  read and written with zt_load_acquire / zt_store_release, without the mutex;
#   [ckpt]    the checkpointer thread's alone;
#   [GIL]     Python objects and fields used only with the GIL.
# Reads made without the lock on purpose say so where they are made (Writer.in_transaction,
# Writer.transaction, Writer.in_wal, Writer.touch_skipped, Writer.checkpoint_failures): each is
# a hint whose reader decides nothing by it that the lock does not decide again.

cdef struct WPort:
    int rfd  # [init of the Port] the descriptor an event loop watches (-1: none)
    int wfd  # [init of the Port] the writer thread writes a byte here (under mu)
    int signaled  # [mu] a byte is in the descriptor and not yet cleared by drain()
    int closed  # [mu] close() was called: wait() returns
    WSub* done_head  # [mu] finished submissions not yet drained, linked by done_next
    WSub* done_tail  # [mu]

# A submission belongs to its submitter until it is queued; then the queue's links are the
# mutex's, its results the writer thread's while it runs, and its submitter reads them once it
# has seen `state` == SUB_DONE (an acquire that pairs with the writer thread's release).
cdef struct WSub:
    WSub* next  # [mu] the queue's link
    WSub* done_next  # [mu] its port's finished list's link
    WOp* ops  # [init of the submission] read-only once queued
    Py_ssize_t nops  # [init of the submission]
    int64_t nbytes  # [init of the submission]
    int64_t txn  # [mu] the explicit transaction it joined (0: none); set when it is queued
    int64_t seq  # [mu] set when it is queued
    int64_t queued_at  # [mu] monotonic microseconds
    bint hinted  # [init of the submission] its submitter calls flush() once all is queued
    int state  # [atomic] SUB_QUEUED -> SUB_RUNNING (under mu) -> SUB_DONE (release, last)
    int rc  # [writer] then the submitter's once DONE
    int xrc  # [writer] as rc
    Py_ssize_t failed  # [writer] as rc: the failing operation (-1: none)
    char* errmsg  # [writer] as rc; freed with the submission
    int64_t changes  # [writer] as rc: rows written or deleted
    WPort* port  # [init of the submission]; set NULL under mu if it joins a transaction

# The writer's subsystems, each a struct of its own inside WState (their functions are in
# _writer_checkpoint.pxi and _writer_upkeep.pxi).

# Large batches: a batch of at least min_bytes is written with SQLite's spilling of dirty pages
# held back to the cache's pages (cache_pages) plus the batch's; held: the threshold set for
# the batch being written (0: SQLite's default).
cdef struct WSpill:
    int64_t min_bytes  # [init]
    int64_t max_bytes  # [init]
    int64_t cache_pages  # [init]
    int64_t page_size  # [init]
    int64_t held  # [writer]

# The modified_at stamp: written with a batch at most once every every_ms.
cdef struct WTouch:
    sqlite3_stmt* st  # [holder] (prepared by __init__; the holder ending a transaction runs it)
    int64_t every_ms  # [init]
    int64_t at  # [holder]
    int skipped  # [holder]; Writer.touch_skipped reads it unlocked (a report, after the fact)

# The checkpointer: a thread that copies the write-ahead log into the file beside ingest
# (SQLite would otherwise do it inside a commit, every 1000 pages), through a connection of
# its own opened for each checkpoint (an idle open connection would keep the file in WAL
# mode: SQLite cannot leave WAL mode while another connection has the log open).
# The checkpointer's own connection is a local of its thread ([ckpt]); what it shares with the
# writer thread's commit hook (_wal_hook, which runs under mu) is all [mu].
cdef struct WCheckpointer:
    char* path  # [init]
    int flags  # [init]
    int synchronous  # [init] PRAGMA synchronous of the checkpointer's connection (0-3)
    zt_thread thread  # [GIL] started by __init__, joined by _stop_checkpointer
    zt_cond cv  # the checkpointer waits here, under mu, to be wanted
    bint started  # [GIL]
    bint wanted  # [mu]
    bint running  # [mu]
    int64_t every  # [init] frames: ask for a checkpoint when the log has this many
    int64_t limit  # [init] frames: a commit waits for the checkpointer above this many
    int64_t wait_above  # [mu] limit, or more after the checkpointer could not keep up
    int64_t asked_at  # [mu] frames in the log when a checkpoint was last asked for
    int64_t seq  # [mu] checkpoints started
    int64_t done_seq  # [mu] the number of the last one finished (its results: log, ...)
    int64_t wal_frames  # [mu] frames in the log after the last commit
    int64_t backfilled  # [mu] frames the last checkpoint copied (of the log it saw)
    int64_t log  # [mu] frames in the log the last checkpoint saw
    int64_t n_checkpoints  # [mu]
    int64_t n_failed  # [mu]; with last_rc, log and backfilled read unlocked by
    int last_rc  # [mu]       Writer.checkpoint_failures (a report: zarrdb._log logs new ones)
    int64_t n_waits  # [mu]
    int64_t max_wal_frames  # [mu]

# Journal mode "auto": the file starts in a rollback journal (pages appended to the file are
# written once); after wal_after commits in a row under small_bytes each (a stream of small
# writes, where a rollback journal pays two syncs a commit), the writer switches the file to
# WAL mode.
cdef struct WAutoWal:
    # [writer] (written after the commit, without mu; stats() and Writer.in_wal read it: a
    # report, one batch late at most)
    bint in_wal
    BusyWait* busy_wait  # [init] the connection's busy handler, restored after the switch
    int64_t wal_after  # [init]
    int64_t small_bytes  # [init]
    int64_t small_streak  # [writer]
    int64_t n_switches  # [writer] (read by stats(): a count, as in_wal)
    sqlite3_stmt* st_to_wal  # [writer] (prepared by __init__)

# Space back to the file system: after deletes, while the writer has nothing else to do,
# "PRAGMA incremental_vacuum" in steps of a bounded number of pages (files with a pointer map
# only, which zarrdb's own files have).
cdef struct WVacuum:
    sqlite3_stmt* st_step  # [writer] (prepared by __init__)
    sqlite3_stmt* st_freelist  # [writer]
    bint freeing  # [writer] the batch being written deletes something
    bint freed  # [writer] a committed batch deleted something since the free list was emptied
    int64_t min_pages  # [init] a free list shorter than this is left alone
    int64_t n_steps  # [writer] (read by stats(): a count)


cdef struct WState:
    zt_mutex mu  # guards every [mu] field here and in the structs above
    zt_cond work  # the writer thread waits here (under mu) for work, or for a hold to end
    zt_cond done  # callers wait here (under mu): for their submission, for room, for the connection
    zt_thread thread  # [GIL] started by __init__, joined by _stop
    WSub* head  # [mu] the queue
    WSub* tail  # [mu]
    int64_t queued_bytes  # [mu] queued or being written
    int64_t queue_max  # [init]
    int64_t batch_max  # [init]
    # The explicit transaction: `txn` marks what submissions queued now join (0: none; set
    # when begin() asks for the connection, cleared when end() does), `txn_open` says the
    # connection is inside it (BEGIN done, COMMIT or ROLLBACK not yet), `txn_level` is the
    # serial of the innermost open level, the one a write made in a level must expect (-1 while
    # a level opens or ends: no such write is queued then); the first error of a write that joined it waits for end() in `txn_rc` ...
    # All [mu]; txn_open is also read unlocked by Writer.in_transaction and
    # Writer.transaction, to choose a connection for a read: whether a write joins the
    # transaction is decided under mu (_enqueue), never by that read.
    int64_t txn  # [mu]
    bint txn_open  # [mu]
    bint txn_pending  # [mu] begin() of an outermost level holds or waits for the connection
    int64_t txn_level  # [mu]
    # [mu] ends of levels begun (a block ended) and not finished: no write made in a level is
    # queued then, and no level opens inside one (it would outlive the end's drain).
    int txn_ending
    # [mu]; _end_level reads these four unlocked while it holds the connection, drained:
    # no batch runs then that could record an error (it clears them under mu)
    int txn_rc
    int txn_xrc
    char* txn_errmsg
    char* txn_errkey
    bint closing  # [mu] close() started: holds are refused
    int64_t next_seq  # [mu]
    int64_t done_seq  # [mu]
    int64_t hold_limit  # [mu] >= 0: take no submission with a later sequence number
    int hold_waiters  # [mu]
    int busy  # [mu] the writer thread is writing a batch (or a vacuum step) outside mu
    int held  # [mu] a Python caller holds the connection
    int stop  # [mu]
    # [atomic] Set by a caller whose wait a signal interrupted: the statement the thread
    # runs stops (SQLITE_INTERRUPT) at the progress handler's next look; cleared once the
    # batch is done.
    int interrupt
    # The batch being written: [writer], except that _take and _finish_batch change batch_n,
    # batch_bytes and batch_last_seq under mu, where _drain_target reads them; the writer
    # thread's own reads of them between those are unlocked (no other thread writes them).
    WSub** batch
    Py_ssize_t batch_n
    Py_ssize_t batch_cap
    int64_t batch_bytes
    int64_t batch_last_seq
    bint batch_hinted  # every submission in the batch is hinted
    # group commit of hinted submissions: the batch stays open (its writes applied as they
    # come) until the submitters' flush() covers it, at most max_age_us after it began
    int64_t flush_seq  # [mu]
    # [mu] bytes of hinted submissions queued since the thread was last woken: the submitter
    # wakes it only once they reach signal_bytes (a burst of small writes is taken whole when
    # the loop flushes, with one wake-up instead of one per write; large ones start at once)
    int64_t unsignaled_bytes
    int64_t signal_bytes  # [init]
    int64_t max_age_us  # [init]
    # the connection and what the thread runs on it: [holder]
    sqlite3* db
    sqlite3_stmt** st  # the Database's prepared statements, by Stmt
    int64_t blob_min  # [init]
    WSpill spill
    WTouch touch
    # statistics: [mu], except n_retries and n_lingered, counted by the writer thread without
    # it (stats() reads them under mu: a count may be one behind)
    int64_t n_batches
    int64_t n_subs
    int64_t n_retries
    int64_t max_batch_subs
    int64_t max_queued_bytes
    int64_t n_lingered
    WCheckpointer ck
    WAutoWal autowal
    WVacuum vac
