"""Reads what scripts/memcheck.sh left in its log directory and says whether zarrdb's extension
(its Cython code and the SQLite compiled into it) made a memory error. Not part of zarrdb.

    python scripts/memcheck_report.py valgrind LOGDIR
    python scripts/memcheck_report.py asan LOGDIR

Exit status: 0 no error in zarrdb's extension and the run is complete; 1 errors in zarrdb's
extension (or, under ASan, anywhere); 2 the run cannot be trusted (a log that should be there
is missing, empty or cut short; pytest did not finish).

A frame is zarrdb's when it is in the extension module: "(in .../zarrdb/_core...so)" or
"(.../zarrdb/_core...so+0x...)" without debug information, "_core.c:N", "_core.pyx:N",
"sqlite3.c:N" (the amalgamation compiled into it) or a .pxi of the engine with it. Python's
own sqlite3 module uses the system libsqlite3, whose frames do not match. MEMCHECK_OURS
(a regular expression) replaces this rule (the tests of this script use it).

A leak is zarrdb's when zarrdb's C code allocated it, directly or through the C API: a zarrdb
frame comes before the first frame of the interpreter's eval loop. Memory allocated by Python
code that zarrdb called is Python's; one-time allocations of the module's import are not
leaks either. Errors are counted on every thread, the C threads of the extension included
(valgrind heads their records "Thread N:").
"""

from __future__ import annotations

import glob
import os
import re
import sys
from pathlib import Path

OURS = re.compile(
    os.environ.get("MEMCHECK_OURS")
    or r"/zarrdb/_core[^ )]*\.(?:so|pyd)|\b(?:_core\.c|_core\.pyx|sqlite3\.c|_\w+\.pxi):\d+"
)
EVAL = re.compile(r"_PyEval_EvalFrameDefault|_PyEval_Vector|PyEval_EvalCode")
ONCE = re.compile(
    r"__pyx_pymod_exec|PyInit__core|__Pyx_InitStrings|__Pyx_CreateStringTabAndInitStrings"
)
SELF_KILL = re.compile(r" in (?:__pthread_kill\w*|pthread_kill|__GI_raise|raise|kill) ")
VALGRIND_ERRORS = (
    "Invalid ",
    "Conditional jump",
    "Use of uninitialised",
    "Syscall param",
    "Mismatched free",
    "Source and destination overlap",
    "Argument ",
    "Process terminating",
)


def ours(frames: list[str], leak: bool, record: str) -> bool:
    if not any(OURS.search(f) for f in frames):
        return False
    if not leak:
        return True
    if ONCE.search(record):
        return False
    for frame in frames:
        if OURS.search(frame):
            return True
        if EVAL.search(frame):
            return False
    return False


def read_pids(logdir: Path) -> tuple[list[int], list[int], dict[int, int]]:
    """The pytest process(es), the children they forked, and pytest's exit status by pid."""
    main, forked, done = [], [], {}
    path = logdir / "pids"
    if path.exists():
        for line in path.read_text().splitlines():
            word, *rest = line.split()
            if word == "main":
                main.append(int(rest[0]))
            elif word == "fork":
                forked.append(int(rest[0]))
            elif word == "done":
                done[int(rest[0])] = int(rest[1])
    return main, forked, done


def pytest_problems(main: list[int], done: dict[int, int]) -> list[str]:
    """Whether pytest started, finished and passed."""
    problems = [] if main else ["pytest never started (no pid recorded)"]
    for pid in main:
        if pid not in done:
            problems.append(f"pytest (pid {pid}) did not finish")
        elif done[pid] != 0:
            problems.append(f"pytest failed (exit status {done[pid]}); see pytest.log")
    return problems


def valgrind(logdir: Path) -> int:
    main, forked, done = read_pids(logdir)
    problems = pytest_problems(main, done)
    expected = set(main) | set(forked)
    for pid in sorted(expected):
        log = logdir / f"valgrind.{pid}.log"
        what = "pytest" if pid in main else "forked child"
        if not log.exists():
            problems.append(f"no valgrind log of {what} {pid}")
        elif log.stat().st_size == 0:
            problems.append(f"the valgrind log of {what} {pid} is empty")
        elif "ERROR SUMMARY:" not in log.read_text(errors="replace"):
            problems.append(f"the valgrind log of {what} {pid} is cut short (no ERROR SUMMARY)")
    logs = sorted(glob.glob(str(logdir / "valgrind.*.log")))
    execed = len(logs) - len([p for p in expected if (logdir / f"valgrind.{p}.log").exists()])

    found, elsewhere = [], 0
    for log in logs:
        pid = int(Path(log).name.split(".")[1])
        text = Path(log).read_text(errors="replace")
        for record in re.split(r"\n==\d+== \n", text):
            lines = [line for line in record.splitlines() if line.startswith("==")]
            body = [line.split("== ", 1)[-1] for line in lines]
            # "Thread N:" heads a record of any thread but the first (a C thread included).
            heads = [b for b in body if b.strip() and not re.fullmatch(r"Thread \d+:", b)]
            if not heads:
                continue
            head = heads[0]
            leak = "definitely lost in loss record" in head
            if not (head.startswith(VALGRIND_ERRORS) or leak):
                continue
            # A forked child leaves with os._exit and frees nothing by design: what it
            # inherited is not its leak. Its invalid reads and writes count.
            if leak and pid not in main:
                continue
            frames = [b for b in body if " at 0x" in b or " by 0x" in b]
            if ours(frames, leak, record):
                found.append((log, "\n".join(lines[:40])))
            else:
                elsewhere += 1

    print(
        f"memcheck: {len(main)} pytest process(es) and {len(forked)} forked child(ren) checked; "
        f"{max(execed, 0)} child(ren) that exec'd another program not checked"
    )
    if found:
        print(f"memcheck: {len(found)} error(s) in zarrdb's extension:")
        for log, text in found[:10]:
            print(f"--- {log}\n{text}")
    else:
        print(
            f"memcheck: no errors in zarrdb's extension ({elsewhere} error(s) elsewhere: "
            "CPython's own, in the logs)"
        )
    for problem in problems:
        print(f"memcheck: FAILED: {problem}")
    return 2 if problems else (1 if found else 0)


def asan(logdir: Path) -> int:
    main, _, done = read_pids(logdir)
    problems = pytest_problems(main, done)
    errors, leaks, elsewhere = [], [], 0
    logs = sorted(glob.glob(str(logdir / "asan.*")))
    for log in logs:
        text = Path(log).read_text(errors="replace")
        # The sanitizer's own runtime failing ends its process without a report of ours
        # (and, with exitcode=0, silently): what that process had left to do went unchecked.
        for check in re.findall(r"(?m)^AddressSanitizer: CHECK failed: .*$", text):
            problems.append(f"the sanitizer's runtime failed in {log}: {check}")
        # One report per "==PID==ERROR:" line; a leak report lists "Direct leak" records.
        for report in re.split(r"(?m)^(?===\d+==ERROR: )", text):
            if not re.match(r"==\d+==ERROR: ", report):
                continue
            if "LeakSanitizer: detected memory leaks" not in report.splitlines()[0]:
                # A signal the process sent itself (os.kill(os.getpid(), SIGSEGV): the fuzz
                # harness's test of a crashing reader) is not a memory error.
                top = [line for line in report.splitlines() if re.match(r"\s+#[0-3] ", line)]
                if "SEGV" in report.splitlines()[0] and any(SELF_KILL.search(f) for f in top):
                    continue
                errors.append((log, "\n".join(report.splitlines()[:40])))
                continue
            for record in re.split(r"\n(?=(?:Direct|Indirect) leak of )", report):
                if not record.startswith("Direct leak of "):
                    continue
                frames = [line for line in record.splitlines() if re.match(r"\s+#\d+ ", line)]
                if ours(frames, True, record):
                    leaks.append((log, "\n".join(record.splitlines()[:30])))
                else:
                    elsewhere += 1
    print(f"asan: {len(main)} pytest process(es); {len(logs)} report file(s)")
    for log, text in (errors + leaks)[:10]:
        print(f"--- {log}\n{text}")
    if errors:
        print(f"asan: {len(errors)} memory error(s) (each stops its process)")
    if leaks:
        print(f"asan: {len(leaks)} leak(s) allocated by zarrdb's extension")
    if not errors and not leaks:
        print(f"asan: no memory error, no leak of zarrdb's ({elsewhere} leak(s) elsewhere)")
    for problem in problems:
        print(f"asan: FAILED: {problem}")
    return 2 if problems else (1 if errors or leaks else 0)


if __name__ == "__main__":
    tool, logdir = sys.argv[1], Path(sys.argv[2])
    sys.exit({"valgrind": valgrind, "asan": asan}[tool](logdir))
