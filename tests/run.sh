#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh machine, then lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pinned packages (requirements.txt) go into the project's own environment, .venv/ (ignored by git), never into
# the Python that runs this script (PYTHON, else python, else python3). pip runs only when requirements.txt changed
# since .venv's last install (its sha256 in .venv/requirements.sha256); a .venv whose Python no longer runs, or one
# left without pip by an interrupted first run, is made again.
base=${PYTHON:-$(command -v python || command -v python3 || true)}
if [ -z "$base" ]; then
  echo "tests/run.sh: no python or python3 on PATH (Python >= 3.11 with pip)" >&2
  exit 1
fi
py=.venv/bin/python
if ! "$py" -c 'import pip' 2>/dev/null; then
  rm -rf .venv
  if ! "$base" -m venv .venv >/dev/null; then
    rm -rf .venv
    # Debian's python3 has no ensurepip without python3-venv
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      "$base" -m venv .venv
    else
      echo "tests/run.sh: '$base -m venv .venv' failed: install python3-venv (as root)" >&2
      exit 1
    fi
  fi
fi
# How long each part took, printed at the end (also when a part failed).
start=$SECONDS
times=()
noted() {  # noted LABEL SECONDS
  times+=("$(printf '%-24s %5d s' "$1" "$2")")
}
timed() {  # timed LABEL COMMAND...: run it (a failure stops the script, as set -e does), note its seconds
  local t0=$SECONDS
  "${@:2}"
  noted "$1" $((SECONDS - t0))
}
report() {
  echo "tests/run.sh: time per part"
  printf '  %s\n' "${times[@]}" "$(printf '%-24s %5d s' "all" $((SECONDS - start)))"
}
trap report EXIT

system_packages() {
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

  # puppeteer-core (drives Firefox over WebDriver BiDi, py/testkit/engines.py) and axe-core (the accessibility
  # tests), pinned in package-lock.json.
  npm ci --no-fund --no-audit --loglevel=error
}

# The Debian packages and npm install beside pip (different downloads, no shared lock).
system_log=$(mktemp)
(t0=$SECONDS; system_packages; echo $((SECONDS - t0)) > "$system_log.seconds") > "$system_log" 2>&1 &
system=$!
# What every site build reuses (Pyodide, the wheels, their bytecode, the minified scripts) prepared into .cache/
# beside pip too, deflated as the tests build (tests/site/conftest.py): else the browser tests' first build does it
# while both test workers wait on it.
prepare_log=$(mktemp)
(t0=$SECONDS; SITE_DEFLATE=zlib "$base" build.py --prepare; echo $((SECONDS - t0)) > "$prepare_log.seconds") > "$prepare_log" 2>&1 &
prepare=$!
python_packages() {
  want=$(sha256sum requirements.txt | cut -d' ' -f1)
  if [ "$(cat .venv/requirements.sha256 2>/dev/null)" != "$want" ]; then
    # --no-compile: Python compiles what the tests import, once, as they import it; byte-compiling every module of
    # the reference libraries' 2.3 GB (torch, transformers, SAELens and theirs) doubled pip's time.
    "$py" -m pip install --quiet --disable-pip-version-check --no-compile -r requirements.txt
    echo "$want" > .venv/requirements.sha256
  fi
}
timed "installs: pip" python_packages
# Each part waits only for what it needs: the unit tests run while apt and the site cache still install.
system_ready() {
  [ -n "$system" ] || return 0
  if ! wait $system; then
    cat "$system_log" >&2
    exit 1
  fi
  cat "$system_log"
  noted "installs: apt, npm" "$(cat "$system_log.seconds")"
  rm -f "$system_log" "$system_log.seconds"
  system=
}
site_cache_ready() {
  [ -n "$prepare" ] || return 0
  if ! wait $prepare; then
    cat "$prepare_log" >&2
    exit 1
  fi
  noted "installs: site cache" "$(cat "$prepare_log.seconds")"
  rm -f "$prepare_log" "$prepare_log.seconds"
  prepare=
  # Every upstream patch still applies to the pinned sources (lists every mismatch, not only the first); after the
  # preparing build, which holds .cache/.
  timed "patches" "$py" build.py --check-patches
}

# Everything below runs in .venv's Python; the tests' builds and subprocesses use it too (sys.executable).
timed "lint" "$py" -m ruff check .

# The tests in three parts, each across the cores (pytest-xdist; TEST_WORKERS=1 runs one process); every part runs
# even when an earlier one failed. Arguments naming tests (not only options) run just those, in one part.
workers=${TEST_WORKERS:-2}
# One BLAS (and torch) thread per worker: the workers already fill the cores, and OpenBLAS's spinning threads on a
# busy machine make NumPy's products many times slower (the lab test's CPython training: 4 s alone, minutes so).
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
failed=0
part() {  # part LABEL PYTEST-ARGS...
  local t0=$SECONDS status=0
  # --durations: the slowest tests of each part, printed after it (where CI time goes)
  "$py" -m pytest -n "$workers" --durations=12 "${@:2}" || status=$?
  noted "$1" $((SECONDS - t0))
  [ $status = 0 ] || failed=1
}
named=0
for arg in "$@"; do
  case $arg in -*) ;; *) named=1 ;; esac
done
if [ $named = 1 ]; then
  system_ready
  site_cache_ready
  part "tests" "$@"
else
  part "unit tests (slm)" "$@" tests --ignore=tests/playground --ignore=tests/site
  system_ready  # Chromium
  part "app tests (panel serve)" "$@" tests/playground
  site_cache_ready
  part "browser tests (site)" "$@" tests/site
fi
exit $failed
