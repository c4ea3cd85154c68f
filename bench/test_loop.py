"""How long the tests take: the quick loop and the whole suite, in parallel and (optionally) one after another.

    .venv/bin/python bench/test_loop.py                        # quick loop (-n 2), whole suite (-n cores+1)
    .venv/bin/python bench/test_loop.py --serial               # ... and the whole suite in one process (slow)
    .venv/bin/python bench/test_loop.py --only quick --repeat 3

Each row is one pytest run in a fresh child (``python -m pytest -q -p no:cacheprovider``): its wall time, the CPU
time of it and every process it started (user + system, from ``wait4``), and the counts pytest printed. Targets
(issue 35): the quick loop ≤ 90 s and the README's test command ≤ 6 min on a 2-core machine; the release checks
and the set-up are not in these rows (``scripts/check.sh`` prints its own times).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICK = ["-m", "not slow and not browser"]


def _run(args: list[str]) -> tuple[float, float, str]:
    """Wall s, CPU s (children included) and pytest's last line, for one run of pytest with ``args``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "tests"],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    return wall, cpu, re.sub(r"=+", "", last).strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["quick", "whole"], help="time one of the two")
    ap.add_argument("--serial", action="store_true", help="also the whole suite in one process (~14 min here)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=(os.cpu_count() or 1) + 1,
                    help="workers for the whole suite (default: cores + 1, as scripts/test.sh)")
    args = ap.parse_args()
    runs: list[tuple[str, list[str]]] = []
    if args.only in (None, "quick"):
        runs.append(("quick loop, -n 2", ["-n", "2", *QUICK]))
    if args.only in (None, "whole"):
        runs.append((f"whole suite, -n {args.workers}", ["-n", str(args.workers)]))
        if args.serial:
            runs.append(("whole suite, one process", []))
    print(f"{os.cpu_count()} cores; python {sys.version.split()[0]}")
    print(f"{'run':<28} {'wall s':>8} {'CPU s':>8}  pytest")
    for name, pytest_args in runs:
        for _ in range(args.repeat):
            wall, cpu, last = _run(pytest_args)
            print(f"{name:<28} {wall:8.1f} {cpu:8.1f}  {last}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
