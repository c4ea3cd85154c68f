"""Benchmark: what a fresh interpreter pays to import what a job's first open needs, and whether that host
caches its bytecode.

A first open on many cores is short enough (~2 s) that the imports of its main process are a large part of it.
An interpreter that finds no cached bytecode (``__pycache__/*.pyc``) for a module compiles its source at every
import; it writes the cache back unless ``PYTHONDONTWRITEBYTECODE`` is set or the folder is read-only. pip
compiles what it installs, unless told ``--no-compile``: a user's install has the cache, a container built with
``--no-compile`` and ``PYTHONDONTWRITEBYTECODE=1`` never does. This prints, for each package, whether its
``__init__``'s bytecode is cached, then the best of 3 fresh interpreters for each import line.

    python bench/imports.py
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

PACKAGES = ("numpy", "pandas", "pyarrow", "dask", "msgspec", "typer", "tracer")
LINES = (
    "pass",
    "import numpy",
    "import numpy, pandas",
    "import numpy, pandas, pyarrow.parquet",
    "import dask.delayed, dask.local",
    "import tracer.cli",
    "import tracer.job.load, tracer.analysis.summary",
)


def cached(package: str) -> str:
    """Whether ``package``'s ``__init__`` has its bytecode cached where this interpreter looks for it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return "not found"
    pyc = importlib.util.cache_from_source(spec.origin)
    folder = os.path.dirname(spec.origin)
    state = "cached" if os.path.exists(pyc) else "NOT cached"
    return f"{state}, folder {'writable' if os.access(folder, os.W_OK) else 'read-only'}"


def best_of(line: str, runs: int = 3) -> float:
    """The fastest of ``runs`` fresh interpreters that run ``line``, seconds."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", line], check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    print(f"python {sys.version.split()[0]}, {len(os.sched_getaffinity(0))} cores; "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}, "
          f"PYTHONPYCACHEPREFIX={os.environ.get('PYTHONPYCACHEPREFIX', '')!r}")
    for p in PACKAGES:
        print(f"  {p:10s} {cached(p)}")
    print(f"| {'fresh interpreter runs':50s} | best of 3, s |")
    print(f"| {'-' * 50} | ---: |")
    for line in LINES:
        print(f"| {line:50s} | {best_of(line):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
