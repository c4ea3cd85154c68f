"""NVTX / record_function ranges projected onto the GPU work they launched.

A host range on thread T covers the runtime/driver calls that T made inside it; the timeline's launch join
(correlation ids, per rank and process) names the kernels, copies and memsets they launched. So "how long did
range X keep the GPU busy" is the union of that GPU work, per range instance, summed per range name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.work import kind_counts
from tracer.timeline import GPU_WORK_KINDS, THREAD_COLUMNS, launch_links

RANGE_COLUMNS = ["name", "count", "host_ns", "gpu_busy_ns", "gpu_window_ns", "kernels", "memcpys", "memsets"]


#: How GPU work is credited to ranges (``range_launches``' ``rule``):
#: - "thread": only the work launched by calls the range's own thread made inside it;
#: - "process" (the default): that, plus the work launched from threads of the same process that had no range
#:   open at the time (PyTorch runs ``loss.backward()``'s kernels from autograd threads, so a step range on the
#:   main thread would otherwise miss the whole backward pass).
RULES = ("thread", "process")
RULE_TEXT = {
    "thread": "GPU work launched by calls on the range's own thread",
    "process": "GPU work launched on the range's thread, plus launches from threads of the same process with no "
    "range open (autograd's backward threads) while the range was open",
}


def _calls_inside(ranges: pd.DataFrame, call_starts: np.ndarray, call_rows: np.ndarray) -> pd.DataFrame:
    """(range_row, call_row) for every call (sorted by start) that starts inside a range of ``ranges``."""
    lo = np.searchsorted(call_starts, ranges["start_ns"].to_numpy(), side="left")
    hi = np.searchsorted(call_starts, ranges["end_ns"].to_numpy(), side="right")
    n = hi - lo
    if n.sum() == 0:
        return pd.DataFrame({"range_row": np.zeros(0, np.int64), "call_row": np.zeros(0, np.int64)})
    # positions lo..hi-1 for every range, without a Python loop
    offsets = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    call_pos = np.repeat(lo, n) + offsets
    return pd.DataFrame({"range_row": np.repeat(ranges.index.to_numpy(), n), "call_row": call_rows[call_pos]})


def _covered(starts: np.ndarray, r_starts: np.ndarray, r_ends: np.ndarray) -> np.ndarray:
    """Which points of ``starts`` lie inside the union of [r_starts, r_ends]."""
    u_s, u_e = iv.union(r_starts, np.maximum(r_ends, r_starts + 1))  # a zero-length range still covers its point
    i = np.searchsorted(u_s, starts, side="right") - 1
    return (i >= 0) & (starts < u_e[np.maximum(i, 0)]) & (len(u_s) > 0)


def range_launches(events: pd.DataFrame, rule: str = "process") -> pd.DataFrame:
    """Pairs (range row index, GPU work row index): which GPU work each host range instance launched, by
    ``rule`` (see :data:`RULES`)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, not {rule!r}")
    pairs = launch_pairs(events)
    if rule == "thread":
        pairs = pairs[pairs["own_thread"]]
    return pairs[["range_row", "work_row"]].reset_index(drop=True)


def launch_pairs(events: pd.DataFrame) -> pd.DataFrame:
    """The pairs of the "process" rule, each marked ``own_thread`` where the "thread" rule credits it too (a
    launch by the range's own thread): both rules' figures from one matching.

    Which call launched which GPU work is the timeline's one launch join (:func:`tracer.timeline.launch_links`,
    keyed on rank, process and correlation id), so a range on rank r is credited only with rank r's work; a
    range's calls are those of its own (rank, pid, tid) and, by the "process" rule, of the other threads of its
    (rank, pid)."""
    empty = pd.DataFrame({"range_row": pd.Series([], dtype="int64"), "work_row": pd.Series([], dtype="int64"),
                          "own_thread": pd.Series([], dtype=bool)})
    ranges = events[events["kind"] == "range"]
    if ranges.empty:
        return empty
    links = launch_links(events)
    if links.empty:
        return empty
    # only GPU work counts (gpu_range rows are the profiler's drawing of a range, not work), and only calls that
    # launched some
    links = links[events.loc[links["work_row"], "kind"].isin(GPU_WORK_KINDS).to_numpy()]
    calls = events.loc[np.unique(links["call_row"].to_numpy())]
    if calls.empty:
        return empty
    pairs = []
    ranges_by_thread = dict(tuple(ranges.groupby(list(THREAD_COLUMNS), sort=False)))
    for (rank, pid, tid), c in calls.groupby(list(THREAD_COLUMNS), sort=False):
        c = c.sort_values("start_ns", kind="stable")
        cs, rows = c["start_ns"].to_numpy(), c.index.to_numpy(np.int64)
        own = ranges_by_thread.get((rank, pid, tid))
        if own is not None:
            pairs.append(_calls_inside(own, cs, rows).assign(own_thread=True))
            orphan = ~_covered(cs, own["start_ns"].to_numpy(), own["end_ns"].to_numpy())
            cs, rows = cs[orphan], rows[orphan]
        if len(cs):
            others = ranges[(ranges["rank"] == rank) & (ranges["pid"] == pid) & (ranges["tid"] != tid)]
            if not others.empty:
                pairs.append(_calls_inside(others, cs, rows).assign(own_thread=False))
    pairs = [p for p in pairs if len(p)]
    if not pairs:
        return empty
    # (a range row belongs to one thread, so a (range, call) pair is either its own thread's or another's)
    rc = pd.concat(pairs, ignore_index=True).astype({"range_row": "int64", "call_row": "int64"})
    return rc.merge(links, on="call_row")[["range_row", "work_row", "own_thread"]]


INSTANCE_COLUMNS = ["gpu_busy_ns", "gpu_window_ns", "kernels", "memcpys", "memsets"]


def range_instances(events: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per range instance (index: its events row) that ``pairs`` credits with GPU work: the union of that work
    (``gpu_busy_ns``), first start → last end (``gpu_window_ns``) and its counts by kind."""
    w = events.loc[pairs["work_row"], ["start_ns", "end_ns", "kind"]].reset_index(drop=True)
    w["range_row"] = pairs["range_row"].to_numpy()
    busy = iv.grouped_union_total(w["range_row"].to_numpy(), w["start_ns"].to_numpy(), w["end_ns"].to_numpy())
    inst = w.groupby("range_row").agg(s=("start_ns", "min"), e=("end_ns", "max"))
    inst["gpu_busy_ns"] = busy.reindex(inst.index).fillna(0).astype("int64")
    inst["gpu_window_ns"] = inst["e"] - inst["s"]
    iv.checked_sum(inst["gpu_busy_ns"], "range GPU time (ns)")
    iv.checked_sum(inst["gpu_window_ns"], "range GPU window (ns)")
    counts = kind_counts(w["kind"], [w["range_row"]])
    inst[["kernels", "memcpys", "memsets"]] = counts.reindex(inst.index).to_numpy()
    return inst[INSTANCE_COLUMNS]


def range_summary(events: pd.DataFrame, rule: str = "process", *, pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per range name: instances, host time (sum of durations), GPU busy time of the work they launched
    (union per instance, summed), GPU window (first launched start → last end, summed) and work counts; the
    work credited by ``rule`` (see :data:`RULES`), or by ``pairs`` already matched (:func:`range_launches`)."""
    ranges = events[events["kind"] == "range"]
    if ranges.empty:
        return pd.DataFrame({c: pd.Series([], dtype="int64" if c != "name" else object) for c in RANGE_COLUMNS})
    dur = ranges["end_ns"] - ranges["start_ns"]
    iv.checked_sum(dur, "range time (ns)")  # bounds every per-name total below
    host = ranges.assign(dur=dur).groupby("name", observed=True).agg(
        count=("dur", "size"), host_ns=("dur", "sum")
    )
    if pairs is None:
        pairs = range_launches(events, rule)
    out = host
    if not pairs.empty:
        inst = range_instances(events, pairs)
        by_name = inst.groupby(events.loc[inst.index, "name"].astype(str).to_numpy()).sum()
        out = host.join(by_name, how="left")
    out = out.reindex(columns=RANGE_COLUMNS[1:]).fillna(0).astype("int64")
    out.index = out.index.astype(str)
    return longest_first(out.rename_axis("name").reset_index())


def longest_first(table: pd.DataFrame) -> pd.DataFrame:
    """Range rows (one per name) by host time, longest first; names ascending among equal times, so that the order
    does not hang on the order the names were met in (a job's ranks, summed apart, meet them in another)."""
    return table.sort_values(["host_ns", "name"], ascending=[False, True], ignore_index=True)
