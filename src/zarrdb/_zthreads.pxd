# C declarations of zarrdb's portable threads, mutexes, condition variables, clock and wake-up
# descriptor (_zthreads.h), for the writer thread. Declarations only; all usable without the GIL.
#
# How the engine uses them (the fields each guards are marked in _writer_state.pxi's structs): a
# mutex is taken only without the GIL (inside `with nogil`), never the GIL while one is held;
# the condition variables are waited on under the mutex they name; zt_load_acquire and
# zt_store_release are for the few ints read without the mutex (a submission's state, the
# interrupt flag), where a reader that sees the new value must also see what was written
# before it.
from libc.stdint cimport int64_t

cdef extern from "_zthreads.h" nogil:
    ctypedef struct zt_mutex:
        pass
    ctypedef struct zt_cond:
        pass
    ctypedef struct zt_thread:
        pass
    void zt_mutex_init(zt_mutex* m)
    void zt_mutex_destroy(zt_mutex* m)
    void zt_mutex_lock(zt_mutex* m)
    void zt_mutex_unlock(zt_mutex* m)
    void zt_cond_init(zt_cond* c)
    void zt_cond_destroy(zt_cond* c)
    void zt_cond_wait(zt_cond* c, zt_mutex* m)
    int zt_cond_wait_ms(zt_cond* c, zt_mutex* m, long ms)
    void zt_cond_signal(zt_cond* c)
    void zt_cond_broadcast(zt_cond* c)
    int zt_thread_start(zt_thread* t, void (*fn)(void*) noexcept nogil, void* arg)
    void zt_thread_join(zt_thread t)
    int64_t zt_monotonic_ms()
    int64_t zt_monotonic_us()
    int zt_cond_wait_us(zt_cond* c, zt_mutex* m, int64_t us)
    int ZT_HAVE_WAKE_FD
    int zt_wake_open(int* rfd, int* wfd)
    void zt_wake_close(int rfd, int wfd)
    void zt_wake_signal(int wfd)
    void zt_wake_clear(int rfd)
    int zt_load_acquire(int* p)
    void zt_store_release(int* p, int v)
