"""Per-device compute, copy and their overlap — the numbers behind "did the copy hide behind compute?".

compute = union of the device's kernel intervals; copy = union of its memcpy intervals; overlap = their
intersection; busy = union of all its GPU work (kernels, memcpys, memsets). The same definitions are used by
the CLI, the dashboard, the exporters and the docs. A device is a :class:`~tracer.timeline.DeviceKey` (rank,
device): two ranks' "GPU 0" are two GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.timeline import DEVICE_COLUMNS, GPU_WORK_KINDS, DeviceKey


def hidden_frac(overlap_ns: int, copy_ns: int) -> float | None:
    """Share of copy time hidden behind compute (overlap / copy); None where there is no copy time.

    The one definition of "copy hidden": the summary, the diff, the dashboard and the recorder's report read it
    from here (through :attr:`DeviceOverlap.copy_hidden_frac`)."""
    return overlap_ns / copy_ns if copy_ns else None


def hidden_pct(overlap_ns: int, copy_ns: int) -> float | None:
    """:func:`hidden_frac` in percent, as ``100 * overlap / copy`` (one rounding, not two: 23 of 40 ns is exactly
    57.5%, where ``100 * (23 / 40)`` is 57.49999…); None where there is no copy time."""
    return 100.0 * overlap_ns / copy_ns if copy_ns else None


@dataclass(frozen=True)
class DeviceOverlap:
    """Compute/copy figures of one GPU, ns and counts. ``rank`` is last so that positional construction of
    one-rank figures reads as before."""

    device: int
    compute_ns: int
    copy_ns: int
    overlap_ns: int
    busy_ns: int
    kernels: int
    memcpys: int
    memsets: int
    rank: int = 0

    @property
    def key(self) -> DeviceKey:
        return DeviceKey(self.rank, self.device)

    @property
    def copy_hidden_frac(self) -> float | None:
        """Share of copy time that ran while a compute kernel ran too (None when there is no copy)."""
        return hidden_frac(self.overlap_ns, self.copy_ns)

    @property
    def copy_hidden_pct(self) -> float | None:
        """:attr:`copy_hidden_frac` in percent (:func:`hidden_pct`), for text."""
        return hidden_pct(self.overlap_ns, self.copy_ns)

    @property
    def exposed_copy_ns(self) -> int:
        """Copy time not hidden behind compute."""
        return self.copy_ns - self.overlap_ns

    def as_dict(self) -> dict[str, int]:
        """The figures as ``tracer summary --json`` writes them under the device's label (no rank, no device:
        the label names both)."""
        return {
            "compute_ns": self.compute_ns,
            "copy_ns": self.copy_ns,
            "overlap_ns": self.overlap_ns,
            "busy_ns": self.busy_ns,
            "kernels": self.kernels,
            "memcpys": self.memcpys,
            "memsets": self.memsets,
        }


#: inside :func:`shared_work`: (function name, id of the frame) → (the frame, what the function gave for it)
_SHARED: ContextVar[dict[tuple[str, int], tuple[pd.DataFrame, Any]] | None] = ContextVar("_SHARED", default=None)
_T = TypeVar("_T")


@contextmanager
def shared_work() -> Iterator[None]:
    """Within: :func:`gpu_work` and :func:`all_device_sets` of one frame are computed once, for all the analyses
    that ask (the summary's analyses of one timeline, which only read it; the frame must not change meanwhile).
    Per thread of control (a ContextVar): a dashboard's requests do not share."""
    if _SHARED.get() is not None:
        yield
        return
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def _once(name: str, events: pd.DataFrame, compute: Callable[[pd.DataFrame], _T]) -> _T:
    shared = _SHARED.get()
    if shared is None:
        return compute(events)
    got = shared.get((name, id(events)))
    if got is not None and got[0] is events:  # (the frame is kept with it: its id cannot go to another meanwhile)
        return got[1]  # type: ignore[no-any-return]
    value = compute(events)
    shared[(name, id(events))] = (events, value)
    return value


def gpu_work(events: pd.DataFrame) -> pd.DataFrame:
    """Only GPU activity rows (kernels, memcpys, memsets)."""
    return _once("gpu_work", events, _gpu_work)


def _gpu_work(events: pd.DataFrame) -> pd.DataFrame:
    return events[events["kind"].isin(GPU_WORK_KINDS) & (events["device"] >= 0)]


def kind_mask(kind: pd.Series, kinds: Iterable[str]) -> np.ndarray:
    """Which rows' ``kind`` is one of ``kinds``: a comparison of the categorical's integer codes (a tenth of
    ``isin``'s time over a job rank's 200,000 rows), ``isin`` where the column is not categorical."""
    wanted = list(kinds)
    if not isinstance(kind.dtype, pd.CategoricalDtype):
        return np.asarray(kind.isin(wanted).to_numpy(dtype=bool))
    cats = kind.cat.categories
    codes = [cats.get_loc(k) for k in wanted if k in cats]
    at = kind.cat.codes.to_numpy()
    return at == codes[0] if len(codes) == 1 else np.isin(at, codes)


def device_keys(events: pd.DataFrame) -> list[DeviceKey]:
    """The GPUs that hold GPU work, (rank, device) ascending."""
    work = gpu_work(events)
    if work.empty:
        return []
    pairs = work[list(DEVICE_COLUMNS)].drop_duplicates()
    return sorted(DeviceKey(int(r), int(d)) for r, d in zip(pairs["rank"], pairs["device"]))


def on_device(events: pd.DataFrame, device: int | DeviceKey) -> pd.DataFrame:
    """The rows of one GPU. A :class:`DeviceKey` names its rank; a bare index means that GPU of every rank, so
    it is refused for a timeline of several ranks (where it would mix two GPUs)."""
    if isinstance(device, DeviceKey):
        return events[(events["device"] == device.device) & (events["rank"] == device.rank)]
    rank = events["rank"].to_numpy()
    if rank.size and bool((rank != rank[0]).any()):
        raise ValueError(f"device {device} of which rank? this timeline holds several: pass a DeviceKey")
    return events[events["device"] == device]


def _set(rows: pd.DataFrame) -> iv.Intervals:
    return iv.union(rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())


def device_sets(events: pd.DataFrame, device: int | DeviceKey) -> dict[str, iv.Intervals]:
    """The normalised interval sets of one device: compute (kernels that are not communication: NCCL/RCCL
    kernels are the ``comm`` analysis's), copy, overlap (copy hidden behind compute), busy (all GPU work)."""
    work = on_device(gpu_work(events), device)
    compute = _set(work[(work["kind"] == "kernel") & (work["collective"] == "")])
    copy = _set(work[work["kind"] == "memcpy"])
    return {"compute": compute, "copy": copy, "overlap": iv.intersect(compute, copy), "busy": _set(work)}


@dataclass(frozen=True)
class GpuSets:
    """One GPU's interval sets (as :func:`device_sets` gives them, and ``comm``: the union of its communication
    kernels) and its counts of kernels, memcpys and memsets."""

    sets: dict[str, iv.Intervals]
    kernels: int
    memcpys: int
    memsets: int


def all_device_sets(events: pd.DataFrame) -> dict[DeviceKey, GpuSets]:
    """:func:`device_sets` of every GPU that holds GPU work, found in one pass over the rows: a filter of the
    whole frame per GPU grew with GPUs x rows (seconds at 64 ranks)."""
    return _once("all_device_sets", events, _all_device_sets)


def _all_device_sets(events: pd.DataFrame) -> dict[DeviceKey, GpuSets]:
    work = gpu_work(events)
    if work.empty:
        return {}
    # (comparisons on the categorical columns: no strings made per row)
    is_kernel = (work["kind"] == "kernel").to_numpy()
    is_compute = is_kernel & (work["collective"] == "").to_numpy()
    is_copy = (work["kind"] == "memcpy").to_numpy()
    is_memset = (work["kind"] == "memset").to_numpy()
    start = work["start_ns"].to_numpy()
    end = work["end_ns"].to_numpy()
    out = {}
    for (rank, dev), ix in work.groupby(["rank", "device"], sort=True).indices.items():
        s, e = start[ix], end[ix]
        compute = iv.union(s[is_compute[ix]], e[is_compute[ix]])
        copy = iv.union(s[is_copy[ix]], e[is_copy[ix]])
        comm = is_kernel[ix] & ~is_compute[ix]
        sets = {"compute": compute, "copy": copy, "overlap": iv.intersect(compute, copy), "busy": iv.union(s, e),
                "comm": iv.union(s[comm], e[comm])}
        out[DeviceKey(int(rank), int(dev))] = GpuSets(
            sets, int(is_kernel[ix].sum()), int(is_copy[ix].sum()), int(is_memset[ix].sum())
        )
    return out


def _keys(devices: Iterable[int | DeviceKey] | None, rank: int) -> set[DeviceKey]:
    return {d if isinstance(d, DeviceKey) else DeviceKey(rank, int(d)) for d in devices or ()}


#: A GPU named but without work: empty sets, no counts.
IDLE = GpuSets({k: iv.empty() for k in ("compute", "copy", "overlap", "busy", "comm")}, 0, 0, 0)


def device_overlap(events: pd.DataFrame, devices: Iterable[int | DeviceKey] | None = None,
                   sets: dict[DeviceKey, GpuSets] | None = None) -> list[DeviceOverlap]:
    """Figures for each GPU (those with GPU work, plus any listed in ``devices``; a bare index there is a GPU of
    the timeline's first rank), by (rank, device). ``sets``: :func:`all_device_sets` of ``events`` where the
    caller has it already."""
    found = all_device_sets(events) if sets is None else sets
    first_rank = int(events["rank"].iloc[0]) if len(events) else 0
    out = []
    for key in sorted(set(found) | _keys(devices, first_rank)):
        g = found.get(key, IDLE)
        out.append(
            DeviceOverlap(
                device=key.device,
                compute_ns=iv.total(g.sets["compute"]),
                copy_ns=iv.total(g.sets["copy"]),
                overlap_ns=iv.total(g.sets["overlap"]),
                busy_ns=iv.total(g.sets["busy"]),
                kernels=g.kernels,
                memcpys=g.memcpys,
                memsets=g.memsets,
                rank=key.rank,
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
    """How long exactly k GPUs were busy at once, for each k ≥ 1 ("did my two GPUs really run at once?"). A GPU
    is a (rank, device): two ranks' GPU 0 busy together count 2."""
    return concurrency_of(busy_sets(events))


def busy_sets(events: pd.DataFrame) -> list[iv.Intervals]:
    """Each GPU's busy intervals (the union of its GPU work), by (rank, device) ascending: what
    :func:`concurrency_of` sweeps, and what a job's ranks compute apart."""
    return [g.sets["busy"] for _, g in sorted(all_device_sets(events).items())]


def concurrency_of(parts: list[iv.Intervals]) -> dict[int, int]:
    """:func:`concurrent_devices_ns` of the GPUs whose busy intervals are ``parts`` (:func:`busy_sets`)."""
    if not parts:
        return {}
    starts = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
    ends = np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False)
    if not starts.size:
        return {}
    lo, hi = min(int(starts.min()), int(ends.min())), max(int(starts.max()), int(ends.max()))
    if hi - lo < 1 << 62:
        # One sorted int64 key per edge, (time - lo) * 2 + (1 for a start): ends before starts at one time, as the
        # two-key lexsort orders them, at a quarter of its time (64 GPUs' busy sets of a large job: 3.4 -> 0.8 s)
        key = np.concatenate([(ends - lo) * 2, (starts - lo) * 2 + 1])
        key.sort()
        delta = (key & 1).astype(np.int8)
        delta += delta - 1  # (1 a start, -1 an end)
        pos = np.right_shift(key, 1, out=key)
    else:  # (a span past 2**62 ns: the key would overflow)
        pos = np.concatenate([starts, ends])
        delta = np.concatenate([np.ones(starts.size, np.int64), -np.ones(ends.size, np.int64)])
        order = np.lexsort((delta, pos))
        pos, delta = pos[order], delta[order]
    level = np.cumsum(delta, dtype=np.int64)[:-1]  # (one value at least: every interval gives two edges)
    length = np.diff(pos)
    if int(level.min()) < 0:  # (it lasts no time: an empty interval's end before its start)
        np.maximum(level, 0, out=level)
    total = np.zeros(int(level.max()) + 1, dtype=np.int64)
    np.add.at(total, level, length)
    return {k: v for k, v in enumerate(total.tolist()) if k > 0 and v > 0}
