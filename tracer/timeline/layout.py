"""Where a timeline's rows are drawn: its lanes, their order and titles, and the tracks inside a lane.

A lane is one GPU stream of one rank (:class:`~tracer.timeline.LaneKey`) or one host thread of one rank
(:class:`ThreadKey`). The dashboard (:mod:`tracer.analysis.drawing`) and the exporters that lay a timeline out for a
viewer (Chrome/Perfetto JSON, NVTXT) all take their lanes from :func:`lay_out`, so that one trace reads the
same in every view; each adds only what is its own: the dashboard a compute ∩ copy band per GPU and sub-rows
by kind and nesting depth, the exporters a track per kind of work.

- Which lane: a row on a GPU (``device`` ≥ 0) goes to its (rank, device, stream), any other row to its
  (rank, pid, tid).
- Order: GPU lanes first, by (rank, device, stream); then host threads, by (rank, pid, tid). All GPUs together
  rather than rank by rank, so that the ranks' GPUs of a job can be read against each other.
- Titles: ``"GPU 0 · stream 7"`` and ``"thread 424 (python3)"`` (a thread name that already starts with
  ``"thread "``, as Kineto writes them, is kept as it is). In a timeline of several ranks every title begins
  with its rank, ``"rank 1 · GPU 0 · stream 7"``, ``"rank 1 · thread 424 (python3)"``; a one-rank timeline
  reads as it always did.

Inside a lane, two questions about nesting, answered in one order (:func:`nesting_order`: by start, the longer
first):

- :func:`nesting_depth`: how deep in its stack each interval sits; a drawing gives each level a row.
- :func:`sub_tracks`: which of several stacks each interval goes to so that on each the intervals nest or are
  disjoint; viewers that stack slices themselves (Perfetto, chrome://tracing) drop a slice that does not nest.

This module sits between the analysis and the views: it imports the timeline only, never the dashboard or the
exporters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from tracer.timeline import DeviceKey, LaneKey, TraceMeta, is_multi_rank, lane_title


class ThreadKey(NamedTuple):
    """One host thread of one rank."""

    rank: int
    pid: int
    tid: int


def rank_prefix(rank: int, multi_rank: bool) -> str:
    """What a title begins with: ``"rank 1 · "`` in a timeline of several ranks, else nothing."""
    return f"rank {rank} · " if multi_rank else ""


def thread_name(meta: TraceMeta, pid: int, tid: int) -> str:
    """A host thread for people: ``"thread 424 (python3)"``, or ``"thread 424"`` when the trace names it not.

    One format for every trace: Kineto already names its threads so (kept as they are), an nsys export says
    ``"python3"``, which becomes ``"thread 424 (python3)"``, so the Kineto and nsys traces of one process read
    alike.
    """
    name = meta.thread_names.get(f"{pid}:{tid}", "").strip()
    if name.startswith("thread "):
        return name
    return f"thread {tid} ({name})" if name else f"thread {tid}"


@dataclass(frozen=True)
class Lane:
    """One lane: a GPU stream or a host thread, of one rank."""

    index: int  # position in display order
    key: LaneKey | ThreadKey
    name: str  # without the rank: "GPU 0 · stream 7", "thread 424 (python3)"
    prefix: str  # "rank 1 · " in a timeline of several ranks, else ""

    @property
    def on_gpu(self) -> bool:
        return isinstance(self.key, LaneKey)

    @property
    def title(self) -> str:
        """The lane for people, rank included where the timeline has several: "rank 1 · GPU 0 · stream 7"."""
        return self.prefix + self.name

    @property
    def rank(self) -> int:
        return self.key.rank

    @property
    def device(self) -> int:
        """GPU index; -1 for a host thread."""
        return self.key.device if isinstance(self.key, LaneKey) else -1

    @property
    def stream(self) -> int:
        """CUDA stream; -1 for a host thread."""
        return self.key.stream if isinstance(self.key, LaneKey) else -1

    @property
    def pid(self) -> int:
        """The thread's process; -1 for a GPU stream (its rows' pid is whichever process launched them)."""
        return self.key.pid if isinstance(self.key, ThreadKey) else -1

    @property
    def tid(self) -> int:
        """The thread; -1 for a GPU stream."""
        return self.key.tid if isinstance(self.key, ThreadKey) else -1

    @property
    def device_key(self) -> DeviceKey | None:
        """The GPU this stream belongs to; None for a host thread."""
        return self.key.device_key if isinstance(self.key, LaneKey) else None


@dataclass(frozen=True, eq=False)  # (arrays inside: no element-wise ==)
class Layout:
    """A timeline's lanes in display order, and the lane of each of its rows."""

    lanes: tuple[Lane, ...]
    #: per row of the events (by position), the index of its lane in ``lanes``; -1 for rows not laid out
    lane_of_row: np.ndarray
    multi_rank: bool
    _members: list[np.ndarray] = field(default_factory=list, repr=False, compare=False)

    @property
    def devices(self) -> list[DeviceKey]:
        """The GPUs that have a lane, in display order."""
        return list(dict.fromkeys(ln.device_key for ln in self.lanes if ln.device_key is not None))

    def members(self) -> list[np.ndarray]:
        """Per lane, the positions of its rows, ascending (one stable sort for all lanes)."""
        if not self._members and self.lanes:
            code = self.lane_of_row.astype(_small_int(len(self.lanes) + 1))
            order = np.argsort(code, kind="stable")
            # where the rows of no lane (-1), of lane 0, 1, ... begin, and where the last ends
            bounds = np.searchsorted(code[order], np.arange(-1, len(self.lanes) + 1))
            self._members.extend(order[bounds[i + 1] : bounds[i + 2]] for i in range(len(self.lanes)))
        return self._members

    def keep(self, mask: np.ndarray) -> Layout:
        """Only the lanes where ``mask`` holds (renumbered in the same order); their rows elsewhere get -1."""
        mask = np.asarray(mask, dtype=bool)
        new = np.full(len(self.lanes) + 1, -1, dtype=np.int64)  # the last entry maps the -1 of no lane
        new[: len(self.lanes)][mask] = np.arange(int(mask.sum()))
        kept = (ln for ln, k in zip(self.lanes, mask) if k)
        lanes = tuple(Lane(i, ln.key, ln.name, ln.prefix) for i, ln in enumerate(kept))
        return Layout(lanes, new[self.lane_of_row], self.multi_rank)


def _small_int(n: int) -> type[np.signedinteger[Any]]:
    """The narrowest signed integer holding -1 … n (numpy sorts 16-bit keys by radix, far faster)."""
    return np.int16 if n < 2**15 else np.int32 if n < 2**31 else np.int64


def lay_out(
    events: pd.DataFrame, meta: TraceMeta, rows: np.ndarray | None = None, *, multi_rank: bool | None = None
) -> Layout:
    """The lanes of ``events``' rows (only those where ``rows`` is true, when given), in display order;
    ``multi_rank``: titled as a job's lanes are (each with its rank), or not (default: as ``events`` hold several
    ranks or one).

    Vectorised: each key column is factorised once and the codes combined, so a million rows cost a few
    hash passes, not a sort per lane.
    """
    n = len(events)
    multi = is_multi_rank(events) if multi_rank is None else multi_rank
    sel = np.ones(n, dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    pos = np.flatnonzero(sel) if rows is not None else None
    lane_of_row = np.full(n, -1, dtype=np.int64)

    def col(name: str) -> npt.NDArray[np.int64]:
        arr: np.ndarray = events[name].to_numpy()
        return (arr if pos is None else arr[pos]).astype(np.int64, copy=False)

    if (n if pos is None else pos.size) == 0:
        return Layout((), lane_of_row, multi)
    device = col("device")
    on_gpu = device >= 0
    host = ~on_gpu
    rank = col("rank")
    a = np.where(on_gpu, device, col("pid"))
    b = np.where(on_gpu, col("stream"), col("tid"))
    # mixed-radix code over (host?, rank, a, b), each factorised in sorted order: codes sort as the keys do
    code = host.astype(np.int64)
    for part in (rank, a, b):
        codes, uniques = pd.factorize(part, sort=True)
        width = max(len(uniques), 1)
        if int(code.max()) >= (2**62) // width:  # too many distinct keys for one int64: renumber first
            code = pd.factorize(code, sort=True)[0].astype(np.int64)
        code = code * width + codes
    lane, first_codes = pd.factorize(code, sort=True)
    # the first row of each lane gives its key
    first = np.zeros(len(first_codes), dtype=np.int64)
    first[lane[::-1]] = np.arange(lane.size)[::-1]
    lanes = []
    for i, r in enumerate(first.tolist()):
        prefix = rank_prefix(int(rank[r]), multi)
        key: LaneKey | ThreadKey
        if on_gpu[r]:
            key = LaneKey(int(rank[r]), int(a[r]), int(b[r]))
            name = lane_title(key, False)
        else:
            key = ThreadKey(int(rank[r]), int(a[r]), int(b[r]))
            name = thread_name(meta, key.pid, key.tid)
        lanes.append(Lane(i, key, name, prefix))
    if pos is None:
        lane_of_row = lane.astype(np.int64)
    else:
        lane_of_row[pos] = lane
    return Layout(tuple(lanes), lane_of_row, multi)


def nesting_order(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Indices that sort intervals by start, longest first among equal starts: parents before children."""
    return np.lexsort((-np.asarray(ends, dtype=np.int64), np.asarray(starts, dtype=np.int64)))


def nesting_depth(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many of the other intervals are open when each interval starts (0 = outermost).

    Exact for properly nested intervals of one thread (ranges, framework ops). Vectorised: the intervals that
    started before this one (in :func:`nesting_order`) minus those that ended at or before its start.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    n = s.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = nesting_order(s, e)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    ended = np.searchsorted(np.sort(e), s, side="right")
    depth: npt.NDArray[np.int64] = np.maximum(rank - ended, 0)
    return depth


def sub_tracks(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each interval, the index (0, 1, ...) of the sub-track it goes to, so that on every sub-track two
    intervals either do not overlap or one contains the other.

    Greedy first fit in :func:`nesting_order`: an interval goes to the first sub-track whose open intervals
    (those not yet ended at its start) all contain it. GPU streams normally need one track (work on a stream
    serialises), host threads too (a call stack), but not always: an annotation projected onto a stream can
    straddle kernel boundaries, Kineto's ranges can end after the op that opened them. Disjoint lanes, the
    common case, take a vectorised fast path.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    out = np.zeros(s.size, dtype=np.int64)
    if s.size < 2:
        return out
    order = nesting_order(s, e)
    so, eo = s[order], e[order]
    reach = np.maximum.accumulate(eo)
    if bool((so[1:] >= reach[:-1]).all()):
        return out  # no two intervals overlap at all
    stacks: list[list[int]] = []
    assigned = np.empty(s.size, dtype=np.int64)
    for i, (start, end) in enumerate(zip(so.tolist(), eo.tolist())):
        for k, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                assigned[i] = k
                break
        else:
            stacks.append([end])
            assigned[i] = len(stacks) - 1
    out[order] = assigned
    return out
