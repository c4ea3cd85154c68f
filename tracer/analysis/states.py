"""What ran at each instant of a trace's span: a partition of the span into states whose times add up to it.

At every instant the state is the first of :data:`STATES` that holds, GPU work first (over every GPU of every
rank at once), then host operators (framework ops on host threads), then nothing traced. Two traces compared
state by state (``tracer diff``) account for the whole change of their span: the states' differences add up to
it, host threads, gaps and overlap included.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.overlap import gpu_work

#: The states, in the order they are tried at each instant, with what each means.
STATES: dict[str, str] = {
    "kernel and copy at once": "a kernel and a copy ran at once (the copy hidden behind compute)",
    "kernels, no copy": "kernels (compute or communication) ran, no copy",
    "copy, no kernel": "a copy ran and no kernel: copy time not hidden",
    "other GPU work only": "only memsets (or other GPU work) ran",
    "host ops on 2+ threads, no GPU work": "no GPU work; framework ops ran on two or more host threads at once",
    "host ops on one thread, no GPU work": "no GPU work; framework ops ran on one host thread",
    "nothing traced": "no traced work at all: Python between operators, a range open with nothing in it, waits",
}


def _covered(sets: iv.Intervals, at: np.ndarray) -> np.ndarray:
    """For each point of ``at``: whether the normalised set covers it ([start, end))."""
    starts, ends = sets
    if not starts.size:
        return np.zeros(at.size, dtype=bool)
    i = np.searchsorted(starts, at, side="right") - 1
    ok = i >= 0
    out = np.zeros(at.size, dtype=bool)
    out[ok] = ends[i[ok]] > at[ok]
    return out


def _threads_at_once(ops: pd.DataFrame, at_least: int) -> iv.Intervals:
    """Where ``at_least`` host threads ran an operator at once (each thread's ops merged first)."""
    if ops.empty:
        return iv.empty()
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for _, rows in ops.groupby(["rank", "pid", "tid"], sort=False, observed=True):
        s, e = iv.union(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())
        starts.append(s)
        ends.append(e)
    pos = np.concatenate([*starts, *ends])
    delta = np.concatenate([np.ones(sum(s.size for s in starts), np.int64),
                            -np.ones(sum(e.size for e in ends), np.int64)])
    order = np.lexsort((delta, pos))  # at one instant, ends before starts
    pos, cover = pos[order], np.cumsum(delta[order])
    on = np.flatnonzero(cover[:-1] >= at_least)
    return iv.union(pos[on], pos[on + 1])


def span_states(events: pd.DataFrame) -> dict[str, int]:
    """ns of the span (first start to last end over every row) in each of :data:`STATES`, in that order; the
    values add up to the span."""
    out = dict.fromkeys(STATES, 0)
    if events.empty:
        return out
    lo, hi = int(events["start_ns"].min()), int(events["end_ns"].max())
    work = gpu_work(events)
    kind = work["kind"].astype(str).to_numpy()

    def of(rows: pd.DataFrame) -> iv.Intervals:
        return iv.union(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())

    kernels, copies, other = of(work[kind == "kernel"]), of(work[kind == "memcpy"]), of(work)
    ops = events[(events["kind"].astype(str) == "cpu_op") & (events["device"] < 0)]
    host, several = of(ops), _threads_at_once(ops, 2)
    sets = (kernels, copies, other, host, several)
    cuts = np.unique(np.concatenate([[lo, hi], *(a for s in sets for a in s)]))
    cuts = cuts[(cuts >= lo) & (cuts <= hi)]
    seg = np.diff(cuts)
    at = cuts[:-1]
    k, c, g, h, h2 = (_covered(s, at) for s in sets)
    masks = {
        "kernel and copy at once": k & c,
        "kernels, no copy": k & ~c,
        "copy, no kernel": c & ~k,
        "other GPU work only": g & ~k & ~c,
        "host ops on 2+ threads, no GPU work": ~g & h2,
        "host ops on one thread, no GPU work": ~g & h & ~h2,
    }
    for name, mask in masks.items():
        out[name] = int(seg[mask].sum())
    out["nothing traced"] = (hi - lo) - sum(out.values())
    return out
