# The SQL the Python layer needs of a file, each statement behind a method that says what it
# does: opening and checking a file (_format.read_facts, _schema.problems), making a SQLiteStore
# file (_file_setup.write_schema), upgrading one of zarr-python 2 (zarr2.py) and the metadata
# record every write updates. They run these, never SQL text of their own; Database.execute
# stays for tests and the conformance checker. A base class of Database (_core.pyx), whose
# statements it runs through Database.execute.

# The statements that read what a file is. The conformance checker runs the same text through
# Python's sqlite3 (zarrdb.conformance), so that both read a file alike.
FACT_QUERIES = {
    "schema_objects": "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema",
    "table_columns": 'SELECT name, type, "notnull", pk FROM pragma_table_info(?) ORDER BY cid',
    "column_kinds": "SELECT name, hidden FROM pragma_table_xinfo(?)",
    "index_expression": "SELECT 1 FROM pragma_index_xinfo(?) WHERE cid = -2",
    "index_partial": "SELECT 1 FROM pragma_index_list(?) WHERE name = ? AND partial",
    "metadata_records": f"SELECT CAST(k AS BLOB), CAST(v AS BLOB) FROM {_format.METADATA_TABLE}",
}
cdef str _INSERT_METADATA = f"INSERT INTO {_format.METADATA_TABLE}(k, v) VALUES (?, ?)"
# zarr 2's table is renamed to this while its rows move to the new `zarr` table.
cdef str _ZARR2_ASIDE = "zarr_v2_upgrading"


# Nothing to pickle here: a Database refuses pickling itself (Database.__reduce__).
@cython.auto_pickle(False)
cdef class _FileStatements:
    """The named statements of a Database (every instance is one)."""

    def atomic_call(self, fn):
        """`fn(self)` as one unit: begun, then committed, or rolled back if `fn` raises, inside
        one compiled call (see _atomic_call); returns what `fn` returns. For the SQL of creating
        a file and of maintenance, on a connection no writer runs or that Writer.call_holding()
        handed over."""
        return self._atomic_call(fn)

    # --- what a file is: read at every open -------------------------------------------------

    def schema_objects(self):
        """Every row of sqlite_schema as (type, name, tbl_name, sql; "" for none)."""
        return self.execute(FACT_QUERIES["schema_objects"])

    def table_columns(self, table):
        """The columns of `table` in order: (name, declared type, not null, primary key)."""
        return self.execute(FACT_QUERIES["table_columns"], (table,))

    def column_kinds(self, table):
        """Every column of `table`, hidden ones included: (name, hidden; 2 and 3 are
        generated columns)."""
        return self.execute(FACT_QUERIES["column_kinds"], (table,))

    def index_computes_expression(self, index):
        """Whether the index named `index` indexes an expression rather than columns."""
        return bool(self.execute(FACT_QUERIES["index_expression"], (index,)))

    def index_is_partial(self, table, index):
        """Whether the index `index` of `table` has a WHERE clause."""
        return bool(self.execute(FACT_QUERIES["index_partial"], (table, index)))

    def metadata_records(self):
        """The metadata table's rows as (k, v) bytes, as the file has them (NULL as None)."""
        return self.execute(FACT_QUERIES["metadata_records"])

    # --- making and changing a SQLiteStore file ---------------------------------------------

    def write_schema(self, records, *, data_table=True):
        """Inside the open transaction: the application id, the spec's tables (`data_table`:
        the table `zarr` too) and the metadata `records`, (k, v) pairs."""
        self.pragma("application_id", _format.APPLICATION_ID)
        self.executescript(_format.SCHEMA if data_table else _format.METADATA_SCHEMA)
        for key, value in records:
            self.execute(_INSERT_METADATA, (key, value))

    def touch_modified_at(self):
        """Set the metadata record modified_at to now, inside the open write transaction (one
        statement, no transaction of its own)."""
        self.execute(_format.TOUCH_MODIFIED_AT)

    def incremental_vacuum(self):
        """Give the file's free pages back to the file system (a file with a pointer map)."""
        self.execute("PRAGMA incremental_vacuum")

    def put_value(self, key, value):
        """Store `value` under `key` through this connection, replacing a value there (keys
        are otherwise written by the writer thread: this is for maintenance)."""
        self.execute(f"INSERT OR REPLACE INTO {_TABLE}(k, v) VALUES (?, ?)", (key, value))

    def delete_value(self, key):
        """Remove `key` through this connection, if it is there (maintenance, as put_value)."""
        self.execute(f"DELETE FROM {_TABLE} WHERE k = ?", (key,))

    # --- files of zarr-python 2's SQLiteStore -----------------------------------------------

    def rows_with_null(self):
        """(how many rows of the table `zarr` hold a NULL, the key of one whose value is NULL
        or None): a SQLiteStore file has none."""
        count = self.execute(f"SELECT count(*) FROM {_TABLE} WHERE k IS NULL OR v IS NULL")[0][0]
        if not count:
            return 0, None
        named = self.execute(f"SELECT k FROM {_TABLE} WHERE k IS NOT NULL AND v IS NULL LIMIT 1")
        return count, named[0][0] if named else None

    def mistyped_row(self):
        """(SQLite type of the key, of the value) of a row whose key is not text or whose value
        is neither a blob nor text, or None when every row is as zarr keeps them."""
        rows = self.execute(
            f"SELECT typeof(k), typeof(v) FROM {_TABLE} "
            "WHERE typeof(k) != 'text' OR typeof(v) NOT IN ('blob', 'text') LIMIT 1"
        )
        return rows[0] if rows else None

    def set_zarr2_table_aside(self):
        """Inside the open transaction: rename zarr 2's table `zarr` out of the way of the
        spec's table of the same name (move_zarr2_rows then empties it)."""
        self.execute(f"ALTER TABLE {_TABLE} RENAME TO {_ZARR2_ASIDE}")

    def move_zarr2_rows(self):
        """Inside the open transaction: copy the rows of the table set aside into the spec's
        table `zarr`, text values as their bytes, and drop it."""
        self.execute(
            f"INSERT INTO {_TABLE}(k, v) SELECT k, "
            "CASE typeof(v) WHEN 'text' THEN CAST(v AS BLOB) ELSE v END "
            f"FROM {_ZARR2_ASIDE} ORDER BY k"
        )
        self.execute(f"DROP TABLE {_ZARR2_ASIDE}")
