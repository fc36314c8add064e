# Database's maintenance and plain SQL: the units of schema work (_Atomic), checkpoints, the
# journal mode, integrity check, VACUUM, backup, and the general execute() of tests, the
# conformance checker and schema work. Each function here is a method of Database (its first
# argument, `self`); the class (_connection.pxi) lists them. Included into _core.pyx after the
# class.


cdef class _Atomic:
    """Context manager from Database._atomic(): BEGIN IMMEDIATE .. COMMIT, or a savepoint
    inside the open transaction; an exception rolls that level back and propagates. The same
    begin/end the writer thread's batches and explicit transactions use (_begin_if_needed,
    _finish)."""

    cdef Database db
    cdef int began

    def __cinit__(self, Database db):
        self.db = db
        self.began = 0

    def __enter__(self):
        db = self.db
        db._enter()
        try:
            self.began = db._begin_if_needed(S_BEGIN_WRITE)
        finally:
            db._leave()
        return db

    def __exit__(self, exc_type, exc, tb):
        db = self.db
        db._enter()
        try:
            if sqlite3_get_autocommit(db.db):
                if exc_type is None:
                    # SQLite rolled the transaction back itself after an error inside the
                    # block (a full disk, say) that the block caught: nothing of it is stored.
                    raise _errors.SQLiteError(
                        f"{db.path!r}: the transaction was rolled back after an error inside "
                        "it; nothing of it was written",
                        filename=db.path,
                    )
                return False
            db._finish(self.began, exc_type is None)
        finally:
            db._leave()
        return False


cdef object _atomic_call(Database self, object fn):
    cdef _Atomic unit = _Atomic(self)
    cdef bint ok = False
    unit.__enter__()
    try:
        result = fn(self)
        ok = True
    finally:
        # A failed block: any exception type tells __exit__ to roll back; the block's own
        # exception propagates after it.
        unit.__exit__(None if ok else BaseException, None, None)
    return result


cdef tuple _checkpoint(Database self, object mode):
    cdef int cmode
    cdef int rc
    cdef int log = 0
    cdef int done = 0
    try:
        cmode = _CHECKPOINT_MODES[mode]
    except KeyError:
        raise ValueError(f"mode must be one of {sorted(_CHECKPOINT_MODES)}, not {mode!r}") from None
    self._enter()
    try:
        with nogil:
            rc = sqlite3_wal_checkpoint_v2(self.db, NULL, cmode, &log, &done)
        if rc != SQLITE_OK:
            raise self._error(rc, "cannot checkpoint")
        return (log, done)
    finally:
        self._leave()


cdef str _journal_mode(Database self, object mode):
    if mode is not None:
        mode = str(mode).lower()
        if mode not in _JOURNAL_MODES:
            raise ValueError(f"journal mode must be one of {_JOURNAL_MODES}, not {mode!r}")
        if mode == "off" and self.db != NULL:
            # Defensive mode refuses OFF to SQL; here zarrdb's caller chose it, not a file.
            _defensive(self, 0)
            try:
                result = self.pragma("journal_mode", mode)
            finally:
                _defensive(self, 1)
        else:
            result = self.pragma("journal_mode", mode)
    else:
        result = self.pragma("journal_mode")
    return str(result).lower()


cdef int _defensive(Database self, int on) except -1:
    """Turn SQLite's defensive mode on or off; a connection that cannot turn it back on
    is closed (it would go on trusting the file's SQL)."""
    cdef int rc = sqlite3_db_config(self.db, SQLITE_DBCONFIG_DEFENSIVE, on, <int*>NULL)
    if rc != SQLITE_OK:
        err = self._error(rc, "cannot set defensive mode on")
        if on:
            self._close()
        raise err
    return 0


cdef object _vacuum(Database self):
    # VACUUM builds the new file as an attached database of its own: the one ATTACH it
    # makes is allowed for the statement (the file's SQL never runs ATTACH).
    if self.db == NULL:
        raise _errors.ClosedError(f"the database {self.path!r} is closed")
    # That database is a temporary one, which the build keeps in memory
    # (SQLITE_TEMP_STORE=2), so it goes to a temporary file (TMPDIR) instead; and VACUUM's
    # memory grew with the file at the connection's cache size (16 MiB: +127 MB for a file
    # of 219 MB), but not at SQLite's default of 2 MiB (+34 MB for 131 MB and 219 MB
    # alike), and its time did not change (0.7 to 1.2 s either way): it copies in order.
    cache = self.pragma("cache_size")
    sqlite3_limit(self.db, SQLITE_LIMIT_ATTACHED, 1)
    try:
        self._exec_simple("PRAGMA temp_store = FILE")
        self._exec_simple("PRAGMA cache_size = -2048")
        self.execute("VACUUM")
    finally:
        if self.db != NULL:
            sqlite3_limit(self.db, SQLITE_LIMIT_ATTACHED, 0)
            self._exec_simple("PRAGMA temp_store = DEFAULT")
            self._exec_simple(f"PRAGMA cache_size = {int(cache)}")


cdef object _backup_to(Database self, object path, int pages_per_step):
    cdef sqlite3* dest = NULL
    cdef sqlite3_backup* backup
    cdef int rc
    cdef int pages = pages_per_step
    cdef bint whole = pages_per_step == -1
    cdef bint listening = PyThread_get_thread_ident() == _main_thread
    cdef int began = 0
    cdef str where = os.fsdecode(os.fspath(path))
    cdef bytes target = where.encode("utf-8")
    cdef const char* c_target = target
    cdef int waited_ms = 0
    cdef int limit_ms = self._busy_ms()
    cdef int finished

    if os.path.exists(path) and os.path.exists(self.path) and os.path.samefile(path, self.path):
        raise ValueError(f"cannot back up {self.path!r} onto itself")
    self._enter()
    try:
        if whole:
            # One read transaction makes the steps one snapshot: SQLite restarts a backup
            # only when the source changes between steps, which it cannot while it is held.
            began = self._begin_if_needed(S_BEGIN_READ)
            self._exec_simple("SELECT count(*) FROM sqlite_schema")
            pages = _BACKUP_STEP
        with nogil:
            rc = sqlite3_open_v2(c_target, &dest,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_EXRESCODE,
                                 NULL)
        try:
            if rc == SQLITE_OK:
                rc = _harden(dest)
            if rc != SQLITE_OK:
                raise _sqlite_exception(rc, dest, where, "cannot create the copy")
            sqlite3_busy_timeout(dest, limit_ms)
            backup = sqlite3_backup_init(dest, "main", self.db, "main")
            if backup == NULL:
                raise _sqlite_exception(sqlite3_errcode(dest), dest, where, "cannot start the backup")
            try:
                while True:
                    with nogil:
                        rc = sqlite3_backup_step(backup, pages)
                        if rc == SQLITE_BUSY or rc == SQLITE_LOCKED:
                            if waited_ms >= limit_ms:
                                break
                            sqlite3_sleep(10)
                            waited_ms += 10
                        elif rc != SQLITE_OK:
                            break
                    if listening:
                        PyErr_CheckSignals()
            finally:
                # The error of a step that failed, again (rc has it), or of its own.
                with nogil:
                    finished = sqlite3_backup_finish(backup)
                if rc == SQLITE_DONE and finished != SQLITE_OK:
                    rc = finished
            if rc != SQLITE_DONE:
                # A read of this file that failed for a reason SQLite does not know (a remote
                # read's own error, or the KeyboardInterrupt of Ctrl-C during it) first.
                err = self._error_beyond(rc)
                if err is None:
                    err = _sqlite_exception(rc, dest, where, "backup failed", self._busy_timeout)
                raise err
            with nogil:
                rc = sqlite3_exec(dest, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL)
            if rc != SQLITE_OK:
                raise _sqlite_exception(rc, dest, where)
        finally:
            with nogil:
                sqlite3_close_v2(dest)
    finally:
        try:
            self._finish(began, True)
        finally:
            self._leave()


cdef list _integrity_check(Database self, object max_errors):
    rows = self.execute(f"PRAGMA integrity_check({int(max_errors)})")
    problems = [row[0] for row in rows]
    return [] if problems == ["ok"] else problems


cdef dict _limits(Database self):
    self._enter()
    try:
        return {name: sqlite3_limit(self.db, which, -1)
                for name, (which, _) in CONNECTION_LIMITS.items()}
    finally:
        self._leave()


cdef int _set_limit(Database self, object name, object value) except? -1:
    which = CONNECTION_LIMITS[name][0]
    self._enter()
    try:
        return sqlite3_limit(self.db, which, int(value))
    finally:
        self._leave()


cdef int _length_limit(Database self, object value) except? -1:
    self._enter()
    try:
        return sqlite3_limit(self.db, SQLITE_LIMIT_LENGTH, int(value))
    finally:
        self._leave()


cdef object _pragma(Database self, object name, object value):
    if not (isinstance(name, str) and name.replace("_", "").isalnum() and name.isascii()):
        raise ValueError(f"not a pragma name: {name!r}")
    if value is None:
        sql = f"PRAGMA {name}"
    elif isinstance(value, bool) or isinstance(value, int):
        sql = f"PRAGMA {name} = {int(value)}"
    elif isinstance(value, str) and value.replace("_", "").isalnum() and value.isascii():
        sql = f"PRAGMA {name} = {value}"
    else:
        raise ValueError(f"not a pragma value: {value!r}")
    rows = self.execute(sql)
    return rows[0][0] if rows else None


cdef list _execute(Database self, object sql, object params):
    cdef bytes b = sql.encode("utf-8")
    cdef const char* c_sql = b
    cdef const char* tail = NULL
    cdef sqlite3_stmt* stmt = NULL
    cdef int rc
    cdef int i
    cdef int ncol
    cdef int ctype
    cdef Key k
    cdef Py_buffer view
    cdef list rows = []
    cdef list keep = []
    self._enter()
    try:
        self._watch()
        with nogil:
            rc = sqlite3_prepare_v2(self.db, c_sql, -1, &stmt, &tail)
        if rc != SQLITE_OK:
            raise self._error(rc)
        try:
            if stmt == NULL:
                return rows
            if tail != NULL and tail[0] != 0 and bytes(tail).strip():
                raise ValueError("execute() runs one statement; use executescript() for more")
            for i, p in enumerate(params, 1):
                if p is None:
                    rc = sqlite3_bind_null(stmt, i)
                elif isinstance(p, bool) or isinstance(p, int):
                    rc = sqlite3_bind_int64(stmt, i, p)
                elif isinstance(p, float):
                    rc = sqlite3_bind_double(stmt, i, p)
                elif isinstance(p, str):
                    _key(p, &k)
                    keep.append(p)
                    rc = sqlite3_bind_text64(stmt, i, k.data, k.size, SQLITE_TRANSIENT, SQLITE_UTF8)
                else:
                    PyObject_GetBuffer(p, &view, PyBUF_SIMPLE)
                    try:
                        rc = sqlite3_bind_blob64(stmt, i, view.buf, view.len, SQLITE_TRANSIENT)
                    finally:
                        PyBuffer_Release(&view)
                if rc != SQLITE_OK:
                    raise self._error(rc, f"cannot bind parameter {i}")
            ncol = sqlite3_column_count(stmt)
            while True:
                with nogil:
                    rc = sqlite3_step(stmt)
                if rc != SQLITE_ROW:
                    break
                row = []
                for i in range(ncol):
                    ctype = sqlite3_column_type(stmt, i)
                    if ctype == SQLITE_NULL:
                        row.append(None)
                    elif ctype == SQLITE_INTEGER:
                        row.append(sqlite3_column_int64(stmt, i))
                    elif ctype == SQLITE_FLOAT:
                        row.append(sqlite3_column_double(stmt, i))
                    elif ctype == SQLITE_TEXT:
                        text = sqlite3_column_text(stmt, i)
                        row.append(_decode_key(<const char*>text, sqlite3_column_bytes(stmt, i), self.path))
                    else:
                        blob = sqlite3_column_blob(stmt, i)
                        row.append((<const char*>blob)[:sqlite3_column_bytes(stmt, i)]
                                   if blob != NULL else b"")
                rows.append(tuple(row))
            if rc != SQLITE_DONE:
                raise self._error(rc)
            return rows
        finally:
            with nogil:
                sqlite3_finalize(stmt)
    finally:
        self._leave()


cdef object _executescript(Database self, object sql):
    cdef bytes b = sql.encode("utf-8")
    cdef const char* c_sql = b
    cdef int rc
    self._enter()
    try:
        self._watch()
        with nogil:
            rc = sqlite3_exec(self.db, c_sql, NULL, NULL, NULL)
        if rc != SQLITE_OK:
            raise self._error(rc)
    finally:
        self._leave()
