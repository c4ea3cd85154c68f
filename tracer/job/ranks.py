"""Which rank each trace of a job is, first match wins: the trace's own ``distributedInfo.rank`` (Kineto writes
it when the process group existed before the profiler started), a rank in the file name (``rank-3``, ``rank3``,
``rank_3``), else the file's place in the sorted list. Two traces claiming one rank are refused: a job has one
trace per rank, and a silent merge of two would double its figures. The parts of one process's recording are one
rank (:func:`group_parts`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer.errors import UsageError

if TYPE_CHECKING:  # (pandas: see tracer.job.load)
    from tracer.timeline import Timeline, TraceMeta

#: A rank in a file name: ``rank-3``, ``rank3``, ``rank_3``, ``RANK.3`` (not ``frank3``).
RANK_IN_NAME = re.compile(r"(?<![a-z])rank[-_.]?(\d{1,5})(?!\d)", re.IGNORECASE)
#: ``pid42-part2.json.gz``: the second part of one process's recording (tracer/record/capture.py), not another rank.
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


def _trace_rank(meta: TraceMeta) -> int | None:
    info = meta.extra.get("distributed_info")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if type(rank) is int and 0 <= rank < 2**15 else None


def one_rank(timeline: Timeline, path: str | os.PathLike[str]) -> Timeline:
    """``timeline`` itself, where it holds one rank: joined into a job, all its rows take that job's rank for it,
    so a file that holds several ranks already (an nsys report of several processes, tracer's export of a job)
    would have them merged into one (its GPUs' figures summed, their streams one lane): refused in one line."""
    ranks = timeline.events["rank"].to_numpy()
    if len(ranks) and ranks.min() != ranks.max():
        n = len(set(ranks.tolist()))
        raise UsageError(str(path), f"holds {n} ranks already (a whole job in one file): read it without --job")
    return timeline


def rank_of(meta: TraceMeta, path: str | os.PathLike[str], index: int) -> tuple[int, str]:
    """The rank of the trace ``path`` whose meta is ``meta``, ``index``-th of its job, and where it came from (see
    the module's docstring)."""
    rank = _trace_rank(meta)
    if rank is not None:
        return rank, "distributedInfo"
    rank = rank_in_name(path)
    return (rank, "file name") if rank is not None else (index, "order")


def assign_ranks(paths: Sequence[Path], timelines: Sequence[Any]) -> list[RankTrace]:
    """The rank of each trace (see the module's docstring; ``timelines``: anything with its ``meta``); refuses
    two traces of one rank."""
    out = [RankTrace(Path(path), *rank_of(t.meta, path, i)) for i, (path, t) in enumerate(zip(paths, timelines))]
    seen: dict[int, Path] = {}
    for r in out:
        if r.rank in seen:
            other = seen[r.rank]
            raise UsageError(str(r.path), f"is rank {r.rank} ({r.rank_from}), as is "
                             f"{other.name if other.name != r.path.name else other}: a job holds one trace per rank")
        seen[r.rank] = r.path
    return out
