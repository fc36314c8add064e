# The writer: one C thread per writable database that owns the write connection and never
# holds the GIL. Included into _core.pyx (one compiled unit with SQLite).
#
# A caller's writes (a "submission": one or more set/delete operations) are queued with the
# caller's buffers (no copy). The thread takes everything queued (up to a byte limit), writes
# it in one transaction and commits (group commit), then reports completion:
# - to an event loop through a completion port: a file descriptor the loop watches with
#   add_reader; its callback drains the port, settles the futures and releases the buffers;
# - to a synchronous caller through a condition variable it waits on with the GIL released.
# Explicit transactions belong to the Writer (the store object's session), not to a thread:
# while one is open, every submission joins it (written under a savepoint per batch). Its start
# is marked under the mutex the moment begin(), holding the connection, has taken SQLite's
# write lock (BEGIN IMMEDIATE): what was queued before is committed on its own (the part that
# came while begin() waited is deferred, and queued again when the transaction ends), what is
# queued after joins the transaction. Its end is marked when end() asks for the connection:
# what is queued after that is not the transaction's.
# Admission: a submitter waits while the queue holds queue_max bytes. What the transaction
# deferred stays counted for the writes outside it, but not for the writes that join it: only
# the transaction's end frees that room, and its block may be the one waiting (see _has_room).
# Python code that needs the connection itself (reads inside a transaction, maintenance) holds
# it through Writer.call_holding(): the thread finishes its batch and waits. (Writer.holding(),
# a context manager, is the tests' form, in test builds only: see call_holding for why zarrdb
# itself does not use one.)

from collections import deque as _deque
from zarrdb import _tunables

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
    WSub* next  # [mu] the queue's (or the deferred list's) link
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
    WSub* dhead  # [mu] queued before the open transaction began, written once it ends
    WSub* dtail  # [mu]
    int64_t queued_bytes  # [mu] queued, being written, or deferred
    int64_t deferred_bytes  # [mu] of those, deferred until the open transaction's end
    int64_t queue_max  # [init]
    int64_t batch_max  # [init]
    # The explicit transaction: `txn` marks what submissions queued now join (0: none; set
    # when begin() asks for the connection, cleared when end() does), `txn_open` says the
    # connection is inside it (BEGIN done, COMMIT or ROLLBACK not yet), `txn_depth` counts
    # its levels; the first error of a write that joined it waits for end() in `txn_rc` ...
    # All [mu]; txn_open is also read unlocked by Writer.in_transaction and
    # Writer.transaction, to choose a connection for a read: whether a write joins the
    # transaction is decided under mu (_enqueue), never by that read.
    int64_t txn  # [mu]
    bint txn_open  # [mu]
    bint txn_pending  # [mu] begin() of an outermost level holds or waits for the connection
    int64_t txn_depth  # [mu]
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


cdef void _fail(WState* w, WSub* s, int rc, Py_ssize_t failed) noexcept nogil:
    """Record `rc` (and SQLite's message, which must still be the connection's) on `s`."""
    s.rc = rc
    s.failed = failed
    if rc > 0:
        s.xrc = sqlite3_extended_errcode(w.db)
        if s.errmsg != NULL:
            sqlite3_free(s.errmsg)
        s.errmsg = sqlite3_mprintf("%s", sqlite3_errmsg(w.db))
    else:
        s.xrc = rc


cdef void _touch(WState* w) noexcept nogil:
    """Write modified_at inside the batch's transaction when it is due; a failure here is not
    the callers' (their data is what the transaction is for)."""
    cdef int64_t now
    if w.touch.st == NULL:
        return
    now = zt_monotonic_ms()
    if w.touch.at >= 0 and now - w.touch.at < w.touch.every_ms:
        w.touch.skipped = 1
        return
    if _step_done(w.touch.st) == SQLITE_OK:
        w.touch.at = now
        w.touch.skipped = 0


cdef int _writer_progress(void* arg) noexcept nogil:
    """The write connection's progress handler: non-zero (stop with SQLITE_INTERRUPT) once a
    caller asked for it (Submission.wait on Ctrl-C or SIGTERM). An atomic load, no GIL."""
    return zt_load_acquire(&(<WState*>arg).interrupt)


cdef int _begin(WState* w, bint joined) noexcept nogil:
    """Open the batch's transaction (or, inside the open explicit one, its savepoint)."""
    # (Again for each batch: Python code holding the connection between batches may have
    # replaced the handler with its own, Database._watch.)
    sqlite3_progress_handler(w.db, _PROGRESS_STEPS, _writer_progress, <void*>w)
    if joined:
        if sqlite3_get_autocommit(w.db):
            # SQLite rolled the explicit transaction back after an earlier error: writing now
            # would commit each batch on its own.
            return W_ERR_NO_TRANSACTION
        return _step_done(w.st[<int>S_SAVEPOINT])
    return _step_done(w.st[<int>S_BEGIN_WRITE])


cdef void _hold_spill(WState* w) noexcept nogil:
    """Before writing a batch larger than about half the page cache: SQLite spills dirty pages
    to the file once the cache is full, and in a rollback journal every spill after new journal
    records syncs the journal first (two syncs at synchronous=FULL), several times in a commit;
    a value larger than the cache spilled its own zero-filled pages before the blob write
    filled them (which then read them back and wrote them again: 2 bytes written and 1 read
    per byte of value). Held back to the cache's pages plus the batch's, the batch's pages are
    written once, by the commit, with one sync of the journal; older dirty pages (an explicit
    transaction's earlier batches, final) still spill, so the cache grows by the batch at
    most, and gives the pages back after the commit. (The pragma takes effect as it is
    compiled, inside a transaction too; its ON/OFF form would wait for the next one.)"""
    cdef char sql[64]
    cdef int64_t pages
    if w.batch_bytes < w.spill.min_bytes or w.batch_bytes > w.spill.max_bytes:
        return
    pages = w.spill.cache_pages + w.batch_bytes // (w.spill.page_size - 4) + 16 + w.batch_n
    if pages <= w.spill.held:
        return
    snprintf(sql, sizeof(sql), "PRAGMA cache_spill = %lld", <long long>pages)
    if sqlite3_exec(w.db, sql, NULL, NULL, NULL) == SQLITE_OK:  # else: spilled as usual
        w.spill.held = pages


cdef void _release_spill(WState* w) noexcept nogil:
    """After the batch's commit: SQLite's default threshold again (1: spill once the cache is
    full). If that fails, the threshold stays marked held and is reset after the next batch:
    until then the cache may hold one more batch's pages."""
    if not w.spill.held:
        return
    if sqlite3_exec(w.db, "PRAGMA cache_spill = 1", NULL, NULL, NULL) == SQLITE_OK:
        w.spill.held = 0


cdef int _apply(WState* w, WSub** subs, Py_ssize_t start, Py_ssize_t stop,
                Py_ssize_t* bad_sub, Py_ssize_t* bad_op) noexcept nogil:
    """Run the operations of subs[start:stop] inside the open transaction."""
    cdef int rc = SQLITE_OK
    cdef Py_ssize_t i, j
    cdef int64_t changes
    _hold_spill(w)
    for i in range(start, stop):
        changes = 0
        for j in range(subs[i].nops):
            rc = _apply_op(w.db, w.st, w.blob_min, &subs[i].ops[j], &changes, &w.vac.freeing)
            if rc != SQLITE_OK:
                bad_sub[0] = i
                bad_op[0] = j
                break
        subs[i].changes = changes
        if rc != SQLITE_OK:
            return rc
    return SQLITE_OK


cdef int _end(WState* w, WSub** subs, Py_ssize_t n, bint joined, int rc,
              Py_ssize_t bad_sub, Py_ssize_t bad_op) noexcept nogil:
    """Commit (or release) the batch if `rc` is OK so far; on any failure roll it back and
    record the error on every submission (the failing one with its failing operation)."""
    cdef Py_ssize_t i
    if rc == SQLITE_OK:
        if joined:
            rc = _step_done(w.st[<int>S_RELEASE])
        else:
            _touch(w)
            rc = _step_done(w.st[<int>S_COMMIT])
    if rc == SQLITE_OK:
        for i in range(n):
            subs[i].rc = SQLITE_OK
        return SQLITE_OK
    for i in range(n):
        _fail(w, subs[i], rc, bad_op if i == bad_sub else -1)
    # Undo what the batch did (SQLite may have rolled back already). The rollback's own
    # failure is not recorded: the callers get the batch's error, and a connection left in
    # the transaction fails the next batch's BEGIN, which reports it.
    if joined:
        if not sqlite3_get_autocommit(w.db):
            _step_done(w.st[<int>S_ROLLBACK_TO])
            _step_done(w.st[<int>S_RELEASE])
    elif not sqlite3_get_autocommit(w.db):
        _step_done(w.st[<int>S_ROLLBACK])
    return rc


cdef int _run(WState* w, WSub** subs, Py_ssize_t n, bint joined) noexcept nogil:
    """Write `subs` in one transaction (or one savepoint inside the open explicit one)."""
    cdef Py_ssize_t bad_sub = -1
    cdef Py_ssize_t bad_op = -1
    cdef int rc = _begin(w, joined)
    if rc == SQLITE_OK:
        rc = _apply(w, subs, 0, n, &bad_sub, &bad_op)
    return _end(w, subs, n, joined, rc, bad_sub, bad_op)


cdef void _retry_alone(WState* w, WSub** subs, Py_ssize_t n, bint joined, int rc) noexcept nogil:
    """After a failed batch: one caller's failing write must not fail the others, so each is
    written alone. A lock that did not clear in time would only be waited for again, once per
    caller: that error is everyone's."""
    cdef Py_ssize_t i
    if n == 1:
        return
    if (rc & 0xFF) == SQLITE_BUSY or (rc & 0xFF) == SQLITE_LOCKED or rc == W_ERR_NO_TRANSACTION:
        return
    w.n_retries += 1
    for i in range(n):
        _run(w, &subs[i], 1, joined)


cdef void _record_transaction_error(WState* w, WSub* s) noexcept nogil:
    """Keep the first failure of a write that joined the explicit transaction for end(),
    which raises it (the submitter did not wait for it)."""
    cdef WOp* op
    if w.txn_rc != SQLITE_OK:
        return
    w.txn_rc = s.rc
    w.txn_xrc = s.xrc
    if s.errmsg != NULL:
        w.txn_errmsg = sqlite3_mprintf("%s", s.errmsg)
    op = &s.ops[s.failed if 0 <= s.failed < s.nops else 0]
    if op.key != NULL:
        w.txn_errkey = sqlite3_mprintf("%.*s", <int>op.nkey, op.key)


cdef void _clear_transaction_error(WState* w) noexcept nogil:
    w.txn_rc = w.txn_xrc = SQLITE_OK
    sqlite3_free(w.txn_errmsg)
    sqlite3_free(w.txn_errkey)
    w.txn_errmsg = w.txn_errkey = NULL


cdef void _complete(WSub* s) noexcept nogil:
    """Hand a finished submission to its port and mark it done (under the writer's mutex).
    DONE is published last, with release order: a waiter that sees it (the submission's
    state is read without the mutex) may free the submission at once."""
    _signal_port(s)
    zt_store_release(&s.state, SUB_DONE)


cdef void _signal_port(WSub* s) noexcept nogil:
    """Hand a finished submission to its port (under the writer's mutex)."""
    cdef WPort* p = s.port
    if p == NULL:
        return
    s.done_next = NULL
    if p.done_tail == NULL:
        p.done_head = s
    else:
        p.done_tail.done_next = s
    p.done_tail = s
    if not p.signaled:
        p.signaled = 1
        if p.wfd >= 0:
            zt_wake_signal(p.wfd)


cdef inline bint _can_take(WState* w) noexcept nogil:
    # A submission that joined the transaction is written only while the connection is in it,
    # and one that did not only while it is not (the marks order them so: see begin()/end()).
    return (w.head != NULL and not w.held and
            (w.stop or w.hold_limit < 0 or w.head.seq <= w.hold_limit) and
            (w.head.txn != 0) == w.txn_open)


cdef Py_ssize_t _take(WState* w) noexcept nogil:
    """Move queued submissions into the batch (under the mutex): everything that can be taken,
    up to batch_max bytes, at least one if the batch is empty. Returns how many it took; -1 if
    there is no memory for the batch array."""
    cdef Py_ssize_t taken = 0
    cdef WSub* s
    cdef WSub** grown
    while _can_take(w) and (w.batch_n == 0 or w.batch_bytes + w.head.nbytes <= w.batch_max):
        if w.batch_n == w.batch_cap:
            grown = <WSub**>realloc(w.batch, (w.batch_cap * 2 + 16) * sizeof(WSub*))
            if grown == NULL:
                return -1 if w.batch_n == 0 else taken
            w.batch = grown
            w.batch_cap = w.batch_cap * 2 + 16
        s = w.head
        w.head = s.next
        if w.head == NULL:
            w.tail = NULL
        s.next = NULL
        s.state = SUB_RUNNING
        w.batch[w.batch_n] = s
        w.batch_n += 1
        w.batch_bytes += s.nbytes
        w.batch_last_seq = s.seq
        if not s.hinted:
            w.batch_hinted = False
        taken += 1
    return taken


cdef inline bint _keep_lingering(WState* w, bint joined) noexcept nogil:
    return (not w.stop and not w.held and w.hold_waiters == 0 and w.txn_open == joined
            and w.batch_bytes < w.batch_max)


cdef void _finish_batch(WState* w) noexcept nogil:
    """Mark the batch's submissions done and hand them to their callers (under the mutex)."""
    cdef Py_ssize_t k
    cdef WSub* s
    w.n_batches += 1
    w.n_subs += w.batch_n
    if w.batch_n > w.max_batch_subs:
        w.max_batch_subs = w.batch_n
    for k in range(w.batch_n):
        s = w.batch[k]
        w.queued_bytes -= s.nbytes
        if s.seq > w.done_seq:
            w.done_seq = s.seq
        if s.txn != 0 and s.rc != SQLITE_OK:
            _record_transaction_error(w, s)
        _complete(s)
    w.batch_n = 0
    w.batch_bytes = 0
    w.batch_hinted = True
    zt_store_release(&w.interrupt, 0)
    zt_cond_broadcast(&w.done)


include "_writer_checkpoint.pxi"
include "_writer_upkeep.pxi"


cdef void _writer_main(void* arg) noexcept nogil:
    cdef WState* w = <WState*>arg
    cdef WSub* s
    cdef WSub* nxt
    cdef bint joined
    cdef int rc
    cdef Py_ssize_t applied, taken
    cdef Py_ssize_t bad_sub, bad_op
    cdef int64_t started, waited
    zt_mutex_lock(&w.mu)
    w.batch_hinted = True
    while True:
        while not _can_take(w) and not (w.stop and not w.held):
            if (w.vac.freed and not w.held and w.txn == 0 and not w.txn_open
                    and w.hold_waiters == 0 and not w.stop):
                # Nothing to write: give space back, one bounded step at a time.
                w.busy = 1
                zt_mutex_unlock(&w.mu)
                _vacuum_step(w)
                zt_mutex_lock(&w.mu)
                w.busy = 0
                zt_cond_broadcast(&w.done)
                continue
            zt_cond_wait(&w.work, &w.mu)
        if not _can_take(w):
            break  # stopping, and nothing is left that can be written
        if _take(w) < 0:  # no memory for the batch array: fail the first submission
            s = w.head
            w.head = s.next
            if w.head == NULL:
                w.tail = NULL
            s.next = NULL
            s.rc = s.xrc = W_ERR_NOMEM
            w.queued_bytes -= s.nbytes
            if s.seq > w.done_seq:
                w.done_seq = s.seq
            _complete(s)
            zt_cond_broadcast(&w.done)
            continue
        joined = w.txn_open
        started = zt_monotonic_us()
        w.busy = 1
        zt_mutex_unlock(&w.mu)
        zpp_point("writer.take")

        bad_sub = bad_op = -1
        applied = 0
        rc = _begin(w, joined)
        while rc == SQLITE_OK:
            rc = _apply(w, w.batch, applied, w.batch_n, &bad_sub, &bad_op)
            applied = w.batch_n
            if rc != SQLITE_OK:
                break
            # Hinted submissions come from event loops, which queue a burst of writes in one
            # turn (zarr's gathered chunk writes) and then say so with flush(): the batch stays
            # open until then, its writes applied as they arrive, so one commit carries the
            # whole burst. Anything else is committed at once (with whatever queued meanwhile).
            zt_mutex_lock(&w.mu)
            taken = 0
            while w.batch_hinted and _keep_lingering(w, joined):
                if _can_take(w):
                    taken = _take(w)
                    break
                if w.flush_seq >= w.batch_last_seq:
                    break
                waited = zt_monotonic_us() - started
                if waited >= w.max_age_us:
                    break
                zt_cond_wait_us(&w.work, &w.mu, w.max_age_us - waited)
            zt_mutex_unlock(&w.mu)
            if taken <= 0:
                break
            w.n_lingered += 1
        zpp_point("writer.commit")
        rc = _end(w, w.batch, w.batch_n, joined, rc, bad_sub, bad_op)
        zpp_point("writer.committed")
        if rc != SQLITE_OK:
            _retry_alone(w, w.batch, w.batch_n, joined, rc)
        _release_spill(w)
        if rc == SQLITE_OK:
            _after_commit(w, joined, w.batch_bytes)
        if w.vac.freeing and w.vac.st_step != NULL:
            w.vac.freed = True
        w.vac.freeing = False

        zt_mutex_lock(&w.mu)
        w.busy = 0
        _finish_batch(w)
    # Stopping: whatever is left could not be written (close() found an explicit transaction
    # open, and rolls it back): it fails.
    _defer_queued(w)
    s = w.dhead
    w.dhead = w.dtail = NULL
    w.deferred_bytes = 0
    while s != NULL:
        nxt = s.next
        s.rc = s.xrc = W_ERR_CLOSED
        w.queued_bytes -= s.nbytes
        if s.seq > w.done_seq:
            w.done_seq = s.seq
        _complete(s)
        s = nxt
    zt_cond_broadcast(&w.done)
    zt_mutex_unlock(&w.mu)


cdef int64_t _drain_target(WState* w) noexcept nogil:
    """The sequence number up to which everything queued is written once done_seq reaches it
    (under the mutex): the last submission queued, else the batch being written. Not the
    submissions deferred until the open transaction's end: a hold inside the transaction (a
    read of its block, its end) waiting for them would wait for itself."""
    if w.tail != NULL:
        return w.tail.seq
    if w.batch_n > 0 and w.batch_last_seq > w.done_seq:
        return w.batch_last_seq
    return w.done_seq


cdef void _defer_queued(WState* w) noexcept nogil:
    """Move everything queued to the deferred list (under the mutex; its bytes stay counted,
    as deferred_bytes too)."""
    cdef WSub* s = w.head
    if s == NULL:
        return
    while s != NULL:
        w.deferred_bytes += s.nbytes
        s = s.next
    if w.dtail == NULL:
        w.dhead = w.head
    else:
        w.dtail.next = w.head
    w.dtail = w.tail
    w.head = w.tail = NULL


cdef void _requeue_deferred(WState* w) noexcept nogil:
    """Queue what waited for the transaction's end again (under the mutex)."""
    cdef WSub* s = w.dhead
    cdef WSub* nxt
    w.dhead = w.dtail = NULL
    w.deferred_bytes = 0
    while s != NULL:
        nxt = s.next
        w.queued_bytes -= s.nbytes  # counted again by _enqueue_ready
        _enqueue_ready(w, s)
        s = nxt


cdef inline bint _has_room(WState* w, int64_t nbytes) noexcept nogil:
    """A submission of `nbytes` may be queued now (under the mutex). One that would join the
    open transaction is counted against what the writer can write before that transaction
    ends, not against the writes deferred until its end: waiting for those would wait for the
    transaction's end, which the block making this write has to reach first. (The memory
    pinned is then at most twice the bound: the deferred writes and the transaction's.)"""
    cdef int64_t counted = w.queued_bytes
    if w.txn != 0:
        counted -= w.deferred_bytes
    return counted <= 0 or counted + nbytes <= w.queue_max


cdef void _enqueue_ready(WState* w, WSub* s) noexcept nogil:
    s.next = NULL
    s.queued_at = zt_monotonic_us()
    w.next_seq += 1
    s.seq = w.next_seq
    w.queued_bytes += s.nbytes
    if w.queued_bytes > w.max_queued_bytes:
        w.max_queued_bytes = w.queued_bytes
    if w.tail == NULL:
        w.head = s
    else:
        w.tail.next = s
    w.tail = s


# Tokens of explicit transactions, unique in the process.
include "_writer_ports.pxi"
include "_writer_levels.pxi"


cdef int64_t _cache_bytes(Database db) except -1:
    """The size of the connection's page cache in bytes (PRAGMA cache_size: pages, or KiB when
    negative)."""
    cdef int64_t size = int(db.pragma("cache_size"))
    return -size * 1024 if size < 0 else size * int(db.pragma("page_size"))


@cython.no_gc_clear  # its thread uses the Database until __dealloc__ has stopped it
cdef class Writer:
    """The write connection of a Database, run by a C thread (see the top of _writer.pxi).

    The numbers (batch_bytes, queue_bytes, blob_min, hold_spill_max, touch_every, max_age,
    checkpoint_pages, wal_limit_pages, small_bytes, vacuum_pages, vacuum_min) are
    zarrdb._tunables' unless given; the switches (signal_bytes, checkpoint, wal_after,
    touch_sql) are off unless given.
    batch_bytes: most bytes one group commit takes; queue_bytes: submitters wait while more
    than this is queued; blob_min: values at least this long are written through the blob API;
    hold_spill_min: batches of at least this many bytes are written without SQLite spilling
    their pages before the commit (None: half the connection's page cache); hold_spill_max:
    batches larger than this spill as usual (holding their pages until the commit would double
    the memory a value of gigabytes takes: its bytes, held by the caller, and its pages); signal_bytes:
    submissions through a port (an event loop's, which calls flush() once per turn) wake the
    thread only once this many bytes of them are queued, or at the flush (0: each at once);
    touch_sql, touch_every: a statement a group commit runs at most every so many seconds (the
    file's modification time)."""

    # Python's side of the writer: every field here is used with the GIL only ([GIL]).
    cdef WState* w  # the threads' shared state (see the top of this file); freed by
    #                 __dealloc__ once both threads are joined
    cdef Database db  # its handle is the writer thread's while it runs ([holder] in WState)
    cdef readonly str path
    cdef readonly double busy_timeout
    cdef long pid  # the process that started the threads: a forked child touches nothing
    cdef bint started
    cdef bint _closed
    cdef dict _owners  # address of a queued WSub -> its Submission (keeps it alive)
    cdef object _joined  # submissions that joined the transaction without a waiter, in order
    # The open levels of the explicit transaction, outermost first (Level, _writer_levels.pxi);
    # changed only by the caller holding the connection.
    cdef list _stack

    def __cinit__(self):
        self.w = NULL
        self.started = False
        self._closed = False
        self._owners = {}
        self._joined = _deque()
        self._stack = []

    def __init__(self, Database db, *, hold_spill_min=None, touch_sql=None, signal_bytes=0,
                 checkpoint=False, synchronous=1, wal_after=0, **tunables):
        cdef WState* w
        cdef sqlite3_stmt* stmt = NULL
        cdef bytes sql
        cdef bytes path
        cdef int rc
        if db.db == NULL:
            raise _errors.ClosedError(f"the database {db.path!r} is closed")
        if db.readonly:
            raise _errors.ReadOnlyError(f"{db.path!r} is open read-only", code=SQLITE_READONLY,
                                        filename=db.path)
        # The measured numbers have one home, zarrdb._tunables; a caller may give its own.
        options = _tunables.writer_options()
        unknown = tunables.keys() - options.keys()
        if unknown:
            raise TypeError(f"Writer() got unexpected keyword arguments {sorted(unknown)}")
        options.update(tunables)
        batch_bytes = options["batch_bytes"]
        queue_bytes = options["queue_bytes"]
        blob_min = options["blob_min"]
        hold_spill_max = options["hold_spill_max"]
        touch_every = options["touch_every"]
        max_age = options["max_age"]
        checkpoint_pages = options["checkpoint_pages"]
        wal_limit_pages = options["wal_limit_pages"]
        small_bytes = options["small_bytes"]
        vacuum_pages = options["vacuum_pages"]
        vacuum_min = options["vacuum_min"]
        self.db = db
        self.path = db.path
        self.busy_timeout = db._busy_timeout
        self.pid = zarrdb_getpid()
        w = <WState*>calloc(1, sizeof(WState))
        if w == NULL:
            raise MemoryError()
        self.w = w
        zt_mutex_init(&w.mu)
        zt_cond_init(&w.work)
        zt_cond_init(&w.done)
        zt_cond_init(&w.ck.cv)
        w.queue_max = max(1, int(queue_bytes))
        w.batch_max = max(1, int(batch_bytes))
        w.blob_min = max(1, int(blob_min))
        w.spill.page_size = int(db.pragma("page_size"))
        w.spill.cache_pages = max(1, _cache_bytes(db) // w.spill.page_size)
        if hold_spill_min is None:
            # the cache takes 90% of its size in dirty pages before it spills
            hold_spill_min = _cache_bytes(db) // 2
        w.spill.min_bytes = max(1, int(hold_spill_min))
        w.spill.max_bytes = max(0, int(hold_spill_max))
        w.max_age_us = <int64_t>(float(max_age) * 1e6)
        w.signal_bytes = max(0, int(signal_bytes))
        w.hold_limit = -1
        w.touch.at = -1
        w.touch.every_ms = <int64_t>(float(touch_every) * 1000)
        w.db = db.db
        w.ck.synchronous = int(synchronous)
        w.ck.every = max(1, int(checkpoint_pages))
        w.ck.limit = max(w.ck.every, int(wal_limit_pages))
        w.ck.wait_above = w.ck.limit
        w.autowal.wal_after = int(wal_after)
        w.autowal.busy_wait = &db._busy
        w.autowal.small_bytes = int(small_bytes)
        w.autowal.in_wal = db.journal_mode() == "wal"
        vacuum_sql = None
        if int(db.pragma("auto_vacuum")) == 2:  # incremental: the file has a pointer map
            vacuum_sql = f"PRAGMA incremental_vacuum({max(1, int(vacuum_pages))})"
        w.vac.min_pages = max(1, int(vacuum_min))
        # The Database stays marked in use while the thread owns it: a call from Python
        # outside hold()/release() raises ConcurrentUseError instead of racing the thread.
        db._enter()
        try:
            db._prepare_writes()
            w.st = db.stmts
            for text, target in ((touch_sql, 0), ("PRAGMA journal_mode = WAL", 1),
                                 (vacuum_sql, 2), ("PRAGMA freelist_count", 3)):
                if text is None:
                    continue
                sql = text.encode("utf-8")
                rc = sqlite3_prepare_v3(db.db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, NULL)
                if rc != SQLITE_OK:
                    raise db._error(rc, f"cannot prepare {text!r}")
                if target == 0:
                    w.touch.st = stmt
                elif target == 1:
                    w.autowal.st_to_wal = stmt
                elif target == 2:
                    w.vac.st_step = stmt
                else:
                    w.vac.st_freelist = stmt
            if checkpoint:
                path = os.fsencode(db.path)
                w.ck.path = <char*>malloc(len(path) + 1)
                if w.ck.path == NULL:
                    raise MemoryError()
                memcpy(w.ck.path, <const char*>path, len(path) + 1)
                w.ck.flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
                sqlite3_wal_hook(db.db, _wal_hook, <void*>w)
                if zt_thread_start(&w.ck.thread, _checkpointer_main, <void*>w) != 0:
                    raise OSError("cannot start the checkpointer thread")
                w.ck.started = True
            if zt_thread_start(&w.thread, _writer_main, <void*>w) != 0:
                raise OSError("cannot start the writer thread")
        except BaseException:
            self._stop_checkpointer()
            self._finalize_statements()
            db._leave()
            raise
        self.started = True

    cdef void _stop_checkpointer(self) noexcept:
        cdef WState* w = self.w
        if w.ck.started:
            with nogil:
                zt_mutex_lock(&w.mu)
                w.stop = 1
                zt_cond_broadcast(&w.ck.cv)
                zt_mutex_unlock(&w.mu)
                zt_thread_join(w.ck.thread)
            w.ck.started = False
        if w.ck.path != NULL:
            sqlite3_wal_hook(self.db.db, NULL, NULL)
            free(w.ck.path)
            w.ck.path = NULL

    cdef void _finalize_statements(self) noexcept:
        cdef WState* w = self.w
        if w.touch.st != NULL:
            sqlite3_finalize(w.touch.st)
            w.touch.st = NULL
        if w.autowal.st_to_wal != NULL:
            sqlite3_finalize(w.autowal.st_to_wal)
            w.autowal.st_to_wal = NULL
        if w.vac.st_step != NULL:
            sqlite3_finalize(w.vac.st_step)
            w.vac.st_step = NULL
        if w.vac.st_freelist != NULL:
            sqlite3_finalize(w.vac.st_freelist)
            w.vac.st_freelist = NULL

    cdef int _check(self) except -1:
        if self._closed:
            raise _errors.ClosedError(f"the writer of {self.path!r} is closed")
        if self.pid != _current_pid:
            raise _errors.ForkedProcessError(
                f"the writer of {self.path!r} belongs to process {self.pid}; open the store "
                "again in this process"
            )
        return 0

    def submit(self, ops, *, Port port=None, bint block=True):
        """Queue `ops`, a list of (kind, key, value), as one submission: kind "set",
        "set_if_absent", "delete" or "delete_prefix" (value None for the deletes). While an
        explicit transaction is open the submission joins it (`Submission.joined`). When the
        queue is full, waits (GIL released), or with block=False returns None."""
        cdef Submission sub = self._prepare(list(ops), port)
        return sub if self._enqueue(sub, block) else None

    def prepare(self, ops, *, Port port=None, list bad=None):
        """The submission of `ops` (see submit), made but not queued yet: queue it with
        enqueue(). With a list `bad`, an operation whose value cannot be taken (e.g. a buffer
        that is not contiguous) is left out and `(index, error)` appended to `bad`, so that one
        caller's bad value fails only that caller; None if every operation is left out."""
        cdef list items = list(ops)
        self._check()  # the writer's own state fails them all, not one by one
        try:
            return self._prepare(items, port)
        except Exception:
            if bad is None:
                raise
        # Each operation alone, to tell the bad ones (only after a failure: it costs twice).
        good = []
        for index, item in enumerate(items):
            try:
                self._prepare([item], None)
            except Exception as exc:
                bad.append((index, exc))
            else:
                good.append(item)
        return self._prepare(good, port) if good else None

    def enqueue(self, Submission sub, *, bint block=True):
        """Queue a submission made by prepare(); False if the queue is full and not `block`
        (it can be queued later: wait_for_room(sub.nbytes) tells when)."""
        return self._enqueue(sub, block)

    cdef Submission _prepare(self, list items, Port port):
        cdef Py_ssize_t n = len(items)
        cdef Submission sub = Submission()
        cdef WSub* s
        self._check()
        if n == 0:
            raise ValueError("a submission needs at least one operation")
        s = <WSub*>calloc(1, sizeof(WSub))
        if s == NULL:
            raise MemoryError()
        sub.sub = s
        sub.writer = self
        sub.port = port
        s.ops = <WOp*>calloc(n, sizeof(WOp))
        if s.ops == NULL:
            raise MemoryError()
        s.nops = n
        s.port = port.port if port is not None else NULL
        s.hinted = port is not None
        s.failed = -1
        sub.buffers = _Buffers(n)
        sub.keep = []
        sub.names = []
        s.nbytes = _gather_ops(items, s.ops, sub.buffers, sub.keep, sub.names, self.path)
        return sub

    cdef bint _enqueue(self, Submission sub, bint block) except -1:
        cdef WSub* s = sub.sub
        cdef WState* w = self.w
        cdef Port port = sub.port
        cdef int64_t nbytes = s.nbytes
        cdef bint queued = False
        cdef bint stopped = False
        cdef bint elsewhere = False
        cdef int expect = sub.expect_depth
        self._check()
        if sub.queued or sub.writer is not self:
            raise ValueError("a submission is queued once, on the writer that made it")
        # Registered before it is queued: once queued, the writer may finish it and an event
        # loop drain its port at any moment, and the drain releases what it finds here.
        self._owners[<Py_ssize_t>s] = sub
        if port is not None:
            port.pending += 1
        if self._joined:
            self._unpin()
        with nogil:
            zt_mutex_lock(&w.mu)
            while True:
                if w.stop:
                    stopped = True
                    break
                if expect >= 0 and w.txn_depth != expect:
                    elsewhere = True
                    break
                if _has_room(w, nbytes):
                    s.txn = w.txn
                    if s.txn != 0:
                        s.port = NULL  # nobody waits for it: see _unpin
                    _enqueue_ready(w, s)
                    if s.hinted and s.txn == 0 and w.unsignaled_bytes + nbytes < w.signal_bytes:
                        w.unsignaled_bytes += nbytes  # its loop's flush() wakes the thread
                    else:
                        w.unsignaled_bytes = 0
                        zt_cond_signal(&w.work)
                    queued = True
                    break
                if not block:
                    break
                zt_cond_wait(&w.done, &w.mu)
            if queued:
                sub.queued = True
            zt_mutex_unlock(&w.mu)
        if not queued:
            del self._owners[<Py_ssize_t>s]
            if port is not None:
                port.pending -= 1
            if stopped:
                raise _errors.ClosedError(f"the writer of {self.path!r} is closed")
            if elsewhere:
                raise _errors.NestingError(
                    f"the transaction level on {self.path!r} this write was made in is no "
                    "longer the innermost open one (a level was opened inside it, or it ended): "
                    "it was not written"
                )
            zpp_point("submit.full")
            return False
        zpp_point("submit.queued")
        if s.txn != 0:
            # Nobody waits for it (its error is the transaction's): kept until the writer is
            # done with it, and let go by the next submission or the transaction's end.
            self._joined.append(sub)
            if port is not None:
                port.pending -= 1
        return True

    def write(self, ops, int expect=-1):
        """Queue `ops` and, unless they joined the open explicit transaction, wait until they
        are committed (GIL released); raises the write's error. One call, so that no signal
        can come between queueing and waiting. `expect`: see Submission.expect_depth."""
        cdef Submission sub = self._prepare(list(ops), None)
        sub.expect_depth = expect
        self._enqueue(sub, True)
        if sub.sub.txn == 0:
            sub.wait()

    cdef int _unpin(self) except -1:
        """Let go of the finished writes that joined the transaction without a waiter (their
        errors are the transaction's: see _record_transaction_error)."""
        cdef Submission sub
        joined = self._joined
        while joined:
            sub = joined[0]
            if zt_load_acquire(&sub.sub.state) != SUB_DONE:
                break
            joined.popleft()
            sub._finish()
        return 0

    def flush(self):
        """Everything queued so far is all the caller has for now: commit it without waiting
        for more (event loops call this once per turn in which they queued writes)."""
        cdef WState* w = self.w
        zpp_point("flush")
        with nogil:
            zt_mutex_lock(&w.mu)
            if w.flush_seq < w.next_seq:
                w.flush_seq = w.next_seq
                w.unsignaled_bytes = 0
                zt_cond_signal(&w.work)
            zt_mutex_unlock(&w.mu)

    def wait_for_room(self, int64_t nbytes):
        """Block (GIL released) until a submission of `nbytes` would be queued at once, or
        the writer stops."""
        cdef WState* w = self.w
        self._check()
        with nogil:
            zt_mutex_lock(&w.mu)
            while not w.stop and not _has_room(w, nbytes):
                zt_cond_wait(&w.done, &w.mu)
            zt_mutex_unlock(&w.mu)

    cdef int _hold(self, bint drain, int64_t mark) except -1:
        """Take the connection from the thread, waiting with the GIL released: with `drain`,
        until everything queued so far is written, else until the current batch is. `mark` > 0:
        first wait until no other explicit transaction is open or beginning, and reserve the
        start for the caller; `mark` < 0: mark the open one as ending at the moment of asking
        (what is queued after is not the transaction's). Raises ClosedError once close() has
        started."""
        cdef WState* w = self.w
        cdef int64_t target
        cdef bint refused = False
        self._check()
        with nogil:
            zt_mutex_lock(&w.mu)
            if mark > 0:
                while (w.txn_open or w.txn_pending) and not w.closing:
                    zt_cond_wait(&w.done, &w.mu)
            if w.closing:
                refused = True
            else:
                if mark > 0:
                    w.txn_pending = True
                elif mark < 0:
                    w.txn = 0
                target = _drain_target(w) if drain else w.done_seq
                w.hold_waiters += 1
                if w.hold_limit < target:
                    w.hold_limit = target
                if drain and w.flush_seq < w.next_seq:
                    # Writes whose submitter would say when it is done (an event loop's) are
                    # not waited for: the writer takes them now.
                    w.flush_seq = w.next_seq
                    w.unsignaled_bytes = 0
                zt_cond_signal(&w.work)
                while (w.held or w.busy or w.done_seq < target) and not w.closing:
                    zt_cond_wait(&w.done, &w.mu)
                w.hold_waiters -= 1
                if w.hold_waiters == 0:
                    w.hold_limit = -1
                if w.closing:
                    refused = True
                    if mark > 0:
                        w.txn_pending = False
                else:
                    w.held = 1
                zt_cond_broadcast(&w.work)
                zt_cond_broadcast(&w.done)
            zt_mutex_unlock(&w.mu)
        if refused:
            raise _errors.ClosedError(f"the store {self.path!r} is closing")
        self.db._leave()
        return 0

    cdef void _release(self) noexcept:
        cdef WState* w = self.w
        self.db.busy = 1  # the thread's again (see __init__)
        with nogil:
            zt_mutex_lock(&w.mu)
            w.held = 0
            zt_cond_broadcast(&w.work)
            zt_cond_broadcast(&w.done)
            zt_mutex_unlock(&w.mu)

    def call_holding(self, fn, bint drain=True):
        """Run `fn(db)` on the write connection and return what it returns: the connection is
        taken from the thread once everything queued so far is written (with `drain`) and given
        back when `fn` returns or raises.

        Taking and giving back happen inside this one compiled call, around the call of `fn`:
        Python runs signal handlers only between bytecodes (in `fn`, or in the caller once this
        returns), never in between here, so a KeyboardInterrupt or SystemExit can come only
        while `fn` runs (the connection is given back as it propagates) or after the connection
        is given back. A context manager cannot promise that: CPython 3.14 calls a compiled
        `__enter__` as a plain call, which runs pending signal handlers as it returns, before
        the `with` block protects anything, so `__exit__` would never run."""
        self._hold(drain, 0)
        try:
            return fn(self.db)
        finally:
            self._release()

    def holding(self, bint drain=True):
        """A context manager giving the write connection for the block: taken from the thread
        once everything queued so far is written (with `drain`), given back at the end. For
        tests and interactive use; zarrdb itself uses call_holding (see there why): if a
        signal's exception skips `__exit__`, the connection is given back when the holder is
        dropped (at once, as the exception unwinds the `with` statement). A test hook (test
        builds only)."""
        _test_hook("Writer.holding")
        return _Holding(self, drain)

    @property
    def in_transaction(self):
        """An explicit transaction is open (read without the lock: a hint for choosing a
        connection; membership of writes is decided under the lock)."""
        return self.w.txn_open

    @property
    def transaction(self):
        """The token of the open explicit transaction (0: none). Read without the lock, as
        in_transaction."""
        return self.w.txn if self.w.txn_open else 0

    @property
    def innermost_level(self):
        """The innermost open level of the explicit transaction (None: none is open). Read
        without holding the connection: a level opened or ended meanwhile is the caller's to
        expect."""
        stack = self._stack
        return stack[len(stack) - 1] if stack else None

    def begin(self, int64_t inside, list levels):
        """Open a level of explicit transaction and return the transaction's token: a savepoint
        on top of the innermost open level if `inside` is the open transaction's token (the
        caller works inside it), else a new transaction, once any other has ended. Appends
        the token to `levels`. (The form of the engine's tests; stores use open_level.)"""
        cdef Level level = Level(self)
        cdef Level parent = None
        if inside != 0 and self._stack and (<Level>self._stack[0]).token == inside:
            parent = self._stack[len(self._stack) - 1]
        _open_level(self, level, parent)
        levels.append(level.token)
        return level.token

    def end(self, int64_t token, bint ok, list levels=None):
        """End the innermost open level of transaction `token` (see end_level); `levels`, the
        list begin() put the token in, is emptied whatever happens."""
        try:
            if self._stack and (<Level>self._stack[0]).token == token:
                _end_level(self, self._stack[len(self._stack) - 1], ok)
            else:
                self._check()
                raise _errors.MisuseError(
                    f"transaction {token} is not open on {self.path!r}", code=SQLITE_MISUSE
                )
        finally:
            if levels is not None:
                del levels[:]

    def open_level(self, Level level, Level parent=None):
        """Open `level` on top of `parent`, the innermost open level the caller works inside
        (None: a new transaction). NestingError if another level is open on top of `parent`."""
        _open_level(self, level, parent)

    def end_level(self, Level level, bint ok):
        """End `level`: committed (or its savepoint released) if `ok`, else rolled back."""
        _end_level(self, level, ok)

    cdef void _forget_transaction(self) noexcept:
        cdef WState* w = self.w
        del self._stack[:]
        with nogil:
            zt_mutex_lock(&w.mu)
            w.txn = 0
            w.txn_open = False
            w.txn_depth = 0
            _clear_transaction_error(w)
            _requeue_deferred(w)
            zt_cond_broadcast(&w.work)
            zt_cond_broadcast(&w.done)
            zt_mutex_unlock(&w.mu)

    @property
    def checkpoint_failures(self):
        """(failed checkpoints, the last one's result code, frames in the log the last
        checkpoint saw, frames it copied): zarrdb._log reports new failures from these."""
        return (self.w.ck.n_failed, self.w.ck.last_rc, self.w.ck.log, self.w.ck.backfilled)

    @property
    def in_wal(self):
        """The writer has the file in WAL mode (it switched, or the file started in it). Read
        without the lock: the writer thread sets it after a commit, and a report may be one
        batch late."""
        return bool(self.w.autowal.in_wal)

    @property
    def touch_skipped(self):
        """A group commit left the modification time out since it was last written (read
        without the lock: a report after the writes it is about are done)."""
        return bool(self.w.touch.skipped)

    def stats(self):
        """Counters: batches committed, submissions, batches retried one by one, the largest
        batch, the most bytes queued at once, and the bytes queued now; `held`: a caller holds
        the connection now; `closing`: close() has started; `hold_waiters`: callers waiting to
        hold it."""
        cdef WState* w = self.w
        cdef int64_t v[16]
        with nogil:
            zt_mutex_lock(&w.mu)
            v[13] = w.held
            v[14] = w.closing
            v[15] = w.hold_waiters
            v[0] = w.n_batches
            v[1] = w.n_subs
            v[2] = w.n_retries
            v[3] = w.max_batch_subs
            v[4] = w.max_queued_bytes
            v[5] = w.queued_bytes
            v[6] = w.n_lingered
            v[7] = w.ck.n_checkpoints
            v[8] = w.ck.n_waits
            v[9] = w.ck.max_wal_frames
            v[10] = w.autowal.n_switches
            v[11] = w.autowal.in_wal
            v[12] = w.vac.n_steps
            zt_mutex_unlock(&w.mu)
        return dict(zip(("batches", "submissions", "retried_batches", "max_batch",
                         "max_queued_bytes", "queued_bytes", "lingered", "checkpoints",
                         "checkpoint_waits", "max_wal_frames", "switches_to_wal", "in_wal",
                         "vacuum_steps", "held", "closing", "hold_waiters"),
                        [v[i] for i in range(16)]))

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Write everything queued, stop the thread, roll back an explicit transaction whose
        block has not ended, and give the Database back to Python. Holds asked for from now
        on, and those still waiting, raise ClosedError; one granted already is waited for.
        Must not be called while holding."""
        cdef WState* w = self.w
        if self._closed:
            return
        zpp_point("writer.close")
        self._closed = True
        if not self.started or self.pid != _current_pid:
            return  # never started, or the thread lives in the parent process
        with nogil:
            zt_mutex_lock(&w.mu)
            w.closing = True
            zt_cond_broadcast(&w.done)
            while w.held:
                zt_cond_wait(&w.done, &w.mu)
            zt_mutex_unlock(&w.mu)
        self._stop()
        try:
            if not sqlite3_get_autocommit(self.db.db):
                # Nobody can end it now (end() raises ClosedError): it is discarded.
                self.db._finish(1, False)
        finally:
            self.db._leave()

    cdef void _stop(self) noexcept:
        cdef WState* w = self.w
        with nogil:
            zt_mutex_lock(&w.mu)
            w.stop = 1
            zt_cond_broadcast(&w.work)
            zt_cond_broadcast(&w.done)
            zt_mutex_unlock(&w.mu)
            zt_thread_join(w.thread)
        self.started = False
        if self.db is not None and self.db.db != NULL:
            # The handler points at this writer's state, which goes with the writer; the
            # connection stays the Database's.
            sqlite3_progress_handler(self.db.db, 0, NULL, NULL)
        self._stop_checkpointer()
        self._finalize_statements()

    def __dealloc__(self):
        cdef WState* w = self.w
        if w == NULL or self.pid != zarrdb_getpid():
            return  # in a forked child the thread and its memory are the parent's
        if self.started:
            self._stop()
        zt_cond_destroy(&w.work)
        zt_cond_destroy(&w.done)
        zt_cond_destroy(&w.ck.cv)
        zt_mutex_destroy(&w.mu)
        _clear_transaction_error(w)
        free(w.batch)
        free(w)
        self.w = NULL


cdef class _Holding:
    """`with writer.holding() as db:` (see Writer.holding). The connection is taken inside
    __enter__ and given back by __exit__, or by the holder's deallocation if __exit__ never
    runs: on CPython 3.14 an exception of a signal handler can be raised as the compiled
    __enter__ returns, before the with statement protects the block."""

    cdef Writer writer
    cdef bint drain
    cdef bint held

    def __cinit__(self, Writer writer, bint drain):
        self.writer = writer
        self.drain = drain
        self.held = False

    def __enter__(self):
        self.writer._hold(self.drain, 0)
        self.held = True
        return self.writer.db

    def __exit__(self, exc_type, exc, tb):
        if self.held:
            self.held = False
            self.writer._release()
        return False

    def __dealloc__(self):
        if self.held and self.writer is not None and self.writer.w != NULL:
            self.held = False
            self.writer._release()
