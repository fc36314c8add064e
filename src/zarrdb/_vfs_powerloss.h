/*
 * A power-loss simulator under SQLite, for tests.
 *
 * A VFS that wraps the real default VFS. It is registered (as the default VFS, so every
 * connection of the process uses it) only when a test calls zpl_enable(); until then it does
 * not exist and costs nothing.
 *
 * While enabled it plays a disk with a volatile write cache:
 * - Writes, truncations and size changes go to the real file at once (so every connection
 *   reads them, as from the OS page cache), and are remembered, with the bytes they replaced,
 *   until the file is synced. xSync does not call fsync: it marks everything written to the
 *   file so far as on the disk.
 * - Directory entries follow POSIX: a file's creation or deletion is on the disk only once the
 *   directory is synced (xDelete with its dirSync flag, or the first sync of a journal or WAL
 *   opened with SQLITE_OPEN_CREATE, when the unix VFS syncs the directory). A deleted file is
 *   moved aside, not unlinked, so that a power loss can bring it back. A -wal or -journal that
 *   the guarded VFS above this one made just before SQLite's open (_sqlite_amalgamation.h)
 *   counts as made by that open.
 * - Power is lost when zpl_cut(0) is called, or at the n-th event after zpl_cut(n) (an event
 *   is a write, truncation, sync, creation or deletion of a tracked file; a sync is cut before
 *   it happens, the others just after). Then, with every other thread's file operations shut
 *   out:
 *   1. the directory operations since the last directory sync reach the disk in order, up to a
 *      random point (each with probability `keep`; the first one that does not, ends it);
 *   2. each file is put back to its state at its last sync, and every write since is replayed
 *      in order, kept whole (probability `keep`), torn (`tear`: each of its `sector`-byte
 *      sectors written or not, at random) or lost (the rest); truncations are kept or lost;
 *   3. the process ends at once with _exit(exit_code): no more writes, no clean-up (a thread
 *      that meanwhile touches a memory-mapped page the cut truncated away waits for the end).
 * The files are then what a disk would hold after the power came back. Every choice comes from
 * the seed, so a trial can be replayed (thread timing permitting).
 *
 * The shared-memory wal-index (-shm) is passed through untouched: SQLite rebuilds it when the
 * first connection after a crash finds nobody holding it. Temporary files are not tracked, nor
 * are files other code writes. With `trace`, every tracked operation and every choice at the
 * cut is printed on stderr. POSIX only (the tests that use it fork); elsewhere zpl_enable()
 * fails.
 *
 * Compiled only into test builds (setup.py defines ZARRDB_TEST_VFS when the environment sets
 * ZARRDB_TEST_VFS=1, as scripts/dev.sh and scripts/memcheck.sh do); a release build, every
 * wheel, has only the three stubs at the end, and zpl_enable() there says it is not built.
 */
#ifndef ZARRDB_VFS_POWERLOSS_H
#define ZARRDB_VFS_POWERLOSS_H

#include <stdlib.h>
#include <string.h>

#include "_sqlite_amalgamation.h"

#if defined(ZARRDB_TEST_VFS) && !defined(_WIN32)
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#define ZPL_SUPPORTED 1
#else
#define ZPL_SUPPORTED 0
#endif

#ifdef ZARRDB_TEST_VFS
#define ZPL_BUILT 1
#else
#define ZPL_BUILT 0
#endif

/* zpl_enable() results */
#define ZPL_OK 0
#define ZPL_ERR_ENABLED 1      /* already enabled in this process */
#define ZPL_ERR_UNSUPPORTED 2  /* not on this platform */
#define ZPL_ERR_NOMEM 3
#define ZPL_ERR_NOT_BUILT 4    /* a release build: the simulator is not compiled in */

#if ZPL_SUPPORTED

#define ZPL_WRITE 1
#define ZPL_RESIZE 2

/* One change to a file since its last sync. */
typedef struct zpl_op {
    int kind;
    sqlite3_int64 off;       /* ZPL_WRITE: where; ZPL_RESIZE: the new size */
    sqlite3_int64 len;       /* ZPL_WRITE: bytes written */
    sqlite3_int64 old_size;  /* the file's size before */
    unsigned char *data;     /* ZPL_WRITE: the bytes written */
    unsigned char *old;      /* the bytes replaced (a write's overlap with the old size, or
                                the part a truncation cut off) */
    sqlite3_int64 old_len;
} zpl_op;

/* A tracked file (one per file, shared by every handle open on it). */
typedef struct zpl_node {
    struct zpl_node *next;
    char *name;     /* the name SQLite knows it by */
    char *where;    /* where it is now: its name, or its hiding place once deleted */
    int deleted;
    zpl_op *ops;    /* since the last sync, oldest first */
    int nops;
    int cap;
} zpl_node;

#define ZPL_CREATED 1
#define ZPL_DELETED 2

/* A directory operation not yet on the disk. */
typedef struct zpl_dirop {
    int kind;
    char *name;
    char *hidden;  /* ZPL_DELETED: where the file was moved to */
} zpl_dirop;

typedef struct zpl_file {
    sqlite3_file base;
    zpl_node *node;     /* NULL: not tracked (temporary files, failed opens) */
    int dirsync;        /* the first sync also syncs the directory (as the unix VFS does) */
    sqlite3_file *real; /* the real VFS's file, right after this struct */
} zpl_file;

static struct {
    int enabled;
    sqlite3_vfs *real;
    sqlite3_mutex *mu;
    zpl_node *nodes;
    zpl_dirop *dirops;
    int ndirops;
    int capdirops;
    sqlite3_int64 events;
    sqlite3_int64 cut_after;
    double keep;
    double tear;
    sqlite3_int64 sector;
    sqlite3_uint64 rng;
    int exit_code;
    int trace;
    sqlite3_int64 hidden_seq;
} zpl;

static sqlite3_vfs zpl_vfs;

/* With tracing on, every tracked file operation and every choice at the power cut goes to
   stderr, one line each, numbered by event. */
#define ZPL_T(...)                                                      \
    do {                                                                \
        if (zpl.trace) {                                                \
            fprintf(stderr, "powerloss %lld: ", (long long)zpl.events); \
            fprintf(stderr, __VA_ARGS__);                               \
            fputc('\n', stderr);                                        \
        }                                                               \
    } while (0)

/* splitmix64: a small, good generator; the whole simulation draws from it. */
static sqlite3_uint64 zpl_next(void) {
    sqlite3_uint64 z = (zpl.rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double zpl_uniform(void) {
    return (double)(zpl_next() >> 11) * (1.0 / 9007199254740992.0);
}

static char *zpl_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = (char *)malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* --- the model ------------------------------------------------------------------------- */

static zpl_node *zpl_find(const char *name) {
    zpl_node *n;
    for (n = zpl.nodes; n; n = n->next)
        if (!n->deleted && strcmp(n->name, name) == 0) return n;
    return NULL;
}

static zpl_node *zpl_node_for(const char *name) {
    zpl_node *n = zpl_find(name);
    if (n) return n;
    n = (zpl_node *)calloc(1, sizeof *n);
    if (!n) return NULL;
    n->name = zpl_strdup(name);
    n->where = zpl_strdup(name);
    if (!n->name || !n->where) {
        free(n->name);
        free(n->where);
        free(n);
        return NULL;
    }
    n->next = zpl.nodes;
    zpl.nodes = n;
    return n;
}

static void zpl_forget_ops(zpl_node *n) {
    int i;
    for (i = 0; i < n->nops; i++) {
        free(n->ops[i].data);
        free(n->ops[i].old);
    }
    n->nops = 0;
}

static zpl_op *zpl_new_op(zpl_node *n) {
    if (n->nops == n->cap) {
        int cap = n->cap ? n->cap * 2 : 16;
        zpl_op *grown = (zpl_op *)realloc(n->ops, cap * sizeof *grown);
        if (!grown) return NULL;
        n->ops = grown;
        n->cap = cap;
    }
    memset(&n->ops[n->nops], 0, sizeof(zpl_op));
    return &n->ops[n->nops];
}

static int zpl_add_dirop(int kind, const char *name, const char *hidden) {
    zpl_dirop *d;
    if (zpl.ndirops == zpl.capdirops) {
        int cap = zpl.capdirops ? zpl.capdirops * 2 : 16;
        zpl_dirop *grown = (zpl_dirop *)realloc(zpl.dirops, cap * sizeof *grown);
        if (!grown) return SQLITE_NOMEM;
        zpl.dirops = grown;
        zpl.capdirops = cap;
    }
    d = &zpl.dirops[zpl.ndirops];
    d->kind = kind;
    d->name = zpl_strdup(name);
    d->hidden = hidden ? zpl_strdup(hidden) : NULL;
    if (!d->name || (hidden && !d->hidden)) {
        free(d->name);
        free(d->hidden);
        return SQLITE_NOMEM;
    }
    zpl.ndirops++;
    return SQLITE_OK;
}

/* The length of the directory part of `path` (up to its last '/'). */
static size_t zpl_dirlen(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) : 0;
}

static int zpl_same_dir(const char *a, const char *b) {
    size_t n = zpl_dirlen(a);
    return n == zpl_dirlen(b) && strncmp(a, b, n) == 0;
}

/* The directory of `path` was synced: its pending operations are on the disk. */
static void zpl_dir_synced(const char *path) {
    int i, kept = 0;
    for (i = 0; i < zpl.ndirops; i++) {
        zpl_dirop *d = &zpl.dirops[i];
        if (!zpl_same_dir(d->name, path)) {
            zpl.dirops[kept++] = *d;
            continue;
        }
        if (d->kind == ZPL_DELETED) {
            zpl_node *n;
            for (n = zpl.nodes; n; n = n->next)
                if (n->deleted && strcmp(n->where, d->hidden) == 0) zpl_forget_ops(n);
            unlink(d->hidden);
        }
        free(d->name);
        free(d->hidden);
    }
    zpl.ndirops = kept;
}

/* --- losing power ------------------------------------------------------------------------ */

static void zpl_pwrite(int fd, const unsigned char *p, sqlite3_int64 n, sqlite3_int64 off) {
    while (n > 0) {
        ssize_t w = pwrite(fd, p, (size_t)n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= w;
        off += w;
    }
}

/* Put one file back to its state at its last sync, then replay what reached the disk. */
static void zpl_settle(zpl_node *n) {
    int i, fd;
    if (n->nops == 0) return;
    fd = open(n->where, O_RDWR);
    if (fd < 0) return;
    for (i = n->nops - 1; i >= 0; i--) {
        zpl_op *op = &n->ops[i];
        if (op->kind == ZPL_WRITE) {
            if (op->old_len > 0) zpl_pwrite(fd, op->old, op->old_len, op->off);
            if (op->old_size < op->off + op->len) (void)ftruncate(fd, (off_t)op->old_size);
        } else {
            (void)ftruncate(fd, (off_t)op->old_size);
            if (op->old_len > 0) zpl_pwrite(fd, op->old, op->old_len, op->off);
        }
    }
    for (i = 0; i < n->nops; i++) {
        zpl_op *op = &n->ops[i];
        double r = zpl_uniform();
        const char *fate = r < zpl.keep ? "kept"
                           : (op->kind == ZPL_WRITE && r < zpl.keep + zpl.tear) ? "torn"
                                                                                : "lost";
        ZPL_T("%s %s %lld+%lld: %s", n->name, op->kind == ZPL_WRITE ? "write" : "resize",
              (long long)op->off, (long long)op->len, fate);
        if (op->kind == ZPL_RESIZE) {
            if (r < zpl.keep) (void)ftruncate(fd, (off_t)op->off);
        } else if (r < zpl.keep) {
            zpl_pwrite(fd, op->data, op->len, op->off);
        } else if (r < zpl.keep + zpl.tear) {
            /* torn: sector by sector (sectors aligned to the file, not to the write) */
            sqlite3_int64 at = op->off, end = op->off + op->len;
            while (at < end) {
                sqlite3_int64 stop = (at / zpl.sector + 1) * zpl.sector;
                if (stop > end) stop = end;
                if (zpl_next() & 1) zpl_pwrite(fd, op->data + (at - op->off), stop - at, at);
                at = stop;
            }
        }
    }
    close(fd);
}

/* A thread that touches memory-mapped file pages cut off by a truncation below waits here for
   the end instead of taking the process down before the files are settled. */
static void zpl_wait_for_the_end(int sig) {
    (void)sig;
    for (;;) pause();
}

/* The power goes out (the caller holds the mutex): the files become what the disk holds,
   and the process ends. */
static void zpl_power_off(void) {
    int i, reached = 0;
    zpl_node *n;
    struct sigaction wait_action;
    memset(&wait_action, 0, sizeof wait_action);
    wait_action.sa_handler = zpl_wait_for_the_end;
    sigaction(SIGBUS, &wait_action, NULL);
    while (reached < zpl.ndirops && zpl_uniform() < zpl.keep) reached++;
    ZPL_T("power off");
    for (i = 0; i < zpl.ndirops; i++)
        ZPL_T("%s %s: %s", zpl.dirops[i].kind == ZPL_CREATED ? "creation of" : "deletion of",
              zpl.dirops[i].name, i < reached ? "kept" : "lost");
    for (n = zpl.nodes; n; n = n->next) zpl_settle(n);
    for (i = zpl.ndirops - 1; i >= reached; i--) {
        zpl_dirop *d = &zpl.dirops[i];
        if (d->kind == ZPL_CREATED)
            unlink(d->name);
        else
            rename(d->hidden, d->name);
    }
    for (i = 0; i < reached; i++)
        if (zpl.dirops[i].kind == ZPL_DELETED) unlink(zpl.dirops[i].hidden);
    _exit(zpl.exit_code);
}

/* One more event; the power goes out at the chosen one. */
static void zpl_event(void) {
    zpl.events++;
    if (zpl.cut_after > 0 && zpl.events >= zpl.cut_after) zpl_power_off();
}

/* --- the file methods ---------------------------------------------------------------------- */

#define ZPL_REAL(f) (((zpl_file *)(f))->real)
#define ZPL_NODE(f) (((zpl_file *)(f))->node)

static int zplClose(sqlite3_file *f) {
    sqlite3_file *r = ZPL_REAL(f);
    return r->pMethods->xClose(r);
}

static int zplRead(sqlite3_file *f, void *buf, int n, sqlite3_int64 off) {
    sqlite3_file *r = ZPL_REAL(f);
    return r->pMethods->xRead(r, buf, n, off);
}

static int zplWrite(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off) {
    sqlite3_file *r = ZPL_REAL(f);
    zpl_node *node = ZPL_NODE(f);
    zpl_op *op = NULL;
    sqlite3_int64 size = 0;
    int rc;
    if (!node) return r->pMethods->xWrite(r, buf, n, off);
    sqlite3_mutex_enter(zpl.mu);
    rc = r->pMethods->xFileSize(r, &size);
    if (rc == SQLITE_OK) {
        op = zpl_new_op(node);
        if (!op) rc = SQLITE_NOMEM;
    }
    if (rc == SQLITE_OK) {
        op->kind = ZPL_WRITE;
        op->off = off;
        op->len = n;
        op->old_size = size;
        op->old_len = size > off ? (size - off < n ? size - off : n) : 0;
        op->data = (unsigned char *)malloc(n > 0 ? n : 1);
        op->old = (unsigned char *)malloc(op->old_len > 0 ? op->old_len : 1);
        if (!op->data || !op->old) {
            rc = SQLITE_NOMEM;
        } else {
            memcpy(op->data, buf, n);
            if (op->old_len > 0) rc = r->pMethods->xRead(r, op->old, (int)op->old_len, off);
        }
        if (rc == SQLITE_OK) rc = r->pMethods->xWrite(r, buf, n, off);
        ZPL_T("write %s %lld+%d (size %lld)", node->name, (long long)off, n, (long long)size);
        if (rc == SQLITE_OK) {
            node->nops++;
        } else {
            free(op->data);
            free(op->old);
        }
    }
    if (rc == SQLITE_OK) zpl_event();
    sqlite3_mutex_leave(zpl.mu);
    return rc;
}

/* Record a change of size (a truncation, or an extension by a size hint) already made. */
static int zpl_resized(zpl_node *node, sqlite3_int64 old_size, sqlite3_int64 new_size,
                       unsigned char *cut_off) {
    zpl_op *op = zpl_new_op(node);
    if (!op) {
        free(cut_off);
        return SQLITE_NOMEM;
    }
    op->kind = ZPL_RESIZE;
    op->off = new_size;
    op->old_size = old_size;
    op->old = cut_off;
    op->old_len = cut_off ? old_size - new_size : 0;
    node->nops++;
    return SQLITE_OK;
}

/* Read n bytes at off through the real file, in pieces xRead can take. */
static int zpl_read_all(sqlite3_file *r, unsigned char *p, sqlite3_int64 n, sqlite3_int64 off) {
    int rc = SQLITE_OK;
    while (rc == SQLITE_OK && n > 0) {
        int piece = n > (1 << 30) ? (1 << 30) : (int)n;
        rc = r->pMethods->xRead(r, p, piece, off);
        p += piece;
        n -= piece;
        off += piece;
    }
    return rc;
}

static int zplTruncate(sqlite3_file *f, sqlite3_int64 size) {
    sqlite3_file *r = ZPL_REAL(f);
    zpl_node *node = ZPL_NODE(f);
    sqlite3_int64 old_size = 0, now = 0;
    unsigned char *cut_off = NULL;
    int rc;
    if (!node) return r->pMethods->xTruncate(r, size);
    sqlite3_mutex_enter(zpl.mu);
    rc = r->pMethods->xFileSize(r, &old_size);
    if (rc == SQLITE_OK && old_size > size) {
        cut_off = (unsigned char *)malloc((size_t)(old_size - size));
        rc = cut_off ? zpl_read_all(r, cut_off, old_size - size, size) : SQLITE_NOMEM;
    }
    if (rc == SQLITE_OK) rc = r->pMethods->xTruncate(r, size);
    /* the size it has now (a VFS with a chunk size set rounds it up) */
    if (rc == SQLITE_OK) rc = r->pMethods->xFileSize(r, &now);
    if (rc == SQLITE_OK && cut_off && now > size) {
        if (now < old_size) {
            memmove(cut_off, cut_off + (now - size), (size_t)(old_size - now));
        } else {
            free(cut_off);
            cut_off = NULL;
        }
    }
    ZPL_T("truncate %s %lld -> %lld", node->name, (long long)old_size, (long long)now);
    if (rc == SQLITE_OK && now != old_size) {
        rc = zpl_resized(node, old_size, now, now < old_size ? cut_off : NULL);
        if (now < old_size) cut_off = NULL;
    }
    free(cut_off);
    if (rc == SQLITE_OK) zpl_event();
    sqlite3_mutex_leave(zpl.mu);
    return rc;
}

static int zplSync(sqlite3_file *f, int flags) {
    sqlite3_file *r = ZPL_REAL(f);
    zpl_file *zf = (zpl_file *)f;
    if (!zf->node) return r->pMethods->xSync(r, flags);
    sqlite3_mutex_enter(zpl.mu);
    ZPL_T("sync %s%s", zf->node->name, zf->dirsync ? " and its directory" : "");
    zpl_event(); /* power lost before this sync: it never happened */
    zpl_forget_ops(zf->node);
    if (zf->dirsync) {
        zpl_dir_synced(zf->node->name);
        zf->dirsync = 0;
    }
    sqlite3_mutex_leave(zpl.mu);
    return SQLITE_OK;
}

static int zplFileSize(sqlite3_file *f, sqlite3_int64 *size) {
    sqlite3_file *r = ZPL_REAL(f);
    return r->pMethods->xFileSize(r, size);
}

static int zplLock(sqlite3_file *f, int level) {
    sqlite3_file *r = ZPL_REAL(f);
    return r->pMethods->xLock(r, level);
}

static int zplUnlock(sqlite3_file *f, int level) {
    sqlite3_file *r = ZPL_REAL(f);
    return r->pMethods->xUnlock(r, level);
}

static int zplCheckReservedLock(sqlite3_file *f, int *out) {
    sqlite3_file *r = ZPL_REAL(f);
    return r->pMethods->xCheckReservedLock(r, out);
}

static int zplFileControl(sqlite3_file *f, int op, void *arg) {
    sqlite3_file *r = ZPL_REAL(f);
    zpl_node *node = ZPL_NODE(f);
    sqlite3_int64 before = 0, after = 0;
    int rc;
    if (!node || op != SQLITE_FCNTL_SIZE_HINT) return r->pMethods->xFileControl(r, op, arg);
    /* A size hint may extend the file (with memory mapping, or a chunk size set). */
    sqlite3_mutex_enter(zpl.mu);
    rc = r->pMethods->xFileSize(r, &before);
    if (rc == SQLITE_OK) rc = r->pMethods->xFileControl(r, op, arg);
    if (rc == SQLITE_OK && r->pMethods->xFileSize(r, &after) == SQLITE_OK && after != before)
        rc = zpl_resized(node, before, after, NULL);
    sqlite3_mutex_leave(zpl.mu);
    return rc;
}

static int zplSectorSize(sqlite3_file *f) {
    sqlite3_file *r = ZPL_REAL(f);
    return r->pMethods->xSectorSize(r);
}

static int zplDeviceCharacteristics(sqlite3_file *f) {
    sqlite3_file *r = ZPL_REAL(f);
    return r->pMethods->xDeviceCharacteristics(r);
}

/* The methods of later versions, for files whose real methods have them (SQLite sees
   version 3 on every file of this VFS). */
static int zplShmMap(sqlite3_file *f, int region, int size, int extend, void volatile **out) {
    sqlite3_file *r = ZPL_REAL(f);
    if (r->pMethods->iVersion < 2) return SQLITE_IOERR_SHMMAP;
    return r->pMethods->xShmMap(r, region, size, extend, out);
}

static int zplShmLock(sqlite3_file *f, int offset, int n, int flags) {
    sqlite3_file *r = ZPL_REAL(f);
    if (r->pMethods->iVersion < 2) return SQLITE_IOERR_SHMLOCK;
    return r->pMethods->xShmLock(r, offset, n, flags);
}

static void zplShmBarrier(sqlite3_file *f) {
    sqlite3_file *r = ZPL_REAL(f);
    if (r->pMethods->iVersion >= 2) r->pMethods->xShmBarrier(r);
}

static int zplShmUnmap(sqlite3_file *f, int delete_flag) {
    sqlite3_file *r = ZPL_REAL(f);
    if (r->pMethods->iVersion < 2) return SQLITE_OK;
    return r->pMethods->xShmUnmap(r, delete_flag);
}

static int zplFetch(sqlite3_file *f, sqlite3_int64 off, int n, void **out) {
    sqlite3_file *r = ZPL_REAL(f);
    if (r->pMethods->iVersion < 3) {
        *out = NULL; /* no mapping: SQLite reads instead */
        return SQLITE_OK;
    }
    return r->pMethods->xFetch(r, off, n, out);
}

static int zplUnfetch(sqlite3_file *f, sqlite3_int64 off, void *p) {
    sqlite3_file *r = ZPL_REAL(f);
    if (r->pMethods->iVersion < 3) return SQLITE_OK;
    return r->pMethods->xUnfetch(r, off, p);
}

static const sqlite3_io_methods zpl_io = {
    3,
    zplClose,
    zplRead,
    zplWrite,
    zplTruncate,
    zplSync,
    zplFileSize,
    zplLock,
    zplUnlock,
    zplCheckReservedLock,
    zplFileControl,
    zplSectorSize,
    zplDeviceCharacteristics,
    zplShmMap,
    zplShmLock,
    zplShmBarrier,
    zplShmUnmap,
    zplFetch,
    zplUnfetch,
};

/* --- the VFS methods ------------------------------------------------------------------------- */

/* Whether `name` is the sidecar that the guarded VFS above (_sqlite_amalgamation.h) made just
 * now, on this thread, for SQLite to open: its creation is then this open's, as if SQLite had
 * made it. */
static int zpl_made_by_guard(const char *name) {
    struct stat st;
    int made = zarrdb_made_sidecar.set && lstat(name, &st) == 0
        && st.st_dev == zarrdb_made_sidecar.dev && st.st_ino == zarrdb_made_sidecar.ino;
    zarrdb_made_sidecar.set = 0;
    return made;
}

static int zplOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                   int *out_flags) {
    zpl_file *f = (zpl_file *)file;
    int type = flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_WAL |
                        SQLITE_OPEN_SUPER_JOURNAL);
    int journal = type & (SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_WAL | SQLITE_OPEN_SUPER_JOURNAL);
    int tracked = name != NULL && type != 0 && !(flags & SQLITE_OPEN_DELETEONCLOSE);
    int created = 0;
    int made = name != NULL && zpl_made_by_guard(name);  /* (read and forgotten at each open) */
    int rc;
    (void)vfs;
    memset(f, 0, sizeof *f);
    f->real = (sqlite3_file *)&f[1];
    if (tracked) {
        sqlite3_mutex_enter(zpl.mu);
        created = (flags & SQLITE_OPEN_CREATE) && (made || access(name, F_OK) != 0);
    }
    rc = zpl.real->xOpen(zpl.real, name, f->real, flags, out_flags);
    if (rc == SQLITE_OK && tracked) {
        f->node = zpl_node_for(name);
        f->dirsync = (flags & SQLITE_OPEN_CREATE) && journal;
        if (!f->node || (created && zpl_add_dirop(ZPL_CREATED, name, NULL) != SQLITE_OK)) {
            rc = SQLITE_NOMEM;
            f->real->pMethods->xClose(f->real);
        }
    }
    if (rc != SQLITE_OK) {
        f->base.pMethods = NULL; /* nothing for SQLite to close */
        if (tracked) sqlite3_mutex_leave(zpl.mu);
        return rc;
    }
    f->base.pMethods = f->real->pMethods ? &zpl_io : NULL;
    if (tracked) {
        if (created) {
            ZPL_T("create %s", name);
            zpl_event();
        }
        sqlite3_mutex_leave(zpl.mu);
    }
    return SQLITE_OK;
}

static int zplDelete(sqlite3_vfs *vfs, const char *name, int dirsync) {
    char hidden[4096];
    zpl_node *node;
    int rc = SQLITE_OK;
    (void)vfs;
    sqlite3_mutex_enter(zpl.mu);
    if (access(name, F_OK) != 0) {
        sqlite3_mutex_leave(zpl.mu);
        return zpl.real->xDelete(zpl.real, name, dirsync); /* reports the missing file */
    }
    snprintf(hidden, sizeof hidden, "%s.powerloss-deleted-%lld", name,
             (long long)++zpl.hidden_seq);
    if (rename(name, hidden) != 0) {
        rc = SQLITE_IOERR_DELETE;
    } else {
        node = zpl_find(name);
        if (node) {
            char *where = zpl_strdup(hidden);
            if (where) {
                free(node->where);
                node->where = where;
            }
            node->deleted = 1;
        }
        ZPL_T("delete %s%s", name, (dirsync & 1) ? " and sync its directory" : "");
        rc = zpl_add_dirop(ZPL_DELETED, name, hidden);
        if (rc == SQLITE_OK && (dirsync & 1)) zpl_dir_synced(name);
    }
    if (rc == SQLITE_OK) zpl_event();
    sqlite3_mutex_leave(zpl.mu);
    return rc;
}

static int zplAccess(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
    (void)vfs;
    return zpl.real->xAccess(zpl.real, name, flags, out);
}

static int zplFullPathname(sqlite3_vfs *vfs, const char *name, int n, char *out) {
    (void)vfs;
    return zpl.real->xFullPathname(zpl.real, name, n, out);
}

static void *zplDlOpen(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return zpl.real->xDlOpen(zpl.real, name);
}

static void zplDlError(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    zpl.real->xDlError(zpl.real, n, out);
}

static void (*zplDlSym(sqlite3_vfs *vfs, void *lib, const char *sym))(void) {
    (void)vfs;
    return zpl.real->xDlSym(zpl.real, lib, sym);
}

static void zplDlClose(sqlite3_vfs *vfs, void *lib) {
    (void)vfs;
    zpl.real->xDlClose(zpl.real, lib);
}

static int zplRandomness(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    return zpl.real->xRandomness(zpl.real, n, out);
}

static int zplSleep(sqlite3_vfs *vfs, int us) {
    (void)vfs;
    return zpl.real->xSleep(zpl.real, us);
}

static int zplCurrentTime(sqlite3_vfs *vfs, double *out) {
    (void)vfs;
    return zpl.real->xCurrentTime(zpl.real, out);
}

static int zplGetLastError(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    return zpl.real->xGetLastError ? zpl.real->xGetLastError(zpl.real, n, out) : 0;
}

static int zplCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
    (void)vfs;
    return zpl.real->xCurrentTimeInt64(zpl.real, out);
}

static int zplSetSystemCall(sqlite3_vfs *vfs, const char *name, sqlite3_syscall_ptr fn) {
    (void)vfs;
    return zpl.real->xSetSystemCall(zpl.real, name, fn);
}

static sqlite3_syscall_ptr zplGetSystemCall(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return zpl.real->xGetSystemCall(zpl.real, name);
}

static const char *zplNextSystemCall(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return zpl.real->xNextSystemCall(zpl.real, name);
}

/* --- the interface for _core ------------------------------------------------------------------ */

static int zpl_enable(sqlite3_uint64 seed, double keep, double tear, sqlite3_int64 sector,
                      int exit_code, int trace) {
    sqlite3_vfs *real;
    if (zpl.enabled) return ZPL_ERR_ENABLED;
    if (sqlite3_initialize() != SQLITE_OK) return ZPL_ERR_NOMEM;
    real = sqlite3_vfs_find(NULL);
    /* The unix VFS is version 3; every method is passed on (and the file methods need 3). */
    if (real == NULL || real->iVersion < 3) return ZPL_ERR_UNSUPPORTED;
    zpl.mu = sqlite3_mutex_alloc(SQLITE_MUTEX_FAST);
    if (!zpl.mu) return ZPL_ERR_NOMEM;
    zpl.real = real;
    zpl.rng = seed;
    zpl.cut_after = 0;
    zpl.keep = keep;
    zpl.tear = tear;
    zpl.sector = sector > 0 ? sector : 512;
    zpl.exit_code = exit_code;
    zpl.trace = trace;
    memset(&zpl_vfs, 0, sizeof zpl_vfs);
    zpl_vfs.iVersion = 3;
    zpl_vfs.szOsFile = (int)sizeof(zpl_file) + real->szOsFile;
    zpl_vfs.mxPathname = real->mxPathname;
    zpl_vfs.zName = ZARRDB_POWERLOSS_VFS;
    zpl_vfs.xOpen = zplOpen;
    zpl_vfs.xDelete = zplDelete;
    zpl_vfs.xAccess = zplAccess;
    zpl_vfs.xFullPathname = zplFullPathname;
    zpl_vfs.xDlOpen = zplDlOpen;
    zpl_vfs.xDlError = zplDlError;
    zpl_vfs.xDlSym = zplDlSym;
    zpl_vfs.xDlClose = zplDlClose;
    zpl_vfs.xRandomness = zplRandomness;
    zpl_vfs.xSleep = zplSleep;
    zpl_vfs.xCurrentTime = zplCurrentTime;
    zpl_vfs.xGetLastError = zplGetLastError;
    zpl_vfs.xCurrentTimeInt64 = zplCurrentTimeInt64;
    zpl_vfs.xSetSystemCall = zplSetSystemCall;
    zpl_vfs.xGetSystemCall = zplGetSystemCall;
    zpl_vfs.xNextSystemCall = zplNextSystemCall;
    if (sqlite3_vfs_register(&zpl_vfs, 1) != SQLITE_OK) {
        sqlite3_mutex_free(zpl.mu);
        zpl.mu = NULL;
        return ZPL_ERR_NOMEM;
    }
    zpl.enabled = 1;
    return ZPL_OK;
}

/* Lose power now (never returns), or at the n-th event from now. */
static void zpl_cut(sqlite3_int64 n) {
    if (!zpl.enabled) return;
    sqlite3_mutex_enter(zpl.mu);
    if (n <= 0) zpl_power_off();
    zpl.cut_after = zpl.events + n;
    sqlite3_mutex_leave(zpl.mu);
}

static sqlite3_int64 zpl_events(void) {
    sqlite3_int64 n;
    if (!zpl.enabled) return 0;
    sqlite3_mutex_enter(zpl.mu);
    n = zpl.events;
    sqlite3_mutex_leave(zpl.mu);
    return n;
}

#else /* !ZPL_SUPPORTED: a release build, or not POSIX */

static int zpl_enable(sqlite3_uint64 seed, double keep, double tear, sqlite3_int64 sector,
                      int exit_code, int trace) {
    (void)seed; (void)keep; (void)tear; (void)sector; (void)exit_code; (void)trace;
    return ZPL_BUILT ? ZPL_ERR_UNSUPPORTED : ZPL_ERR_NOT_BUILT;
}

static void zpl_cut(sqlite3_int64 n) { (void)n; }

static sqlite3_int64 zpl_events(void) { return 0; }

#endif /* ZPL_SUPPORTED */

#endif /* ZARRDB_VFS_POWERLOSS_H */
