"""Per-device compute, copy and their overlap — the numbers behind "did the copy hide behind compute?".

compute = union of the device's kernel intervals; copy = union of its memcpy intervals; overlap = their
intersection; busy = union of all its GPU work (kernels, memcpys, memsets). The same definitions are used by
the CLI, the dashboard, the exporters and the docs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.timeline import GPU_WORK_KINDS


@dataclass(frozen=True)
class DeviceOverlap:
    """Compute/copy figures of one GPU, ns and counts."""

    device: int
    compute_ns: int
    copy_ns: int
    overlap_ns: int
    busy_ns: int
    kernels: int
    memcpys: int
    memsets: int

    @property
    def copy_hidden_frac(self) -> float:
        """Share of copy time that ran while a kernel ran too (0 when there is no copy)."""
        return self.overlap_ns / self.copy_ns if self.copy_ns else 0.0

    def as_dict(self) -> dict[str, int]:
        d = asdict(self)
        d.pop("device")
        return d


def gpu_work(events: pd.DataFrame) -> pd.DataFrame:
    """Only GPU activity rows (kernels, memcpys, memsets)."""
    return events[events["kind"].isin(GPU_WORK_KINDS) & (events["device"] >= 0)]


def _set(rows: pd.DataFrame) -> iv.Intervals:
    return iv.union(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())


def device_sets(events: pd.DataFrame, device: int) -> dict[str, iv.Intervals]:
    """The normalised interval sets of one device: compute, copy, overlap, busy."""
    work = gpu_work(events)
    work = work[work["device"] == device]
    compute = _set(work[work["kind"] == "kernel"])
    copy = _set(work[work["kind"] == "memcpy"])
    return {"compute": compute, "copy": copy, "overlap": iv.intersect(compute, copy), "busy": _set(work)}


def device_overlap(events: pd.DataFrame, devices: list[int] | None = None) -> list[DeviceOverlap]:
    """Figures for each GPU device (those with GPU work, plus any listed in ``devices``), by index."""
    work = gpu_work(events)
    found = set(work["device"].unique().tolist()) | set(devices or [])
    out = []
    for dev in sorted(int(d) for d in found):
        rows = work[work["device"] == dev]
        sets = device_sets(rows, dev)
        kinds = rows["kind"].value_counts()
        out.append(
            DeviceOverlap(
                device=dev,
                compute_ns=iv.total(sets["compute"]),
                copy_ns=iv.total(sets["copy"]),
                overlap_ns=iv.total(sets["overlap"]),
                busy_ns=iv.total(sets["busy"]),
                kernels=int(kinds.get("kernel", 0)),
                memcpys=int(kinds.get("memcpy", 0)),
                memsets=int(kinds.get("memset", 0)),
            )
        )
    return out


def span_ns(events: pd.DataFrame) -> int:
    """From the first interval's start to the last one's end (0 for an empty timeline)."""
    if events.empty:
        return 0
    return int(events["end_ns"].max() - events["start_ns"].min())


def gpu_span_ns(events: pd.DataFrame) -> int:
    """Like :func:`span_ns`, over GPU work only."""
    return span_ns(gpu_work(events))


def concurrent_devices_ns(events: pd.DataFrame) -> dict[int, int]:
    """How long exactly k GPUs were busy at once, for each k ≥ 1 ("did my two GPUs really run at once?")."""
    work = gpu_work(events)
    parts = []
    for dev in work["device"].unique():
        s, e = _set(work[work["device"] == dev])
        parts.append((s, e))
    if not parts:
        return {}
    pos = np.concatenate([p[0] for p in parts] + [p[1] for p in parts])
    delta = np.concatenate([np.ones(p[0].size, np.int64) for p in parts] + [-np.ones(p[1].size, np.int64) for p in parts])
    order = np.lexsort((delta, pos))
    pos, delta = pos[order], delta[order]
    level = np.cumsum(delta)[:-1]
    length = np.diff(pos)
    res = pd.Series(length).groupby(level).sum()
    return {int(k): int(v) for k, v in res.items() if k > 0 and v > 0}
