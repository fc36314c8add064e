# Keys and key ranges as the C level binds them (UTF-8 bytes, no copy), and the arena a listing
# collects its keys in without the GIL. Included into _core.pyx before the Database class.

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


cdef inline int _bind_key(sqlite3_stmt* st, int i, const char* p, Py_ssize_t n) noexcept nogil:
    return sqlite3_bind_text64(st, i, p, n, SQLITE_STATIC, SQLITE_UTF8)


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
