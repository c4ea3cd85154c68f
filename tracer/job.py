"""A job's traces read as one timeline: one trace per rank (torch.profiler on each process of a torchrun job,
HTA's ``rank-N`` layout, tracer's own ``rank<N>-pid<P>`` captures), each on its own rank, on one clock.

Which rank a trace is, first match wins: the trace's own ``distributedInfo.rank`` (Kineto writes it when the
process group existed before the profiler started), a rank in the file name (``rank-3``, ``rank3``, ``rank_3``),
else the file's place in the sorted list. Two traces claiming one rank are refused: a job has one trace per
rank, and a silent merge of two would double its figures.

Clocks: every trace is put on the Unix clock (:func:`tracer.timeline.align`). Kineto traces of PyTorch ≥ 2.0 and
nsys exports are; a trace whose clock is unknown is refused in one line when the job has more than one trace
(there would be no true way to line it up). Hosts' clocks still differ by their NTP error, up to milliseconds;
correcting that from matched collectives is the multi-rank issue's work and is not done here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracer.errors import UsageError
from tracer.timeline import Timeline, align, concat

#: A rank in a file name: ``rank-3``, ``rank3``, ``rank_3``, ``RANK.3`` (not ``frank3``).
RANK_IN_NAME = re.compile(r"(?<![a-z])rank[-_.]?(\d{1,5})(?!\d)", re.IGNORECASE)
#: ``pid42-part2.json.gz``: the second part of one process's recording (tracer/capture.py), not another rank.
PART_SUFFIX = re.compile(r"-part\d+(?=\.json(\.gz)?$)")
MAX_RANK = 2**15 - 1  # the timeline keeps rank as int16


@dataclass(frozen=True)
class RankTrace:
    """One trace of a job and where its rank came from."""

    path: Path
    rank: int
    rank_from: str  # "distributedInfo", "file name", "order"


def rank_in_name(path: str | os.PathLike[str]) -> int | None:
    """The rank a file name gives (``trace_rank-3.json.gz`` -> 3), or None."""
    found = RANK_IN_NAME.findall(Path(path).name)
    rank = int(found[-1]) if len(set(found)) == 1 else None
    return rank if rank is not None and rank <= MAX_RANK else None


def group_parts(paths: Sequence[Path]) -> list[list[Path]]:
    """Files grouped by the process that wrote them: ``pid42.json.gz`` with ``pid42-part2.json.gz`` … (a
    schedule's cycles, a pause for the script's own profiler) are one process's trace, in part order."""
    groups: dict[str, list[Path]] = {}
    for p in paths:
        groups.setdefault(str(p.parent / PART_SUFFIX.sub("", p.name)), []).append(p)

    def part(p: Path) -> int:
        m = re.search(r"-part(\d+)\.json", p.name)
        return int(m.group(1)) if m else 1

    return [sorted(g, key=part) for g in groups.values()]


def _trace_rank(timeline: Timeline) -> int | None:
    info = timeline.meta.extra.get("distributed_info")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if type(rank) is int and 0 <= rank < 2**15 else None


def assign_ranks(paths: Sequence[Path], timelines: Sequence[Timeline]) -> list[RankTrace]:
    """The rank of each trace (see the module's docstring); refuses two traces of one rank."""
    out: list[RankTrace] = []
    for i, (path, t) in enumerate(zip(paths, timelines)):
        rank, source = _trace_rank(t), "distributedInfo"
        if rank is None:
            rank, source = rank_in_name(path), "file name"
        if rank is None:
            rank, source = i, "order"
        out.append(RankTrace(Path(path), rank, source))
    seen: dict[int, Path] = {}
    for r in out:
        if r.rank in seen:
            raise UsageError(str(r.path), f"is rank {r.rank} ({r.rank_from}), as is {seen[r.rank].name}: "
                             "a job holds one trace per rank")
        seen[r.rank] = r.path
    return out


def load_job(
    paths: Sequence[str | os.PathLike[str]],
    *,
    load: Callable[[Path], Timeline] | None = None,
) -> Timeline:
    """The traces ``paths`` (the ranks of one job) as one timeline: rows marked with their rank, all on the Unix
    clock. ``load`` reads one trace (default: :func:`tracer.parsers.load_trace`); ``meta.extra["ranks"]`` says
    which file each rank came from and why it is that rank."""
    if load is None:
        from tracer.parsers import load_trace

        load = load_trace
    given = [Path(p) for p in paths]
    if not given:
        raise UsageError("", "a job needs at least one trace")
    groups = group_parts(given)
    files = [g[0] for g in groups]
    timelines = []
    for g in groups:
        parts = [load(p) for p in g]
        timelines.append(parts[0] if len(parts) == 1 else concat(parts))
    ranks = assign_ranks(files, timelines)
    if len(timelines) > 1:
        timelines = [align(t) for t in timelines]
    order = sorted(range(len(ranks)), key=lambda i: ranks[i].rank)
    job = concat([timelines[i] for i in order], ranks=[ranks[i].rank for i in order])
    job.meta.source = os.path.commonpath([str(p) for p in given]) if len(given) > 1 else str(given[0])
    job.meta.extra["ranks"] = {
        str(ranks[i].rank): {"source": str(ranks[i].path), "rank_from": ranks[i].rank_from} for i in order
    }
    return job
