"""benchmarks/remote.py runs end to end on a small array (a smoke test: its numbers are the
benchmark's business, not this test's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "remote.py"


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ is not beside the tests")
def test_the_remote_benchmark_runs_and_prints_its_table(tmp_path):
    out = tmp_path / "rows.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--size", "512", "--repeat", "1", "--windows", "5",
         "--no-dask", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 9
    assert all(row["met"] in ("yes", "-") for row in rows), rows
    assert "| target | zarrdb | ObjectStore | met |" in run.stdout
    full = next(row for row in rows if row["target"].startswith("full read: requests"))
    assert full["ObjectStore"] == str((512 // 64) ** 2)  # one GET per chunk, counted by the server
