#!/usr/bin/env python3
"""Refresh vendor/sqlite3/ from an npm package that carries the official SQLite amalgamation.

Usage:
    python scripts/update_sqlite.py                       # the pinned default below
    python scripts/update_sqlite.py --package @appthreat/sqlite3 --version 9.0.2 \
        --expect-version 3.53.4
    python scripts/update_sqlite.py --tarball appthreat-sqlite3-9.0.2.tgz

The script runs `npm pack` (unless --tarball is given), finds the folder
`deps/sqlite-amalgamation-NNNNNNN/` inside it, copies sqlite3.c, sqlite3.h and sqlite3ext.h
unchanged into vendor/sqlite3/, and rewrites VERSION and SHA256SUMS. Compare the printed
checksums and SQLITE_SOURCE_ID with the upstream release before committing.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

FILES = ("sqlite3.c", "sqlite3.h", "sqlite3ext.h")
DEFAULT_PACKAGE = "@appthreat/sqlite3"
DEFAULT_PACKAGE_VERSION = "9.0.2"
VENDOR = Path(__file__).resolve().parent.parent / "vendor" / "sqlite3"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def header_defines(header: Path) -> dict[str, str]:
    text = header.read_text(encoding="utf-8", errors="replace")
    found = {}
    for name in ("SQLITE_VERSION", "SQLITE_SOURCE_ID"):
        m = re.search(rf'^#define {name}\s+"([^"]+)"', text, re.MULTILINE)
        if not m:
            raise SystemExit(f"{header}: no #define {name}; is this an amalgamation header?")
        found[name] = m.group(1)
    return found


def npm_pack(package: str, version: str, workdir: Path) -> Path:
    spec = f"{package}@{version}"
    print(f"npm pack {spec}", file=sys.stderr)
    out = subprocess.run(
        ["npm", "pack", spec, "--silent"], cwd=workdir, check=True, capture_output=True, text=True
    ).stdout.strip().splitlines()
    return workdir / out[-1]


def find_amalgamation(root: Path) -> Path:
    candidates = sorted(root.glob("**/sqlite-amalgamation-*"))
    candidates = [c for c in candidates if c.is_dir() and all((c / f).is_file() for f in FILES)]
    if len(candidates) != 1:
        raise SystemExit(f"expected one sqlite-amalgamation-* folder in the package, found {candidates}")
    return candidates[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default=DEFAULT_PACKAGE)
    parser.add_argument("--version", default=DEFAULT_PACKAGE_VERSION, help="npm package version")
    parser.add_argument(
        "--tarball", type=Path, help="an already downloaded tarball of --package@--version"
    )
    parser.add_argument("--expect-version", help="fail unless SQLITE_VERSION equals this")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        tarball = args.tarball.resolve() if args.tarball else npm_pack(args.package, args.version, tmpdir)
        with tarfile.open(tarball) as tar:
            tar.extractall(tmpdir / "unpacked", filter="data")
        source = find_amalgamation(tmpdir / "unpacked")
        defines = header_defines(source / "sqlite3.h")
        if args.expect_version and defines["SQLITE_VERSION"] != args.expect_version:
            raise SystemExit(
                f"package has SQLite {defines['SQLITE_VERSION']}, expected {args.expect_version}"
            )
        VENDOR.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.copyfile(source / name, VENDOR / name)

    sums = "".join(f"{sha256(VENDOR / name)}  {name}\n" for name in FILES)
    (VENDOR / "SHA256SUMS").write_text(sums)
    origin = f"{args.package}@{args.version}"
    (VENDOR / "VERSION").write_text(
        f"{defines['SQLITE_VERSION']}\n"
        f"source_id: {defines['SQLITE_SOURCE_ID']}\n"
        f"from: {origin} ({source.name}/)\n"
    )
    print(f"SQLite {defines['SQLITE_VERSION']}  {defines['SQLITE_SOURCE_ID']}")
    print(sums, end="")
    print("Update the provenance line in vendor/sqlite3/LICENSE.md if the source changed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
