"""The child process of test_schema_fuzz.py: for each hostile file named on stdin (one JSON
object a line: path, whether the file holds something a SQLiteStore file may not, a clean
source file), open it with the store and run the commands on it in this process, and print
one JSON line of what happened. A crash (a signal) ends the process: the parent sees which
file it was on by the lines printed so far."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time

from zarrdb import SQLiteStore, cli, errors

COMMANDS = ("info", "tree", "check", "copy", "copy-into")


def _open(path: str) -> str:
    try:
        SQLiteStore(path, read_only=True).ensure_open()
    except errors.UnsafeSchemaError:
        return "unsafe"
    except errors.ZarrDBError as exc:
        return f"refused: {type(exc).__name__}"
    except BaseException as exc:  # noqa: BLE001 - what the property forbids
        return f"raised: {type(exc).__name__}: {str(exc)[:200]}"
    return "opened"


def _command(name: str, case: dict) -> dict:
    path, work = case["path"], case["work"]
    argv = {
        "info": ["info", path],
        "tree": ["tree", path],
        "check": ["check", path],
        "copy": ["copy", path, f"{work}/out-{case['n']}.zarrdb"],
        "copy-into": ["copy", case["source"], path, "--dest-path", "incoming"],
    }[name]
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
        except BaseException as exc:  # noqa: BLE001 - what the property forbids
            code = f"raised {type(exc).__name__}: {str(exc)[:200]}"
    return {
        "code": code,
        "seconds": round(time.monotonic() - started, 3),
        "stdout": out.getvalue()[-2000:],
        "stderr": err.getvalue()[-2000:],
    }


def main() -> None:
    for line in sys.stdin:
        case = json.loads(line)
        print(json.dumps({"n": case["n"], "start": True}), flush=True)
        result = {"n": case["n"], "open": _open(case["path"])}
        result["commands"] = {name: _command(name, case) for name in COMMANDS}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
