# The writer thread's work (_writer_main): take what is queued, apply it in one transaction,
# commit, retry alone after a failure, hand the results to the submitters and their ports.
# Never holds the GIL; its state is WState (_writer_state.pxi). Included into _core.pyx.


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
    s = w.head
    w.head = w.tail = NULL
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
