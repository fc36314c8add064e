"""Setting a SQLiteStore file up for use: creating it atomically, checking it against the
format, the journal policy and the write connection's durability, and what a read-only open
tidies (a hot journal rolled back, the WAL sidecars it made removed).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import stat
import tempfile
import time
from typing import Any, Literal

from zarrdb import _format, _pause, _tunables, errors
from zarrdb._core import Database, library_info


def compiled_default(name: str) -> int | None:
    """A number the SQLite in use was compiled with, e.g. DEFAULT_SYNCHRONOUS (None: unknown)."""
    for option in library_info()[2]:
        key, _, value = option.partition("=")
        if key == name and value.isdigit():
            return int(value)
    return None


# SQLite's synchronous setting when none is set: its default while the file is in a rollback
# journal (FULL, 2, in zarrdb's build and most others), its WAL default in WAL mode.
_ROLLBACK_DEFAULT_IS_FULL = (compiled_default("DEFAULT_SYNCHRONOUS") or 0) >= 2


def synchronous(
    durability: str, journal: str
) -> Literal["off", "normal", "full", "extra"] | None:
    """PRAGMA synchronous of the write connection; None leaves it to SQLite, which then uses
    FULL while the file is in a rollback journal and NORMAL once it is in WAL mode (setup.py's
    SQLITE_DEFAULT_WAL_SYNCHRONOUS; a system SQLite may use FULL there too), following the
    writer's switch from one to the other (journal="auto").

    A power loss (tests/reliability/test_power_loss.py) showed why: with NORMAL, SQLite does
    not sync the end of a rollback journal (its truncation or deletion), so the journal can come
    back over later writes (the file truncated after VACUUM, sectors of the next journal), and
    rolling it back damaged the file; with FULL, a deleted journal can come back whole and roll
    back a commit that had returned. EXTRA is FULL plus a sync of the directory once the
    journal is deleted. In WAL mode NORMAL only loses the last commits."""
    if durability == "off":
        return "off"
    if durability == "full" or journal == "delete":
        return "extra"
    if journal == "wal":
        return "normal"
    return None if _ROLLBACK_DEFAULT_IS_FULL else "full"


def open_writable(path: str, opts: dict[str, Any]) -> Database:
    """The write connection of the file at `path` (created if missing), checked against the
    format (an empty file initialised in place) and in the journal mode `opts` asks for.

    SQLite's switch into or out of WAL mode takes an exclusive lock without waiting for it:
    while another connection holds a lock it needs, the open tries again, on a new connection
    (this one's shared lock let go meanwhile: two opens switching at once would otherwise wait
    for each other), until the busy timeout has passed."""
    if not os.path.exists(path):
        _create(path, opts)
    deadline = time.monotonic() + opts["busy_timeout"]
    pause = 0.001
    while True:
        db = Database(
            path,
            mode="c",
            busy_timeout=opts["busy_timeout"],
            cache_size=opts["cache_size"],
            synchronous=synchronous(opts["durability"], opts["journal"]),
            cell_size_check=opts["check_pages"],
        )
        try:
            facts = _format.read_facts(db)
            if facts.is_empty:  # an empty file made by someone else: initialise it in place
                _initialise(db, opts, path)
            else:
                _format.warn(_format.validate(facts, path=path, writable=True))
            # "auto" starts with a rollback journal (TRUNCATE: no file created and deleted at
            # every commit) and the writer may move to WAL (see _tunables.AUTO_WAL_AFTER); a
            # file another connection has in WAL mode already stays in it.
            wanted = {"auto": "truncate", "wal": "wal", "delete": "delete"}[opts["journal"]]
            if opts["journal"] == "auto" and db.journal_mode() == "wal":
                wanted = "wal"
            _pause.point("open.switch")
            try:
                mode = switch_journal(db, wanted)
            except errors.DatabaseLockedError:
                if time.monotonic() + pause > deadline:
                    raise
                db.close()
                time.sleep(random.uniform(pause, 2 * pause))
                pause = min(2 * pause, 0.05)
                continue
            if mode != wanted:
                raise errors.SQLiteError(
                    f"cannot switch {path!r} to journal mode {wanted!r} (got {mode!r}; another "
                    "connection may have it open in another mode)"
                )
        except BaseException:
            db.close()
            raise
        return db


def switch_journal(db: Database, mode: str) -> str:
    """`db.journal_mode(mode)`, the mode the file is in now. Out of WAL mode in exclusive
    locking mode, normal again once switched: SQLite's switch deletes the log, then (outside
    that mode) lets its exclusive lock down to a shared one before it writes the new mode in
    the header. A writer opening in between found the header in WAL mode and no log, made a new
    log, and committed and checkpointed into the file; the switch then wrote its old first page
    over the file, and the file was damaged (its header's page count cut off the new pages).
    DatabaseLockedError while another connection holds a lock the switch needs."""
    if mode == "wal" or db.journal_mode() != "wal":
        return db.journal_mode(mode)
    db.pragma("locking_mode", "exclusive")
    try:
        return db.journal_mode(mode)
    finally:
        db.pragma("locking_mode", "normal")
        db.pragma("schema_version")  # (the next access lets the exclusive lock go)


def foreign_journal(path: str) -> bool:
    """Whether a journal beside `path` belongs to another user than the file."""
    try:
        return os.stat(path + "-journal").st_uid != os.stat(path).st_uid
    except OSError:
        return False  # no journal (the usual case)


def roll_back_hot_journal(path: str, busy_timeout: float, foreign: bool) -> None:
    """Roll back the transaction a writer left unfinished in `path`'s journal, through a
    connection that may write (the file is not otherwise changed). Only a journal of the file's
    own owner is rolled back (`foreign`: it was another user's), and only where this process may
    write the file and its folder; otherwise ReadOnlyError names the journal and what to do."""
    journal = path + "-journal"
    folder = os.path.dirname(path) or "."
    if foreign:
        # Anyone who may create files in the folder can put a journal beside the file; rolling
        # it back would copy its pages into the file.
        why = (
            f"the journal {journal!r} beside it belongs to another user than the file, so "
            "zarrdb does not roll it back (that would copy its pages into the file). If a "
            "writer of this file crashed, the file's owner opening it once for writing rolls "
            "it back; if you did not expect the journal, remove it"
        )
    elif os.access(path, os.W_OK) and os.access(folder, os.W_OK):
        db = Database(path, mode="w", busy_timeout=busy_timeout)
        try:
            db.pragma("schema_version")  # reading rolls the journal back
        finally:
            db.close()
        return
    else:
        why = (
            f"a writer stopped in the middle of a transaction and left the journal {journal!r}, "
            "which must be rolled back first, and that needs write permission on the file and "
            "its folder. Open it once as a user who may write both (any zarrdb command does "
            f"it, e.g. `zarrdb info {path}`); do not delete a journal a crashed writer of this "
            "file left, which would leave the file damaged"
        )
    raise errors.ReadOnlyError(
        f"{path!r} cannot be read: {why}",
        code=errors.SQLITE_READONLY,
        extended_code=errors.SQLITE_READONLY_ROLLBACK,
        filename=path,
    )


def remove_sidecars_we_made(path: str) -> None:
    """Remove the -wal and -shm files that reading a file in WAL mode made (the file's own
    writer had left none), if they hold nothing: a connection allowed to write, opened and
    closed as the last one, checkpoints nothing and deletes them; the file itself is not
    written. Where this process may not write there, they stay (SQLite then reads without
    them, in memory, and made none)."""
    if not os.path.exists(path + "-wal") or os.path.getsize(path + "-wal") != 0:
        return
    with contextlib.suppress(errors.ZarrDBError, OSError):
        db = Database(path, mode="w", busy_timeout=0)
        try:
            db.pragma("schema_version")  # joins the log, so that closing ends it
        finally:
            db.close()


def switch_to_delete(db: Database) -> bool:
    """Switch the file `db` has open to DELETE mode (switch_journal); whether it is in it."""
    return switch_journal(db, "delete") == "delete"


def log_beside(path: str) -> str | None:
    """The -wal beside the file at `path` (where SQLite looks for it: beside the file a link
    names), if there is one."""
    log = os.path.realpath(path) + "-wal"
    return log if os.path.lexists(log) else None


def leave_one_file(path: str, opts: dict[str, Any]) -> bool:
    """After a close that may have left the file in WAL mode or a log beside it (its own
    connection is closed now): make it one file in DELETE mode, on a fresh connection, tried
    after each of _tunables.LAST_OUT_PAUSES. Whether a try succeeded; if none did, another
    connection still has the file open, and its close does it.

    Two cases. The close's switch to DELETE found another connection open: of two processes
    closing at once, each found the other open, and the file stayed in WAL mode. Or the switch
    succeeded, but SQLite's switch lets go of its exclusive lock between deleting the log and
    writing the header's new mode: a connection opening then finds the header in WAL mode and
    no log, and makes a new, empty -wal and -shm, which no connection uses or removes once the
    header says DELETE (_remove_empty_log)."""
    for pause in _tunables.LAST_OUT_PAUSES:
        time.sleep(random.uniform(pause, 2 * pause))
        try:
            db = Database(path, mode="w", busy_timeout=0,
                          synchronous=synchronous(opts["durability"], opts["journal"]))  # fmt: skip
        except errors.DatabaseLockedError:
            continue  # another connection is switching the file, or writing
        except (errors.ZarrDBError, OSError):
            return False  # gone, replaced, or refused: nothing of ours to tidy
        try:
            if switch_to_delete(db) and (
                log_beside(path) is None or _remove_empty_log(db, path)
            ):
                return True
        except errors.DatabaseLockedError:
            pass  # still open elsewhere
        except (errors.ZarrDBError, OSError):
            return False
        finally:
            db.close()
    return False


def _remove_empty_log(db: Database, path: str) -> bool:
    """Remove the empty -wal (and the -shm) beside the file `db` has open in DELETE mode,
    under a write lock: no connection can switch the file to WAL mode meanwhile (that needs an
    exclusive lock), and none has the log open (a connection in WAL mode keeps a shared lock,
    so the switch that wrote DELETE in the header waited for each to close; an empty log beside
    a file in DELETE mode is not opened). A log that holds anything, or is not a regular file,
    is left as it is. Whether it was removed."""

    def remove(db: Database) -> bool:
        # (Inside the transaction SQLite has read the header: in WAL mode it would have
        # opened the log and said so.)
        if db.journal_mode() != "delete":
            return False
        log = log_beside(path)
        if log is None:
            return True  # another close removed it meanwhile
        try:
            found = os.lstat(log)
        except FileNotFoundError:
            return True
        if not stat.S_ISREG(found.st_mode) or found.st_size != 0:
            return False
        os.unlink(log)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(log.removesuffix("-wal") + "-shm")
        return True

    return db.atomic_call(remove)  # (BEGIN IMMEDIATE; nothing is written)


# --- creating a file -----------------------------------------------------------------------------


def _initialise(db: Database, opts: dict[str, Any], path: str) -> None:
    """Give an empty database the SQLiteStore schema and metadata, in one transaction."""
    from zarrdb import __version__

    db.pragma("page_size", int(opts["page_size"] or _tunables.DEFAULT_PAGE_SIZE))
    db.pragma("auto_vacuum", _tunables.AUTO_VACUUM)  # before the first table: only an empty file takes it
    # SQLite sized the cache in pages of the old size: size it again in KiB.
    db.pragma("cache_size", -int(opts["cache_size"]))

    def schema(db: Database) -> None:
        facts = _format.read_facts(db)  # another process may have won the race
        if not facts.is_empty:
            _format.warn(_format.validate(facts, path=path, writable=True))
            return
        write_schema(db, f"zarrdb {__version__}")

    db.atomic_call(schema)  # schema work on a connection no writer runs yet


def write_schema(db: Database, created_by: str, *, data_table: bool = True) -> None:
    """Make the file a SQLiteStore file inside the transaction open on `db`: the application
    id, the tables (`data_table`: the `zarr` table too), and the metadata of a new file."""
    db.write_schema(_format.initial_metadata(created_by), data_table=data_table)


def _create(path: str, opts: dict[str, Any]) -> None:
    """Create an empty SQLiteStore file at `path` atomically: it is built and synced in a new
    private folder in the same directory, then linked to `path` (which fails if another process
    created it meanwhile: then that file is used). A crash leaves no file at `path`, or a whole
    one; at worst a hidden folder beside it."""
    directory, name = os.path.split(path)
    # A folder only this user can enter, made exclusively under a random name: no file or
    # -journal that someone else planted at the temporary name can be opened as ours.
    folder = tempfile.mkdtemp(prefix=f".{name}.creating-", dir=directory or os.curdir)
    temporary = os.path.join(folder, name)
    try:
        db = Database(temporary, mode="c", busy_timeout=opts["busy_timeout"], synchronous="full")
        try:
            _initialise(db, opts, path)
        finally:
            db.close()
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # created by someone else meanwhile
        except OSError:
            # No hard links here (some network and FAT file systems): rename, which on POSIX
            # would replace a file created meanwhile, so check first (a small window).
            if os.path.exists(path):
                return
            os.rename(temporary, path)
        _sync_directory(directory)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sync_directory(directory: str) -> None:
    """Make a new directory entry durable (POSIX; Windows has no directory handles to sync)."""
    if os.name != "posix":
        return
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)
