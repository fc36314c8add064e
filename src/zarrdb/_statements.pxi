# The SQL zarrdb runs on the zarr table, by number: prepared once per connection (Database._stmt)
# and kept for its life. Included into _core.pyx before the Database class.

# Prepared statements, by number. The zarr table is `zarr(k TEXT PRIMARY KEY, v BLOB)`; ranges
# are `k >= lower AND k < upper` on the primary key (BINARY collation = UTF-8 byte order).

cdef enum Stmt:
    S_GET
    S_LOCATE
    S_READ
    S_EXISTS
    S_LENGTH
    S_SET
    S_SET_IF_ABSENT
    S_SET_ZB
    S_SET_IF_ABSENT_ZB
    S_DELETE
    S_LIST_ALL
    S_LIST_RANGE
    S_SEEK_GE
    S_SEEK_GE_ALL
    S_SEEK_GT
    S_SEEK_GT_ALL
    S_SIZE_ALL
    S_SIZE_RANGE
    S_COUNT_ALL
    S_COUNT_RANGE
    S_ANY_ALL
    S_ANY_RANGE
    S_DELETE_ALL
    S_DELETE_RANGE
    S_BEGIN_READ
    S_BEGIN_WRITE
    S_COMMIT
    S_ROLLBACK
    S_SAVEPOINT
    S_RELEASE
    S_ROLLBACK_TO
    S_FILE_BYTES
    S_COUNT

# A value's size in bytes. length() of a BLOB reads only the record header; a value another
# program stored as TEXT (against the spec) would count characters, so it is measured as bytes.
# typeof() also reads only the header.
cdef str _NBYTES = "CASE WHEN typeof(v) = 'blob' THEN length(v) ELSE length(CAST(v AS BLOB)) END"

# The statements, by number: {t} is the data table (its name from _format, like every fact of
# the spec); ranges are `k >= lower AND k < upper` on the primary key.
_STATEMENTS = {
    S_GET: "SELECT v FROM {t} WHERE k = ?1",
    S_LOCATE: f"SELECT rowid, {_NBYTES} FROM {{t}} WHERE k = ?1",
    # One lookup for `get`: the value itself only when it is at most ?2 bytes long (length()
    # reads the record header, not the value); longer ones are read with the blob API. (Plain
    # length() here, for speed: the blob API gives the size in bytes of a long value, and a
    # short one is measured with sqlite3_column_bytes.)
    S_READ: "SELECT rowid, length(v), CASE WHEN length(v) <= ?2 THEN v END FROM {t} WHERE k = ?1",
    S_EXISTS: "SELECT 1 FROM {t} WHERE k = ?1",
    S_LENGTH: f"SELECT {_NBYTES} FROM {{t}} WHERE k = ?1",
    S_SET: "INSERT INTO {t}(k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
    S_SET_IF_ABSENT: "INSERT INTO {t}(k, v) VALUES (?1, ?2) ON CONFLICT(k) DO NOTHING",
    # Large values: the row with a zero-filled value of the right length, whose rowid the
    # writer then opens with the blob API to write the bytes in place.
    S_SET_ZB: "INSERT INTO {t}(k, v) VALUES (?1, zeroblob(?2)) "
              "ON CONFLICT(k) DO UPDATE SET v = excluded.v RETURNING rowid",
    S_SET_IF_ABSENT_ZB: "INSERT INTO {t}(k, v) VALUES (?1, zeroblob(?2)) "
                        "ON CONFLICT(k) DO NOTHING RETURNING rowid",
    S_DELETE: "DELETE FROM {t} WHERE k = ?1",
    S_LIST_ALL: "SELECT k FROM {t} ORDER BY k",
    S_LIST_RANGE: "SELECT k FROM {t} WHERE k >= ?1 AND k < ?2 ORDER BY k",
    S_SEEK_GE: "SELECT k FROM {t} WHERE k >= ?1 AND k < ?2 ORDER BY k LIMIT 1",
    S_SEEK_GE_ALL: "SELECT k FROM {t} WHERE k >= ?1 ORDER BY k LIMIT 1",
    S_SEEK_GT: "SELECT k FROM {t} WHERE k > ?1 AND k < ?2 ORDER BY k LIMIT 1",
    S_SEEK_GT_ALL: "SELECT k FROM {t} WHERE k > ?1 ORDER BY k LIMIT 1",
    S_SIZE_ALL: f"SELECT coalesce(sum({_NBYTES}), 0) FROM {{t}}",
    S_SIZE_RANGE: f"SELECT coalesce(sum({_NBYTES}), 0) FROM {{t}} WHERE k >= ?1 AND k < ?2",
    S_COUNT_ALL: "SELECT count(*) FROM {t}",
    S_COUNT_RANGE: "SELECT count(*) FROM {t} WHERE k >= ?1 AND k < ?2",
    S_ANY_ALL: "SELECT EXISTS (SELECT 1 FROM {t})",
    S_ANY_RANGE: "SELECT EXISTS (SELECT 1 FROM {t} WHERE k >= ?1 AND k < ?2)",
    S_DELETE_ALL: "DELETE FROM {t}",
    S_DELETE_RANGE: "DELETE FROM {t} WHERE k >= ?1 AND k < ?2",
    S_BEGIN_READ: "BEGIN DEFERRED",
    S_BEGIN_WRITE: "BEGIN IMMEDIATE",
    S_COMMIT: "COMMIT",
    S_ROLLBACK: "ROLLBACK",
    S_SAVEPOINT: "SAVEPOINT zarrdb_batch",
    S_RELEASE: "RELEASE zarrdb_batch",
    S_ROLLBACK_TO: "ROLLBACK TO zarrdb_batch",
    # The file's size in the statement's snapshot: the most bytes a sound value can have.
    S_FILE_BYTES: "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
}  # fmt: skip
# The UTF-8 text of each, kept here (a C-level global Python code cannot rebind), with _SQL
# pointing into it.
cdef list _SQL_TEXT = [None] * <int>S_COUNT
cdef const char* _SQL[<int>S_COUNT]
for _which, _text in _STATEMENTS.items():
    _SQL_TEXT[_which] = _text.format(t=_TABLE).encode("utf-8")
    _SQL[<int>_which] = _SQL_TEXT[_which]
del _which, _text
