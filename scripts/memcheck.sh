#!/usr/bin/env bash
# Memory checks of zarrdb's extension (its Cython code and the SQLite compiled into it): invalid
# reads and writes, use of uninitialised values, bad frees, leaks, on every thread.
#
#   scripts/memcheck.sh [PYTEST ARGS]          valgrind memcheck over tests/core (default)
#   scripts/memcheck.sh --asan [PYTEST ARGS]   AddressSanitizer over the whole test suite
#
# valgrind: a debug build (ZARRDB_DEBUG=1) in .venv/memcheck-pyX.Y runs the tests under
# valgrind, the pytest process and every child it forks (tests/core/helpers.run_in_child, the
# fork tests), each with its own log. Not checked: children that exec another program (the
# python -c scripts of some tests); the --asan run covers those. A forked child's leaks are
# not counted (it leaves with os._exit and frees nothing by design), its other errors are.
# CPython run under valgrind reports errors of its own: scripts/valgrind-python.supp silences
# known false positives and scripts/memcheck_report.py counts only errors with zarrdb's
# extension on the stack. tests/core took 9 minutes under valgrind on two busy cores, niced
# (it runs Python 20-50 times slower), the debug build 1-2 minutes more; a test that cannot
# pass that slowly is skipped by name, with its reason, in scripts/memcheck_plugin.py (none
# is today).
#
# --asan: an AddressSanitizer build (ZARRDB_SANITIZE=address) in .venv/asan-pyX.Y runs the
# whole default test suite with the ASan runtime preloaded and Python's allocations going
# through malloc, so every process that loads the extension is checked, forked or exec'd
# (the extension cannot load without the runtime), and leaks are checked at each process's
# exit. It took 10 minutes on two busy cores, niced (the build 2-6 minutes more); tests that
# measure memory are skipped, and so are the files that test the project's scripts and
# packaging, which run no code of the extension (scripts/memcheck_plugin.py).
#
# Fails (non-zero) on a memory error in zarrdb's extension (1), and when the run cannot be
# trusted (2): a log that should be there is missing, empty or cut short, pytest failed, or
# (--asan) the sanitizer does not report a deliberate overflow. PYTHON=3.12 (or a path) picks
# the interpreter as scripts/find_python.sh does; MEMCHECK_PYTHON=/path/to/python uses that
# environment as it is (nothing built); MEMCHECK_LOGDIR keeps the logs there.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
# A test build, as scripts/dev.sh makes: the power-loss simulator compiled in (setup.py).
export ZARRDB_TEST_VFS=1

MODE=valgrind
if [ "${1:-}" = --asan ]; then
    MODE=asan
    shift
fi

say() { echo "memcheck: $*"; }
die() { echo "memcheck: $*" >&2; exit 2; }

# A virtual environment with zarrdb built by $1 (an environment assignment) from a copy of the
# checkout, rebuilt when the sources change. Prints its python.
build_env() {
    local flag=$1 name=$2 py ver venv stamp digest work
    py=$(scripts/find_python.sh) || exit 2
    ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    venv=$REPO/.venv/$name-py$ver
    digest=$( (echo "$flag"; cat setup.py pyproject.toml vendor/sqlite3/VERSION $(find src \
        -type f \( -name '*.py' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' \
        -o -name '*.h' -o -name '*.pyi' \) | sort)) | sha256sum | cut -c1-16)
    stamp=$venv/zarrdb-$digest.stamp
    if [ ! -f "$stamp" ]; then
        echo "memcheck: building zarrdb ($flag) into $venv" >&2
        [ -x "$venv/bin/python" ] || "$py" -m venv "$venv" >&2 || exit 2
        work=$(mktemp -d "${TMPDIR:-/tmp}/zarrdb-memcheck-build.XXXXXX")
        # A copy: setup.py writes build/ and _core.c beside the sources, which the other
        # builds of this checkout must not pick up (nor may this copy read them while another
        # build writes them: .ci/run builds the 3.12 environment at the same time).
        tar -C "$REPO" -cf - --exclude=src/zarrdb/_core.c --exclude='src/zarrdb/*.so' \
            --exclude='*.egg-info' --exclude=__pycache__ \
            setup.py pyproject.toml README.md LICENSE MANIFEST.in src vendor \
            | tar -C "$work" -xf - || die "copying the checkout failed"
        rm -rf "$work"/src/zarrdb/*.so "$work"/src/zarrdb/_core.c "$work"/src/*.egg-info
        (
            "$venv/bin/python" -m pip install --quiet --upgrade pip
            # zarrdb built once, as a wheel (installed from the directory with its extra,
            # pip would build it a second time), installed in place of any earlier build,
            # then what the tests need
            env "$flag" "$venv/bin/python" -m pip wheel --quiet --no-deps \
                --wheel-dir "$work/wheel" "$work" &&
                wheel=$(echo "$work"/wheel/zarrdb-*.whl) &&
                "$venv/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheel" &&
                "$venv/bin/python" -m pip install --quiet "$wheel[test]"
        ) 2>&1 | { grep -v "^WARNING: Location '" || true; } >&2
        local status=${PIPESTATUS[0]}
        rm -rf "$work"
        [ "$status" -eq 0 ] || die "building zarrdb ($flag) failed"
        rm -f "$venv"/zarrdb-*.stamp
        touch "$stamp"
    fi
    echo "$venv/bin/python"
}

if [ -n "${MEMCHECK_PYTHON:-}" ]; then
    PY=$MEMCHECK_PYTHON
elif [ "$MODE" = valgrind ]; then
    PY=$(build_env ZARRDB_DEBUG=1 memcheck) || exit 2
else
    PY=$(build_env ZARRDB_SANITIZE=address asan) || exit 2
fi
"$PY" -c "import zarrdb._core" 2>/dev/null || [ "$MODE" = asan ] \
    || die "$PY cannot import zarrdb._core"

LOGDIR=${MEMCHECK_LOGDIR:-$(mktemp -d "${TMPDIR:-/tmp}/zarrdb-memcheck.XXXXXX")}
mkdir -p "$LOGDIR"
rm -f "$LOGDIR"/pids "$LOGDIR"/valgrind.*.log "$LOGDIR"/asan.*
export MEMCHECK_LOGDIR=$LOGDIR MEMCHECK_MODE=$MODE
export PYTHONPATH=$REPO/scripts${PYTHONPATH:+:$PYTHONPATH}
# Every Python allocation goes through malloc, which the checker watches (pymalloc's arenas
# would hide errors in small objects, and make false ones under valgrind).
export PYTHONMALLOC=malloc
PYTEST=("$PY" -m pytest -p memcheck_plugin -p no:cacheprovider -q)
start=$SECONDS

if [ "$MODE" = valgrind ]; then
    VALGRIND=${VALGRIND:-valgrind}
    command -v "$VALGRIND" >/dev/null || die "valgrind is not installed (apt-get install valgrind)"
    [ $# -gt 0 ] || set -- tests/core
    say "valgrind $("$VALGRIND" --version | sed 's/valgrind-//'), Python $("$PY" -c 'import sys; print(sys.version.split()[0])'), logs in $LOGDIR"
    "$VALGRIND" \
        --tool=memcheck \
        --leak-check=full \
        --show-leak-kinds=definite \
        --errors-for-leak-kinds=definite \
        --num-callers=40 \
        --child-silent-after-fork=no \
        --trace-children=no \
        --suppressions="$REPO/scripts/valgrind-python.supp" \
        --log-file="$LOGDIR/valgrind.%p.log" \
        "${PYTEST[@]}" "$@" >"$LOGDIR/pytest.log" 2>&1
else
    # The runtime the extension was linked against, loaded first (Python itself is not
    # instrumented).
    # (found without importing zarrdb, which loads the extension)
    # (this interpreter's build: extensions of other Pythons may sit beside it)
    CORE=$("$PY" -c 'import os, importlib.machinery as m, importlib.util as u
d = u.find_spec("zarrdb").submodule_search_locations[0]
print(next((os.path.join(d, "_core" + s) for s in m.EXTENSION_SUFFIXES
            if os.path.exists(os.path.join(d, "_core" + s))), ""))') \
        && [ -f "$CORE" ] || die "$PY has no zarrdb._core"
    RUNTIME=$(ldd "$CORE" | awk '/libasan|libclang_rt.asan/ {print $3; exit}')
    [ -n "$RUNTIME" ] || die "$CORE is not linked against an AddressSanitizer runtime"
    # C++'s runtime loaded up front too: the sanitizer resolves its interceptor of C++ throws
    # (__cxa_throw) once, at start-up, and a C++ extension that throws later (matplotlib's
    # ft2font does at import) would otherwise kill its process with "CHECK failed".
    STDCXX=$(ldconfig -p 2>/dev/null \
        | awk -v m="$(uname -m | tr _ -)" '/libstdc\+\+\.so\.6 / && $0 ~ m {print $NF; exit}')
    [ -n "$STDCXX" ] || die "libstdc++.so.6 not found (needed beside the sanitizer's runtime)"
    export LD_PRELOAD="$RUNTIME $STDCXX"
    # Leaks are checked at each process's exit; a report goes to asan.PID in the log
    # directory; the first error stops its process. The verdict comes from those reports:
    # CPython itself leaks at exit, so the sanitizer's exit status (for leaks and errors
    # alike) is left at 0, or every Python child the tests check would "fail".
    export ASAN_OPTIONS=detect_leaks=1:log_path=$LOGDIR/asan:halt_on_error=1:detect_odr_violation=0
    export LSAN_OPTIONS=exitcode=0
    # The control: the runtime must report an overflow that a plain program makes.
    "$PY" -c 'import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
ctypes.memmove(libc.malloc(8), b"x" * 64, 64)' >/dev/null 2>&1
    grep -qs "heap-buffer-overflow" "$LOGDIR"/asan.* \
        || die "AddressSanitizer ($RUNTIME) did not report a deliberate overflow"
    rm -f "$LOGDIR"/asan.*
    [ $# -gt 0 ] || set -- tests
    say "AddressSanitizer ($RUNTIME), Python $("$PY" -c 'import sys; print(sys.version.split()[0])'), logs in $LOGDIR"
    "${PYTEST[@]}" "$@" >"$LOGDIR/pytest.log" 2>&1
fi
elapsed=$((SECONDS - start))
tail -n 3 "$LOGDIR/pytest.log" | sed 's/^/pytest: /'
say "$((elapsed / 60)) min $((elapsed % 60)) s"
"$PY" "$REPO/scripts/memcheck_report.py" "$MODE" "$LOGDIR"
