"""A run directory's derived files: its ``timeline.parquet`` and ``summary.json``, made from its record (the
trace and meta.json; :mod:`tracer.files.rundir` defines the layout) with today's parsers.

The recorder calls :func:`derive` once the record is written; ``tracer.record.scenario.refresh_run`` calls it on
an old run, so that a parser fix reaches it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracer.analysis.summary import summarize
from tracer.errors import UsageError
from tracer.files.atomic import write_bytes_atomic
from tracer.files.rundir import (
    SUMMARY,
    TIMELINE,
    TRACE_CANDIDATES,
    TRACES_DIR,
    RunMeta,
    dumps,
    file_sizes,
    find_rank_traces,
    find_trace,
    read_meta,
    write_meta,
)
from tracer.files.storage import write_timeline_parquet
from tracer.job.load import load_job
from tracer.parsers import load_trace
from tracer.timeline import Timeline


@dataclass
class Derived:
    """What :func:`derive` made."""

    path: Path
    #: the trace it was derived from
    trace: Path
    timeline: Timeline
    summary: dict[str, Any]
    meta: RunMeta


def derive(run_dir: str | os.PathLike[str], *, stages: dict[str, float] | None = None) -> Derived:
    """Make the run's ``timeline.parquet`` and ``summary.json`` from its trace with today's parsers, and bring
    meta.json's ``files`` up to date. Each file is replaced atomically.

    The recorder calls it once the trace and meta.json are written; ``tracer.record.scenario.refresh_run`` calls it on
    an old run. With ``stages``, the seconds spent parsing and writing are added to it (``parse``, ``write``)
    and meta.json's ``stages_s`` becomes it.
    """
    path = Path(run_dir)
    meta = read_meta(path)
    trace = find_trace(path)
    ranks = find_rank_traces(path) if trace is None else []
    if trace is None and not ranks:
        raise UsageError(path, f"holds no trace to derive the timeline from (none of {', '.join(TRACE_CANDIDATES)}, "
                               f"nor {TRACES_DIR}/)")
    t0 = time.perf_counter()
    if trace is not None:
        timeline = load_trace(trace, cache=False)
        timeline.meta.source = trace.name  # the run is moved and shared: the name inside it, not a path here
    else:
        timeline = load_job(ranks, load=lambda p: load_trace(p, cache=False))
        timeline.meta.source = TRACES_DIR
        for part in timeline.meta.extra.get("ranks", {}).values():
            part["source"] = f"{TRACES_DIR}/{Path(part['source']).name}"
        trace = path / TRACES_DIR
    summary = summarize(timeline)
    t1 = time.perf_counter()
    write_timeline_parquet(timeline, path / TIMELINE)
    write_bytes_atomic(path / SUMMARY, dumps(summary))
    if timeline.meta.gpu_names and not meta.gpu_names:
        # a scenario knows its GPUs before it runs; a recorded command or block learns them from its trace
        meta.gpu_names = {str(k): v for k, v in sorted(timeline.meta.gpu_names.items())}
        meta.devices = meta.devices or [f"cuda:{k}" for k in sorted(timeline.meta.gpu_names)]
    meta.files = file_sizes(path)
    if stages is not None:
        stages["parse"] = t1 - t0
        stages["write"] = time.perf_counter() - t1
        meta.stages_s = dict(stages)
    write_meta(path, meta)
    return Derived(path, trace, timeline, summary, meta)


__all__ = ["Derived", "derive"]
