"""Imported first by the forkserver that the dashboard's parses are forked from (:mod:`tracer.dashboard.parsing`):
numpy with OpenBLAS on one thread (:func:`tracer._blas.quiet_blas`: the forkserver is a fresh interpreter), then what
every parse runs, so that each child starts with it imported."""

from tracer._blas import quiet_blas

quiet_blas()

import tracer.dashboard.parsing  # noqa: E402, F401 - imported for the children
import tracer.files.storage  # noqa: E402, F401
import tracer.parsers.kineto  # noqa: E402, F401
import tracer.parsers.load  # noqa: E402, F401
import tracer.parsers.nsys  # noqa: E402, F401
import tracer.parsers.parquet  # noqa: E402, F401
