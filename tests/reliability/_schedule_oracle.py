"""The schedule explorer's oracle (test_schedule_explorer.py): what a program's run must show,
from the program, the child's exit status, the outcomes it recorded and the file it left."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .helpers import header_journal_mode, sidecars


def stored(path: Path) -> dict[str, int]:
    """key -> id of the operation whose value it holds (read with the standard library)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        problems = con.execute("PRAGMA integrity_check").fetchall()
        assert problems == [("ok",)], f"damaged file: {problems[:3]}"
        return {k: int.from_bytes(bytes(v[:8]), "little") for k, v in con.execute(
            "SELECT k, v FROM zarr")}  # fmt: skip
    finally:
        con.close()



Chain = tuple[tuple[int, bool], ...]


def walk(ops: list[dict], ns: str, chain: Chain, callers: dict, where: dict) -> None:
    """Every caller's list of operations (namespace -> ops) as the child names them, and for
    each operation its caller and the transactions around it: (id, whether the operation may
    outlive it: a caller started in its block that the block does not wait for)."""
    callers.setdefault(ns, [])
    for op in ops:
        where[op["id"]] = (ns, chain, op)
        if op["op"] == "txn":
            sub = f"{ns}t{op['id']}"
            walk(op["body"], sub, (*chain, (op["id"], False)), callers, where)
            for i, child in enumerate(op["children"]):
                # A caller the block does not wait for may outlive every block around it too.
                around = chain if op["join"] else tuple((t, True) for t, _ in chain)
                inside = (*around, (op["id"], not op["join"]))
                walk(child, f"{sub}c{i}", inside, callers, where)
        elif op["op"] == "gather":
            for i, each in enumerate(op["ops"]):
                walk([each], f"{ns}g{op['id']}c{i}", chain, callers, where)
        callers[ns].append(op)


def check(program: dict, code: int, events: list[dict], stderr: str, path: Path) -> None:
    tail = "\n".join(stderr.splitlines()[-60:])
    if "Timeout (" in stderr or code == -9:
        raise AssertionError(f"hang: an operation did not finish in time\n{tail}")
    if code not in (0, 130):
        last = events[-3:]
        raise AssertionError(f"the program ended with status {code}; last events {last}\n{tail}")
    interrupted = any(e.get("interrupted") for e in events)
    recs = {e["id"]: e for e in events if "id" in e}
    # (Looked for in every event: the fork's own error, recorded after, takes its place in recs.)
    hung = [e["id"] for e in events if e.get("s") == "hang"]
    assert not hung, f"hang: the child forked by operation {hung[0]} did not finish its write"
    left = sidecars(path)
    mode = header_journal_mode(path)
    assert not left and mode == "delete", f"after exit: sidecars {left}, journal mode {mode}"

    callers: dict[str, list[dict]] = {}
    where: dict[int, tuple] = {}
    for i, actor in enumerate(program["actors"]):
        walk(actor["ops"], f"a{i}", (), callers, where)
    if program.get("fork_at"):  # the child forked at a point, as a caller of its own
        _, _, key, op_id = program["fork_at"]
        walk([{"op": "fork", "key": key, "id": op_id}], "f", (), callers, where)
    if program.get("opener_at"):  # another process's write at a point, a caller of its own
        _, _, key, op_id = program["opener_at"][:4]
        walk([{"op": "set", "key": key, "size": "small", "bad": False, "id": op_id}], "o", (),
             callers, where)  # fmt: skip
    txns = [op for _, _, op in where.values() if op["op"] == "txn"]
    closes = [recs.get(op["id"]) for _, _, op in where.values() if op["op"] == "close"]
    # At exit every store is closed for good: a write started after that must not be written
    # (the store opened again beside the one closed, whose last connection nobody closes).
    closed_at = next((e["exit_closed"] for e in events if "exit_closed" in e), None)
    for i, rec in recs.items():
        op = where[i][2]
        if closed_at is not None and rec["s"] == "ok" and rec["t0"] > closed_at and op["op"] in (
            "set", "set_sync", "fire", "delete"
        ):
            raise AssertionError(
                f"operation {i} ({op['op']}) started after the exit handler had closed the "
                "stores, and was written: the store opened again"
            )

    def failed_txn_overlaps(rec: dict) -> bool:
        for txn in txns:
            t = recs.get(txn["id"])
            if t is None or (t["s"] != "ok" and t["t0"] <= rec["t1"] and rec["t0"] <= t["t1"]):
                return True
        return False

    def effect(op: dict, chain: Chain) -> str:
        """'yes', 'no' or 'maybe': whether the operation's value must be stored."""
        rec = recs.get(op["id"])
        if rec is None:
            return "maybe"
        if rec["s"] != "ok":
            return "no"
        if op["op"] == "fork" and any(not may_outlive for _, may_outlive in chain):
            raise AssertionError(
                f"operation {op['id']}: a forked child wrote inside its parent's transaction "
                f"{chain[-1][0]} (it must fail with ClosedError)"
            )
        if op.get("bad") and op["op"] in ("set", "set_sync", "fire"):  # a delete has no value
            raise AssertionError(f"operation {op['id']}: a non-contiguous value was accepted")
        unsure = False
        applies = False
        for txn, may_outlive in chain:
            o = recs.get(txn)
            if o is not None and may_outlive and rec["t0"] > o["t1"]:
                # A write in a level whose block has ended raises NestingError, whatever the
                # level became: written, it is outside the level it was made in.
                raise AssertionError(
                    f"operation {op['id']} ({op['op']}) started after the block of transaction "
                    f"{txn} it was made in had ended, and did not fail: it must raise "
                    "NestingError and not be written"
                )
            # (One made while the level was open, even if the block ended meanwhile, was queued
            # inside it or refused: it goes with the level.)
            if o is None:
                unsure = True  # the transaction's outcome unknown
            elif o["s"] != "ok":
                return "no"  # a level it is in was rolled back
            applies = True
        if unsure:
            return "maybe"
        return "maybe" if not applies and failed_txn_overlaps(rec) else "yes"

    for i, rec in recs.items():
        ns, chain, op = where[i]
        if rec["s"] != "err" or op["op"] not in ("set", "set_sync", "fire") or op["bad"]:
            continue
        if ns == "o" and rec["e"] == "DatabaseLockedError":
            continue  # the other process gave up waiting for a lock a thread held at a point
        if rec["e"] != "ClosedError":
            # Inside a level, a write may meet the rule of nesting (docs/guide/transactions.md):
            # NestingError where a level around it ended first or another level is open inside
            # it, MisuseError where the level it was entered in has ended.
            assert chain and rec["e"] in ("MisuseError", "NestingError"), (
                f"operation {i} ({op['op']} of a good value by {ns}) failed with "
                f"{rec['e']}: {rec.get('m')}"
            )
            continue
        before = [c for c in closes if c is None or c["t0"] <= rec["t1"]]
        # (A write made while another caller's transaction was open joined it: a close()
        # that rolled that transaction back fails the write with it.)
        if before and not interrupted and not failed_txn_overlaps(rec) and all(
            c is not None and c["th"] == rec["th"] and c["t0"] > rec["t0"] for c in before
        ):
            raise AssertionError(
                f"operation {i} ({op['op']} by {ns}) failed with ClosedError from a close() "
                "its own thread started after it"
            )

    found = stored(path)
    for ns, ops in callers.items():
        keys: dict[str, set[int | None]] = {}
        for op in ops:
            if op["op"] not in ("set", "set_sync", "fire", "delete", "fork"):
                continue
            key = f"{ns}/f{op['id']}" if op["op"] == "fork" else f"{ns}/{op['key']}"
            now = effect(op, where[op["id"]][1])
            new = None if op["op"] == "delete" else op["id"]
            acceptable = keys.setdefault(key, {None})
            if now == "yes":
                keys[key] = {new}
            elif now == "maybe":
                acceptable.add(new)
        for key, acceptable in keys.items():
            got = found.get(key)
            assert got in acceptable, (
                f"{key} holds the value of operation {got}; its caller's operations allow only "
                f"{sorted(acceptable, key=str)} (None: absent)"
            )
