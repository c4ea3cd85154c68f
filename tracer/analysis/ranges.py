"""NVTX / record_function ranges projected onto the GPU work they launched.

A host range on thread T covers the runtime/driver calls that T made inside it; those calls' correlation ids
name the kernels, copies and memsets they launched. So "how long did range X keep the GPU busy" is the union
of that GPU work, per range instance, summed per range name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.overlap import gpu_work

RANGE_COLUMNS = ["name", "count", "host_ns", "gpu_busy_ns", "gpu_window_ns", "kernels", "memcpys", "memsets"]


def range_launches(events: pd.DataFrame) -> pd.DataFrame:
    """Pairs (range row index, GPU work row index): which GPU work each host range instance launched."""
    ranges = events[events["kind"] == "range"]
    calls = events[events["kind"].isin(("runtime", "driver")) & events["correlation"].notna()]
    work = gpu_work(events)
    work = work[work["correlation"].notna()]
    empty = pd.DataFrame({"range_row": pd.Series([], dtype="int64"), "work_row": pd.Series([], dtype="int64")})
    if ranges.empty or calls.empty or work.empty:
        return empty
    pairs = []
    for (pid, tid), r in ranges.groupby(["pid", "tid"], sort=False):
        c = calls[(calls["pid"] == pid) & (calls["tid"] == tid)]
        if c.empty:
            continue
        c = c.sort_values("start_ns", kind="stable")
        cs = c["start_ns"].to_numpy()
        lo = np.searchsorted(cs, r["start_ns"].to_numpy(), side="left")
        hi = np.searchsorted(cs, r["end_ns"].to_numpy(), side="right")
        n = hi - lo
        if n.sum() == 0:
            continue
        range_rows = np.repeat(r.index.to_numpy(), n)
        # positions lo..hi-1 for every range, without a Python loop
        offsets = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
        call_pos = np.repeat(lo, n) + offsets
        pairs.append(
            pd.DataFrame({"range_row": range_rows, "pid": pid, "corr": c["correlation"].to_numpy()[call_pos]})
        )
    if not pairs:
        return empty
    rc = pd.concat(pairs, ignore_index=True)
    # Correlation ids are unique only within a process (CUPTI numbers each process from 1), so GPU work is
    # joined on (launching pid, correlation): a trace of several processes must not credit one process's range
    # with another's kernels. A GPU row's pid is the launching process in every parser (docs/design.md).
    w = pd.DataFrame(
        {"work_row": work.index.to_numpy(), "pid": work["pid"].to_numpy(), "corr": work["correlation"].to_numpy()}
    )
    rc = rc.astype({"pid": "int64", "corr": "int64"}).drop_duplicates(["range_row", "corr"])
    w = w.astype({"pid": "int64", "corr": "int64"})
    return rc.merge(w, on=["pid", "corr"])[["range_row", "work_row"]]


def range_summary(events: pd.DataFrame) -> pd.DataFrame:
    """Per range name: instances, host time (sum of durations), GPU busy time of the work they launched
    (union per instance, summed), GPU window (first launched start → last end, summed) and work counts."""
    ranges = events[events["kind"] == "range"]
    if ranges.empty:
        return pd.DataFrame({c: pd.Series([], dtype="int64" if c != "name" else object) for c in RANGE_COLUMNS})
    host = ranges.assign(dur=ranges["end_ns"] - ranges["start_ns"]).groupby("name", observed=True).agg(
        count=("dur", "size"), host_ns=("dur", "sum")
    )
    pairs = range_launches(events)
    out = host
    if not pairs.empty:
        w = events.loc[pairs["work_row"], ["start_ns", "end_ns", "kind"]].reset_index(drop=True)
        w["range_row"] = pairs["range_row"].to_numpy()
        w["name"] = events.loc[pairs["range_row"], "name"].astype(str).to_numpy()
        busy = iv.grouped_union_total(w["range_row"].to_numpy(), w["start_ns"].to_numpy(), w["end_ns"].to_numpy())
        per_inst = w.groupby("range_row").agg(name=("name", "first"), s=("start_ns", "min"), e=("end_ns", "max"))
        per_inst["busy"] = busy.reindex(per_inst.index).fillna(0)
        per_inst["window"] = per_inst["e"] - per_inst["s"]
        by_name = per_inst.groupby("name").agg(gpu_busy_ns=("busy", "sum"), gpu_window_ns=("window", "sum"))
        counts = pd.crosstab(w["name"], w["kind"].astype(str)).reindex(
            columns=["kernel", "memcpy", "memset"], fill_value=0
        )
        counts.columns = ["kernels", "memcpys", "memsets"]
        out = host.join(by_name, how="left").join(counts, how="left")
    out = out.reindex(columns=RANGE_COLUMNS[1:]).fillna(0).astype("int64")
    out.index = out.index.astype(str)
    return out.rename_axis("name").reset_index().sort_values("host_ns", ascending=False, ignore_index=True)
