"""What cannot be one job, refused, and what a reader of a job's figures must know, noted (issue 38.4).

- A rank whose trace ran far from the others' (3.6 years, seen: a trace of another run in the folder) is refused
  in one line: the job's span, and every figure over it, would be nonsense. Ranks of one job run together: the
  bound is an hour, or ten times the longest rank's span where that is more (:data:`FOREIGN_MIN_NS`).
- A gap in the rank numbers ("ranks 0, 1, 3: rank 2 missing") is noted: the figures are of the ranks read.
- Each rank's own implausible times (:mod:`tracer.timeline.plausible`) are noted with the rank's number: a job's
  meta keeps its ranks' notes only under ``parts``, which no one reads.

Imported where a job is joined (it brings pandas, which a job's scan workers start without: :mod:`tracer.job.load`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tracer.errors import UsageError
from tracer.job.ranks import RankTrace
from tracer.timeline.plausible import duration_text, implausible_note

if TYPE_CHECKING:
    from tracer.timeline import TraceMeta

#: Ranks of one job whose traces lie further apart than this (or than :data:`FOREIGN_SPANS` times the longest
#: rank's span, where that is more) are not one job.
FOREIGN_MIN_NS = 3_600 * 10**9
FOREIGN_SPANS = 10

Bounds = tuple[int, int]


def rank_bounds(item: Any) -> Bounds | None:
    """A rank's (first start, last end), of its timeline or of its results (:class:`tracer.analysis.ranked.
    RankResults`, whose ``span`` part holds them); None where it has no rows."""
    parts = getattr(item, "parts", None)
    if isinstance(parts, dict):
        span = parts.get("span")
        return span[0] if span else None
    events = item.events
    if events.empty:
        return None
    return int(events["start_ns"].min()), int(events["end_ns"].max())


def check_job(meta: TraceMeta, found: Sequence[RankTrace], bounds: Sequence[Bounds | None], *,
              subset: bool) -> None:
    """Refuse ranks that cannot be of one job; add the job's notes to ``meta``. ``found`` and ``bounds``: each
    rank, in rank order; ``subset``: the ranks were chosen (``--ranks``), so gaps are meant."""
    _refuse_foreign(found, bounds)
    notes = list(meta.extra.get("notes") or [])
    ranks = sorted({r.rank for r in found})
    missing = sorted(set(range(ranks[-1] + 1)) - set(ranks)) if len(ranks) > 1 and ranks[0] >= 0 else []
    if missing and not subset:
        notes.append(f"ranks {_numbers(ranks)}: rank{'s' if len(missing) > 1 else ''} {_numbers(missing)} missing "
                     "(no trace of it given, or left out): the figures are of the ranks read")
    parts = meta.extra.get("parts") or []
    if len(parts) == len(found):
        for r, part in zip(found, parts):
            found_odd = (part.get("extra") or {}).get("implausible") if isinstance(part, dict) else None
            if isinstance(found_odd, dict):
                notes.append(f"rank {r.rank}: {implausible_note(found_odd)}")
    if notes:
        meta.extra["notes"] = notes


def _refuse_foreign(found: Sequence[RankTrace], bounds: Sequence[Bounds | None]) -> None:
    """One line for the ranks that ran apart from the job's others (the largest group of ranks that ran
    together; of two equal groups, neither is the job)."""
    have = sorted(((b[0], b[1], r) for r, b in zip(found, bounds) if b is not None), key=lambda x: (x[0], x[2].rank))
    if len(have) < 2:
        return
    allowed = max(FOREIGN_MIN_NS, FOREIGN_SPANS * max(e - s for s, e, _ in have))
    groups: list[list[tuple[int, int, RankTrace]]] = [[have[0]]]
    reach = have[0][1]
    for s, e, r in have[1:]:
        if s - reach > allowed:
            groups.append([])
        groups[-1].append((s, e, r))
        reach = max(reach, e)
    if len(groups) == 1:
        return
    sizes = sorted((len(g) for g in groups), reverse=True)
    if sizes[0] == sizes[1]:  # no group is the job
        apart = groups[1][0][0] - max(e for _, e, _ in groups[0])
        a, b = sorted(groups[:2], key=lambda g: min(x[2].rank for x in g))
        raise UsageError(_common(found), f"ranks {_numbers([x[2].rank for x in a])} and "
                                         f"{_numbers([x[2].rank for x in b])} ran {duration_text(apart)} apart: not "
                                         "one job (traces of other runs, or clocks off by that much?)")
    job = max(groups, key=len)
    start, end = job[0][0], max(e for _, e, _ in job)
    stray = next(g for g in groups if g is not job)
    s, e, r = stray[0]
    after = s > end
    apart = s - end if after else start - max(x[1] for x in stray)
    others = [x[2].rank for x in job]
    more = f" (and {len(have) - len(job) - 1} more)" if len(have) - len(job) > 1 else ""
    raise UsageError(r.path, f"rank {r.rank}{more} ran {duration_text(apart)} {'after' if after else 'before'} the "
                             f"job's other ranks ({_numbers(others)}): not a rank of this job (a trace of another run, "
                             "or a clock off by that much?); leave its trace out")


def _common(found: Sequence[RankTrace]) -> str:
    return os.path.commonpath([str(r.path) for r in found]) if found else ""


def _numbers(values: Sequence[int]) -> str:
    """Rank numbers as runs: "0, 1, 3", "0–5, 7–9"."""
    runs: list[list[int]] = []
    for v in sorted(values):
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{g[0]}–{g[-1]}" if len(g) > 2 else ", ".join(map(str, g)) for g in runs)
