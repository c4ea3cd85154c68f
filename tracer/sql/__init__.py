"""SQL over timelines (``tracer sql``): DuckDB, in-process and read-only, over views of the canonical timeline
(:mod:`~tracer.sql.session`; the views are docs/sql.md's).

May import: :mod:`tracer.analysis`, :mod:`tracer.parsers`, :mod:`tracer.files`, :mod:`tracer.timeline` and
:mod:`tracer.errors`. Importing this package does not import DuckDB: a session does, when it opens.
"""

from tracer.sql.session import VIEWS, Partitions, Session, SqlError, query

__all__ = ["VIEWS", "Partitions", "Session", "SqlError", "query"]
