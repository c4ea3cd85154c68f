"""A timeline laid out for drawing: lanes, their sub-rows, a colour class per interval, sorted once.

:func:`prepare` is pure and runs once per run (the data layer caches its result); every zoom then only
slices the arrays it built. Layout, top to bottom:

- per GPU: a band where its compute and copies overlap, then one lane per stream, each with a ``kernels``
  and a ``copies`` sub-row (copies and memsets), so that merged overview blocks never hide the copies
  behind the kernels;
- per host thread that did anything: a lane of its NVTX / ``record_function`` ranges (one sub-row per
  nesting level), and a lane with its framework ops (by nesting level) and its CUDA API calls (launches).

Times are kept relative to the run's first event (``t0_ns``), in int64 nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.overlap import DeviceOverlap, device_overlap, device_sets
from tracer.timeline import Timeline


@dataclass(frozen=True)
class DrawClass:
    """One colour of the timeline, with its legend label."""

    key: str
    label: str
    color: str


#: Colour classes, in drawing order. Okabe–Ito colours (distinguishable with the common colour-vision
#: deficiencies); copies in warm/green hues against blue kernels, host work in pale tones. The overlap band
#: is yellow under black hatching (dashboard/figures.py), far in lightness and pattern from the vermilion
#: DtoH copies beside it (orange was not); ranges are a pale sand so that the band's yellow stays its own.
CLASSES: tuple[DrawClass, ...] = (
    DrawClass("kernel", "Kernel", "#0072B2"),
    DrawClass("HtoD", "Copy HtoD", "#009E73"),
    DrawClass("DtoH", "Copy DtoH", "#D55E00"),
    DrawClass("DtoD", "Copy DtoD / PtoP", "#CC79A7"),
    DrawClass("copy_other", "Copy (other)", "#8C6D31"),
    DrawClass("memset", "Memset", "#999999"),
    DrawClass("overlap", "Compute ∩ copy", "#F0E442"),
    DrawClass("range", "Range (NVTX / annotation)", "#E8DFB0"),
    DrawClass("cpu_op", "CPU op", "#9DB9D3"),
    DrawClass("runtime", "CUDA API call", "#56B4E9"),
)
CLASS_INDEX: dict[str, int] = {c.key: i for i, c in enumerate(CLASSES)}
N_CLASSES = len(CLASSES)

#: Deeper nesting than this shares the last sub-row.
MAX_RANGE_DEPTH = 3
MAX_OP_DEPTH = 3


@dataclass(frozen=True)
class Row:
    """One sub-row of the chart."""

    lane: str  # lane key: "gpu0/s7", "gpu0/overlap", "ranges/424/424", "cpu/424/424"
    lane_label: str  # "GPU 0 · stream 7"
    sub: str  # "kernels", "copies", "compute ∩ copy", "ranges", "ops", "CUDA API calls"; "ops, depth 2" ...
    label: str  # the y-axis text
    device: int  # GPU index, -1 for host rows


@dataclass
class TimelineView:
    """What the figures need from one run, computed once."""

    timeline: Timeline
    t0_ns: int  # absolute start of the first event; every other time here is relative to it
    span_ns: int
    rows: list[Row]
    lanes: list[tuple[str, str]]  # (lane key, lane label) in display order
    #: Drawable intervals sorted by (group, start); group = row * N_CLASSES + class.
    start_ns: np.ndarray
    end_ns: np.ndarray
    group: np.ndarray
    #: Row of ``timeline.events`` each interval came from (-1 for synthesised overlap intervals).
    src: np.ndarray
    devices: list[DeviceOverlap] = field(default_factory=list)

    @cached_property
    def group_bounds(self) -> np.ndarray:
        """[lo, hi) positions of every group in the sorted arrays (shape (rows × classes, 2))."""
        n = len(self.rows) * N_CLASSES
        edges = np.searchsorted(self.group, np.arange(n + 1))
        return np.column_stack([edges[:-1], edges[1:]])

    @cached_property
    def correlation_to_launch(self) -> pd.Series:
        """Correlation id -> events row of the host runtime/driver call that launched GPU work."""
        ev = self.timeline.events
        calls = ev[ev["kind"].isin(("runtime", "driver")) & ev["correlation"].notna()]
        s = pd.Series(calls.index.to_numpy(), index=calls["correlation"].astype("int64").to_numpy())
        return s[~s.index.duplicated(keep="first")]

    def row_of_src(self, src: int) -> int | None:
        """The row an events row is drawn on (None if it is not drawn)."""
        hit = np.flatnonzero(self.src == src)
        return int(self.group[hit[0]] // N_CLASSES) if hit.size else None

    def lane_busy(self, bins: int) -> tuple[list[str], np.ndarray]:
        """Per lane, the busy fraction of ``bins`` equal columns of the whole run (the minimap)."""
        from dashboard.lod import busy_fraction

        key = ("lane_busy", bins)
        cache = self.__dict__.setdefault("_busy_cache", {})
        if key not in cache:
            lane_of_row = np.array([self._lane_index[r.lane] for r in self.rows], dtype=np.int64)
            lane_of = lane_of_row[self.group // N_CLASSES] if self.group.size else self.group
            z = np.zeros((len(self.lanes), bins))
            for i in range(len(self.lanes)):
                m = lane_of == i
                s, e = iv.union(self.start_ns[m], self.end_ns[m])
                z[i] = busy_fraction(s, e, 0, max(self.span_ns, 1), bins)
            cache[key] = z
        return [label for _, label in self.lanes], cache[key]

    @cached_property
    def _lane_index(self) -> dict[str, int]:
        return {k: i for i, (k, _) in enumerate(self.lanes)}


def _thread_label(timeline: Timeline, pid: int, tid: int) -> str:
    name = timeline.meta.thread_names.get(f"{pid}:{tid}", "").strip()
    if name.startswith("thread "):
        return name
    return f"thread {tid} ({name})" if name else f"thread {tid}"


def nesting_depth(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many of the other intervals are open when each interval starts (0 = outermost).

    Exact for properly nested intervals of one thread (ranges, framework ops). Vectorised: the intervals
    that started before this one minus those that ended at or before its start.
    """
    n = starts.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-(ends - starts), starts))  # the outer (longer) one first at equal starts
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    ended = np.searchsorted(np.sort(ends), starts, side="right")
    return np.maximum(rank - ended, 0)


def depth_subs(what: str, n: int, deeper: bool) -> list[str]:
    """Sub-row names for ``n`` nesting levels: ``["ops"]`` for one, else ``["ops, depth 1", "ops, depth 2",
    ...]``, the last ``"depth 3+"`` when ``deeper`` levels share it. Spelled out because a bare "ops 2"
    read like a second thread or a count."""
    if n <= 0:
        return []
    if n == 1 and not deeper:
        return [what]
    return [f"{what}, depth {i + 1}" + ("+" if deeper and i == n - 1 else "") for i in range(n)]


def prepare(timeline: Timeline) -> TimelineView:
    """Lay ``timeline`` out in rows and sort its drawable intervals by (row, class, start)."""
    ev = timeline.events
    t0 = int(ev["start_ns"].min()) if len(ev) else 0
    span = int(ev["end_ns"].max()) - t0 if len(ev) else 0
    kind = ev["kind"].astype(str).to_numpy()
    copy_kind = ev["copy_kind"].astype(str).to_numpy()
    device = ev["device"].to_numpy().astype(np.int64)
    stream = ev["stream"].to_numpy().astype(np.int64)
    pid = ev["pid"].to_numpy()
    tid = ev["tid"].to_numpy()
    starts = ev["start_ns"].to_numpy() - t0
    ends = ev["end_ns"].to_numpy() - t0

    rows: list[Row] = []
    lanes: list[tuple[str, str]] = []
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (start, end, group, src)

    def add_lane(key: str, label: str, subs: list[str], device_: int) -> list[int]:
        lanes.append((key, label))
        first = len(rows)
        for sub in subs:
            text = f"{label} · {sub}" if len(subs) > 1 else label
            rows.append(Row(key, label, sub, text, device_))
        return list(range(first, len(rows)))

    def add(idx: np.ndarray, row: int | np.ndarray, cls: np.ndarray | int) -> None:
        if idx.size:
            grp = np.asarray(row, dtype=np.int64) * N_CLASSES + np.asarray(cls, dtype=np.int64)
            parts.append(
                (starts[idx], ends[idx], np.broadcast_to(grp, idx.shape).copy(), idx.astype(np.int64))
            )

    copy_cls = np.full(len(ev), CLASS_INDEX["copy_other"], dtype=np.int64)
    copy_cls[copy_kind == "HtoD"] = CLASS_INDEX["HtoD"]
    copy_cls[copy_kind == "DtoH"] = CLASS_INDEX["DtoH"]
    copy_cls[np.isin(copy_kind, ("DtoD", "PtoP"))] = CLASS_INDEX["DtoD"]

    is_kernel = kind == "kernel"
    is_copy = kind == "memcpy"
    is_memset = kind == "memset"
    on_gpu = (is_kernel | is_copy | is_memset) & (device >= 0)
    devices = device_overlap(ev)
    gpu_ids = sorted({d.device for d in devices} | set(timeline.meta.gpu_names))
    for dev in gpu_ids:
        (band,) = add_lane(f"gpu{dev}/overlap", f"GPU {dev} · compute ∩ copy", ["compute ∩ copy"], dev)
        ov_s, ov_e = device_sets(ev, dev)["overlap"]
        if ov_s.size:
            parts.append(
                (
                    ov_s - t0,
                    ov_e - t0,
                    np.full(ov_s.size, band * N_CLASSES + CLASS_INDEX["overlap"], dtype=np.int64),
                    np.full(ov_s.size, -1, dtype=np.int64),
                )
            )
        on_dev = on_gpu & (device == dev)
        for st in np.unique(stream[on_dev]).tolist():
            here = on_dev & (stream == st)
            k = np.flatnonzero(here & is_kernel)
            c = np.flatnonzero(here & (is_copy | is_memset))
            subs = (["kernels"] if k.size else []) + (["copies"] if c.size else [])
            lane_rows = add_lane(f"gpu{dev}/s{st}", f"GPU {dev} · stream {st}", subs, dev)
            if k.size:
                add(k, lane_rows[0], CLASS_INDEX["kernel"])
            if c.size:
                cls = np.where(is_memset[c], CLASS_INDEX["memset"], copy_cls[c])
                add(c, lane_rows[-1], cls)

    host = device < 0
    is_range = host & (kind == "range")
    is_op = host & (kind == "cpu_op")
    is_api = host & np.isin(kind, ("runtime", "driver"))
    is_sync = host & (kind == "sync")
    active = is_range | is_op | is_api
    thread_key = pid.astype(np.int64) * (1 << 32) + (tid.astype(np.int64) & 0xFFFFFFFF)
    # one row per distinct thread key, then the few pairs sorted: a Python set over a million rows cost 0.2 s
    # of a 1.1 s layout
    _, first = np.unique(thread_key[active], return_index=True)
    threads = sorted((int(p), int(t)) for p, t in zip(pid[active][first], tid[active][first]))
    for p, t in threads:
        mine = thread_key == (p * (1 << 32) + (t & 0xFFFFFFFF))
        tlabel = _thread_label(timeline, p, t)
        r = np.flatnonzero(mine & is_range)
        if r.size:
            raw = nesting_depth(starts[r], ends[r])
            depth = np.minimum(raw, MAX_RANGE_DEPTH - 1)
            subs = depth_subs("ranges", int(depth.max()) + 1, bool(raw.max() > depth.max()))
            lane_rows = add_lane(f"ranges/{p}/{t}", f"NVTX · {tlabel}", subs, -1)
            add(r, np.asarray(lane_rows)[depth], CLASS_INDEX["range"])
        o = np.flatnonzero(mine & is_op)
        a = np.flatnonzero(mine & (is_api | is_sync))
        if o.size or a.size:
            raw = nesting_depth(starts[o], ends[o])
            depth = np.minimum(raw, MAX_OP_DEPTH - 1)
            n = int(depth.max()) + 1 if o.size else 0
            subs = depth_subs("ops", n, bool(o.size and raw.max() > depth.max())) + (
                ["CUDA API calls"] if a.size else []
            )
            lane_rows = add_lane(f"cpu/{p}/{t}", f"CPU · {tlabel}", subs, -1)
            if o.size:
                add(o, np.asarray(lane_rows)[depth], CLASS_INDEX["cpu_op"])
            if a.size:
                add(a, lane_rows[-1], CLASS_INDEX["runtime"])

    if parts:
        s = np.concatenate([p_[0] for p_ in parts]).astype(np.int64)
        e = np.concatenate([p_[1] for p_ in parts]).astype(np.int64)
        g = np.concatenate([p_[2] for p_ in parts]).astype(np.int64)
        src = np.concatenate([p_[3] for p_ in parts]).astype(np.int64)
        order = np.lexsort((s, g))
        s, e, g, src = s[order], e[order], g[order], src[order]
    else:
        s = e = g = src = np.empty(0, dtype=np.int64)
    return TimelineView(timeline, t0, span, rows, lanes, s, e, g, src, devices)
