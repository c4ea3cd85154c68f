"""The summary of a timeline as plain data: what `tracer summary --json` prints and run directories store."""

from __future__ import annotations

from typing import Any

from tracer.analysis.lanes import host_thread_stats, lane_stats
from tracer.analysis.overlap import concurrent_devices_ns, device_overlap, gpu_span_ns, span_ns
from tracer.analysis.ranges import RULE_TEXT, launch_pairs, range_summary
from tracer.analysis.work import copy_summary, idle_gaps, kernel_summary
from tracer.timeline import Timeline


def summarize(timeline: Timeline, *, ranges: bool = True) -> dict[str, Any]:
    """Per-device compute/copy/overlap, per-lane counts, span; plus ranges, GPU names and concurrency.

    Shape (other keys may be added, none removed)::

        {"format": "kineto" | "nsys" | ..., "devices": {"0": {...}}, "lanes": [{...}], "span_ns": int}
    """
    ev = timeline.events
    devices = {str(d.device): d.as_dict() for d in device_overlap(ev)}
    lanes = [{k: int(v) for k, v in row.items()} for row in lane_stats(ev).to_dict("records")]
    out: dict[str, Any] = {
        "format": timeline.meta.format,
        "source": timeline.meta.source,
        "devices": devices,
        "lanes": lanes,
        "span_ns": span_ns(ev),
        "gpu_span_ns": gpu_span_ns(ev),
        "gpu_names": {str(k): v for k, v in sorted(timeline.meta.gpu_names.items())},
        "concurrent_gpus_ns": {str(k): v for k, v in concurrent_devices_ns(ev).items()},
        "events": int(len(ev)),
    }
    names = timeline.meta.thread_names
    out["threads"] = [
        {**{k: int(v) for k, v in row.items()}, "name": names.get(f"{row['pid']}:{row['tid']}", "")}
        for row in host_thread_stats(ev).to_dict("records")
    ]
    run = timeline.meta.extra.get("run")
    if isinstance(run, dict) and run:
        keep = ("scenario", "variant", "mode", "backend", "devices", "wall_times_s", "derived")
        out["run"] = {k: run[k] for k in keep if k in run}
    for dev in devices:
        gaps = idle_gaps(ev, int(dev))
        d_extra = {
            "idle_gaps": int(len(gaps)),
            "idle_ns": int(gaps["gap_ns"].sum()) if len(gaps) else 0,
            "longest_gap_ns": int(gaps["gap_ns"].iloc[0]) if len(gaps) else 0,
        }
        out.setdefault("idle", {})[dev] = d_extra
    out["top_kernels"] = [
        {"name": r["name"], "count": int(r["count"]), "total_ns": int(r["total_ns"]), "mean_ns": int(r["mean_ns"])}
        for r in kernel_summary(ev, top=10).to_dict("records")
    ]
    out["copies"] = [
        {"device": int(r["device"]), "copy_kind": r["copy_kind"], "count": int(r["count"]), "bytes": int(r["bytes"]),
         "total_ns": int(r["total_ns"]), "gb_per_s": round(float(r["gb_per_s"]), 3)}
        for r in copy_summary(ev).to_dict("records")
    ]
    if ranges:
        # Both rules from one matching: the strict figure (own thread only) rides along, so a user can see
        # what the autograd rule added.
        pairs = launch_pairs(ev)
        rs = range_summary(ev, pairs=pairs)
        strict = range_summary(ev, pairs=pairs[pairs["own_thread"]]).set_index("name")
        rs["own_thread_gpu_busy_ns"] = rs["name"].map(strict["gpu_busy_ns"]).fillna(0).astype("int64")
        rs["own_thread_kernels"] = rs["name"].map(strict["kernels"]).fillna(0).astype("int64")
        out["range_rule"] = RULE_TEXT["process"]
        out["ranges"] = [
            {k: (int(v) if k != "name" else str(v)) for k, v in row.items()} for row in rs.to_dict("records")
        ]
    return out
