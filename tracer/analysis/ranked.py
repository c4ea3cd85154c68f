"""A job's summary made from its ranks' results, without the job in one frame.

Every per-GPU, per-stream and per-thread figure belongs to one rank, so each rank is analysed where it was read
(a Dask worker: :func:`rank_results`), and only small results come back: rows of figures, per-name sums, each
GPU's busy intervals (for how many GPUs were busy at once) and the rank's communication rows (for the
collectives matched across ranks). :func:`combine` makes the job's :class:`~tracer.analysis.summary.Summary`
from them, equal to ``analyze`` of the ranks' timelines concatenated (``tests/test_job_summary.py`` checks it,
figure for figure). Each registered analysis says how it splits (``Analysis.per_rank`` and ``combine``); one that
does not makes :func:`combinable` false, and the caller reads the job whole instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tracer.analysis import registry
from tracer.analysis.overlap import shared_work
from tracer.analysis.summary import Summary
from tracer.timeline import Timeline, TraceMeta, empty_events


@dataclass
class RankResults:
    """One rank's part of a job's summary: every analysis's ``per_rank`` result, and the rank's meta."""

    rank: int
    rows: int  # the rank's intervals (0: it adds nothing to the job's frame, nor its meta's format)
    meta: TraceMeta
    parts: dict[str, Any] = field(default_factory=dict)


def combinable() -> bool:
    """Whether every registered analysis can be combined from per-rank results."""
    return all(a.combine is not None for a in registry.analyses())


def rank_results(timeline: Timeline, rank: int) -> RankResults:
    """Every registered analysis's per-rank result for ``timeline``, one rank's (its ``rank`` column says
    ``rank``), the lazy ones (ranges) too: a job's text shows them."""
    with shared_work():  # (the GPU rows and each GPU's sets found once for all the analyses)
        parts = {a.name: a.per_rank(timeline) for a in registry.analyses() if a.per_rank is not None}
    return RankResults(rank, int(len(timeline.events)), timeline.meta, parts)


def combine(results: Sequence[RankResults], meta: TraceMeta) -> Summary:
    """The summary of the job whose ranks gave ``results`` (any order), named by ``meta`` (the job's, as
    :func:`tracer.timeline.combine.concat_meta` makes it)."""
    ordered = sorted(results, key=lambda r: r.rank)
    job = Timeline(empty_events(), meta)  # (the meta, for the analyses that read nothing else)
    parts = {a.name: a.combine([r.parts.get(a.name) for r in ordered], job)  # type: ignore[misc]
             for a in registry.analyses()}
    multi = len({r.rank for r in ordered if r.rows}) > 1
    return Summary(parts, multi_rank=multi)
