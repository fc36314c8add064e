"""zarrdb: a Zarr v3 store that keeps a whole hierarchy in one SQLite file."""

from importlib.metadata import PackageNotFoundError, version as _dist_version

from zarrdb import _core, errors

__version__: str
"""The version of the installed zarrdb package."""
try:
    __version__ = _dist_version("zarrdb")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

sqlite_version: str
"""The version of the SQLite compiled into zarrdb, such as `"3.53.4"`."""
sqlite_source_id: str
"""SQLite's source id: the date and the check-in hash of the SQLite compiled into zarrdb."""
compile_options: tuple[str, ...]
"""The compile options of that SQLite (`THREADSAFE=2`, `DEFAULT_MEMSTATUS=0`, ...), as
`PRAGMA compile_options` lists them; `setup.py` gives the reason for each."""
sqlite_version, sqlite_source_id, compile_options = _core.library_info()

__all__ = ["__version__", "compile_options", "errors", "sqlite_source_id", "sqlite_version"]

from zarrdb._sigterm import exit_on_sigterm  # noqa: E402
from zarrdb.copying import CopyResult, copy, copy_async  # noqa: E402
from zarrdb.store import SQLiteStore  # noqa: E402

__all__ += ["CopyResult", "SQLiteStore", "copy", "copy_async", "exit_on_sigterm"]
