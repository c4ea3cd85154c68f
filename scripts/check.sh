#!/usr/bin/env bash
# The release checks, run by scripts/test.sh before pytest (each prints one line when clean):
# lint (ruff). Run alone with `./scripts/check.sh` once scripts/test.sh has set up .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
step() { local t0=$SECONDS; "$@"; echo "check: $* ok ($((SECONDS - t0)) s)"; }
step "$py" -m ruff check --quiet .
step "$py" -m mypy --no-error-summary  # types: strict on tracer/, files and levels in pyproject.toml
