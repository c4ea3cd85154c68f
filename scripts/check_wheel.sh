#!/usr/bin/env bash
# The wheel check, one step of scripts/check.sh: build the sdist and the wheel (the wheel from the sdist, as
# `python -m build` does), check both (twine check, check-wheel-contents), install the wheel into a fresh
# environment and smoke-run it from a temporary directory (scripts/smoke_wheel.py), so that nothing is imported
# from the checkout. Alone: `./scripts/check_wheel.sh` once scripts/test.sh has set up .venv.
#
# The fresh environment is a venv without pip whose only link to .venv is a .pth line naming .venv's
# site-packages: tracer itself comes from the wheel alone, its dependencies (torch, pandas, Dash ...) from .venv.
# A clean venv that installs them too took 2 min 56 s here (21 s for the venv, 2 min 35 s for 1.5 GB of
# dependencies, all from this machine's local index) against 4.5 s for this, under the same load; docs/packaging.md.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
py=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

quiet() {  # quiet on success, the whole log and the failing command on failure
  if ! "$@" >"$work/log" 2>&1; then
    cat "$work/log" >&2
    echo "check_wheel: failed: $*" >&2
    exit 1
  fi
}

# Built from a copy of the files git would commit: setuptools reads the SOURCES.txt an earlier build left in
# *.egg-info back in, so a build in place still ships a file whose package-data rule was deleted.
mkdir "$work/src"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done \
  | tar -c --null -T - -f - | tar -x -C "$work/src" -f -
# --no-isolation: the build uses .venv's setuptools (the test extra has it) instead of fetching one
quiet "$py" -m build --no-isolation --outdir "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/*.whl)
quiet "$py" -m twine check --strict "$work"/dist/*
quiet "$py" -m check_wheel_contents "$wheel"

"$py" -m venv --without-pip "$work/venv"  # the same Python as .venv, whose site-packages it reads
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
purelib "$py" >"$(purelib "$work/venv/bin/python")/deps-from-dot-venv.pth"
# --ignore-installed: .venv may hold an editable install of this project, which the .pth makes visible; the
# wheel goes into the fresh venv beside it, and .venv is never touched
quiet "$py" -m pip --python "$work/venv/bin/python" install --no-deps --no-index --ignore-installed \
  --disable-pip-version-check "$wheel"

# -I: neither PYTHONPATH nor the script's folder on sys.path; cwd outside the repository. Its lines (one per
# check) show only on failure, so that the step is one line in scripts/check.sh
cd "$work"
quiet env -u PYTHONPATH "$work/venv/bin/python" -I "$repo/scripts/smoke_wheel.py" "$wheel"
