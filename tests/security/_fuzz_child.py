"""The child process of the generators of test_coordinate_fuzz.py and test_cli_fuzz.py: for each
case on stdin (one JSON object a line), it runs what the case names in this process and prints
one JSON line of what happened, with the seconds it took and how much its peak resident memory
grew. Before each case it prints {"n": N, "start": true}, so that the parent knows which case a
crash or a hang was on.

    python _fuzz_child.py xarray|cli SECONDS

In `cli` mode a case's "commands" are [name, argv] pairs run with zarrdb.cli.main, and a pair
["store", [URL, storage_options, block_cache, keys]] opens the URL with SQLiteStore and reads
the keys.

Each case has SECONDS to finish (then faulthandler prints the stacks and ends the process, which
the parent reports as a hang); the address space is limited to what the process has after its
imports plus ADDRESS_SPACE, so that an allocation of gigabytes fails at once with MemoryError (a
finding) instead of taking the machine's memory.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import resource
import sys
import time
import warnings

import xarray as xr

from zarrdb import cli, errors

ADDRESS_SPACE = 3 << 30
# Exceptions that are no clean refusal: running out of memory, or of stack.
NOT_CLEAN = (MemoryError, RecursionError, SystemError)


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith(field + ":"))) * 1024


def _reset_peak() -> int:
    """The resident memory now, after making it the peak (Linux: 5 in clear_refs resets
    VmHWM)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmHWM")


def _read(opened, how: str | None) -> None:  # noqa: ANN001
    """What a case reads after the open: everything ("whole"), the last two values of each
    variable ("part": of a shard, by byte ranges), or nothing."""
    if how == "whole":
        opened.load()
    elif how == "part":
        for variable in opened.data_vars.values():
            if variable.ndim:
                variable.isel({variable.dims[0]: slice(-2, None)}).load()


def _open_xarray(case: dict) -> str:
    try:
        if case["open"] == "datatree":
            opened = xr.open_datatree(case["path"], engine="zarrdb")
        else:
            opened = xr.open_dataset(case["path"], engine="zarrdb", group=case.get("group"),
                                     consolidated=case.get("consolidated"))  # fmt: skip
        try:
            _read(opened, case.get("read"))
        finally:
            opened.close()
    except errors.ZarrDBError as exc:
        return f"refused: {type(exc).__name__}"
    except NOT_CLEAN as exc:
        return f"raised: {type(exc).__name__}: {str(exc)[:200]}"
    except Exception as exc:  # noqa: BLE001 - zarr's and xarray's own refusals of bad metadata
        return f"failed: {type(exc).__name__}"
    except BaseException as exc:  # noqa: BLE001 - what the property forbids
        return f"raised: {type(exc).__name__}: {str(exc)[:200]}"
    return "opened"


def _command(argv: list[str]) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
        except BaseException as exc:  # noqa: BLE001 - what the property forbids
            code = f"raised {type(exc).__name__}: {str(exc)[:200]}"
    return {"code": code, "stdout": out.getvalue()[-2000:], "stderr": err.getvalue()[-2000:]}


def _read_store(target: str, options: dict, cache: dict | None, keys: list[str]) -> dict:
    """Open a store read-only (a URL, with storage options and block cache) and read `keys`;
    the outcome."""
    from zarrdb import SQLiteStore

    try:
        with SQLiteStore(
            target, read_only=True, storage_options=options, block_cache=cache
        ) as store:
            for key in keys:
                store.get_sync(key)
    except (errors.ZarrDBError, OSError) as exc:
        return {"code": 2, "stdout": "", "stderr": f"{type(exc).__name__}: {exc}"[:2000]}
    except BaseException as exc:  # noqa: BLE001 - what the property forbids
        return {"code": f"raised {type(exc).__name__}: {str(exc)[:200]}", "stdout": "",
                "stderr": ""}  # fmt: skip
    return {"code": 0, "stdout": "", "stderr": ""}


def _measured(run, *args) -> dict:  # noqa: ANN001
    before = _reset_peak()
    started = time.monotonic()
    result = run(*args)
    result = result if isinstance(result, dict) else {"outcome": result}
    result["seconds"] = round(time.monotonic() - started, 3)
    result["growth"] = _status("VmHWM") - before
    return result


def main() -> None:
    mode, seconds = sys.argv[1], float(sys.argv[2])
    if mode == "xarray":
        warnings.simplefilter("ignore")  # zarr's about odd metadata; the command line's are kept
    limit = _status("VmSize") + ADDRESS_SPACE
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    for line in sys.stdin:
        case = json.loads(line)
        print(json.dumps({"n": case["n"], "start": True}), flush=True)
        faulthandler.dump_traceback_later(seconds, exit=True)
        if mode == "xarray":
            result = {"n": case["n"], "xarray": _measured(_open_xarray, case)}
        else:
            result = {"n": case["n"], "commands": {}}
            for name, argv in case["commands"]:
                if name == "store":  # argv: the URL, its storage options, the keys to read
                    result["commands"][name] = _measured(_read_store, *argv)
                else:
                    result["commands"][name] = _measured(_command, argv)
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
