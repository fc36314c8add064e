# Remote files, read-only: SQLite reads them through the "zarrdb-remote" VFS (_remote_vfs.h),
# which serves its reads from a block cache shared by every connection to the file and fills
# the cache by calling a Python function for byte ranges (zarrdb.remote gives it obstore's).
#
#     source = RemoteFile("s3://bucket/data.zarrdb", size, fetch)   # fetch(offset, length)
#     db = RemoteDatabase(source)                                    # one per thread
#
# Included at the end of _core.pyx (one compiled unit with SQLite).

import threading as _threading

cdef extern from "_remote_vfs.h" nogil:
    ctypedef struct zr_source:
        pass
    ctypedef struct zr_stats:
        sqlite3_int64 requests
        sqlite3_int64 bytes
        sqlite3_int64 hits
        sqlite3_int64 misses
        sqlite3_int64 waits
        sqlite3_int64 failures
        sqlite3_int64 evictions
        sqlite3_int64 cached
        sqlite3_int64 loading
    ctypedef int (*zr_fetch_fn)(zr_source* source, sqlite3_int64 offset, sqlite3_int64 length,
                                unsigned char* dest) noexcept
    ctypedef void (*zr_schedule_fn)(zr_source* source, sqlite3_int64 first, int count) noexcept
    ctypedef int (*zr_waiting_fn)(zr_source* source) noexcept
    const char* ZR_VFS_NAME
    int ZR_FCNTL_SPAN
    int zr_register(zr_fetch_fn fetch, zr_schedule_fn schedule, zr_waiting_fn waiting)
    zr_source* zr_source_new(void* owner, sqlite3_int64 size, sqlite3_int64 block_size,
                             sqlite3_int64 capacity, int max_run, int min_run, int background)
    int zr_source_fetch_scheduled(zr_source* source, sqlite3_int64 first, int count)
    const char* zr_source_name(zr_source* source)
    void* zr_source_owner(zr_source* source)
    void zr_source_detach(zr_source* source)
    int zr_source_put_head(zr_source* source, const unsigned char* data, sqlite3_int64 length)
    void zr_source_stats(zr_source* source, zr_stats* out)
    void zr_registry_before_fork()
    void zr_registry_after_fork(int child)


REMOTE_VFS = ZR_VFS_NAME.decode("ascii")

# The exception of the last failed fetch in each thread, as (RemoteFile, exception): SQLite
# reports the failure as SQLITE_IOERR_READ, and the connection that sees it (in the same thread)
# raises this instead.
_fetch_failures = _threading.local()


cdef int _remote_fetch(zr_source* source, sqlite3_int64 offset, sqlite3_int64 length,
                       unsigned char* dest) noexcept with gil:
    cdef void* owner = zr_source_owner(source)
    cdef Py_buffer view
    cdef RemoteFile remote
    if owner == NULL:
        return 1
    remote = <RemoteFile>owner
    try:
        data = remote.fetch(offset, length)
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            if view.len != length:
                raise _errors.DiskIOError(
                    f"{remote.url!r}: asked for {length:,} bytes at {offset:,}, got {view.len:,}; "
                    "the object is shorter than when it was opened",
                    code=SQLITE_IOERR, filename=remote.url,
                )
            with nogil:
                memcpy(dest, view.buf, <size_t>length)
        finally:
            PyBuffer_Release(&view)
        return 0
    except BaseException as exc:
        _fetch_failures.last = (remote, exc)
        return 1


cdef void _remote_schedule(zr_source* source, sqlite3_int64 first, int count) noexcept with gil:
    # Read-ahead no reader waits for yet, fetched on one of zarrdb.remote's request threads.
    # Its blocks stay loading until fetched or failed, so if it cannot be handed over it is
    # fetched here and now.
    cdef void* owner = zr_source_owner(source)
    if owner != NULL:
        remote = <RemoteFile>owner
        try:
            remote.schedule(remote._fetch_scheduled, first, count)
            return
        except BaseException:
            pass
    with nogil:
        zr_source_fetch_scheduled(source, first, count)


cdef int _remote_waiting(zr_source* source) noexcept with gil:
    # A reader waits for another reader's fetch: the file's `waiting()` may end the wait by
    # raising (the store closing), and the read fails with that exception.
    cdef void* owner = zr_source_owner(source)
    if owner == NULL:
        return 0
    remote = <RemoteFile>owner
    if remote.waiting is None:
        return 0
    try:
        remote.waiting()
        return 0
    except BaseException as exc:
        _fetch_failures.last = (remote, exc)
        return 1


if zr_register(_remote_fetch, _remote_schedule, _remote_waiting) != SQLITE_OK:
    raise ImportError("cannot register zarrdb's remote SQLite VFS")

def _remote_before_fork():
    with nogil:
        zr_registry_before_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_remote_before_fork,
        after_in_parent=lambda: zr_registry_after_fork(0),
        after_in_child=lambda: zr_registry_after_fork(1),
    )


cdef class RemoteFile:
    """A database file read by byte ranges: `fetch(offset, length)` returns exactly `length`
    bytes (any buffer). Its blocks are cached here, least recently used dropped first, and
    shared by every RemoteDatabase opened on it. Pass `head`, bytes from the start of the file
    already in hand, to cache them without a fetch.

    A miss fetches at least the aligned `min_request` bytes around it (default one block); a
    read in order grows its requests up to `readahead`. With `schedule(function, *args)`,
    which must call `function(*args)` soon on another thread, a read in order also fetches its
    next run in the background. `waiting()` is called now and then while a reader waits for
    another reader's fetch; an exception it raises ends the wait and fails the read."""

    cdef zr_source* source
    cdef long pid
    cdef readonly str url
    cdef readonly str name
    cdef readonly object fetch
    cdef readonly object schedule
    cdef readonly object waiting
    cdef readonly int64_t size
    cdef readonly int64_t block_size

    def __cinit__(self):
        self.source = NULL

    def __init__(self, url, size, fetch, *, block_size=_tunables.REMOTE_BLOCK_BYTES,
                 cache_size=_tunables.REMOTE_CACHE_BYTES,
                 readahead=_tunables.REMOTE_READAHEAD_BYTES, min_request=None, schedule=None,
                 head=None, waiting=None):
        cdef const unsigned char[:] initial
        if self.source != NULL:
            raise _errors.MisuseError("RemoteFile.__init__ called twice", code=SQLITE_MISUSE)
        if not callable(fetch):
            raise TypeError("fetch must be callable: fetch(offset, length) -> bytes")
        if size < 0:
            raise ValueError(f"size must be >= 0, not {size}")
        if block_size < 512 or block_size > (1 << 30):
            raise ValueError(f"block_size must be from 512 bytes to 1 GiB, not {block_size}")
        if cache_size < block_size:
            raise ValueError(f"cache_size ({cache_size}) must hold at least one block ({block_size})")
        if schedule is not None and not callable(schedule):
            raise TypeError("schedule must be callable: schedule(function, *args)")
        self.url = str(url)
        self.fetch = fetch
        self.schedule = schedule
        self.waiting = waiting
        self.size = size
        self.block_size = block_size
        self.pid = zarrdb_getpid()
        self.source = zr_source_new(<void*>self, size, block_size, cache_size // block_size,
                                    max(1, min(readahead // block_size, 1 << 20)),
                                    max(1, min((min_request or block_size) // block_size, 1 << 20)),
                                    schedule is not None)
        if self.source == NULL:
            raise MemoryError()
        self.name = zr_source_name(self.source).decode("ascii")
        if head is not None and len(head):
            initial = memoryview(head).cast("B")
            if zr_source_put_head(self.source, &initial[0], initial.shape[0]):
                raise MemoryError()

    def _fetch_scheduled(self, sqlite3_int64 first, int count):
        """Fetch the read-ahead run that was scheduled (see `schedule`)."""
        if self.source == NULL or self.pid != zarrdb_getpid():
            return
        with nogil:
            zr_source_fetch_scheduled(self.source, first, count)
        _fetch_failures.last = None  # nobody reads this thread's failure: the readers retry

    def stats(self):
        """Counters since opening: requests (fetches), bytes fetched, block hits and misses,
        waits for another reader's fetch, failures, evictions, the bytes cached now, and the
        blocks being fetched now (`loading`: 0 once every request made has been answered)."""
        cdef zr_stats s
        zr_source_stats(self.source, &s)
        return {
            "requests": s.requests, "bytes": s.bytes, "hits": s.hits, "misses": s.misses,
            "waits": s.waits, "failures": s.failures, "evictions": s.evictions,
            "cached_bytes": s.cached * self.block_size, "loading": s.loading,
        }

    def __dealloc__(self):
        # In a child after fork the source's lock may be held by a thread of the parent: the
        # child's stores open sources of their own, so this one is left alone.
        if self.source != NULL and self.pid == zarrdb_getpid():
            zr_source_detach(self.source)
        self.source = NULL

    def __reduce__(self):
        raise TypeError("a RemoteFile cannot be pickled; pickle the SQLiteStore instead")

    def __repr__(self):
        return f"<zarrdb._core.RemoteFile {self.url!r} {self.size:,} bytes>"


cdef class RemoteDatabase(Database):
    """A read-only Database on a RemoteFile. A failed fetch raises the RemoteReadError that
    zarrdb.remote's fetch function raised (or a DiskIOError naming the file)."""

    cdef readonly RemoteFile source

    def __init__(self, RemoteFile source not None, *, busy_timeout=None, cache_size=None):
        self.source = source
        self.path = source.url  # in messages, from the first (not the VFS's name for it)
        Database.__init__(self, source.name, mode="r", vfs=REMOTE_VFS,
                          busy_timeout=busy_timeout, cache_size=cache_size, mmap_size=0,
                          cell_size_check=True)

    cdef void _span(self, int64_t nbytes):
        cdef sqlite3_int64 value = nbytes
        if self.db != NULL:
            # A hint for the block cache's next miss: without it the read still works.
            sqlite3_file_control(self.db, "main", ZR_FCNTL_SPAN, &value)

    def get(self, key):
        """As Database.get; the value's length, looked up first, tells the block cache how much
        the first miss should fetch (the value's pages lie together in a file zarrdb wrote),
        instead of discovering them a block at a time."""
        size = self.length(key)
        if size is None:
            return None
        if size > self.source.block_size:
            self._span(size)
        try:
            return Database.get(self, key)
        finally:
            self._span(0)

    def get_range(self, key, start, length):
        """As Database.get_range, with the range's length as the first miss's span."""
        span = length if length is not None else (-start if start < 0 else 0)
        if span > self.source.block_size:
            self._span(span)
        try:
            return Database.get_range(self, key, start, length)
        finally:
            self._span(0)

    cdef object _error_beyond(self, int rc):
        """A fetch that failed in this thread for this file: SQLite saw SQLITE_IOERR_READ;
        the caller gets the fetch's exception (a signal handler's, say, as it is)."""
        failure = getattr(_fetch_failures, "last", None)
        _fetch_failures.last = None
        if failure is None or failure[0] is not self.source or (rc & 0xFF) != SQLITE_IOERR:
            return None
        exc = failure[1]
        if isinstance(exc, _errors.ZarrDBError) or not isinstance(exc, Exception):
            return exc
        err = _errors.RemoteReadError(
            f"cannot read {self.source.url!r}: {type(exc).__name__}: {exc}",
            code=SQLITE_IOERR, extended_code=sqlite3_extended_errcode(self.db),
            filename=self.source.url,
        )
        err.__cause__ = exc
        return err

    def __dealloc__(self):
        self._close()  # while self.source still keeps the RemoteFile alive

    def __repr__(self):
        return f"<zarrdb._core.RemoteDatabase {self.source.url!r}>"
