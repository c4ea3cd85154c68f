"""The tracks a viewer draws an exported timeline on: the lanes of :mod:`tracer.timeline.layout` (one per GPU stream
and per host thread, of each rank), each split by kind of work and, where intervals overlap without nesting,
into sub-tracks.

What is the exporters' own: on a GPU stream a track per kind of work (kernels, copies, memsets, the profiler's
projected ranges), on a host thread one for its NVTX / record_function ranges above its ops and API calls.
Shared by the exporters that lay a timeline out for a viewer (Chrome/Perfetto JSON, NVTXT), so that the same
trace reads the same in every tool, and the same as in the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracer.timeline import KINDS, TraceMeta
from tracer.timeline.layout import Lane, lay_out, sub_tracks

#: Which track of a GPU stream a kind of work goes to, in display order.
GPU_GROUPS: dict[str, str] = {"kernel": "kernels", "memcpy": "copies", "memset": "memsets", "gpu_range": "ranges"}
GPU_GROUP_ORDER = ("kernels", "copies", "memsets", "ranges", "other")
#: Host threads: NVTX / record_function ranges get their own track above the thread's ops and API calls.
HOST_GROUP_ORDER = ("ranges", "")

# per kind code (the order of tracer.timeline.KINDS): its group's position on a GPU and on a host thread
_GPU_GROUP_OF_KIND = np.array([GPU_GROUP_ORDER.index(GPU_GROUPS.get(k, "other")) for k in KINDS])
_HOST_GROUP_OF_KIND = np.array([HOST_GROUP_ORDER.index("ranges" if k == "range" else "") for k in KINDS])


@dataclass(frozen=True)
class Track:
    """One track of the export: a kind of work on a lane, or a sub-track of it."""

    index: int  # position in display order
    lane: Lane
    group: str  # "kernels", "copies", "memsets", "ranges", "other", or "" for a host thread's main track
    sub: int  # sub-track, 0 for the first
    label: str  # "GPU 0 · stream 7 · copies", "thread 424 (python3) · ranges", "... · 2"

    @property
    def on_gpu(self) -> bool:
        return self.lane.on_gpu

    @property
    def rank(self) -> int:
        return self.lane.rank

    @property
    def device(self) -> int:
        return self.lane.device

    @property
    def stream(self) -> int:
        return self.lane.stream

    @property
    def pid(self) -> int:
        return self.lane.pid

    @property
    def tid(self) -> int:
        return self.lane.tid


def layout(events: pd.DataFrame, meta: TraceMeta) -> tuple[np.ndarray, list[Track]]:
    """Assign every row of ``events`` to a track; return (track index per row, tracks in display order)."""
    n = len(events)
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    lanes = lay_out(events, meta)
    lane_of_row = lanes.lane_of_row
    kind = events["kind"].cat.codes.to_numpy().astype(np.int64)
    on_gpu = np.array([ln.on_gpu for ln in lanes.lanes], dtype=bool)[lane_of_row]
    group = np.where(on_gpu, _GPU_GROUP_OF_KIND[kind], _HOST_GROUP_OF_KIND[kind])
    n_groups = len(GPU_GROUP_ORDER)
    base = lane_of_row * n_groups + group  # lanes in their order, each one's groups in theirs
    starts = events["start_ns"].to_numpy(np.int64)
    ends = events["end_ns"].to_numpy(np.int64)
    sub = np.zeros(n, dtype=np.int64)
    order = np.argsort(base, kind="stable")
    bounds = np.flatnonzero(np.diff(base[order])) + 1
    for rows in np.split(order, bounds):
        sub[rows] = sub_tracks(starts[rows], ends[rows])
    n_subs = int(sub.max()) + 1
    uniq, track_of_row = np.unique(base * n_subs + sub, return_inverse=True)
    tracks: list[Track] = []
    for i, code in enumerate(uniq.tolist()):
        b, s = divmod(code, n_subs)
        lane = lanes.lanes[b // n_groups]
        g = b % n_groups
        name = GPU_GROUP_ORDER[g] if lane.on_gpu else HOST_GROUP_ORDER[g]
        if lane.on_gpu:
            label = f"{lane.title} · {name}"
        else:
            label = lane.title + (" · ranges" if name == "ranges" else "")
        if s:
            label = f"{label} · {s + 1}"
        tracks.append(Track(i, lane, name, s, label))
    return track_of_row.astype(np.int64).reshape(-1), tracks
