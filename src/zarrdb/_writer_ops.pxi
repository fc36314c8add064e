# Write operations of the writer thread (_writer_thread.pxi), the only path keys are written by,
# and the buffers of the values they write. Included into _core.pyx before the writer's other rooms.
#
# An operation is gathered from Python objects (the key's UTF-8 form, the value's buffer) into
# a WOp by _gather_ops, with the GIL; _apply_op then runs it without the GIL, on a connection
# whose statements (Database.stmts) are prepared.

cdef enum:
    W_SET = 1
    W_SET_IF_ABSENT = 2
    W_DELETE = 3
    W_DELETE_RANGE = 4  # key: lower bound (inclusive); value: upper bound (exclusive), if any

cdef struct WOp:
    int kind
    const char* key
    Py_ssize_t nkey
    const char* val
    Py_ssize_t nval
    bint has_val

cdef const char* _EMPTY = b""  # an empty value (a NULL pointer would bind SQL NULL)

# The statements write operations and their transactions run (Database._prepare_writes
# prepares them before any of them runs without the GIL).
cdef Stmt[13] _WRITE_STMTS = [
    S_SET, S_SET_ZB, S_SET_IF_ABSENT, S_SET_IF_ABSENT_ZB, S_DELETE, S_DELETE_ALL, S_DELETE_RANGE,
    S_BEGIN_WRITE, S_COMMIT, S_ROLLBACK, S_SAVEPOINT, S_RELEASE, S_ROLLBACK_TO,
]


cdef int64_t _gather_ops(list items, WOp* ops, _Buffers buffers, list keep, list names,
                         str path) except -1:
    """Fill `ops` from (kind, key, value) items: kind "set", "set_if_absent", "delete" or
    "delete_prefix" (value None for the deletes). `keep` holds what the pointers point into,
    `names` each operation's key; returns the bytes the operations carry."""
    cdef Py_ssize_t i
    cdef Key k
    cdef Range r
    cdef Py_buffer* view
    cdef WOp* op
    cdef int64_t nbytes = 0
    for i in range(len(items)):
        kind, key, value = items[i]
        op = &ops[i]
        names.append(key)
        if kind == "set" or kind == "set_if_absent":
            op.kind = W_SET if kind == "set" else W_SET_IF_ABSENT
            _key(key, &k)
            keep.append(key)
            view = buffers.acquire(value, path, key)
            op.key, op.nkey = k.data, k.size
            op.val, op.nval, op.has_val = <const char*>view.buf, view.len, True
            nbytes += view.len + k.size
        elif kind == "delete":
            op.kind = W_DELETE
            _key(key, &k)
            keep.append(key)
            op.key, op.nkey = k.data, k.size
            nbytes += k.size
        elif kind == "delete_prefix":
            op.kind = W_DELETE_RANGE
            _range(key, &r, keep)
            op.key, op.nkey = r.lo, r.nlo
            op.val, op.nval, op.has_val = r.hi, r.nhi, r.ranged
            nbytes += r.nlo
        else:
            raise ValueError(f"unknown write operation {kind!r}")
    return nbytes


cdef int _step_done(sqlite3_stmt* st) noexcept nogil:
    cdef int rc = sqlite3_step(st)
    sqlite3_reset(st)
    return SQLITE_OK if rc == SQLITE_DONE else rc



cdef int _write_large(sqlite3* db, sqlite3_stmt** st, WOp* op, int64_t* changes) noexcept nogil:
    """A large value: the row is inserted with a zero-filled value of the right length, then
    the bytes are written into its pages with the blob API. SQLite would otherwise first copy
    the whole value into a record buffer of its own (a fresh allocation as large as the value)."""
    cdef sqlite3_stmt* stmt = st[<int>S_SET_ZB] if op.kind == W_SET else st[<int>S_SET_IF_ABSENT_ZB]
    cdef sqlite3_blob* blob = NULL
    cdef int64_t rowid = 0
    cdef int rc
    cdef bint inserted = False
    rc = _bind_key(stmt, 1, op.key, op.nkey)
    if rc == SQLITE_OK:
        rc = sqlite3_bind_int64(stmt, 2, op.nval)
    if rc != SQLITE_OK:
        sqlite3_reset(stmt)
        return rc
    rc = sqlite3_step(stmt)
    if rc == SQLITE_ROW:
        rowid = sqlite3_column_int64(stmt, 0)
        inserted = True
        rc = sqlite3_step(stmt)
    sqlite3_reset(stmt)
    if rc != SQLITE_DONE:
        return rc
    if not inserted:
        return SQLITE_OK  # set_if_absent of a key that exists
    changes[0] += 1
    rc = sqlite3_blob_open(db, "main", _TABLE_C, "v", rowid, 1, &blob)
    if rc == SQLITE_OK:
        rc = sqlite3_blob_write(blob, op.val, <int>op.nval, 0)
        if rc == SQLITE_OK:
            rc = sqlite3_blob_close(blob)
        else:
            sqlite3_blob_close(blob)
    return rc


cdef int _apply_op(sqlite3* db, sqlite3_stmt** st, int64_t blob_min, WOp* op,
                   int64_t* changes, bint* freed) noexcept nogil:
    """Run one operation inside the open transaction; SQLITE_OK or the error code. `changes`
    counts the rows written or deleted; `freed` is set when a delete removed something."""
    cdef sqlite3_stmt* stmt
    cdef int rc
    if op.kind == W_SET or op.kind == W_SET_IF_ABSENT:
        if op.nval >= blob_min:
            return _write_large(db, st, op, changes)
        stmt = st[<int>S_SET] if op.kind == W_SET else st[<int>S_SET_IF_ABSENT]
        rc = _bind_key(stmt, 1, op.key, op.nkey)
        if rc == SQLITE_OK:
            rc = sqlite3_bind_blob64(stmt, 2, op.val if op.val != NULL else _EMPTY, op.nval,
                                     SQLITE_STATIC)
    elif op.kind == W_DELETE:
        stmt = st[<int>S_DELETE]
        rc = _bind_key(stmt, 1, op.key, op.nkey)
    elif not op.has_val:
        stmt = st[<int>S_DELETE_ALL]
        rc = SQLITE_OK
    else:
        stmt = st[<int>S_DELETE_RANGE]
        rc = _bind_key(stmt, 1, op.key, op.nkey)
        if rc == SQLITE_OK:
            rc = _bind_key(stmt, 2, op.val, op.nval)
    if rc != SQLITE_OK:
        return rc
    rc = sqlite3_step(stmt)
    if rc == SQLITE_DONE and sqlite3_changes(db) > 0:
        changes[0] += sqlite3_changes(db)
        if op.kind == W_DELETE or op.kind == W_DELETE_RANGE:
            freed[0] = True
    sqlite3_reset(stmt)
    return SQLITE_OK if rc == SQLITE_DONE else rc


# ---------------------------------------------------------------------------------------------
# Values: a set of acquired buffers, released together.

cdef class _Buffers:
    cdef Py_buffer* views
    cdef Py_ssize_t count

    def __cinit__(self, Py_ssize_t capacity):
        self.views = <Py_buffer*>malloc(max(capacity, 1) * sizeof(Py_buffer))
        if self.views == NULL:
            raise MemoryError()
        self.count = 0

    cdef Py_buffer* acquire(self, object value, str path, object key) except NULL:
        cdef Py_buffer* view = &self.views[self.count]
        PyObject_GetBuffer(value, view, PyBUF_SIMPLE)
        self.count += 1
        if view.len > _MAX_VALUE:
            raise _errors.ValueTooLargeError(
                f"{path!r}: the value for {key!r} has {view.len:,} bytes, over the limit of "
                f"{_MAX_VALUE:,} bytes of a SQLiteStore file; nothing was written (use smaller "
                "chunks or shards)",
                code=SQLITE_TOOBIG,
                filename=path,
            )
        return view

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.count):
            PyBuffer_Release(&self.views[i])
        free(self.views)
