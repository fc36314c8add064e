# What the writer does between batches (WAutoWal and WVacuum in _writer_state.pxi): journal mode
# "auto" switching the file to WAL after a run of small commits, and giving free pages back in
# bounded steps while it has nothing else to do. Included into _core.pyx.


cdef void _after_commit(WState* w, bint joined, int64_t nbytes) noexcept nogil:
    """Journal mode "auto": count commits of small batches; after a run of them, move the file
    from its rollback journal to WAL (which fails harmlessly while another connection is
    reading; the next run tries again)."""
    cdef int rc
    cdef const unsigned char* mode
    if w.autowal.wal_after <= 0 or w.autowal.in_wal or joined:
        return
    if nbytes >= w.autowal.small_bytes:
        w.autowal.small_streak = 0
        return
    w.autowal.small_streak += 1
    if w.autowal.small_streak < w.autowal.wal_after:
        return
    w.autowal.small_streak = 0
    # Without waiting for locks: another connection reading now makes it fail at once, and
    # the next run of small commits tries again.
    sqlite3_busy_handler(w.db, NULL, NULL)
    rc = sqlite3_step(w.autowal.st_to_wal)
    if rc == SQLITE_ROW:
        mode = sqlite3_column_text(w.autowal.st_to_wal, 0)
        if mode != NULL and mode[0] == b'w':
            w.autowal.in_wal = True
            w.autowal.n_switches += 1
    sqlite3_reset(w.autowal.st_to_wal)
    sqlite3_busy_handler(w.db, _busy_wait, w.autowal.busy_wait)


cdef void _vacuum_step(WState* w) noexcept nogil:
    """One bounded step of giving free pages back (its own transaction); stops asking for more
    once the free list is short."""
    cdef int rc = sqlite3_step(w.vac.st_step)
    while rc == SQLITE_ROW:
        rc = sqlite3_step(w.vac.st_step)
    sqlite3_reset(w.vac.st_step)
    w.vac.n_steps += 1
    if rc == SQLITE_DONE and sqlite3_step(w.vac.st_freelist) == SQLITE_ROW:
        if sqlite3_column_int64(w.vac.st_freelist, 0) < w.vac.min_pages:
            w.vac.freed = False
    else:
        w.vac.freed = False  # e.g. a busy lock: try again after the next delete
    sqlite3_reset(w.vac.st_freelist)
