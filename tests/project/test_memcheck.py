"""scripts/memcheck.sh and scripts/memcheck_report.py decide from what the checker really wrote.

A stand-in valgrind (a script that runs the program without checking it and writes logs as told)
shows that a missing, empty or cut-short log, a forked child without a log, an error on a
thread other than the first and a failing pytest each fail the check. Real AddressSanitizer
reports (from gcc's runtime, on a small C library made here) and, in the slow run, real
valgrind on a C thread show that the reports are read as the tools write them. The programs
checked are small pytest files made here; MEMCHECK_OURS tells the report which frames to count.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "memcheck.sh"
REPORT = ROOT / "scripts" / "memcheck_report.py"
PLUGIN = ROOT / "scripts" / "memcheck_plugin.py"

pytestmark = [
    pytest.mark.skipif(not SCRIPT.exists(), reason="scripts/ is not beside the tests"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="valgrind and ASan on Linux"),
]

TARGET = """
import os

def test_forks_a_child():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0

def test_passes():
    assert True
"""

# Runs the program (the arguments after valgrind's options) without checking it, then writes a
# log for each process the memcheck plugin recorded, as STANDIN_MODE says.
STAND_IN = """#!{python}
import os, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("valgrind-3.99.0")
    sys.exit(0)
pattern = next(a.split("=", 1)[1] for a in args if a.startswith("--log-file="))
program = [a for a in args if not a.startswith("--")]
status = subprocess.run(program).returncode
mode = os.environ["STANDIN_MODE"]
pids = [line.split() for line in open(os.path.join(os.environ["MEMCHECK_LOGDIR"], "pids"))]
complete = "==1== Memcheck, a memory error detector\\n==1== \\n==1== ERROR SUMMARY: 0 errors\\n"
thread_error = (
    "==1== Memcheck, a memory error detector\\n==1== \\n"
    "==1== Thread 2:\\n"
    "==1== Invalid read of size 4\\n"
    "==1==    at 0x4849F3B: sqlite3VdbeExec "
    "(in /venv/site-packages/zarrdb/_core.cpython-312-x86_64-linux-gnu.so)\\n"
    "==1==    by 0x4849F3C: start_thread (pthread_create.c:442)\\n"
    "==1==  Address 0x5a1b040 is 0 bytes after a block of size 16 alloc'd\\n"
    "==1== \\n==1== ERROR SUMMARY: 1 errors\\n"
)
for word, pid, *_ in pids:
    if word not in ("main", "fork"):
        continue
    if mode == "none" or (mode == "no-child-log" and word == "fork"):
        continue
    text = {{"empty": "", "cut": complete.split("==1== ERROR")[0]}}.get(mode, complete)
    if mode == "thread-error" and word == "main":
        text = thread_error
    with open(pattern.replace("%p", pid), "w") as f:
        f.write(text)
sys.exit(status)
"""


def memcheck(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """scripts/memcheck.sh ARGS with this test's Python (nothing built) and the environment
    variables given."""
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "MEMCHECK_PYTHON": sys.executable, **env},
        cwd=cwd,
        timeout=900,
    )


@pytest.fixture
def run_memcheck(tmp_path):
    """Runs scripts/memcheck.sh on this test's Python (nothing built) over a small pytest file,
    with the stand-in valgrind in the given mode; (exit status, output)."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "test_target.py").write_text(TARGET)
    valgrind = tmp_path / "valgrind"
    valgrind.write_text(STAND_IN.format(python=sys.executable))
    valgrind.chmod(0o755)

    def run(mode: str, extra_test: str = "") -> tuple[int, str]:
        if extra_test:
            (target / "test_extra.py").write_text(extra_test)
        out = memcheck(
            str(target),
            MEMCHECK_LOGDIR=str(tmp_path / f"logs-{mode}"),
            VALGRIND=str(valgrind),
            STANDIN_MODE=mode,
        )
        return out.returncode, out.stdout + out.stderr

    return run


def test_complete_logs_of_pytest_and_its_forked_child_pass(run_memcheck):
    status, out = run_memcheck("complete")
    assert status == 0, out
    assert "1 pytest process(es) and 1 forked child(ren) checked" in out
    assert "no errors in zarrdb's extension" in out


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("none", "no valgrind log of pytest"),
        ("empty", "the valgrind log of pytest"),
        ("cut", "is cut short (no ERROR SUMMARY)"),
        ("no-child-log", "no valgrind log of forked child"),
    ],
)
def test_a_log_missing_empty_or_cut_short_fails(run_memcheck, mode, message):
    status, out = run_memcheck(mode)
    assert status == 2, out
    assert message in out and "FAILED" in out


def test_an_error_on_another_thread_is_counted(run_memcheck):
    status, out = run_memcheck("thread-error")
    assert status == 1, out
    assert "1 error(s) in zarrdb's extension" in out and "Thread 2:" in out


def test_a_failing_test_fails_the_check(run_memcheck):
    status, out = run_memcheck("complete", extra_test="def test_fails():\n    assert False\n")
    assert status == 2, out
    assert "pytest failed (exit status 1)" in out


def test_every_test_the_plugin_skips_exists():
    tree = ast.parse(PLUGIN.read_text())
    listed = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
            listed += [
                k.value
                for k in node.value.keys
                if isinstance(k, ast.Constant) and "::" in str(k.value)
            ]
    if not listed:
        pytest.skip("the plugin skips no test")
    files = sorted({name.split("::")[0] for name in listed})
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    collected = {line.split("[")[0] for line in out.stdout.splitlines()} | set(
        out.stdout.splitlines()
    )
    assert [name for name in listed if name not in collected] == []


def test_every_file_the_plugin_skips_exists():
    tree = ast.parse(PLUGIN.read_text())
    files = [
        k.value
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict)
        for k in node.value.keys
        if isinstance(k, ast.Constant) and str(k.value).endswith(".py")
    ]
    assert files, "the plugin lists no file"
    assert [name for name in files if not (ROOT / name).is_file()] == []


# --- AddressSanitizer -------------------------------------------------------------------------


def _asan_runtime() -> str | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    path = subprocess.run(
        [gcc, "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


needs_asan = pytest.mark.skipif(_asan_runtime() is None, reason="needs gcc's libasan")

LEAKY_C = """
#include <stdlib.h>
#include <string.h>
void leak(void) { char *p = malloc(100); memset(p, 1, 100); }
"""


def _asan_run(tmp_path: Path, code: str, preload: str = "") -> Path:
    """Runs Python code with gcc's ASan runtime preloaded (and `preload` after it), as
    memcheck.sh --asan does; the log directory, with the pids file the plugin would have
    written."""
    logdir = tmp_path / "asan-logs"
    logdir.mkdir()
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=f"{_asan_runtime()} {preload}".strip(),
        PYTHONMALLOC="malloc",
        ASAN_OPTIONS=f"detect_leaks=1:log_path={logdir}/asan:halt_on_error=1",
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL)
    proc.wait(timeout=120)
    (logdir / "pids").write_text(f"main {proc.pid}\ndone {proc.pid} 0\n")
    return logdir


def _report(tool: str, logdir: Path, ours: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPORT), tool, str(logdir)],
        capture_output=True,
        text=True,
        env={**os.environ, "MEMCHECK_OURS": ours},
        timeout=60,
    )


@needs_asan
def test_an_asan_report_of_an_overflow_fails(tmp_path):
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.malloc.restype = ctypes.c_void_p\n"
        "ctypes.memmove(libc.malloc(8), b'x' * 64, 64)\n"
    )
    out = _report("asan", _asan_run(tmp_path, code), ours=r"no-such-frame")
    assert out.returncode == 1, out.stdout
    assert "heap-buffer-overflow" in out.stdout and "1 memory error(s)" in out.stdout


@needs_asan
def test_a_leak_of_ours_found_by_leaksanitizer_fails_and_others_do_not(tmp_path):
    source = tmp_path / "leaky.c"
    source.write_text(LEAKY_C)
    lib = tmp_path / "libleaky.so"
    subprocess.run(["gcc", "-O0", "-g", "-shared", "-fPIC", "-o", lib, source], check=True)
    logdir = _asan_run(tmp_path, f"import ctypes\nctypes.CDLL({str(lib)!r}).leak()\n")
    out = _report("asan", logdir, ours=r"leaky\.c:\d+")
    assert out.returncode == 1, out.stdout
    assert "1 leak(s) allocated by zarrdb's extension" in out.stdout and "leaky.c" in out.stdout
    out = _report("asan", logdir, ours=r"no-such-frame")
    assert out.returncode == 0, out.stdout
    assert "no memory error, no leak of zarrdb's" in out.stdout


THROWER_CC = """
#include <stdexcept>
extern "C" int throw_and_catch(void) {
    try { throw std::runtime_error("caught"); } catch (const std::exception &) { return 7; }
    return 0;
}
"""


@needs_asan
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_cxx_throw_under_the_sanitizer_needs_cxx_runtime_preloaded(tmp_path):
    """A C++ extension throwing in a process that started without C++'s runtime (matplotlib's
    ft2font at import) kills it in the sanitizer's runtime ("CHECK failed"): the report calls
    such a run untrusted, and with libstdc++ preloaded beside the sanitizer, as memcheck.sh
    does, the throw works."""
    source = tmp_path / "thrower.cc"
    source.write_text(THROWER_CC)
    lib = tmp_path / "libthrower.so"
    subprocess.run(["g++", "-O0", "-shared", "-fPIC", "-o", lib, source], check=True)
    caught = tmp_path / "caught"
    code = (
        f"import ctypes, pathlib\ncaught = ctypes.CDLL({str(lib)!r}).throw_and_catch()\n"
        f"pathlib.Path({str(caught)!r}).write_text(str(caught))\n"
    )
    alone = tmp_path / "alone"
    alone.mkdir()
    out = _report("asan", _asan_run(alone, code), ours=r"no-such-frame")
    assert out.returncode == 2, out.stdout
    assert "the sanitizer's runtime failed" in out.stdout and "CHECK failed" in out.stdout
    assert not caught.exists()
    assert 'export LD_PRELOAD="$RUNTIME $STDCXX"' in SCRIPT.read_text()
    both = tmp_path / "both"
    both.mkdir()
    out = _report("asan", _asan_run(both, code, preload="libstdc++.so.6"), ours=r"no-such-frame")
    assert out.returncode == 0, out.stdout
    assert caught.read_text() == "7"


def test_asan_mode_refuses_an_extension_built_without_it(tmp_path):
    from zarrdb import _core

    if b"__asan_init" in Path(_core.__file__).read_bytes():
        pytest.skip("this environment's extension is an ASan build")
    out = memcheck("--asan", "tests/project/test_build.py", cwd=ROOT, MEMCHECK_LOGDIR=str(tmp_path))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "is not linked against an AddressSanitizer runtime" in out.stderr


# --- real valgrind -------------------------------------------------------------------------------

THREAD_BUG_C = """
#include <pthread.h>
#include <stdlib.h>
static void *work(void *arg) {
    int *p = malloc(4 * sizeof(int));
    volatile int x = p[4];
    (void)x;
    free(p);
    return NULL;
}
int run(void) {
    pthread_t t;
    pthread_create(&t, NULL, work, NULL);
    return pthread_join(t, NULL);
}
"""


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None, reason="needs valgrind, gcc"
)
def test_real_valgrind_finds_an_invalid_read_on_a_c_thread(tmp_path):
    """About a minute: pytest under valgrind, calling a C function that starts a thread which
    reads past a malloc'd block."""
    source = tmp_path / "threadbug.c"
    source.write_text(THREAD_BUG_C)
    lib = tmp_path / "libthreadbug.so"
    subprocess.run(
        ["gcc", "-O0", "-g", "-shared", "-fPIC", "-pthread", "-o", lib, source], check=True
    )
    target = tmp_path / "target"
    target.mkdir()
    (target / "test_c_thread.py").write_text(
        textwrap.dedent(
            f"""
            import ctypes
            def test_c_thread():
                assert ctypes.CDLL({str(lib)!r}).run() == 0
            """
        )
    )
    out = memcheck(
        str(target), MEMCHECK_LOGDIR=str(tmp_path / "logs"), MEMCHECK_OURS=r"threadbug\.c:\d+"
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 error(s) in zarrdb's extension" in out.stdout
    assert "Invalid read of size 4" in out.stdout and "threadbug.c" in out.stdout
