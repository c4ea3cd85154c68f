"""A job: one trace per rank, read as one timeline on one clock.

The front door, :mod:`~tracer.job.load` (``load_job``, ``summarize_job``), imported without pandas, and what it
uses before pandas is imported: which file is which rank (:mod:`~tracer.job.ranks`), where the ranks are parsed
(:mod:`~tracer.job.scheduling`), a rank's file scanned in parts and the job's early scans (:mod:`~tracer.job.scan`),
the local worker processes' start (:mod:`~tracer.job.workers`, with their OS calls in :mod:`~tracer.job.oscalls`),
large results handed between workers through files (:mod:`~tracer.job.handoff`), and the parsed job's Parquet
dataset beside its traces, its layout and manifest (:mod:`~tracer.job.store`).

The pandas side, imported once the early scans have started: the ranks read and joined or summarised
(:mod:`~tracer.job.read`), run as tasks on Dask (:mod:`~tracer.job.task_graph`), each task one rank's work on a
worker (:mod:`~tracer.job.rank_tasks`), the dataset's partitions read and written (:mod:`~tracer.job.partitions`),
each rank's summary results kept beside its partition (:mod:`~tracer.job.kept_results`);
and the clock fix read from matched collectives (:mod:`~tracer.job.clocks`).

May import: :mod:`tracer.analysis`, :mod:`tracer.parsers`, :mod:`tracer.files`, :mod:`tracer.timeline`, and the
root's helpers (errors, sigterm, _blas); never the explain, export, record, CLI or dashboard layers.
"""
