"""The documentation site's sources against the code they describe: the command-line reference
that scripts/docs_hooks.py generates from the parser (every command, every option, as
`zarrdb COMMAND --help` lists them), the API page's list of the methods SQLiteStore inherits
from its file-operations mixin, the README's links into the site, and the development page's
map of the package's modules. `mkdocs build --strict`
(`.ci/run`, `make docs`) checks links, anchors and docstring references; these need no MkDocs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from zarrdb import SQLiteStore
from zarrdb._store_maintenance import FileOperations
from zarrdb._reading import Reads
from zarrdb.cli.framework import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HOOKS = ROOT / "scripts" / "docs_hooks.py"

pytestmark = pytest.mark.skipif(
    not HOOKS.is_file() or not (ROOT / "mkdocs.yml").is_file(),
    reason="the documentation sources are not beside the tests (an sdist)",
)


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", HOOKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def narrative() -> str:
    return (DOCS / "cli.md").read_text()


@pytest.fixture(scope="module")
def reference(hooks, narrative) -> str:
    return hooks.render_cli_reference(narrative=narrative)


def _sections(page: str) -> dict[str, str]:
    parts = re.split(r"^## zarrdb (\S+)$", page, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_cli_reference_has_a_section_for_every_command(reference):
    names = [command.name for command in COMMANDS if command.available()]
    assert len(names) >= 8
    assert list(_sections(reference)) == names


def test_every_argument_of_every_command_is_in_the_cli_reference(reference):
    """Each option string and positional argument the parser declares (what `zarrdb COMMAND
    --help` lists) appears in the command's section, as does the top-level `--version`."""
    parser = build_parser(None)
    sections = _sections(reference)
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    checked = 0
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            if not action.option_strings:
                assert f"| `{action.metavar or action.dest}` |" in sections[name], name
            for option in action.option_strings:
                assert re.search(rf"[`,] ?{re.escape(option)}\b", sections[name]), (name, option)
                assert option in sub.format_help(), (name, option)
            checked += 1
    assert checked > 40
    assert "`--version`" in reference.split("## zarrdb ", 1)[0]


def test_the_cli_reference_links_each_command_to_the_guide(reference, narrative):
    for name, body in _sections(reference).items():
        link = re.search(r"\]\(\.\./cli\.md#([\w-]+)\)", body)
        assert link, name
        assert re.search(rf"^## zarrdb {name}\b", narrative, re.MULTILINE), name


def test_a_command_missing_from_the_guide_is_reported(hooks, reference, narrative):
    assert hooks.missing_sections(reference, narrative) == []
    without_copy = re.sub(r"^## zarrdb copy\b.*$", "## copying", narrative, flags=re.MULTILINE)
    problems = hooks.missing_sections(reference, without_copy)
    assert problems == ["docs/cli.md has no section starting '## zarrdb copy'"]


def test_help_text_shows_as_written(hooks):
    assert hooks._text("a *b* | c_d `e` <f>") == r"a \*b\* \| c\_d \`e\` &lt;f&gt;"


def _listed(page: str, option: str) -> list[str]:
    """The names an option of the page's `:::` blocks lists."""
    blocks = re.findall(rf"^      {option}:\n((?:        - \w+\n)+)", page, re.MULTILINE)
    assert blocks, option
    return re.findall(r"- (\w+)", "".join(blocks))


def _public_methods(cls: type) -> list[str]:
    """Methods and properties defined in `cls` itself (zarr's `supports_*` flags are not)."""
    return [
        name
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and isinstance(value, (property, classmethod, staticmethod, type(lambda: 0)))
    ]


def test_the_api_page_lists_every_method_of_sqlitestore():
    """docs/reference/store.md names SQLiteStore's members to give them an order, and the
    file-level methods and the reads, defined in mixins, because mkdocstrings shows inherited
    methods only when named: a method missing from either list would be missing from the page."""
    page = (DOCS / "reference" / "store.md").read_text()
    inherited = _public_methods(FileOperations) + _public_methods(Reads)
    assert "rename" in inherited and "file_info" in inherited and "get_ranges" in inherited
    assert sorted(_listed(page, "inherited_members")) == sorted(inherited)
    own = _public_methods(SQLiteStore)
    assert "transaction" in own and "options" in own and "from_object_store" in own
    members = _listed(page, "members")
    assert len(members) == len(set(members))
    assert sorted(members) == sorted(own + inherited)


def test_readme_links_to_pages_of_the_site():
    config = (ROOT / "mkdocs.yml").read_text()
    site = re.search(r"^site_url: (\S+)$", config, re.MULTILINE)[1]
    readme = (ROOT / "README.md").read_text()
    pages = re.findall(rf"\({re.escape(site)}([^)#]*)", readme)
    assert len(pages) >= 8
    for page in pages:
        page = page.rstrip("/")
        candidates = [DOCS / "index.md"] if not page else [
            DOCS / f"{page}.md",
            DOCS / page / "index.md",
        ]
        generated = page == "reference/cli"  # written by scripts/docs_hooks.py at each build
        assert generated or any(c.is_file() for c in candidates), page
    assert f"<{site}>" in readme


@pytest.mark.parametrize(
    ("module", "page"),
    [
        ("zarrdb.errors", "errors.md"),
        ("zarrdb.remote", "remote.md"),
        ("zarrdb.conformance", "conformance.md"),
        ("zarrdb.zarr2", "zarr2.md"),
        ("zarrdb.filesystem", "filesystem.md"),
    ],
)
def test_the_api_reference_shows_everything_a_module_exports(module, page):
    """Each module's page names its members (to order them), so a name added to `__all__`
    must be added there too."""
    exported = importlib.import_module(module).__all__
    listed = _listed((DOCS / "reference" / page).read_text(), "members")
    assert sorted(listed) == sorted(exported)
    assert len(listed) == len(set(listed))


def test_the_package_page_shows_every_name_the_package_exports():
    import zarrdb

    page = (DOCS / "reference" / "zarrdb.md").read_text()
    documented = set(_listed(page, "members")) | set(re.findall(r"^\| `(\w+)` \|", page, re.M))
    assert set(zarrdb.__all__) <= documented


_SOURCE_SUFFIXES = (".py", ".pyx", ".pxi", ".pxd", ".h", ".pyi")


def _module_map() -> set[str]:
    """The files and folders the development page's "Where the code is" table names."""
    text = (DOCS / "development.md").read_text()
    section = text.split("## Where the code is", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        cells = row.split("|")
        named.update(re.findall(r"`([^`]+)`", cells[1]))  # the module column, whatever it names
        named.update(  # files the job column names (the engine's included parts)
            name for name in re.findall(r"`([^`]+)`", cells[2]) if name.endswith(_SOURCE_SUFFIXES)
        )
    return named


def test_the_module_map_names_every_module_of_the_package_and_no_other():
    package = ROOT / "src" / "zarrdb"
    tree = {p.name for p in package.iterdir() if p.is_file() and p.name.endswith(_SOURCE_SUFFIXES)}
    tree |= {p.name + "/" for p in package.iterdir() if p.is_dir() and not p.name.startswith("__")}
    tree.discard("__init__.py")
    named = _module_map()
    assert len(named) > 20, named  # the table was found and read
    assert tree - named == set(), "modules missing from docs/development.md's map"
    assert named - tree == set(), "docs/development.md's map names files the package lacks"


# Names docs/architecture.md gives that are another project's, not zarrdb's: the first part of a
# dotted name, or a whole name.
_OTHERS = {"asyncio", "zarr", "zarr_io"}


def _code_names(page: str) -> set[str]:
    """The names of code a page gives in backticks (a function, `Class.method`, `file.py`),
    without a call's arguments; code with spaces, brackets or operators is an example, and
    left out."""
    names = set()
    for quoted in re.findall(r"`([^`]+)`", page):
        name = re.sub(r"\(.*\)$", "", quoted)
        if re.fullmatch(r"[A-Za-z_][\w.]*(/[\w.]+)?", name) and not name.startswith("."):
            names.add(name)
    return names


def test_the_architecture_page_names_only_code_that_exists():
    package = ROOT / "src" / "zarrdb"
    sources = [p for p in package.rglob("*") if p.suffix in _SOURCE_SUFFIXES]
    words = set(re.findall(r"\w+", "\n".join(p.read_text() for p in sources)))
    files = {str(p.relative_to(package)) for p in sources}
    names = _code_names((DOCS / "architecture.md").read_text())
    assert len(names) > 50, names  # the page was read
    missing = set()
    for name in names:
        if name.endswith(_SOURCE_SUFFIXES) and name.count(".") == 1:
            if name not in files:
                missing.add(name)
        elif name.split(".")[0] not in _OTHERS and name != "zarrdb":
            missing.update(part for part in name.split(".") if part not in words)
    assert missing == set(), "docs/architecture.md names code the package does not have"


def test_the_scan_of_code_names_leaves_out_examples():
    page = "`Writer.write` `arr[:] = x` `close()` `get(key, n)` `cli/copy.py` `--verify` `.pxi`"
    assert _code_names(page) == {"Writer.write", "close", "get", "cli/copy.py"}


def _headings(page: str) -> list[str]:
    """The page's Markdown headings, as written (lines inside fenced code are not headings)."""
    headings: list[str] = []
    fence: str | None = None
    for line in page.splitlines():
        marker = re.match(r"^\s*(`{3,}|~{3,})", line)
        if marker:
            if fence is None:
                fence = marker[1][0]
            elif marker[1][0] == fence:
                fence = None
            continue
        if fence is None and re.match(r"^#{1,6} \S", line):
            headings.append(line.rstrip())
    return headings


def test_headings_finds_headings_outside_code_only():
    page = "# A\n\n```python\n# a comment\n```\n\n## B\n~~~\n## not one\n~~~\n## B\n"
    assert _headings(page) == ["# A", "## B", "## B"]


@pytest.mark.parametrize(
    "page", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(DOCS))
)
def test_no_heading_is_repeated_within_a_page(page):
    """A section pasted twice (an older copy left below the newer) passes the strict build:
    its anchors only get a suffix."""
    headings = _headings(page.read_text())
    repeated = sorted({h for h in headings if headings.count(h) > 1})
    assert repeated == [], f"{page.relative_to(ROOT)} repeats {repeated}"
