"""The clock fix of a job's ranks (``--clock-fix``): each rank's clock moved by what its matched collectives
imply (:func:`tracer.analysis.comm.collectives`, ``clock_fix_ns``), since hosts' clocks differ by their NTP
error. An estimate, so never applied unless asked for."""

from __future__ import annotations

from dataclasses import dataclass

from tracer.analysis.comm import collectives, shift_ranks
from tracer.timeline import Timeline


@dataclass(frozen=True)
class ClockFix:
    """What :func:`fix_clocks` did."""

    #: the timeline with its ranks moved (the one given where none moved)
    timeline: Timeline
    #: by rank, ns it was moved by: 0 none, None where its matched collectives contradict one another
    fixes: dict[int, int | None]


def fix_clocks(timeline: Timeline) -> ClockFix:
    """``timeline`` with each rank moved by the collectives' clock fix; meta's ``clock_fix_ns`` says by how
    much (the ranks moved only)."""
    fixes = {k.rank: k.clock_fix_ns for k in collectives(timeline.events).ranks}
    moved = {r: f for r, f in fixes.items() if f}
    if not moved:
        return ClockFix(timeline, fixes)
    timeline.meta.extra["clock_fix_ns"] = {str(r): f for r, f in moved.items()}
    return ClockFix(Timeline(shift_ranks(timeline.events, moved), timeline.meta), fixes)
