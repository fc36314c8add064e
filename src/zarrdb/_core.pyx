# cython: freethreading_compatible = False
"""zarrdb's engine, compiled with its own copy of SQLite: one file per object, included below
(Database, one SQLite connection: _connection.pxi with its reads, listings and maintenance; the
writer thread, which writes every key and runs the explicit transactions: _writer*.pxi; the
read-only remote VFS: _remote_vfs.pxi). This file holds what the process has once: the
process and thread ids, the fork hooks, the spec's facts and the measured constants (whose
home is zarrdb._tunables).

Each method reads the same way: check the connection and gather the Python arguments (keys as
UTF-8, values as buffers), run the SQLite work inside `with nogil`, then build the Python
results. Every SQLite call that can wait (for a lock, for reading or writing the file, for a
sync, for a remote fetch) runs without the GIL. The calls made with the GIL only touch memory:
binding parameters and reading columns in execute(), asking for an error's code and message,
resetting a statement after an error, and starting a backup (sqlite3_backup_init). A non-OK
result code becomes a zarrdb.errors exception (_sqlite_exception, _exceptions.pxi), built
while SQLite's message is still valid. Statements are prepared on first use and kept for the
life of the connection.
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

from zarrdb import _beside, _format, _log, _tunables, errors as _errors

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

# The engine's measured constants, from zarrdb._tunables, which says why each is what it is
# (read once, at import): values from _BLOB_READ_MIN bytes up are read with the blob API; long
# statements of the main thread (and the writer's) look for signals every _PROGRESS_STEPS SQLite
# steps; the main thread waiting for the writer looks every _SIGNAL_LOOK_MS milliseconds.
cdef int64_t _BLOB_READ_MIN = _tunables.BLOB_READ_MIN
cdef int _PROGRESS_STEPS = _tunables.PROGRESS_STEPS
cdef long _SIGNAL_LOOK_MS = _tunables.SIGNAL_LOOK_MS
# Pages a step of a whole backup copies before Ctrl-C and SIGTERM are looked at.
cdef int _BACKUP_STEP = _tunables.BACKUP_STEP_PAGES


def library_info():
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


cdef extern from *:
    """
    #ifdef ZARRDB_TEST_VFS
    #define ZARRDB_TEST_HOOKS 1
    #else
    #define ZARRDB_TEST_HOOKS 0
    #endif
    """
    int ZARRDB_TEST_HOOKS

# Whether this build has the engine's test hooks (Writer.holding, Database.get_into,
# Database.length_limit): test builds only (ZARRDB_TEST_VFS=1 at build time, as scripts/dev.sh
# does), as the power-loss simulator and the pause points. zarrdb itself uses none of them.
_TEST_HOOKS = bool(ZARRDB_TEST_HOOKS)


cdef int _test_hook(str name) except -1:
    """NotImplementedError where the test hooks are not built (the compiler then drops the
    rest of the hook: its condition is a constant)."""
    if not ZARRDB_TEST_HOOKS:
        raise NotImplementedError(
            f"{name} is a test hook: only test builds of zarrdb have it (built with "
            "ZARRDB_TEST_VFS=1, as scripts/dev.sh does)"
        )
    return 0


# The engine's rooms, one per object, joined into this one compiled unit (as apsw joins
# connection.c, blob.c and backup.c). The order matters for DEF constants and C types only.
include "_exceptions.pxi"  # result codes to exceptions: the one builder
include "_statements.pxi"  # the SQL, by number
include "_keys.pxi"  # keys and key ranges as bound, the listing arena
include "_connection_open.pxi"  # limits, defensive mode, lock waits, signal looks; opening
include "_file_statements.pxi"  # the named statements of the Python layer: Database's base class
include "_connection.pxi"  # the Database class: state, plumbing, its methods
include "_reads.pxi"  # values whole, into buffers, by ranges, in batches; blobs
include "_listings.pxi"  # keys by prefix, children, sizes and counts, renames
include "_maintenance.pxi"  # checkpoint, journal mode, integrity, VACUUM, backup, plain SQL
include "_pause_points.pxi"  # named pause points (test builds)
include "_writer_ops.pxi"  # the writer's operations and the buffers of their values
include "_writer_state.pxi"  # the writer's state: its structs, who owns each field, the locks
include "_writer_queue.pxi"  # the writer's queue, shared under its mutex
include "_writer_thread.pxi"  # the writer thread: take, apply, commit, hand back
include "_writer_checkpoint.pxi"  # the checkpointer thread (WAL mode)
include "_writer_upkeep.pxi"  # between batches: the switch to WAL, the idle vacuum
include "_writer_ports.pxi"  # submissions and completion ports
include "_writer_levels.pxi"  # the levels of explicit transactions
include "_writer.pxi"  # the writer's Python class, Writer
include "_closing.pxi"  # what closing runs on the write connection
include "_remote_vfs.pxi"  # remote files: the VFS's block cache, RemoteFile, RemoteDatabase
include "_vfs_powerloss.pxi"  # the power-loss simulator (test builds)
