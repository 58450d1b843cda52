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

# axe-core for the accessibility tests (version in tests/package.json), into the ignored tests/node_modules/.
npm install --prefix tests --no-package-lock --no-audit --no-fund --silent

python -m ruff check .
python -m pytest "$@"
