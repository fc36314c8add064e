# Database's listings: keys by prefix, the children of a prefix (one index seek per child),
# sizes and counts over a prefix, and renaming a prefix. Each function here is a method of
# Database (its first argument, `self`); the class (_connection.pxi) lists them. Included into
# _core.pyx after the class.


cdef list _list_prefix(Database self, object prefix):
    cdef Range r
    cdef list keep = []
    cdef Arena arena
    cdef sqlite3_stmt* stmt
    cdef int rc = SQLITE_OK
    cdef const unsigned char* text
    _range(prefix, &r, keep)
    memset(&arena, 0, sizeof(Arena))
    self._enter()
    try:
        self._watch()
        stmt = self._stmt(S_LIST_RANGE if r.ranged else S_LIST_ALL)
        with nogil:
            rc = _bind_range(stmt, &r)
            while rc == SQLITE_OK or rc == SQLITE_ROW:
                rc = _step_to_key(stmt)
                if rc != SQLITE_ROW:
                    break
                text = sqlite3_column_text(stmt, 0)
                if _arena_push(&arena, <const char*>text, sqlite3_column_bytes(stmt, 0)):
                    rc = SQLITE_NOMEM
                    break
        return _listing(self, rc, stmt, &arena)
    finally:
        self._leave()
        free(arena.data)


cdef list _list_dir(Database self, object prefix):
    cdef Range r
    cdef list keep = []
    cdef Py_ssize_t plen
    cdef bint ranged
    cdef const char* hi
    cdef Py_ssize_t nhi
    cdef char* cursor = NULL
    cdef Py_ssize_t ncursor
    cdef size_t cursor_cap
    cdef bint after = False  # seek past the cursor (k > c) instead of from it (k >= c)
    cdef Arena arena
    cdef sqlite3_stmt* ge
    cdef sqlite3_stmt* gt
    cdef sqlite3_stmt* stmt
    cdef int rc = SQLITE_OK
    cdef const char* k
    cdef Py_ssize_t n
    cdef const char* slash
    cdef Py_ssize_t child
    _range(prefix, &r, keep)
    plen, ranged, hi, nhi = r.nlo, r.ranged, r.hi, r.nhi
    if ranged and not prefix.endswith("/"):
        raise _errors.InvalidKeyError(f"list_dir takes '' or a prefix ending in '/', not {prefix!r}")
    memset(&arena, 0, sizeof(Arena))
    cursor_cap = 256 + 2 * plen
    self._enter()
    try:
        cursor = <char*>malloc(cursor_cap)
        if cursor == NULL:
            raise MemoryError()
        memcpy(cursor, r.lo, plen)
        ncursor = plen
        ge = self._stmt(S_SEEK_GE if ranged else S_SEEK_GE_ALL)
        gt = self._stmt(S_SEEK_GT if ranged else S_SEEK_GT_ALL)
        with nogil:
            while True:
                stmt = gt if after else ge
                rc = _bind_key(stmt, 1, cursor, ncursor)
                if ranged and rc == SQLITE_OK:
                    rc = _bind_key(stmt, 2, hi, nhi)
                if rc == SQLITE_OK:
                    rc = _step_to_key(stmt)
                if rc != SQLITE_ROW:
                    break
                k = <const char*>sqlite3_column_text(stmt, 0)
                n = sqlite3_column_bytes(stmt, 0)
                # A damaged key index can return a key before the cursor or outside the
                # prefix: the seeks would never end.
                if (n < plen or memcmp(k, cursor, plen) != 0
                        or _compare(k, n, cursor, ncursor) < (1 if after else 0)):
                    rc = _OUT_OF_ORDER
                    break
                slash = <const char*>memchr(k + plen, b'/', n - plen)
                if slash == NULL:
                    # A key directly below: list it, continue just after it.
                    child = n - plen
                    after = True
                else:
                    # A sub-tree: list "name/", continue at "name0", past all of it.
                    child = slash - k - plen + 1
                    after = False
                if _arena_push(&arena, k + plen, child):
                    rc = SQLITE_NOMEM
                    break
                if <size_t>(plen + child) > cursor_cap:
                    cursor_cap = 2 * (plen + child)
                    free(cursor)
                    cursor = <char*>malloc(cursor_cap)
                    if cursor == NULL:
                        rc = SQLITE_NOMEM
                        break
                memcpy(cursor, k, plen + child)
                ncursor = plen + child
                if not after:
                    cursor[ncursor - 1] = b'0'  # '/' + 1
                sqlite3_reset(stmt)
        return _listing(self, rc, stmt, &arena)
    finally:
        self._leave()
        free(arena.data)
        free(cursor)


cdef list _list_prefix_sizes(Database self, object prefix):
    cdef Range r
    cdef list keep = []
    cdef int began
    _range(prefix, &r, keep)
    sql = f"SELECT k, {_NBYTES} FROM {_TABLE} ORDER BY k"
    if r.ranged:
        sql = (f"SELECT k, {_NBYTES} FROM {_TABLE} "
               "WHERE k >= CAST(?1 AS TEXT) AND k < CAST(?2 AS TEXT) ORDER BY k")
    # The sizes and the file's size from one snapshot: together the values of a sound
    # file are no longer than the file.
    began = self._begin_snapshot()
    try:
        rows = self.execute(sql, tuple(keep) if r.ranged else ())
        total = sum(size for _, size in rows if size is not None)
        if total > self._file_bytes:
            self._enter()
            try:
                _check_claim(self, total, _values_under(prefix), NULL)
            finally:
                self._leave()
    finally:
        self._end_snapshot(began)
    for key, _ in rows:
        if not isinstance(key, str):  # another writer broke the spec's rule: keys are TEXT
            what = "NULL" if key is None else "a BLOB" if isinstance(key, bytes) else "a number"
            raise _errors.FormatError(
                f"{self.path!r} holds a key stored as {what} ({repr(key)[:80]}), not as "
                "TEXT as the SQLiteStore spec says; 'zarrdb check' lists such rows"
            )
    return rows


cdef object _rename_prefix(Database self, object old, object new):
    cdef Range r
    cdef list keep = []
    if not old:
        raise _errors.InvalidKeyError("rename_prefix needs a non-empty prefix")
    _prefix_bytes(new)
    _range(old, &r, keep)
    with self._atomic():
        # Changing a key rewrites its row, value and all, at the length its record claims:
        # an overflow chain that loops back made a move of an 11 KB file take 475 MB.
        self.size_prefix(old)
        self.execute(
            f"UPDATE {_TABLE} SET k = CAST(CAST(?1 AS BLOB) || substr(CAST(k AS BLOB), ?2 + 1) "
            "AS TEXT) WHERE k >= CAST(?3 AS TEXT) AND k < CAST(?4 AS TEXT)",
            (new.encode("utf-8"), r.nlo, *keep),
        )
        return self.execute("SELECT changes()")[0][0]


cdef int64_t _scalar_range(Database self, Stmt all_stmt, Stmt range_stmt, object prefix) except -2:
    """Run an aggregate (or a DELETE) over the keys that start with `prefix`; returns
    column 0 (or the rows deleted)."""
    cdef Range r
    cdef list keep = []
    cdef sqlite3_stmt* stmt
    cdef int rc
    cdef int64_t result = 0
    _range(prefix, &r, keep)
    self._enter()
    try:
        self._watch()
        stmt = self._stmt(range_stmt if r.ranged else all_stmt)
        with nogil:
            rc = _bind_range(stmt, &r)
            if rc == SQLITE_OK:
                rc = sqlite3_step(stmt)
            if rc == SQLITE_ROW:
                result = sqlite3_column_int64(stmt, 0)
                rc = SQLITE_DONE
            elif rc == SQLITE_DONE:
                # a DELETE: report how many rows went
                result = sqlite3_changes(self.db)
        if rc != SQLITE_DONE:
            self._raise(rc, stmt)
        if all_stmt == S_SIZE_ALL and result > self._file_bytes:
            _check_claim(self, result, _values_under(prefix), stmt)
        with nogil:
            sqlite3_reset(stmt)
        return result
    finally:
        self._leave()


cdef list _listing(Database self, int rc, sqlite3_stmt* stmt, Arena* arena):
    """The end of a listing: its error (with the statement reset), or its keys."""
    if rc != SQLITE_DONE:
        err = _list_error(self, rc)
        sqlite3_reset(stmt)
        raise err
    with nogil:
        sqlite3_reset(stmt)
    return _arena_strings(arena, NULL, 0, self.path)


cdef object _list_error(Database self, int rc):
    if rc == _OUT_OF_ORDER:
        return _errors.DatabaseCorruptError(
            f"{self.path!r}: the index of the zarr table's keys is out of order (the file "
            "is damaged; 'zarrdb check' lists what SQLite finds)",
            code=SQLITE_CORRUPT, filename=self.path,
        )
    if rc == _NULL_KEY:
        return _errors.DatabaseCorruptError(
            f"{self.path!r} has a NULL key in its zarr table; a SQLiteStore file must not "
            "(written by another program?)",
            code=SQLITE_CORRUPT, filename=self.path,
        )
    return self._error(rc, "cannot list keys")
