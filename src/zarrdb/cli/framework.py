"""The command framework: the table of subcommands, the parser, and how a run ends.

A subcommand is a module with an `add_arguments(parser)` function that declares its options
and a `run(args) -> exit code` function, plain or `async`: an async run is driven by the one
event loop of the process (`asyncio.run` here, nowhere else in the command line). Bad input
raises `BadInput`, which ends the run with one line on stderr and exit code 2; any other
exception is a bug and ends it with exit code 3 (`ZARRDB_DEBUG=1` shows the traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, NoReturn

from zarrdb import errors, remote

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class BadInput(Exception):
    """Bad input from the user: printed as one line on stderr, exit code 2."""


@dataclass(frozen=True)
class Command:
    """One subcommand: `module.<add_arguments>(parser)` declares its options and
    `module.<run>(args)` does the work and returns the exit code. `optional` commands are
    listed only when their module is installed; `shared_options` gives the command the
    options every built-in one has (--json)."""

    name: str
    summary: str
    module: str
    add_arguments: str = "add_arguments"
    run: str = "run"
    optional: bool = False
    shared_options: bool = True

    def available(self) -> bool:
        return not self.optional or importlib.util.find_spec(self.module) is not None

    def load(self) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[Any], Any]]:
        module = importlib.import_module(self.module)
        return getattr(module, self.add_arguments), getattr(module, self.run)


COMMANDS: tuple[Command, ...] = (
    Command(
        "info",
        "describe a store (.zarrdb, .zip, directory or URL) and every array in it",
        "zarrdb.cli.inspect",
        "add_info_arguments",
        "run_info",
    ),
    Command(
        "tree",
        "show the hierarchy (groups and arrays) of a store as a tree",
        "zarrdb.cli.inspect",
        "add_tree_arguments",
        "run_tree",
    ),
    Command(
        "check",
        "check a .zarrdb file (or its URL) against the SQLiteStore 1.0 spec and zarr",
        "zarrdb.cli.check",
    ),
    Command(
        "copy",
        "copy a hierarchy between .zarrdb, .zip, directory and URL stores",
        "zarrdb.cli.copy",
    ),
    Command(
        "mv",
        "rename an array or group inside a .zarrdb file, atomically",
        "zarrdb.cli.maintenance",
        "add_mv_arguments",
        "run_mv",
    ),
    Command(
        "snapshot",
        "consistent copy of a .zarrdb file (or its URL) while others keep writing",
        "zarrdb.cli.maintenance",
        "add_snapshot_arguments",
        "run_snapshot",
    ),
    Command(
        "vacuum",
        "give a .zarrdb file's free pages back to the file system",
        "zarrdb.cli.maintenance",
        "add_vacuum_arguments",
        "run_vacuum",
    ),
    Command(
        "upgrade",
        "make a file of zarr-python 2's SQLiteStore a SQLiteStore 1.0 file, in place",
        "zarrdb.cli.upgrade",
    ),
    Command(
        "view",
        "serve a .zarrdb file and the browser viewer on 127.0.0.1 and print the address",
        "zarrdb.cli.view",
    ),
    # The benchmark declares its own --json (a file to write), so it does not take the shared
    # options.
    Command(
        "bench",
        "measure zarrdb against the other zarr stores",
        "zarrdb.cli.bench",
        optional=True,
        shared_options=False,
    ),
)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_USAGE,
            f"{self.prog}: error: {printable(one_line(message))} (see '{self.prog} --help')\n",
        )


EPILOG = """\
exit codes: 0 ok; 1 problems found (check, copy --verify); 2 usage or bad input;
3 internal error (a bug). Run 'zarrdb COMMAND --help' for the options of a command."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser. Only the command named in `argv` gets its options declared (and
    its module imported); with `argv` None, every available command does."""
    from zarrdb import __version__, sqlite_version

    parser = Parser(
        prog="zarrdb",
        description="Look into, check, copy and maintain .zarrdb files (Zarr v3 hierarchies "
        "in one SQLite file, SQLiteStore 1.0).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"zarrdb {__version__} (SQLite {sqlite_version})"
    )
    common = Parser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the result as JSON, for scripts")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=Parser
    )
    wanted = None
    if argv is not None:
        wanted = next((arg for arg in argv if not arg.startswith("-")), "")
    for command in COMMANDS:
        if not command.available():
            continue
        sub = subparsers.add_parser(
            command.name,
            help=command.summary,
            description=command.summary[0].upper() + command.summary[1:] + ".",
            epilog=EPILOG,
            parents=[common] if command.shared_options else [],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if wanted is None or wanted == command.name:
            add_arguments, run = command.load()
            add_arguments(sub)
            sub.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    prog = f"zarrdb {args.command}"
    previous = warnings.showwarning
    warnings.showwarning = _warning_line
    _terminate_as_interrupt()
    try:
        return _run(args._run, args)
    except BadInput as exc:
        fail(prog, str(exc))
        return EXIT_USAGE
    except (errors.ZarrDBError, OSError) as exc:
        fail(prog, describe(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        fail(prog, "interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a bug: one line, and the traceback on request
        if os.environ.get("ZARRDB_DEBUG"):
            raise
        fail(
            prog,
            f"internal error: {type(exc).__name__}: {exc} (a bug; set ZARRDB_DEBUG=1 "
            "for the traceback and please report it)",
        )
        return EXIT_INTERNAL
    finally:
        warnings.showwarning = previous


def _run(run: Callable[[Any], Any], args: argparse.Namespace) -> int:
    try:
        if inspect.iscoroutinefunction(run):
            return int(asyncio.run(run(args)) or 0)
        return int(run(args) or 0)
    except BrokenPipeError:  # e.g. `zarrdb tree FILE | head`
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _terminate_as_interrupt() -> None:
    """SIGTERM (kill, a scheduler ending the job) unwinds like Ctrl-C, so `copy` and
    `snapshot` remove their unfinished output on either. Both raise KeyboardInterrupt where
    the command is, also inside a long SQLite statement (zarrdb's engine and `check`'s
    connection run signal handlers while one runs): asyncio's own Ctrl-C handling would only
    cancel the command at its next await, which a statement reaches when it is done. Both
    also end every thread's wait for a remote request at once: a worker thread reading for the
    event loop would otherwise hold up the loop's shutdown until its request timed out."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: object) -> None:
        remote.interrupt_requests()
        raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError, AttributeError):
            signal.signal(signum, interrupt)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def printable(text: str) -> str:
    """`text` safe to print to a terminal: every character that is not printable (C0 and C1
    controls with ESC, CR and LF, DEL, bidirectional and other format characters, line
    separators) written as Python writes it in a repr (\\x1b, \\n, \\u202e)."""
    # Keys, names and messages come from files made by others: an escape sequence in them
    # would set the terminal's title, erase the screen or plant a link, a newline forge a line.
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def say(*lines: str, file: Any = None) -> None:
    """Print `lines` for a person to read, each made printable."""
    for line in lines:
        print(printable(line), file=file)


def fail(prog: str, message: str) -> None:
    sys.stdout.flush()
    print(f"{prog}: error: {printable(one_line(message))}", file=sys.stderr, flush=True)


_warned: set[str] = set()


def _warning_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: IO[str] | None = None,
    line: str | None = None,
) -> None:
    text = printable(one_line(str(message)))
    if text in _warned:
        return
    _warned.add(text)
    print(f"zarrdb: warning: {text}", file=sys.stderr, flush=True)


def describe(exc: BaseException) -> str:
    """One line saying what went wrong and what to do, for an exception from a store."""
    if isinstance(exc, errors.DatabaseLockedError):
        where = exc.filename or "the file"
        return (
            f"{where}: the database is locked by another process; retry when it is done, or "
            "wait longer with --busy-timeout SECONDS"
        )
    if isinstance(exc, FileExistsError):
        return f"{exc}; choose another destination or pass --overwrite"
    if isinstance(exc, PermissionError) and exc.filename:
        return f"{exc.filename}: permission denied ({exc.strerror or exc})"
    if isinstance(exc, OSError) and exc.filename and not isinstance(exc, errors.ZarrDBError):
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc) or type(exc).__name__
