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

#endif
