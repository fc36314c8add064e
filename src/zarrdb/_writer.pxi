# The writer: one C thread per writable database that owns the write connection and never
# holds the GIL. Included into _core.pyx (one compiled unit with SQLite), in rooms: its state
# (the structs, and which thread owns each field or which lock guards it: _writer_state.pxi),
# its queue (_writer_queue.pxi), the C thread's work (_writer_thread.pxi, _writer_checkpoint.pxi,
# _writer_upkeep.pxi), submissions and ports (_writer_ports.pxi), the levels of explicit
# transactions (_writer_levels.pxi), and here its Python class, Writer.
#
# A caller's writes (a "submission": one or more set/delete operations) are queued with the
# caller's buffers (no copy). The thread takes everything queued (up to a byte limit), writes
# it in one transaction and commits (group commit), then reports completion:
# - to an event loop through a completion port: a file descriptor the loop watches with
#   add_reader; its callback drains the port, settles the futures and releases the buffers;
# - to a synchronous caller through a condition variable it waits on with the GIL released.
# Explicit transactions belong to the Writer (the store's open file), not to a thread:
# while one is open, every submission joins it (written under a savepoint per batch). Its start
# is marked under the mutex the moment begin(), holding the connection, has taken SQLite's
# write lock (BEGIN IMMEDIATE): what was queued before is committed on its own, what is queued
# after joins the transaction. (What came while begin() waited for the lock is committed
# first: begin() lets the thread write it and begins again; see _open_level.) Its end is
# marked when end() asks for the connection: what is queued after that is not the
# transaction's.
# Admission: a submitter waits while the queue holds queue_max bytes. Nothing queued waits for
# a transaction's end, so the room a write of its block waits for is made by the thread.
# Python code that needs the connection itself (reads inside a transaction, maintenance) holds
# it through Writer.call_holding(): the thread finishes its batch and waits. (Writer.holding(),
# a context manager, is the tests' form, in test builds only: see call_holding for why zarrdb
# itself does not use one.)

from collections import deque as _deque


cdef int64_t _cache_bytes(Database db) except -1:
    """The size of the connection's page cache in bytes (PRAGMA cache_size: pages, or KiB when
    negative)."""
    cdef int64_t size = int(db.pragma("cache_size"))
    return -size * 1024 if size < 0 else size * int(db.pragma("page_size"))


@cython.no_gc_clear  # its thread uses the Database until __dealloc__ has stopped it
cdef class Writer:
    """The write connection of a Database, run by a C thread (see the top of _writer.pxi).

    The numbers (batch_bytes, queue_bytes, blob_min, hold_spill_max, touch_every, max_age,
    checkpoint_pages, wal_limit_pages, small_bytes, vacuum_pages, vacuum_min) are
    zarrdb._tunables' unless given; the switches (signal_bytes, checkpoint, wal_after,
    touch_sql) are off unless given.
    batch_bytes: most bytes one group commit takes; queue_bytes: submitters wait while more
    than this is queued; blob_min: values at least this long are written through the blob API;
    hold_spill_min: batches of at least this many bytes are written without SQLite spilling
    their pages before the commit (None: half the connection's page cache); hold_spill_max:
    batches larger than this spill as usual (holding their pages until the commit would double
    the memory a value of gigabytes takes: its bytes, held by the caller, and its pages); signal_bytes:
    submissions through a port (an event loop's, which calls flush() once per turn) wake the
    thread only once this many bytes of them are queued, or at the flush (0: each at once);
    touch_sql, touch_every: a statement a group commit runs at most every so many seconds (the
    file's modification time)."""

    # Python's side of the writer: every field here is used with the GIL only ([GIL]).
    cdef WState* w  # the threads' shared state (see the top of this file); freed by
    #                 __dealloc__ once both threads are joined
    cdef Database db  # its handle is the writer thread's while it runs ([holder] in WState)
    cdef readonly str path
    cdef readonly double busy_timeout
    cdef long pid  # the process that started the threads: a forked child touches nothing
    cdef bint started
    cdef bint _closed
    cdef dict _owners  # address of a queued WSub -> its Submission (keeps it alive)
    cdef object _joined  # submissions that joined the transaction without a waiter, in order
    # The open levels of the explicit transaction, outermost first (Level, _writer_levels.pxi);
    # changed only by the caller holding the connection.
    cdef list _stack

    def __cinit__(self):
        self.w = NULL
        self.started = False
        self._closed = False
        self._owners = {}
        self._joined = _deque()
        self._stack = []

    def __init__(self, Database db, *, hold_spill_min=None, touch_sql=None, signal_bytes=0,
                 checkpoint=False, synchronous=1, wal_after=0, **tunables):
        cdef WState* w
        cdef sqlite3_stmt* stmt = NULL
        cdef bytes sql
        cdef bytes path
        cdef int rc
        if db.db == NULL:
            raise _errors.ClosedError(f"the database {db.path!r} is closed")
        if db.readonly:
            raise _errors.ReadOnlyError(f"{db.path!r} is open read-only", code=SQLITE_READONLY,
                                        filename=db.path)
        # The measured numbers have one home, zarrdb._tunables; a caller may give its own.
        options = _tunables.writer_options()
        unknown = tunables.keys() - options.keys()
        if unknown:
            raise TypeError(f"Writer() got unexpected keyword arguments {sorted(unknown)}")
        options.update(tunables)
        batch_bytes = options["batch_bytes"]
        queue_bytes = options["queue_bytes"]
        blob_min = options["blob_min"]
        hold_spill_max = options["hold_spill_max"]
        touch_every = options["touch_every"]
        max_age = options["max_age"]
        checkpoint_pages = options["checkpoint_pages"]
        wal_limit_pages = options["wal_limit_pages"]
        small_bytes = options["small_bytes"]
        vacuum_pages = options["vacuum_pages"]
        vacuum_min = options["vacuum_min"]
        self.db = db
        self.path = db.path
        self.busy_timeout = db._busy_timeout
        self.pid = zarrdb_getpid()
        w = <WState*>calloc(1, sizeof(WState))
        if w == NULL:
            raise MemoryError()
        self.w = w
        zt_mutex_init(&w.mu)
        zt_cond_init(&w.work)
        zt_cond_init(&w.done)
        zt_cond_init(&w.ck.cv)
        w.queue_max = max(1, int(queue_bytes))
        w.batch_max = max(1, int(batch_bytes))
        w.blob_min = max(1, int(blob_min))
        w.spill.page_size = int(db.pragma("page_size"))
        w.spill.cache_pages = max(1, _cache_bytes(db) // w.spill.page_size)
        if hold_spill_min is None:
            # the cache takes 90% of its size in dirty pages before it spills
            hold_spill_min = _cache_bytes(db) // 2
        w.spill.min_bytes = max(1, int(hold_spill_min))
        w.spill.max_bytes = max(0, int(hold_spill_max))
        w.max_age_us = <int64_t>(float(max_age) * 1e6)
        w.signal_bytes = max(0, int(signal_bytes))
        w.hold_limit = -1
        w.touch.at = -1
        w.touch.every_ms = <int64_t>(float(touch_every) * 1000)
        w.db = db.db
        w.ck.synchronous = int(synchronous)
        w.ck.every = max(1, int(checkpoint_pages))
        w.ck.limit = max(w.ck.every, int(wal_limit_pages))
        w.ck.wait_above = w.ck.limit
        w.autowal.wal_after = int(wal_after)
        w.autowal.busy_wait = &db._busy
        w.autowal.small_bytes = int(small_bytes)
        w.autowal.in_wal = db.journal_mode() == "wal"
        vacuum_sql = None
        if int(db.pragma("auto_vacuum")) == 2:  # incremental: the file has a pointer map
            vacuum_sql = f"PRAGMA incremental_vacuum({max(1, int(vacuum_pages))})"
        w.vac.min_pages = max(1, int(vacuum_min))
        # The Database stays marked in use while the thread owns it: a call from Python
        # outside hold()/release() raises ConcurrentUseError instead of racing the thread.
        db._enter()
        try:
            db._prepare_writes()
            w.st = db.stmts
            for text, target in ((touch_sql, 0), ("PRAGMA journal_mode = WAL", 1),
                                 (vacuum_sql, 2), ("PRAGMA freelist_count", 3)):
                if text is None:
                    continue
                sql = text.encode("utf-8")
                rc = sqlite3_prepare_v3(db.db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, NULL)
                if rc != SQLITE_OK:
                    raise db._error(rc, f"cannot prepare {text!r}")
                if target == 0:
                    w.touch.st = stmt
                elif target == 1:
                    w.autowal.st_to_wal = stmt
                elif target == 2:
                    w.vac.st_step = stmt
                else:
                    w.vac.st_freelist = stmt
            if checkpoint:
                path = os.fsencode(db.path)
                w.ck.path = <char*>malloc(len(path) + 1)
                if w.ck.path == NULL:
                    raise MemoryError()
                memcpy(w.ck.path, <const char*>path, len(path) + 1)
                w.ck.flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
                sqlite3_wal_hook(db.db, _wal_hook, <void*>w)
                if zt_thread_start(&w.ck.thread, _checkpointer_main, <void*>w) != 0:
                    raise OSError("cannot start the checkpointer thread")
                w.ck.started = True
            if zt_thread_start(&w.thread, _writer_main, <void*>w) != 0:
                raise OSError("cannot start the writer thread")
        except BaseException:
            self._stop_checkpointer()
            self._finalize_statements()
            db._leave()
            raise
        self.started = True

    cdef void _stop_checkpointer(self) noexcept:
        cdef WState* w = self.w
        if w.ck.started:
            with nogil:
                zt_mutex_lock(&w.mu)
                w.stop = 1
                zt_cond_broadcast(&w.ck.cv)
                zt_mutex_unlock(&w.mu)
                zt_thread_join(w.ck.thread)
            w.ck.started = False
        if w.ck.path != NULL:
            sqlite3_wal_hook(self.db.db, NULL, NULL)
            free(w.ck.path)
            w.ck.path = NULL

    cdef void _finalize_statements(self) noexcept:
        cdef WState* w = self.w
        if w.touch.st != NULL:
            sqlite3_finalize(w.touch.st)
            w.touch.st = NULL
        if w.autowal.st_to_wal != NULL:
            sqlite3_finalize(w.autowal.st_to_wal)
            w.autowal.st_to_wal = NULL
        if w.vac.st_step != NULL:
            sqlite3_finalize(w.vac.st_step)
            w.vac.st_step = NULL
        if w.vac.st_freelist != NULL:
            sqlite3_finalize(w.vac.st_freelist)
            w.vac.st_freelist = NULL

    cdef int _check(self) except -1:
        if self._closed:
            raise _errors.ClosedError(f"the writer of {self.path!r} is closed")
        if self.pid != _current_pid:
            raise _errors.ForkedProcessError(
                f"the writer of {self.path!r} belongs to process {self.pid}; open the store "
                "again in this process"
            )
        return 0

    def submit(self, ops, *, Port port=None, bint block=True):
        """Queue `ops`, a list of (kind, key, value), as one submission: kind "set",
        "set_if_absent", "delete" or "delete_prefix" (value None for the deletes). While an
        explicit transaction is open the submission joins it (`Submission.joined`). When the
        queue is full, waits (GIL released), or with block=False returns None."""
        cdef Submission sub = self._prepare(list(ops), port)
        return sub if self._enqueue(sub, block) else None

    def prepare(self, ops, *, Port port=None, list bad=None):
        """The submission of `ops` (see submit), made but not queued yet: queue it with
        enqueue(). With a list `bad`, an operation whose value cannot be taken (e.g. a buffer
        that is not contiguous) is left out and `(index, error)` appended to `bad`, so that one
        caller's bad value fails only that caller; None if every operation is left out."""
        cdef list items = list(ops)
        self._check()  # the writer's own state fails them all, not one by one
        try:
            return self._prepare(items, port)
        except Exception:
            if bad is None:
                raise
        # Each operation alone, to tell the bad ones (only after a failure: it costs twice).
        good = []
        for index, item in enumerate(items):
            try:
                self._prepare([item], None)
            except Exception as exc:
                bad.append((index, exc))
            else:
                good.append(item)
        return self._prepare(good, port) if good else None

    def enqueue(self, Submission sub, *, bint block=True):
        """Queue a submission made by prepare(); False if the queue is full and not `block`
        (it can be queued later: wait_for_room(sub.nbytes) tells when)."""
        return self._enqueue(sub, block)

    cdef Submission _prepare(self, list items, Port port):
        cdef Py_ssize_t n = len(items)
        cdef Submission sub = Submission()
        cdef WSub* s
        self._check()
        if n == 0:
            raise ValueError("a submission needs at least one operation")
        s = <WSub*>calloc(1, sizeof(WSub))
        if s == NULL:
            raise MemoryError()
        sub.sub = s
        sub.writer = self
        sub.port = port
        s.ops = <WOp*>calloc(n, sizeof(WOp))
        if s.ops == NULL:
            raise MemoryError()
        s.nops = n
        s.port = port.port if port is not None else NULL
        s.hinted = port is not None
        s.failed = -1
        sub.buffers = _Buffers(n)
        sub.keep = []
        sub.names = []
        s.nbytes = _gather_ops(items, s.ops, sub.buffers, sub.keep, sub.names, self.path)
        return sub

    cdef bint _enqueue(self, Submission sub, bint block) except -1:
        cdef WSub* s = sub.sub
        cdef WState* w = self.w
        cdef Port port = sub.port
        cdef int64_t nbytes = s.nbytes
        cdef bint queued = False
        cdef bint stopped = False
        cdef bint elsewhere = False
        cdef bint joined = False
        cdef int64_t expect = sub.expect_level
        self._check()
        if sub.queued or sub.writer is not self:
            raise ValueError("a submission is queued once, on the writer that made it")
        # Registered before it is queued: once queued, the writer may finish it and an event
        # loop drain its port at any moment, and the drain releases what it finds here.
        self._owners[<Py_ssize_t>s] = sub
        if port is not None:
            port.pending += 1
        if self._joined:
            self._unpin()
        with nogil:
            zt_mutex_lock(&w.mu)
            while True:
                if w.stop:
                    stopped = True
                    break
                if expect != 0 and (w.txn_level != expect or w.txn_ending):
                    elsewhere = True
                    break
                if _has_room(w, nbytes):
                    s.txn = w.txn
                    # (Read here, under the mutex: a transaction that does not open after all
                    # gives what joined it back, _leave_transaction.)
                    joined = s.txn != 0
                    if joined:
                        s.port = NULL  # nobody waits for it: see _unpin
                    _enqueue_ready(w, s)
                    if s.hinted and not joined and w.unsignaled_bytes + nbytes < w.signal_bytes:
                        w.unsignaled_bytes += nbytes  # its loop's flush() wakes the thread
                    else:
                        w.unsignaled_bytes = 0
                        zt_cond_signal(&w.work)
                    queued = True
                    break
                if not block:
                    break
                zt_cond_wait(&w.done, &w.mu)
            if queued:
                sub.queued = True
                sub.joined_at_queue = joined
            zt_mutex_unlock(&w.mu)
        if not queued:
            del self._owners[<Py_ssize_t>s]
            if port is not None:
                port.pending -= 1
            if stopped:
                raise _errors.ClosedError(f"the writer of {self.path!r} is closed")
            if elsewhere:
                raise _errors.NestingError(
                    f"the transaction level on {self.path!r} this write was made in is not "
                    "the innermost open one (a level was opened inside it, or it has ended or "
                    "is ending): it was not written"
                )
            zpp_point("submit.full")
            return False
        zpp_point("submit.queued")
        if joined:
            # Nobody waits for it (its error is the transaction's): kept until the writer is
            # done with it, and let go by the next submission or the transaction's end.
            self._joined.append(sub)
            if port is not None:
                port.pending -= 1
        return True

    def write(self, ops, int64_t expect=0):
        """Queue `ops` and, unless they joined the open explicit transaction, wait until they
        are committed (GIL released); raises the write's error. One call, so that no signal
        can come between queueing and waiting. `expect`: see Submission.expect_level."""
        cdef Submission sub = self._prepare(list(ops), None)
        sub.expect_level = expect
        self._enqueue(sub, True)
        if not sub.joined_at_queue:
            sub.wait()

    cdef int _unpin(self) except -1:
        """Let go of the finished writes that joined the transaction without a waiter (their
        errors are the transaction's: see _record_transaction_error)."""
        cdef Submission sub
        joined = self._joined
        while joined:
            sub = joined[0]
            if zt_load_acquire(&sub.sub.state) != SUB_DONE:
                break
            joined.popleft()
            sub._finish()
        return 0

    def flush(self):
        """Everything queued so far is all the caller has for now: commit it without waiting
        for more (event loops call this once per turn in which they queued writes)."""
        cdef WState* w = self.w
        zpp_point("flush")
        with nogil:
            zt_mutex_lock(&w.mu)
            if w.flush_seq < w.next_seq:
                w.flush_seq = w.next_seq
                w.unsignaled_bytes = 0
                zt_cond_signal(&w.work)
            zt_mutex_unlock(&w.mu)

    def wait_for_room(self, int64_t nbytes):
        """Block (GIL released) until a submission of `nbytes` would be queued at once, or
        the writer stops."""
        cdef WState* w = self.w
        self._check()
        with nogil:
            zt_mutex_lock(&w.mu)
            while not w.stop and not _has_room(w, nbytes):
                zt_cond_wait(&w.done, &w.mu)
            zt_mutex_unlock(&w.mu)

    cdef int _hold(self, bint drain, int64_t mark, int64_t upto=-1) except -1:
        """Take the connection from the thread, waiting with the GIL released: with `drain`,
        until everything queued so far is written (with `upto` >= 0, everything queued up to
        that sequence number), else until the current batch is. `mark` > 0:
        first wait until no other explicit transaction is open or beginning, and reserve the
        start for the caller; `mark` < 0: mark the open one as ending at the moment of asking
        (what is queued after is not the transaction's). Raises ClosedError once close() has
        started."""
        cdef WState* w = self.w
        cdef int64_t target
        cdef bint refused = False
        self._check()
        with nogil:
            zt_mutex_lock(&w.mu)
            if mark > 0:
                while (w.txn_open or w.txn_pending) and not w.closing:
                    zt_cond_wait(&w.done, &w.mu)
            if w.closing:
                refused = True
            else:
                if mark > 0:
                    w.txn_pending = True
                elif mark < 0:
                    w.txn = 0
                target = _drain_target(w) if drain else w.done_seq
                if drain and upto >= 0:
                    target = upto
                w.hold_waiters += 1
                if w.hold_limit < target:
                    w.hold_limit = target
                if drain and w.flush_seq < w.next_seq:
                    # Writes whose submitter would say when it is done (an event loop's) are
                    # not waited for: the writer takes them now.
                    w.flush_seq = w.next_seq
                    w.unsignaled_bytes = 0
                zt_cond_signal(&w.work)
                while (w.held or w.busy or w.done_seq < target) and not w.closing:
                    zt_cond_wait(&w.done, &w.mu)
                w.hold_waiters -= 1
                if w.hold_waiters == 0:
                    w.hold_limit = -1
                if w.closing:
                    refused = True
                    if mark > 0:
                        w.txn_pending = False
                else:
                    w.held = 1
                zt_cond_broadcast(&w.work)
                zt_cond_broadcast(&w.done)
            zt_mutex_unlock(&w.mu)
        if refused:
            raise _errors.ClosedError(f"the store {self.path!r} is closing")
        self.db._leave()
        return 0

    cdef void _release(self) noexcept:
        cdef WState* w = self.w
        self.db.busy = 1  # the thread's again (see __init__)
        with nogil:
            zt_mutex_lock(&w.mu)
            w.held = 0
            zt_cond_broadcast(&w.work)
            zt_cond_broadcast(&w.done)
            zt_mutex_unlock(&w.mu)

    def call_holding(self, fn, bint drain=True):
        """Run `fn(db)` on the write connection and return what it returns: the connection is
        taken from the thread once everything queued so far is written (with `drain`) and given
        back when `fn` returns or raises.

        Taking and giving back happen inside this one compiled call, around the call of `fn`:
        Python runs signal handlers only between bytecodes (in `fn`, or in the caller once this
        returns), never in between here, so a KeyboardInterrupt or SystemExit can come only
        while `fn` runs (the connection is given back as it propagates) or after the connection
        is given back. A context manager cannot promise that: CPython 3.14 calls a compiled
        `__enter__` as a plain call, which runs pending signal handlers as it returns, before
        the `with` block protects anything, so `__exit__` would never run."""
        self._hold(drain, 0)
        try:
            return fn(self.db)
        finally:
            self._release()

    def holding(self, bint drain=True):
        """A context manager giving the write connection for the block: taken from the thread
        once everything queued so far is written (with `drain`), given back at the end. For
        tests and interactive use; zarrdb itself uses call_holding (see there why): if a
        signal's exception skips `__exit__`, the connection is given back when the holder is
        dropped (at once, as the exception unwinds the `with` statement). A test hook (test
        builds only)."""
        _test_hook("Writer.holding")
        return _Holding(self, drain)

    @property
    def in_transaction(self):
        """An explicit transaction is open (read without the lock: a hint for choosing a
        connection; membership of writes is decided under the lock)."""
        return self.w.txn_open

    @property
    def transaction(self):
        """The token of the open explicit transaction (0: none). Read without the lock, as
        in_transaction."""
        return self.w.txn if self.w.txn_open else 0

    @property
    def innermost_level(self):
        """The innermost open level of the explicit transaction (None: none is open). Read
        without holding the connection: a level opened or ended meanwhile is the caller's to
        expect."""
        stack = self._stack
        return stack[len(stack) - 1] if stack else None

    def begin(self, int64_t inside, list levels):
        """Open a level of explicit transaction and return the transaction's token: a savepoint
        on top of the innermost open level if `inside` is the open transaction's token (the
        caller works inside it), else a new transaction, once any other has ended. Appends
        the token to `levels`. (The form of the engine's tests; stores use open_level.)"""
        cdef Level level = Level(self)
        cdef Level parent = None
        if inside != 0 and self._stack and (<Level>self._stack[0]).token == inside:
            parent = self._stack[len(self._stack) - 1]
        _open_level(self, level, parent)
        levels.append(level.token)
        return level.token

    def end(self, int64_t token, bint ok, list levels=None):
        """End the innermost open level of transaction `token` (see end_level); `levels`, the
        list begin() put the token in, is emptied whatever happens."""
        try:
            if self._stack and (<Level>self._stack[0]).token == token:
                _end_level(self, self._stack[len(self._stack) - 1], ok)
            else:
                self._check()
                raise _errors.MisuseError(
                    f"transaction {token} is not open on {self.path!r}", code=SQLITE_MISUSE
                )
        finally:
            if levels is not None:
                del levels[:]

    def open_level(self, Level level, Level parent=None):
        """Open `level` on top of `parent`, the innermost open level the caller works inside
        (None: a new transaction). NestingError if another level is open on top of `parent`."""
        _open_level(self, level, parent)

    def end_level(self, Level level, bint ok):
        """End `level`: committed (or its savepoint released) if `ok`, else rolled back."""
        _end_level(self, level, ok)

    cdef void _forget_transaction(self) noexcept:
        cdef WState* w = self.w
        del self._stack[:]
        with nogil:
            zt_mutex_lock(&w.mu)
            w.txn = 0
            w.txn_open = False
            w.txn_level = 0
            _clear_transaction_error(w)
            zt_cond_broadcast(&w.work)
            zt_cond_broadcast(&w.done)
            zt_mutex_unlock(&w.mu)

    @property
    def checkpoint_failures(self):
        """(failed checkpoints, the last one's result code, frames in the log the last
        checkpoint saw, frames it copied): zarrdb._log reports new failures from these."""
        return (self.w.ck.n_failed, self.w.ck.last_rc, self.w.ck.log, self.w.ck.backfilled)

    @property
    def events(self):
        """A count that grows whenever the writer has something for zarrdb._log.WriterEvents to
        log (a checkpoint failed, the switch to WAL, a wait for another connection's lock):
        one look per write tells whether a report has anything to do. Read without the lock."""
        return self.w.ck.n_failed + self.w.autowal.in_wal + self.db._busy.waits

    @property
    def in_wal(self):
        """The writer has the file in WAL mode (it switched, or the file started in it). Read
        without the lock: the writer thread sets it after a commit, and a report may be one
        batch late."""
        return bool(self.w.autowal.in_wal)

    @property
    def touch_skipped(self):
        """A group commit left the modification time out since it was last written (read
        without the lock: a report after the writes it is about are done)."""
        return bool(self.w.touch.skipped)

    def stats(self):
        """Counters: batches committed, submissions, batches retried one by one, the largest
        batch, the most bytes queued at once, and the bytes queued now; `held`: a caller holds
        the connection now; `closing`: close() has started; `hold_waiters`: callers waiting to
        hold it."""
        cdef WState* w = self.w
        cdef int64_t v[16]
        with nogil:
            zt_mutex_lock(&w.mu)
            v[13] = w.held
            v[14] = w.closing
            v[15] = w.hold_waiters
            v[0] = w.n_batches
            v[1] = w.n_subs
            v[2] = w.n_retries
            v[3] = w.max_batch_subs
            v[4] = w.max_queued_bytes
            v[5] = w.queued_bytes
            v[6] = w.n_lingered
            v[7] = w.ck.n_checkpoints
            v[8] = w.ck.n_waits
            v[9] = w.ck.max_wal_frames
            v[10] = w.autowal.n_switches
            v[11] = w.autowal.in_wal
            v[12] = w.vac.n_steps
            zt_mutex_unlock(&w.mu)
        return dict(zip(("batches", "submissions", "retried_batches", "max_batch",
                         "max_queued_bytes", "queued_bytes", "lingered", "checkpoints",
                         "checkpoint_waits", "max_wal_frames", "switches_to_wal", "in_wal",
                         "vacuum_steps", "held", "closing", "hold_waiters"),
                        [v[i] for i in range(16)]))

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Write everything queued, stop the thread, roll back an explicit transaction whose
        block has not ended, and give the Database back to Python. Holds asked for from now
        on, and those still waiting, raise ClosedError; one granted already is waited for.
        Must not be called while holding."""
        cdef WState* w = self.w
        if self._closed:
            return
        zpp_point("writer.close")
        self._closed = True
        if not self.started or self.pid != _current_pid:
            return  # never started, or the thread lives in the parent process
        with nogil:
            zt_mutex_lock(&w.mu)
            w.closing = True
            zt_cond_broadcast(&w.done)
            while w.held:
                zt_cond_wait(&w.done, &w.mu)
            zt_mutex_unlock(&w.mu)
        self._stop()
        try:
            if not sqlite3_get_autocommit(self.db.db):
                # Nobody can end it now (end() raises ClosedError): it is discarded.
                self.db._finish(1, False)
        finally:
            self.db._leave()

    cdef void _stop(self) noexcept:
        cdef WState* w = self.w
        with nogil:
            zt_mutex_lock(&w.mu)
            w.stop = 1
            zt_cond_broadcast(&w.work)
            zt_cond_broadcast(&w.done)
            zt_mutex_unlock(&w.mu)
            zt_thread_join(w.thread)
        self.started = False
        if self.db is not None and self.db.db != NULL:
            # The handler points at this writer's state, which goes with the writer; the
            # connection stays the Database's.
            sqlite3_progress_handler(self.db.db, 0, NULL, NULL)
        self._stop_checkpointer()
        self._finalize_statements()

    def __dealloc__(self):
        cdef WState* w = self.w
        if w == NULL or self.pid != zarrdb_getpid():
            return  # in a forked child the thread and its memory are the parent's
        if self.started:
            self._stop()
        zt_cond_destroy(&w.work)
        zt_cond_destroy(&w.done)
        zt_cond_destroy(&w.ck.cv)
        zt_mutex_destroy(&w.mu)
        _clear_transaction_error(w)
        free(w.batch)
        free(w)
        self.w = NULL


cdef class _Holding:
    """`with writer.holding() as db:` (see Writer.holding). The connection is taken inside
    __enter__ and given back by __exit__, or by the holder's deallocation if __exit__ never
    runs: on CPython 3.14 an exception of a signal handler can be raised as the compiled
    __enter__ returns, before the with statement protects the block."""

    cdef Writer writer
    cdef bint drain
    cdef bint held

    def __cinit__(self, Writer writer, bint drain):
        self.writer = writer
        self.drain = drain
        self.held = False

    def __enter__(self):
        self.writer._hold(self.drain, 0)
        self.held = True
        return self.writer.db

    def __exit__(self, exc_type, exc, tb):
        if self.held:
            self.held = False
            self.writer._release()
        return False

    def __dealloc__(self):
        if self.held and self.writer is not None and self.writer.w != NULL:
            self.held = False
            self.writer._release()
