#!/bin/sh
# Prints the path of a CPython 3.11-3.13 interpreter to use, and says on stderr which it chose.
#
# PYTHON=3.11 (or 3.12, 3.13) asks for that version, found as below.
# Order: $PYTHON if set (and then nothing else); otherwise 3.12 or 3.13 (on PATH, then under
# pyenv), then python3.11 or python3 on PATH, then 3.11 under pyenv. 3.12+ comes first because
# it pairs with the newest zarr and can run the pure-Python reference implementation.
set -u

supported() {
    "$1" -c 'import sys; sys.exit(0 if sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] <= (3, 13) else 1)' >/dev/null 2>&1
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
    3.1[123])  # a version: look for that one only
        minor=$PYTHON
        from_path "python$minor"
        from_pyenv "$minor"
        echo "zarrdb: no working CPython $minor found" >&2
        exit 1
        ;;
esac

if [ -n "${PYTHON:-}" ]; then
    supported "$PYTHON" && choose "$PYTHON"
    echo "zarrdb: PYTHON=$PYTHON is not a working CPython 3.11, 3.12 or 3.13" >&2
    exit 1
fi

from_path python3.12 python3.13
from_pyenv 3.12 3.13
from_path python3.11 python3
from_pyenv 3.11

echo "zarrdb: no CPython 3.11, 3.12 or 3.13 found; install one or set PYTHON=/path/to/python3" >&2
exit 1
