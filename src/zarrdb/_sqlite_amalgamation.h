/*
 * The SQLite that zarrdb._core is built with.
 *
 * By default the vendored amalgamation is compiled into this translation unit with every API
 * function and variable made `static`, so the extension exports no SQLite symbol and can never
 * bind to (or be bound by) another SQLite in the same process: Python's sqlite3, GDAL, PROJ.
 * The compile options come from setup.py as macros.
 *
 * With ZARRDB_SYSTEM_SQLITE defined (ZARRDB_SYSTEM_SQLITE=1 at build time) the system
 * library's header is used instead and the extension links against libsqlite3.
 */
#ifndef ZARRDB_SQLITE_AMALGAMATION_H
#define ZARRDB_SQLITE_AMALGAMATION_H

#ifdef ZARRDB_SYSTEM_SQLITE
#include <sqlite3.h>
#define ZARRDB_BUNDLED_SQLITE 0
#else
#define ZARRDB_BUNDLED_SQLITE 1
#define SQLITE_API static
#define SQLITE_EXTERN static
#include "sqlite3.c"
/* SQLite defines likely()/unlikely() for itself; Cython's generated code defines its own. */
#undef likely
#undef unlikely
#endif

/*
 * fork(). SQLite's unix VFS keeps, per file, the locks this process's connections hold
 * (`inodeList`, guarded by `unixBigLock`), so that connections of one process share their POSIX
 * locks. A child inherits that record but none of the locks: a connection the child opens on a
 * file a parent's connection had locked would see the lock as its own process's, and wait for
 * it for good. The parent's connections are never used in the child (zarrdb refuses them, and
 * closing one there only forgets it), so the child starts with an empty record: its own
 * connections then take real locks, which wait for the parent's as another process's would.
 * Around the fork the record's mutex is held, so no other thread is changing it meanwhile.
 * Only with the bundled SQLite, whose internals are in this translation unit.
 */
#if !defined(ZARRDB_SYSTEM_SQLITE) && SQLITE_OS_UNIX
static void zarrdb_fork_prepare(void) { if (unixBigLock) sqlite3_mutex_enter(unixBigLock); }
static void zarrdb_fork_parent(void) { if (unixBigLock) sqlite3_mutex_leave(unixBigLock); }
static void zarrdb_fork_child(void)
{
    inodeList = 0;  /* the parent's records are left as they are, never freed or used */
    if (unixBigLock) sqlite3_mutex_leave(unixBigLock);
}
#else
static void zarrdb_fork_prepare(void) {}
static void zarrdb_fork_parent(void) {}
static void zarrdb_fork_child(void) {}
#endif

/*
 * The files beside a database, checked as SQLite opens them. zarrdb checks the -wal, -shm and
 * -journal beside a file before each open (_beside.py); SQLite looks for a -wal and a hot
 * -journal again at each read transaction of a file in rollback mode, so one planted later,
 * while a connection stays open, would still be read. Connections to local files therefore
 * use "zarrdb-guarded": the platform's own VFS, except that a -wal or -journal that is not a
 * regular file, has another owner than the database, or may be written by users who may not
 * write the database is not opened (SQLITE_CANTOPEN): the read fails instead of taking in
 * someone else's pages. A sidecar SQLite would create is created here first, exclusively; and,
 * with the bundled SQLite, the descriptor SQLite opened must be the file checked or made (one
 * put in place between the two is refused as well). The -shm, which SQLite opens itself, is
 * checked the same way at each connection's first map of it (zarrdb_guarded_shm_map).
 * POSIX only; elsewhere the default VFS is used as it is.
 */
#if !defined(_WIN32)
#include <sys/stat.h>
#include "_pause_points.h"

static sqlite3_vfs zarrdb_guarded;
static sqlite3_vfs *zarrdb_guarded_base = 0;

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* The status of the database named by the first `cut` bytes of `name`; 0 if it has one. */
static int zarrdb_database_status(const char *name, size_t cut, struct stat *db)
{
    char *db_name = (char *)sqlite3_malloc64(cut + 1);
    int got;
    if (db_name == 0) return -1;
    memcpy(db_name, name, cut);
    db_name[cut] = 0;
    got = stat(db_name, db);
    sqlite3_free(db_name);
    return got;
}

/* Whether `side`, the status of a sidecar, may be read as part of the database `db`: a regular
 * file of the database's owner, written by no one who may not write the database. */
static int zarrdb_sidecar_status_is_own(const struct stat *side, const struct stat *db)
{
    if (!S_ISREG(side->st_mode) || side->st_uid != db->st_uid) return 0;
    if ((side->st_mode & S_IWOTH) && !(db->st_mode & S_IWOTH)) return 0;
    if ((side->st_mode & S_IWGRP) && !(db->st_mode & S_IWGRP)) return 0;
    return 1;
}

#ifdef ZARRDB_TEST_VFS
#define ZARRDB_POWERLOSS_VFS "zarrdb-powerloss"  /* the simulator's name (_vfs_powerloss.h) */

/* Test builds: the sidecar this thread made last (below) while this VFS wraps the power-loss
 * simulator (_vfs_powerloss.h), so that the simulator counts its creation as a directory entry
 * that a power loss can take away, as it counts one that SQLite's own open makes. */
static __thread struct { dev_t dev; ino_t ino; int set; } zarrdb_made_sidecar;
/* Test builds: SQLite deleted a -wal in this thread (zarrdb_guarded_delete), and has asked for
 * no write lock since (zarrdb_guarded_lock). */
static __thread int zarrdb_deleted_wal;
#endif

/* Before SQLite opens the sidecar `name` of the database named by its first `cut` bytes: 1 if
 * it may, with `before` the file it must then open. One that is there must be the database's
 * own (checked by name: a link is refused, not followed). One that is not and that SQLite
 * would create is created here, exclusively, by this process (as SQLite makes it: empty, and
 * SQLite gives it the database's mode), so that nobody else's can be put in its place before
 * SQLite opens it; if another process made it first, it must be the database's own. 0: the
 * sidecar is refused. -1: it is not there and SQLite would not create it (nothing to check). */
static int zarrdb_sidecar_before_open(const char *name, size_t cut, int flags,
                                      struct stat *before)
{
    struct stat db;
    int fd;
    if (zarrdb_database_status(name, cut, &db) != 0) return 0;
    if (lstat(name, before) == 0) return zarrdb_sidecar_status_is_own(before, &db);
    /* Gone since SQLite saw it (a hot journal it looks into): whatever comes in its place
     * before the open (another's, a pipe that would block the open) is not opened. */
    if (!(flags & SQLITE_OPEN_CREATE)) return 0;
    zpp_point("vfs.sidecar");  /* (test builds: where another's may come before this one's) */
    fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (int)(db.st_mode & 0777));
    if (fd < 0) {
        /* Another process made it first: it must be the database's own. Any other failure
         * (no room, no inode, no permission): SQLite's own open says why it cannot; one that
         * opens something all the same is refused after it (checked < 0). */
        if (errno != EEXIST) return -1;
        return lstat(name, before) == 0 && zarrdb_sidecar_status_is_own(before, &db);
    }
    if (fstat(fd, before) != 0) {
        close(fd);
        return 0;
    }
    close(fd);
#ifdef ZARRDB_TEST_VFS
    if (zarrdb_guarded_base != 0 && strcmp(zarrdb_guarded_base->zName, ZARRDB_POWERLOSS_VFS) == 0) {
        zarrdb_made_sidecar.dev = before->st_dev;
        zarrdb_made_sidecar.ino = before->st_ino;
        zarrdb_made_sidecar.set = 1;
    }
#endif
    return 1;
}

/* After SQLite opened the sidecar `name` (`fd`, its descriptor): it must be the file checked
 * or made before the open, still under its name (no link was followed to it, nothing was
 * swapped in between). */
#if !defined(ZARRDB_SYSTEM_SQLITE) && SQLITE_OS_UNIX
static int zarrdb_opened_sidecar_is(int fd, const char *name, const struct stat *before)
{
    struct stat opened, now;
    if (fstat(fd, &opened) != 0 || lstat(name, &now) != 0) return 0;
    return opened.st_dev == before->st_dev && opened.st_ino == before->st_ino
        && now.st_dev == before->st_dev && now.st_ino == before->st_ino;
}

/* The -shm. SQLite opens it itself, by name (O_CREAT, not through xOpen), at a connection's
 * first map of the wal-index: its main file's methods are the unix VFS's with xShmMap checking
 * the -shm first, as xOpen checks a -wal or -journal (made here, exclusively, if not there).
 * One of another user, put beside a file still in its rollback journal, would otherwise be
 * taken when the file turns to WAL, and whoever keeps it open can make the writer write over
 * commits it acknowledged. */
static sqlite3_io_methods zarrdb_guarded_io;
static const sqlite3_io_methods *zarrdb_guarded_io_base = 0;

static int zarrdb_guarded_shm_map(sqlite3_file *file, int page, int size, int extend,
                                  void volatile **out)
{
    unixFile *f = (unixFile *)file;
    struct stat before;
    size_t cut;
    char *shm;
    int checked, rc, fd;
    if (f->pShm != 0 || f->zPath == 0) {
        return zarrdb_guarded_io_base->xShmMap(file, page, size, extend, out);
    }
    cut = strlen(f->zPath);
    shm = (char *)sqlite3_malloc64(cut + 5);
    if (shm == 0) return SQLITE_NOMEM;
    memcpy(shm, f->zPath, cut);
    memcpy(shm + cut, "-shm", 5);
    checked = zarrdb_sidecar_before_open(shm, cut, SQLITE_OPEN_CREATE, &before);
    if (checked == 0) {
        sqlite3_free(shm);
        return SQLITE_CANTOPEN;
    }
    rc = zarrdb_guarded_io_base->xShmMap(file, page, size, extend, out);
    /* Whatever the map returned (SQLITE_READONLY for one opened read-only): once mapped, later
     * maps do not come here again. */
    fd = f->pShm != 0 ? f->pShm->pShmNode->hShm : -1;
    if (fd >= 0 && (checked < 0 || !zarrdb_opened_sidecar_is(fd, shm, &before))) {
        zarrdb_guarded_io_base->xShmUnmap(file, 0);  /* forgotten: the next map checks again */
        *out = 0;
        rc = SQLITE_CANTOPEN;
    }
    sqlite3_free(shm);
    return rc;
}

/* SQLite run by root gives each -journal, -wal and -shm it opens the database's owner (fchown):
 * one of another user, opened in a race and refused after the open, would be the owner's from
 * then on, and pass every check. Only a file this process owns (made by it) is given away. */
static int zarrdb_fchown(int fd, uid_t uid, gid_t gid)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) return 0;
    return fchown(fd, uid, gid);
}

#ifdef ZARRDB_TEST_VFS
static int zarrdb_guarded_lock(sqlite3_file *file, int level)
{
    if (level == SQLITE_LOCK_RESERVED && zarrdb_deleted_wal) {
        zarrdb_deleted_wal = 0;
        zpp_point("vfs.relock_after_wal");
    }
    return zarrdb_guarded_io_base->xLock(file, level);
}
#endif

/* Give the main file of a database the methods whose xShmMap checks the -shm. */
static void zarrdb_guard_shm(sqlite3_file *file)
{
    sqlite3_mutex *mutex = sqlite3_mutex_alloc(SQLITE_MUTEX_STATIC_APP1);
    sqlite3_mutex_enter(mutex);
    if (zarrdb_guarded_io_base == 0 && file->pMethods->iVersion >= 2
            && file->pMethods->xShmMap != 0) {
        zarrdb_guarded_io = *file->pMethods;
        zarrdb_guarded_io.xShmMap = zarrdb_guarded_shm_map;
#ifdef ZARRDB_TEST_VFS
        zarrdb_guarded_io.xLock = zarrdb_guarded_lock;
#endif
        zarrdb_guarded_io_base = file->pMethods;
    }
    if (file->pMethods == zarrdb_guarded_io_base) file->pMethods = &zarrdb_guarded_io;
    sqlite3_mutex_leave(mutex);
}
#endif

static int zarrdb_guarded_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *file,
                               int flags, int *out_flags)
{
    struct stat before;
    int checked = 0, rc;
    size_t n, suffix;
    (void)vfs;
    if (name != 0 && (flags & (SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_JOURNAL))) {
        n = strlen(name);
        suffix = (flags & SQLITE_OPEN_WAL) ? 4 : 8;  /* "-wal", "-journal" */
        if (n > suffix) {
            checked = zarrdb_sidecar_before_open(name, n - suffix, flags, &before);
            if (checked == 0) {
                file->pMethods = 0;
                return SQLITE_CANTOPEN;
            }
        }
    }
    rc = zarrdb_guarded_base->xOpen(zarrdb_guarded_base, name, file, flags, out_flags);
#if !defined(ZARRDB_SYSTEM_SQLITE) && SQLITE_OS_UNIX
    if (rc == SQLITE_OK && checked != 0 && file->pMethods != 0
            && strncmp(zarrdb_guarded_base->zName, "unix", 4) == 0
            && (checked < 0 || !zarrdb_opened_sidecar_is(((unixFile *)file)->h, name, &before))) {
        /* checked < 0: it was not there, and SQLite opened one all the same. */
        file->pMethods->xClose(file);
        file->pMethods = 0;
        return SQLITE_CANTOPEN;
    }
    if (rc == SQLITE_OK && (flags & SQLITE_OPEN_MAIN_DB) && file->pMethods != 0
            && strncmp(zarrdb_guarded_base->zName, "unix", 4) == 0) {
        zarrdb_guard_shm(file);
    }
#endif
    return rc;
}

#ifdef ZARRDB_TEST_VFS
/* Test builds: a pause point where SQLite, in this thread, deleted a -wal (leaving WAL mode)
 * and next asks for a write lock on a database (the switch writing the header's new mode):
 * outside exclusive locking mode it let its exclusive lock down to a shared one in between,
 * where another connection opening the file finds the header in WAL mode and no log. */
static int zarrdb_guarded_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    size_t n = strlen(name);
    int rc;
    (void)vfs;
    rc = zarrdb_guarded_base->xDelete(zarrdb_guarded_base, name, sync_dir);
    if (rc == SQLITE_OK && n > 4 && strcmp(name + n - 4, "-wal") == 0) zarrdb_deleted_wal = 1;
    return rc;
}
#endif

/* The guarded VFS's name, registered on first use (with the GIL held: once); NULL if the
 * default VFS is not there, or is no longer the one it wraps: only the test build's power-loss
 * simulator makes itself the default (_vfs_powerloss.h), and its connections must go through
 * it, so they use the default VFS as it is. */
static const char *zarrdb_guarded_vfs(void)
{
    sqlite3_vfs *base = sqlite3_vfs_find(0);
    if (base == 0) return 0;
    if (zarrdb_guarded_base != 0) return base == zarrdb_guarded_base ? zarrdb_guarded.zName : 0;
    zarrdb_guarded = *base;
    zarrdb_guarded.pNext = 0;
    zarrdb_guarded.zName = "zarrdb-guarded";
    zarrdb_guarded.xOpen = zarrdb_guarded_open;
#ifdef ZARRDB_TEST_VFS
    zarrdb_guarded.xDelete = zarrdb_guarded_delete;
#endif
    zarrdb_guarded_base = base;
#if !defined(ZARRDB_SYSTEM_SQLITE) && SQLITE_OS_UNIX
    if (strncmp(base->zName, "unix", 4) == 0 && base->xSetSystemCall != 0) {
        base->xSetSystemCall(base, "fchown", (sqlite3_syscall_ptr)zarrdb_fchown);
    }
#endif
    if (sqlite3_vfs_register(&zarrdb_guarded, 0) != SQLITE_OK) {
        zarrdb_guarded_base = 0;
        return 0;
    }
    return zarrdb_guarded.zName;
}
#else
static const char *zarrdb_guarded_vfs(void) { return 0; }
#endif

/*
 * The first `n` bytes of a connection's main database file and the file's size, read through
 * the handle SQLite opened: opening the file again and closing that descriptor would drop every
 * POSIX lock this process holds on it (those of its other connections included).
 */
static int zarrdb_main_head(sqlite3 *db, unsigned char *buf, int n, sqlite3_int64 *size)
{
    sqlite3_file *f = 0;
    int rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f);
    if (rc != SQLITE_OK || f == 0 || f->pMethods == 0) return SQLITE_ERROR;
    rc = f->pMethods->xFileSize(f, size);
    if (rc != SQLITE_OK) return rc;
    memset(buf, 0, (size_t)n);
    rc = f->pMethods->xRead(f, buf, n, 0);
    return rc == SQLITE_IOERR_SHORT_READ ? SQLITE_OK : rc;
}

/*
 * How many of the first `upto` bytes of a connection's main file hold data, not holes: a file
 * truncated to a sparse terabyte takes a few kilobytes of disk, and SQLite reads it as the
 * database of 2^30 pages its length (or its header) says. Asked of the file system through
 * SQLite's own descriptor (SEEK_DATA, SEEK_HOLE: no read, and no second descriptor whose close
 * would drop the process's locks); one fstat when the file's blocks leave no room for a hole,
 * else one pair of seeks per stretch of data. `upto` (no hole known) where the file is not the
 * unix VFS's, or the file system cannot tell; only with the bundled SQLite.
 */
#if !defined(ZARRDB_SYSTEM_SQLITE) && SQLITE_OS_UNIX && defined(SEEK_DATA) && defined(SEEK_HOLE)
static sqlite3_int64 zarrdb_main_data(sqlite3 *db, sqlite3_int64 upto)
{
    sqlite3_file *f = 0;
    struct stat st;
    off_t at = 0, start, end;
    sqlite3_int64 found = 0;
    int fd;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || f == 0
        || f->pMethods == 0 || f->pMethods->xRead != unixRead) return upto;
    fd = ((unixFile *)f)->h;
    if (fstat(fd, &st) != 0 || (sqlite3_int64)st.st_blocks * 512 >= upto) return upto;
    while (at < upto) {
        start = lseek(fd, at, SEEK_DATA);
        if (start < 0) return errno == ENXIO ? found : upto;  /* ENXIO: no data past `at` */
        if (start >= upto) break;
        end = lseek(fd, start, SEEK_HOLE);
        if (end < 0) return upto;
        if (end > upto) end = upto;
        found += end - start;
        at = end;
    }
    return found;
}
#else
static sqlite3_int64 zarrdb_main_data(sqlite3 *db, sqlite3_int64 upto) { (void)db; return upto; }
#endif

/*
 * Overflow chains that come back on themselves. A value longer than fits on its b-tree page
 * continues on a chain of overflow pages, each naming the next. SQLite reads as many bytes as
 * the row's record claims and bounds the claim only by the file's size (page count x page
 * size), which a sparse file or the size a server states can make huge: a chain of two pages
 * that names itself then reads as gigabytes. SQLite's integrity check finds such a chain; its
 * readers do not look.
 *
 * zarrdb_blob_chain_check walks the chain of the row an open blob handle points at, as far as
 * bytes [0, upto) of the value reach, with SQLite's own step from one page to the next (which
 * may use the pointer map instead of reading the page), and returns ZARRDB_CHAIN_LOOP if a
 * page comes twice. It runs before anything is allocated for the value, and costs at most the
 * walk SQLite makes anyway to read those bytes. Page numbers out of range are left to SQLite's
 * own read, which reports them as damage. Only with the bundled SQLite, whose internals are in
 * this translation unit; a build against the system library does not walk.
 */
#define ZARRDB_CHAIN_LOOP (-81)

#ifndef ZARRDB_SYSTEM_SQLITE
/* The pages seen so far: a short chain in a small array, a long one in a hash set that grows
 * as the walk goes (a loop shows after a few pages, so a huge claim costs no huge set). */
typedef struct {
    Pgno small[32];
    u32 n;       /* pages seen */
    Pgno *slot;  /* open addressing over mask + 1 slots (a power of two), 0 = free; NULL while small */
    u32 mask;
} ZarrdbSeen;

static int zarrdb_seen_put(Pgno *slot, u32 mask, Pgno pgno)
{
    u32 i = (pgno * 2654435761u) & mask;
    while (slot[i] != 0) {
        if (slot[i] == pgno) return 0;
        i = (i + 1) & mask;
    }
    slot[i] = pgno;
    return 1;
}

static Pgno *zarrdb_seen_slots(u32 mask)
{
    Pgno *slot = (Pgno *)sqlite3_malloc64((u64)mask * sizeof(Pgno) + sizeof(Pgno));
    if (slot != 0) memset(slot, 0, (size_t)mask * sizeof(Pgno) + sizeof(Pgno));
    return slot;
}

/* 1: a new page, 0: seen before, -1: no memory. */
static int zarrdb_seen_add(ZarrdbSeen *seen, Pgno pgno)
{
    u32 i;
    Pgno *grown;
    if (seen->slot == 0) {
        for (i = 0; i < seen->n; i++) {
            if (seen->small[i] == pgno) return 0;
        }
        if (seen->n < sizeof(seen->small) / sizeof(seen->small[0])) {
            seen->small[seen->n++] = pgno;
            return 1;
        }
        seen->mask = 255;
        seen->slot = zarrdb_seen_slots(seen->mask);
        if (seen->slot == 0) return -1;
        for (i = 0; i < seen->n; i++) zarrdb_seen_put(seen->slot, seen->mask, seen->small[i]);
    }
    if ((u64)(seen->n + 1) * 2 > (u64)seen->mask + 1) {  /* at most half full */
        grown = zarrdb_seen_slots(seen->mask * 2 + 1);
        if (grown == 0) return -1;
        for (i = 0; i <= seen->mask; i++) {
            if (seen->slot[i] != 0) zarrdb_seen_put(grown, seen->mask * 2 + 1, seen->slot[i]);
        }
        sqlite3_free(seen->slot);
        seen->slot = grown;
        seen->mask = seen->mask * 2 + 1;
    }
    if (!zarrdb_seen_put(seen->slot, seen->mask, pgno)) return 0;
    seen->n++;
    return 1;
}

static int zarrdb_blob_chain_check(sqlite3_blob *blob, sqlite3_int64 upto)
{
    Incrblob *p = (Incrblob *)blob;
    BtCursor *cur;
    BtShared *bt;
    ZarrdbSeen seen;
    i64 end, need, i;
    u32 per_page;
    Pgno pgno, last;
    int rc = SQLITE_OK, added;
    if (p == 0 || p->pStmt == 0 || upto <= 0) return SQLITE_OK;
    cur = p->pCsr;
    sqlite3_mutex_enter(p->db->mutex);
    sqlite3BtreeEnterCursor(cur);
    memset(&seen, 0, sizeof(seen));
    if (cur->eState != CURSOR_VALID || cur->pPage == 0 || cur->ix >= cur->pPage->nCell) goto done;
    getCellInfo(cur);
    bt = cur->pBt;
    end = (i64)p->iOffset + upto;
    if (end > (i64)cur->info.nPayload) end = cur->info.nPayload;
    if (end <= (i64)cur->info.nLocal) goto done;
    /* the first page's number would lie outside the page: SQLite's read refuses that itself */
    if ((uptr)(cur->info.pPayload - cur->pPage->aData) > (bt->usableSize - cur->info.nLocal)) goto done;
    per_page = bt->usableSize - 4;
    need = (end - cur->info.nLocal + per_page - 1) / per_page;
    pgno = get4byte(&cur->info.pPayload[cur->info.nLocal]);
    last = btreePagecount(bt);
    for (i = 0; i < need; i++) {
        if (pgno < 2 || pgno > last) break;
        added = zarrdb_seen_add(&seen, pgno);
        if (added < 0) { rc = SQLITE_NOMEM; break; }
        if (added == 0) { rc = ZARRDB_CHAIN_LOOP; break; }
        if (i + 1 < need) {
            rc = getOverflowPage(bt, pgno, 0, &pgno);
            if (rc != SQLITE_OK) break;
        }
    }
done:
    sqlite3_free(seen.slot);
    sqlite3BtreeLeaveCursor(cur);
    sqlite3_mutex_leave(p->db->mutex);
    return rc;
}
#else
static int zarrdb_blob_chain_check(sqlite3_blob *blob, sqlite3_int64 upto)
{
    (void)blob;
    (void)upto;
    return SQLITE_OK;
}
#endif


#endif
