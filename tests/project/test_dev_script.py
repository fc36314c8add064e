"""scripts/dev.sh, what `make demo` and `make test` run: one environment per interpreter with
one build of zarrdb in it, whatever the command; each command adds only the optional
dependencies it needs (the extras of pyproject.toml)."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "dev.sh"

pytestmark = [
    pytest.mark.skipif(not SCRIPT.exists(), reason="not a source checkout"),
    pytest.mark.skipif(sys.platform == "win32", reason="scripts/dev.sh is a POSIX shell script"),
]


def plan(command):
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        ["bash", str(SCRIPT), "plan", command], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines())


def test_demo_and_tests_share_one_environment_and_one_build():
    plans = {
        command: plan(command)
        for command in (
            "demo", "test", "bench", "docs", "docs-bench", "typecheck", "shell", "build"
        )
    }
    version = "%d.%d" % sys.version_info[:2]
    for command, p in plans.items():
        assert p["environment"] == f".venv/py{version}", command
        assert p["build"] == f".venv/py{version}/zarrdb-build.stamp", command
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    for command, p in plans.items():
        assert set(p["extras"].split(",")) <= set(extras), command
    # `build` (what CI runs before two test runs at once) prepares exactly what `test` uses.
    assert plans["build"] == plans["test"]
    # The demo draws its chart: it installs what --plot needs.
    assert "plot" in plans["demo"]["extras"].split(",")
    assert "plot" in plans["docs-bench"]["extras"].split(",")
    assert any(req.startswith("matplotlib") for req in extras["plot"])
