"""The timeline itself as Parquet: the canonical columns and dtypes, with the trace's metadata.

Storage is the timeline core's (:func:`tracer.files.storage.write_timeline_parquet`): plain zstd Parquet that
pandas, pyarrow, DuckDB and Spark read, tracer's metadata (GPU, process and thread names, source format,
schema version) as JSON in the Arrow schema's key-value metadata under ``tracer``; ``tracer summary`` and
every other command read the file back as the same timeline.
"""

from __future__ import annotations

from pathlib import Path

from tracer.exporters import ExportResult, ProgressFn, tracer_version
from tracer.files.storage import write_timeline_parquet
from tracer.timeline import Timeline


def write(timeline: Timeline, dest: Path, *, final: Path, progress: ProgressFn | None = None) -> ExportResult:
    """Write ``timeline`` to ``dest`` as a Parquet timeline."""
    if progress:
        progress("parquet", 0, len(timeline.events))
    write_timeline_parquet(timeline, dest, extra_meta={"exported_by": f"tracer {tracer_version()}"})
    if progress:
        progress("parquet", len(timeline.events), len(timeline.events))
    kinds = timeline.events["kind"].astype(str).value_counts()
    return ExportResult(format="parquet", path=final, counts={f"{k} rows": int(v) for k, v in kinds.items()})
