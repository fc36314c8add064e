"""The package's modules import each other without a circle, counting every import: at the top,
inside functions and under `TYPE_CHECKING` (a type-only circle still ties two modules' designs
together). The package root, which re-exports the public names, is left out.

The package is read where Python imports it from (project.helpers.PACKAGE)."""

from __future__ import annotations

import ast

from project.helpers import package_modules


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its text."""
    modules = package_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]], leave_out: str = "zarrdb") -> list[list[str]]:
    """Every module that can reach itself, with one path back to it."""
    found = []
    for start in sorted(graph):
        if start == leave_out:
            continue
        stack = [(start, [start])]
        seen = {start}
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == leave_out:
                    continue
                if nxt == start:
                    found.append(path + [start])
                    stack.clear()
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert len(graph) > 40
    assert "zarrdb._open_file" in graph["zarrdb.store"]
    assert "zarrdb" in graph["zarrdb._store_maintenance"]  # imported inside a function
    assert "zarrdb.cli.stores" in graph["zarrdb.cli.outputs"]  # under TYPE_CHECKING


def test_a_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph, leave_out="none") == [["a", "b", "c", "a"], ["b", "c", "a", "b"],
                                                ["c", "a", "b", "c"]]


def test_no_module_of_the_package_imports_itself_back():
    assert circles(import_graph()) == []
