# Opening a connection: what every connection zarrdb opens is set up with (SQLite's run-time
# limits and defensive mode against the file's schema, its own wait for locks, a look at Python's
# signals during long statements) and Database.__init__'s work (_open). Included into _core.pyx
# before the Database class (_connection.pxi).

# SQLite's run-time limits on every connection zarrdb opens (set by _harden before the file's
# schema is first parsed), by name: (SQLite's limit, value), each with its reason. The SQL
# zarrdb prepares is its own; the schema is the file's author's, and SQLite parses all of it at
# the first statement, so these bound what a hostile schema can make the parser do. The build's
# own ceilings are in setup.py (a limit here can only lower them). A file whose schema breaks
# one cannot be opened (it reads as a malformed schema: zarrdb.errors.DatabaseCorruptError).
CONNECTION_LIMITS = {
    # Nesting of an expression, a subquery or a view. SQLite walks expression trees
    # recursively: 150,000 nested terms overflowed the C stack (a crash at open). zarrdb's
    # statements nest under 10 and a spec file has no expression at all; 100 is a tenth of
    # SQLite's default ceiling, so also threads with small stacks parse it safely.
    "EXPR_DEPTH": (SQLITE_LIMIT_EXPR_DEPTH, 100),
    # One statement's text, including each CREATE of the schema. zarrdb's longest statement is
    # under 300 bytes, the spec's CREATE TABLEs under 100; 1 MB leaves any hand-written table
    # of other data room while bounding the parser's work per statement.
    "SQL_LENGTH": (SQLITE_LIMIT_SQL_LENGTH, 1_000_000),
    # Columns of a table, an index, a result or an ORDER BY. The spec's tables have 2 and
    # zarrdb's results (pragmas included) fewer than 10; 1,000 (SQLite's default is 2,000)
    # still parses any other table a person would make.
    "COLUMN": (SQLITE_LIMIT_COLUMN, 1000),
    # Terms of a UNION/INTERSECT/EXCEPT chain, which SQLite processes recursively. zarrdb uses
    # none, and views, where a schema could hold them, are refused.
    "COMPOUND_SELECT": (SQLITE_LIMIT_COMPOUND_SELECT, 8),
    # Arguments of one function call: zarrdb's most is 2 (strftime, zeroblob, coalesce).
    "FUNCTION_ARG": (SQLITE_LIMIT_FUNCTION_ARG, 8),
    # No ATTACH: a statement can only ever reach the one file that was opened.
    "ATTACHED": (SQLITE_LIMIT_ATTACHED, 0),
    # zarrdb never uses LIKE or GLOB (listings are range scans); a pattern in a schema could
    # only make matching slow.
    "LIKE_PATTERN_LENGTH": (SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 50),
    # The highest parameter number: zarrdb's statements bind ?1 and ?2, one row per step,
    # batches included (a batch reuses one statement); Database.execute's callers bind at most 2.
    "VARIABLE_NUMBER": (SQLITE_LIMIT_VARIABLE_NUMBER, 16),
    # 0: no trigger program ever runs (a trigger that fires fails its statement). No writer
    # of the format makes triggers and a file holding one is refused at open; this holds even
    # if a trigger were added after the check.
    "TRIGGER_DEPTH": (SQLITE_LIMIT_TRIGGER_DEPTH, 0),
}

cdef int _N_LIMITS = len(CONNECTION_LIMITS)
cdef int _LIMIT_IDS[16]
cdef int _LIMIT_VALUES[16]
if _N_LIMITS > 16:  # pragma: no cover - a table grown past its arrays
    raise ImportError("CONNECTION_LIMITS has more entries than _harden's arrays hold")
for _i, (_id, _value) in enumerate(CONNECTION_LIMITS.values()):
    _LIMIT_IDS[_i] = _id
    _LIMIT_VALUES[_i] = _value
del _i, _id, _value


cdef int _harden(sqlite3* handle) noexcept nogil:
    """Make a new connection distrust the file's schema: SQLite's defensive mode (the schema
    and shadow tables cannot be written by hand, no journal_mode=OFF), trusted_schema off
    (SQL stored in the file may only call functions without side effects) and the run-time
    limits of CONNECTION_LIMITS. Every connection zarrdb opens goes through here, before its
    first statement; the file's schema is checked at open (_format.validate)."""
    cdef int i
    cdef int rc = sqlite3_db_config(handle, SQLITE_DBCONFIG_DEFENSIVE, 1, <int*>NULL)
    if rc == SQLITE_OK:
        rc = sqlite3_db_config(handle, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, <int*>NULL)
    for i in range(_N_LIMITS):
        sqlite3_limit(handle, _LIMIT_IDS[i], _LIMIT_VALUES[i])
    return rc


cdef int _progress(void* arg) noexcept nogil:
    """SQLite's progress handler while the main thread runs a long statement: non-zero (the
    statement stops with SQLITE_INTERRUPT) when a signal handler raised, e.g. KeyboardInterrupt
    for Ctrl-C or the command line's SIGTERM."""
    with gil:
        return (<Database>arg)._signal_raised()


_JOURNAL_MODES = ("delete", "truncate", "persist", "memory", "wal", "off")
_SYNCHRONOUS = ("off", "normal", "full", "extra")
_CHECKPOINT_MODES = {
    "passive": SQLITE_CHECKPOINT_PASSIVE,
    "full": SQLITE_CHECKPOINT_FULL,
    "restart": SQLITE_CHECKPOINT_RESTART,
    "truncate": SQLITE_CHECKPOINT_TRUNCATE,
}


def _file_uri(path, immutable):
    from urllib.parse import quote

    absolute = os.path.abspath(path).replace(os.sep, "/")
    if not absolute.startswith("/"):
        absolute = "/" + absolute  # Windows drive letters: file:///C:/...
    uri = "file:" + quote(absolute, safe="/:")
    return uri + ("?immutable=1" if immutable else "")


# ---------------------------------------------------------------------------------------------
# Waiting for locks. SQLite's own busy handler sleeps 1, 2, 5, 10 ... up to 100 ms between tries;
# a reader blocked by a commit that takes a millisecond would often sleep 25 ms or more. This one
# tries again after 50 microseconds at first, then less often, until the connection's timeout.

cdef struct BusyWait:
    int64_t timeout_us
    int64_t started_us
    # Counted here, in whatever thread waits (the writer's never holds the GIL), and logged
    # from Python afterwards (Database._note_lock_waits): waits begun, microseconds slept.
    int64_t waits
    int64_t slept_us


cdef int _busy_wait(void* arg, int count) noexcept nogil:
    cdef BusyWait* wait = <BusyWait*>arg
    cdef int64_t now = zt_monotonic_us()
    cdef int64_t left
    cdef int64_t delay
    cdef sqlite3_vfs* vfs
    if count == 0:
        wait.started_us = now
        wait.waits += 1
    left = wait.timeout_us - (now - wait.started_us)
    if left <= 0:
        return 0  # give up: the caller gets SQLITE_BUSY
    delay = 50 if count < 20 else (250 if count < 100 else 2000)
    if delay > left:
        delay = left
    wait.slept_us += delay
    vfs = sqlite3_vfs_find(NULL)
    vfs.xSleep(vfs, <int>delay)
    return 1


cdef int _open(Database self, object path, object mode, bint uri, bint immutable,
               object busy_timeout, object page_size, object cache_size,
               object mmap_size, object synchronous, object journal_mode, object vfs,
               bint cell_size_check) except -1:
    """Database.__init__: open the connection, distrust the file, check what is beside
    it, and apply the settings; on any failure the connection is closed again."""
    cdef int flags
    cdef int rc
    cdef sqlite3* handle = NULL
    cdef bytes target
    cdef const char* c_target
    cdef bytes vfs_name = None if vfs is None else vfs.encode("utf-8")
    cdef const char* c_vfs = NULL
    if self.db != NULL:
        raise _errors.MisuseError("Database.__init__ called twice", code=SQLITE_MISUSE)
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if mode not in ("r", "w", "c"):
        raise ValueError(f"mode must be 'r', 'w' or 'c', not {mode!r}")
    if not uri and os.path.isdir(path):
        raise _errors.CantOpenError(
            f"cannot open {path!r}: is a directory (a database is a single file)",
            code=SQLITE_CANTOPEN, filename=path, sqlite_message="is a directory",
        )
    # The -wal, -shm and -journal SQLite would read as part of the file must be its own.
    sidecars = None if uri else _beside.check(path)
    if sidecars is not None:
        zpp_point("open.beside")  # (test builds) what is beside the file was sized, not opened
    if immutable:
        mode = "r"
    flags = SQLITE_OPEN_EXRESCODE | SQLITE_OPEN_NOMUTEX
    if mode == "r":
        flags |= SQLITE_OPEN_READONLY
    elif mode == "w":
        flags |= SQLITE_OPEN_READWRITE
    else:
        flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
    if uri:
        target = path.encode("utf-8")
        flags |= SQLITE_OPEN_URI
    elif immutable:
        target = _file_uri(path, True).encode("utf-8")
        flags |= SQLITE_OPEN_URI
    else:
        target = path.encode("utf-8")
    c_target = target
    if vfs_name is not None:
        c_vfs = vfs_name
    elif not uri:
        c_vfs = zarrdb_guarded_vfs()  # a -wal or -journal planted later is not read
    with nogil:
        rc = sqlite3_open_v2(c_target, &handle, flags, c_vfs)
    if rc != SQLITE_OK:
        err = _sqlite_exception(rc, handle, path, "cannot open")
        with nogil:
            sqlite3_close_v2(handle)
        raise err
    self.db = handle
    self.pid = zarrdb_getpid()
    if self.path is None:  # (a subclass may have named the file already: a remote URL)
        self.path = path
    self.readonly = mode == "r"
    try:
        with nogil:
            rc = _harden(handle)
        if rc != SQLITE_OK:
            raise self._error(rc, "cannot configure the connection to")
        if sidecars is not None and vfs is None:
            self.beside = sidecars
            self.header = (self._main_head() or (b"", 0))[0]
            _beside.check_header(path, sidecars, self._main_head, self._main_data)
        self._busy_timeout = max(
            0.0, float(_tunables.BUSY_TIMEOUT if busy_timeout is None else busy_timeout))
        self._busy.timeout_us = <int64_t>self._busy_ms() * 1000
        with nogil:
            sqlite3_busy_handler(handle, _busy_wait, &self._busy)
        if cell_size_check:
            # Each cell of a b-tree page is checked to lie inside the page as the page is
            # loaded. Free where pages stay in SQLite's cache (a remote file; opening and
            # reading every value of a local file without memory mapping: within the noise),
            # not with memory mapping, where every lookup loads its pages again: a get of a
            # 1 KiB value took 16.9 us instead of 7.5, a length 12.9 instead of 6.6. So it
            # is for files from others (remote files, the command line, check_pages=True).
            self._exec_simple("PRAGMA cell_size_check = ON")
        # Reading the schema makes SQLite read the header now: a file that is not a
        # database fails here, at open, not at the first get().
        self._exec_simple("SELECT count(*) FROM sqlite_schema")
        # CHECK constraints are SQL of the file's author that would run on every write
        # (the spec's tables have none).
        self._exec_simple("PRAGMA ignore_check_constraints = ON")
        if page_size is not None:
            page_size = int(page_size)
            if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
                raise ValueError(f"page_size must be a power of two from 512 to 65536, not {page_size}")
            self._exec_simple(f"PRAGMA page_size = {page_size}")
        if cache_size is not None:
            self._exec_simple(f"PRAGMA cache_size = {-int(cache_size)}")
        if mmap_size is not None:
            self._exec_simple(f"PRAGMA mmap_size = {int(mmap_size)}")
        if synchronous is not None:
            if str(synchronous).lower() not in _SYNCHRONOUS:
                raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, not {synchronous!r}")
            self._exec_simple(f"PRAGMA synchronous = {synchronous}")
        if journal_mode is not None:
            self.journal_mode(journal_mode)
    except BaseException:
        self._close()
        raise
    return 0
