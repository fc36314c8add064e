#!/bin/sh
# Prints the path of a CPython 3.11-3.14 interpreter to use, and says on stderr which it chose.
#
# PYTHON=3.11 (or 3.12, 3.13, 3.14) asks for that version, found as below.
# Order: $PYTHON if set (and then nothing else); otherwise 3.12 or 3.13 (on PATH, then under
# pyenv), then 3.14 (likewise), then python3.11 or python3 on PATH, then 3.11 under pyenv.
# 3.12+ comes first because it pairs with the newest zarr and can run the pure-Python reference
# implementation; 3.12 and 3.13 before 3.14 because they are what the benchmarks were measured
# with; a machine whose only Python is 3.14 (or whose python3 is 3.14) gets 3.14.
set -u

# A free-threaded build (3.13t, 3.14t) is not one: zarrdb's extension is not declared
# free-threading compatible, and its thread tests have not run under one.
supported() {
    "$1" -c 'import sys, sysconfig; sys.exit(0 if sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] <= (3, 14) and not sysconfig.get_config_var("Py_GIL_DISABLED") else 1)' >/dev/null 2>&1
}

choose() {
    path=$("$1" -c 'import sys; print(sys.executable)')
    version=$("$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
    echo "zarrdb: using Python $version at $path" >&2
    echo "$path"
    exit 0
}

from_path() {
    for candidate in "$@"; do
        if command -v "$candidate" >/dev/null 2>&1 && supported "$candidate"; then
            choose "$candidate"
        fi
    done
}

from_pyenv() {
    command -v pyenv >/dev/null 2>&1 || return 0
    root=$(pyenv root)
    for minor in "$@"; do
        for candidate in $(ls -d "$root"/versions/"$minor".*/bin/python3 2>/dev/null | sort -r -V); do
            supported "$candidate" && choose "$candidate"
        done
    done
}

case "${PYTHON:-}" in
    3.1[1234])  # a version: look for that one only
        minor=$PYTHON
        from_path "python$minor"
        from_pyenv "$minor"
        echo "zarrdb: no working CPython $minor found" >&2
        exit 1
        ;;
esac

if [ -n "${PYTHON:-}" ]; then
    supported "$PYTHON" && choose "$PYTHON"
    echo "zarrdb: PYTHON=$PYTHON is not a working CPython 3.11, 3.12, 3.13 or 3.14" >&2
    exit 1
fi

from_path python3.12 python3.13
from_pyenv 3.12 3.13
from_path python3.14
from_pyenv 3.14
from_path python3.11 python3
from_pyenv 3.11

echo "zarrdb: no CPython 3.11, 3.12, 3.13 or 3.14 found; install one or set PYTHON=/path/to/python3" >&2
exit 1
