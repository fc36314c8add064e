"""Fuzzing: mutated copies of valid files, each opened, listed, read whole (through zarrdb and
through zarr) and written in a child process, a batch of files per process, so that a crash of
the process (a signal) is a failure and not the end of the test run.

The mutations are aimed by the files' own layout (sqlite_pages.py): most land past the 100-byte
header, in what SQLite reads after opening - interior and leaf pages of the key table and its
index, overflow chains, the pointer map, the freelist, the metadata table, the schema - as
flipped bits, overwritten or zeroed bytes and rewritten page numbers (child pointers, overflow
and freelist links, pointer-map parents); some hit the header, a few cut the file short. Some
are what an attacker would craft rather than what damage does: an overflow chain of the key
table made to loop back to its start, shared by the rows of its page, each claiming far more
bytes than the file holds (a decompression bomb); keys that climb out of their hierarchy
(`../x`, `g/../../x`) or hold a NUL; a trigger on the key table that rewrites or refuses what
is written. The test output says how many files reached each layer (see _fuzz_child.py) and the
test fails when fewer than half of them reach the full read.

What counts as a right answer for a damaged file, decided here:
- zarrdb's own API (opening, listing, get/exists/getsize, ranges, key_sizes, file_info, check,
  writing, close) raises only zarrdb.errors exceptions, and FileNotFoundError, which zarr's
  Store API defines for a key that is not there: in a damaged file the key index can list a
  key whose row is gone (getsize then raises it; check() reports the damage);
- zarr reading through zarrdb may raise a zarrdb.errors exception, or what zarr and its codecs
  raise for a damaged metadata document or chunk (ValueError - JSONDecodeError,
  UnicodeDecodeError, zarr's metadata errors -, TypeError, KeyError, IndexError, EOFError,
  OSError such as gzip.BadGzipFile, RuntimeError from numcodecs, zlib.error), provided it was
  not raised by zarrdb's code;
- never a crash, never a hang (60 s per batch of 40 files), never a leak: after each file the
  reading process has no more file descriptors open than before the first, and no thread more
  than zarr's own pool may add; never a large allocation: no file raises the process's peak
  resident memory by more than PEAK_GROWTH (where the OS says).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import re
import sqlite3
import subprocess
import tempfile
import textwrap
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from zarr.core.buffer import default_buffer_prototype

from .conftest import FUZZ_SUMMARY
from .helpers import PYTHON, TESTS_DIR, child_env, opened, over_peak, trials
from .sqlite_pages import Layout, layout, make_overflow_bomb, table_leaf_cells

FIXTURES = TESTS_DIR / "data" / "bad"
BATCH = 40
# What zarr itself may raise on a damaged hierarchy (the values zarrdb returned were read
# correctly; zarr finds them malformed). zarr 3.1 raises AttributeError on a metadata document
# that is valid JSON but not an object (`data.pop` on a number).
ZARR_LAYER_BUILTINS = {
    "AttributeError",
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "EOFError",
    "OSError",
    "RuntimeError",
}
ZARR_LAYER_TYPES = {"zlib.error"}
# The layers of a file in the order the child reaches them, with the names the summary uses.
LAYERS = {
    "open": "open",
    "listing": "listing",
    "read": "full read",
    "zarr": "zarr read",
    "write-open": "open for writing",
    "write": "write",
}
# zarr's codec pool may start a few more threads while reading: more than this is a leak.
THREAD_SLACK = 8
# Reading a base file (at most a few hundred KB, arrays of at most 1 MB read whole) raises the
# reading process's peak memory by a few MB; a file that raises it more than this made zarrdb
# allocate what a value claimed.
PEAK_GROWTH = 256 * 1024 * 1024
buf = default_buffer_prototype().buffer


def zarrdb_made_base(directory: Path) -> Path:
    """A file written by zarrdb itself with small pages (1 KiB, so that a small file has deep
    b-trees), incremental auto-vacuum (a pointer map) and free pages (values deleted): a
    sharded zstd array, a gzip array, an array of 100 small chunks, attributes, a nested group
    whose long name overflows the key index's cells, values of 1-9 KiB (overflow chains)."""
    path = directory / "zarrdb-made.zarrdb"
    with opened(path, page_size=1024, durability="off") as store:
        root = zarr.open_group(store, mode="w")
        root.attrs["made_by"] = "zarrdb"
        s = root.create_array("s", shape=(32, 32), chunks=(8, 8), shards=(16, 16), dtype="uint16")
        s[...] = np.arange(1024, dtype=np.uint16).reshape(32, 32)
        g = root.create_group("g").create_array(
            "z", shape=(100,), chunks=(30,), dtype="float64", compressors=zarr.codecs.GzipCodec()
        )
        g[...] = np.linspace(0, 1, 100)
        many = root.create_array("a", shape=(400,), chunks=(4,), dtype="int32", compressors=None)
        many[...] = np.arange(400, dtype=np.int32)
        long_name = "n" * 300  # keys over ~230 bytes overflow the index cells of 1 KiB pages
        root.create_group(long_name).attrs["deep"] = True
        for i in range(12):
            store.set_sync(f"blobs/{i}", buf.from_bytes(bytes(range(256)) * (4 + 3 * i)))
    # Free pages: zarrdb gives the pages of what it deletes back to the file system, so another
    # program (Python's sqlite3, no vacuum) deletes values here; their pages go to the freelist.
    con = sqlite3.connect(path)
    con.executemany("DELETE FROM zarr WHERE k = ?", [(f"blobs/{i}",) for i in range(0, 12, 3)])
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="module")
def fuzz_bases(tmp_path_factory) -> dict[str, bytes]:
    directory = tmp_path_factory.mktemp("fuzz-bases")
    return {
        "stdlib": (FIXTURES / "valid.zarrdb.fixture").read_bytes(),
        "zarrdb": zarrdb_made_base(directory).read_bytes(),
    }


# --- where mutations land -------------------------------------------------------------------------

# Each region: which pages it covers (by their layout role and owner), and its weight: how
# many times more often a mutation lands there than in a region of weight 1.
REGION_WEIGHTS = {
    "header": 2,
    "schema": 1,
    "table-interior": 2,
    "table-leaf": 3,
    "index": 3,
    "overflow": 3,
    "ptrmap": 2,
    "freelist": 2,
    "metadata": 2,
}


def region_of(page, zarr_index: str) -> str | None:
    if page.role == "btree":
        if page.owner == "sqlite_schema":
            return "schema"
        if page.owner == "zarr":
            return f"table-{page.kind}"
        if page.owner == zarr_index:
            return "index"
        if "zarr_sqlitestore_metadata" in page.owner:
            return "metadata"
        return None
    if page.role == "overflow":
        return "metadata" if "zarr_sqlitestore_metadata" in page.owner else "overflow"
    if page.role == "freelist-trunk":
        return "freelist"
    return "ptrmap" if page.role == "ptrmap" else None


class Regions:
    """The byte ranges and page-number fields of each region of one base file."""

    def __init__(self, data: bytes) -> None:
        self.layout: Layout = layout(data)
        zarr_index = next(
            name for name in self.layout.roots if name.startswith("sqlite_autoindex_zarr_1")
        )
        self.ranges: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        self.pointers: dict[str, list[int]] = collections.defaultdict(list)
        # Leaf pages of the key table holding a value with an overflow chain (for "bomb").
        self.chained_leaves = [
            page.number
            for page in self.layout.pages.values()
            if page.role == "btree" and page.owner == "zarr" and page.kind == "leaf"
            and any(cell.overflow for cell in table_leaf_cells(data, page.number))
        ]  # fmt: skip
        self.ranges["header"].append((0, 100))
        self.pointers["header"].extend(self.layout.header_pointers)
        for page in self.layout.pages.values():
            name = region_of(page, zarr_index)
            if name is None:
                continue
            start = self.layout.offset(page.number)
            if page.number == 1:  # the schema's b-tree header comes after the file header
                start += 100
            self.ranges[name].extend((max(a, start), b) for a, b in page.used if b > start)
            self.pointers[name].extend(page.pointers)

    @property
    def names(self) -> list[str]:
        return sorted(self.ranges)

    def byte(self, region: str, index: int) -> int:
        """The offset of the index-th byte (modulo the region's size) of a region."""
        spans = self.ranges[region]
        index %= sum(b - a for a, b in spans)
        for a, b in spans:
            if index < b - a:
                return a + index
            index -= b - a
        raise AssertionError("unreachable")

    def pointer(self, region: str, index: int) -> int:
        fields = self.pointers[region] or [self.byte(region, index)]
        return fields[index % len(fields)]


def page_number(regions: Regions, offset: int, choice: int) -> int:
    """A page number to write at offset: none, the first page, the page itself (a loop), the
    last page, just past the end, all ones, or any page of the file."""
    count = regions.layout.page_count
    special = [0, 1, offset // regions.layout.page_size + 1, count, count + 1, 0xFFFFFFFF]
    if choice % 8 < len(special):
        return special[choice % 8]
    return (choice >> 3) % count + 1


# What a bomb's values claim: a few times a base file, more than a process can hold, more than
# a SQLiteStore value may be, more than an int.
BOMB_CLAIMS = (1_000_000, 300_000_000, 2**31 + 5, 2**40)
# Keys that climb out of their hierarchy or hold a NUL, added beside the existing ones.
HOSTILE_KEYS = ("../x", "g/../../x", "a/../../../x/zarr.json", "a/c/\x00/0", "..", "./zarr.json")
# Triggers a hostile file may hold on the key table: they run on zarrdb's writes.
TRIGGERS = (
    "CREATE TRIGGER fuzz_rewrite AFTER INSERT ON zarr BEGIN "
    "UPDATE zarr SET v = x'DEADBEEF' WHERE k = new.k; END",
    "CREATE TRIGGER fuzz_refuse BEFORE INSERT ON zarr BEGIN "
    "SELECT RAISE(ABORT, 'refused by the file'); END",
    "CREATE TRIGGER fuzz_spread AFTER UPDATE ON zarr BEGIN "
    "INSERT OR REPLACE INTO zarr(k, v) VALUES ('../escaped', new.v); END",
    # one that would never end (refused at open, so the write layer never runs it)
    "CREATE TRIGGER fuzz_forever AFTER INSERT ON zarr BEGIN "
    "SELECT count(*) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
    "SELECT i FROM n); END",
)


def _bomb(data: bytes, regions: Regions, index: int, claim: int, keys: int) -> bytes:
    """One of the key table's overflow chains made to loop, claimed by up to `keys` rows."""
    if not regions.chained_leaves:
        return data
    leaf = regions.chained_leaves[index % len(regions.chained_leaves)]
    try:
        return make_overflow_bomb(data, leaf, claim, keys)
    except ValueError:  # the longer cells do not fit on the page: left as it was
        return data


def _with_sql(data: bytes, statements: list[tuple[str, tuple]]) -> bytes:
    """The file after running `statements` on it (standard-library sqlite3, in memory); as it
    was if an earlier mutation left it unreadable."""
    with contextlib.closing(sqlite3.connect(":memory:")) as con:
        # a trigger planted by an earlier step may never end: at most about a million steps
        budget = iter(range(1000))
        con.set_progress_handler(lambda: next(budget, None) is None, 1000)
        try:
            con.deserialize(data)
            with con:
                for sql, params in statements:
                    con.execute(sql, params)
            return con.serialize()
        except (sqlite3.DatabaseError, UnicodeDecodeError):  # (a key mutated into bad UTF-8)
            return data


def mutate(data: bytes, regions: Regions, steps) -> bytes:
    out = bytearray(data)
    for step in steps:
        kind = step[0]
        if kind == "truncate":
            del out[max(0, len(out) - step[1]) :]
            continue
        if kind == "bomb":
            out = bytearray(_bomb(bytes(out), regions, step[2], *step[3]))
            continue
        if kind == "keys":  # a hostile key beside the others, holding a copy of a value
            copy = "INSERT OR IGNORE INTO zarr(k, v) SELECT ?, v FROM zarr ORDER BY k LIMIT 1"
            out = bytearray(_with_sql(bytes(out), [(copy, (step[3],))]))
            continue
        if kind == "trigger":
            out = bytearray(_with_sql(bytes(out), [(step[3], ())]))
            continue
        region, index, arg = step[1], step[2], step[3]
        at = regions.pointer(region, index) if kind == "pointer" else regions.byte(region, index)
        size = len(out)
        if at >= size:
            continue  # cut off by an earlier truncation
        if kind == "pointer":
            out[at : at + 4] = page_number(regions, at, arg).to_bytes(4, "big")
        elif kind == "flip":
            out[at] ^= 1 << arg
        elif kind == "overwrite":
            out[at : at + len(arg)] = arg
        else:  # zero
            out[at : at + arg] = bytes(len(out[at : at + arg]))
        del out[size:]  # writes near the end never grow the file
    return bytes(out)


# How often each kind of mutation is drawn, relative to the others.
KIND_WEIGHTS = {
    "flip": 6, "overwrite": 4, "zero": 2, "pointer": 6, "truncate": 1,
    "bomb": 1, "keys": 1, "trigger": 1,
}  # fmt: skip


def random_case(rng: random.Random, regions: dict[str, Regions]) -> tuple[str, list[tuple]]:
    """A base file and one to three mutations of it (mostly one), drawn by the weights."""
    base = rng.choice(sorted(regions))
    names = regions[base].names
    steps: list[tuple] = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        (kind,) = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))
        if kind == "truncate":  # a few bytes up to a few pages
            steps.append((kind, rng.randint(1, 4096)))
            continue
        if kind == "bomb":
            claim = (rng.choice(BOMB_CLAIMS), rng.randint(1, 4))
            steps.append((kind, "overflow", rng.getrandbits(32), claim))
            continue
        if kind in ("keys", "trigger"):
            steps.append((kind, kind, 0, rng.choice(HOSTILE_KEYS if kind == "keys" else TRIGGERS)))
            continue
        (region,) = rng.choices(names, weights=[REGION_WEIGHTS[n] for n in names])
        index = rng.getrandbits(32)
        arg = {
            "flip": lambda: rng.randrange(8),
            "overwrite": lambda: rng.randbytes(rng.randint(1, 8)),
            "zero": lambda: rng.randint(1, 64),
            "pointer": lambda: rng.getrandbits(32),
        }[kind]()
        steps.append((kind, region, index, arg))
    return base, steps


# --- running a batch ------------------------------------------------------------------------------


def allowed(layer: str, outcome: dict) -> bool:
    if outcome["ok"] or outcome["zarrdb_error"] or outcome["type"] == "builtins.FileNotFoundError":
        return True
    if layer != "zarr" or outcome["from_zarrdb"]:
        return False
    return (
        bool(set(outcome["builtin_bases"]) & ZARR_LAYER_BUILTINS)
        or outcome["type"] in ZARR_LAYER_TYPES
    )


FUZZ_CHILD = [PYTHON, "-m", "reliability._fuzz_child"]


# Hangs already known, by where the stack of the hung process ends (faulthandler's dump):
# each has a regression test that fails (strict xfail) until it is fixed, then goes from here.
# None today (list_dir looping over a damaged key index was one: fixed, and
# test_bad_files.py::test_list_dir_over_a_key_index_out_of_order keeps it so).
KNOWN_HANGS: dict[str, str] = {}


def known_hang(stderr: str, hangs: dict[str, str] | None = None) -> str | None:
    if "Timeout (" not in stderr:
        return None
    for pattern, what in (KNOWN_HANGS if hangs is None else hangs).items():
        if re.search(pattern, stderr):
            return what
    return None


def run_fuzz_batch(
    files: list[bytes],
    labels: list,
    child: list[str] = FUZZ_CHILD,
    known: list | None = None,
    hangs: dict[str, str] | None = None,
) -> list[dict]:
    """Runs the child over the files; its reports (one per file), after checking them. A file
    on which the child hangs in a known way is noted in `known` and the child goes on with the
    files after it; any other hang, and any crash, fails."""
    reports = []
    with tempfile.TemporaryDirectory(prefix="zarrdb-fuzz-") as directory:
        for i, data in enumerate(files):
            Path(directory, f"case-{i:03d}.zarrdb").write_bytes(data)
        while True:
            out = _run_child(child, directory)
            lines = out.stdout.splitlines()
            reports += [json.loads(line) for line in lines if line.startswith("{")]
            if out.returncode == 0 and lines and lines[-1] == "end":
                break
            started = [line.split(" ", 1)[1] for line in lines if line.startswith("start ")]
            culprit = started[-1] if started else "?"
            index = int(culprit[5:8]) if culprit.startswith("case-") else None
            label = labels[index] if index is not None else ""
            what = known_hang(out.stderr, hangs)
            if what is None or known is None or index is None:
                kind = "hung (no answer)" if "Timeout (" in out.stderr else "died"
                raise AssertionError(
                    f"the reading process {kind} (exit {out.returncode}) on {culprit}: "
                    f"{label}\n{out.stderr[-3000:]}"
                )
            known.append((culprit, label, what))
            for name in sorted(os.listdir(directory)):
                if name <= culprit:
                    os.remove(os.path.join(directory, name))
    check_reports(reports, labels)
    return reports


def _run_child(child: list[str], directory: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [*child, directory],
            capture_output=True,
            text=True,
            env=child_env(),
            cwd=TESTS_DIR,
            timeout=BATCH * 30,  # the child itself stops at 20 s on one file
        )
    except subprocess.TimeoutExpired as exc:
        started = [
            line for line in (exc.stdout or b"").decode().splitlines() if line.startswith("start ")
        ]
        raise AssertionError(
            f"hang: no answer within {BATCH * 30} s, last {started[-1:]}"
        ) from None


def check_reports(reports: list[dict], labels: list) -> None:
    problems = []
    for report in reports:
        label = labels[int(report["file"][5:8])]
        for layer in LAYERS:
            outcome = report.get(layer)
            if outcome is not None and not allowed(layer, outcome):
                problems.append(
                    f"{report['file']} {label} [{layer}] {outcome['type']}: "
                    f"{outcome['message']}\n{outcome['traceback']}"
                )
        if report["extra_descriptors"]:
            problems.append(
                f"{report['file']} {label}: {report['extra_descriptors']} descriptor(s) left open"
            )
        if report["extra_threads"] > THREAD_SLACK:
            problems.append(f"{report['file']} {label}: {report['extra_threads']} thread(s) more")
        if over_peak(report.get("peak_growth"), PEAK_GROWTH):
            problems.append(
                f"{report['file']} {label}: raised the peak memory by "
                f"{report['peak_growth']:,} bytes"
            )
    assert not problems, "\n\n".join(problems[:5])


class Tally:
    """How many files reached and passed each layer, overall and by where the mutation was
    aimed (files with one mutation)."""

    def __init__(self) -> None:
        self.files = 0
        self.reached: collections.Counter[str] = collections.Counter()
        self.passed: collections.Counter[str] = collections.Counter()
        self.by_region: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.sidecars = 0
        self.known: list[tuple] = []  # (file, its mutations, which known hang)

    def add(self, steps, report: dict) -> None:
        self.files += 1
        for layer in LAYERS:
            if layer in report:
                self.reached[layer] += 1
                self.passed[layer] += report[layer]["ok"]
        self.sidecars += bool(report["sidecars"])
        if len(steps) == 1:
            region = steps[0][1] if steps[0][0] != "truncate" else "truncate"
            self.by_region[region]["files"] += 1
            self.by_region[region]["read"] += "read" in report

    def lines(self, title: str) -> list[str]:
        n = self.files

        def pct(k: int) -> str:
            return f"{k} ({100 * k / n:.0f}%)" if n else "0"

        n += len(self.known)
        out = [
            f"{title}: {n} mutated files, no crash, no leak, no hang but {len(self.known)} known; "
            "reached (passed) each layer:"
        ]
        out.append(
            "  "
            + ", ".join(
                f"{name} {pct(self.reached[layer])} ({self.passed[layer]})"
                for layer, name in LAYERS.items()
            )
        )
        regions = ", ".join(
            f"{region} {c['read']}/{c['files']}" for region, c in sorted(self.by_region.items())
        )
        out.append(f"  files with one mutation that reached the full read, by target: {regions}")
        out.append(
            f"  files left with a -wal/-shm/-journal beside them after close: {self.sidecars}"
        )
        for name, label, what in self.known:
            out.append(f"  known hang: {name} {label}: {what}")
        return out


def _fuzz(bases: dict[str, bytes], examples: int) -> Tally:
    regions = {name: Regions(data) for name, data in bases.items()}
    tally = Tally()

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        # Every step runs a process: shrinking a failing batch would take many minutes. The
        # failure names the file and its mutations, which is enough to reproduce it.
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        print_blob=True,
    )
    # Hypothesis draws one seed per batch (and keeps a failing one in its example database);
    # the batch is drawn from it by the weights above, which hypothesis's own strategies would
    # skew towards their simplest values.
    @given(st.integers(0, 2**64 - 1))
    def body(seed):
        rng = random.Random(seed)
        batch = [random_case(rng, regions) for _ in range(BATCH)]
        files = [mutate(bases[base], regions[base], steps) for base, steps in batch]
        reports = run_fuzz_batch(files, batch, known=tally.known)
        for report in reports:
            tally.add(batch[int(report["file"][5:8])][1], report)

    body()
    return tally


def _check_and_report(request, tally: Tally, title: str) -> None:
    request.config.stash[FUZZ_SUMMARY].extend(tally.lines(title))
    assert tally.reached["read"] >= (tally.files + len(tally.known)) / 2, tally.lines(title)


def test_fuzz_mutated_files(fuzz_bases, request):
    """About 40 s: ZARRDB_FUZZ_EXAMPLES batches (default 20; 200 in the slow run) of 40 mutated
    files."""
    tally = _fuzz(fuzz_bases, trials("ZARRDB_FUZZ_EXAMPLES", 20, 200, slow=False))
    _check_and_report(request, tally, "fuzz")


@pytest.mark.slow
def test_fuzz_mutated_files_many(fuzz_bases, request):
    tally = _fuzz(fuzz_bases, trials("ZARRDB_FUZZ_EXAMPLES", 20, 200, slow=True))
    _check_and_report(request, tally, "fuzz (slow)")


def test_fuzz_crafted_mutations(fuzz_bases):
    """Each crafted mutation once on both bases (bombs of every claim, hostile keys, triggers):
    a clean refusal or error, never a crash, a hang, a leak or a large allocation; the bombs'
    values fail to read with a zarrdb error."""
    regions = {name: Regions(data) for name, data in fuzz_bases.items()}
    cases: list[tuple[str, list[tuple]]] = []
    for base in sorted(fuzz_bases):
        assert regions[base].chained_leaves, base
        cases += [(base, [("bomb", "overflow", 0, (claim, 3))]) for claim in BOMB_CLAIMS]
        cases += [(base, [("keys", "keys", 0, key)]) for key in HOSTILE_KEYS]
        cases += [(base, [("trigger", "trigger", 0, sql)]) for sql in TRIGGERS]
    files = [mutate(fuzz_bases[base], regions[base], steps) for base, steps in cases]
    assert all(data != fuzz_bases[base] for data, (base, _) in zip(files, cases))
    reports = run_fuzz_batch(files, cases)
    assert len(reports) == len(cases)
    for report, (_, steps) in zip(reports, cases):
        if steps[0][0] == "bomb":
            assert report["read"]["zarrdb_error"], (steps, report["read"])


# --- the harness itself ---------------------------------------------------------------------------


def test_fuzz_harness_catches_a_crash():
    """The batch runner reports a reading process killed by a signal as a failure naming the
    file and its mutations (here a stand-in child that dies of SIGSEGV on the second file)."""
    script = textwrap.dedent(
        """
        import os, signal, sys
        for n, name in enumerate(sorted(os.listdir(sys.argv[1]))):
            print(f"start {name}", flush=True)
            if n == 1:
                os.kill(os.getpid(), signal.SIGSEGV)
        """
    )
    labels = [("stdlib", [("flip", "header", i, 0)]) for i in range(3)]
    with pytest.raises(
        AssertionError,
        # (-11: SIGSEGV; a sanitizer's handler may end the process with a status of its own)
        match=r"died \(exit -?\d+\) on case-001.zarrdb: "
        r"\('stdlib', \[\('flip', 'header', 1, 0\)\]\)",
    ):
        run_fuzz_batch([b"x" * 100] * 3, labels, child=[PYTHON, "-c", script])


def test_fuzz_harness_catches_a_leaked_descriptor():
    """A stand-in child whose report says a file descriptor stayed open fails the batch."""
    script = textwrap.dedent(
        """
        import json, os, sys
        for name in sorted(os.listdir(sys.argv[1])):
            print(f"start {name}", flush=True)
            report = {"file": name, "open": {"ok": True}, "sidecars": [],
                      "extra_descriptors": 1, "extra_threads": 0}
            print(json.dumps(report), flush=True)
        print("end", flush=True)
        """
    )
    with pytest.raises(AssertionError, match="1 descriptor"):
        run_fuzz_batch([b"x"], [("stdlib", [])], child=[PYTHON, "-c", script])


def test_layout_matches_what_sqlite_says(fuzz_bases):
    """sqlite_pages reads both bases as SQLite does: every page accounted for once, the page
    and freelist counts and, where the standard-library sqlite3 has the dbstat table, each
    table's and index's b-tree and overflow pages."""
    for name, data in fuzz_bases.items():
        found = layout(data)
        with closing(sqlite3.connect(":memory:")) as con:
            con.deserialize(data)
            assert found.page_count == con.execute("PRAGMA page_count").fetchone()[0], name
            assert found.freelist_count == con.execute("PRAGMA freelist_count").fetchone()[0]
            assert found.count("freelist-trunk") + found.count("freelist-leaf") == (
                found.freelist_count
            )
            roots = dict(con.execute("SELECT name, rootpage FROM sqlite_schema").fetchall())
            assert {k: v for k, v in found.roots.items() if k != "sqlite_schema"} == roots
            try:
                stats = con.execute(
                    "SELECT name, pagetype, count(*) FROM dbstat GROUP BY 1, 2"
                ).fetchall()
            except sqlite3.OperationalError:
                stats = None
        assert sorted(found.pages) == list(range(1, found.page_count + 1))
        if stats is not None:
            kinds = {"internal": "interior", "leaf": "leaf"}
            for owner, pagetype, count in stats:
                if pagetype == "overflow":
                    assert found.count("overflow", owner) == count, (name, owner)
                else:
                    got = sum(
                        1
                        for p in found.pages.values()
                        if p.role == "btree" and p.owner == owner and p.kind == kinds[pagetype]
                    )
                    assert got == count, (name, owner, pagetype)


def test_the_zarrdb_base_has_every_structure_the_fuzzer_aims_at(fuzz_bases):
    regions = Regions(fuzz_bases["zarrdb"])
    assert set(regions.names) == set(REGION_WEIGHTS)
    found = regions.layout
    assert found.auto_vacuum and found.count("ptrmap") >= 1 and found.freelist_count >= 4
    index = next(n for n in found.roots if n.startswith("sqlite_autoindex_zarr_1"))
    assert found.count("overflow", index) >= 1, "no key overflows the index cells"
    assert any(p.kind == "interior" and p.owner == index for p in found.pages.values())


def test_mutations_land_where_they_are_aimed(fuzz_bases):
    data = fuzz_bases["zarrdb"]
    regions = Regions(data)
    page_size = regions.layout.page_size
    for region in regions.names:
        for index in (0, 7, 1000, 2**31 + 5):
            at = regions.byte(region, index)
            changed = mutate(data, regions, [("flip", region, index, 3)])
            assert [i for i in range(len(data)) if changed[i] != data[i]] == [at]
            page = regions.layout.pages[at // page_size + 1]
            if region == "header":
                assert at < 100
            else:
                assert region_of(page, "sqlite_autoindex_zarr_1") == region, (region, page)
    # a rewritten page number is a 4-byte field of the region, here the overflow chains'
    at = regions.pointer("overflow", 3)
    changed = mutate(data, regions, [("pointer", "overflow", 3, 0)])
    assert changed[at : at + 4] == bytes(4) and data[at : at + 4] != bytes(4)
    assert len(mutate(data, regions, [("truncate", 10)])) == len(data) - 10


HANGING_CHILD = """
import json, os, sys
names = sorted(os.listdir(sys.argv[1]))
for name in names:
    print(f"start {{name}}", flush=True)
    if name == "case-001.zarrdb":
        sys.stderr.write(
            "Timeout (0:00:20)!\\nThread 0x00007f (most recent call first):\\n"
            '  File "/venv/site-packages/zarrdb/store.py", line 1071 in {function}\\n'
        )
        sys.exit(1)
    report = {{"file": name, "open": {{"ok": True}}, "sidecars": [],
               "extra_descriptors": 0, "extra_threads": 0}}
    print(json.dumps(report), flush=True)
print("end", flush=True)
"""


def test_fuzz_harness_goes_on_after_a_known_hang_and_fails_on_another():
    """A file on which the child hangs where a known hang does is noted, and the files after
    it are still read (by a new child); a hang anywhere else fails the batch."""
    labels = [("stdlib", [("flip", "index", i, 0)]) for i in range(3)]
    known: list = []
    script = HANGING_CHILD.format(function="list_dir")
    hangs = {r'line \d+ in list_dir\n': "a hang this test makes on purpose"}
    reports = run_fuzz_batch(
        [b"x"] * 3, labels, child=[PYTHON, "-c", script], known=known, hangs=hangs
    )
    assert [r["file"] for r in reports] == ["case-000.zarrdb", "case-002.zarrdb"]
    assert [(name, label) for name, label, _ in known] == [("case-001.zarrdb", labels[1])]
    script = HANGING_CHILD.format(function="list_prefix")
    with pytest.raises(AssertionError, match=r"hung \(no answer\) \(exit 1\) on case-001"):
        run_fuzz_batch([b"x"] * 3, labels, child=[PYTHON, "-c", script], known=[], hangs=hangs)
