# Result codes to exceptions: the one way every SQLite result becomes a zarrdb.errors
# exception, whichever connection, thread or object it came from. zarrdb.errors holds the table
# (primary code -> class, advice by code); this builds the message from what SQLite said.
# A connection adds what it knows beyond SQLite (Database._error: a signal handler's exception,
# a sidecar planted after open, a remote file's failed fetch), never replacing this.
# Included into _core.pyx before anything that raises.
#
# Every SQLite call's result is checked, or the call is one of these, whose result says
# nothing a caller could act on: sqlite3_reset and sqlite3_finalize (they repeat the error of
# the statement's last step, already turned into an exception, or SQLITE_OK); sqlite3_close_v2
# (SQLITE_OK for any open handle: the close waits for the last statement's finalization);
# sqlite3_blob_close (it returns the error of the blob's last read or write, already turned
# into an exception, or met by the write whose own error wins); sqlite3_limit,
# sqlite3_busy_handler and sqlite3_busy_timeout (the previous setting, or SQLITE_OK: they fail
# only on a NULL handle). sqlite3_progress_handler returns nothing, sqlite3_wal_hook the
# previous hook's argument. Other unchecked calls say why where they are made.

# Result codes of zarrdb's own, not SQLite's (SQLite's are all >= 0). A listing met a NULL key
# (a foreign writer broke the schema's rules), or keys out of order (a damaged index); a read
# met a NULL value (the same rules broken); a value claims more bytes than the file had when
# last asked (see _check_claim in _reads.pxi).
DEF _NULL_KEY = -77
DEF _OUT_OF_ORDER = -78
DEF _CLAIM = -79
DEF _NULL_VALUE = -80


cdef object _sqlite_exception(int rc, sqlite3* handle, str filename, str context="",
                              double lock_wait=-1.0, int xrc=0, str message=None):
    """The exception for SQLite result `rc` of a statement on `handle`, naming `filename`,
    with `context` (what was being done) before SQLite's message.

    Call it before anything else runs on `handle`: its message is its last call's. Without a
    handle, or when `rc` is not the handle's last error (a code zarrdb reports itself, e.g.
    SQLITE_NOMEM when a listing's buffer cannot grow), the message is SQLite's text for the
    code. `message` and `xrc` given: what another thread recorded from the handle (the
    writer's). `lock_wait` >= 0: the seconds a busy or locked result waited, said in the
    message."""
    cdef int primary = rc & 0xFF
    if message is None:
        xrc = sqlite3_extended_errcode(handle) if handle != NULL else rc
        if handle != NULL and (xrc & 0xFF) == primary:
            message = sqlite3_errmsg(handle).decode("utf-8", "replace")
        else:
            xrc = rc
            message = sqlite3_errstr(rc).decode("utf-8", "replace")
    if lock_wait >= 0 and primary in (SQLITE_BUSY, SQLITE_LOCKED):
        waited = f"gave up after waiting {lock_wait:g} s for a lock"
        context = f"{context}: {waited}" if context else waited
    return _errors.sqlite_error(rc, xrc, message, filename=filename, context=context)
