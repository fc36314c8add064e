#!/usr/bin/env bash
# Runs the test suite on CPython 3.14 for real, on a machine that has no 3.14 of its own:
#
#   1. makes (or reuses) a Debian unstable root with debootstrap (minbase) and, inside it,
#      Debian's python3.14, python3.14-dev, python3.14-venv, gcc and make;
#   2. builds the sdist from a copy of the checkout (without version control, environments and
#      build output) inside the root, with 3.14;
#   3. builds a cp314 wheel from that sdist inside the root;
#   4. installs the wheel with the test extra (numpy, zarr and the rest from PyPI) into a fresh
#      virtual environment inside the root, checks that zarrdb is imported from its site-packages
#      with the bundled SQLite, and runs the test suite from a copy of tests/ against it
#      (ZARRDB_TEST_INSTALLED=1, as scripts/build_wheels.sh and cibuildwheel do).
#
#   scripts/py314.sh [PYTEST ARGS]      e.g. scripts/py314.sh -x -q tests/cli (only tests/cli:
#                                       the whole of tests/ unless the arguments name a part)
#
# Needs root (debootstrap, chroot and mounts; the mounts live in a mount namespace of their own,
# so nothing stays mounted when the script ends) and the network to Debian's package archive
# and PyPI. debootstrap is installed with apt-get if it is missing.
#
# ZARRDB_PY314_ROOT   where the root is (default ~/.cache/zarrdb/py314-root); it is made once
#                     and reused; delete it (or ZARRDB_PY314_FRESH=1) to make it again
# ZARRDB_DEBIAN_MIRROR  the Debian archive debootstrap uses (default: debootstrap's own)
# ZARRDB_PY314_REUSE_VENV=1  keep the test virtual environment of the previous run and only
#                     reinstall the new wheel into it (no dependencies fetched): saves about
#                     90 s when re-running one test file after a change, e.g.
#                     ZARRDB_PY314_REUSE_VENV=1 scripts/py314.sh -q tests/reliability/test_x.py
#
# Not part of .ci/run (making the root and the 3.14 suite cost too much of CI's time): run it
# before every release-tagging commit (docs/development.md says how long each part takes).
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

ROOT=${ZARRDB_PY314_ROOT:-$HOME/.cache/zarrdb/py314-root}
PACKAGES="python3.14 python3.14-dev python3.14-venv gcc make"
started=$SECONDS

step() { printf '\n==> %s\n' "$*"; }
fail() { printf '\npy314: FAILED: %s\n' "$*" >&2; exit 1; }
took() { printf '    took %d s\n' "$(($SECONDS - $1))"; }

[ "$(uname -s)" = Linux ] || fail "this script makes a Debian root and must run on Linux"
[ "$(id -u)" = 0 ] || fail "debootstrap, chroot and mount need root"
ROOT=$(realpath -m "$ROOT")
case $ROOT in
    / | /bin | /boot | /dev | /etc | /home | /lib* | /proc | /root | /run | /sbin | /sys | /tmp | /usr | /var)
        fail "ZARRDB_PY314_ROOT=$ROOT: choose a folder of its own (it is deleted when made again)" ;;
esac
READY=$ROOT/.zarrdb-py314-ready

# The environment inside the root: only what is needed, so that nothing of this machine's pip
# or Python settings leaks in. This machine's certificate bundle is copied in (pip in the root
# then trusts what pip here trusts).
ROOT_ENV=(HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8
    DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_ROOT_USER_ACTION=ignore)
for name in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    if [ -n "${!name:-}" ]; then ROOT_ENV+=("$name=${!name}"); fi
done

# in_root DIR COMMAND...: runs COMMAND chrooted in DIR, with /proc, /dev and /sys mounted in a
# private mount namespace (they disappear with it, whatever happens).
in_root() {
    local dir=$1
    shift
    mkdir -p "$dir/etc/ssl/certs"
    cp /etc/resolv.conf "$dir/etc/resolv.conf"
    if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
        cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
    fi
    unshare --mount --propagation private -- sh -c '
        dir=$1; shift
        mount -t proc proc "$dir/proc" &&
        mount --rbind /dev "$dir/dev" &&
        mount --rbind /sys "$dir/sys" &&
        exec chroot "$dir" "$@"' sh "$dir" env -i "${ROOT_ENV[@]}" "$@"
}

# --------------------------------------------------------------------------------------------
if [ "${ZARRDB_PY314_FRESH:-}" = 1 ]; then
    rm -rf "$ROOT"
fi
if [ -f "$READY" ] && in_root "$ROOT" python3.14 -c 'import venv, sysconfig' 2>/dev/null; then
    step "root: reusing $ROOT (made $(cat "$READY"))"
else
    step "root: making a Debian unstable root (minbase) in $ROOT"
    t0=$SECONDS
    if ! command -v debootstrap >/dev/null 2>&1; then
        echo "    installing debootstrap"
        apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null \
            || fail "apt-get install debootstrap"
    fi
    mkdir -p "$(dirname "$ROOT")"
    rm -rf "$ROOT.part"
    # The packages come with the base system (debootstrap resolves their dependencies), so no
    # apt-get runs in the root: Debian's archive as this machine reaches it may be a fixed
    # snapshot, whose Release file apt-get refuses once it has expired (debootstrap does not).
    # shellcheck disable=SC2086  # (the mirror is optional: debootstrap's own default otherwise)
    debootstrap --variant=minbase --include="${PACKAGES// /,}" unstable "$ROOT.part" \
        ${ZARRDB_DEBIAN_MIRROR:-} > "$ROOT.debootstrap.log" 2>&1 \
        || { tail -n 30 "$ROOT.debootstrap.log"; fail "debootstrap (log: $ROOT.debootstrap.log)"; }
    rm -rf "$ROOT.part/var/cache/apt/archives/"*.deb
    rm -rf "$ROOT"
    mv "$ROOT.part" "$ROOT"
    date -u '+%Y-%m-%d %H:%M UTC' > "$READY"
    took "$t0"
fi
PY_VERSION=$(in_root "$ROOT" python3.14 -c 'import sys; print(sys.version.split()[0])')
GCC_VERSION=$(in_root "$ROOT" gcc -dumpfullversion)
echo "    interpreter: /usr/bin/python3.14 in the root, CPython $PY_VERSION (Debian unstable); gcc $GCC_VERSION"

# --------------------------------------------------------------------------------------------
# Everything of one run lives in /build inside the root, made anew each time.
BUILD=$ROOT/build
REUSE_VENV=
if [ "${ZARRDB_PY314_REUSE_VENV:-}" = 1 ] && [ -x "$BUILD/venv/bin/python" ]; then
    REUSE_VENV=1
    find "$BUILD" -mindepth 1 -maxdepth 1 ! -name venv -exec rm -rf {} +
else
    rm -rf "$BUILD"
fi
mkdir -p "$BUILD/tree" "$BUILD/run"

step "sdist: python3.14 -m build --sdist, in the root, from a copy of the checkout"
t0=$SECONDS
tar -C "$REPO" -cf - \
    --exclude=./.git --exclude='./.venv*' --exclude=./venv --exclude=./build \
    --exclude=./dist --exclude=./site --exclude=./wheelhouse --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude=.pytest_cache --exclude=.hypothesis --exclude=.benchmarks --exclude=bench-results \
    --exclude=.mypy_cache --exclude=.ruff_cache --exclude='src/zarrdb/_core.c' --exclude='*.so' \
    . | tar -C "$BUILD/tree" -xf -
# The build tools are kept in the root between runs.
in_root "$ROOT" sh -c '[ -x /opt/tools/bin/python ] || python3.14 -m venv /opt/tools' \
    || fail "the tools' virtual environment"
in_root "$ROOT" /opt/tools/bin/python -m pip install --quiet --upgrade pip build \
    || fail "pip install build"
in_root "$ROOT" /opt/tools/bin/python -m build --sdist --outdir /build/dist /build/tree \
    > "$BUILD/sdist.log" 2>&1 || { tail -n 40 "$BUILD/sdist.log"; fail "building the sdist"; }
SDIST=$(cd "$BUILD/dist" && echo zarrdb-*.tar.gz)
[ -f "$BUILD/dist/$SDIST" ] || fail "no sdist in $BUILD/dist"
echo "    $SDIST"
took "$t0"

step "wheel from the sdist: pip wheel $SDIST, in the root"
t0=$SECONDS
in_root "$ROOT" /opt/tools/bin/python -m pip wheel --no-deps --wheel-dir /build/wheel "/build/dist/$SDIST" \
    > "$BUILD/wheel.log" 2>&1 || { tail -n 60 "$BUILD/wheel.log"; fail "building the wheel"; }
WHEEL=$(cd "$BUILD/wheel" && echo zarrdb-*.whl)
case $WHEEL in
    zarrdb-*-cp314-cp314-linux_*.whl) echo "    $WHEEL" ;;
    *) fail "expected a cp314 wheel, got $WHEEL" ;;
esac
took "$t0"

t0=$SECONDS
if [ -n "$REUSE_VENV" ]; then
    step "install $WHEEL into the previous run's virtual environment (ZARRDB_PY314_REUSE_VENV=1)"
    in_root "$ROOT" /build/venv/bin/python -m pip install --quiet --no-deps --force-reinstall \
        "/build/wheel/$WHEEL" || fail "pip install $WHEEL"
else
    step "install $WHEEL with the test extra into a fresh virtual environment in the root"
    in_root "$ROOT" python3.14 -m venv /build/venv || fail "the test virtual environment"
    in_root "$ROOT" /build/venv/bin/python -m pip install --quiet --upgrade pip || fail "pip upgrade"
    in_root "$ROOT" /build/venv/bin/python -m pip install --quiet "/build/wheel/$WHEEL[test]" \
        || fail "pip install $WHEEL[test]"
fi
in_root "$ROOT" /build/venv/bin/python -c '
import importlib.metadata as m
print("    " + ", ".join(f"{n} {m.version(n)}" for n in ("numpy", "zarr", "pytest")))'
# The tests (and pytest's settings in pyproject.toml) without the rest of the source tree.
cp -R "$REPO/tests" "$BUILD/run/tests"
cp "$REPO/pyproject.toml" "$BUILD/run/"
find "$BUILD/run/tests" -name __pycache__ -prune -exec rm -rf {} +
EXPECTED_SQLITE=$(head -n 1 vendor/sqlite3/VERSION)
in_root "$ROOT" sh -c 'cd /build/run && exec /build/venv/bin/python - "$0"' "$EXPECTED_SQLITE" <<'EOF' \
    || fail "the installed wheel"
import os, sys, sysconfig
import zarrdb
from zarrdb import _core

site = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
for f in (zarrdb.__file__, _core.__file__):
    path = os.path.realpath(f)
    print(f"    imported {path}")
    assert any(path.startswith(d + os.sep) for d in site), f"{path} is not in site-packages {site}"
print(f"    zarrdb {zarrdb.__version__}, SQLite {zarrdb.sqlite_version}, bundled={bool(_core.BUNDLED_SQLITE)}")
assert sys.version_info[:2] == (3, 14), sys.version
assert zarrdb.sqlite_version == sys.argv[1], (zarrdb.sqlite_version, sys.argv[1])
assert _core.BUNDLED_SQLITE
EOF
took "$t0"

step "test suite on CPython $PY_VERSION against the installed wheel (copy of tests/ in /build/run)"
t0=$SECONDS
# The whole of tests/ unless the arguments name a part of it.
TARGET=tests
for arg in "$@"; do
    case $arg in tests | tests/*) TARGET= ;; esac
done
in_root "$ROOT" sh -c 'cd /build/run && export ZARRDB_TEST_INSTALLED=1 && exec /build/venv/bin/python -m pytest -p no:cacheprovider "$@"' \
    sh ${TARGET:+"$TARGET"} "$@" || fail "the test suite on CPython $PY_VERSION"
took "$t0"

step "done in $((SECONDS - started)) s: CPython $PY_VERSION in $ROOT"
