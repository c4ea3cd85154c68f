"""The typed results of the summary's analyses: one frozen dataclass per row or figure, as data.

Each is what one registered analysis (:mod:`tracer.analysis.registry`) computes; the summary's JSON is made
from them (:meth:`tracer.analysis.summary.Summary.to_dict`) and read back into them (``from_dict``). Rows carry
their rank; the JSON names it only where the timeline holds several (a one-rank summary reads as it always
has).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracer.analysis.overlap import DeviceOverlap, hidden_frac
from tracer.timeline import DeviceKey, LaneKey

__all__ = [
    "Concurrency", "CopyStat", "DeviceIdle", "DeviceOverlap", "HostThread", "KernelStat", "LaneStat", "RangeStat",
    "Ranges", "Span", "TraceInfo", "hidden_frac",
]


def _rank(row: dict[str, Any]) -> int:
    return int(row.get("rank", 0))


@dataclass(frozen=True)
class TraceInfo:
    """What the trace is: its format and the file it was read from."""

    format: str = ""
    source: str = ""


@dataclass(frozen=True)
class Span:
    """First start → last end over every interval, and over GPU work only, ns."""

    span_ns: int = 0
    gpu_span_ns: int = 0


@dataclass(frozen=True)
class LaneStat:
    """One stream of one GPU: its work counts and busy time (union of its GPU work), ns."""

    rank: int
    device: int
    stream: int
    kernels: int
    memcpys: int
    memsets: int
    busy_ns: int

    @property
    def key(self) -> LaneKey:
        return LaneKey(self.rank, self.device, self.stream)

    def as_dict(self, multi_rank: bool) -> dict[str, int]:
        d = {"device": self.device, "stream": self.stream, "kernels": self.kernels, "memcpys": self.memcpys,
             "memsets": self.memsets, "busy_ns": self.busy_ns}
        return {"rank": self.rank, **d} if multi_rank else d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaneStat:
        return cls(_rank(d), int(d["device"]), int(d["stream"]), int(d.get("kernels", 0)), int(d.get("memcpys", 0)),
                   int(d.get("memsets", 0)), int(d.get("busy_ns", 0)))


@dataclass(frozen=True)
class HostThread:
    """One host thread that ran framework ops: their count, busy time (union, nested ops once), CUDA calls."""

    rank: int
    pid: int
    tid: int
    ops: int
    busy_ns: int
    launches: int
    name: str = ""

    def as_dict(self, multi_rank: bool) -> dict[str, Any]:
        d = {"pid": self.pid, "tid": self.tid, "ops": self.ops, "busy_ns": self.busy_ns, "launches": self.launches,
             "name": self.name}
        return {"rank": self.rank, **d} if multi_rank else d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostThread:
        return cls(_rank(d), int(d["pid"]), int(d["tid"]), int(d.get("ops", 0)), int(d.get("busy_ns", 0)),
                   int(d.get("launches", 0)), str(d.get("name", "")))


@dataclass(frozen=True)
class DeviceIdle:
    """Stretches between a GPU's first and last work where it did nothing: how many, their total, the longest."""

    rank: int
    device: int
    gaps: int
    idle_ns: int
    longest_gap_ns: int

    @property
    def key(self) -> DeviceKey:
        return DeviceKey(self.rank, self.device)

    def as_dict(self) -> dict[str, int]:
        return {"idle_gaps": self.gaps, "idle_ns": self.idle_ns, "longest_gap_ns": self.longest_gap_ns}


@dataclass(frozen=True)
class KernelStat:
    """One kernel name over the whole timeline: how many ran, their summed and mean duration, ns."""

    name: str
    count: int
    total_ns: int
    mean_ns: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "count": self.count, "total_ns": self.total_ns, "mean_ns": self.mean_ns}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelStat:
        return cls(str(d["name"]), int(d["count"]), int(d["total_ns"]), int(d["mean_ns"]))


@dataclass(frozen=True)
class CopyStat:
    """Copies of one direction on one GPU: count, bytes, summed duration (ns) and bandwidth (bytes / time)."""

    rank: int
    device: int
    copy_kind: str
    count: int
    bytes: int
    total_ns: int
    gb_per_s: float

    def as_dict(self, multi_rank: bool) -> dict[str, Any]:
        d = {"device": self.device, "copy_kind": self.copy_kind, "count": self.count, "bytes": self.bytes,
             "total_ns": self.total_ns, "gb_per_s": self.gb_per_s}
        return {"rank": self.rank, **d} if multi_rank else d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CopyStat:
        return cls(_rank(d), int(d["device"]), str(d["copy_kind"]), int(d["count"]), int(d["bytes"]),
                   int(d["total_ns"]), float(d["gb_per_s"]))


@dataclass(frozen=True)
class RangeStat:
    """One range name (every instance, every rank): host time, and the GPU work its instances launched by the
    summary's rule; the own-thread rule's figures beside."""

    name: str
    count: int
    host_ns: int
    gpu_busy_ns: int
    gpu_window_ns: int
    kernels: int
    memcpys: int
    memsets: int
    own_thread_gpu_busy_ns: int
    own_thread_kernels: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "count": self.count, "host_ns": self.host_ns, "gpu_busy_ns": self.gpu_busy_ns,
            "gpu_window_ns": self.gpu_window_ns, "kernels": self.kernels, "memcpys": self.memcpys,
            "memsets": self.memsets, "own_thread_gpu_busy_ns": self.own_thread_gpu_busy_ns,
            "own_thread_kernels": self.own_thread_kernels,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RangeStat:
        return cls(str(d["name"]), *(int(d.get(k, 0)) for k in (
            "count", "host_ns", "gpu_busy_ns", "gpu_window_ns", "kernels", "memcpys", "memsets",
            "own_thread_gpu_busy_ns", "own_thread_kernels")))


@dataclass(frozen=True)
class Ranges:
    """Every range name, longest host time first, and the rule that credited GPU work to them (in words)."""

    rule: str = ""
    rows: tuple[RangeStat, ...] = ()


@dataclass(frozen=True)
class Concurrency:
    """How long exactly k GPUs (each a rank's device) were busy at once, ns, for each k ≥ 1."""

    ns_by_gpus: dict[int, int] = field(default_factory=dict)

    def together_ns(self, at_least: int = 2) -> int:
        """How long at least ``at_least`` GPUs were busy at once."""
        return sum(v for k, v in self.ns_by_gpus.items() if k >= at_least)

    def any_ns(self) -> int:
        """How long any GPU was busy."""
        return sum(self.ns_by_gpus.values())
