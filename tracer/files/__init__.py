"""Files on disk, before any parsing: which format a file is (:mod:`~tracer.files.formats`), finding runs and
traces in a folder (:mod:`~tracer.files.discover`), the run directory's layout and its typed ``meta.json``
(:mod:`~tracer.files.rundir`), timelines stored as Parquet (:mod:`~tracer.files.storage`), writing a file so that
it is never half-written (:mod:`~tracer.files.atomic`), the content keys a cache must match
(:mod:`~tracer.files.digests`), Nsight Systems' enums that both the nsys reader and
the nsys exporter use (:mod:`~tracer.files.nsys_enums`), and the bounds on reading a file: the memory a trace may
inflate to (:mod:`~tracer.files.memory`), bounded SQLite reads (:mod:`~tracer.files.sqlite_bounds`) and the
limits a user sets in the environment (:mod:`~tracer.files.env_limits`), and results kept on disk that only this
user's tracer reads back (:mod:`~tracer.files.signed`).

May import: :mod:`tracer.timeline` and :mod:`tracer.errors`; nothing that parses, analyses or shows.
"""
