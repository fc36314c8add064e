# Database's reads and blobs: a value whole, into a buffer, by byte ranges and in batches, and
# its length; the claims of a value's size checked against the file before anything is allocated.
# Each function here is a method of Database (its first argument, `self`); the class
# (_connection.pxi) lists them. Included into _core.pyx after the class.


cdef int _open_value(sqlite3* db, int64_t rowid, int64_t upto, sqlite3_blob** blob) noexcept nogil:
    """Open the value of row `rowid` for reading and check its chain of overflow pages as far
    as `upto` bytes reach (-1: the whole value), before anything is allocated for it."""
    cdef int rc = sqlite3_blob_open(db, "main", _TABLE_C, "v", rowid, 0, blob)
    if rc == SQLITE_OK:
        rc = zarrdb_blob_chain_check(blob[0], sqlite3_blob_bytes(blob[0]) if upto < 0 else upto)
    return rc


cdef inline void _end_read(sqlite3_blob* blob, sqlite3_stmt* stmt) noexcept nogil:
    """Close the value's blob (if open) and reset the statement that found it, which ends
    the read transaction that kept both valid."""
    if blob != NULL:
        sqlite3_blob_close(blob)
    sqlite3_reset(stmt)


cdef object _new_value(Py_ssize_t n, sqlite3_blob* blob, sqlite3_stmt* stmt):
    """A bytes object of `n` bytes to read a value into; if there is no memory for it, the
    read is ended (_end_read) before the error propagates."""
    try:
        return PyBytes_FromStringAndSize(NULL, n)
    except BaseException:
        with nogil:
            _end_read(blob, stmt)
        raise


cdef object _finish_read(Database self, int rc, object key, sqlite3_blob* blob,
                         sqlite3_stmt* stmt, object out):
    """`out` once the read is ended (_end_read), or the read's error if `rc` is not OK (built
    first, while SQLite's message is still the failed call's)."""
    err = None if rc == SQLITE_OK else _read_error(self, rc, key)
    with nogil:
        _end_read(blob, stmt)
    if err is not None:
        raise err
    return out


cdef object _read(Database self, object key, int64_t limit):
    """One statement finds the row: it gives the value's length (from the record header)
    and, when the value is small, the value itself, which is copied once into the result.
    Large values are copied with the blob API, which reads overflow pages straight into
    the result. The result is allocated before the lookup at the size of the previous
    value (zarr's chunks are nearly all one size), so a hit releases the GIL once."""
    cdef Key k
    cdef sqlite3_stmt* stmt
    cdef sqlite3_blob* blob = NULL
    cdef int rc
    cdef int inline = 0
    cdef int copied = 0
    cdef int suspect = 0  # longer than the file was when last asked
    cdef int64_t rowid = 0
    cdef int64_t size = 0
    cdef int64_t inline_max = limit if limit < _BLOB_READ_MIN - 1 else _BLOB_READ_MIN - 1
    cdef Py_ssize_t n = 0
    cdef Py_ssize_t guess = self._size_guess
    cdef const void* src = NULL
    cdef char* dst = NULL
    cdef object out = None
    _key(key, &k)
    self._enter()
    try:
        stmt = self._stmt(S_READ)
        if guess > 0:
            out = PyBytes_FromStringAndSize(NULL, guess)
            dst = PyBytes_AS_STRING(out)
        with nogil:
            rc = sqlite3_bind_int64(stmt, 2, inline_max)
            if rc == SQLITE_OK:
                rc = _step_key(stmt, &k)
            if rc == SQLITE_ROW:
                rowid = sqlite3_column_int64(stmt, 0)
                size = sqlite3_column_int64(stmt, 1)
                if sqlite3_column_type(stmt, 1) == SQLITE_NULL:
                    rc = _NULL_VALUE
                elif sqlite3_column_type(stmt, 2) != SQLITE_NULL:
                    inline = 1
                    src = sqlite3_column_blob(stmt, 2)
                    n = sqlite3_column_bytes(stmt, 2)
                    if n == guess and dst != NULL:
                        memcpy(dst, src, n)
                        copied = 1
                elif size > self._file_bytes:
                    suspect = 1
            if rc != SQLITE_ROW or copied or (size > limit and not suspect):
                sqlite3_reset(stmt)
        if copied:
            return out
        if rc == _NULL_VALUE:
            raise _null_value_error(self, key)
        if rc != SQLITE_ROW:
            if rc == SQLITE_DONE:
                return None
            raise self._error(rc, f"cannot read {key!r}")
        if suspect:
            _check_claim(self, size, f"the value of {key!r}", stmt)
            if size > limit:
                sqlite3_reset(stmt)
        if size > limit:
            return size
        # The statement is not reset yet: its read transaction keeps `src` and `rowid` valid.
        if not inline:
            # The blob's size in bytes (a value another program stored as TEXT has more
            # than length() counted characters), and its chain checked, before allocating.
            with nogil:
                rc = _open_value(self.db, rowid, -1, &blob)
                if rc == SQLITE_OK:
                    n = sqlite3_blob_bytes(blob)
        if rc == SQLITE_ROW or rc == SQLITE_OK:
            out = _new_value(n, blob, stmt)
            dst = PyBytes_AS_STRING(out)
            if inline:
                self._size_guess = n
                with nogil:
                    if n > 0:
                        memcpy(dst, src, n)
                    sqlite3_reset(stmt)
                return out
            with nogil:
                rc = sqlite3_blob_read(blob, dst, <int>n, 0)
        return _finish_read(self, rc, key, blob, stmt, out)
    finally:
        self._leave()


cdef object _get_into(Database self, object key, object out):
    cdef Key k
    cdef Py_buffer view
    cdef sqlite3_stmt* stmt
    cdef int rc
    cdef const void* src = NULL
    cdef Py_ssize_t n = 0
    cdef Py_ssize_t room
    _key(key, &k)
    PyObject_GetBuffer(out, &view, PyBUF_WRITABLE)
    try:
        self._enter()
        try:
            stmt = self._stmt(S_GET)
            with nogil:
                rc = _step_key(stmt, &k)
                if rc == SQLITE_ROW:
                    src = sqlite3_column_blob(stmt, 0)
                    n = sqlite3_column_bytes(stmt, 0)
                    if n <= view.len and n > 0 and src != NULL:
                        memcpy(view.buf, src, n)
                sqlite3_reset(stmt)
            if rc != SQLITE_ROW and rc != SQLITE_DONE:
                raise self._error(rc, f"cannot read {key!r}")
        finally:
            self._leave()
        room = view.len
    finally:
        PyBuffer_Release(&view)
    if rc == SQLITE_DONE:
        return None
    if n > room:
        raise ValueError(f"the value for {key!r} has {n} bytes; the buffer holds only {room}")
    return n


cdef object _get_range(Database self, object key, object start, object length):
    cdef Key k
    cdef sqlite3_stmt* locate
    cdef sqlite3_blob* blob = NULL
    cdef int rc
    cdef int64_t rowid = 0
    cdef int64_t size = 0
    cdef int64_t s = start
    cdef int64_t want
    cdef char* dst = NULL
    if length is not None and length < 0:
        raise ValueError(f"length must be >= 0 or None, not {length}")
    _key(key, &k)
    self._enter()
    try:
        locate = self._stmt(S_LOCATE)
        with nogil:
            rc = _step_key(locate, &k)
            if rc == SQLITE_ROW:
                rowid = sqlite3_column_int64(locate, 0)
                size = sqlite3_column_int64(locate, 1)
                if sqlite3_column_type(locate, 1) == SQLITE_NULL:
                    rc = _NULL_VALUE
            if rc == SQLITE_DONE or rc == _NULL_VALUE:
                sqlite3_reset(locate)
        if rc == SQLITE_DONE:
            return None
        if rc == _NULL_VALUE:
            raise _null_value_error(self, key)
        if rc != SQLITE_ROW:  # the error built while SQLite's message is still the step's
            self._raise(rc, locate, f"cannot read {key!r}")
        if size > self._file_bytes:
            _check_claim(self, size, f"the value of {key!r}", locate)
        if s < 0:
            s = size + s if size + s > 0 else 0
        elif s > size:
            s = size
        want = size - s
        if length is not None and length < want:
            want = length
        rc = SQLITE_OK
        if want > 0:
            with nogil:  # the chain as far as the range reaches
                rc = _open_value(self.db, rowid, s + want, &blob)
        out = None
        if rc == SQLITE_OK:
            out = _new_value(want, blob, locate)
            dst = PyBytes_AS_STRING(out)
            if want > 0:
                with nogil:
                    rc = sqlite3_blob_read(blob, dst, <int>want, <int>s)
        return _finish_read(self, rc, key, blob, locate, out)
    finally:
        self._leave()


cdef list _get_ranges(Database self, object requests):
    cdef list reqs = list(requests)
    cdef Py_ssize_t count = len(reqs)
    cdef Py_ssize_t i
    cdef Key* keys = NULL
    cdef int64_t* starts = NULL
    cdef int64_t* lengths = NULL  # in: requested (-1 = to the end); out: clamped
    cdef int64_t* rowids = NULL
    cdef char** dests = NULL
    cdef sqlite3_stmt* locate
    cdef sqlite3_blob* blob = NULL
    cdef int rc = SQLITE_OK
    cdef int began = 0
    cdef bint read = False  # every range read: the read transaction ends with a commit
    cdef int64_t size, s, want
    cdef Py_ssize_t failed_at = -1
    cdef list results
    cdef list keepalive
    if count == 0:
        return []
    keys = <Key*>malloc(count * sizeof(Key))
    starts = <int64_t*>malloc(count * sizeof(int64_t))
    lengths = <int64_t*>malloc(count * sizeof(int64_t))
    rowids = <int64_t*>malloc(count * sizeof(int64_t))
    dests = <char**>malloc(count * sizeof(char*))
    keepalive = [None] * count
    try:
        if keys == NULL or starts == NULL or lengths == NULL or rowids == NULL or dests == NULL:
            raise MemoryError()
        for i in range(count):
            key, start, length = reqs[i]
            keepalive[i] = key
            _key(key, &keys[i])
            starts[i] = start
            if length is None:
                lengths[i] = -1
            elif length < 0:
                raise ValueError(f"length must be >= 0 or None, not {length}")
            else:
                lengths[i] = length
        self._enter()
        try:
            locate = self._stmt(S_LOCATE)
            # One read transaction, so the rowids found in pass 1 still hold in pass 2.
            began = self._begin_if_needed(S_BEGIN_READ)
            try:
                # Pass 1: where each value is and how much of it to read.
                i = 0
                while True:
                    with nogil:
                        while i < count:
                            rc = _step_key(locate, &keys[i])
                            if rc == SQLITE_ROW and sqlite3_column_type(locate, 1) == SQLITE_NULL:
                                rc = _NULL_VALUE
                                failed_at = i
                                break
                            if rc == SQLITE_ROW:
                                rowids[i] = sqlite3_column_int64(locate, 0)
                                size = sqlite3_column_int64(locate, 1)
                                if size > self._file_bytes:
                                    rc = _CLAIM
                                    break
                                s = starts[i]
                                if s < 0:
                                    s = size + s if size + s > 0 else 0
                                elif s > size:
                                    s = size
                                want = size - s
                                if lengths[i] >= 0 and lengths[i] < want:
                                    want = lengths[i]
                                starts[i] = s
                                lengths[i] = want
                                rc = SQLITE_OK
                            elif rc == SQLITE_DONE:
                                rowids[i] = 0
                                lengths[i] = -1  # missing
                                rc = SQLITE_OK
                            else:
                                failed_at = i
                                break
                            sqlite3_reset(locate)
                            i += 1
                    if rc != _CLAIM:
                        break
                    # Longer than the file was when last asked: ask again (in this read
                    # transaction's snapshot), then look the key up again.
                    _check_claim(self, size, f"the value of {reqs[i][0]!r}", locate)
                    sqlite3_reset(locate)
                if rc != SQLITE_OK:
                    if rc == _NULL_VALUE:
                        sqlite3_reset(locate)
                        raise _null_value_error(self, reqs[failed_at][0])
                    self._raise(rc, locate, f"cannot read {reqs[failed_at][0]!r}")
                # The chains of the ranges that reach past what a page holds inline,
                # checked before anything is allocated for them.
                with nogil:
                    for i in range(count):
                        if lengths[i] <= 0 or starts[i] + lengths[i] < _BLOB_READ_MIN:
                            continue
                        if blob == NULL:
                            rc = sqlite3_blob_open(self.db, "main", _TABLE_C, "v", rowids[i],
                                                   0, &blob)
                        else:
                            rc = sqlite3_blob_reopen(blob, rowids[i])
                        if rc == SQLITE_OK:
                            rc = zarrdb_blob_chain_check(blob, starts[i] + lengths[i])
                        if rc != SQLITE_OK:
                            failed_at = i
                            break
                if rc != SQLITE_OK:
                    raise _read_error(self, rc, reqs[failed_at][0])
                # The result objects, allocated with the GIL.
                results = [None] * count
                for i in range(count):
                    if lengths[i] >= 0:
                        out = PyBytes_FromStringAndSize(NULL, lengths[i])
                        results[i] = out
                        dests[i] = PyBytes_AS_STRING(out)
                    else:
                        dests[i] = NULL
                # Pass 2: read each range straight into its result.
                with nogil:
                    for i in range(count):
                        if dests[i] == NULL or lengths[i] == 0:
                            continue
                        if blob == NULL:
                            rc = sqlite3_blob_open(self.db, "main", _TABLE_C, "v", rowids[i],
                                                   0, &blob)
                        else:
                            rc = sqlite3_blob_reopen(blob, rowids[i])
                        if rc == SQLITE_OK:
                            rc = sqlite3_blob_read(blob, dests[i], <int>lengths[i],
                                                   <int>starts[i])
                        if rc != SQLITE_OK:
                            failed_at = i
                            break
                if rc != SQLITE_OK:
                    self._raise(rc, NULL, f"cannot read {reqs[failed_at][0]!r}")
                read = True
            finally:
                if blob != NULL:
                    with nogil:
                        sqlite3_blob_close(blob)
                # After a failed read SQLite may have ended the transaction itself (an I/O
                # error rolls it back): ending it again must not replace the read's error.
                if began:
                    self._finish(began, read)
        finally:
            self._leave()
        return results
    finally:
        free(keys)
        free(starts)
        free(lengths)
        free(rowids)
        free(dests)


cdef object _lookup_int(Database self, Stmt which, object key):
    cdef Key k
    cdef sqlite3_stmt* stmt
    cdef int rc
    cdef int64_t value = 0
    cdef bint suspect = False  # a length, longer than the file was when last asked
    _key(key, &k)
    self._enter()
    try:
        stmt = self._stmt(which)
        with nogil:
            rc = _step_key(stmt, &k)
            value = sqlite3_column_int64(stmt, 0) if rc == SQLITE_ROW else 0
            suspect = which == S_LENGTH and value > self._file_bytes
            if rc == SQLITE_DONE or (rc == SQLITE_ROW and not suspect):
                sqlite3_reset(stmt)
        if rc == SQLITE_DONE:
            return None
        if rc != SQLITE_ROW:
            self._raise(rc, stmt, f"cannot read {key!r}")
        if suspect:
            _check_claim(self, value, f"the value of {key!r}", stmt)
            sqlite3_reset(stmt)
        return value
    finally:
        self._leave()


cdef object _read_error(Database self, int rc, object key):
    """The exception for a read of `key` that failed with `rc` (or ZARRDB_CHAIN_LOOP)."""
    if rc == ZARRDB_CHAIN_LOOP:
        return _errors.DatabaseCorruptError(
            f"{self.path!r}: the value of {key!r} continues on a chain of pages that comes "
            "back to a page it has passed already, so it would read the same bytes over "
            "and over: the file is damaged or crafted ('zarrdb check' lists what SQLite "
            "finds)",
            code=SQLITE_CORRUPT, filename=self.path,
        )
    return self._error(rc, f"cannot read {key!r}")


cdef object _null_value_error(Database self, object key):
    return _errors.DatabaseCorruptError(
        f"{self.path!r}: the value of {key!r} is NULL; a SQLiteStore file must not hold "
        "NULL values (written by another program?)",
        code=SQLITE_CORRUPT, filename=self.path,
    )


cdef int _check_claim(Database self, object claimed, str what, sqlite3_stmt* active) except -1:
    """Called with a claim larger than the file was when last asked, in the snapshot the
    claim was read in (`active` not reset yet, or a transaction open): ask the file's size
    again; DatabaseCorruptError (`active` reset) if the claim is larger still.

    In a sound file no value, and no set of values, is longer than the file; SQLite's own
    reads of a value refuse one that is (sqlite3BtreeMaxRecordSize). Its blob API and
    length() take the record's word for it: an overflow chain that loops back, shared by
    several keys, makes a few pages read as gigabytes. Checked before anything is
    allocated."""
    cdef sqlite3_stmt* stmt = self._stmt(S_FILE_BYTES)
    cdef int rc
    with nogil:
        rc = sqlite3_step(stmt)
    if rc != SQLITE_ROW:
        err = self._error(rc, "cannot read the size of the file")
        sqlite3_reset(stmt)
        if active != NULL:
            sqlite3_reset(active)
        raise err
    self._file_bytes = sqlite3_column_int64(stmt, 0)
    sqlite3_reset(stmt)
    if claimed <= self._file_bytes:
        return 0
    if active != NULL:
        sqlite3_reset(active)
    raise _errors.DatabaseCorruptError(
        f"{self.path!r}: {what} claims {claimed:,} bytes, more than the whole file holds "
        f"({self._file_bytes:,} bytes): the file is damaged or crafted ('zarrdb check' "
        "lists what SQLite finds)",
        code=SQLITE_CORRUPT, filename=self.path,
    )
