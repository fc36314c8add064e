# The writer's queue (WState's head/tail, the deferred list and the batch), changed under the
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
    (under the mutex): the last submission queued, else the batch being written. Not the
    submissions deferred until the open transaction's end: a hold inside the transaction (a
    read of its block, its end) waiting for them would wait for itself."""
    if w.tail != NULL:
        return w.tail.seq
    if w.batch_n > 0 and w.batch_last_seq > w.done_seq:
        return w.batch_last_seq
    return w.done_seq


cdef void _defer_queued(WState* w) noexcept nogil:
    """Move everything queued to the deferred list (under the mutex; its bytes stay counted,
    as deferred_bytes too)."""
    cdef WSub* s = w.head
    if s == NULL:
        return
    while s != NULL:
        w.deferred_bytes += s.nbytes
        s = s.next
    if w.dtail == NULL:
        w.dhead = w.head
    else:
        w.dtail.next = w.head
    w.dtail = w.tail
    w.head = w.tail = NULL


cdef void _requeue_deferred(WState* w) noexcept nogil:
    """Queue what waited for the transaction's end again (under the mutex)."""
    cdef WSub* s = w.dhead
    cdef WSub* nxt
    w.dhead = w.dtail = NULL
    w.deferred_bytes = 0
    while s != NULL:
        nxt = s.next
        w.queued_bytes -= s.nbytes  # counted again by _enqueue_ready
        _enqueue_ready(w, s)
        s = nxt


cdef inline bint _has_room(WState* w, int64_t nbytes) noexcept nogil:
    """A submission of `nbytes` may be queued now (under the mutex). One that would join the
    open transaction is counted against what the writer can write before that transaction
    ends, not against the writes deferred until its end: waiting for those would wait for the
    transaction's end, which the block making this write has to reach first. (The memory
    pinned is then at most twice the bound: the deferred writes and the transaction's.)"""
    cdef int64_t counted = w.queued_bytes
    if w.txn != 0:
        counted -= w.deferred_bytes
    return counted <= 0 or counted + nbytes <= w.queue_max


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
