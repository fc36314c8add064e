#!/usr/bin/env bash
# Sets up a virtual environment for one Python, builds zarrdb into it, and runs a command.
#
#   scripts/dev.sh demo [ARGS]     the main job: a small example file, then `zarrdb bench ARGS`
#                                  (the quick default, with a plot; `--full` runs everything)
#   scripts/dev.sh test [ARGS]     the test suite (pytest ARGS)
#   scripts/dev.sh bench [ARGS]    the pytest-benchmark suites in benchmarks/
#   scripts/dev.sh docs [ARGS]     the documentation site: `mkdocs build --strict` into site/
#                                  (`docs serve` serves it with live reload instead)
#   scripts/dev.sh docs-bench [ARGS]
#                                  the benchmark page's figures: `zarrdb bench ARGS` (default
#                                  `--full`) writing docs/benchmarks/results.{md,json} and bench.png
#   scripts/dev.sh typecheck [ARGS]
#                                  the type checks: mypy ARGS (strict over src/zarrdb, settings
#                                  in pyproject.toml), then mypy's stubtest of the compiled engine
#                                  against src/zarrdb/_core.pyi (scripts/stubtest_allowlist.txt)
#   scripts/dev.sh shell           a shell with the environment activated
#   scripts/dev.sh build [CMD]     only the environment, the build and CMD's extras (default
#                                  test), e.g. so that two commands can then run at once
#   scripts/dev.sh plan CMD        what CMD would use (environment, build, extras), doing nothing
#
# PYTHON=/path/to/python3 picks the interpreter (otherwise scripts/find_python.sh does).
# One environment per interpreter, .venv/pyX.Y, with one build of zarrdb in it: the extension
# is compiled again only when its inputs change. Each command adds the optional dependencies
# it needs (the extras of pyproject.toml) to that environment without rebuilding zarrdb.
set -euo pipefail
cd "$(dirname "$0")/.."

# A test build: the power-loss simulator and the pause points compiled in (setup.py), and the
# tests expect them.
export ZARRDB_TEST_VFS=1

PY=$(scripts/find_python.sh)
VER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV=${ZARRDB_VENV:-.venv/py$VER}

build() {
    if [ ! -x "$VENV/bin/python" ]; then
        echo "zarrdb: creating $VENV" >&2
        "$PY" -m venv "$VENV"
    fi
    local stamp="$VENV/zarrdb-build.stamp"
    local changed=""
    if [ -f "$stamp" ]; then
        changed=$(find setup.py pyproject.toml src vendor -newer "$stamp" -type f \
            \( -name '*.pyx' -o -name '*.pxi' -o -name '*.pxd' -o -name '*.h' -o -name sqlite3.c \
               -o -name setup.py -o -name pyproject.toml \) | head -n 1)
    fi
    if [ ! -f "$stamp" ] || [ -n "$changed" ]; then
        echo "zarrdb: building zarrdb into $VENV" >&2
        "$VENV/bin/python" -m pip install --quiet --upgrade pip "setuptools>=77" "Cython>=3.1.4"
        "$VENV/bin/python" -m pip install --quiet --no-build-isolation -e .
        touch "$stamp"
    fi
}

# extras NAME[,NAME...]: install the requirements of those extras (read from pyproject.toml).
extras() {
    local names=$1
    local stamp="$VENV/zarrdb-extras-${names//,/-}.stamp"
    if [ -f "$stamp" ] && [ ! pyproject.toml -nt "$stamp" ]; then
        return
    fi
    echo "zarrdb: installing the $names dependencies into $VENV" >&2
    local requirements="$VENV/requirements-${names//,/-}.txt"
    "$VENV/bin/python" - "$names" >"$requirements" <<'EOF'
import sys, tomllib
with open("pyproject.toml", "rb") as f:
    extras = tomllib.load(f)["project"]["optional-dependencies"]
for name in sys.argv[1].split(","):
    print("\n".join(extras[name]))
EOF
    "$VENV/bin/python" -m pip install --quiet -r "$requirements"
    touch "$stamp"
}

# The extras each command installs beside the one build.
extras_of() {
    case "$1" in
        demo) echo bench,plot ;;
        test) echo test,dask,plot ;;
        bench) echo test,bench ;;
        docs) echo docs ;;
        docs-bench) echo bench,plot ;;
        typecheck) echo test,typecheck ;;
        shell) echo test,bench,plot ;;
        build) extras_of "${2:-test}" ;;
        *) return 1 ;;
    esac
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    plan)
        wanted=$(extras_of "${1:-}") || { echo "usage: scripts/dev.sh plan demo|test|bench|docs|docs-bench|typecheck|shell" >&2; exit 2; }
        echo "environment $VENV"
        echo "build $VENV/zarrdb-build.stamp"
        echo "extras $wanted"
        exit 0
        ;;
    demo)
        build
        extras "$(extras_of demo)"
        mkdir -p bench-results
        "$VENV/bin/python" -m zarrdb.demo
        exec "$VENV/bin/python" -m zarrdb bench --plot bench-results/bench.png "$@"
        ;;
    test)
        build
        extras "$(extras_of test)"
        exec "$VENV/bin/python" -m pytest "$@"
        ;;
    bench)
        build
        extras "$(extras_of bench)"
        exec "$VENV/bin/python" -m pytest benchmarks --benchmark-enable "$@"
        ;;
    docs)
        # The command-line reference is generated from zarrdb's parser, so zarrdb is built first.
        build
        extras "$(extras_of docs)"
        # (Material's notice about its end of life and its successor, printed at every build)
        export NO_MKDOCS_2_WARNING=1
        if [ "${1:-}" = serve ]; then
            shift
            exec "$VENV/bin/python" -m mkdocs serve "$@"
        fi
        exec "$VENV/bin/python" -m mkdocs build --strict "$@"
        ;;
    docs-bench)
        # Run on an idle machine: the page shows these figures as they are. Without ARGS the
        # complete benchmark (about half an hour on two cores); `make docs` then rebuilds the site.
        build
        extras "$(extras_of docs-bench)"
        [ $# -gt 0 ] || set -- --full
        exec "$VENV/bin/python" -m zarrdb bench "$@" \
            --markdown docs/benchmarks/results.md \
            --json docs/benchmarks/results.json \
            --plot docs/benchmarks/bench.png
        ;;
    typecheck)
        # mypy reads the packages zarrdb imports (those of the test extra) for their types.
        build
        extras "$(extras_of typecheck)"
        "$VENV/bin/python" -m mypy "$@"
        exec "$VENV/bin/python" -m mypy.stubtest zarrdb._core \
            --allowlist scripts/stubtest_allowlist.txt
        ;;
    build)
        wanted=$(extras_of build "${1:-test}") || { echo "usage: scripts/dev.sh build [demo|test|bench|docs|docs-bench|typecheck|shell]" >&2; exit 2; }
        build
        extras "$wanted"
        ;;
    shell)
        build
        extras "$(extras_of shell)"
        exec bash --rcfile <(echo "source '$VENV/bin/activate'")
        ;;
    *)
        echo "usage: scripts/dev.sh demo|test|bench|docs|docs-bench|typecheck|shell [ARGS], build [CMD] or plan CMD" >&2
        exit 2
        ;;
esac
