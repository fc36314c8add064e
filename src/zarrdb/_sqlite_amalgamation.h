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

#endif
