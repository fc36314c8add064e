#!/usr/bin/env bash
# The browser package's checks, from a fresh clone: its Node packages from the lockfile, the
# store's Node tests (fixtures written by zarrdb's Python: ZARRDB_PYTHON, default
# .venv/py3.12/bin/python) and the viewer in headless Chromium (Debian's package, installed
# with apt-get when /usr/bin/chromium is missing; never a downloaded browser).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
    as_root=""
    [ "$(id -u)" -eq 0 ] || as_root=sudo
    $as_root apt-get update -qq
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
npm ci --no-audit --no-fund
npm test
npm run test:browser
