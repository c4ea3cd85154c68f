"""Timelines put together: several traces (the ranks of a job) as one, and a timeline moved onto the Unix clock.

Each format keeps its own clock (docs/design.md, "Clocks"): Kineto's times are Unix nanoseconds (its
``baseTimeNanoseconds`` plus ``ts``), an nsys export's count from its session's start. :func:`align` moves a
timeline onto the Unix clock where its meta says how; :func:`concat` stacks timelines, each shifted by its
offset, with the categories merged and the result validated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from tracer.errors import UsageError
from tracer.timeline import (
    CLOCK_UNIX,
    COLUMNS,
    TIME_LIMIT_NS,
    Timeline,
    TraceMeta,
    build_events,
    empty_events,
    validate,
)


def _shift(events: pd.DataFrame, offset_ns: int, what: str) -> pd.DataFrame:
    if offset_ns == 0 or events.empty:
        return events
    lo = int(events["start_ns"].min()) + offset_ns
    hi = int(events["end_ns"].max()) + offset_ns
    if lo <= -TIME_LIMIT_NS or hi >= TIME_LIMIT_NS:
        raise UsageError(what, f"shifting by {offset_ns} ns puts times beyond ±2**62 ns")
    out = events.copy(deep=False)
    out["start_ns"] = events["start_ns"].to_numpy() + np.int64(offset_ns)
    out["end_ns"] = events["end_ns"].to_numpy() + np.int64(offset_ns)
    return out


def align(timeline: Timeline) -> Timeline:
    """``timeline`` on the Unix clock (ns since 1970-01-01 UTC): unchanged where it is on it already, shifted by
    ``meta.clock_offset_ns`` where its clock has a known offset; refused (one line) where its clock is unknown."""
    meta = timeline.meta
    if meta.clock == CLOCK_UNIX:
        return timeline
    if meta.clock_offset_ns is None:
        raise UsageError(meta.source or "timeline", f"its clock ({meta.clock or 'unknown'}) has no known offset "
                         "to Unix time, so it cannot be lined up with other traces")
    events = _shift(timeline.events, meta.clock_offset_ns, meta.source or "timeline")
    return Timeline(events, replace(meta, clock=CLOCK_UNIX, clock_offset_ns=0))


def concat(
    timelines: Sequence[Timeline],
    *,
    ranks: Sequence[int] | None = None,
    offsets: Sequence[int] | None = None,
) -> Timeline:
    """One timeline holding all of ``timelines``' rows, in time order.

    ``ranks``: the rank each timeline's rows get (default: as they are). ``offsets``: ns added to each
    timeline's times (default 0; :func:`align` first to put traces of different clocks on one). Names merge
    into one category; the meta keeps the first timeline's format and names, every GPU and process name, and
    each part's own meta under ``extra["parts"]``.
    """
    parts = list(timelines)
    if ranks is not None and len(ranks) != len(parts):
        raise ValueError("concat: one rank per timeline")
    if offsets is not None and len(offsets) != len(parts):
        raise ValueError("concat: one offset per timeline")
    if not parts:
        return Timeline(empty_events(), TraceMeta(format=""))
    # an empty part adds no rows, and its categories' dtype may differ from a parsed trace's: left out
    # (one is kept, so that a concat of empties is an empty timeline)
    keep = [i for i, t in enumerate(parts) if len(t.events)] or [0]
    metas = [t.meta for t in parts]  # every part's meta is kept, empty or not
    parts = [parts[i] for i in keep]
    ranks = [ranks[i] for i in keep] if ranks is not None else None
    offsets = [offsets[i] for i in keep] if offsets is not None else None
    frames = []
    for i, t in enumerate(parts):
        ev = _shift(t.events, int(offsets[i]) if offsets is not None else 0, t.meta.source or f"timeline {i}")
        if ranks is not None:
            ev = ev.copy(deep=False)
            ev["rank"] = np.full(len(ev), ranks[i], dtype=np.int16)
        frames.append(ev)
    columns: dict[str, object] = {}
    for col, dtype in COLUMNS.items():
        values = [f[col] for f in frames]
        if dtype == "category":  # open categories (name): merged, not turned into strings
            columns[col] = pd.Categorical(union_categoricals([pd.Categorical(v) for v in values]))
        elif isinstance(dtype, pd.CategoricalDtype):
            if all(v.dtype == dtype for v in values):  # (as every parser leaves them: join the codes, no strings)
                codes = np.concatenate([v.cat.codes.to_numpy() for v in values])
                columns[col] = pd.Categorical.from_codes(codes, dtype=dtype)
            else:
                columns[col] = pd.Categorical(np.concatenate([v.astype(str).to_numpy() for v in values]),
                                              dtype=dtype)
        else:
            columns[col] = pd.concat(values, ignore_index=True).astype(dtype)
    events = build_events(columns)
    meta = concat_meta(metas, keep)
    return Timeline(validate(events, meta.source), meta)


def concat_meta(metas: Sequence[TraceMeta], keep: Sequence[int]) -> TraceMeta:
    """The meta :func:`concat` gives timelines of ``metas``, of which those at ``keep`` hold rows: the first
    of those's format and names, every GPU and process name, and each part's own meta under
    ``extra["parts"]``. (Also what a job's summary combined from its ranks' results names its job by.)"""
    kept = [metas[i] for i in keep]
    first = kept[0]
    meta = TraceMeta(
        format=first.format,
        source=first.source,
        clock=first.clock if all(m.clock == first.clock for m in kept) else "",
        clock_offset_ns=None,
    )
    for m in kept:
        meta.gpu_names.update({k: v for k, v in m.gpu_names.items() if k not in meta.gpu_names})
        meta.process_names.update(m.process_names)
        meta.thread_names.update(m.thread_names)
    meta.extra["parts"] = [m.to_dict() for m in metas]
    return meta
