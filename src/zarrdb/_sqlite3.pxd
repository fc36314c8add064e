# C declarations of the SQLite API that zarrdb._core uses. Declarations only; every function
# is usable without the GIL.
from libc.stdint cimport int64_t, uint64_t

cdef extern from "_sqlite_amalgamation.h" nogil:
    ctypedef struct sqlite3
    ctypedef struct sqlite3_stmt
    ctypedef struct sqlite3_blob
    ctypedef struct sqlite3_backup
    ctypedef int64_t sqlite3_int64
    ctypedef uint64_t sqlite3_uint64
    ctypedef void (*sqlite3_destructor_type)(void*)
    ctypedef struct sqlite3_vfs:
        int (*xSleep)(sqlite3_vfs* vfs, int microseconds) noexcept nogil

    int ZARRDB_BUNDLED_SQLITE  # 1: the vendored amalgamation; 0: the system library
    const char* SQLITE_VERSION
    const char* SQLITE_SOURCE_ID
    int SQLITE_VERSION_NUMBER

    # result codes
    int SQLITE_OK, SQLITE_ERROR, SQLITE_INTERNAL, SQLITE_PERM, SQLITE_ABORT, SQLITE_BUSY
    int SQLITE_LOCKED, SQLITE_NOMEM, SQLITE_READONLY, SQLITE_INTERRUPT, SQLITE_IOERR
    int SQLITE_CORRUPT, SQLITE_NOTFOUND, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_PROTOCOL
    int SQLITE_EMPTY, SQLITE_SCHEMA, SQLITE_TOOBIG, SQLITE_CONSTRAINT, SQLITE_MISMATCH
    int SQLITE_MISUSE, SQLITE_NOLFS, SQLITE_AUTH, SQLITE_FORMAT, SQLITE_RANGE, SQLITE_NOTADB
    int SQLITE_NOTICE, SQLITE_WARNING, SQLITE_ROW, SQLITE_DONE
    int SQLITE_IOERR_SHMOPEN, SQLITE_IOERR_SHMSIZE, SQLITE_IOERR_SHMLOCK, SQLITE_IOERR_SHMMAP
    int SQLITE_READONLY_ROLLBACK

    # open flags
    int SQLITE_OPEN_READONLY, SQLITE_OPEN_READWRITE, SQLITE_OPEN_CREATE, SQLITE_OPEN_URI
    int SQLITE_OPEN_NOMUTEX, SQLITE_OPEN_FULLMUTEX, SQLITE_OPEN_EXRESCODE
    int SQLITE_OPEN_NOFOLLOW, SQLITE_OPEN_PRIVATECACHE

    int SQLITE_PREPARE_PERSISTENT
    int SQLITE_NULL, SQLITE_BLOB, SQLITE_TEXT, SQLITE_INTEGER, SQLITE_FLOAT
    int SQLITE_LIMIT_LENGTH, SQLITE_LIMIT_SQL_LENGTH, SQLITE_LIMIT_COLUMN, SQLITE_LIMIT_EXPR_DEPTH
    int SQLITE_LIMIT_COMPOUND_SELECT, SQLITE_LIMIT_VDBE_OP, SQLITE_LIMIT_FUNCTION_ARG
    int SQLITE_LIMIT_ATTACHED, SQLITE_LIMIT_LIKE_PATTERN_LENGTH, SQLITE_LIMIT_VARIABLE_NUMBER
    int SQLITE_LIMIT_TRIGGER_DEPTH, SQLITE_LIMIT_WORKER_THREADS
    int SQLITE_CHECKPOINT_PASSIVE, SQLITE_CHECKPOINT_FULL, SQLITE_CHECKPOINT_RESTART
    int SQLITE_CHECKPOINT_TRUNCATE
    int SQLITE_TXN_NONE, SQLITE_TXN_READ, SQLITE_TXN_WRITE
    sqlite3_destructor_type SQLITE_STATIC
    sqlite3_destructor_type SQLITE_TRANSIENT

    const char* sqlite3_libversion()
    const char* sqlite3_sourceid()
    int sqlite3_libversion_number()
    const char* sqlite3_compileoption_get(int n)
    int sqlite3_threadsafe()
    const char* sqlite3_errstr(int rc)

    int sqlite3_open_v2(const char* filename, sqlite3** db, int flags, const char* vfs)
    int sqlite3_close_v2(sqlite3* db)
    int sqlite3_errcode(sqlite3* db)
    int sqlite3_extended_errcode(sqlite3* db)
    const char* sqlite3_errmsg(sqlite3* db)
    int sqlite3_extended_result_codes(sqlite3* db, int onoff)
    int sqlite3_busy_timeout(sqlite3* db, int ms)
    int sqlite3_busy_handler(sqlite3* db, int (*handler)(void*, int) noexcept nogil, void* arg)
    sqlite3_vfs* sqlite3_vfs_find(const char* name)
    int sqlite3_limit(sqlite3* db, int id, int new_value)
    int sqlite3_exec(sqlite3* db, const char* sql, void* callback, void* arg, char** errmsg)
    void sqlite3_free(void* p)
    int sqlite3_get_autocommit(sqlite3* db)
    int sqlite3_txn_state(sqlite3* db, const char* schema)
    int sqlite3_changes(sqlite3* db)
    int sqlite3_db_readonly(sqlite3* db, const char* name)
    const char* sqlite3_db_filename(sqlite3* db, const char* name)
    void sqlite3_interrupt(sqlite3* db)
    int sqlite3_db_config(sqlite3* db, int op, ...)
    int SQLITE_DBCONFIG_DEFENSIVE, SQLITE_DBCONFIG_TRUSTED_SCHEMA
    void sqlite3_progress_handler(sqlite3* db, int steps, int (*handler)(void*) noexcept nogil,
                                  void* arg)

    int sqlite3_prepare_v3(sqlite3* db, const char* sql, int nbyte, unsigned int flags,
                           sqlite3_stmt** stmt, const char** tail)
    int sqlite3_prepare_v2(sqlite3* db, const char* sql, int nbyte, sqlite3_stmt** stmt,
                           const char** tail)
    int sqlite3_step(sqlite3_stmt* stmt)
    int sqlite3_reset(sqlite3_stmt* stmt)
    int sqlite3_clear_bindings(sqlite3_stmt* stmt)
    int sqlite3_finalize(sqlite3_stmt* stmt)
    int sqlite3_bind_text64(sqlite3_stmt* stmt, int i, const char* text, sqlite3_uint64 n,
                            sqlite3_destructor_type destructor, unsigned char encoding)
    int sqlite3_bind_blob64(sqlite3_stmt* stmt, int i, const void* data, sqlite3_uint64 n,
                            sqlite3_destructor_type destructor)
    int sqlite3_bind_int64(sqlite3_stmt* stmt, int i, sqlite3_int64 value)
    int sqlite3_bind_null(sqlite3_stmt* stmt, int i)
    int sqlite3_bind_double(sqlite3_stmt* stmt, int i, double value)
    int sqlite3_column_type(sqlite3_stmt* stmt, int col)
    const void* sqlite3_column_blob(sqlite3_stmt* stmt, int col)
    const unsigned char* sqlite3_column_text(sqlite3_stmt* stmt, int col)
    int sqlite3_column_bytes(sqlite3_stmt* stmt, int col)
    sqlite3_int64 sqlite3_column_int64(sqlite3_stmt* stmt, int col)
    double sqlite3_column_double(sqlite3_stmt* stmt, int col)
    int sqlite3_column_count(sqlite3_stmt* stmt)
    const char* sqlite3_column_name(sqlite3_stmt* stmt, int col)
    unsigned char SQLITE_UTF8

    int sqlite3_file_control(sqlite3* db, const char* schema, int op, void* arg)
    int sqlite3_blob_open(sqlite3* db, const char* schema, const char* table,
                          const char* column, sqlite3_int64 rowid, int flags,
                          sqlite3_blob** blob)
    int sqlite3_blob_read(sqlite3_blob* blob, void* buf, int n, int offset)
    int sqlite3_blob_bytes(sqlite3_blob* blob)
    int sqlite3_blob_reopen(sqlite3_blob* blob, sqlite3_int64 rowid)
    int sqlite3_blob_close(sqlite3_blob* blob)
    int sqlite3_blob_write(sqlite3_blob* blob, const void* buf, int n, int offset)
    sqlite3_int64 sqlite3_last_insert_rowid(sqlite3* db)
    int sqlite3_wal_autocheckpoint(sqlite3* db, int n)
    void* sqlite3_wal_hook(sqlite3* db, int (*hook)(void*, sqlite3*, const char*, int) noexcept nogil,
                           void* arg)
    char* sqlite3_mprintf(const char* fmt, ...)

    int sqlite3_wal_checkpoint_v2(sqlite3* db, const char* schema, int mode, int* log,
                                  int* ckpt)

    sqlite3_backup* sqlite3_backup_init(sqlite3* dest, const char* dest_name, sqlite3* source,
                                        const char* source_name)
    int sqlite3_backup_step(sqlite3_backup* backup, int pages)
    int sqlite3_backup_finish(sqlite3_backup* backup)
    int sqlite3_backup_remaining(sqlite3_backup* backup)
    int sqlite3_backup_pagecount(sqlite3_backup* backup)
    void sqlite3_sleep(int ms)
