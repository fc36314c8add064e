"""The seams between zarrdb's modules, read from their source: SQL text is run only by the
engine (and the conformance checker), and no module uses another's private names; what zarrdb
needs of another project's private API goes through zarrdb._compat.

The package is read where Python imports it from (src/ in a checkout, site-packages against a
wheel); the benchmarks are read where the checkout has them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from project.helpers import PACKAGE, package_modules
from zarrdb import _compat

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


def _attribute_reads(tree: ast.AST) -> list[tuple[int, ast.expr, str]]:
    """(line, object, name) for each attribute read: `x.name`, and `getattr(x, "name", ...)`."""
    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            reads.append((node.lineno, node.value, node.attr))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            reads.append((node.lineno, node.args[0], node.args[1].value))
    return reads


def private_uses(
    source: str,
    modules: set[str] = frozenset(),
    package_names: set[str] | None = None,
    hooks: set[str] = frozenset(),
) -> list[tuple[int, str]]:
    """(line, name) for each private name of another module `source` uses: imported by name,
    imported from another project's private module, or read (as an attribute or through
    getattr) of an imported module, or of an object whose class the module does not define;
    of `super()` (a base's own: no class of the package reaches its base's private names); of
    `self` and `cls` when no module of the package defines the name (`package_names`: so
    inherited from another project, or from the compiled engine). A hook (`hooks`: a name
    another project calls, that the package may define) read of any other object is that
    project's, even where the module defines it too. `modules`: the package's module names
    (importing a private module is no private use)."""
    tree = ast.parse(source)
    own = _own_names(tree)
    aliases = _module_aliases(tree)
    found = []
    for line, base, name in _attribute_reads(tree):
        if not _private(name):
            continue
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            if package_names is not None and name not in own and name not in package_names:
                found.append((line, name))
        elif isinstance(base, ast.Call) and getattr(base.func, "id", None) == "super":
            found.append((line, name))
        elif isinstance(base, ast.Name) and base.id in aliases:
            found.append((line, name))  # a module's private name
        elif name not in own or name in hooks:
            found.append((line, name))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if not node.level and parts[0] != "zarrdb" and any(map(_private, parts)):
                found.append((node.lineno, node.module))
            for alias in node.names:
                if _private(alias.name) and f"{node.module}.{alias.name}" not in modules:
                    found.append((node.lineno, alias.name))
    return sorted(found)


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
    self._own
    self._elsewhere
    self._inherited
    super()._of_the_base()
    getattr(store, "_through_getattr", None)
    getattr(other, "_own")
    store._own_hook()

class Store:
    def _own_hook(self):
        self._own_hook()
"""
    assert private_uses(planted, {"zarrdb._core"}, {"_elsewhere"}, {"_own_hook"}) == [
        (4, "_library_info"), (5, "zarr.storage._common"), (12, "_get_running_loop"),
        (13, "_hidden"), (15, "_atomic_call"), (18, "_inherited"), (19, "_of_the_base"),
        (20, "_through_getattr"), (22, "_own_hook"),
    ]  # fmt: skip
    assert (18, "_inherited") not in private_uses(planted, {"zarrdb._core"})  # self unchecked


def _package_modules() -> set[str]:
    """The package's modules by name, the compiled engine's included."""
    compiled = {
        f"zarrdb.{path.name.split('.')[0]}"
        for pattern in ("*.so", "*.pyd")
        for path in PACKAGE.glob(pattern)
    }
    return set(package_modules()) | compiled


def test_only_the_engine_and_the_conformance_checker_run_sql_text():
    found = {
        name: sql_calls(path.read_text())
        for name, path in package_modules().items()
        if name not in SQL_ALLOWED
    }
    assert {name: lines for name, lines in found.items() if lines} == {}


def _package_names() -> set[str]:
    """Every name a Python module of the package defines (a class of the package is built
    from mixins in several modules: SQLiteStore's), and the hooks zarrdb._compat lists (names
    another project calls, that a class of the package defines or reads of itself)."""
    names = set().union(*(_own_names(ast.parse(path.read_text())) for path in package_modules().values()))
    return names | _hooks()


def _hooks() -> set[str]:
    """The names zarrdb._compat lists as other projects' hooks (its *_HOOKS tuples)."""
    hooks = {
        name for attr, value in vars(_compat).items() if attr.endswith("_HOOKS") for name in value
    }
    assert hooks, "zarrdb._compat lists no hooks: the scan would not know them"
    return hooks


def test_no_module_uses_another_modules_private_names():
    modules = _package_modules()
    names, hooks = _package_names(), _hooks()
    found = set()
    for name, path in package_modules().items():
        if name != COMPAT:
            found.update(
                (name, used) for _, used in private_uses(path.read_text(), modules, names, hooks)
            )
    assert found - PRIVATE_ALLOWED == set()
    # An entry that no longer applies is removed, so that the list only shrinks.
    assert PRIVATE_ALLOWED - found == set()


@pytest.mark.skipif(not BENCHMARKS.is_dir(), reason="the benchmarks are not beside the tests")
def test_the_benchmarks_use_no_private_names():
    modules = _package_modules()
    names, hooks = _package_names(), _hooks()
    found = {
        f"{path.name}:{line}: {name}"
        for path in sorted(BENCHMARKS.glob("*.py"))
        for line, name in private_uses(path.read_text(), modules, names, hooks)
    }
    assert found == set()


# A Python module longer than this does more than one job: split it by job.
MODULE_LINES_MAX = 500


def test_no_python_module_is_longer_than_the_limit():
    lengths = {
        name: len(path.read_text().splitlines()) for name, path in package_modules().items()
    }
    assert len(lengths) > 40 and max(lengths.values()) > MODULE_LINES_MAX // 2  # it read them
    assert {name: n for name, n in lengths.items() if n > MODULE_LINES_MAX} == {}


def test_the_package_is_where_the_scans_look():
    assert (PACKAGE / "_compat.py").is_file()
    assert {"zarrdb._compat", "zarrdb.conformance", "zarrdb._core"} <= _package_modules()
