#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh machine, then lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install --quiet --disable-pip-version-check -r requirements.txt

# Debian packages: GNU patch (the build applies its upstream patches with it) and the three browser engines the
# site's tests drive: Chromium, Firefox ESR, WebKitGTK (WebKitWebDriver with its MiniBrowser) on an Xvfb display.
# Playwright cannot download browsers here; these are Debian's builds.
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v patch >/dev/null || missing+=(patch)
[ -x /usr/bin/firefox-esr ] || missing+=(firefox-esr)
[ -x /usr/bin/WebKitWebDriver ] || missing+=(webkit2gtk-driver)
command -v Xvfb >/dev/null || missing+=(xvfb)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "tests/run.sh: missing Debian packages: ${missing[*]}; install them (as root)" >&2
    exit 1
  fi
fi

# Firefox ESR 140, which students still run beside the newer ESR apt installs: Debian's package unpacked into .cache/
# (apt cannot hold two versions of one package). Its streams and BiDi differ from the newer ESR's.
ff140=.cache/firefox-esr-140
if [ ! -x "$ff140/usr/lib/firefox-esr/firefox-esr" ]; then
  esr140() { apt-cache madison firefox-esr | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep '^140\.' | sort -V | tail -1; }
  version=$(esr140 || true)
  if [ -z "$version" ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    version=$(esr140 || true)
  fi
  if [ -z "$version" ]; then
    echo "tests/run.sh: Debian offers no firefox-esr 140 (apt-cache madison firefox-esr)" >&2
    exit 1
  fi
  mkdir -p .cache/debs "$ff140"
  (cd .cache/debs && apt-get download -qq "firefox-esr=$version" 2>/dev/null)
  dpkg -x .cache/debs/firefox-esr_"${version//:/%3a}"_*.deb "$ff140"
fi

# puppeteer-core (drives Firefox over WebDriver BiDi, tests/site/engines.py) and axe-core (the accessibility
# tests), pinned in package-lock.json.
npm ci --no-fund --no-audit --loglevel=error

python -m ruff check .
# Every upstream patch still applies to the pinned sources (lists every mismatch, not only the first).
python build.py --check-patches
python -m pytest "$@"
