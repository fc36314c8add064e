"""Helpers every command shares: argument types that validate before any work starts, and
how results are printed (JSON, byte counts, shapes, paths inside a hierarchy)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from zarrdb import _tunables
from zarrdb.cli.framework import EPILOG, BadInput, printable

# --- argument types (argparse turns their ArgumentTypeError into one line, exit code 2) ------


def seconds(text: str) -> float:
    """A non-negative, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds (a number >= 0, e.g. 5 or 0.5)"
        )
    return value


def byte_size(text: str) -> int:
    """'1048576', '64M', '1GiB' as a positive number of bytes."""
    units = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    number, unit = (t[:-1], t[-1]) if t and t[-1] in "kmgt" else (t, "")
    try:
        value = float(number) * units[unit]
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size (a positive number of bytes: e.g. 67108864, 64M, 1G)"
        )
    return int(value)


def new_file(*suffixes: str) -> Any:
    """An argument type: the path of a file to write, in a folder that exists, ending in one
    of `suffixes` (any name when none are given)."""

    def check(text: str) -> str:
        folder = os.path.dirname(os.path.abspath(text))
        if suffixes and not text.lower().endswith(suffixes):
            raise argparse.ArgumentTypeError(f"{text!r} does not end in {' or '.join(suffixes)}")
        if os.path.isdir(text):
            raise argparse.ArgumentTypeError(f"{text!r} is a directory; give a file name")
        if not os.path.isdir(folder):
            raise argparse.ArgumentTypeError(
                f"{text!r}: the folder {folder} does not exist; create it first"
            )
        return text

    return check


def storage_option(text: str) -> str:
    """One KEY=VALUE setting for reading a URL (checked with zarrdb.remote.parse_options)."""
    from zarrdb.remote import parse_options

    try:
        options = parse_options([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (e.g. region=eu-west-1)") from None
    retries = str(options.get("max_retries", "0"))
    if not retries.isdigit():
        raise argparse.ArgumentTypeError(
            f"max_retries is a whole number of retries (>= 0), not {retries!r}"
        )
    return text


def epilog(text: str, *examples: str) -> str:
    """A command's help epilog: `text` (lines of at most 90 characters), its examples, and
    the exit codes."""
    head = f"{text}\n\n" if text else ""
    return head + "examples:\n" + "".join(f"  {e}\n" for e in examples) + "\n" + EPILOG


def add_busy_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--busy-timeout",
        type=seconds,
        default=_tunables.BUSY_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait for another process's lock on the file (default: "
        f"{_tunables.BUSY_TIMEOUT:g})",
    )


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        dest="storage_options",
        action="append",
        type=storage_option,
        default=[],
        metavar="KEY=VALUE",
        help="a setting for reading URLs, repeatable: for a .zarrdb at a URL, obstore's "
        "(endpoint=, region=, access_key_id=, skip_signature=true, max_retries=N, ...; obstore "
        "also reads AWS_*, GOOGLE_* and AZURE_* variables); for other URLs, fsspec's",
    )


def add_opening_options(parser: argparse.ArgumentParser) -> None:
    """--busy-timeout and --storage-option, for a command that opens local files and URLs."""
    add_busy_timeout(parser)
    add_storage_options(parser)


def storage_options(args: argparse.Namespace, *locations: str) -> dict[str, Any]:
    """The --storage-option settings as a dict; BadInput if they are given without a URL."""
    from zarrdb.remote import parse_options

    options = parse_options(args.storage_options)
    if options and not any("://" in where for where in locations):
        local = "is a local path" if len(locations) == 1 else "are local paths"
        raise BadInput(
            f"argument --storage-option: applies to URLs only, and {' and '.join(locations)} "
            f"{local}"
        )
    return options


def inner_path(text: str) -> str:
    """A path inside a hierarchy as the user typed it ("/a/b/", "a/b") in the form "a/b"."""
    path = text.strip().strip("/")
    if "//" in path:
        raise BadInput(f"{text!r} is not a path inside a hierarchy (it contains '//')")
    return path


def display(path: str) -> str:
    """A path inside a hierarchy as it is shown: "/a/b", "/" for the root."""
    return "/" + path


# --- output ------------------------------------------------------------------------------------


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def human(n: int | float | None) -> str:
    """A byte count as '12.3 MiB (12,897,484 bytes)'."""
    if n is None:
        return "?"
    if n < 1024:
        return f"{n:,} bytes"
    if n >= 1024**6:  # whole PiB: a size a document claims can be past what a float holds
        return f"{n // 1024**5:,} PiB ({n:,} bytes)"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit} ({n:,} bytes)"


def shape(dims: Sequence[int] | None) -> str:
    if dims is None:
        return "-"
    return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"


def warn(message: str) -> None:
    print(f"zarrdb: warning: {printable(message)}", file=sys.stderr, flush=True)
