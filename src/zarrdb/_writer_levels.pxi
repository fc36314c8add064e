# The levels of an explicit transaction on a Writer (the rule is zarrdb._transactions').
# Included into _core.pyx.
#
# SQLite's savepoints are one stack per connection, so the writer keeps its open levels as one
# stack too (`Writer._stack`, outermost first), changed only by the caller holding the connection
# (see Writer._hold): a level opens on top of the innermost open level and nowhere else, and
# each savepoint has its level's own name (zarrdb_level_<depth>), so that ROLLBACK TO and RELEASE,
# which find a savepoint by name, act on that level and not on whichever was opened last.

cdef enum:
    LEVEL_NEW = 0  # not opened (yet, or opening failed)
    LEVEL_OPEN = 1
    LEVEL_UNDONE = 2  # rolled back because the level around it ended first; its block goes on
    LEVEL_OVER = 3  # its block ended it (or its end was refused: the store is closing)

cdef int64_t _next_level_serial = 0


cdef class Level:
    """One level of an explicit transaction: the writer it is opened on (its store's open file,
    kept for good: after close() or fork() the level cannot be written any more), `owner` (what
    names the store it belongs to), and `mark`, what resets the entering context's list of
    levels."""

    cdef readonly Writer writer
    cdef readonly object owner
    cdef readonly int64_t token  # the transaction's (0 until open)
    cdef readonly int depth  # 1: the outermost level
    # What names it to the writer's queue (never 0, never another level's): a write made in it
    # is queued only while it is the innermost open level (Submission.expect_level).
    cdef readonly int64_t serial
    cdef int state
    # The token that resets the entering context's list of levels (a contextvars.Token).
    cdef public object mark

    def __cinit__(self, Writer writer, object owner=None):
        global _next_level_serial
        _next_level_serial += 1
        self.serial = _next_level_serial
        self.writer = writer
        self.owner = owner
        self.state = LEVEL_NEW

    @property
    def is_open(self):
        """Opened, and its block has not ended it."""
        return self.state == LEVEL_OPEN

    @property
    def undone(self):
        """Rolled back because the level around it ended first; its block has not ended yet."""
        return self.state == LEVEL_UNDONE

    cdef int _unmark(self) except -1:
        mark = self.mark
        if mark is not None:
            self.mark = None
            try:
                mark.var.reset(mark)
            except (ValueError, RuntimeError):  # another context set it
                pass
        return 0

    def unmark(self):
        """Take the level off the list of the context that entered it."""
        self._unmark()

    @property
    def usable(self):
        """Its writer can still be written: not closed, and of this process."""
        return not self.writer._closed and self.writer.pid == _current_pid


cdef int _level_sql(Writer self, str verb, int depth) except -1:
    """Run `verb` (SAVEPOINT, RELEASE, ROLLBACK TO) on level `depth`'s savepoint, holding the
    connection. (Not through Database.execute: Ctrl-C must not interrupt a rollback half way.)"""
    cdef bytes sql = f"{verb} zarrdb_level_{depth}".encode("ascii")
    cdef const char* c_sql = sql
    cdef int rc
    with nogil:
        rc = sqlite3_exec(self.db.db, c_sql, NULL, NULL, NULL)
    if rc != SQLITE_OK:
        raise self.db._error(rc, f"cannot {verb.lower()} the transaction's level {depth}")
    return 0


cdef int _open_level(Writer self, Level level, Level parent) except -1:
    """Open `level`: a savepoint on top of `parent` (the innermost open level the caller works
    inside), or with no parent a new transaction, once any other has ended (BEGIN IMMEDIATE).
    The level is marked open the moment it is (so that a caller interrupted right after can
    end it)."""
    global _next_token
    cdef WState* w = self.w
    cdef int64_t token
    cdef int began = 0
    cdef int depth = 1
    cdef bint nested = parent is not None
    cdef bint pending
    cdef bint holding = False  # this call holds the connection (to give back at the end)
    cdef bint joining = False  # writes queued from now on join the transaction beginning
    cdef bint retry
    cdef int64_t before = 0
    cdef bint ending = False
    cdef int64_t around = 0  # the writer's txn_level before this level began to open
    if level.writer is not self or level.state != LEVEL_NEW:
        raise _errors.MisuseError("a transaction level is opened once, on its own writer",
                                  code=SQLITE_MISUSE)
    if nested:
        if parent.writer is not self:
            raise _errors.MisuseError("a level nests in a level of the same writer",
                                      code=SQLITE_MISUSE)
        token = parent.token
        # Held once nothing is queued: a write queued while this waited for the connection
        # (from the code of the level around, which may write until the new level is listed)
        # would otherwise be written after the savepoint, and go with the new level's rollback.
        while True:
            self._hold(True, 0)
            with nogil:
                zt_mutex_lock(&w.mu)
                pending = w.head != NULL
                ending = w.txn_ending != 0
                if not pending:
                    # From here on, a write from the code of the level around is refused (it
                    # would be written inside the new savepoint) instead of queued.
                    around = w.txn_level
                    w.txn_level = -1
                zt_mutex_unlock(&w.mu)
            if not pending:
                break
            self._release()
    else:
        _next_token += 1
        token = _next_token
        self._hold(True, token)
    holding = True
    zpp_point("txn.begin")
    try:
        if nested:
            if (ending or parent.state != LEVEL_OPEN or not (w.txn_open and w.txn == token)
                    or parent not in self._stack):
                raise _errors.NestingError(
                    f"the transaction level on {self.path!r} this block was entered in has "
                    "ended (or is ending): its code (a task or thread it did not wait for) can "
                    "neither write nor enter a level any more"
                )
            if self._stack[len(self._stack) - 1] is not parent:
                raise _errors.NestingError(
                    f"another level of the transaction on {self.path!r} is open beside the one "
                    "this block was entered in (a sibling task or thread): levels nest one "
                    "inside the other, one at a time"
                )
            depth = parent.depth + 1
            # Listed first: from here a write from the code of the level around is refused by
            # _transactions.check_inside too, with the reason.
            level.token = token
            level.depth = depth
            self._stack.append(level)
            level.state = LEVEL_OPEN
            _level_sql(self, "SAVEPOINT", depth)
            began = 2
            with nogil:
                zt_mutex_lock(&w.mu)
                w.txn_level = level.serial
                zt_cond_broadcast(&w.done)
                zt_mutex_unlock(&w.mu)
        else:
            # BEGIN IMMEDIATE may wait for another process's lock, holding the connection:
            # what is queued meanwhile came before the transaction (which is open from the
            # moment the block has the file's lock). Once BEGIN has the lock, if anything is
            # queued, what is queued from then on joins the transaction (`w.txn`), the empty
            # BEGIN is rolled back, the writer thread commits what came before on its own,
            # and this begins again: so what came before stays before the writes its callers
            # make once the transaction is theirs. (Left for after the transaction's end, it
            # would land after those: one caller's writes out of order.)
            while True:
                began = self.db._begin_if_needed(S_BEGIN_WRITE)
                # BEGIN's wait for the lock runs no signal handler: a Ctrl-C that came meanwhile
                # is raised here, before the transaction opens (what joined it is then given
                # back to be committed on its own, below), not once its level is open, where
                # abandoning it would roll back writes whose callers were told they are written.
                PyErr_CheckSignals()
                level.token = token
                level.depth = depth
                self._stack.append(level)
                level.state = LEVEL_OPEN
                with nogil:
                    zt_mutex_lock(&w.mu)
                    retry = not joining and w.head != NULL
                    w.txn = token  # what is queued from now on joins it
                    if retry:
                        joining = True
                        before = w.tail.seq  # the last write that came before
                    else:
                        # The mark: the connection is in the transaction (nothing that came
                        # before it is queued any more).
                        w.txn_level = level.serial
                        w.txn_open = True
                        w.txn_pending = False
                        zt_cond_broadcast(&w.done)
                    zt_mutex_unlock(&w.mu)
                if not retry:
                    break
                self._stack.remove(level)
                level.state = LEVEL_NEW
                self.db._finish(began, False)  # nothing written: only the lock let go
                began = 0
                holding = False
                self._release()
                self._hold(True, 0, before)  # once what came before is committed
                holding = True
                zpp_point("txn.retry")
    except BaseException:
        level.state = LEVEL_NEW
        if level in self._stack:
            self._stack.remove(level)
        if nested:
            with nogil:
                zt_mutex_lock(&w.mu)
                w.txn_level = around
                zt_mutex_unlock(&w.mu)
        if began == 2 and nested:
            try:
                _level_sql(self, "ROLLBACK TO", depth)
                _level_sql(self, "RELEASE", depth)
            except _errors.ZarrDBError:
                pass
        elif began:
            self.db._finish(began, False)
        if not nested:
            with nogil:
                zt_mutex_lock(&w.mu)
                if joining:
                    # It never opened: what joined it is committed on its own after all.
                    _leave_transaction(w, token)
                w.txn_pending = False
                zt_cond_broadcast(&w.done)
                zt_mutex_unlock(&w.mu)
        raise
    finally:
        if holding:
            self._release()
    return 0


cdef int _end_level(Writer self, Level level, bint ok) except -1:
    """End `level`: once every write queued so far is written, commit it (or release its
    savepoint) if `ok` and none of its writes failed, else roll it back. A level that ends while
    levels inside it are still open is rolled back with them, and raises NestingError; they
    are then undone, and their own end raises NestingError. Raises the first failed write's
    error, or why the commit failed; ClosedError if the store closed (or the level is another
    process's)."""
    cdef WState* w = self.w
    cdef bint outermost
    cdef Py_ssize_t at
    cdef list inner
    cdef int rc
    cdef int64_t around
    err = None
    if level.writer is not self:
        raise _errors.MisuseError("a level ends on its own writer", code=SQLITE_MISUSE)
    if level.state == LEVEL_UNDONE:
        level.state = LEVEL_OVER
        raise _errors.NestingError(
            f"this level of the transaction on {self.path!r} was rolled back when the level "
            "around it ended while it was still open: nothing of it was written"
        )
    if level.state != LEVEL_OPEN:
        raise _errors.MisuseError(
            f"this level of the transaction on {self.path!r} is not open", code=SQLITE_MISUSE
        )
    if self._closed or self.pid != _current_pid:
        level.state = LEVEL_OVER
        raise _errors.ClosedError(
            f"the store {self.path!r} was closed (or the transaction belongs to process "
            f"{self.pid}) before this transaction ended: nothing of it was written"
        )
    at = self._stack.index(level)
    outermost = at == 0
    # The levels inside it are undone from this moment, before the wait for the connection
    # below: the outermost level's wait marks the transaction's end as it starts, and a write
    # of their code let through during the wait (which lasts until everything queued is
    # written) would be committed on its own. (Looked at again once the connection is held:
    # a level may open meanwhile.)
    for each in self._stack[at + 1:]:
        if (<Level>each).state == LEVEL_OPEN:
            (<Level>each).state = LEVEL_UNDONE
    # Its block has ended: a write made in it (or in a level inside it) from now on is refused,
    # atomically with queueing, and is never acknowledged; one queued before is drained below,
    # inside its savepoint, and goes with its commit or rollback.
    with nogil:
        zt_mutex_lock(&w.mu)
        w.txn_ending += 1
        zt_mutex_unlock(&w.mu)
    zpp_point("txn.ending")  # its block has ended; the connection is not held yet
    try:
        # Refused only once close() has started: the transaction stays marked open, so that the
        # writer puts nothing else on the connection, which is still inside it until close()
        # rolls it back.
        self._hold(True, -1 if outermost else 0)
        zpp_point("txn.end")
    except BaseException:
        level.state = LEVEL_OVER
        with nogil:
            zt_mutex_lock(&w.mu)
            w.txn_ending -= 1
            zt_mutex_unlock(&w.mu)
        raise
    if level not in self._stack:
        # The level around ended while this end waited for the connection: it rolled this one
        # back (and took it off the stack) with everything inside it.
        level.state = LEVEL_OVER
        with nogil:
            zt_mutex_lock(&w.mu)
            w.txn_ending -= 1
            zt_mutex_unlock(&w.mu)
        self._release()
        raise _errors.NestingError(
            f"this level of the transaction on {self.path!r} was rolled back when the level "
            "around it ended while it was still open: nothing of it was written"
        )
    at = self._stack.index(level)  # (levels only opened or ended above it meanwhile)
    inner = self._stack[at + 1:]
    try:
        try:
            if inner:
                ok = False
                err = _errors.NestingError(
                    f"a level of the transaction on {self.path!r} ended while {len(inner)} "
                    "level(s) inside it were still open: it was rolled back with them"
                    + (" (the whole transaction)" if outermost else "")
                )
            if w.txn_rc != SQLITE_OK:
                # A write of the transaction failed: this level ends with its error.
                ok = False
                try:
                    if err is None:
                        err = _write_error(
                            self, w.txn_rc, w.txn_xrc,
                            w.txn_errmsg.decode("utf-8", "replace")
                            if w.txn_errmsg != NULL else "",
                            w.txn_errkey.decode("utf-8", "replace")
                            if w.txn_errkey != NULL else "?",
                        )
                finally:
                    with nogil:
                        zt_mutex_lock(&w.mu)
                        _clear_transaction_error(w)
                        zt_mutex_unlock(&w.mu)
            if sqlite3_get_autocommit(self.db.db):
                # SQLite rolled the transaction back itself after an error inside it.
                if ok:
                    err = _errors.SQLiteError(
                        f"{self.path!r}: the transaction was rolled back after an error "
                        "inside it; nothing of it was written",
                        filename=self.path,
                    )
            elif ok and outermost and w.touch.st != NULL:
                with nogil:
                    rc = _step_done(w.touch.st)
                if rc != SQLITE_OK:
                    ok = False
                    err = self.db._error(rc, "cannot record the modification time")
        except BaseException:
            ok = False  # e.g. a signal's exception while an error was being made
            raise
        finally:
            # Whatever came in between (making an exception runs Python code, where a signal
            # handler may run), the level is committed or rolled back.
            if not sqlite3_get_autocommit(self.db.db):
                if outermost:
                    self.db._finish(1, ok)
                else:
                    if not ok:
                        _level_sql(self, "ROLLBACK TO", level.depth)
                    _level_sql(self, "RELEASE", level.depth)
    finally:
        for each in inner:
            if (<Level>each).state == LEVEL_OPEN:  # (not one whose block has ended it)
                (<Level>each).state = LEVEL_UNDONE
        del self._stack[at:]
        level.state = LEVEL_OVER
        around = 0 if outermost else (<Level>self._stack[at - 1]).serial
        with nogil:
            zt_mutex_lock(&w.mu)
            w.txn_ending -= 1
            w.txn_level = around
            zt_mutex_unlock(&w.mu)
        if outermost:
            self._forget_transaction()
        self._release()
        if outermost and self._joined:
            self._unpin()
    if err is not None:
        raise err
    return 0


cdef class TransactionLevels:
    """The levels one `store.transaction()` object has entered and not yet ended, innermost
    last: the engine's side of zarrdb._transactions.Transaction, which subclasses it. Its
    `__exit__` is compiled: one written in Python can be interrupted by a signal handler as it
    starts (CPython runs them at the start of every Python function), which would leave the
    transaction open for good; here nothing runs Python code until the level has ended."""

    cdef list _entered

    def __cinit__(self, *args, **kwargs):
        self._entered = []

    @property
    def levels(self):
        """The levels entered and not yet ended, outermost first (a copy)."""
        return list(self._entered)

    def list_level(self, Level level):
        """List `level` as entered (before it is opened: an interruption from here on finds
        it and rolls back what was opened)."""
        self._entered.append(level)

    def unlist_level(self, Level level):
        """Forget `level` (its opening failed or was interrupted)."""
        if level in self._entered:
            self._entered.remove(level)

    def take_innermost(self):
        """The innermost level entered, no longer listed."""
        if not self._entered:
            raise _errors.MisuseError("the transaction's block was not entered",
                                      code=SQLITE_MISUSE)
        return self._entered.pop()

    def __exit__(self, exc_type, exc, tb):
        """Ends the innermost level entered: committed if the block raised nothing, else
        rolled back."""
        cdef list entered = self._entered
        cdef Level level
        if not entered:
            raise _errors.MisuseError("the transaction's block was not entered",
                                      code=SQLITE_MISUSE)
        level = entered[len(entered) - 1]  # (the module is compiled without negative indexing)
        try:
            level._unmark()
            if level.state == LEVEL_OPEN or level.state == LEVEL_UNDONE:
                _end_level(level.writer, level, exc_type is None)
        finally:
            entered.remove(level)


def check_inside(tuple inside, object owner, Writer writer=None):
    """The serial of the transaction level of `owner` (a store's FileSpec.key) that code
    working inside the levels `inside` (zarrdb._transactions.INSIDE, outermost first) writes
    in; 0 if it is in none. Raises if that level can no longer be written: ClosedError if its
    open file was closed (or is the parent process's), or if `writer`, the one the write would
    go to, is not the level's (the store has another open file: the level's is closing, even
    if its writer is not closed yet); NestingError if the level around it ended first and
    rolled it back, if its block has ended, or if another level is open inside it (a write from
    its code would be undone with that level). Compiled, and given the context's list once: it
    runs for every write made in a transaction."""
    cdef Py_ssize_t i = len(inside)
    cdef Level level
    cdef list stack
    cdef bint usable
    while i > 0:
        i -= 1
        level = <Level?>inside[i]
        if level.owner is not owner:
            continue
        usable = not level.writer._closed and level.writer.pid == _current_pid
        if level.state == LEVEL_OPEN:
            if not usable or (writer is not None and level.writer is not writer):
                raise _errors.ClosedError(
                    f"the transaction on {level.writer.path!r} this code writes in is over: "
                    "the store was closed (or the transaction is another process's) before its "
                    "block ended, and nothing of it was written"
                )
            stack = level.writer._stack
            if stack and stack[len(stack) - 1] is not level:
                # Its write would be written inside the savepoint of a level that another
                # task or thread opened within this one, and undone with that level.
                raise _errors.NestingError(
                    f"a level of the transaction on {level.writer.path!r} is open inside the "
                    "one this code writes in (entered by a task or thread started in it): a "
                    "write from the level around it would go with that level's rollback. "
                    "Levels nest one at a time: end the inner level first"
                )
            return level.serial
        if level.state == LEVEL_UNDONE:
            raise _errors.NestingError(
                f"the transaction level on {level.writer.path!r} this code writes in was "
                "rolled back: the level around it ended while it was still open"
            )
        if not usable:
            raise _errors.ClosedError(
                f"the transaction on {level.writer.path!r} this code writes in is over: the "
                "store was closed (or the transaction is another process's) before its block "
                "ended"
            )
        raise _errors.NestingError(
            f"the transaction level on {level.writer.path!r} this code was started in has "
            "ended: a task or thread its block did not wait for can no longer write through "
            "the store in it (await it, or join it, before the block ends)"
        )
    return 0
