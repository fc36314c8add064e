"""A generator of hostile schemas and metadata (issue 37): every kind of CREATE (table, index,
view, trigger, virtual table) attached to each table, with the names spelled every way SQLite
accepts (case, "", [], ``, `main.`); expressions nested 150,000 deep in every place an
expression can stand; numbers and strings at their limits in the metadata table; keys stored
as BLOBs. Each file goes to a child process (_schema_fuzz_child.py), which opens it with the
store and runs `info`, `tree`, `check`, `copy` and `copy --dest-path` into it.

The property, for every file:
- the process never dies of a signal, and nothing takes longer than DEADLINE seconds;
- opening it read-only succeeds or raises a zarrdb.errors exception; a file holding anything
  a SQLiteStore file may not is refused (UnsafeSchemaError, or unreadable as damaged);
- every command exits 0, 1 or 2, never "internal error" (3); an error (2) is one line, with
  no raw control character; `check` never says "ok" of a file the store refuses.

ZARRDB_SCHEMA_FUZZ_CASES sets the number of files (default 40; 200 in the slow run) and
ZARRDB_SCHEMA_FUZZ_SEED the seed (default: a new one, printed on failure)."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
from pathlib import Path

import pytest

from format import builders

from reliability.helpers import PYTHON, child_env, trials

CHILD = Path(__file__).with_name("_schema_fuzz_child.py")
DEADLINE = 30.0  # seconds for one file's open and commands together
DEEP = "+".join(["1"] * 150_000)
TABLES = ("zarr", "zarr_sqlitestore_metadata", "notes")
# Objects with an expression in them; {t} is the table's name as spelled, {e} the expression.
OBJECTS = {
    "trigger": "CREATE TRIGGER {n} AFTER INSERT ON {t} BEGIN SELECT {e}; END",
    "update trigger": "CREATE TRIGGER {n} BEFORE UPDATE ON {t} BEGIN SELECT {e}; END",
    "view": "CREATE VIEW {n} AS SELECT {e} AS x FROM {t}",
    "plain index": "CREATE INDEX {n} ON {t}(k)",
    "expression index": "CREATE INDEX {n} ON {t}((k || {e}))",
    "partial index": "CREATE INDEX {n} ON {t}(k) WHERE {e} > 0",
    "generated column": "CREATE TABLE {n}(k, g AS ({e}))",
    "default": "CREATE TABLE {n}(k DEFAULT ({e}))",
    "virtual table": "CREATE VIRTUAL TABLE {n} USING rtree(id, x0, x1)",
}
# Which kinds a SQLiteStore file may hold: a plain table, whatever its DEFAULT.
ALLOWED = {"default"}
METADATA = {
    "huge version": ("sqlitestore_version", "9" * 5000 + ".0"),
    "huge minor": ("sqlitestore_version", "1." + "9" * 5000),
    "unicode digits": ("sqlitestore_version", "\u0661.\u0660"),
    "huge flags": ("incompatible_flags", "x," * 100_000),
    "control characters": ("created_by", "\x1b]0;pwned\x07\n" * 1000),
    "huge modified_at": ("modified_at", "2024-" + "9" * 5000),
}


def _prefix(rng: random.Random) -> str:
    return rng.choice(["", "main.", "MAIN.", '"main".'])


def _spelled(rng: random.Random, name: str) -> str:
    cased = "".join(c.upper() if rng.random() < 0.5 else c for c in name)
    return rng.choice(["{}", '"{}"', "[{}]", "`{}`"]).format(cased)


def _case(rng: random.Random) -> tuple[list[tuple[str, str]], list[tuple[str, str]], bool, bool]:
    """((name, statement) pairs, metadata records, whether it holds a forbidden object, blob
    key) of one hostile file; a statement with {deep} has its expression nested deep in the
    schema."""
    statements, records, forbidden = [], [], False
    for _ in range(rng.choice((1, 1, 2))):
        what = rng.random()
        if what < 0.7:
            kind = rng.choice(sorted(OBJECTS))
            table = rng.choice(TABLES)
            if kind in ("generated column", "default"):
                table = "notes"
            name = f"obj{len(statements)}"
            deep = rng.random() < 0.3
            template = OBJECTS[kind]
            # The schema prefix goes on the table's name, or on an index's own name.
            prefix, spelled = _prefix(rng), _spelled(rng, table)
            made = template.format(
                n=(prefix + name) if "INDEX" in template else name,
                t=spelled if "INDEX" in template else prefix + spelled,
                e="{deep}" if deep else "1",
            )
            statements.append((name, made))
            forbidden |= kind not in ALLOWED
        else:
            records.append(METADATA[rng.choice(sorted(METADATA))])
    return statements, records, forbidden, rng.random() < 0.15


def _build(path: Path, statements: list[tuple[str, str]], records: list, blob_key: bool) -> None:
    builders.make_store_file(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("CREATE TABLE notes(k, a)")
        for key, value in records:
            con.execute("UPDATE zarr_sqlitestore_metadata SET v = ? WHERE k = ?", (value, key))
        if blob_key:
            con.execute("UPDATE zarr SET k = CAST(k AS BLOB) WHERE k = 'a/c/0'")
        for _, statement in statements:
            con.execute(statement.replace("{deep}", "1"))  # the stdlib's depth limit is 1,000
        deep = [(name, text) for name, text in statements if "{deep}" in text]
        if deep:
            con.execute("PRAGMA writable_schema = ON")
            for name, text in deep:
                con.execute(
                    "UPDATE sqlite_schema SET sql = ? WHERE name = ?",
                    (text.replace("{deep}", DEEP), name),
                )
    finally:
        con.close()


def _problems(case: dict, result: dict) -> list[str]:
    found = []
    opened = result["open"]
    if opened.startswith("raised"):
        found.append(f"open {opened}")
    if case["forbidden"] and opened == "opened":
        found.append("opened a file holding what a SQLiteStore file may not")
    for name, outcome in result["commands"].items():
        code, err = outcome["code"], outcome["stderr"]
        if code not in (0, 1, 2):
            found.append(f"{name}: exit {code!r} {err.strip()[:300]}")
        if code == 2 and len(err.strip().splitlines()) != 1:
            found.append(f"{name}: {len(err.strip().splitlines())} lines on stderr")
        if "\x1b" in outcome["stdout"] + err or "\x07" in outcome["stdout"] + err:
            found.append(f"{name}: a raw control character reached the output")
        if outcome["seconds"] > DEADLINE:
            found.append(f"{name}: {outcome['seconds']} s")
    if opened != "opened" and result["commands"]["check"]["stdout"].strip() == "ok":
        found.append("check says ok of a file the store refuses")
    return found


def run_cases(tmp_path: Path, count: int, seed: int) -> list[str]:
    """Generate `count` files from `seed`, run them in one child; the problems found."""
    rng = random.Random(seed)
    source = builders.make_store_file(tmp_path / "source.zarrdb")
    cases = []
    for n in range(count):
        path = tmp_path / f"hostile-{n}.zarrdb"
        statements, records, forbidden, blob_key = _case(rng)
        _build(path, statements, records, blob_key)
        cases.append({
            "n": n, "path": str(path), "work": str(tmp_path), "source": str(source),
            "forbidden": forbidden, "made": [text[:100] for _, text in statements],
            "records": [k for k, _ in records],
            "blob_key": blob_key,
        })  # fmt: skip
    proc = subprocess.run(
        [PYTHON, str(CHILD)],
        input="".join(json.dumps(case) + "\n" for case in cases),
        capture_output=True, text=True, env=child_env(), timeout=DEADLINE * count + 60,
    )  # fmt: skip
    problems, last = [], None
    for line in proc.stdout.splitlines():
        result = json.loads(line)
        last = cases[result["n"]]
        if "start" not in result:
            problems += [f"{p} (file {last['made']}, {last['records']})" for p in
                         _problems(last, result)]  # fmt: skip
            last = None
    if proc.returncode != 0:
        where = f"on file {last['made']}, {last['records']}" if last else "between files"
        problems.append(f"the child ended with {proc.returncode} {where}: {proc.stderr[-1500:]}")
    return problems


def test_hostile_schemas_are_refused_cleanly(tmp_path):
    count = trials("ZARRDB_SCHEMA_FUZZ_CASES", 40, 200, slow=False)
    seed = int(os.environ.get("ZARRDB_SCHEMA_FUZZ_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:20])


@pytest.mark.slow
def test_hostile_schemas_are_refused_cleanly_at_length(tmp_path):
    count = trials("ZARRDB_SCHEMA_FUZZ_CASES", 40, 200, slow=True)
    seed = int(os.environ.get("ZARRDB_SCHEMA_FUZZ_SEED", random.randrange(2**32)))
    problems = run_cases(tmp_path, count, seed)
    assert not problems, f"seed {seed}:\n" + "\n".join(problems[:20])
