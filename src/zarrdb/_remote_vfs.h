/*
 * The "zarrdb-remote" VFS: SQLite reads a database file that lives elsewhere (an object store,
 * a web server) through a fetch function that returns byte ranges. Read-only.
 *
 * A remote file is a zr_source, created by zarrdb._core.RemoteFile and registered under a
 * unique name; sqlite3_open_v2(name, ..., "zarrdb-remote") opens it. Every connection to a
 * source shares its block cache: fixed-size blocks, least recently used evicted first.
 *
 * - A read served from the cache costs a memcpy under the source's mutex.
 * - A miss fetches a run of consecutive absent blocks in one request: the blocks the read needs,
 *   and more while reading goes on in one direction (read-ahead: a miss just after a run fetched
 *   before, or just before it, fetches a run twice as long on that side, up to a limit). The
 *   source remembers its last few runs (streams), so several readers walking together (dask
 *   workers go through an array backwards), or one reader interleaving a few scans, each keep
 *   their read-ahead.
 * - Blocks being fetched are in the table marked loading; another reader of such a block waits
 *   for that fetch instead of issuing its own. A failed fetch takes its blocks out again, so a
 *   waiter retries and sees its own error.
 * - The fetch function (zarrdb._core, with the GIL) is called with no lock held. SQLite itself
 *   calls into this VFS without the GIL (every SQLite call in zarrdb._core runs without it), so
 *   a reader waiting for another thread's fetch never holds the GIL that fetch needs.
 *
 * The file is declared immutable, so SQLite takes no locks, looks for no journal and keeps its
 * own page cache across transactions. Portable C: the mutexes and condition variables of
 * _zthreads.h (pthreads, or SRW locks on Windows); nothing compiler-specific. Included into
 * _core.c after SQLite.
 */
#ifndef ZARRDB_REMOTE_VFS_H
#define ZARRDB_REMOTE_VFS_H

#include <stdlib.h>
#include <string.h>

#include "_zthreads.h"

#define ZR_VFS_NAME "zarrdb-remote"
#define ZR_NAME_MAX 48
#define ZR_STREAMS 8
#define ZR_NEAR 4 /* blocks a stream's reader may skip, at least */

typedef struct zr_source zr_source;

/* Copies bytes [offset, offset + length) of the source into dest; 0 on success. */
typedef int (*zr_fetch_fn)(zr_source *source, sqlite3_int64 offset, sqlite3_int64 length,
                           unsigned char *dest);

/* Arranges for zr_source_fetch_scheduled(source, first, count) to be called soon on another
 * thread (read-ahead that no reader waits for yet); that call must happen, or the blocks stay
 * loading. Called with no lock held. */
typedef void (*zr_schedule_fn)(zr_source *source, sqlite3_int64 first, int count);

/* Called while a reader waits for another reader's fetch (every ZR_WAIT_STEP_MS, no lock held):
 * nonzero ends the wait, and the read fails (the caller has recorded why). */
typedef int (*zr_waiting_fn)(zr_source *source);
#define ZR_WAIT_STEP_MS 50

/* sqlite3_file_control(db, "main", ZR_FCNTL_SPAN, &bytes): the next read on this connection
 * that misses starts a span of `bytes` that will be read through (a value of that length):
 * fetch it in one request instead of discovering it block by block. 0 clears it. */
#define ZR_FCNTL_SPAN 0x7a720001

typedef struct zr_stats {
    sqlite3_int64 requests;  /* fetches made */
    sqlite3_int64 bytes;     /* bytes fetched */
    sqlite3_int64 hits;      /* blocks served from the cache */
    sqlite3_int64 misses;    /* blocks that had to be fetched */
    sqlite3_int64 waits;     /* times a reader waited for another reader's fetch */
    sqlite3_int64 failures;  /* fetches that failed */
    sqlite3_int64 evictions; /* blocks dropped to stay within the capacity */
    sqlite3_int64 cached;    /* blocks in the cache now */
    sqlite3_int64 loading;   /* blocks being fetched now (by readers or in the background) */
} zr_stats;

/* One fetched run of blocks; its blocks point into it and it is freed with the last of them. */
typedef struct zr_run {
    int refs;
    unsigned char *data;
} zr_run;

typedef struct zr_block zr_block;
struct zr_block {
    sqlite3_int64 index;
    int loading;            /* a fetch for it is under way */
    zr_run *run;            /* its bytes; while loading, the run being fetched for it (not a
                               reference: so that memory in flight is reachable from the
                               source, whatever becomes of the thread fetching it) */
    unsigned char *data;    /* into run->data */
    zr_block *hash_next;
    zr_block *lru_prev;     /* the LRU list holds loaded blocks only, most recent first */
    zr_block *lru_next;
};

/* A sequential stream: the blocks its runs covered, and the length of its next run. */
typedef struct zr_stream {
    sqlite3_int64 lo;       /* its first block */
    sqlite3_int64 hi;       /* the block after its last */
    int run;
    sqlite3_int64 used;     /* when it last grew: the least recently used stream is replaced */
    sqlite3_int64 trigger;  /* forward streams: a read of this block or later (below hi)
                               fetches the next run in the background; -1: none */
    sqlite3_int64 newest;   /* forward streams: the first block of the newest run asked for */
} zr_stream;

struct zr_source {
    zr_source *next;        /* in the registry */
    char name[ZR_NAME_MAX];
    int refs;               /* the owner and each open file; under zr_registry_lock */
    void *owner;            /* zarrdb._core.RemoteFile; NULL once it is gone */
    sqlite3_int64 size;
    sqlite3_int64 block_size;
    sqlite3_int64 nblocks;  /* blocks in the file */
    sqlite3_int64 capacity; /* blocks kept */
    int max_run;            /* blocks fetched at most in one request by read-ahead */
    int min_run;            /* a miss fetches at least the aligned group of this many blocks */
    int background;         /* read-ahead may be fetched in the background (zr_schedule) */
    zt_mutex mutex;
    zt_cond loaded;         /* broadcast when a fetch ends */
    zr_block **buckets;
    sqlite3_int64 nbuckets; /* a power of two */
    zr_block lru;           /* sentinel of the LRU list */
    zr_stream streams[ZR_STREAMS];
    sqlite3_int64 clock;    /* counts misses, to age the streams */
    zr_stats stats;
};

typedef struct zr_file {
    sqlite3_file base;
    zr_source *source;
    sqlite3_int64 span;     /* ZR_FCNTL_SPAN: bytes the next miss on this file fetches */
} zr_file;

static zt_mutex zr_registry_lock = ZT_MUTEX_INITIALIZER;
static zr_source *zr_registry = NULL;
static unsigned long zr_serial = 0;
static zr_fetch_fn zr_fetch = NULL;
static zr_schedule_fn zr_schedule = NULL;
static zr_waiting_fn zr_waiting = NULL;
static sqlite3_vfs *zr_default_vfs = NULL;

/* --- the block table and the LRU list (all under source->mutex) ------------------------------ */

static zr_block **zr_slot(zr_source *s, sqlite3_int64 index) {
    return &s->buckets[(sqlite3_uint64)index & (sqlite3_uint64)(s->nbuckets - 1)];
}

static zr_block *zr_find(zr_source *s, sqlite3_int64 index) {
    zr_block *b = *zr_slot(s, index);
    while (b != NULL && b->index != index) b = b->hash_next;
    return b;
}

static void zr_unhash(zr_source *s, zr_block *block) {
    zr_block **p = zr_slot(s, block->index);
    while (*p != block) p = &(*p)->hash_next;
    *p = block->hash_next;
}

static void zr_lru_unlink(zr_block *b) {
    b->lru_prev->lru_next = b->lru_next;
    b->lru_next->lru_prev = b->lru_prev;
}

static void zr_lru_push(zr_source *s, zr_block *b) {
    b->lru_next = s->lru.lru_next;
    b->lru_prev = &s->lru;
    s->lru.lru_next->lru_prev = b;
    s->lru.lru_next = b;
}

static void zr_run_release(zr_run *run) {
    if (run != NULL && --run->refs == 0) {
        free(run->data);
        free(run);
    }
}

static void zr_drop(zr_source *s, zr_block *b) {
    zr_unhash(s, b);
    if (!b->loading) {
        zr_lru_unlink(b);
        s->stats.cached--;
        zr_run_release(b->run);
    } else {
        s->stats.loading--;
    }
    free(b);
}

static void zr_evict(zr_source *s) {
    while (s->stats.cached > s->capacity && s->lru.lru_prev != &s->lru) {
        zr_drop(s, s->lru.lru_prev);
        s->stats.evictions++;
    }
}

/* Make `count` blocks from `first` on loaded, with their bytes in `run`. */
static void zr_fill(zr_source *s, sqlite3_int64 first, int count, zr_run *run, int placeholders) {
    int i;
    for (i = count - 1; i >= 0; i--) { /* the first block ends up most recent */
        zr_block *b = placeholders ? zr_find(s, first + i) : NULL;
        if (b != NULL && !b->loading) continue; /* not this fetch's placeholder any more */
        if (b == NULL) {
            if (placeholders || zr_find(s, first + i) != NULL) continue;
            b = (zr_block *)calloc(1, sizeof(zr_block));
            if (b == NULL) continue; /* not cached, fetched again when needed */
            b->index = first + i;
            b->hash_next = *zr_slot(s, b->index);
            *zr_slot(s, b->index) = b;
        } else { /* this fetch's placeholder (a loaded block was skipped above) */
            s->stats.loading--;
        }
        b->loading = 0;
        b->run = run;
        run->refs++;
        b->data = run->data + (sqlite3_int64)i * s->block_size;
        zr_lru_push(s, b);
        s->stats.cached++;
    }
    zr_evict(s);
}

/* --- reading ----------------------------------------------------------------------------- */

static sqlite3_int64 zr_block_length(zr_source *s, sqlite3_int64 index) {
    sqlite3_int64 start = index * s->block_size;
    sqlite3_int64 left = s->size - start;
    return left < s->block_size ? left : s->block_size;
}

/* Fetch the run of `count` blocks from `first` (their placeholders are in the table). Called
 * with the mutex held; releases it around the fetch. */
static int zr_fetch_run(zr_source *s, sqlite3_int64 first, int count) {
    sqlite3_int64 offset = first * s->block_size;
    sqlite3_int64 length = 0;
    zr_run *run;
    int rc = 1;
    int i;
    for (i = 0; i < count; i++) length += zr_block_length(s, first + i);
    run = (zr_run *)malloc(sizeof(zr_run));
    if (run != NULL) {
        run->refs = 1; /* the fetch's own, let go after the blocks have taken theirs */
        run->data = NULL;
        /* The placeholders point to it: a process that ends while the fetch waits for the
         * network (its thread ended by the interpreter's shutdown) leaves it reachable. */
        for (i = 0; i < count; i++) {
            zr_block *b = zr_find(s, first + i);
            if (b != NULL && b->loading) b->run = run;
        }
    }
    zt_mutex_unlock(&s->mutex);
    if (run != NULL) {
        run->data = (unsigned char *)malloc((size_t)length);
        if (run->data != NULL && zr_fetch != NULL) rc = zr_fetch(s, offset, length, run->data);
    }
    zt_mutex_lock(&s->mutex);
    s->stats.requests++;
    if (rc == 0) {
        s->stats.bytes += length;
        zr_fill(s, first, count, run, 1);
        zr_run_release(run); /* freed now if no block took it (out of memory, or all evicted) */
    } else {
        s->stats.failures++;
        for (i = 0; i < count; i++) {
            zr_block *b = zr_find(s, first + i);
            if (b != NULL && b->loading) zr_drop(s, b);
        }
        if (run != NULL) {
            free(run->data);
            free(run);
        }
    }
    zt_cond_broadcast(&s->loaded);
    return rc;
}

/* The run after one of `run` blocks: twice as long, and at least twice min_run (a stream is
 * known once it continues: its requests start at a size worth a round trip), up to max_run. */
static int zr_next_run(zr_source *s, int run) {
    int next = run * 2 > 2 * s->min_run ? run * 2 : 2 * s->min_run;
    return next < s->max_run ? next : s->max_run;
}

/* The stream a miss at `index` continues, with the length of its next run and whether it goes
 * backwards: a miss at most min(run, max(min_run, ZR_NEAR)) blocks past either end of a stream
 * continues it,
 * doubling the run (readers skip a block now and then); a miss at a block the stream skipped
 * fetches the gap;
 * otherwise a new stream replaces the least recently used one. */
static zr_stream *zr_stream_for(zr_source *s, sqlite3_int64 index, int *backward) {
    zr_stream *oldest = &s->streams[0];
    int i;
    s->clock++;
    for (i = 0; i < ZR_STREAMS; i++) {
        zr_stream *st = &s->streams[i];
        if (st->run > 0) {
            /* within a few blocks of an end: the reader skipped some (concurrent readers go a
             * little out of order); farther is another stream (a read elsewhere must not
             * fetch everything between it and the last one) */
            sqlite3_int64 reach = s->min_run > ZR_NEAR ? s->min_run : ZR_NEAR;
            sqlite3_int64 near = st->run < reach ? st->run : reach;
            int ahead = index >= st->hi && index < st->hi + near;
            int behind = index < st->lo && index >= st->lo - near;
            if (ahead || behind || (index >= st->lo && index < st->hi)) {
                if (ahead || behind) st->run = zr_next_run(s, st->run);
                if (ahead && s->background) { /* sequential: read ahead */
                    st->trigger = index;
                    st->newest = index;
                }
                st->used = s->clock;
                *backward = behind;
                return st;
            }
        }
        if (st->used < oldest->used) oldest = st;
    }
    oldest->run = 1;
    oldest->trigger = -1;
    oldest->newest = -1;
    oldest->used = s->clock;
    oldest->lo = index;
    oldest->hi = index + 1;
    *backward = 0;
    return oldest;
}

/* Put a placeholder for block `index`, marked loading, into the table; 0 when out of memory. */
static int zr_placeholder(zr_source *s, sqlite3_int64 index) {
    zr_block *p = (zr_block *)calloc(1, sizeof(zr_block));
    if (p == NULL) return 0;
    p->index = index;
    p->loading = 1;
    p->hash_next = *zr_slot(s, index);
    *zr_slot(s, index) = p;
    s->stats.loading++;
    return 1;
}

/* Background read-ahead: a read of block `index` at or past the trigger of a forward stream
 * puts placeholders for the stream's next run (its absent blocks from the stream's end on) and
 * returns it in *first and *count, for zr_schedule once the mutex is let go. The trigger moves
 * to the first block of the run asked for before this one (the run the miss fetched, at first),
 * so a stream read in order keeps two runs ahead of its readers: while one arrives the next is
 * already asked for, and the link does not idle for a round trip between them (nor while the
 * readers catch up with a run that has just arrived).
 * What is ahead of the reader stays within three quarters of the cache (a run that does not
 * fit waits for the reader to move on), so that read-ahead never evicts blocks not read yet. */
static void zr_read_ahead(zr_source *s, sqlite3_int64 index, sqlite3_int64 *first, int *count) {
    int i, n;
    *count = 0;
    for (i = 0; i < ZR_STREAMS; i++) {
        zr_stream *st = &s->streams[i];
        sqlite3_int64 start = st->hi;
        sqlite3_int64 room = s->capacity - s->capacity / 4 - (start - index);
        if (st->run <= 0 || st->trigger < 0 || index < st->trigger || index >= st->hi) continue;
        if (room < st->run && room < s->min_run) return; /* asked again as the reader moves */
        for (n = 0; n < st->run && start + n < s->nblocks && n < room; n++) {
            if (zr_find(s, start + n) != NULL || !zr_placeholder(s, start + n)) break;
        }
        if (n == 0) {
            st->trigger = -1;
            return;
        }
        st->hi = start + n;
        st->trigger = st->newest >= 0 && st->newest < start ? st->newest : start;
        st->newest = start;
        st->run = zr_next_run(s, st->run);
        s->stats.misses += n;
        *first = start;
        *count = n;
        return;
    }
}

/* Copy `n` bytes at `within` of block `index` into dest, fetching as needed; `last` is the last
 * block the whole xRead needs; `*span`, bytes a miss fetches at least (then cleared). */
static int zr_copy(zr_source *s, sqlite3_int64 index, sqlite3_int64 last, sqlite3_int64 within,
                   sqlite3_int64 n, unsigned char *dest, sqlite3_int64 *span) {
    int counted = 0;
    int waited = 0;
    sqlite3_int64 ahead_first = 0;
    int ahead_count = 0;
    zt_mutex_lock(&s->mutex);
    if (s->background) zr_read_ahead(s, index, &ahead_first, &ahead_count);
    if (ahead_count > 0) {
        zt_mutex_unlock(&s->mutex);
        zr_schedule(s, ahead_first, ahead_count);
        zt_mutex_lock(&s->mutex);
    }
    for (;;) {
        zr_block *b = zr_find(s, index);
        sqlite3_int64 want, first, ahead_limit, behind_limit, crit;
        zr_stream *stream;
        int backward;
        int ahead;
        int behind = 0;
        if (b != NULL && !b->loading) {
            memcpy(dest, b->data + within, (size_t)n);
            zr_lru_unlink(b);
            zr_lru_push(s, b);
            if (!counted) s->stats.hits++;
            zt_mutex_unlock(&s->mutex);
            return SQLITE_OK;
        }
        if (b != NULL) {
            if (!waited) s->stats.waits++;
            waited = 1;
            counted = 1;
            /* The fetch may be another store's, abandoned and waiting for its timeouts: this
             * reader's own store may close meanwhile, which must end the wait. */
            if (zt_cond_wait_ms(&s->loaded, &s->mutex, ZR_WAIT_STEP_MS) && zr_waiting != NULL) {
                int stop;
                zt_mutex_unlock(&s->mutex);
                stop = zr_waiting(s);
                if (stop) return SQLITE_IOERR_READ;
                zt_mutex_lock(&s->mutex);
            }
            continue;
        }
        /* A miss: this block and the rest of this read, the blocks the stream skipped between
         * its end and this one, and read-ahead on the stream's side; absent blocks only, so
         * that the run is one range. */
        stream = zr_stream_for(s, index, &backward);
        want = stream->run > last - index + 1 ? stream->run : last - index + 1;
        if (*span > 0) { /* the rest of a value read through: all of it at once */
            sqlite3_int64 blocks = (within + *span + s->block_size - 1) / s->block_size;
            /* one request at most max_run blocks long (more go in pieces in the background) */
            if (!s->background && blocks > s->max_run) blocks = s->max_run;
            if (blocks > want) want = blocks;
            *span = 0;
        }
        if (want > s->capacity / 2 && want > stream->run) {
            want = s->capacity / 2 > stream->run ? s->capacity / 2 : stream->run;
        }
        if (want > s->capacity) want = s->capacity;
        if (backward) {
            ahead_limit = stream->lo - index > last - index + 1 ? stream->lo - index : last - index + 1;
            behind_limit = want - 1;
        } else {
            ahead_limit = want;
            behind_limit = stream->hi < index ? index - stream->hi : 0;
        }
        if (stream->run == 1 && s->min_run > 1) {
            /* A miss far from the others: the aligned group of min_run blocks around it. */
            sqlite3_int64 group = index - index % s->min_run;
            sqlite3_int64 end = group + s->min_run;
            if (end - index > ahead_limit) ahead_limit = end - index;
            if (index - group > behind_limit) behind_limit = index - group;
        }
        if (!zr_placeholder(s, index)) {
            zt_mutex_unlock(&s->mutex);
            return SQLITE_IOERR_NOMEM;
        }
        for (ahead = 1; ahead < ahead_limit && index + ahead < s->nblocks; ahead++) {
            if (ahead >= s->capacity) break;
            if (zr_find(s, index + ahead) != NULL || !zr_placeholder(s, index + ahead)) break;
        }
        while (behind < behind_limit && ahead + behind < s->capacity && index - behind > 0) {
            if (zr_find(s, index - behind - 1) != NULL) break;
            if (!zr_placeholder(s, index - behind - 1)) break;
            behind++;
        }
        first = index - behind;
        s->stats.misses += ahead + behind;
        counted = 1;
        if (first < stream->lo) stream->lo = first;
        if (index + ahead > stream->hi) stream->hi = index + ahead;
        crit = last - index + 1;
        if (crit > ahead) crit = ahead;
        if (s->background && (behind > 0 || ahead > crit)) {
            /* The blocks this read needs first, in a request of their own that it waits for;
             * the rest of the run in the background, in requests of at most max_run blocks,
             * so that the reader does not wait for bytes it does not need yet. */
            sqlite3_int64 rest = index + crit;
            int left = (int)(ahead - crit);
            zt_mutex_unlock(&s->mutex);
            if (behind > 0) zr_schedule(s, first, behind);
            while (left > 0) {
                int piece = left > s->max_run ? s->max_run : left;
                zr_schedule(s, rest, piece);
                rest += piece;
                left -= piece;
            }
            zt_mutex_lock(&s->mutex);
            first = index;
            ahead = crit;
            behind = 0;
        }
        if (zr_fetch_run(s, first, ahead + behind) != 0) {
            zt_mutex_unlock(&s->mutex);
            return SQLITE_IOERR_READ;
        }
    }
}

static int zr_read(sqlite3_file *file, void *buf, int amount, sqlite3_int64 offset) {
    zr_file *f = (zr_file *)file;
    zr_source *s = f->source;
    unsigned char *out = (unsigned char *)buf;
    sqlite3_int64 end = offset + amount;
    sqlite3_int64 stop = end < s->size ? end : s->size;
    sqlite3_int64 pos = offset;
    sqlite3_int64 last = stop > offset ? (stop - 1) / s->block_size : 0;
    while (pos < stop) {
        sqlite3_int64 index = pos / s->block_size;
        sqlite3_int64 within = pos - index * s->block_size;
        sqlite3_int64 n = s->block_size - within;
        int rc;
        if (n > stop - pos) n = stop - pos;
        rc = zr_copy(s, index, last, within, n, out + (pos - offset), &f->span);
        if (rc != SQLITE_OK) return rc;
        pos += n;
    }
    if (pos < end) {
        sqlite3_int64 from = pos > offset ? pos : offset;
        memset(out + (from - offset), 0, (size_t)(end - from));
        return SQLITE_IOERR_SHORT_READ;
    }
    return SQLITE_OK;
}

/* --- sources --------------------------------------------------------------------------- */

static void zr_source_free(zr_source *s) {
    sqlite3_int64 i;
    for (i = 0; i < s->nbuckets; i++) {
        while (s->buckets[i] != NULL) zr_drop(s, s->buckets[i]);
    }
    free(s->buckets);
    zt_cond_destroy(&s->loaded);
    zt_mutex_destroy(&s->mutex);
    free(s);
}

static void zr_source_release(zr_source *s) {
    int last;
    zt_mutex_lock(&zr_registry_lock);
    last = --s->refs == 0;
    if (last) {
        zr_source **p = &zr_registry;
        while (*p != NULL && *p != s) p = &(*p)->next;
        if (*p == s) *p = s->next;
    }
    zt_mutex_unlock(&zr_registry_lock);
    if (last) zr_source_free(s);
}

/* A new source, registered; NULL when out of memory. */
static zr_source *zr_source_new(void *owner, sqlite3_int64 size, sqlite3_int64 block_size,
                                sqlite3_int64 capacity, int max_run, int min_run,
                                int background) {
    zr_source *s = (zr_source *)calloc(1, sizeof(zr_source));
    sqlite3_int64 nbuckets = 64;
    if (s == NULL) return NULL;
    s->owner = owner;
    s->refs = 1;
    s->size = size;
    s->block_size = block_size;
    s->nblocks = (size + block_size - 1) / block_size;
    s->capacity = capacity < 1 ? 1 : capacity;
    s->max_run = max_run < 1 ? 1 : (max_run > s->capacity ? (int)s->capacity : max_run);
    s->min_run = min_run < 1 ? 1 : (min_run > s->capacity / 2 ? (int)(s->capacity / 2) : min_run);
    if (s->min_run < 1) s->min_run = 1;
    s->background = background && zr_schedule != NULL;
    while (nbuckets < 2 * s->capacity && nbuckets < (1 << 20)) nbuckets *= 2;
    s->nbuckets = nbuckets;
    s->buckets = (zr_block **)calloc((size_t)nbuckets, sizeof(zr_block *));
    if (s->buckets == NULL) {
        free(s);
        return NULL;
    }
    s->lru.lru_next = s->lru.lru_prev = &s->lru;
    zt_mutex_init(&s->mutex);
    zt_cond_init(&s->loaded);
    zt_mutex_lock(&zr_registry_lock);
    sqlite3_snprintf(ZR_NAME_MAX, s->name, "/zarrdb-remote/%lu", ++zr_serial);
    s->next = zr_registry;
    zr_registry = s;
    zt_mutex_unlock(&zr_registry_lock);
    return s;
}

static const char *zr_source_name(zr_source *s) { return s->name; }

/* The owner, or NULL once it has let go. The caller holds the GIL, which keeps the owner alive
 * from here on. */
static void *zr_source_owner(zr_source *s) {
    void *owner;
    zt_mutex_lock(&s->mutex);
    owner = s->owner;
    zt_mutex_unlock(&s->mutex);
    return owner;
}

/* The owner lets go: fetches fail from now on; the source lives while files have it open. */
static void zr_source_detach(zr_source *s) {
    zt_mutex_lock(&s->mutex);
    s->owner = NULL;
    zt_mutex_unlock(&s->mutex);
    zr_source_release(s);
}

/* Cache bytes already in hand: `length` bytes from the start of the file (whole blocks only,
 * and the file's last block). 0 on success. */
static int zr_source_put_head(zr_source *s, const unsigned char *data, sqlite3_int64 length) {
    sqlite3_int64 blocks = length >= s->size ? s->nblocks : length / s->block_size;
    sqlite3_int64 bytes;
    zr_run *run;
    if (blocks > s->capacity) blocks = s->capacity;
    if (blocks == 0) return 0;
    bytes = blocks == s->nblocks ? s->size : blocks * s->block_size;
    run = (zr_run *)malloc(sizeof(zr_run));
    if (run == NULL) return 1;
    run->refs = 1; /* ours, let go after the blocks have taken theirs */
    run->data = (unsigned char *)malloc((size_t)bytes);
    if (run->data == NULL) {
        free(run);
        return 1;
    }
    memcpy(run->data, data, (size_t)bytes);
    zt_mutex_lock(&s->mutex);
    zr_fill(s, 0, (int)blocks, run, 0);
    zr_run_release(run);
    zt_mutex_unlock(&s->mutex);
    return 0;
}

static void zr_source_stats(zr_source *s, zr_stats *out) {
    zt_mutex_lock(&s->mutex);
    *out = s->stats;
    zt_mutex_unlock(&s->mutex);
}

/* --- the VFS --------------------------------------------------------------------------- */

static int zr_close(sqlite3_file *file) {
    zr_file *f = (zr_file *)file;
    if (f->source != NULL) zr_source_release(f->source);
    f->source = NULL;
    return SQLITE_OK;
}

static int zr_write(sqlite3_file *file, const void *buf, int amount, sqlite3_int64 offset) {
    (void)file; (void)buf; (void)amount; (void)offset;
    return SQLITE_READONLY;
}

static int zr_truncate(sqlite3_file *file, sqlite3_int64 size) {
    (void)file; (void)size;
    return SQLITE_READONLY;
}

static int zr_sync(sqlite3_file *file, int flags) {
    (void)file; (void)flags;
    return SQLITE_OK;
}

static int zr_file_size(sqlite3_file *file, sqlite3_int64 *size) {
    *size = ((zr_file *)file)->source->size;
    return SQLITE_OK;
}

static int zr_lock_file(sqlite3_file *file, int level) {
    (void)file; (void)level;
    return SQLITE_OK;
}

static int zr_check_reserved(sqlite3_file *file, int *out) {
    (void)file;
    *out = 0;
    return SQLITE_OK;
}

static int zr_file_control(sqlite3_file *file, int op, void *arg) {
    if (op == ZR_FCNTL_SPAN) {
        sqlite3_int64 bytes = *(sqlite3_int64 *)arg;
        ((zr_file *)file)->span = bytes > 0 ? bytes : 0;
        return SQLITE_OK;
    }
    return SQLITE_NOTFOUND;
}

static int zr_sector_size(sqlite3_file *file) {
    (void)file;
    return 512;
}

static int zr_device_characteristics(sqlite3_file *file) {
    (void)file;
    return SQLITE_IOCAP_IMMUTABLE;
}

static const sqlite3_io_methods zr_io_methods = {
    1,                         /* iVersion: no shared memory, no memory mapping */
    zr_close,
    zr_read,
    zr_write,
    zr_truncate,
    zr_sync,
    zr_file_size,
    zr_lock_file,              /* xLock */
    zr_lock_file,              /* xUnlock */
    zr_check_reserved,
    zr_file_control,
    zr_sector_size,
    zr_device_characteristics,
    NULL, NULL, NULL, NULL, NULL, NULL
};

static int zr_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                   int *out_flags) {
    zr_file *f = (zr_file *)file;
    zr_source *s;
    (void)vfs;
    memset(f, 0, sizeof(zr_file));
    if (name == NULL || (flags & SQLITE_OPEN_MAIN_DB) == 0 || (flags & SQLITE_OPEN_READWRITE)) {
        return SQLITE_CANTOPEN;
    }
    zt_mutex_lock(&zr_registry_lock);
    for (s = zr_registry; s != NULL && strcmp(s->name, name) != 0; s = s->next) {
    }
    if (s != NULL) s->refs++;
    zt_mutex_unlock(&zr_registry_lock);
    if (s == NULL) return SQLITE_CANTOPEN;
    f->source = s;
    f->span = 0;
    f->base.pMethods = &zr_io_methods;
    if (out_flags != NULL) *out_flags = SQLITE_OPEN_READONLY;
    return SQLITE_OK;
}

static int zr_delete(sqlite3_vfs *vfs, const char *name, int sync_dir) {
    (void)vfs; (void)name; (void)sync_dir;
    return SQLITE_IOERR_DELETE;
}

static int zr_access(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
    (void)vfs; (void)name; (void)flags;
    *out = 0; /* no journal, no WAL file: nothing beside a remote file exists */
    return SQLITE_OK;
}

static int zr_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out) {
    (void)vfs;
    sqlite3_snprintf(n, out, "%s", name);
    return SQLITE_OK;
}

static void *zr_dl_open(sqlite3_vfs *vfs, const char *name) {
    (void)vfs; (void)name;
    return NULL;
}

static void zr_dl_error(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    sqlite3_snprintf(n, out, "no extensions on a remote file");
}

static void (*zr_dl_sym(sqlite3_vfs *vfs, void *handle, const char *name))(void) {
    (void)vfs; (void)handle; (void)name;
    return NULL;
}

static void zr_dl_close(sqlite3_vfs *vfs, void *handle) {
    (void)vfs; (void)handle;
}

static int zr_randomness(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs;
    return zr_default_vfs->xRandomness(zr_default_vfs, n, out);
}

static int zr_sleep(sqlite3_vfs *vfs, int microseconds) {
    (void)vfs;
    return zr_default_vfs->xSleep(zr_default_vfs, microseconds);
}

static int zr_current_time(sqlite3_vfs *vfs, double *out) {
    (void)vfs;
    return zr_default_vfs->xCurrentTime(zr_default_vfs, out);
}

static int zr_last_error(sqlite3_vfs *vfs, int n, char *out) {
    (void)vfs; (void)n; (void)out;
    return 0;
}

static int zr_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out) {
    (void)vfs;
    if (zr_default_vfs->iVersion >= 2 && zr_default_vfs->xCurrentTimeInt64 != NULL) {
        return zr_default_vfs->xCurrentTimeInt64(zr_default_vfs, out);
    }
    {
        double days = 0;
        int rc = zr_default_vfs->xCurrentTime(zr_default_vfs, &days);
        *out = (sqlite3_int64)(days * 86400000.0);
        return rc;
    }
}

static sqlite3_vfs zr_vfs = {
    2,                         /* iVersion */
    (int)sizeof(zr_file),
    512,                       /* mxPathname */
    NULL,                      /* pNext */
    ZR_VFS_NAME,
    NULL,                      /* pAppData */
    zr_open,
    zr_delete,
    zr_access,
    zr_full_pathname,
    zr_dl_open,
    zr_dl_error,
    zr_dl_sym,
    zr_dl_close,
    zr_randomness,
    zr_sleep,
    zr_current_time,
    zr_last_error,
    zr_current_time_int64,
    NULL, NULL, NULL
};

/* Around fork(): no thread may hold the registry's lock while the process is copied. */
static void zr_registry_before_fork(void) { zt_mutex_lock(&zr_registry_lock); }
static void zr_registry_after_fork(int child) {
    (void)child;
    zt_mutex_unlock(&zr_registry_lock);
}

/* Fetch the run of `count` blocks from `first` that zr_schedule was given (their placeholders
 * are in the table); 0 on success. Called on the thread the schedule function chose. */
static int zr_source_fetch_scheduled(zr_source *s, sqlite3_int64 first, int count) {
    int rc;
    zt_mutex_lock(&s->mutex);
    rc = zr_fetch_run(s, first, count);
    zt_mutex_unlock(&s->mutex);
    return rc;
}

/* Register the VFS (not as the default) with the function that fetches and the one that
 * schedules read-ahead (NULL: none); idempotent. */
static int zr_register(zr_fetch_fn fetch, zr_schedule_fn schedule, zr_waiting_fn waiting) {
    zr_fetch = fetch;
    zr_schedule = schedule;
    zr_waiting = waiting;
    if (zr_default_vfs == NULL) {
        zr_default_vfs = sqlite3_vfs_find(NULL);
        if (zr_default_vfs == NULL) return SQLITE_ERROR;
        return sqlite3_vfs_register(&zr_vfs, 0);
    }
    return SQLITE_OK;
}

#endif
