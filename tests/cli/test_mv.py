"""`zarrdb mv`: one transaction, seen whole or not at all by a concurrent reader."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import warnings

import zarr
from zarr.core.buffer import default_buffer_prototype

from zarrdb import SQLiteStore

from .helpers import assert_bad_input, assert_ok, fingerprint, run, run_json, run_many, sqlite_rows


def test_move_an_array_and_a_group(sample_copy):
    rows = dict(sqlite_rows(sample_copy))
    result = run_json("mv", sample_copy, "/climate/temperature", "/temperature")
    moved = {k: v for k, v in rows.items() if k.startswith("climate/temperature/")}
    assert result["keys"] == len(moved)
    after = dict(sqlite_rows(sample_copy))
    assert {k.replace("climate/", "", 1): v for k, v in moved.items()} == {
        k: v for k, v in after.items() if k.startswith("temperature/")
    }
    assert not any(k.startswith("climate/temperature/") for k in after)
    proc = run("mv", sample_copy, "climate", "weather")
    assert_ok(proc)
    assert proc.stdout.startswith("moved /climate to /weather (")
    tree = run("tree", sample_copy).stdout
    assert "weather (group)" in tree and "temperature (40, 60) float32" in tree
    with SQLiteStore(sample_copy, read_only=True) as store:
        assert zarr.open_array(store, path="weather/station", mode="r")[:].tolist() == list(
            range(25)
        )


def test_move_refreshes_consolidated_metadata(sample_copy):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with SQLiteStore(sample_copy) as store:
            zarr.consolidate_metadata(store)
    result = run_json("mv", sample_copy, "legacy", "climate/legacy")
    assert result["refreshed_consolidated_metadata"] == ["/"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with SQLiteStore(sample_copy, read_only=True) as store:
            group = zarr.open_consolidated(store, mode="r")
            assert "climate/legacy" in group.metadata.consolidated_metadata.flattened_metadata
            assert "legacy" not in group.metadata.consolidated_metadata.flattened_metadata
            assert group["climate/legacy"][:].tolist() == list(range(12))


def test_bad_moves_change_nothing(sample_copy):
    before = fingerprint(sample_copy)
    cases = [
        (("/nope", "/x"), ["'/nope'", "zarrdb tree"]),
        (("/climate/temperature", "/legacy"), ["'/legacy' exists already"]),
        (("/legacy", "/nowhere/legacy"), ["'/nowhere'", "must be a group"]),
        (("/legacy", "/tiles/legacy"), ["'/tiles'", "is an array"]),
        (("/climate", "/climate/inner"), ["one contains the other"]),
        (("/", "/x"), ["root"]),
        (("/climate/temperature/c", "/x"), ["not an array or group"]),
    ]
    results = run_many([["mv", sample_copy, src, dst] for (src, dst), _ in cases])
    for (_, words), proc in zip(cases, results):
        assert_bad_input(proc, *words)
    assert fingerprint(sample_copy) == before


READER = r"""
import json, sys, time
from zarrdb import SQLiteStore

path, old, new, count = sys.argv[1], sys.argv[2] + "/", sys.argv[3] + "/", int(sys.argv[4])
store = SQLiteStore(path, read_only=True)
seen = {"old": 0, "new": 0}
bad = []
first_stored = None
print("ready", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and seen["new"] < 25:
    # One listing is one SQLite statement, so one snapshot of the whole file.
    listing = store.key_sizes("")
    n_old = sum(1 for k, _ in listing if k.startswith(old))
    n_new = sum(1 for k, _ in listing if k.startswith(new))
    stored = sum(size for k, size in listing if k.startswith((old, new)))
    if (n_old, n_new) == (count, 0):
        seen["old"] += 1
    elif (n_old, n_new) == (0, count):
        seen["new"] += 1
    else:
        bad.append([n_old, n_new])
    if first_stored is None:
        first_stored = stored
    elif stored != first_stored:
        bad.append(["stored bytes", stored, first_stored])
store.close()
print(json.dumps({"seen": seen, "bad": bad[:10]}), flush=True)
"""


def test_concurrent_reader_sees_old_or_new_never_both(tmp_path):
    path = tmp_path / "move.zarrdb"
    chunks = 20_000
    with SQLiteStore(path, durability="off") as store:
        root = zarr.open_group(store, mode="w")
        root.create_group("staging").create_array(
            "frames", shape=(chunks,), chunks=(1,), dtype="u1", compressors=None, fill_value=0
        )
        root.create_group("archive")
        buf = default_buffer_prototype().buffer
        pairs = [(f"staging/frames/c/{i}", buf.from_bytes(bytes([i % 251]))) for i in range(chunks)]
        asyncio.run(store._set_many(pairs))
    total = chunks + 1  # the chunks and the array's zarr.json
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path), "staging/frames", "archive/frames", str(total)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline().strip() == "ready"
        proc = run("mv", path, "/staging/frames", "/archive/frames")
        assert_ok(proc)
        out, err = reader.communicate(timeout=90)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert reader.returncode == 0, err
    report = json.loads(out)
    print(report)
    assert report["bad"] == [], report
    assert report["seen"]["old"] > 0 and report["seen"]["new"] > 0, report
    with SQLiteStore(path, read_only=True) as store:
        data = zarr.open_array(store, path="archive/frames", mode="r")[:10]
        assert data.tolist() == [i % 251 for i in range(10)]
    assert_ok(run("check", path))
