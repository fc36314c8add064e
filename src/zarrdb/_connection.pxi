# The Database class: one SQLite connection, its state, and the plumbing every method shares
# (entering and leaving, errors, prepared statements, transactions). Its methods are listed here;
# the work of its rooms is in _reads.pxi, _listings.pxi and _maintenance.pxi, and its opening in
# _connection_open.pxi. Included into _core.pyx.


cdef class Database(_FileStatements):
    """One SQLite connection to a file with a `zarr(k TEXT PRIMARY KEY, v BLOB)` table.

    Used by one thread at a time (simultaneous use raises ConcurrentUseError); unusable in a
    child process after fork (ForkedProcessError).
    """

    cdef sqlite3* db
    cdef sqlite3_stmt* stmts[<int>S_COUNT]
    cdef long pid
    cdef int busy
    cdef readonly str path
    cdef readonly bint readonly
    # What was beside the file when it was opened (_beside.Found; None for a URI or another
    # VFS), and its header's first 100 bytes as SQLite's handle read them then (b"" if none).
    cdef readonly object beside
    cdef readonly bytes header
    cdef double _busy_timeout
    cdef BusyWait _busy
    cdef int64_t _waits_noted  # _busy's waits and sleep already logged
    cdef int64_t _slept_noted
    cdef Py_ssize_t _size_guess
    # The file's size in bytes when last asked (0: not yet): a value that claims more makes
    # the connection ask again (_check_claim); one that claims less costs one comparison.
    cdef int64_t _file_bytes
    cdef bint _watching  # the progress handler is installed (see _watch)
    cdef object _interruption  # what a signal handler raised inside a statement

    def __cinit__(self):
        self.db = NULL
        self.busy = 0
        self._watching = False
        self._interruption = None
        self._size_guess = 0
        self._file_bytes = 0
        self.beside = None
        self.header = b""
        for i in range(<int>S_COUNT):
            self.stmts[i] = NULL

    def __init__(
        self,
        path,
        *,
        mode="c",
        uri=False,
        immutable=False,
        busy_timeout=None,
        page_size=None,
        cache_size=None,
        mmap_size=None,
        synchronous=None,
        journal_mode=None,
        vfs=None,
        cell_size_check=False,
    ):
        _open(self, path, mode, uri, immutable, busy_timeout, page_size, cache_size,
              mmap_size, synchronous, journal_mode, vfs, cell_size_check)

    # --- plumbing ---------------------------------------------------------------------------

    def _main_head(self):
        """(the header's 100 bytes, the file's size), read through SQLite's own handle of the
        file; None if it cannot be read."""
        cdef unsigned char buf[100]
        cdef int64_t size = 0
        cdef int rc
        with nogil:
            rc = zarrdb_main_head(self.db, buf, 100, &size)
        if rc != SQLITE_OK:
            return None
        return PyBytes_FromStringAndSize(<char*>buf, 100), size

    def _main_data(self, upto):
        """How many of the first `upto` bytes of the file hold data, not holes (all of them
        where the file system cannot tell), asked through SQLite's own handle of the file."""
        cdef int64_t n = upto
        with nogil:
            n = zarrdb_main_data(self.db, n)
        return n

    cdef int _busy_ms(self) noexcept nogil:
        if self._busy_timeout * 1000 >= 2147483647:
            return 2147483647
        return <int>(self._busy_timeout * 1000)

    cdef int _enter(self) except -1:
        if self.db == NULL:
            raise _errors.ClosedError(f"the database {self.path!r} is closed")
        if self.pid != _current_pid:
            raise _errors.ForkedProcessError(
                f"the connection to {self.path!r} was opened in process {self.pid} and cannot "
                "be used after fork(); open the database again in this process"
            )
        if self.busy:
            raise _errors.ConcurrentUseError(
                f"the connection to {self.path!r} is in use by another thread; "
                "give each thread its own Database"
            )
        if self._busy.waits != self._waits_noted:
            # The main thread's waits of its last call, logged here, where an exception can be
            # raised: logging runs Python code, in which a signal's handler may raise (Ctrl-C
            # during the wait), and _leave could only swallow it.
            self._note_lock_waits()
        self.busy = 1
        return 0

    cdef inline void _leave(self) noexcept:
        if self._watching:
            sqlite3_progress_handler(self.db, 0, NULL, NULL)
            self._watching = False
        self.busy = 0
        if self._busy.waits != self._waits_noted and PyThread_get_thread_ident() != _main_thread:
            # (Only the main thread runs signal handlers: in any other, logging raises nothing
            # that must reach the caller. The main thread's are logged by its next call.)
            try:
                self._note_lock_waits()
            except BaseException:
                pass  # logging's own handlers report their failures; a read or write goes on

    cdef int _note_lock_waits(self) except -1:
        """Log the waits for another connection's lock since the last ones logged; raises
        only what a signal's handler raised meanwhile (logging reports its own failures)."""
        cdef int64_t waits = self._busy.waits
        cdef int64_t slept = self._busy.slept_us
        cdef int64_t new_waits = waits - self._waits_noted
        cdef int64_t new_slept = slept - self._slept_noted
        if new_waits == 0:
            return 0
        self._waits_noted = waits  # noted first: a signal's exception below logs them not again
        self._slept_noted = slept
        try:
            _log.lock_waits(self.path, new_waits, new_slept / 1e6)
        except Exception:
            pass
        return 0

    def note_lock_waits(self):
        """Log the waits for locks this connection's writer thread made since the last ones
        logged (read without the lock: the writer thread counts them without the GIL)."""
        self._note_lock_waits()

    cdef void _watch(self) noexcept:
        """Before a statement that may run long (a scan, an integrity check, VACUUM): if this
        is the thread Python runs signal handlers in, let them run while it does, so Ctrl-C and
        SIGTERM interrupt it. Undone by _leave. Other threads never take the GIL for it."""
        self._interruption = None
        if PyThread_get_thread_ident() == _main_thread:
            sqlite3_progress_handler(self.db, _PROGRESS_STEPS, _progress, <void*>self)
            self._watching = True

    cdef int _signal_raised(self) noexcept:
        try:
            PyErr_CheckSignals()
        except BaseException as exc:  # raised again by _error, once SQLite has stopped
            self._interruption = exc
            return 1
        return 0

    @cython.final
    cdef object _error(self, int rc, str context=""):
        """The exception for `rc` on this connection; call before anything else touches it.
        What a kind of connection knows beyond SQLite (_error_beyond) and a signal handler's
        exception (a statement it interrupted) come first; else the one builder's.
        Final: a subclass adds to it through _error_beyond, it cannot replace it."""
        beyond = self._error_beyond(rc)
        if self._interruption is not None:
            raised, self._interruption = self._interruption, None
            return raised
        if beyond is not None:
            return beyond
        return _planted_sidecar(
            self, rc, _sqlite_exception(rc, self.db, self.path, context, self._busy_timeout))

    cdef object _error_beyond(self, int rc):
        """What a subclass knows of a failure that SQLite does not (None: nothing); called for
        every failure, so that it can forget what it kept for one."""
        return None

    cdef int _raise(self, int rc, sqlite3_stmt* stmt, str context="") except -1:
        """Raise the exception for `rc` (built while SQLite's message is still the connection's),
        after resetting `stmt` (if any) so that it holds no lock or read transaction."""
        err = self._error(rc, context)
        if stmt != NULL:
            sqlite3_reset(stmt)
        raise err

    cdef sqlite3_stmt* _stmt(self, Stmt which) except NULL:
        cdef sqlite3_stmt* stmt = self.stmts[<int>which]
        cdef int rc
        cdef const char* sql
        if stmt != NULL:
            return stmt
        sql = _SQL[<int>which]
        with nogil:
            rc = sqlite3_prepare_v3(self.db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, NULL)
        if rc != SQLITE_OK:
            raise self._error(rc, "cannot prepare a statement (is this a SQLiteStore file?)")
        self.stmts[<int>which] = stmt
        return stmt

    cdef int _exec_simple(self, str sql) except -1:
        """Run one statement that returns at most rows we do not need."""
        cdef bytes b = sql.encode("utf-8")
        cdef const char* c_sql = b
        cdef sqlite3_stmt* stmt = NULL
        cdef int rc
        with nogil:
            rc = sqlite3_prepare_v2(self.db, c_sql, -1, &stmt, NULL)
            if rc == SQLITE_OK:
                rc = sqlite3_step(stmt)
                while rc == SQLITE_ROW:
                    rc = sqlite3_step(stmt)
        if rc != SQLITE_DONE and rc != SQLITE_OK:
            err = self._error(rc)
            with nogil:
                sqlite3_finalize(stmt)
            raise err
        with nogil:
            sqlite3_finalize(stmt)
        return 0

    cdef int _step_simple(self, Stmt which, str context) except -1:
        cdef sqlite3_stmt* stmt = self._stmt(which)
        cdef int rc
        with nogil:
            rc = sqlite3_step(stmt)
        if rc != SQLITE_DONE:
            self._raise(rc, stmt, context)
        sqlite3_reset(stmt)
        return 0

    cdef int _begin_if_needed(self, Stmt which) except -1:
        """Make the next statements one unit: begin a transaction (returns 1) or, inside an
        open one, a savepoint (returns 2; only for writes, `which` = S_BEGIN_WRITE)."""
        if not sqlite3_get_autocommit(self.db):
            if which == S_BEGIN_WRITE:
                self._step_simple(S_SAVEPOINT, "cannot begin a savepoint")
                return 2
            return 0
        self._step_simple(which, "cannot begin a transaction")
        return 1

    cdef int _finish(self, int began, bint ok) except -1:
        """End what _begin_if_needed began: commit or release it (ok), else roll it back. A
        transaction whose commit fails is rolled back: nothing of it was written."""
        if began == 0:
            return 0
        if began == 2:
            if not ok:
                self._step_simple(S_ROLLBACK_TO, "cannot roll back a savepoint")
            self._step_simple(S_RELEASE, "cannot release a savepoint")
            return 0
        if ok:
            try:
                self._step_simple(S_COMMIT, "cannot commit")
            except BaseException:
                if not sqlite3_get_autocommit(self.db):
                    self._step_simple(S_ROLLBACK, "cannot roll back")
                raise
        elif not sqlite3_get_autocommit(self.db):
            self._step_simple(S_ROLLBACK, "cannot roll back")
        return 0

    cdef int _begin_snapshot(self) except -1:
        """Begin a read transaction unless one is open (returns 1 if it began one): the
        statements up to _end_snapshot see the file as of one moment."""
        self._enter()
        try:
            return self._begin_if_needed(S_BEGIN_READ)
        finally:
            self._leave()

    cdef int _end_snapshot(self, int began) except -1:
        self._enter()
        try:
            self._finish(began, True)
        finally:
            self._leave()

    # --- life cycle ---------------------------------------------------------------------

    @property
    def closed(self):
        return self.db == NULL

    @property
    def in_transaction(self):
        return self.db != NULL and not sqlite3_get_autocommit(self.db)

    @property
    def busy_timeout(self):
        return self._busy_timeout

    def interrupt(self):
        """Make the statement another thread is running on this connection stop at once (it
        raises OperationInterruptedError); callable from any thread."""
        if self.db != NULL and self.pid == _current_pid:
            sqlite3_interrupt(self.db)

    cdef void _close(self) noexcept:
        cdef sqlite3* handle = self.db
        cdef int i
        if handle == NULL:
            return
        self.db = NULL
        if self.pid != zarrdb_getpid():
            # The parent owns this connection and its locks; forget it, touch nothing.
            return
        with nogil:
            for i in range(<int>S_COUNT):
                if self.stmts[i] != NULL:
                    sqlite3_finalize(self.stmts[i])
                    self.stmts[i] = NULL
            sqlite3_close_v2(handle)

    def close(self):
        """Close the connection; idempotent. In a forked child it only forgets the handle."""
        if self.busy:
            raise _errors.ConcurrentUseError(
                f"cannot close {self.path!r} while another thread is using it"
            )
        self._close()

    def __dealloc__(self):
        self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        state = "closed" if self.db == NULL else ("read-only" if self.readonly else "read-write")
        return f"<zarrdb._core.Database {self.path!r} {state}>"

    def __reduce__(self):
        raise TypeError(
            "a Database is one connection and cannot be pickled; pickle the SQLiteStore "
            "(it reopens in the new process) or open a new Database there"
        )

    # --- reads --------------------------------------------------------------------------

    def get(self, key):
        """The value stored under `key` as bytes, or None."""
        return _read(self, key, _MAX_VALUE)

    def get_limited(self, key, limit):
        """The value of `key` if it is at most `limit` bytes long; otherwise its length (an
        int; nothing read); None if the key is missing."""
        return _read(self, key, limit)

    def get_into(self, key, out):
        """Copy the value into the writable buffer `out`; its length, or None if missing.
        ValueError (nothing copied) if `out` is smaller than the value. A test hook (test
        builds only)."""
        _test_hook("Database.get_into")
        return _get_into(self, key, out)

    def get_range(self, key, start, length):
        """Bytes [start, start+length) of the value, clamped to its end; length None: to the
        end; start < 0: the last -start bytes. A start past the end gives b"".

        One lookup and one blob read, without get_ranges' arrays and its explicit read
        transaction: the lookup's statement stays active until the range is read, and its read
        transaction keeps the rowid it found valid."""
        return _get_range(self, key, start, length)

    def get_many(self, keys):
        """The values of `keys`, in order, None for a missing key."""
        return self.get_ranges([(key, 0, None) for key in keys])

    def get_ranges(self, requests):
        """Byte ranges of several values, as get_range, in one batch and one snapshot."""
        return _get_ranges(self, requests)

    def exists(self, key):
        """True if `key` is stored."""
        return _lookup_int(self, S_EXISTS, key) is not None

    def length(self, key):
        """The length of the value of `key` in bytes (read without reading the value), or None."""
        return _lookup_int(self, S_LENGTH, key)

    # --- writes: run by the writer thread (_writer_thread.pxi) ----------------------------------

    cdef int _prepare_writes(self) except -1:
        """Prepare the statements write operations run (_writer_ops.pxi), before any runs nogil."""
        cdef Stmt which
        for which in _WRITE_STMTS:
            self._stmt(which)
        return 0

    # --- listings -----------------------------------------------------------------------

    def list_keys(self):
        """Every key, in BINARY (UTF-8 byte) order."""
        return self.list_prefix("")

    def list_prefix(self, prefix):
        """Keys that start with `prefix`, in BINARY (UTF-8 byte) order."""
        return _list_prefix(self, prefix)

    def list_dir(self, prefix):
        """Children of `prefix` ("" or ending in "/"), relative to it, sorted: a stored key as
        its name, a sub-tree as its name with a trailing "/". One index seek per child."""
        return _list_dir(self, prefix)

    def has_prefix(self, prefix):
        """True if any key starts with `prefix` (one index seek)."""
        return _scalar_range(self, S_ANY_ALL, S_ANY_RANGE, prefix) == 1

    def list_prefix_sizes(self, prefix):
        """(key, value length) for every key that starts with `prefix`, sorted; the lengths
        come from the row headers, the values are not read."""
        return _list_prefix_sizes(self, prefix)

    def rename_prefix(self, old, new):
        """Move every key that starts with `old` to start with `new` instead, in one
        transaction (or inside the open one); returns how many keys moved. ConstraintError
        (nothing moved) if a new key exists already. Maintenance: the store runs it on the
        write connection its writer hands over (Writer.call_holding)."""
        return _rename_prefix(self, old, new)

    def size_prefix(self, prefix):
        """The total length in bytes of the values whose keys start with `prefix`."""
        return _scalar_range(self, S_SIZE_ALL, S_SIZE_RANGE, prefix)

    def count_prefix(self, prefix):
        """How many keys start with `prefix`."""
        return _scalar_range(self, S_COUNT_ALL, S_COUNT_RANGE, prefix)

    # --- schema and maintenance work ---------------------------------------------------------

    def _atomic(self):
        """A context manager making the block's statements one unit: BEGIN IMMEDIATE .. COMMIT,
        or a savepoint inside the open transaction; rolled back if the block raises. Keys are
        written by the writer thread (Writer); this is for the SQL of creating a file and of
        maintenance on a connection no writer runs or that Writer.call_holding() handed over."""
        return _Atomic(self)

    def _atomic_call(self, fn):
        """`fn(self)` as one unit (as _atomic), returning what it returns: begun, then
        committed, or rolled back if `fn` raises, inside this one compiled call. Python code
        uses this, not `with _atomic()`: on CPython 3.14 a signal's exception can be raised as
        the compiled __enter__ returns, before the block is protected, which would leave the
        transaction open on the connection (see Writer.call_holding)."""
        return _atomic_call(self, fn)

    # --- maintenance and plain SQL ----------------------------------------------------------

    def checkpoint(self, mode="passive"):
        """Checkpoint the WAL; returns (frames in the WAL, frames checkpointed)."""
        return _checkpoint(self, mode)

    def journal_mode(self, mode=None):
        """The journal mode, after setting it to `mode` if given."""
        return _journal_mode(self, mode)

    def integrity_check(self, max_errors=100):
        """SQLite's integrity check: the problems found, an empty list when the file is sound."""
        return _integrity_check(self, max_errors)

    def vacuum(self):
        """Rebuild the file without free pages."""
        return _vacuum(self)

    def backup_to(self, path, *, pages_per_step=-1):
        """A consistent copy through SQLite's online backup API, left in DELETE journal mode.
        pages_per_step -1 copies the file as of one moment: in steps of _BACKUP_STEP pages
        inside one read transaction, Ctrl-C and SIGTERM heard between steps on the main thread
        (one step of a terabyte ran for hours deaf to both)."""
        return _backup_to(self, path, pages_per_step)

    def limits(self):
        """This connection's run-time limits of CONNECTION_LIMITS, by name, as SQLite has them."""
        return _limits(self)

    def set_limit(self, name, value):
        """Set the run-time limit `name` of CONNECTION_LIMITS on this connection (tests that
        inject failures through triggers raise TRIGGER_DEPTH); returns the limit before."""
        return _set_limit(self, name, value)

    def length_limit(self, value=-1):
        """The longest string or blob this connection binds or builds (SQLITE_LIMIT_LENGTH);
        `value` >= 0 sets it first (at most the compiled-in maximum). Returns the limit before.
        A test hook (test builds only)."""
        _test_hook("Database.length_limit")
        return _length_limit(self, value)

    def pragma(self, name, value=None):
        """PRAGMA name [= value]; the first column of the first row, or None."""
        return _pragma(self, name, value)

    def execute(self, sql, params=()):
        """Run one SQL statement with bound parameters; returns all rows as tuples."""
        return _execute(self, sql, params)

    def executescript(self, sql):
        """Run several SQL statements (no parameters, no results)."""
        return _executescript(self, sql)


cdef object _planted_sidecar(Database db, int rc, object error):
    """What to raise for `error`, SQLite's exception for `rc` (an extended result code) on
    `db`'s file: a SidecarError, with `error` as its cause, if it is the guarded VFS refusing a
    -wal, -journal or -shm put beside the file after it was opened, said as the check at open
    would have; else `error`. Part of every connection's errors, the writer
    thread's too (its failures are built from what it recorded, _write_error). Some refusals
    reach the caller as another error, and for those only the sidecar that can cause it is
    looked at: a refused -shm as a failure of the shared memory (SQLITE_IOERR_SHM*, in a
    checkpoint); a -journal SQLite takes for hot and cannot open as a journal to roll back
    (SQLITE_READONLY_ROLLBACK, for a read-only connection) or as a lock it waited for
    (SQLITE_BUSY: another connection's shared lock keeps it from the rollback). Any other
    error is what it says, whatever lies beside the file."""
    if db.beside is None:
        return error
    if (rc & 0xFF) == SQLITE_CANTOPEN:
        suffixes = _beside.SIDECARS
    elif (rc == SQLITE_IOERR_SHMOPEN or rc == SQLITE_IOERR_SHMSIZE or rc == SQLITE_IOERR_SHMLOCK
            or rc == SQLITE_IOERR_SHMMAP):
        suffixes = ("-shm",)
    elif rc == SQLITE_READONLY_ROLLBACK or (rc & 0xFF) == SQLITE_BUSY:
        suffixes = ("-journal",)
    else:
        return error
    try:
        _beside.check(db.path, suffixes)
    except _errors.SidecarError as exc:
        exc.__cause__ = error  # SQLite's own code and message
        return exc
    return error
