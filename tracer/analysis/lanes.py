"""Per-lane figures: a lane is one (rank, device, stream) of GPU work; and per host thread (rank, pid, tid)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.overlap import gpu_work
from tracer.analysis.work import kind_counts
from tracer.timeline import LANE_COLUMNS, THREAD_COLUMNS
from tracer.timeline.keys import pack

LANE_STAT_COLUMNS = [*LANE_COLUMNS, "kernels", "memcpys", "memsets", "busy_ns"]
THREAD_STAT_COLUMNS = [*THREAD_COLUMNS, "ops", "busy_ns", "launches"]


def lane_stats(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, device, stream): kernels, memcpys, memsets (counts) and busy_ns (union of its work),
    by lane."""
    work = gpu_work(events)
    cols = LANE_STAT_COLUMNS
    if work.empty:
        return pd.DataFrame({c: pd.Series([], dtype="int64") for c in cols})
    keys = [work[c] for c in LANE_COLUMNS]
    counts = kind_counts(work["kind"], keys)
    busy = iv.grouped_union_total(pack(*keys), work["start_ns"].to_numpy(), work["end_ns"].to_numpy())
    out = counts.reset_index()
    out["busy_ns"] = pd.Series(pack(*(out[c] for c in LANE_COLUMNS))).map(busy).fillna(0).to_numpy()
    out = out.astype({c: "int64" for c in (*LANE_COLUMNS, "busy_ns")})
    out.columns.name = None
    return out[cols].sort_values(list(LANE_COLUMNS)).reset_index(drop=True)


def host_thread_stats(events: pd.DataFrame) -> pd.DataFrame:
    """One row per host thread (rank, pid, tid) that ran framework ops: ops (count), busy_ns (union of its cpu_op
    intervals, so nested ops count once) and launches (CUDA runtime/driver calls). On a CPU-only run, where
    threads stand in for devices, this is what "busy per device" means. Busiest first."""
    return busiest_first(thread_rows(events))


def busiest_first(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`thread_rows` (of one timeline, or of a job's ranks stacked in rank order) busiest first, as
    :func:`host_thread_stats` orders them."""
    return rows.sort_values("busy_ns", ascending=False, ignore_index=True)


def thread_rows(events: pd.DataFrame) -> pd.DataFrame:
    """:func:`host_thread_stats`' rows in (rank, pid, tid) order: what a job's ranks compute apart and stack."""
    cols = THREAD_STAT_COLUMNS
    host = events[(events["device"] < 0) & events["kind"].isin(("cpu_op", "runtime", "driver"))]
    ops = host[host["kind"] == "cpu_op"]
    if ops.empty:
        return pd.DataFrame({c: pd.Series([], dtype="int64") for c in cols})
    keys = list(THREAD_COLUMNS)
    # (pid and tid are int64: a pid does not fit pack's narrow fields, so the thread is numbered by pandas)
    code = ops.groupby(keys, sort=True).ngroup().to_numpy(dtype=np.int64)
    busy = iv.grouped_union_total(code, ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy())
    out = ops.groupby(keys, sort=True).size().rename("ops").reset_index()
    out["busy_ns"] = busy.reindex(np.arange(len(out)), fill_value=0).to_numpy()
    calls = host[host["kind"] != "cpu_op"].groupby(keys).size()
    out["launches"] = (
        calls.reindex(pd.MultiIndex.from_frame(out[keys]), fill_value=0).to_numpy() if len(calls) else 0
    )
    out = out.astype({c: "int64" for c in cols})
    return out[cols].reset_index(drop=True)
