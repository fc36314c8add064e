"""scripts/find_python.sh, which picks the interpreter of `make test` and scripts/dev.sh, run
against stand-in interpreters: small shell scripts that run this test's own Python told to
report another version (and, for one, a free-threaded build), on a PATH that holds nothing else.
No CPython 3.14 needs to be installed for these."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "find_python.sh"

pytestmark = [
    pytest.mark.skipif(not SCRIPT.exists(), reason="scripts/ is not beside the tests"),
    pytest.mark.skipif(
        sys.platform == "win32" or shutil.which("sh") is None, reason="a POSIX shell script"
    ),
]

# Runs the -c code it is given in this Python, after making sys.version_info, sys.executable
# and (for a free-threaded stand-in) sysconfig's Py_GIL_DISABLED say what the stand-in is.
STAND_IN = """#!/bin/sh
[ "$1" = -c ] || exit 2
exec {python} -c '
import sys, sysconfig
sys.version_info = ({major}, {minor}, {micro}, "final", 0)
sys.executable = "{path}"
if {free_threaded!r}:
    real = sysconfig.get_config_var
    sysconfig.get_config_var = lambda name: 1 if name == "Py_GIL_DISABLED" else real(name)
code = sys.argv[1]
del sys.argv[1]
exec(compile(code, "<string>", "exec"))
' "$2"
"""


def stand_in(path: Path, version: tuple[int, int, int], free_threaded: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        STAND_IN.format(
            python=sys.executable,
            major=version[0],
            minor=version[1],
            micro=version[2],
            path=path,
            free_threaded=free_threaded,
        )
    )
    path.chmod(0o755)
    return path


@pytest.fixture
def machine(tmp_path):
    """A bin/ directory that is the whole PATH: the tools the script uses besides the shell's
    built-ins (ls, sort), and whatever interpreters a test puts there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ls", "sort"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return bin_dir


def find_python(bin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": str(bin_dir), "HOME": str(bin_dir.parent), **env}
    return subprocess.run(
        ["/bin/sh", str(SCRIPT)], capture_output=True, text=True, env=environment, timeout=60
    )


def chosen(bin_dir: Path, **env: str) -> str:
    out = find_python(bin_dir, **env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1, out.stdout
    return out.stdout.strip()


def test_the_stand_in_reports_the_version_it_is_given(machine):
    fake = stand_in(machine / "python3.14", (3, 14, 2))
    out = subprocess.run(
        [str(fake), "-c", "import sys; print(sys.version_info[:3], sys.executable)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"(3, 14, 2) {fake}"


def test_picks_314_when_it_is_the_only_interpreter(machine):
    fake = stand_in(machine / "python3.14", (3, 14, 2))
    out = find_python(machine)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(fake)
    assert "using Python 3.14.2" in out.stderr


def test_picks_a_python3_that_is_314(machine):
    fake = stand_in(machine / "python3", (3, 14, 0))
    assert chosen(machine) == str(fake)


def test_prefers_312_and_313_over_314_and_314_over_311(machine):
    stand_in(machine / "python3.11", (3, 11, 9))
    p314 = stand_in(machine / "python3.14", (3, 14, 2))
    assert chosen(machine) == str(p314)
    p313 = stand_in(machine / "python3.13", (3, 13, 5))
    assert chosen(machine) == str(p313)
    p312 = stand_in(machine / "python3.12", (3, 12, 8))
    assert chosen(machine) == str(p312)


def test_python_314_asked_for_by_version(machine):
    stand_in(machine / "python3.12", (3, 12, 8))
    p314 = stand_in(machine / "python3.14", (3, 14, 2))
    assert chosen(machine, PYTHON="3.14") == str(p314)


def test_python_314_asked_for_but_missing(machine):
    stand_in(machine / "python3.12", (3, 12, 8))
    out = find_python(machine, PYTHON="3.14")
    assert out.returncode == 1 and out.stdout == ""
    assert "no working CPython 3.14" in out.stderr


def test_versions_outside_311_to_314_are_refused(machine):
    stand_in(machine / "python3.15", (3, 15, 0))
    stand_in(machine / "python3", (3, 10, 14))
    out = find_python(machine)
    assert out.returncode == 1 and out.stdout == ""
    assert "no CPython 3.11, 3.12, 3.13 or 3.14 found" in out.stderr
    too_new = stand_in(machine / "python3.15", (3, 15, 0))
    out = find_python(machine, PYTHON=str(too_new))
    assert out.returncode == 1 and "not a working CPython" in out.stderr


def test_a_free_threaded_314_is_not_taken(machine):
    stand_in(machine / "python3.14", (3, 14, 2), free_threaded=True)
    out = find_python(machine)
    assert out.returncode == 1, out.stdout
    gil = stand_in(machine / "python3", (3, 14, 2))
    assert chosen(machine) == str(gil)


@pytest.mark.skipif(
    subprocess.run(["sort", "-V"], input="", capture_output=True, text=True).returncode != 0,
    reason="the pyenv lookup needs a sort with -V",
)
def test_314_under_pyenv_newest_first_free_threaded_skipped(machine, tmp_path):
    root = tmp_path / "pyenv"
    stand_in(root / "versions/3.14.0/bin/python3", (3, 14, 0))
    newest = stand_in(root / "versions/3.14.1/bin/python3", (3, 14, 1))
    stand_in(root / "versions/3.14.1t/bin/python3", (3, 14, 1), free_threaded=True)
    pyenv = machine / "pyenv"
    pyenv.write_text(f'#!/bin/sh\n[ "$1" = root ] && echo "{root}"\n')
    pyenv.chmod(0o755)
    stand_in(machine / "python3.11", (3, 11, 9))
    assert chosen(machine) == str(newest)
    assert chosen(machine, PYTHON="3.14") == str(newest)


@pytest.mark.skipif(not os.access("/bin/sh", os.X_OK), reason="needs /bin/sh")
def test_the_real_choice_on_this_machine_is_a_supported_cpython():
    out = subprocess.run(["/bin/sh", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.skip(f"no supported interpreter here: {out.stderr.strip()}")
    version = subprocess.run(
        [out.stdout.strip(), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version in {"(3, 11)", "(3, 12)", "(3, 13)", "(3, 14)"}
