"""How far the CPU ran ahead of each GPU: its launch calls against the work they queued.

Every kernel, copy and memset a GPU ran was put in its stream's queue by a runtime or driver call on the host
(``cudaLaunchKernel``, ``cudaMemcpyAsync`` ...; paired by :func:`tracer.timeline.launch_links`). Per GPU:

- **launch delay**: the work's start on the GPU − its call's end on the host (HTA's definition), 0 where the
  GPU began before the call returned (a delay is never negative; ``started_early`` counts those launches).
  Small where the stream was waiting for the work; large where the work queued behind earlier work. A call that
  queued several rows (a CUDA graph's launch) counts once, with its first row.
- **short kernels**: kernels that ran for less time than the call that launched them took (HTA's "short GPU
  kernels"): the host cannot keep such a stream fed, whatever the GPU does.
- **queue at launch**: how many other rows of the streams a call queued on were queued and not finished when
  it returned (HTA's "queue length", at launch moments; a graph's launch sums its streams): 0 means the
  streams had nothing else to do, so the GPU's pace on them was the host's. ``empty_at_launch`` counts the
  launches that found them so (at most ``launches``).

Rows whose call is not in the timeline (a trace without runtime events, a capture that began mid-run) are
counted as ``unlinked`` and are in no figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracer.analysis.overlap import kind_mask
from tracer.timeline import launch_links
from tracer.timeline.keys import key_codes, row_positions

#: What a launch table holds per GPU, in order.
LAUNCH_COLUMNS = ("rank", "device", "launches", "unlinked", "call_p50_ns", "delay_p50_ns", "delay_p95_ns",
                  "delay_max_ns", "started_early", "kernels", "short_kernels", "queue_mean", "queue_max",
                  "empty_at_launch")

_WORK = ("kernel", "memcpy", "memset")


@dataclass(frozen=True)
class LaunchStat:
    """One GPU's launches (see the module's docstring); ns are integers, ``queue_mean`` rounded to 0.01."""

    rank: int
    device: int
    launches: int  # calls that queued work on this GPU
    unlinked: int  # rows of work whose call is not in the timeline
    call_p50_ns: int
    delay_p50_ns: int
    delay_p95_ns: int
    delay_max_ns: int
    started_early: int  # launches whose work began on the GPU before the call returned (delay 0)
    kernels: int  # kernels launched one per call (the short-kernel figure's population)
    short_kernels: int
    queue_mean: float
    queue_max: int
    empty_at_launch: int  # launches that found their stream's queue empty

    def as_dict(self, multi_rank: bool) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in LAUNCH_COLUMNS[1:]}
        return {"rank": self.rank, **d} if multi_rank else d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchStat:
        ints = {k: int(d[k]) for k in LAUNCH_COLUMNS[1:] if k != "queue_mean"}
        return cls(rank=int(d.get("rank", 0)), queue_mean=float(d["queue_mean"]), **ints)


def launch_table(events: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU (rank, device) that ran work: :data:`LAUNCH_COLUMNS`, in (rank, device) order."""
    device = events["device"].to_numpy(np.int64)
    on_gpu = kind_mask(events["kind"], _WORK) & (device >= 0)
    is_kernel = kind_mask(events["kind"], ("kernel",))
    if not on_gpu.any():
        return pd.DataFrame({c: pd.Series([], dtype="float64" if c == "queue_mean" else "int64")
                             for c in LAUNCH_COLUMNS})
    rank = events["rank"].to_numpy(np.int64)
    work_rows = np.flatnonzero(on_gpu)
    code, _ = key_codes(rank, device, rows=work_rows)  # each GPU's rows by one code, (rank, device) ascending
    gpu_of = np.full(len(events), -1, dtype=np.int64)
    gpu_of[work_rows] = code
    links = launch_links(events)
    work = row_positions(events.index, links["work_row"].to_numpy())
    call = row_positions(events.index, links["call_row"].to_numpy())
    keep = on_gpu[work]
    work, call = work[keep], call[keep]
    start, end = events["start_ns"].to_numpy(np.int64), events["end_ns"].to_numpy(np.int64)
    stream = events["stream"].to_numpy(np.int64)
    rows = []
    for g in np.unique(code).tolist():
        first = work_rows[np.argmax(code == g)]
        mine = gpu_of[work] == g
        w, c = work[mine], call[mine]
        rows.append(_gpu_row(int(rank[first]), int(device[first]), int((code == g).sum()), _Linked(
            c, stream[w], start[w], end[w], start[c], end[c], is_kernel[w])))
    return pd.DataFrame(rows, columns=list(LAUNCH_COLUMNS))


@dataclass(frozen=True)
class _Linked:
    """One GPU's linked rows (one entry per row of work): its call's position, and both sides' times."""

    call: np.ndarray
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray
    call_start: np.ndarray
    call_end: np.ndarray
    kernel: np.ndarray


def _gpu_row(rank: int, device: int, total: int, x: _Linked) -> dict[str, Any]:
    row: dict[str, Any] = {"rank": rank, "device": device}
    if not len(x.call):
        return {**row, **dict.fromkeys(LAUNCH_COLUMNS[2:], 0), "unlinked": total, "queue_mean": 0.0}
    # each call once, with the first row it queued (a graph launch queues many)
    order = np.lexsort((x.start, x.call))
    calls, first, per_call = np.unique(x.call[order], return_index=True, return_counts=True)
    f = order[first]
    early = x.start[f] < x.call_end[f]
    delay = np.where(early, 0, x.start[f] - x.call_end[f])
    took = x.call_end[f] - x.call_start[f]
    one = f[(per_call == 1) & x.kernel[f]]  # kernels launched one per call
    short = int(((x.end[one] - x.start[one]) < (x.call_end[one] - x.call_start[one])).sum())
    ahead = _queued_ahead(x, calls)
    return {**row, "launches": int(len(calls)), "unlinked": total - len(x.call),
            "call_p50_ns": _pct(took, 50), "delay_p50_ns": _pct(delay, 50), "delay_p95_ns": _pct(delay, 95),
            "delay_max_ns": int(delay.max()), "started_early": int(early.sum()), "kernels": int(len(one)),
            "short_kernels": short,
            "queue_mean": round(float(ahead.mean()), 2), "queue_max": int(ahead.max()),
            "empty_at_launch": int((ahead == 0).sum())}


def _pct(values: np.ndarray, q: int) -> int:
    """The q-th percentile, the lower of two neighbours (an integer that occurred: no interpolated ns)."""
    return int(np.percentile(values, q, method="lower"))


def _queued_ahead(x: _Linked, calls: np.ndarray) -> np.ndarray:
    """For each of ``calls`` (sorted, unique): the rows queued ahead of it, on the streams it queued rows on, when
    it returned: rows of those streams queued by then (their call's end ≤ t) and not finished (end > t), its own
    rows left out; summed over its streams (a graph's launch may queue on several).

    #{j: q_j ≤ t < e_j} = #{q_j ≤ t} − #{max(q_j, e_j) ≤ t}: two sorted searches per stream, exact, and never
    negative where a clock puts a row's end before its call's end."""
    ahead = np.zeros(len(calls), dtype=np.int64)
    for s in np.unique(x.stream).tolist():
        on = x.stream == s
        queued, ends, here = x.call_end[on], x.end[on], x.call[on]
        done = np.sort(np.maximum(queued, ends))
        mine, first, inverse = np.unique(here, return_index=True, return_inverse=True)
        t = queued[first]  # (every row of a call was queued when it returned)
        own = np.bincount(inverse.ravel(), weights=ends > queued, minlength=len(first)).astype(np.int64)
        outstanding = np.searchsorted(np.sort(queued), t, side="right") - np.searchsorted(done, t, side="right")
        ahead[np.searchsorted(calls, mine)] += outstanding - own
    return ahead
