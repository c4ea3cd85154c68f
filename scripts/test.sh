#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, then run them all, in parallel: `./scripts/test.sh [pytest args]`.
# - a virtual environment in .venv with the CPU build of torch (fast; a GPU is never needed for the tests)
# - Debian's chromium for the dashboard's browser tests (installed only if missing, and only as root)
set -euo pipefail
cd "$(dirname "$0")/.."
# chromium (network and dpkg: mostly waiting) installs in the background while pip fills .venv; it is waited for,
# and its log shown if it failed, before pytest starts
apt_pid=
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian's chromium for the browser tests (in the background) ..."
  apt_log=$(mktemp)
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >"$apt_log" 2>&1 &
  apt_pid=$!
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# torch first and pinned: 2.13.0 resolves to a local CPU wheel here; the project's own range (torch>=2.2)
# is then already satisfied, so pip downloads no multi-GB CUDA build.
pip_install() {  # quiet on success, the whole log on failure
  local log; log=$(mktemp)
  if ! .venv/bin/pip install -q --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v "is ignored" "$log" >&2; rm -f "$log"; exit 1
  fi
  rm -f "$log"
}
pip_install torch==2.13.0
# Until 0.1.0 the distribution was called `tracer` (a name another project holds on PyPI). An editable install of
# it left in .venv would keep mapping the old top-level names dashboard and scenarios: remove it, once.
if grep -qs '"editable": *true' .venv/lib/python*/site-packages/tracer-*.dist-info/direct_url.json; then
  .venv/bin/pip uninstall -q -y tracer
fi
pip_install -e '.[test]'
./scripts/check.sh
if [ -n "$apt_pid" ]; then
  if ! wait "$apt_pid"; then
    cat "$apt_log" >&2
    echo "warning: could not install chromium; browser tests will fail under CI" >&2
  fi
  rm -f "$apt_log"
fi
# In parallel (pytest-xdist): a worker per core. (It was a worker more than the cores, for the tests that wait on
# the processes they start; most of those now run the command in-process, and the processes left keep a core busy
# themselves: the third worker on 2 cores cost ~15% more CPU for no shorter run.)
# TRACER_TEST_WORKERS=N runs N workers; 0 runs the tests one after another in this process.
exec .venv/bin/python -m pytest -n "${TRACER_TEST_WORKERS:-$(nproc)}" "$@"
