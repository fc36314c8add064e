# cython: freethreading_compatible = False
"""zarrdb's engine: one SQLite connection per Database, every SQLite call without the GIL."""

from zarrdb._sqlite3 cimport *


BUNDLED_SQLITE = bool(ZARRDB_BUNDLED_SQLITE)


def _library_info():
    """(version, source id, compile options) of the SQLite this module was built with."""
    cdef int i = 0
    cdef const char* opt
    options = []
    while True:
        opt = sqlite3_compileoption_get(i)
        if opt == NULL:
            break
        options.append(opt.decode("ascii"))
        i += 1
    return (
        sqlite3_libversion().decode("ascii"),
        sqlite3_sourceid().decode("ascii"),
        tuple(options),
    )
