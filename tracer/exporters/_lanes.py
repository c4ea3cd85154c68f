"""The rows a viewer draws a timeline on: one per GPU stream and kind of work, one per host thread, one per
thread's NVTX ranges; each split further into sub-tracks where intervals overlap without nesting.

Shared by the exporters that lay a timeline out for a viewer (Chrome/Perfetto JSON, NVTXT), so that the same
trace reads the same in every tool.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tracer.exporters._nesting import sub_tracks
from tracer.timeline import TraceMeta

#: Which row of a GPU stream a kind of work goes to, in display order.
GPU_GROUPS: dict[str, str] = {"kernel": "kernels", "memcpy": "copies", "memset": "memsets", "gpu_range": "ranges"}
GPU_GROUP_ORDER = ("kernels", "copies", "memsets", "ranges", "other")
#: Host threads: NVTX / record_function ranges get their own row above the thread's ops and API calls.
HOST_GROUP_ORDER = ("ranges", "")


@dataclass(frozen=True)
class Lane:
    """One row of the layout."""

    index: int  # position in display order
    on_gpu: bool
    device: int  # GPU index, or -1 for host rows
    stream: int  # CUDA stream, or -1
    pid: int  # host rows: the thread's process; GPU rows: -1
    tid: int  # host rows: the thread; GPU rows: -1
    group: str  # "kernels", "copies", "memsets", "ranges", "other", or "" for a host thread's main row
    sub: int  # sub-track, 0 for the first
    label: str  # "GPU 0 · stream 7 · copies", "python3 thread 424 · ranges", "... · 2"


def thread_label(meta: TraceMeta, pid: int, tid: int) -> str:
    """A host thread's name as the trace gives it, else "thread TID"."""
    name = meta.thread_names.get(f"{pid}:{tid}", "").strip()
    if name and str(tid) not in name:
        return f"{name} (thread {tid})"
    return name or f"thread {tid}"


def layout(events: pd.DataFrame, meta: TraceMeta) -> tuple[np.ndarray, list[Lane]]:
    """Assign every row of ``events`` to a lane; return (lane index per row, lanes in display order)."""
    n = len(events)
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    kind = events["kind"].astype(str).to_numpy()
    device = events["device"].to_numpy(np.int64)
    on_gpu = device >= 0
    group = np.where(on_gpu, pd.Series(kind).map(GPU_GROUPS).fillna("other").to_numpy(), "")
    group = np.where(~on_gpu & (kind == "range"), "ranges", group)
    key = pd.DataFrame(
        {
            "gpu": ~on_gpu,  # GPUs first
            "a": np.where(on_gpu, device, events["pid"].to_numpy(np.int64)),
            "b": np.where(on_gpu, events["stream"].to_numpy(np.int64), events["tid"].to_numpy(np.int64)),
            "g": [GPU_GROUP_ORDER.index(g) if o else HOST_GROUP_ORDER.index(g) for g, o in zip(group, on_gpu)],
        }
    )
    base_lane = key.groupby(["gpu", "a", "b", "g"], sort=True).ngroup().to_numpy()
    starts = events["start_ns"].to_numpy(np.int64)
    ends = events["end_ns"].to_numpy(np.int64)
    sub = np.zeros(n, dtype=np.int64)
    order = np.argsort(base_lane, kind="stable")
    bounds = np.flatnonzero(np.diff(base_lane[order])) + 1
    for rows in np.split(order, bounds):
        sub[rows] = sub_tracks(starts[rows], ends[rows])
    combined = base_lane * (int(sub.max()) + 1) + sub
    uniq, lane_of_row = np.unique(combined, return_inverse=True)
    first_row = np.zeros(uniq.size, dtype=np.int64)
    first_row[lane_of_row[::-1]] = np.arange(n)[::-1]
    lanes: list[Lane] = []
    for i, r in enumerate(first_row.tolist()):
        g = str(group[r])
        s = int(sub[r])
        if on_gpu[r]:
            d, st = int(device[r]), int(events["stream"].iat[r])
            label = f"GPU {d} · stream {st} · {g}"
            lane = Lane(i, True, d, st, -1, -1, g, s, label)
        else:
            pid, tid = int(events["pid"].iat[r]), int(events["tid"].iat[r])
            label = thread_label(meta, pid, tid) + (" · ranges" if g == "ranges" else "")
            lane = Lane(i, False, -1, -1, pid, tid, g, s, label)
        if s:
            lane = replace(lane, label=f"{lane.label} · {s + 1}")
        lanes.append(lane)
    return lane_of_row.astype(np.int64), lanes
