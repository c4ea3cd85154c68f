"""A stored timeline read back: ``tracer export -o x.parquet``, a run directory's timeline.parquet (the Parquet
format's reader, :data:`tracer.files.formats.FORMATS`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracer.files.storage import read_timeline_parquet
from tracer.timeline import Timeline


def read_parquet(p: Path, **_: Any) -> Timeline:
    """A stored timeline (``tracer export -o x.parquet``, a run's timeline.parquet)."""
    timeline = read_timeline_parquet(p)
    # The stored source is the trace the timeline was first parsed from (on whatever machine); the summary and
    # every export name the file actually read, and keep the first one beside it.
    if timeline.meta.source and timeline.meta.source != str(p):
        timeline.meta.extra.setdefault("parsed_from", timeline.meta.source)
    timeline.meta.source = str(p)
    return timeline
