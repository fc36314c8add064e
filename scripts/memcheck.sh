#!/usr/bin/env bash
# Run the engine's tests (tests/core) once under valgrind memcheck and say whether zarrdb's
# extension (the Cython code and the SQLite compiled into it) made any memory error: invalid
# reads or writes, use of uninitialised values, bad frees, or definitely lost memory.
#
#   scripts/memcheck.sh                      # tests/core, with the venv's Python 3.12
#   PYTHON=.venv/py3.11/bin/python scripts/memcheck.sh tests/core/test_ranges.py
#
# It uses the zarrdb that PYTHON imports (build it first, e.g. `make test`); it builds nothing.
# CPython run under valgrind reports errors of its own (interned strings left at exit, glibc's
# vectorised string compares): scripts/valgrind-python.supp silences the known false
# positives, and every remaining error is put on zarrdb's account only when its stack goes
# through zarrdb's extension module (its Cython code or the SQLite compiled into it) - for a
# leak, only when that code allocated the memory itself, not Python code it called; the others
# are counted as "elsewhere". Exit status 0 when zarrdb has no error, 1 when it has, 2 when the run
# itself failed. The whole of tests/core takes some 8 minutes on two cores (valgrind runs ~10-50x slower);
# pytest failures of timing-sensitive tests are reported but are not memory errors.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

PYTHON=${PYTHON:-.venv/py3.12/bin/python}
if ! command -v valgrind >/dev/null; then
    echo "memcheck: valgrind is not installed (apt-get install valgrind)" >&2
    exit 2
fi
if ! "$PYTHON" -c "import zarrdb._core" 2>/dev/null; then
    echo "memcheck: $PYTHON cannot import zarrdb._core; build zarrdb first (make test)" >&2
    exit 2
fi
if [ $# -eq 0 ]; then
    set -- tests/core
fi

LOGDIR=${MEMCHECK_LOGDIR:-$(mktemp -d /tmp/zarrdb-memcheck.XXXXXX)}
mkdir -p "$LOGDIR"
echo "memcheck: valgrind $(valgrind --version | sed 's/valgrind-//'), $("$PYTHON" -c 'import sys; print(sys.version.split()[0])'), logs in $LOGDIR"
start=$SECONDS
# PYTHONMALLOC=malloc: every Python allocation goes through malloc, which valgrind watches
# (pymalloc's arenas would hide errors and make false ones).
PYTHONMALLOC=malloc valgrind \
    --tool=memcheck \
    --leak-check=full \
    --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite \
    --num-callers=40 \
    --child-silent-after-fork=yes \
    --suppressions="$REPO/scripts/valgrind-python.supp" \
    --log-file="$LOGDIR/valgrind.%p.log" \
    "$PYTHON" -m pytest -p no:cacheprovider -q "$@" >"$LOGDIR/pytest.log" 2>&1
pytest_status=$?
elapsed=$((SECONDS - start))
tail -n 3 "$LOGDIR/pytest.log" | sed 's/^/pytest: /'

"$PYTHON" - "$LOGDIR" "$elapsed" "$pytest_status" <<'PY'
import glob, re, sys

logdir, elapsed, pytest_status = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# A frame in zarrdb's extension module: "(in .../zarrdb/_core...so)" without debug information,
# "(_core.c:123)", "(_core.pyx:45)" or "(sqlite3.c:678)" (the amalgamation compiled into it)
# with it. Python's own sqlite3 module uses the system libsqlite3, whose frames are "(in
# .../libsqlite3.so...)" and do not match.
ZARRDB = re.compile(r"\(in [^)]*/zarrdb/_core[^)]*\)|\((?:_core\.c|_core\.pyx|sqlite3\.c):\d+\)")
# A leak is zarrdb's when zarrdb's C code allocated it, directly or through the C API: a zarrdb
# frame comes before the first frame of the Python interpreter's eval loop. Memory allocated by
# Python code that zarrdb called (e.g. pathlib under os.fspath, whose interned path parts
# CPython 3.12 never frees at exit) is Python's. One-time allocations of the module's import are
# not leaks either.
EVAL = re.compile(r"_PyEval_EvalFrameDefault|_PyEval_Vector|PyEval_EvalCode")
ONCE = re.compile(r"__pyx_pymod_exec|PyInit__core|__Pyx_InitStrings|__Pyx_CreateStringTabAndInitStrings")


def zarrdbs(record: str, leak: bool) -> bool:
    frames = [l for l in record.splitlines() if " at 0x" in l or " by 0x" in l]
    if not any(ZARRDB.search(f) for f in frames):
        return False
    if not leak:
        return True
    if ONCE.search(record):
        return False
    for frame in frames:
        if ZARRDB.search(frame):
            return True
        if EVAL.search(frame):
            return False
    return False


ours, elsewhere, logs = [], 0, sorted(glob.glob(f"{logdir}/valgrind.*.log"))
for log in logs:
    text = open(log, errors="replace").read()
    for record in re.split(r"\n==\d+== \n", text):
        lines = [l for l in record.splitlines() if l.startswith("==")]
        if not lines:
            continue
        head = lines[0].split("== ", 1)[-1]
        is_error = (
            head.startswith(("Invalid ", "Conditional jump", "Use of uninitialised", "Syscall param",
                             "Mismatched free", "Source and destination overlap", "Argument "))
            or "definitely lost in loss record" in head
        )
        if not is_error:
            continue
        if zarrdbs(record, leak="definitely lost" in head):
            ours.append((log, "\n".join(lines[:30])))
        else:
            elsewhere += 1
print(f"memcheck: {len(logs)} process(es), {elapsed // 60} min {elapsed % 60} s")
if ours:
    print(f"memcheck: {len(ours)} error(s) in zarrdb's extension:")
    for log, text in ours[:10]:
        print(f"--- {log}\n{text}")
    sys.exit(1)
print(f"memcheck: no errors in zarrdb's extension ({elsewhere} error(s) elsewhere: CPython's "
      "own, in the logs)")
if pytest_status not in (0, 1):
    print(f"memcheck: pytest itself failed (exit {pytest_status}); see {logdir}/pytest.log")
    sys.exit(2)
PY
