# What closing a writable file does on the write connection once the writer thread has stopped
# (zarrdb._open_file): the statements live here, in the engine, by name. Included into _core.pyx.

def give_back_free_pages(Database db):
    """Give the pages deletes freed back to the file system, in a file with incremental
    auto-vacuum (the writer does it while idle; what it had no time for is done here)."""
    if db.pragma("auto_vacuum") == 2 and db.pragma("freelist_count"):
        db.execute("PRAGMA incremental_vacuum")


def record_modified_at(Database db):
    """Write the file's modification time (the last group commits may have left it out). One
    statement: its own transaction."""
    db.execute(_format.TOUCH_MODIFIED_AT)
