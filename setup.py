"""Build of the zarrdb._core extension: Cython around the vendored SQLite amalgamation.

Project metadata lives in pyproject.toml; this file holds what setuptools cannot express there:
the extension, and the SQLite compile options in one list.

Environment:
    ZARRDB_SYSTEM_SQLITE=1   build against the system libsqlite3 instead of vendor/sqlite3/
                             (for distributions; the compile options below then do not apply).
    ZARRDB_DEBUG=1           no optimisation, debug information, SQLite's internal assertions
                             off still (for valgrind: scripts/memcheck.sh).
    ZARRDB_SANITIZE=address  AddressSanitizer (gcc or clang): light optimisation, debug
                             information, frame pointers (scripts/memcheck.sh --asan).
    ZARRDB_TEST_VFS=1        a test build: the power-loss simulator (_vfs_powerloss.h), which
                             the reliability tests use, is compiled in (scripts/dev.sh and
                             scripts/memcheck.sh set it; no wheel has it), and so are the
                             named pause points of the schedule explorer (_pause_points.h).
Otherwise (a release build, e.g. every wheel) the extension is optimised and carries no debug
information: it is compiled without, and on Linux linked with the debug sections stripped;
function names stay, for readable crash stacks.
"""

import glob
import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The SQLite compile options, each with the reason it is set. They are passed as macros, so
# gcc, clang and MSVC all take them the same way.
SQLITE_OPTIONS = [
    # Multi-thread mode: a connection is used by one thread at a time (zarrdb gives each thread
    # its own and checks it), so SQLite's per-connection mutexes are pure overhead.
    ("SQLITE_THREADSAFE", "2"),
    # Values up to the spec's 2,147,483,645-byte limit; the default cap is 1,000,000,000.
    ("SQLITE_MAX_LENGTH", "2147483647"),
    # Double-quoted strings are identifiers only: a typo in SQL is an error, not a string.
    ("SQLITE_DQS", "0"),
    # No global memory statistics: they take a mutex on every malloc and free.
    ("SQLITE_DEFAULT_MEMSTATUS", "0"),
    # WAL mode defaults to synchronous=NORMAL: durable against process crashes, one fsync per
    # checkpoint instead of one per commit.
    ("SQLITE_DEFAULT_WAL_SYNCHRONOUS", "1"),
    # Deprecated interfaces are not used; leaving them out shrinks the library.
    ("SQLITE_OMIT_DEPRECATED", "1"),
    # Shared cache is discouraged upstream and would defeat per-thread connections.
    ("SQLITE_OMIT_SHARED_CACHE", "1"),
    # No extension loading: a .zarrdb file or a caller cannot pull native code into the process.
    ("SQLITE_OMIT_LOAD_EXTENSION", "1"),
    # The declared column types are never asked for.
    ("SQLITE_OMIT_DECLTYPE", "1"),
    # LIKE never scans BLOB values (recommended upstream; zarrdb never uses LIKE on keys).
    ("SQLITE_LIKE_DOESNT_MATCH_BLOBS", "1"),
    # The ceiling of the expression-depth limit (SQLite's default): 0 would remove the limit,
    # and a schema nesting 150,000 terms overflows the C stack while it is parsed. Each
    # connection lowers it further (CONNECTION_LIMITS in _core.pyx).
    ("SQLITE_MAX_EXPR_DEPTH", "1000"),
    # Temporary tables and indices (e.g. VACUUM's) in memory rather than in temp files.
    ("SQLITE_TEMP_STORE", "2"),
    # Allow 64 KiB pages (SQLite's maximum) to be chosen at creation.
    ("SQLITE_MAX_PAGE_SIZE", "65536"),
]

if sys.platform != "win32":
    # Sleep in milliseconds while waiting on a lock; without it SQLite sleeps whole seconds.
    SQLITE_OPTIONS.append(("HAVE_USLEEP", "1"))

SYSTEM_SQLITE = os.environ.get("ZARRDB_SYSTEM_SQLITE", "") not in ("", "0")
DEBUG = os.environ.get("ZARRDB_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("ZARRDB_SANITIZE", "")
TEST_VFS = os.environ.get("ZARRDB_TEST_VFS", "") not in ("", "0")
if SANITIZE not in ("", "address"):
    sys.exit(f"ZARRDB_SANITIZE={SANITIZE!r}: only 'address' is supported")


class BuildExt(build_ext):
    """Adds flags per compiler family: nothing gcc-only reaches MSVC."""

    def build_extensions(self):
        unix_like = self.compiler.compiler_type in ("unix", "mingw32", "cygwin")
        if SANITIZE and not unix_like:
            sys.exit("ZARRDB_SANITIZE needs gcc or clang")
        for ext in self.extensions:
            if unix_like:
                # The amalgamation with SQLITE_API=static leaves unused static functions.
                ext.extra_compile_args += ["-Wno-unused-function"]
                if SANITIZE:
                    flags = ["-O1", "-g", "-fno-omit-frame-pointer", f"-fsanitize={SANITIZE}"]
                    ext.extra_compile_args += flags
                    ext.extra_link_args += [f"-fsanitize={SANITIZE}"]
                elif DEBUG:
                    ext.extra_compile_args += ["-O0", "-g"]
                else:
                    # -g0 overrides the -g of Python's own CFLAGS; the linker drops any debug
                    # sections that remain (ELF linkers; macOS keeps debug information out of
                    # the extension anyway).
                    ext.extra_compile_args += ["-O2", "-g0"]
                    if sys.platform.startswith(("linux", "freebsd")):
                        ext.extra_link_args += ["-Wl,--strip-debug"]
            elif self.compiler.compiler_type == "msvc":
                ext.extra_compile_args += ["/Od", "/Zi"] if DEBUG else ["/O2"]
        super().build_extensions()


if SYSTEM_SQLITE:
    macros = [("ZARRDB_SYSTEM_SQLITE", "1")]
    include_dirs = ["src/zarrdb"]
    libraries = ["sqlite3"]
else:
    macros = list(SQLITE_OPTIONS)
    include_dirs = ["src/zarrdb", "vendor/sqlite3"]
    libraries = []
if TEST_VFS:
    macros.append(("ZARRDB_TEST_VFS", "1"))

extension = Extension(
    "zarrdb._core",
    sources=["src/zarrdb/_core.pyx"],
    include_dirs=include_dirs,
    define_macros=macros,
    libraries=libraries,
    # The engine's rooms (every .pxi, .pxd and .h beside _core.pyx): a change to any rebuilds.
    depends=sorted(
        glob.glob("src/zarrdb/*.pxi") + glob.glob("src/zarrdb/*.pxd") + glob.glob("src/zarrdb/*.h")
    )
    + ([] if SYSTEM_SQLITE else ["vendor/sqlite3/sqlite3.c", "vendor/sqlite3/sqlite3.h"]),
)

setup(
    ext_modules=cythonize(
        [extension],
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "embedsignature": True,
        },
    ),
    cmdclass={"build_ext": BuildExt},
)
