#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh machine, then lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet --disable-pip-version-check -r requirements.txt

# Browser tests drive Debian's Chromium (Playwright cannot download its own browser here).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "tests/run.sh: /usr/bin/chromium is missing; install Debian's chromium package (as root)" >&2
    exit 1
  fi
fi

# The build applies its upstream patches with GNU patch (Debian's package `patch`).
if ! command -v patch >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patch >/dev/null
  else
    echo "tests/run.sh: GNU patch is missing; install Debian's patch package (as root)" >&2
    exit 1
  fi
fi

python -m ruff check .
# Every upstream patch still applies to the pinned sources (lists every mismatch, not only the first).
python build.py --check-patches
python -m pytest "$@"
