# The writer's queue (WState's head/tail and the batch), changed under the
# writer's mutex by submitters (Writer._enqueue, _writer.pxi), by callers taking the connection
# (Writer._hold) and by the writer thread (_writer_thread.pxi). Included into _core.pyx.


cdef inline bint _can_take(WState* w) noexcept nogil:
    # A submission that joined the transaction is written only while the connection is in it,
    # and one that did not only while it is not (the marks order them so: see begin()/end()).
    return (w.head != NULL and not w.held and
            (w.stop or w.hold_limit < 0 or w.head.seq <= w.hold_limit) and
            (w.head.txn != 0) == w.txn_open)


cdef Py_ssize_t _take(WState* w) noexcept nogil:
    """Move queued submissions into the batch (under the mutex): everything that can be taken,
    up to batch_max bytes, at least one if the batch is empty. Returns how many it took; -1 if
    there is no memory for the batch array."""
    cdef Py_ssize_t taken = 0
    cdef WSub* s
    cdef WSub** grown
    while _can_take(w) and (w.batch_n == 0 or w.batch_bytes + w.head.nbytes <= w.batch_max):
        if w.batch_n == w.batch_cap:
            grown = <WSub**>realloc(w.batch, (w.batch_cap * 2 + 16) * sizeof(WSub*))
            if grown == NULL:
                return -1 if w.batch_n == 0 else taken
            w.batch = grown
            w.batch_cap = w.batch_cap * 2 + 16
        s = w.head
        w.head = s.next
        if w.head == NULL:
            w.tail = NULL
        s.next = NULL
        s.state = SUB_RUNNING
        w.batch[w.batch_n] = s
        w.batch_n += 1
        w.batch_bytes += s.nbytes
        w.batch_last_seq = s.seq
        if not s.hinted:
            w.batch_hinted = False
        taken += 1
    return taken



cdef int64_t _drain_target(WState* w) noexcept nogil:
    """The sequence number up to which everything queued is written once done_seq reaches it
    (under the mutex): the last submission queued, else the batch being written."""
    if w.tail != NULL:
        return w.tail.seq
    if w.batch_n > 0 and w.batch_last_seq > w.done_seq:
        return w.batch_last_seq
    return w.done_seq


cdef void _leave_transaction(WState* w, int64_t token) noexcept nogil:
    """Transaction `token` did not open after all: what is queued as joining it is written on
    its own (under the mutex)."""
    cdef WSub* s = w.head
    if w.txn == token:
        w.txn = 0
    while s != NULL:
        if s.txn == token:
            s.txn = 0
        s = s.next


cdef inline bint _has_room(WState* w, int64_t nbytes) noexcept nogil:
    """A submission of `nbytes` may be queued now (under the mutex)."""
    return w.queued_bytes <= 0 or w.queued_bytes + nbytes <= w.queue_max


cdef void _enqueue_ready(WState* w, WSub* s) noexcept nogil:
    s.next = NULL
    s.queued_at = zt_monotonic_us()
    w.next_seq += 1
    s.seq = w.next_seq
    w.queued_bytes += s.nbytes
    if w.queued_bytes > w.max_queued_bytes:
        w.max_queued_bytes = w.queued_bytes
    if w.tail == NULL:
        w.head = s
    else:
        w.tail.next = s
    w.tail = s
