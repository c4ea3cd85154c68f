"""Imported first by a forkserver's worker processes (tracer.job.workers): numpy with OpenBLAS on one thread there
too (:func:`tracer._blas.quiet_blas`), since the forkserver is a fresh interpreter that inherits none of the CLI's
imports."""

from tracer._blas import quiet_blas

quiet_blas()
