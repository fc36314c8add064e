"""The suite is collected from any directory, as it is against an installed wheel (cibuildwheel
runs it from a temporary directory of its own, scripts/py314.sh from a copy of tests/): no test
imports its helpers through the name of the folder the checkout keeps them in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_the_suite_collects_from_another_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "no:randomly", f"--rootdir={tmp_path}", str(TESTS)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    collected = re.match(r"(\d+)(?:/\d+)? tests collected", last)
    assert collected and int(collected.group(1)) > 1000, last
    assert "error" not in last
