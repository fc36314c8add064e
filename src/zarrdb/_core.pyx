# cython: freethreading_compatible = False
"""zarrdb's engine, compiled with its own copy of SQLite: Database (one SQLite connection: reads,
listings, maintenance), and in files included at the end, the writer thread (_writer.pxi), which
writes every key and runs the explicit transactions, and the read-only remote VFS
(_remote_vfs.pxi).

Each method reads the same way: check the connection and gather the Python arguments (keys as
UTF-8, values as buffers), run the SQLite work inside `with nogil`, then build the Python
results. Every SQLite call that can wait (for a lock, for reading or writing the file, for a
sync, for a remote fetch) runs without the GIL. The calls made with the GIL only touch memory:
binding parameters and reading columns in execute(), asking for an error's code and message,
resetting a statement after an error, and starting a backup (sqlite3_backup_init). A non-OK
result code becomes a zarrdb.errors exception (Database._raise), built while SQLite's message
is still valid. Statements are prepared on first use and kept for the life of the connection.
"""

import os

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t
from libc.stdio cimport snprintf
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy, memset

from zarrdb._sqlite3 cimport *
from zarrdb._zthreads cimport *

from zarrdb import _beside, _format, _log, errors as _errors

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    int PyErr_CheckSignals() except -1
    unsigned long PyThread_get_thread_ident() nogil

cdef extern from *:
    """
    #ifdef _WIN32
    #include <process.h>
    #define zarrdb_getpid() ((long)_getpid())
    #else
    #include <unistd.h>
    #define zarrdb_getpid() ((long)getpid())
    #endif
    """
    long zarrdb_getpid() nogil


# The process id, refreshed in a child after fork(), so that checking "was this connection
# opened in this process?" costs no system call. Likewise the thread that runs Python's signal
# handlers (the one that forked, in a child).
cdef long _current_pid = zarrdb_getpid()
cdef unsigned long _main_thread = PyThread_get_thread_ident()
# Pages a step of a whole backup copies before Ctrl-C and SIGTERM are looked at: 1,024 pages
# (64 MiB at 64 KiB a page) take a tenth of a second from a local disk, and a step costs little
# more than the pages it copies.
cdef int _BACKUP_STEP = 1024


cdef extern from "_sqlite_amalgamation.h" nogil:
    int ZARRDB_CHAIN_LOOP
    int zarrdb_blob_chain_check(sqlite3_blob* blob, int64_t upto)
    int zarrdb_main_head(sqlite3* db, unsigned char* buf, int n, int64_t* size)
    int64_t zarrdb_main_data(sqlite3* db, int64_t upto)
    const char* zarrdb_guarded_vfs()
    void zarrdb_fork_prepare()
    void zarrdb_fork_parent()
    void zarrdb_fork_child()


def _before_fork():
    with nogil:
        zarrdb_fork_prepare()


def _after_fork_in_parent():
    zarrdb_fork_parent()


def _after_fork_in_child():
    global _current_pid, _main_thread
    _current_pid = zarrdb_getpid()
    zarrdb_fork_child()  # the child's connections start with no inherited lock records
    _main_thread = PyThread_get_thread_ident()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )


BUNDLED_SQLITE = bool(ZARRDB_BUNDLED_SQLITE)
# The spec's facts the engine needs: the data table and the longest value (3 bytes less than
# 2 GiB), from _format, which holds every one of them.
cdef str _TABLE = _format.DATA_TABLE
cdef bytes _TABLE_UTF8 = _TABLE.encode("ascii")
cdef const char* _TABLE_C = _TABLE_UTF8
cdef int64_t _MAX_VALUE = _format.MAX_VALUE_SIZE
MAX_VALUE_SIZE = _MAX_VALUE
# zarrdb.errors names SQLite's result codes; they must be the ones this SQLite uses.
if (
    _errors.SQLITE_BUSY, _errors.SQLITE_LOCKED, _errors.SQLITE_READONLY, _errors.SQLITE_CORRUPT,
    _errors.SQLITE_FULL, _errors.SQLITE_CANTOPEN, _errors.SQLITE_TOOBIG, _errors.SQLITE_NOTADB,
    _errors.SQLITE_IOERR, _errors.SQLITE_MISUSE, _errors.SQLITE_CONSTRAINT, _errors.SQLITE_NOMEM,
) != (
    SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN,
    SQLITE_TOOBIG, SQLITE_NOTADB, SQLITE_IOERR, SQLITE_MISUSE, SQLITE_CONSTRAINT, SQLITE_NOMEM,
):  # pragma: no cover - a build against an SQLite with other codes
    raise ImportError("zarrdb.errors' SQLite result codes do not match the SQLite built in")

# Values at least this long are read with the blob API (no intermediate copy inside SQLite).
DEF _BLOB_READ_MIN = 65536
# Not SQLite codes: a listing met a NULL key (a foreign writer broke the schema's rules), or
# keys out of order (a damaged index); a read met a NULL value (the same rules broken).
DEF _NULL_KEY = -77
DEF _OUT_OF_ORDER = -78
DEF _NULL_VALUE = -80
# Not an SQLite code: a value claims more bytes than the file had when last asked (see
# Database._check_claim).
DEF _CLAIM = -79
# A long statement run by the main thread lets Python's signal handlers run every so many
# SQLite steps (see Database._watch); each look takes the GIL (about a microsecond). At 100,000
# a signal is seen within milliseconds, and counting 100,000 keys takes no measurably longer
# (at 1,000 it took 12% longer).
DEF _PROGRESS_STEPS = 100000
# The main thread waiting for the writer looks at Python's signals this often (milliseconds):
# Ctrl-C stops a long statement of the writer within about this long.
DEF _SIGNAL_LOOK_MS = 100


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


def _library_info():
    """(version, source id, compile options) of the SQLite this module was built with."""
    cdef int i = 0
    cdef const char* opt
    options = []
    while True:
        opt = sqlite3_compileoption_get(i)
        if opt == NULL:
            break
        options.append(opt.decode("ascii"))
        i += 1
    return (
        sqlite3_libversion().decode("ascii"),
        sqlite3_sourceid().decode("ascii"),
        tuple(options),
    )


include "_statements.pxi"


# ---------------------------------------------------------------------------------------------

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


include "_ops.pxi"


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


cdef class Database:
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
        busy_timeout=5.0,
        page_size=None,
        cache_size=None,
        mmap_size=None,
        synchronous=None,
        journal_mode=None,
        vfs=None,
        cell_size_check=False,
    ):
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
            err = _errors.sqlite_error(
                rc,
                sqlite3_extended_errcode(handle) if handle != NULL else rc,
                (sqlite3_errmsg(handle) if handle != NULL else sqlite3_errstr(rc)).decode(
                    "utf-8", "replace"
                ),
                filename=path,
                context="cannot open",
            )
            with nogil:
                sqlite3_close_v2(handle)
            raise err
        self.db = handle
        self.pid = zarrdb_getpid()
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
            self._busy_timeout = max(0.0, float(busy_timeout))
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

    cdef object _error(self, int rc, str context=""):
        """The exception for `rc`; call before anything else touches the connection. A
        statement a signal interrupted gives what the signal handler raised."""
        cdef int xrc = sqlite3_extended_errcode(self.db)
        if self._interruption is not None:
            raised, self._interruption = self._interruption, None
            return raised
        if (xrc & 0xFF) != (rc & 0xFF):
            # a code of zarrdb's own (SQLITE_NOMEM when a listing's buffer cannot grow), not
            # the connection's last error
            xrc = rc
            message = sqlite3_errstr(rc).decode("utf-8", "replace")
        else:
            message = sqlite3_errmsg(self.db).decode("utf-8", "replace")
        if (rc & 0xFF) == SQLITE_CANTOPEN and self.beside is not None:
            # The guarded VFS refused a -wal or -journal put beside the file after it was
            # opened: say which, as the check at open would have.
            try:
                _beside.check(self.path)
            except _errors.SidecarError as exc:
                return exc
        if (rc & 0xFF) in (SQLITE_BUSY, SQLITE_LOCKED):
            waited = f"gave up after waiting {self._busy_timeout:g} s for a lock"
            context = f"{context}: {waited}" if context else waited
        return _errors.sqlite_error(rc, xrc, message, filename=self.path, context=context)

    cdef int _raise(self, int rc, sqlite3_stmt* stmt, str context="") except -1:
        """Raise the exception for `rc` (built while SQLite's message is still the connection's),
        after resetting `stmt` (if any) so that it holds no lock or read transaction."""
        err = self._error(rc, context)
        if stmt != NULL:
            sqlite3_reset(stmt)
        raise err

    cdef list _listing(self, int rc, sqlite3_stmt* stmt, Arena* arena):
        """The end of a listing: its error (with the statement reset), or its keys."""
        if rc != SQLITE_DONE:
            err = self._list_error(rc)
            sqlite3_reset(stmt)
            raise err
        with nogil:
            sqlite3_reset(stmt)
        return _arena_strings(arena, NULL, 0, self.path)

    cdef object _list_error(self, int rc):
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

    cdef object _read_error(self, int rc, object key):
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

    cdef object _null_value_error(self, object key):
        return _errors.DatabaseCorruptError(
            f"{self.path!r}: the value of {key!r} is NULL; a SQLiteStore file must not hold "
            "NULL values (written by another program?)",
            code=SQLITE_CORRUPT, filename=self.path,
        )

    cdef int _check_claim(self, object claimed, str what, sqlite3_stmt* active) except -1:
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

    cdef int64_t _scalar_range(self, Stmt all_stmt, Stmt range_stmt, object prefix) except -2:
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
                self._check_claim(result, _values_under(prefix), stmt)
            with nogil:
                sqlite3_reset(stmt)
            return result
        finally:
            self._leave()

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
        return self._read(key, _MAX_VALUE)

    def get_limited(self, key, limit):
        """The value of `key` if it is at most `limit` bytes long; otherwise its length (an
        int; nothing read); None if the key is missing."""
        return self._read(key, limit)

    cdef object _read(self, object key, int64_t limit):
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
                raise self._null_value_error(key)
            if rc != SQLITE_ROW:
                if rc == SQLITE_DONE:
                    return None
                raise self._error(rc, f"cannot read {key!r}")
            if suspect:
                self._check_claim(size, f"the value of {key!r}", stmt)
                if size > limit:
                    sqlite3_reset(stmt)
            if size > limit:
                return size
            # The statement is not reset yet: its read transaction keeps `src` and `rowid` valid.
            if not inline:
                # The blob's size in bytes (a value another program stored as TEXT has more
                # than length() counted characters), and its chain checked, before allocating.
                with nogil:
                    rc = sqlite3_blob_open(self.db, "main", _TABLE_C, "v", rowid, 0, &blob)
                    if rc == SQLITE_OK:
                        n = sqlite3_blob_bytes(blob)
                        rc = zarrdb_blob_chain_check(blob, n)
            if rc == SQLITE_ROW or rc == SQLITE_OK:
                try:
                    out = PyBytes_FromStringAndSize(NULL, n)
                except BaseException:
                    with nogil:
                        if blob != NULL:
                            sqlite3_blob_close(blob)
                        sqlite3_reset(stmt)
                    raise
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
            err = None if rc == SQLITE_OK else self._read_error(rc, key)
            with nogil:
                if blob != NULL:
                    sqlite3_blob_close(blob)
                sqlite3_reset(stmt)
            if err is not None:
                raise err
            return out
        finally:
            self._leave()

    def get_into(self, key, out):
        """Copy the value into the writable buffer `out`; its length, or None if missing.
        ValueError (nothing copied) if `out` is smaller than the value."""
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

    def get_range(self, key, start, length):
        """Bytes [start, start+length) of the value, clamped to its end; length None: to the
        end; start < 0: the last -start bytes. A start past the end gives b"".

        One lookup and one blob read, without get_ranges' arrays and its explicit read
        transaction: the lookup's statement stays active until the range is read, and its read
        transaction keeps the rowid it found valid."""
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
                raise self._null_value_error(key)
            if rc != SQLITE_ROW:  # the error built while SQLite's message is still the step's
                self._raise(rc, locate, f"cannot read {key!r}")
            if size > self._file_bytes:
                self._check_claim(size, f"the value of {key!r}", locate)
            if s < 0:
                s = size + s if size + s > 0 else 0
            elif s > size:
                s = size
            want = size - s
            if length is not None and length < want:
                want = length
            rc = SQLITE_OK
            if want > 0:
                with nogil:  # the chain as far as the range reaches, checked before allocating
                    rc = sqlite3_blob_open(self.db, "main", _TABLE_C, "v", rowid, 0, &blob)
                    if rc == SQLITE_OK:
                        rc = zarrdb_blob_chain_check(blob, s + want)
            if rc == SQLITE_OK:
                try:
                    out = PyBytes_FromStringAndSize(NULL, want)
                except BaseException:
                    with nogil:
                        if blob != NULL:
                            sqlite3_blob_close(blob)
                        sqlite3_reset(locate)
                    raise
                dst = PyBytes_AS_STRING(out)
                if want > 0:
                    with nogil:
                        rc = sqlite3_blob_read(blob, dst, <int>want, <int>s)
            err = None if rc == SQLITE_OK else self._read_error(rc, key)
            with nogil:
                if blob != NULL:
                    sqlite3_blob_close(blob)
                sqlite3_reset(locate)
            if err is not None:
                raise err
            return out
        finally:
            self._leave()

    def get_many(self, keys):
        """The values of `keys`, in order, None for a missing key."""
        return self.get_ranges([(key, 0, None) for key in keys])

    def get_ranges(self, requests):
        """Byte ranges of several values, as get_range, in one batch and one snapshot."""
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
                        self._check_claim(size, f"the value of {reqs[i][0]!r}", locate)
                        sqlite3_reset(locate)
                    if rc != SQLITE_OK:
                        if rc == _NULL_VALUE:
                            sqlite3_reset(locate)
                            raise self._null_value_error(reqs[failed_at][0])
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
                        raise self._read_error(rc, reqs[failed_at][0])
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

    def exists(self, key):
        """True if `key` is stored."""
        return self._lookup_int(S_EXISTS, key) is not None

    def length(self, key):
        """The length of the value of `key` in bytes (read without reading the value), or None."""
        return self._lookup_int(S_LENGTH, key)

    cdef object _lookup_int(self, Stmt which, object key):
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
                self._check_claim(value, f"the value of {key!r}", stmt)
                sqlite3_reset(stmt)
            return value
        finally:
            self._leave()

    # --- writes: run by the writer thread (_writer.pxi) --------------------------------------

    cdef int _prepare_writes(self) except -1:
        """Prepare the statements write operations run (_ops.pxi), before any runs nogil."""
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
            return self._listing(rc, stmt, &arena)
        finally:
            self._leave()
            free(arena.data)

    def list_dir(self, prefix):
        """Children of `prefix` ("" or ending in "/"), relative to it, sorted: a stored key as
        its name, a sub-tree as its name with a trailing "/". One index seek per child."""
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
            return self._listing(rc, stmt, &arena)
        finally:
            self._leave()
            free(arena.data)
            free(cursor)

    def has_prefix(self, prefix):
        """True if any key starts with `prefix` (one index seek)."""
        return self._scalar_range(S_ANY_ALL, S_ANY_RANGE, prefix) == 1

    def list_prefix_sizes(self, prefix):
        """(key, value length) for every key that starts with `prefix`, sorted; the lengths
        come from the row headers, the values are not read."""
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
                    self._check_claim(total, _values_under(prefix), NULL)
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

    def rename_prefix(self, old, new):
        """Move every key that starts with `old` to start with `new` instead, in one
        transaction (or inside the open one); returns how many keys moved. ConstraintError
        (nothing moved) if a new key exists already. Maintenance: the store runs it on the
        write connection its writer hands over (Writer.call_holding)."""
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

    def size_prefix(self, prefix):
        """The total length in bytes of the values whose keys start with `prefix`."""
        return self._scalar_range(S_SIZE_ALL, S_SIZE_RANGE, prefix)

    def count_prefix(self, prefix):
        """How many keys start with `prefix`."""
        return self._scalar_range(S_COUNT_ALL, S_COUNT_RANGE, prefix)

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

    # --- maintenance and plain SQL ----------------------------------------------------------

    def checkpoint(self, mode="passive"):
        """Checkpoint the WAL; returns (frames in the WAL, frames checkpointed)."""
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

    def journal_mode(self, mode=None):
        """The journal mode, after setting it to `mode` if given."""
        if mode is not None:
            mode = str(mode).lower()
            if mode not in _JOURNAL_MODES:
                raise ValueError(f"journal mode must be one of {_JOURNAL_MODES}, not {mode!r}")
            if mode == "off" and self.db != NULL:
                # Defensive mode refuses OFF to SQL; here zarrdb's caller chose it, not a file.
                sqlite3_db_config(self.db, SQLITE_DBCONFIG_DEFENSIVE, 0, <int*>NULL)
                try:
                    result = self.pragma("journal_mode", mode)
                finally:
                    sqlite3_db_config(self.db, SQLITE_DBCONFIG_DEFENSIVE, 1, <int*>NULL)
            else:
                result = self.pragma("journal_mode", mode)
        else:
            result = self.pragma("journal_mode")
        return str(result).lower()

    def integrity_check(self, max_errors=100):
        """SQLite's integrity check: the problems found, an empty list when the file is sound."""
        rows = self.execute(f"PRAGMA integrity_check({int(max_errors)})")
        problems = [row[0] for row in rows]
        return [] if problems == ["ok"] else problems

    def vacuum(self):
        """Rebuild the file without free pages."""
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

    def backup_to(self, path, *, pages_per_step=-1):
        """A consistent copy through SQLite's online backup API, left in DELETE journal mode.
        pages_per_step -1 copies the file as of one moment: in steps of _BACKUP_STEP pages
        inside one read transaction, Ctrl-C and SIGTERM heard between steps on the main thread
        (one step of a terabyte ran for hours deaf to both)."""
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

        def failed(rc, context=""):  # the exception for the copy's connection
            return _errors.sqlite_error(rc, sqlite3_extended_errcode(dest),
                                        sqlite3_errmsg(dest).decode("utf-8", "replace"),
                                        filename=where, context=context)

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
                    raise failed(rc, "cannot create the copy")
                sqlite3_busy_timeout(dest, limit_ms)
                backup = sqlite3_backup_init(dest, "main", self.db, "main")
                if backup == NULL:
                    raise failed(sqlite3_errcode(dest), "cannot start the backup")
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
                    with nogil:
                        sqlite3_backup_finish(backup)
                if rc != SQLITE_DONE:
                    context = "backup failed"
                    if rc == SQLITE_BUSY or rc == SQLITE_LOCKED:
                        context = f"backup failed: gave up after waiting {self._busy_timeout:g} s for a lock"
                    raise _errors.sqlite_error(rc, rc, sqlite3_errstr(rc).decode("utf-8", "replace"),
                                               filename=where, context=context)
                with nogil:
                    rc = sqlite3_exec(dest, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL)
                if rc != SQLITE_OK:
                    raise failed(rc)
            finally:
                with nogil:
                    sqlite3_close_v2(dest)
        finally:
            try:
                self._finish(began, True)
            finally:
                self._leave()

    def limits(self):
        """This connection's run-time limits of CONNECTION_LIMITS, by name, as SQLite has them."""
        self._enter()
        try:
            return {name: sqlite3_limit(self.db, which, -1)
                    for name, (which, _) in CONNECTION_LIMITS.items()}
        finally:
            self._leave()

    def set_limit(self, name, value):
        """Set the run-time limit `name` of CONNECTION_LIMITS on this connection (tests that
        inject failures through triggers raise TRIGGER_DEPTH); returns the limit before."""
        which = CONNECTION_LIMITS[name][0]
        self._enter()
        try:
            return sqlite3_limit(self.db, which, int(value))
        finally:
            self._leave()

    def length_limit(self, value=-1):
        """The longest string or blob this connection binds or builds (SQLITE_LIMIT_LENGTH);
        `value` >= 0 sets it first (at most the compiled-in maximum). Returns the limit before."""
        self._enter()
        try:
            return sqlite3_limit(self.db, SQLITE_LIMIT_LENGTH, int(value))
        finally:
            self._leave()

    def pragma(self, name, value=None):
        """PRAGMA name [= value]; the first column of the first row, or None."""
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

    def execute(self, sql, params=()):
        """Run one SQL statement with bound parameters; returns all rows as tuples."""
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

    def executescript(self, sql):
        """Run several SQL statements (no parameters, no results)."""
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


include "_pause_points.pxi"
include "_writer.pxi"
include "_remote_vfs.pxi"
include "_vfs_powerloss.pxi"
