"""Per-lane figures: a lane is one (device, stream) of GPU work."""

from __future__ import annotations

import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.overlap import gpu_work


def lane_stats(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (device, stream): kernels, memcpys, memsets (counts) and busy_ns (union of its work)."""
    work = gpu_work(events)
    cols = ["device", "stream", "kernels", "memcpys", "memsets", "busy_ns"]
    if work.empty:
        return pd.DataFrame({c: pd.Series([], dtype="int64") for c in cols})
    counts = (
        pd.crosstab([work["device"], work["stream"]], work["kind"].astype(str))
        .reindex(columns=["kernel", "memcpy", "memset"], fill_value=0)
        .rename(columns={"kernel": "kernels", "memcpy": "memcpys", "memset": "memsets"})
    )
    key = work["device"].astype("int64") * (1 << 32) + work["stream"].astype("int64")
    busy = iv.grouped_union_total(key.to_numpy(), work["start_ns"].to_numpy(), work["end_ns"].to_numpy())
    out = counts.reset_index()
    out["busy_ns"] = (out["device"].astype("int64") * (1 << 32) + out["stream"].astype("int64")).map(busy).fillna(0)
    out = out.astype({"device": "int64", "stream": "int64", "busy_ns": "int64"})
    out.columns.name = None
    return out[cols].sort_values(["device", "stream"]).reset_index(drop=True)


def host_thread_stats(events: pd.DataFrame) -> pd.DataFrame:
    """One row per host thread (pid, tid) that ran framework ops: ops (count), busy_ns (union of its cpu_op
    intervals, so nested ops count once) and launches (CUDA runtime/driver calls). On a CPU-only run, where
    threads stand in for devices, this is what "busy per device" means."""
    cols = ["pid", "tid", "ops", "busy_ns", "launches"]
    host = events[(events["device"] < 0) & events["kind"].isin(("cpu_op", "runtime", "driver"))]
    ops = host[host["kind"] == "cpu_op"]
    if ops.empty:
        return pd.DataFrame({c: pd.Series([], dtype="int64") for c in cols})
    key = ops["pid"].astype("int64").to_numpy() * (1 << 32) + ops["tid"].astype("int64").to_numpy()
    busy = iv.grouped_union_total(key, ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy())
    out = ops.groupby(["pid", "tid"]).size().rename("ops").reset_index()
    calls = host[host["kind"] != "cpu_op"].groupby(["pid", "tid"]).size()
    out["launches"] = [int(calls.get((p, t), 0)) for p, t in zip(out["pid"], out["tid"])]
    out["busy_ns"] = (out["pid"].astype("int64") * (1 << 32) + out["tid"].astype("int64")).map(busy).fillna(0)
    out = out.astype({"pid": "int64", "tid": "int64", "ops": "int64", "busy_ns": "int64", "launches": "int64"})
    return out[cols].sort_values("busy_ns", ascending=False, ignore_index=True)
