#!/usr/bin/env bash
# Sets up a virtual environment for one Python, builds zarrdb into it, and runs a command.
#
#   scripts/dev.sh demo [ARGS]     the main job: a small example file, then `zarrdb bench ARGS`
#   scripts/dev.sh test [ARGS]     the test suite (pytest ARGS)
#   scripts/dev.sh bench [ARGS]    the pytest-benchmark suite in benchmarks/
#   scripts/dev.sh shell           a shell with the environment activated
#
# PYTHON=/path/to/python3 picks the interpreter (otherwise scripts/find_python.sh does).
# The environment lives in .venv/pyX.Y and is rebuilt only when the build inputs change.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=$(scripts/find_python.sh)
VER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV=${ZARRDB_VENV:-.venv/py$VER}

setup() {
    local extras=$1
    if [ ! -x "$VENV/bin/python" ]; then
        echo "zarrdb: creating $VENV" >&2
        "$PY" -m venv "$VENV"
    fi
    local stamp="$VENV/zarrdb-$extras.stamp"
    local changed=""
    if [ -f "$stamp" ]; then
        changed=$(find setup.py pyproject.toml src vendor -newer "$stamp" -type f \
            \( -name '*.pyx' -o -name '*.pxi' -o -name '*.pxd' -o -name '*.h' -o -name sqlite3.c \
               -o -name setup.py -o -name pyproject.toml \) | head -n 1)
    fi
    if [ ! -f "$stamp" ] || [ -n "$changed" ]; then
        echo "zarrdb: building and installing zarrdb[$extras] into $VENV" >&2
        "$VENV/bin/python" -m pip install --quiet --upgrade pip "setuptools>=77" "Cython>=3.0.10"
        "$VENV/bin/python" -m pip install --quiet --no-build-isolation -e ".[$extras]"
        touch "$stamp"
    fi
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    demo)
        setup bench
        "$VENV/bin/python" -m zarrdb.demo
        exec "$VENV/bin/python" -m zarrdb bench "$@"
        ;;
    test)
        setup "test,dask"
        exec "$VENV/bin/python" -m pytest "$@"
        ;;
    bench)
        setup "test,bench"
        exec "$VENV/bin/python" -m pytest benchmarks --benchmark-enable "$@"
        ;;
    shell)
        setup "test,bench"
        exec bash --rcfile <(echo "source '$VENV/bin/activate'")
        ;;
    *)
        echo "usage: scripts/dev.sh demo|test|bench|shell [ARGS]" >&2
        exit 2
        ;;
esac
