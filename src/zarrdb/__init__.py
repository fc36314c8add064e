"""zarrdb: a Zarr v3 store that keeps a whole hierarchy in one SQLite file."""

from importlib.metadata import PackageNotFoundError, version as _dist_version

from zarrdb import errors
from zarrdb._core import _library_info

try:
    __version__ = _dist_version("zarrdb")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

sqlite_version: str
sqlite_source_id: str
compile_options: tuple[str, ...]
sqlite_version, sqlite_source_id, compile_options = _library_info()

__all__ = ["__version__", "compile_options", "errors", "sqlite_source_id", "sqlite_version"]

from zarrdb.store import SQLiteStore  # noqa: E402

__all__ += ["SQLiteStore"]
