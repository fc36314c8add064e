"""Randomised schedules of writers, transactions and closes on one store (issue 24).

Each schedule (a seed) runs in a child process under a watchdog (_transaction_schedule.py):
threads and event loops write unique keys through one store while two threads open, commit and
roll back transactions (one with `with`, one with `async with`, so one waits for the other) and
the main thread closes the store now and then. After the child has closed the store, the file
is read with the standard library's sqlite3 and checked against the record:

- every write acknowledged whose call did not overlap a rolled-back transaction or savepoint is
  there (one that overlapped may have joined it: the store object is the session);
- every write of a committed transaction is there, nothing of a rolled-back one, and nothing
  of a savepoint that failed (a transaction that close() ended is rolled back, but the block's
  writes after the close go to the store reopened, on their own: not checked);
- nothing hangs (the child's watchdog, and a timeout on the child).

A few short schedules run in the default suite; many long ones under the `slow` marker.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ._transaction_schedule import expected_value

CHILD = Path(__file__).with_name("_transaction_schedule.py")


def run_schedule(tmp_path: Path, seed: int, seconds: float) -> None:
    path = tmp_path / f"schedule-{seed}.zarrdb"
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(path), str(seed), str(seconds)],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    assert proc.returncode == 0, f"seed {seed}: the schedule failed or hung\n{proc.stderr}"
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not record["problems"], record["problems"]
    con = sqlite3.connect(path)
    try:
        stored = {k: bytes(v) for k, v in con.execute("SELECT k, v FROM zarr")}
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        con.close()

    rolled_back = [
        (t["start"], t["end"]) for t in record["transactions"] if t["how"] != "committed"
    ] + [tuple(span) for span in record["savepoints"]]
    for key, start, end in record["writes"]:
        if any(start < t_end and t_start < end for t_start, t_end in rolled_back):
            continue  # may have joined a transaction that rolled back
        assert stored.get(key) == expected_value(key), f"seed {seed}: acknowledged {key} lost"
    for t in record["transactions"]:
        if t["how"] == "closed":
            continue  # its writes after the close went to the reopened store, on their own
        for key in t["keys"]:
            if t["how"] == "committed":
                assert stored.get(key) == expected_value(key), f"seed {seed}: {key} lost"
            else:
                assert key not in stored, f"seed {seed}: {key} of a rolled-back transaction"
        for key in t["failed_inner"]:
            assert key not in stored, f"seed {seed}: {key} of a failed savepoint"
    assert record["writes"] and record["transactions"], "the schedule did nothing"


@pytest.mark.parametrize("seed", [1, 2])
def test_transaction_schedule(tmp_path: Path, seed: int) -> None:
    run_schedule(tmp_path, seed, seconds=1.5)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 120))
def test_transaction_schedule_long(tmp_path: Path, seed: int) -> None:
    run_schedule(tmp_path, seed, seconds=10.0)
