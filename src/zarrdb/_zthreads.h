/* Portable threads, mutexes, condition variables, a monotonic clock and a wake-up file
 * descriptor for the engine's writer thread. POSIX threads everywhere but Windows, where the
 * native slim reader/writer locks and condition variables are used. Nothing here touches
 * Python: every function may be called without the GIL. */
#ifndef ZARRDB_ZTHREADS_H
#define ZARRDB_ZTHREADS_H

#include <stdint.h>
#include <stdlib.h>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#include <process.h>

typedef SRWLOCK zt_mutex;
#define ZT_MUTEX_INITIALIZER SRWLOCK_INIT
typedef CONDITION_VARIABLE zt_cond;
typedef HANDLE zt_thread;

static void zt_mutex_init(zt_mutex *m) { InitializeSRWLock(m); }
static void zt_mutex_destroy(zt_mutex *m) { (void)m; }
static void zt_mutex_lock(zt_mutex *m) { AcquireSRWLockExclusive(m); }
static void zt_mutex_unlock(zt_mutex *m) { ReleaseSRWLockExclusive(m); }
static void zt_cond_init(zt_cond *c) { InitializeConditionVariable(c); }
static void zt_cond_destroy(zt_cond *c) { (void)c; }
static void zt_cond_wait(zt_cond *c, zt_mutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
/* Returns 0 when woken, 1 on timeout (callers re-check their condition either way). */
static int zt_cond_wait_ms(zt_cond *c, zt_mutex *m, long ms)
{
    return SleepConditionVariableSRW(c, m, (DWORD)ms, 0) ? 0 : 1;
}
static void zt_cond_signal(zt_cond *c) { WakeConditionVariable(c); }
static void zt_cond_broadcast(zt_cond *c) { WakeAllConditionVariable(c); }

typedef struct { void (*fn)(void *); void *arg; } zt_start_;

static unsigned __stdcall zt_trampoline_(void *p)
{
    zt_start_ s = *(zt_start_ *)p;
    free(p);
    s.fn(s.arg);
    return 0;
}

/* 0 on success. */
static int zt_thread_start(zt_thread *t, void (*fn)(void *), void *arg)
{
    zt_start_ *s = (zt_start_ *)malloc(sizeof(zt_start_));
    uintptr_t h;
    if (s == NULL) return -1;
    s->fn = fn;
    s->arg = arg;
    h = _beginthreadex(NULL, 0, zt_trampoline_, s, 0, NULL);
    if (h == 0) { free(s); return -1; }
    *t = (HANDLE)h;
    return 0;
}
static void zt_thread_join(zt_thread t) { WaitForSingleObject(t, INFINITE); CloseHandle(t); }

static int64_t zt_monotonic_ms(void) { return (int64_t)GetTickCount64(); }
static int64_t zt_monotonic_us(void)
{
    static LARGE_INTEGER freq;
    LARGE_INTEGER now;
    if (freq.QuadPart == 0) QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&now);
    return (int64_t)(now.QuadPart / freq.QuadPart * 1000000
                     + now.QuadPart % freq.QuadPart * 1000000 / freq.QuadPart);
}
/* Wait at most `us` microseconds (at least one millisecond's granularity on Windows). */
static int zt_cond_wait_us(zt_cond *c, zt_mutex *m, int64_t us)
{
    DWORD ms = (DWORD)((us + 999) / 1000);
    return SleepConditionVariableSRW(c, m, ms ? ms : 1, 0) ? 0 : 1;
}

/* No file descriptor to wake an event loop with: the Python side waits on the condition. */
#define ZT_HAVE_WAKE_FD 0
static int zt_wake_open(int *rfd, int *wfd) { *rfd = *wfd = -1; return -1; }
static void zt_wake_close(int rfd, int wfd) { (void)rfd; (void)wfd; }
static void zt_wake_signal(int wfd) { (void)wfd; }
static void zt_wake_clear(int rfd) { (void)rfd; }

#else /* POSIX */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#endif

typedef pthread_mutex_t zt_mutex;
#define ZT_MUTEX_INITIALIZER PTHREAD_MUTEX_INITIALIZER
typedef pthread_cond_t zt_cond;
typedef pthread_t zt_thread;

static void zt_mutex_init(zt_mutex *m) { pthread_mutex_init(m, NULL); }
static void zt_mutex_destroy(zt_mutex *m) { pthread_mutex_destroy(m); }
static void zt_mutex_lock(zt_mutex *m) { pthread_mutex_lock(m); }
static void zt_mutex_unlock(zt_mutex *m) { pthread_mutex_unlock(m); }

static void zt_cond_init(zt_cond *c)
{
#if defined(__APPLE__)
    pthread_cond_init(c, NULL);
#else
    /* Timed waits on the monotonic clock: a change of the wall clock does not stretch them. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
#endif
}
static void zt_cond_destroy(zt_cond *c) { pthread_cond_destroy(c); }
static void zt_cond_wait(zt_cond *c, zt_mutex *m) { pthread_cond_wait(c, m); }
static void zt_cond_signal(zt_cond *c) { pthread_cond_signal(c); }
static void zt_cond_broadcast(zt_cond *c) { pthread_cond_broadcast(c); }

typedef struct { void (*fn)(void *); void *arg; } zt_start_;

static void *zt_trampoline_(void *p)
{
    zt_start_ s = *(zt_start_ *)p;
    free(p);
    s.fn(s.arg);
    return NULL;
}

/* The thread starts with every signal blocked (it inherits the mask in force at its
 * creation): a signal sent to the process (Ctrl-C, SIGTERM) then goes to a thread that can act
 * on it, not to one that runs no Python and would leave the main thread asleep. Faults (SIGSEGV,
 * SIGBUS) on the thread itself are still delivered: the kernel does not let a mask hide them. */
static int zt_thread_start(zt_thread *t, void (*fn)(void *), void *arg)
{
    sigset_t all, old;
    int rc;
    zt_start_ *s = (zt_start_ *)malloc(sizeof(zt_start_));
    if (s == NULL) return -1;
    s->fn = fn;
    s->arg = arg;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(t, NULL, zt_trampoline_, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) { free(s); return -1; }
    return 0;
}
static void zt_thread_join(zt_thread t) { pthread_join(t, NULL); }

static int64_t zt_monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
static int64_t zt_monotonic_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
static int zt_cond_wait_us(zt_cond *c, zt_mutex *m, int64_t us)
{
    struct timespec ts;
#if defined(__APPLE__)
    clock_gettime(CLOCK_REALTIME, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    ts.tv_sec += (time_t)(us / 1000000);
    ts.tv_nsec += (long)(us % 1000000) * 1000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec += 1; ts.tv_nsec -= 1000000000L; }
    return pthread_cond_timedwait(c, m, &ts) == ETIMEDOUT;
}
static int zt_cond_wait_ms(zt_cond *c, zt_mutex *m, long ms)
{
    return zt_cond_wait_us(c, m, (int64_t)ms * 1000);
}

/* A file descriptor an event loop can watch (add_reader): an eventfd on Linux, a pipe
 * elsewhere. zt_wake_signal makes it readable; zt_wake_clear empties it. */
#define ZT_HAVE_WAKE_FD 1
static int zt_wake_open(int *rfd, int *wfd)
{
#ifdef __linux__
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) return -1;
    *rfd = *wfd = fd;
    return 0;
#else
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    *rfd = fds[0];
    *wfd = fds[1];
    return 0;
#endif
}
static void zt_wake_close(int rfd, int wfd)
{
    if (rfd >= 0) close(rfd);
    if (wfd >= 0 && wfd != rfd) close(wfd);
}
static void zt_wake_signal(int wfd)
{
#ifdef __linux__
    uint64_t one = 1;
    ssize_t r = write(wfd, &one, sizeof one);
#else
    char one = 1;
    ssize_t r = write(wfd, &one, 1);
#endif
    (void)r; /* full (EAGAIN) means it is readable already */
}
static void zt_wake_clear(int rfd)
{
    char buf[64];
    while (read(rfd, buf, sizeof buf) > 0) {
#ifdef __linux__
        break; /* one read resets an eventfd */
#endif
    }
}
#endif /* POSIX */

/* A flag one thread publishes and others read without the mutex: the store (release) makes
 * everything written before it visible to a reader whose load (acquire) sees the new value. */
#if defined(_MSC_VER)
static int zt_load_acquire(volatile int *p) { return (int)InterlockedOr((volatile LONG *)p, 0); }
static void zt_store_release(volatile int *p, int v) { InterlockedExchange((volatile LONG *)p, v); }
#else
#define zt_load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define zt_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#endif

#endif /* ZARRDB_ZTHREADS_H */
