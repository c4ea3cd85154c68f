#!/usr/bin/env bash
# The release checks, run by scripts/test.sh before pytest (each prints one line when clean):
# lint (ruff), types (mypy), the layers (import-linter), declared dependencies (check_deps), the docs site (mkdocs --strict: a broken link, anchor or API reference fails, into
# site/), the sdist and the wheel built, checked, installed into a fresh venv and smoke-run (scripts/check_wheel.sh).
# Run alone with `./scripts/check.sh` once scripts/test.sh has set up .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
step() { local t0=$SECONDS; "$@"; echo "check: $* ok ($((SECONDS - t0)) s)"; }
step "$py" -m ruff check --quiet .
step "$py" -m mypy --no-error-summary  # types: strict on tracer/, files and levels in pyproject.toml
step "$py" scripts/check_deps.py  # every third-party import is declared (the wheel smoke borrows .venv's packages)
# Output only on failure. (mkdocs' own --quiet is no use: it hides warnings from --strict, which then passes.)
quiet() {
  local log rc=0; log=$(mktemp)
  "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then cat "$log" >&2; fi
  rm -f "$log"; return "$rc"
}
step quiet .venv/bin/lint-imports  # the layers, no cycles, private modules (pyproject.toml, docs/design.md)
# (NO_MKDOCS_2_WARNING: Material's end-of-life banner, printed on every build otherwise)
NO_MKDOCS_2_WARNING=1 step quiet "$py" -m mkdocs build --strict --site-dir site
step scripts/check_wheel.sh
