"""The seams between zarrdb's modules, read from their source: SQL text is run only by the
engine (and the conformance checker), and no module uses another's private names; what zarrdb
needs of another project's private API goes through zarrdb._compat.

The package is read where Python imports it from (src/ in a checkout, site-packages against a
wheel); the benchmarks are read where the checkout has them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from project.test_imports import PACKAGE, _modules

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# The modules that may run SQL text of their own through Database.execute (or a connection of
# Python's sqlite3): the conformance checker reads a file independently of the engine's
# statements, and the demo shows Python's own sqlite3 reading a file zarrdb wrote.
SQL_ALLOWED = {
    "zarrdb.conformance",
    "zarrdb.demo",
}

# (module, private name it uses of another) still to be moved, each with its reason: none is left.
PRIVATE_ALLOWED: set[tuple[str, str]] = set()
# The one module that holds what zarrdb uses of other projects' private API.
COMPAT = "zarrdb._compat"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def sql_calls(source: str) -> list[int]:
    """The lines of `source` that call a method named execute or executescript."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("execute", "executescript")
    ]


def _own_names(tree: ast.AST) -> set[str]:
    """The names a module defines itself: its functions, classes and methods, and every name
    and attribute it assigns (an object of its own class reaches those)."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
    return own


def _module_aliases(tree: ast.AST) -> set[str]:
    """The names under which a module binds other modules (import x, import x as y, from
    package import module)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "zarrdb":
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def private_uses(source: str, modules: set[str] = frozenset()) -> list[tuple[int, str]]:
    """(line, name) for each private name of another module `source` uses: imported by name,
    imported from another project's private module, or read as an attribute of an imported
    module, or of an object whose class the module does not define (self and cls are its own).
    `modules`: the package's module names (importing a private module is no private use)."""
    tree = ast.parse(source)
    own = _own_names(tree)
    aliases = _module_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if not node.level and parts[0] != "zarrdb" and any(map(_private, parts)):
                found.append((node.lineno, node.module))
            for alias in node.names:
                if _private(alias.name) and f"{node.module}.{alias.name}" not in modules:
                    found.append((node.lineno, alias.name))
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and getattr(base.func, "id", None) == "super":
                continue
            if isinstance(base, ast.Name) and base.id in aliases:
                found.append((node.lineno, node.attr))  # a module's private name
            elif node.attr not in own:
                found.append((node.lineno, node.attr))
    return found


def test_the_scans_find_what_they_look_for():
    assert sql_calls("rows = db.execute('SELECT 1')\ndb.executescript(s)\nf(x)") == [1, 2]
    planted = """
import asyncio
from zarrdb import _core
from zarrdb._core import _library_info, Database
from zarr.storage._common import make_store_path

class Mine:
    def __init__(self):
        self._own = 1

def f(db, other: Mine, store):
    asyncio._get_running_loop()
    _core._hidden()
    other._own
    db._atomic_call(g)
    self._anything
    super()._also_fine()
"""
    assert sorted(private_uses(planted, {"zarrdb._core"})) == [
        (4, "_library_info"), (5, "zarr.storage._common"), (12, "_get_running_loop"),
        (13, "_hidden"), (15, "_atomic_call"),
    ]  # fmt: skip


def _package_modules() -> set[str]:
    """The package's modules by name, the compiled engine's included."""
    compiled = {
        f"zarrdb.{path.name.split('.')[0]}"
        for pattern in ("*.so", "*.pyd")
        for path in PACKAGE.glob(pattern)
    }
    return set(_modules()) | compiled


def test_only_the_engine_and_the_conformance_checker_run_sql_text():
    found = {
        name: sql_calls(path.read_text())
        for name, path in _modules().items()
        if name not in SQL_ALLOWED
    }
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_no_module_uses_another_modules_private_names():
    modules = _package_modules()
    found = set()
    for name, path in _modules().items():
        if name != COMPAT:
            found.update((name, used) for _, used in private_uses(path.read_text(), modules))
    assert found - PRIVATE_ALLOWED == set()
    # An entry that no longer applies is removed, so that the list only shrinks.
    assert PRIVATE_ALLOWED - found == set()


@pytest.mark.skipif(not BENCHMARKS.is_dir(), reason="the benchmarks are not beside the tests")
def test_the_benchmarks_use_no_private_names():
    modules = _package_modules()
    found = {
        f"{path.name}:{line}: {name}"
        for path in sorted(BENCHMARKS.glob("*.py"))
        for line, name in private_uses(path.read_text(), modules)
    }
    assert found == set()


def test_the_package_is_where_the_scans_look():
    assert (PACKAGE / "_compat.py").is_file()
    assert {"zarrdb._compat", "zarrdb.conformance", "zarrdb._core"} <= _package_modules()
