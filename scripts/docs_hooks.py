"""MkDocs hooks of the documentation site (mkdocs.yml names this file under `hooks:`).

The command-line reference page, `reference/cli.md`, is not a file in `docs/`: it is written
at every build from the argument parser of `zarrdb.cli`, so the options it lists are exactly
the ones the installed `zarrdb` accepts. The build fails (even without `--strict`) when a
command of `zarrdb.cli.framework.COMMANDS` has no section in it, or no section in the
narrative page `cli.md`.

`render_cli_reference()` needs only zarrdb; tests/project/test_docs.py checks its output without
MkDocs.
"""

from __future__ import annotations

import argparse
import re
import unicodedata
from collections.abc import Iterator

REFERENCE_PAGE = "reference/cli.md"
NARRATIVE_PAGE = "cli.md"
# Usage lines are wrapped at this width, whatever the terminal of the build: what a code block
# of the site's text column shows without scrolling.
USAGE_WIDTH = 72

_ESCAPE = re.compile(r"([\\`*_\[\]{}|#])")


def _text(text: str | None) -> str:
    """Help text as Markdown that shows exactly that text (no emphasis, links or tables)."""
    if not text:
        return ""
    text = " ".join(text.split())
    text = _ESCAPE.sub(r"\\\1", text)
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _expand(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    """An action's help with argparse's %(...)s fields filled in, as `--help` shows it."""
    text = action.help or ""
    if "%" not in text:
        return text
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = parser.prog
    return text % params


def subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, summary, parser) of each subcommand, in the order `zarrdb --help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, summaries.get(name, ""), sub


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _invocation(action: argparse.Action) -> str:
    """`--size N`, `--progress`, `STORE`, `PATH` as the reference names an argument."""
    if not action.option_strings:
        return action.metavar or action.dest
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return ", ".join(f"{option} {metavar}" for option in action.option_strings)


def _details(action: argparse.Action) -> list[str]:
    """What the help text of an argument leaves out: optional positionals, repetition, choices."""
    notes = []
    if not action.option_strings and action.nargs in ("?", "*"):
        notes.append("optional")
    if isinstance(action, (argparse._AppendAction, argparse._ExtendAction)):
        notes.append("repeatable")
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    if action.option_strings and action.required:
        notes.append("required")
    return notes


def _arguments_table(parser: argparse.ArgumentParser, actions: list[argparse.Action]) -> list[str]:
    rows = ["| argument | description |", "| --- | --- |"]
    for action in actions:
        help_text = _text(_expand(action, parser))
        notes = _details(action)
        if notes:
            help_text = f"{help_text} ({'; '.join(notes)})" if help_text else "; ".join(notes)
        rows.append(f"| `{_invocation(action)}` | {help_text or '&nbsp;'} |")
    return rows


def _groups(parser: argparse.ArgumentParser) -> Iterator[tuple[str, list[argparse.Action]]]:
    """Each group of arguments as `--help` prints it, without the help option."""
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help is not argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction)
        ]
        if actions:
            yield group.title or "arguments", actions


def _preformatted(text: str | None) -> list[str]:
    if not text or not text.strip():
        return []
    return ["```text", text.strip("\n"), "```"]


def command_section(
    name: str,
    summary: str,
    sub: argparse.ArgumentParser,
    shared_epilog: str | None = None,
    narrative_anchor: str | None = None,
) -> list[str]:
    lines = [f"## zarrdb {name}", "", _text(summary[:1].upper() + summary[1:]) + ".", ""]
    lines += ["```text", _usage(sub), "```", ""]
    for title, actions in _groups(sub):
        lines += [f"**{_text(title[:1].upper() + title[1:])}**", ""]
        lines += _arguments_table(sub, actions) + [""]
    epilog = (sub.epilog or "").strip("\n")
    if shared_epilog and epilog.endswith(shared_epilog.strip("\n")):
        # Every command ends its help with the exit codes, which the page gives once.
        epilog = epilog[: -len(shared_epilog.strip("\n"))]
    lines += _preformatted(epilog) + [""]
    if narrative_anchor:
        target = f"../{NARRATIVE_PAGE}#{narrative_anchor}"
        lines += [f"What it does, with examples: [zarrdb {name}]({target}).", ""]
    return lines


def _slug(heading: str) -> str:
    """The id Python-Markdown's toc extension (MkDocs' default) gives a heading."""
    value = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def _narrative_heading(narrative: str, name: str) -> str | None:
    found = re.search(rf"^## (zarrdb {re.escape(name)}\b.*)$", narrative, re.MULTILINE)
    return found[1].strip() if found else None


def narrative_anchor(narrative: str, name: str) -> str | None:
    """The id of the section of the narrative page on command `name`, if it has one."""
    heading = _narrative_heading(narrative, name)
    return None if heading is None else _slug(heading)


def render_cli_reference(
    parser: argparse.ArgumentParser | None = None, narrative: str | None = None
) -> str:
    """The command-line reference page, from the parser `zarrdb` runs with (every command's
    options declared). With the text of the narrative page, each section links to the
    command's section there."""
    if parser is None:
        from zarrdb.cli.framework import build_parser

        parser = build_parser(None)
    lines = [
        "# Command-line reference",
        "",
        "<!-- Written by scripts/docs_hooks.py from zarrdb's argument parser at every build. -->",
        "",
        "Every subcommand of `zarrdb` with every argument it takes, as the installed "
        "`zarrdb COMMAND --help` lists them (this page is generated from the same parser). "
        f"The [command-line guide](../{NARRATIVE_PAGE}) explains what the commands do, with "
        "examples and their JSON output.",
        "",
        "```text",
        _usage(parser),
        "```",
        "",
        _text(parser.description),
        "",
        "| command | what it does |",
        "| --- | --- |",
    ]
    commands = list(subcommands(parser))
    for name, summary, _ in commands:
        lines.append(f"| [`{name}`](#zarrdb-{name}) | {_text(summary)} |")
    lines += ["", "**Options of `zarrdb` itself**", ""]
    options = [a for _, actions in _groups(parser) for a in actions if a.option_strings]
    lines += _arguments_table(parser, options) + [""]
    lines += _preformatted(parser.epilog) + [""]
    for name, summary, sub in commands:
        anchor = narrative_anchor(narrative, name) if narrative is not None else None
        lines += command_section(name, summary, sub, parser.epilog, anchor)
    return "\n".join(lines)


def missing_sections(reference: str, narrative: str) -> list[str]:
    """What the two pages lack: a command of COMMANDS without its section in either."""
    from zarrdb.cli.framework import COMMANDS

    problems = []
    for command in COMMANDS:
        if not command.available():
            problems.append(f"the command {command.name} cannot be imported here")
            continue
        heading = f"## zarrdb {command.name}"
        if not re.search(rf"^{re.escape(heading)}$", reference, re.MULTILINE):
            problems.append(f"{REFERENCE_PAGE} has no section '{heading}'")
        if _narrative_heading(narrative, command.name) is None:
            problems.append(f"docs/{NARRATIVE_PAGE} has no section starting '{heading}'")
    return problems


# --- MkDocs hooks ------------------------------------------------------------------------------


def on_files(files, config):  # noqa: ANN001, ANN201 - MkDocs' hook signature
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    narrative = files.get_file_from_path(NARRATIVE_PAGE)
    if narrative is None:
        raise PluginError(f"docs/{NARRATIVE_PAGE} is missing")
    reference = render_cli_reference(narrative=narrative.content_string)
    problems = missing_sections(reference, narrative.content_string)
    if problems:
        raise PluginError("command-line reference: " + "; ".join(problems))
    if files.get_file_from_path(REFERENCE_PAGE) is not None:
        raise PluginError(f"docs/{REFERENCE_PAGE} must not exist: the page is generated")
    files.append(File.generated(config, REFERENCE_PAGE, content=reference))
    return files
