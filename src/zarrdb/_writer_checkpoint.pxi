# The writer's checkpointer (WCheckpointer in _writer_state.pxi): in WAL mode, a thread of its
# own copies the log into the file beside ingest, asked by the commit hook once the log has grown,
# and a commit waits for it only once the log is far over its limit. Included into _core.pyx.


cdef int _wal_hook(void* arg, sqlite3* db, const char* name, int frames) noexcept nogil:
    """Called by SQLite in the writer thread after each commit in WAL mode (in place of its
    automatic checkpoint): wakes the checkpointer when the log is long, and holds the writer
    back while the log is over its limit, until the checkpointer has copied it (the next write
    transaction then starts the log over)."""
    cdef WState* w = <WState*>arg
    cdef int attempts
    cdef int64_t started
    zt_mutex_lock(&w.mu)
    w.ck.wal_frames = frames
    if frames > w.ck.max_wal_frames:
        w.ck.max_wal_frames = frames
    if frames < w.ck.asked_at:
        w.ck.asked_at = 0  # the log started over
    if frames - w.ck.asked_at >= w.ck.every and not w.ck.running:
        # once per ck.every new frames: a checkpointer running all the time would hold the
        # log's read locks often enough to keep the writer from starting it over
        w.ck.asked_at = frames
        w.ck.wanted = True
        zt_cond_signal(&w.ck.cv)
    if frames < w.ck.limit:
        w.ck.wait_above = w.ck.limit  # the log started over
    elif frames >= w.ck.wait_above:
        w.ck.n_waits += 1
        attempts = 0
        started = w.ck.seq  # only a checkpoint that starts from now on can have copied `frames`
        while not w.stop and not (w.ck.done_seq > started and w.ck.log >= frames
                                  and w.ck.backfilled >= w.ck.log):
            if not w.ck.running and not w.ck.wanted:
                if attempts == 2:
                    # A reader keeps old frames in use: go on, and wait again only once the
                    # log has grown by another limit's worth.
                    w.ck.wait_above = frames + w.ck.limit
                    break
                attempts += 1
                w.ck.wanted = True
                zt_cond_signal(&w.ck.cv)
            zt_cond_wait_us(&w.done, &w.mu, 100000)
    zt_mutex_unlock(&w.mu)
    return SQLITE_OK


cdef int _checkpoint_once(WState* w, sqlite3** conn, int* log, int* done) noexcept nogil:
    """One PASSIVE checkpoint through the checkpointer's own connection, opened at its first
    use (and closed when the thread ends)."""
    cdef int rc
    if conn[0] == NULL:
        # Through the guarded VFS, as the writer's own connection (its first read looks for a
        # hot -journal, and would open one planted beside the file unchecked).
        rc = sqlite3_open_v2(w.ck.path, conn, w.ck.flags,
                             NULL if w.ck.flags & SQLITE_OPEN_URI else zarrdb_guarded_vfs())
        if rc == SQLITE_OK:
            rc = _harden(conn[0])
        # The writer's durability: a checkpoint synced otherwise than the commits would
        # change it silently. If it cannot be set, no checkpoint runs (the next try opens
        # the connection again; the log grows meanwhile, as while a reader holds it).
        if rc == SQLITE_OK and w.ck.synchronous == 0:
            rc = sqlite3_exec(conn[0], "PRAGMA synchronous = OFF", NULL, NULL, NULL)
        elif rc == SQLITE_OK and w.ck.synchronous == 2:
            rc = sqlite3_exec(conn[0], "PRAGMA synchronous = FULL", NULL, NULL, NULL)
        if rc != SQLITE_OK:
            sqlite3_close_v2(conn[0])
            conn[0] = NULL
            return rc
    # PASSIVE: copies what no reader still needs; never waits for or blocks the writer.
    rc = sqlite3_wal_checkpoint_v2(conn[0], NULL, SQLITE_CHECKPOINT_PASSIVE, log, done)
    if rc == SQLITE_OK and log[0] < 0:
        # "Not in WAL mode": a connection opens the write-ahead log only once it has read the
        # file. Read, then try again.
        rc = sqlite3_exec(conn[0], "PRAGMA schema_version", NULL, NULL, NULL)
        if rc == SQLITE_OK:
            rc = sqlite3_wal_checkpoint_v2(conn[0], NULL, SQLITE_CHECKPOINT_PASSIVE, log, done)
    return rc


cdef void _checkpointer_main(void* arg) noexcept nogil:
    cdef WState* w = <WState*>arg
    cdef sqlite3* conn = NULL
    cdef int log = 0
    cdef int done = 0
    cdef int rc
    cdef int64_t seq
    zt_mutex_lock(&w.mu)
    while True:
        while not w.ck.wanted and not w.stop:
            zt_cond_wait(&w.ck.cv, &w.mu)
        if w.stop:
            break
        w.ck.wanted = False
        w.ck.running = True
        w.ck.seq += 1
        seq = w.ck.seq
        zt_mutex_unlock(&w.mu)
        rc = _checkpoint_once(w, &conn, &log, &done)
        zt_mutex_lock(&w.mu)
        w.ck.running = False
        w.ck.n_checkpoints += 1
        w.ck.done_seq = seq
        if rc == SQLITE_OK:
            w.ck.log = log
            w.ck.backfilled = done
        else:
            w.ck.n_failed += 1
            w.ck.last_rc = rc
        zt_cond_broadcast(&w.done)
    zt_mutex_unlock(&w.mu)
    sqlite3_close_v2(conn)
