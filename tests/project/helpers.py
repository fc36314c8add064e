"""What the tests about the project share: where the package is, its modules, and the Pythons
its wheels are built for.

The package is read where Python imports it from: src/ in a checkout, site-packages where the
tests run against an installed wheel."""

from __future__ import annotations

from pathlib import Path

import zarrdb

PACKAGE = Path(zarrdb.__file__).resolve().parent

# The CPython versions zarrdb supports, and their wheel tags.
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
CP = [f"cp{v.replace('.', '')}" for v in PYTHONS]


def package_modules() -> dict[str, Path]:
    """The package's Python modules: dotted name -> file."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out
