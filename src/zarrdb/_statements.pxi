# Prepared statements and the C-level values they bind and return: the statements by number,
# keys and key ranges as UTF-8 bytes, the arena a listing collects its keys in, and the views of
# the values a batch writes. Included into _core.pyx (one compiled unit with SQLite) before the
# Database class, which uses all of them.

# ---------------------------------------------------------------------------------------------
# Prepared statements, by number. The zarr table is `zarr(k TEXT PRIMARY KEY, v BLOB)`; ranges
# are `k >= lower AND k < upper` on the primary key (BINARY collation = UTF-8 byte order).

cdef enum Stmt:
    S_GET
    S_LOCATE
    S_READ
    S_EXISTS
    S_LENGTH
    S_SET
    S_SET_IF_ABSENT
    S_SET_ZB
    S_SET_IF_ABSENT_ZB
    S_DELETE
    S_LIST_ALL
    S_LIST_RANGE
    S_SEEK_GE
    S_SEEK_GE_ALL
    S_SEEK_GT
    S_SEEK_GT_ALL
    S_SIZE_ALL
    S_SIZE_RANGE
    S_COUNT_ALL
    S_COUNT_RANGE
    S_ANY_ALL
    S_ANY_RANGE
    S_DELETE_ALL
    S_DELETE_RANGE
    S_BEGIN_READ
    S_BEGIN_WRITE
    S_COMMIT
    S_ROLLBACK
    S_SAVEPOINT
    S_RELEASE
    S_ROLLBACK_TO
    S_FILE_BYTES
    S_COUNT

# A value's size in bytes. length() of a BLOB reads only the record header; a value another
# program stored as TEXT (against the spec) would count characters, so it is measured as bytes.
# typeof() also reads only the header.
cdef str _NBYTES = "CASE WHEN typeof(v) = 'blob' THEN length(v) ELSE length(CAST(v AS BLOB)) END"

# The statements, by number: {t} is the data table (its name from _format, like every fact of
# the spec); ranges are `k >= lower AND k < upper` on the primary key.
_STATEMENTS = {
    S_GET: "SELECT v FROM {t} WHERE k = ?1",
    S_LOCATE: f"SELECT rowid, {_NBYTES} FROM {{t}} WHERE k = ?1",
    # One lookup for `get`: the value itself only when it is at most ?2 bytes long (length()
    # reads the record header, not the value); longer ones are read with the blob API. (Plain
    # length() here, for speed: the blob API gives the size in bytes of a long value, and a
    # short one is measured with sqlite3_column_bytes.)
    S_READ: "SELECT rowid, length(v), CASE WHEN length(v) <= ?2 THEN v END FROM {t} WHERE k = ?1",
    S_EXISTS: "SELECT 1 FROM {t} WHERE k = ?1",
    S_LENGTH: f"SELECT {_NBYTES} FROM {{t}} WHERE k = ?1",
    S_SET: "INSERT INTO {t}(k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
    S_SET_IF_ABSENT: "INSERT INTO {t}(k, v) VALUES (?1, ?2) ON CONFLICT(k) DO NOTHING",
    # Large values: the row with a zero-filled value of the right length, whose rowid the
    # writer then opens with the blob API to write the bytes in place.
    S_SET_ZB: "INSERT INTO {t}(k, v) VALUES (?1, zeroblob(?2)) "
              "ON CONFLICT(k) DO UPDATE SET v = excluded.v RETURNING rowid",
    S_SET_IF_ABSENT_ZB: "INSERT INTO {t}(k, v) VALUES (?1, zeroblob(?2)) "
                        "ON CONFLICT(k) DO NOTHING RETURNING rowid",
    S_DELETE: "DELETE FROM {t} WHERE k = ?1",
    S_LIST_ALL: "SELECT k FROM {t} ORDER BY k",
    S_LIST_RANGE: "SELECT k FROM {t} WHERE k >= ?1 AND k < ?2 ORDER BY k",
    S_SEEK_GE: "SELECT k FROM {t} WHERE k >= ?1 AND k < ?2 ORDER BY k LIMIT 1",
    S_SEEK_GE_ALL: "SELECT k FROM {t} WHERE k >= ?1 ORDER BY k LIMIT 1",
    S_SEEK_GT: "SELECT k FROM {t} WHERE k > ?1 AND k < ?2 ORDER BY k LIMIT 1",
    S_SEEK_GT_ALL: "SELECT k FROM {t} WHERE k > ?1 ORDER BY k LIMIT 1",
    S_SIZE_ALL: f"SELECT coalesce(sum({_NBYTES}), 0) FROM {{t}}",
    S_SIZE_RANGE: f"SELECT coalesce(sum({_NBYTES}), 0) FROM {{t}} WHERE k >= ?1 AND k < ?2",
    S_COUNT_ALL: "SELECT count(*) FROM {t}",
    S_COUNT_RANGE: "SELECT count(*) FROM {t} WHERE k >= ?1 AND k < ?2",
    S_ANY_ALL: "SELECT EXISTS (SELECT 1 FROM {t})",
    S_ANY_RANGE: "SELECT EXISTS (SELECT 1 FROM {t} WHERE k >= ?1 AND k < ?2)",
    S_DELETE_ALL: "DELETE FROM {t}",
    S_DELETE_RANGE: "DELETE FROM {t} WHERE k >= ?1 AND k < ?2",
    S_BEGIN_READ: "BEGIN DEFERRED",
    S_BEGIN_WRITE: "BEGIN IMMEDIATE",
    S_COMMIT: "COMMIT",
    S_ROLLBACK: "ROLLBACK",
    S_SAVEPOINT: "SAVEPOINT zarrdb_batch",
    S_RELEASE: "RELEASE zarrdb_batch",
    S_ROLLBACK_TO: "ROLLBACK TO zarrdb_batch",
    # The file's size in the statement's snapshot: the most bytes a sound value can have.
    S_FILE_BYTES: "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
}  # fmt: skip
# The UTF-8 text of each, kept here (a C-level global Python code cannot rebind), with _SQL
# pointing into it.
cdef list _SQL_TEXT = [None] * <int>S_COUNT
cdef const char* _SQL[<int>S_COUNT]
for _which, _text in _STATEMENTS.items():
    _SQL_TEXT[_which] = _text.format(t=_TABLE).encode("utf-8")
    _SQL[<int>_which] = _SQL_TEXT[_which]
del _which, _text

# ---------------------------------------------------------------------------------------------
# Keys

cdef struct Key:
    const char* data
    Py_ssize_t size


cdef inline int _key(object key, Key* out) except -1:
    """Point `out` at the UTF-8 form of `key` (cached inside the str object: no copy)."""
    if type(key) is not str:
        if not isinstance(key, str):
            raise TypeError(f"keys are str, not {type(key).__name__}")
    try:
        out.data = PyUnicode_AsUTF8AndSize(key, &out.size)
    except UnicodeEncodeError as e:
        raise _errors.InvalidKeyError(
            f"key {key!r} cannot be stored: it is not valid Unicode text ({e.reason})"
        ) from None
    return 0


cdef inline int _step_key(sqlite3_stmt* stmt, const Key* k) noexcept nogil:
    """Bind the key to ?1 of a lookup statement and step it: SQLite's result code (the bind's,
    if it failed)."""
    cdef int rc = _bind_key(stmt, 1, k.data, k.size)
    return sqlite3_step(stmt) if rc == SQLITE_OK else rc


cdef inline int _step_to_key(sqlite3_stmt* stmt) noexcept nogil:
    """Step a listing statement: SQLITE_ROW with a key in column 0, _NULL_KEY for a row whose
    key is NULL (a damaged or foreign file), else SQLite's result code (SQLITE_DONE at the
    end)."""
    cdef int rc = sqlite3_step(stmt)
    if rc == SQLITE_ROW and sqlite3_column_type(stmt, 0) == SQLITE_NULL:
        return _NULL_KEY
    return rc


cdef bytes _prefix_bytes(object prefix):
    """The UTF-8 form of a prefix argument, with the same errors as for keys."""
    cdef Key k
    _key(prefix, &k)
    return k.data[:k.size]


cdef bytes _upper_bound(bytes prefix):
    """The smallest byte string greater than every string that starts with `prefix`."""
    cdef bytearray b = bytearray(prefix)
    cdef Py_ssize_t last = len(b) - 1
    while last >= 0 and b[last] == 0xFF:
        last -= 1
    if last < 0:
        return None
    del b[last + 1:]
    b[last] += 1
    return bytes(b)


cdef inline int _compare(const char* a, Py_ssize_t na, const char* b, Py_ssize_t nb) noexcept nogil:
    """BINARY collation order of two UTF-8 strings: <0, 0 or >0."""
    cdef int c = memcmp(a, b, na if na < nb else nb)
    if c != 0:
        return c
    return (na > nb) - (na < nb)


cdef struct Range:
    const char* lo  # UTF-8 bytes of the prefix
    Py_ssize_t nlo
    const char* hi  # the smallest string after every key with the prefix (NULL: prefix "")
    Py_ssize_t nhi
    bint ranged  # False for the prefix "" (every key)


cdef int _range(object prefix, Range* out, list keep) except -1:
    """The keys that start with `prefix`, as [lo, hi) in UTF-8 bytes (kept alive by `keep`)."""
    cdef bytes lower = _prefix_bytes(prefix)
    cdef bytes upper
    keep.append(lower)
    out.lo = lower
    out.nlo = len(lower)
    out.hi = NULL
    out.nhi = 0
    out.ranged = out.nlo > 0
    if out.ranged:
        upper = _upper_bound(lower)
        if upper is None:
            raise _errors.InvalidKeyError(f"invalid prefix {prefix!r}")
        keep.append(upper)
        out.hi = upper
        out.nhi = len(upper)
    return 0


cdef inline int _bind_range(sqlite3_stmt* stmt, Range* r) noexcept nogil:
    """Bind ?1 and ?2 of a range statement; nothing for the prefix "" (its statement, over
    every key, takes no parameter). SQLite's result code."""
    cdef int rc = SQLITE_OK
    if r.ranged:
        rc = _bind_key(stmt, 1, r.lo, r.nlo)
        if rc == SQLITE_OK:
            rc = _bind_key(stmt, 2, r.hi, r.nhi)
    return rc


cdef str _values_under(object prefix):
    """What a claim on the values under `prefix` is called in an error."""
    return f"the values under {prefix!r}" if prefix else "the values of the zarr table"


cdef str _decode_key(const char* data, Py_ssize_t size, str path=None):
    try:
        return PyUnicode_DecodeUTF8(data, size, NULL)
    except UnicodeDecodeError:
        where = f" in {path!r}" if path else ""
        raise _errors.InvalidKeyError(
            f"a stored key{where} is not valid UTF-8 text: {data[:size]!r} "
            "(written by another program?); the file breaks the SQLiteStore key rules"
        ) from None


# ---------------------------------------------------------------------------------------------
# A growable byte arena for listings built without the GIL: each entry is its length
# (Py_ssize_t) followed by its bytes.

cdef struct Arena:
    char* data
    size_t size
    size_t cap
    Py_ssize_t count


cdef int _arena_push(Arena* a, const char* p, Py_ssize_t n) noexcept nogil:
    cdef size_t need = a.size + sizeof(Py_ssize_t) + <size_t>n
    cdef size_t cap
    cdef char* grown
    if need > a.cap:
        cap = a.cap * 2 if a.cap else 4096
        while cap < need:
            cap *= 2
        grown = <char*>realloc(a.data, cap)
        if grown == NULL:
            return -1
        a.data = grown
        a.cap = cap
    memcpy(a.data + a.size, &n, sizeof(Py_ssize_t))
    memcpy(a.data + a.size + sizeof(Py_ssize_t), p, n)
    a.size = need
    a.count += 1
    return 0


cdef list _arena_strings(Arena* a, const char* prefix, Py_ssize_t prefix_size, str path):
    """The entries as str, each with `prefix` put in front."""
    cdef list out = []
    cdef size_t pos = 0
    cdef Py_ssize_t n
    cdef bytes joined
    while pos < a.size:
        memcpy(&n, a.data + pos, sizeof(Py_ssize_t))
        pos += sizeof(Py_ssize_t)
        if prefix_size:
            joined = prefix[:prefix_size] + (a.data + pos)[:n]
            out.append(_decode_key(joined, len(joined), path))
        else:
            out.append(_decode_key(a.data + pos, n, path))
        pos += n
    return out


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
