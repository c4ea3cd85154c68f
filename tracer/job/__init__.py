"""A job: one trace per rank, read as one timeline on one clock.

Which file is which rank and the clocks (:mod:`~tracer.job.load`), the ranks parsed in parallel on Dask
(:mod:`~tracer.job.parallel`), large results handed between workers through files (:mod:`~tracer.job.handoff`),
the parsed job kept as a Parquet dataset beside its traces (:mod:`~tracer.job.store`), and the clock fix read
from matched collectives (:mod:`~tracer.job.clocks`).

May import: :mod:`tracer.analysis`, :mod:`tracer.parsers`, :mod:`tracer.files`, :mod:`tracer.timeline`, and the
root's helpers (errors, sigterm, _blas); never the explain, export, record, CLI or dashboard layers.
"""
