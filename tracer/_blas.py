"""numpy's OpenBLAS held to one thread in tracer's own process.

OpenBLAS starts a thread per core when numpy is imported, and each busy-waits for work for a while before it
sleeps: on a 16-core host that is ~2 CPU-s burnt by every ``tracer`` command (measured: the main process of a
job's first open, 3.6 → 1.6 CPU-s; docs/performance.md), on a node that may be training. tracer's own analyses
do no linear algebra, so one thread loses nothing there. Not called where a scenario runs in tracer's process
(``tracer record SCENARIO``): its CPU matmuls may use the same OpenBLAS where numpy and torch share one.
"""

from __future__ import annotations

import os
import sys

#: read by OpenBLAS once, when numpy loads it
_VARIABLE = "OPENBLAS_NUM_THREADS"


def quiet_blas() -> None:
    """Import numpy with OpenBLAS on one thread; the environment is left as it was, so that a program that
    ``tracer record`` runs keeps its own threads. Nothing where numpy is already imported, or where the user
    chose a thread count."""
    if "numpy" in sys.modules or _VARIABLE in os.environ:
        return
    os.environ[_VARIABLE] = "1"
    try:
        import numpy  # noqa: F401 - imported for its side effect: OpenBLAS reads the variable now
    finally:
        del os.environ[_VARIABLE]
