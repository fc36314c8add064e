# How callers hear of their writes: a Submission (one caller's operations, with its buffers,
# its outcome and its wait) and a completion Port (the file descriptor an event loop watches for
# finished submissions). Included into _core.pyx.


cdef int64_t _next_token = 0


cdef class Submission:
    """One caller's writes, queued on a Writer. `future` is the caller's (the store settles it
    when the submission comes out of its Port)."""

    # All used with the GIL; `sub` is the C side, whose fields say who owns them (WSub).
    cdef WSub* sub
    cdef _Buffers buffers  # the values' buffers, released when the writer is done
    cdef list keep  # what the queued pointers point into
    cdef list names  # each operation's key (or prefix), for messages
    cdef Writer writer
    cdef Port port  # the port it reports to (None: its caller waits on the writer)
    cdef bint queued
    cdef bint joined_at_queue  # it joined the transaction as it was queued: nobody waits
    cdef bint finished
    cdef public object future
    # The serial of the transaction level its caller writes in (Level.serial; 0: none): it is
    # refused with NestingError if, when it is queued, that level is not the innermost open one
    # (a level was opened inside it, or it has ended or begun to end: what is queued from then
    # on would be written after its savepoint is released or rolled back, outside it).
    cdef public int64_t expect_level

    def __cinit__(self):
        self.sub = NULL
        self.expect_level = 0
        self.queued = False
        self.joined_at_queue = False
        self.finished = False

    def __dealloc__(self):
        if self.queued and zt_load_acquire(&self.sub.state) != SUB_DONE:
            # Still in a writer's hands (in a forked child, the parent's): leaking beats
            # freeing memory another thread may read.
            return
        if self.sub != NULL:
            if self.sub.errmsg != NULL:
                sqlite3_free(self.sub.errmsg)
            free(self.sub.ops)
            free(self.sub)

    @property
    def done(self):
        return zt_load_acquire(&self.sub.state) == SUB_DONE

    @property
    def nbytes(self):
        """The bytes it counts for in the queue (its values and keys)."""
        return self.sub.nbytes

    @property
    def joined(self):
        """The submission joined the store's explicit transaction when it was queued: nobody
        waits for it. (If that transaction then does not open, it is written on its own.)"""
        return self.joined_at_queue

    @property
    def changes(self):
        """Rows the submission wrote or deleted (once done)."""
        return self.sub.changes

    cdef int _finish(self) except -1:
        """Release the buffers, once the writer is done with them."""
        if self.finished:
            return 0
        self.finished = True
        self.buffers = None
        self.keep = None
        if self.sub.port == NULL:
            # No port lists it: the writer's reference can go. (A port's finished list
            # points at the submission until the port is drained, which drops it then.)
            self.writer._owners.pop(<Py_ssize_t>self.sub, None)
        return 0

    def wait(self):
        """Block (GIL released) until the writer is done with this submission; raise its error
        if it failed. In the main thread, Python's signal handlers run meanwhile: when one
        raises (Ctrl-C, the command line's SIGTERM), the statement the writer runs is
        interrupted, and once the writer is done with the submission (it may then have
        failed, or been written) the handler's exception is raised."""
        cdef WState* w = self.writer.w
        cdef WSub* s = self.sub
        cdef bint main = PyThread_get_thread_ident() == _main_thread
        raised = None
        while zt_load_acquire(&s.state) != SUB_DONE:
            with nogil:
                zt_mutex_lock(&w.mu)
                while zt_load_acquire(&s.state) != SUB_DONE:
                    if not main:
                        zt_cond_wait(&w.done, &w.mu)
                    elif zt_cond_wait_ms(&w.done, &w.mu, _SIGNAL_LOOK_MS):
                        break  # timed out: a look at the signals
                zt_mutex_unlock(&w.mu)
            if main and raised is None:
                try:
                    PyErr_CheckSignals()
                except BaseException as exc:  # raised once the writer is done with `s`
                    raised = exc
            if raised is not None:
                # Again at each wake-up: the flag is cleared as each batch ends, and this
                # submission may be in the next one.
                zt_store_release(&w.interrupt, 1)
        self._finish()
        if raised is not None:
            raise raised
        err = self.error()
        if err is not None:
            raise err

    def collect(self):
        """Once done: release the buffers and return the error (None if it succeeded)."""
        if zt_load_acquire(&self.sub.state) != SUB_DONE:
            raise RuntimeError("collect() of a submission the writer has not finished")
        self._finish()
        return self.error()

    def error(self):
        """The exception for a failed submission (None if it succeeded or is not done)."""
        return self.error_at(self.sub.failed if 0 <= self.sub.failed < len(self.names) else 0)

    def error_at(self, Py_ssize_t index):
        """As error(), for the caller of operation `index` (an event loop's burst of small
        writes is one submission of many callers' operations): the error names that
        operation's key, and the key that failed if it is another one."""
        cdef WSub* s = self.sub
        if zt_load_acquire(&s.state) != SUB_DONE or s.rc == SQLITE_OK:
            return None
        key = self.names[index] if 0 <= index < len(self.names) else self.names[0]
        message = s.errmsg.decode("utf-8", "replace") if s.errmsg != NULL else ""
        note = None
        if 0 <= s.failed < len(self.names) and s.failed != index:
            note = (f"it was queued in one submission with the write of {self.names[s.failed]!r}, "
                    "which failed; none of that submission was stored")
        return _write_error(self.writer, s.rc, s.xrc, message, key, note)


cdef object _write_error(Writer writer, int rc, int xrc, str message, object key, str note=None):
    """The exception for a write that failed with `rc` (SQLite's or one of the W_ERR_ codes)."""
    path = writer.path
    if rc == W_ERR_CLOSED:
        return _errors.ClosedError(
            f"{path!r} was closed before this write could run (an explicit transaction was "
            "open, and closing rolled it back); nothing was written"
        )
    if rc == W_ERR_NO_TRANSACTION:
        return _errors.SQLiteError(
            f"{path!r}: the explicit transaction this write belongs to was rolled back by "
            "an earlier error; nothing of the transaction is stored",
            filename=path,
        )
    context = f"cannot write {key!r}"
    if note is not None:
        context += f" ({note})"
    if rc == W_ERR_NOMEM:  # the writer's own allocation: SQLite's code and its text
        return _sqlite_exception(SQLITE_NOMEM, NULL, path, context)
    return _planted_sidecar(
        writer.db, xrc if xrc else rc,
        _sqlite_exception(rc, NULL, path, context, writer.busy_timeout, xrc, message))


cdef class Port:
    """Where the writer reports finished submissions for one event loop: `fileno()` becomes
    readable (watch it with add_reader), `drain()` returns them. Where there is no descriptor
    (`has_fd` false: Windows), `wait()` blocks until there is something to drain."""

    # All used with the GIL; `port` is the C side, whose fields say who owns them (WPort).
    cdef WPort* port
    cdef Writer writer
    cdef readonly bint has_fd
    cdef readonly Py_ssize_t pending  # submitted through this port and not drained yet

    def __cinit__(self, Writer writer):
        self.writer = writer
        self.port = <WPort*>calloc(1, sizeof(WPort))
        if self.port == NULL:
            raise MemoryError()
        self.port.rfd = -1
        self.port.wfd = -1
        self.has_fd = False
        if ZT_HAVE_WAKE_FD:
            if zt_wake_open(&self.port.rfd, &self.port.wfd) != 0:
                free(self.port)
                self.port = NULL
                raise OSError("cannot create a wake-up descriptor for the writer")
            self.has_fd = True

    def fileno(self):
        return self.port.rfd

    def drain(self):
        """The submissions finished since the last call (their buffers released)."""
        cdef WState* w = self.writer.w
        cdef WPort* p = self.port
        cdef WSub* s
        cdef list out = []
        if p.rfd >= 0:
            zt_wake_clear(p.rfd)  # first: a completion after it signals again
        with nogil:
            zt_mutex_lock(&w.mu)
            s = p.done_head
            p.done_head = p.done_tail = NULL
            p.signaled = 0
            zt_mutex_unlock(&w.mu)
        owners = self.writer._owners
        while s != NULL:
            sub = owners.pop(<Py_ssize_t>s, None)
            if sub is not None:
                out.append(sub)
            s = s.done_next
        self.pending -= len(out)
        for sub in out:
            (<Submission>sub)._finish()
        return out

    def wait(self, timeout=None):
        """Block (GIL released) until something finished or the port is closed; True if
        there is something to drain."""
        cdef WState* w = self.writer.w
        cdef WPort* p = self.port
        cdef long ms = -1 if timeout is None else <long>(timeout * 1000)
        cdef bint ready
        with nogil:
            zt_mutex_lock(&w.mu)
            while p.done_head == NULL and not p.closed:
                if ms < 0:
                    zt_cond_wait(&w.done, &w.mu)
                elif zt_cond_wait_ms(&w.done, &w.mu, ms):
                    break
            ready = p.done_head != NULL
            zt_mutex_unlock(&w.mu)
        return ready

    def close(self):
        """Wake a wait() for good."""
        cdef WState* w = self.writer.w
        cdef WPort* p = self.port
        with nogil:
            zt_mutex_lock(&w.mu)
            p.closed = 1
            zt_cond_broadcast(&w.done)
            zt_mutex_unlock(&w.mu)

    def __dealloc__(self):
        if self.port != NULL:
            zt_wake_close(self.port.rfd, self.port.wfd)
            free(self.port)
