"""A timeline laid out for drawing: lanes, their sub-rows, a colour class per interval, sorted once.

:func:`prepare` is pure and runs once per run (the data layer caches its result); every zoom then only
slices the arrays it built. The lanes — GPU streams and host threads of each rank, their order and their
titles — are :func:`tracer.timeline.layout.lay_out`'s, the same as the exporters'. What is the dashboard's own, top to
bottom:

- per GPU: a band where its compute and copies overlap, a band where its compute and its communication
  (NCCL / RCCL kernels) overlap when it ran any, then its streams' lanes, each with a ``kernels`` and a
  ``copies`` sub-row (copies and memsets), so that merged overview blocks never hide the copies behind the
  kernels; communication kernels keep the kernels' sub-row in a colour of their own;
- per host thread that did anything: a lane of its NVTX / ``record_function`` ranges (one sub-row per
  nesting level), and a lane with its framework ops (by nesting level) and its CUDA API calls (launches).

In a timeline of several ranks the lanes are grouped rank → device → stream (each rank's GPUs, then its host
threads), every lane's label begins with its rank (``"rank 1 · GPU 0 · stream 7"``) and its key with ``"r1/"``;
each rank also gets a *folded* lane (``"r1/fold"``, :attr:`Row.folded`), not shown by default, that stands for
all of the rank's lanes when the page folds it: the union of its GPU compute, communication and copies, one
sub-row each (:data:`FOLD_SUBS`). A one-rank timeline is laid out as it always was. Times are kept relative to the run's
first event (``t0_ns``), in int64 nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.comm import Collectives, DeviceComm, collectives, device_comm
from tracer.analysis.launches import LaunchStat, launch_table
from tracer.analysis.lod import Blocks, busy_fraction, merge_blocks, running_max
from tracer.analysis.overlap import IDLE, DeviceOverlap, all_device_sets, device_overlap
from tracer.timeline import COPY_KINDS, KINDS, DeviceKey, Timeline, device_title, is_multi_rank
from tracer.timeline.keys import ranks
from tracer.timeline.layout import Lane, Layout, lay_out, nesting_depth
from tracer.timeline.links import launch_of

__all__ = [
    "CLASSES", "CLASS_INDEX", "N_CLASSES", "DrawClass", "Row", "TimelineView", "depth_subs", "nesting_depth",
    "prepare",
]


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
    # communication: kernels (and host records) whose ``collective`` is set; a dark purple, far in lightness
    # from the blue compute kernels and in hue from every copy colour
    DrawClass("comm", "Communication (collectives)", "#5E2A84"),  # (NCCL kernels, gloo ranges: no "NCCL" on a gloo job)
    DrawClass("HtoD", "Copy HtoD", "#009E73"),
    DrawClass("DtoH", "Copy DtoH", "#D55E00"),
    DrawClass("DtoD", "Copy DtoD / PtoP", "#CC79A7"),
    DrawClass("copy_other", "Copy (other)", "#8C6D31"),
    DrawClass("memset", "Memset", "#999999"),
    DrawClass("overlap", "Compute ∩ copy", "#F0E442"),
    DrawClass("comm_overlap", "Compute ∩ comm", "#C9B3E0"),
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
    rank: int = 0  # the rank the lane belongs to
    #: a rank's folded lane: drawn only when the page folds that rank, in place of its other lanes
    folded: bool = False


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
    #: rank -> key of its folded lane (jobs only; empty for one rank)
    fold_lanes: dict[int, str] = field(default_factory=dict)
    #: The trace file or run directory the timeline was read from (the explain panel reads the kernels' launch
    #: figures from it); None for a timeline made in memory.
    source: Path | None = None

    @cached_property
    def comm(self) -> list[DeviceComm]:
        """Per GPU, compute beside communication (the ``comm`` analysis); [] without comm kernels."""
        return device_comm(self.timeline.events)

    @cached_property
    def launches(self) -> list[LaunchStat]:
        """Per GPU, how far the host ran ahead of it (the ``launches`` analysis); [] without GPU work."""
        return [LaunchStat.from_dict(r) for r in launch_table(self.timeline.events).to_dict("records")]

    @cached_property
    def collectives(self) -> Collectives:
        """Every collective instance matched across the ranks, and the per-rank skew (the ``collectives``
        analysis); computed when a page first asks."""
        return collectives(self.timeline.events)

    def collective_window(self, i: int) -> tuple[int, int]:
        """Collective instance ``i``'s window (ns since ``t0_ns``): its earliest start to the straggler's end,
        with a quarter of that on each side."""
        c = self.collectives.rows[i]
        lo = c.start_ns - self.t0_ns
        hi = lo + c.skew_ns + c.dur_ns
        pad = max((hi - lo) // 4, 5_000)
        return lo - pad, hi + pad

    @cached_property
    def ranks(self) -> list[int]:
        """The ranks that have lanes, in order."""
        return sorted({r.rank for r in self.rows})

    @cached_property
    def rank_lanes(self) -> dict[int, list[str]]:
        """Per rank, its lane keys in display order (folded lanes left out)."""
        out: dict[int, list[str]] = {}
        for key, _ in self.lanes:
            out.setdefault(self.rows[self._first_row[key]].rank, []).append(key)
        return out

    @cached_property
    def _first_row(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for i, r in enumerate(self.rows):
            out.setdefault(r.lane, i)
        return out

    def shown_lanes(
        self, lanes: list[str] | None = None, ranks: list[int] | None = None, folded: list[int] | None = None
    ) -> list[str] | None:
        """The lane keys to draw: those of ``lanes`` (None: all) on ``ranks`` (None: all), with each rank of
        ``folded`` shown as its one folded lane. None when that is every lane unfolded (the fast path)."""
        if ranks is None and not folded:
            return lanes
        keep = None if lanes is None else set(lanes)
        fold = set(folded or ()) & set(self.fold_lanes)
        out: list[str] = []
        for rank in self.ranks:
            if ranks is not None and rank not in ranks:
                continue
            if rank in fold:
                out.append(self.fold_lanes[rank])
                continue
            out += [k for k in self.rank_lanes.get(rank, []) if keep is None or k in keep]
        return out

    @cached_property
    def group_bounds(self) -> np.ndarray:
        """[lo, hi) positions of every group in the sorted arrays (shape (rows × classes, 2))."""
        n = len(self.rows) * N_CLASSES
        edges = np.searchsorted(self.group, np.arange(n + 1))
        return np.column_stack([edges[:-1], edges[1:]])

    @cached_property
    def multi_rank(self) -> bool:
        """Whether the run holds several ranks (then every label names its rank)."""
        return is_multi_rank(self.timeline.events)

    @cached_property
    def launch_src(self) -> np.ndarray:
        """Per events row (by position), the row of the host runtime/driver call that launched it; -1 where
        none did or the call is not in the trace. The timeline's one launch join
        (:func:`tracer.timeline.launch_links`: same rank, process and correlation id)."""
        ev = self.timeline.events
        launches = launch_of(ev)
        out = np.full(len(ev), -1, dtype=np.int64)
        if len(launches):
            out[ev.index.get_indexer(launches.index)] = ev.index.get_indexer(launches.to_numpy())
        return out

    #: Why the view does not hold its whole timeline (a large job read rank by rank from its stored dataset:
    #: ``tracer.dashboard.job_view``), or None: the pages leave out what needs it whole (the critical path).
    partial: str | None = None

    @property
    def n_events(self) -> int:
        """The run's events (intervals of its timeline)."""
        return len(self.timeline.events)

    @property
    def default_folded(self) -> list[int]:
        """The ranks drawn folded until the page says otherwise: none (a large job's view: every rank)."""
        return []

    def select(self, rows: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The sorted arrays restricted to ``rows`` (slices of whole groups: no mask over every interval), and
        each interval's position in them."""
        if len(rows) == len(self.rows):
            return self.start_ns, self.end_ns, self.group, np.arange(self.group.size)
        bounds = self.group_bounds.reshape(len(self.rows), N_CLASSES, 2)[rows]
        lo, hi = bounds[..., 0].ravel(), bounds[..., 1].ravel()
        n = hi - lo
        if n.sum() == 0:
            e = np.empty(0, dtype=np.int64)
            return e, e, e, e
        pos = np.repeat(lo, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
        return self.start_ns[pos], self.end_ns[pos], self.group[pos], pos

    def blocks_in(self, rows: list[int], t0: int, t1: int, ns_per_px: float) -> tuple[Blocks, np.ndarray]:
        """The merged blocks (:func:`tracer.analysis.lod.merge_blocks`) of ``rows`` over [``t0``, ``t1``) (ns since
        ``t0_ns``) at ``ns_per_px``, and each block's first interval's events row (-1: a band's or folded lane's
        piece)."""
        pos = self.near(rows, t0, t1)
        blocks = merge_blocks(self.start_ns[pos], self.end_ns[pos], self.group[pos], t0, t1, ns_per_px)
        return blocks, self.src[pos[blocks.first]]

    def near(self, rows: list[int], t0: int, t1: int) -> np.ndarray:
        """Positions, in (group, start) order, of the intervals of ``rows`` from the first whose group reaches
        ``t0`` (:attr:`reach`) to the last that starts before ``t1``: every interval that touches the window and
        few others. Two binary searches per group: a zoom into a rank of a million intervals no longer gathers
        and tests all of them (a third of an unfolded rank's zoom, issue 39)."""
        bounds = self.group_bounds.reshape(len(self.rows), N_CLASSES, 2)[rows].reshape(-1, 2)
        bounds = bounds[bounds[:, 1] > bounds[:, 0]]
        if not bounds.size:
            return np.empty(0, dtype=np.int64)
        reach, starts = self.reach, self.start_ns
        a = np.empty(len(bounds), dtype=np.int64)
        b = np.empty(len(bounds), dtype=np.int64)
        for i, (lo, hi) in enumerate(bounds.tolist()):
            # (>= t0: an instant marker at t0 touches the window; see tracer.analysis.lod)
            a[i] = lo + np.searchsorted(reach[lo:hi], t0, side="left")
            b[i] = lo + np.searchsorted(starts[lo:hi], t1, side="left")
        n = np.maximum(b - a, 0)
        total = int(n.sum())
        if not total:
            return np.empty(0, dtype=np.int64)
        pos: np.ndarray = np.repeat(a, n) + (np.arange(total) - np.repeat(np.cumsum(n) - n, n))
        return pos

    @cached_property
    def reach(self) -> np.ndarray:
        """Per interval, the latest end of its group's intervals up to it (a running maximum per group, so sorted
        within each group as the starts are): intervals before the first that reaches ``t0`` all end before it."""
        return running_max(self.end_ns, self.group)

    def event_rows(self, src: np.ndarray) -> pd.DataFrame:
        """The timeline's rows at positions ``src`` (all >= 0), in that order."""
        return self.timeline.events.iloc[np.asarray(src, dtype=np.int64)]

    def launch_pos(self, src: int) -> int:
        """The position of the call that launched events row ``src`` (-1: none)."""
        return int(self.launch_src[src])

    def row_of_src(self, src: int) -> int | None:
        """The row an events row is drawn on (None if it is not drawn)."""
        hit = np.flatnonzero(self.src == src)
        return int(self.group[hit[0]] // N_CLASSES) if hit.size else None

    def lane_busy(self, bins: int) -> tuple[list[str], np.ndarray]:
        """Per lane, the busy fraction of ``bins`` equal columns of the whole run (the minimap)."""
        key = ("lane_busy", bins)
        cache = self.__dict__.setdefault("_busy_cache", {})
        if key not in cache:
            # (folded lanes repeat their rank's work: not on the overview)
            lane_of_row = np.array([self._lane_index.get(r.lane, -1) for r in self.rows], dtype=np.int64)
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


def depth_subs(what: str, n: int, deeper: bool) -> list[str]:
    """Sub-row names for ``n`` nesting levels: ``["ops"]`` for one, else ``["ops, depth 1", "ops, depth 2",
    ...]``, the last ``"depth 3+"`` when ``deeper`` levels share it. Spelled out because a bare "ops 2"
    read like a second thread or a count."""
    if n <= 0:
        return []
    if n == 1 and not deeper:
        return [what]
    return [f"{what}, depth {i + 1}" + ("+" if deeper and i == n - 1 else "") for i in range(n)]


#: The sub-rows of a rank's folded lane: (name, the colours it gathers, from GPU rows (True) or host rows
#: (False)). Each colour is the union of that colour's intervals over the rank's lanes. A rank with GPU work
#: folds to its GPU sub-rows only (three rows a rank: a 64-rank job folded stays readable); a rank without
#: (gloo on the CPU) to its host ones.
FOLD_SUBS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("GPU compute", ("kernel",), True),
    ("GPU communication", ("comm",), True),
    ("GPU copies", ("HtoD", "DtoH", "DtoD", "copy_other", "memset"), True),
    ("host communication", ("comm",), False),  # gloo's ranges, record_param_comms ops
    ("host", ("range", "cpu_op", "runtime"), False),
)


#: What a row is drawn as (``prepare``): a kernel, a copy or memset, a range, an op, a CUDA API call or sync.
_NOT_DRAWN, _KERNEL, _COPY, _RANGE, _OP, _API = -1, 0, 1, 2, 3, 4


def _gpus(timeline: Timeline, layout: Layout) -> list[DeviceKey]:
    """The GPUs that get a compute ∩ copy band: those with GPU work and, in a one-rank timeline, those the
    trace names (an idle GPU shows as one). In a job's timeline the names do not say which rank a GPU belongs
    to, so only GPUs with work are shown there."""
    found = set(layout.devices)
    if not layout.multi_rank:
        rank = ranks(timeline.events)[0]
        found |= {DeviceKey(rank, int(d)) for d in timeline.meta.gpu_names}
    return sorted(found)


def _lane_key(rank: int, multi_rank: bool, key: str) -> str:
    """A lane's key for the lane filter: ``"gpu0/s7"``, and ``"r1/gpu0/s7"`` in a job's timeline."""
    return f"r{rank}/{key}" if multi_rank else key


def prepare(timeline: Timeline, *, multi_rank: bool | None = None) -> TimelineView:
    """Lay ``timeline`` out in rows and sort its drawable intervals by (row, class, start). ``multi_rank``: laid
    out as a job's timeline is (lanes titled with their rank, a folded lane per rank), or not; default: as it
    holds several ranks or one. (One rank of a large job is laid out as part of the job: its rows are then the
    job's rows of that rank.)

    The lanes, their order and their titles are :func:`tracer.timeline.layout.lay_out`'s, shared with the exporters;
    what is the dashboard's own is the overlap band per GPU, the sub-rows (a stream's kernels and copies; a
    thread's ranges and ops by nesting depth, and its CUDA API calls) and the colour classes.
    """
    ev = timeline.events
    t0 = int(ev["start_ns"].min()) if len(ev) else 0
    span = int(ev["end_ns"].max()) - t0 if len(ev) else 0
    # category codes, not strings: turning a million kinds into strings cost a quarter of this function
    kind = ev["kind"].cat.codes.to_numpy()
    copy_kind = ev["copy_kind"].cat.codes.to_numpy()
    device = ev["device"].to_numpy().astype(np.int64)
    starts = ev["start_ns"].to_numpy() - t0
    ends = ev["end_ns"].to_numpy() - t0

    rows: list[Row] = []
    lanes: list[tuple[str, str]] = []
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (start, end, group, src)

    def add_lane(key: str, label: str, subs: list[str], device_: int, rank: int, folded: bool = False) -> list[int]:
        if not folded:  # (a folded lane is no lane of the filter or the overview: it repeats its rank's)
            lanes.append((key, label))
        first = len(rows)
        for sub in subs:
            text = f"{label} · {sub}" if len(subs) > 1 else label
            rows.append(Row(key, label, sub, text, device_, rank, folded))
        return list(range(first, len(rows)))

    def add(idx: np.ndarray, row: int | np.ndarray, cls: np.ndarray | int) -> None:
        if idx.size:
            grp = np.asarray(row, dtype=np.int64) * N_CLASSES + np.asarray(cls, dtype=np.int64)
            parts.append(
                (starts[idx], ends[idx], np.broadcast_to(grp, idx.shape).copy(), idx.astype(np.int64))
            )

    def is_kind(name: str) -> np.ndarray:
        hit: np.ndarray = kind == KINDS.index(name)
        return hit

    copy_cls = np.full(len(ev), CLASS_INDEX["copy_other"], dtype=np.int64)
    copy_cls[copy_kind == COPY_KINDS.index("HtoD")] = CLASS_INDEX["HtoD"]
    copy_cls[copy_kind == COPY_KINDS.index("DtoH")] = CLASS_INDEX["DtoH"]
    copy_cls[np.isin(copy_kind, (COPY_KINDS.index("DtoD"), COPY_KINDS.index("PtoP")))] = CLASS_INDEX["DtoD"]

    is_kernel = is_kind("kernel")
    is_copy = is_kind("memcpy")
    is_memset = is_kind("memset")
    on_gpu = (is_kernel | is_copy | is_memset) & (device >= 0)
    host = device < 0
    is_range = host & is_kind("range")
    is_op = host & is_kind("cpu_op")
    is_api = host & (is_kind("runtime") | is_kind("driver"))
    is_sync = host & is_kind("sync")
    # what each row is drawn as; one gather of it per lane below, not one per kind
    what = np.full(len(ev), _NOT_DRAWN, dtype=np.int8)
    for code, mask in ((_KERNEL, on_gpu & is_kernel), (_COPY, on_gpu & ~is_kernel), (_RANGE, is_range),
                       (_OP, is_op), (_API, is_api | is_sync)):
        what[mask] = code
    # GPU streams that hold GPU work; host threads that hold ranges, ops or API calls (a thread's syncs are
    # drawn with its API calls, but syncs alone make no lane)
    layout = lay_out(ev, timeline.meta, rows=what != _NOT_DRAWN, multi_rank=multi_rank)
    if layout.lanes:
        anchored = layout.lane_of_row[on_gpu | is_range | is_op | is_api]
        layout = layout.keep(np.bincount(anchored, minlength=len(layout.lanes)) > 0)
    def _add_gpu(gpu: DeviceKey, gpu_lanes: list[Lane]) -> None:
        dev = gpu.device
        (band,) = add_lane(
            _lane_key(gpu.rank, multi, f"gpu{dev}/overlap"),
            f"{device_title(gpu, multi)} · compute ∩ copy",
            ["compute ∩ copy"],
            dev,
            gpu.rank,
        )
        sets = gpu_sets.get(gpu, IDLE).sets
        add_set(sets["overlap"], band, "overlap")
        if sets["comm"][0].size:
            (cband,) = add_lane(
                _lane_key(gpu.rank, multi, f"gpu{dev}/comm_overlap"),
                f"{device_title(gpu, multi)} · compute ∩ comm",
                ["compute ∩ comm"],
                dev,
                gpu.rank,
            )
            add_set(iv.intersect(sets["compute"], sets["comm"]), cband, "comm_overlap")
        for lane in gpu_lanes:
            mine = members[lane.index]
            w = what[mine]
            k = mine[w == _KERNEL]
            c = mine[w == _COPY]
            subs = (["kernels"] if k.size else []) + (["copies"] if c.size else [])
            key = _lane_key(lane.rank, multi, f"gpu{dev}/s{lane.stream}")
            lane_rows = add_lane(key, lane.title, subs, dev, lane.rank)
            if k.size:
                add(k, lane_rows[0], kernel_cls[k])
            if c.size:
                cls = np.where(is_memset[c], CLASS_INDEX["memset"], copy_cls[c])
                add(c, lane_rows[-1], cls)

    def _add_host(lane: Lane) -> None:
        p, t = lane.pid, lane.tid
        mine = members[lane.index]
        w = what[mine]
        r = mine[w == _RANGE]
        if r.size:
            raw = nesting_depth(starts[r], ends[r])
            depth = np.minimum(raw, MAX_RANGE_DEPTH - 1)
            subs = depth_subs("ranges", int(depth.max()) + 1, bool(raw.max() > depth.max()))
            key = _lane_key(lane.rank, multi, f"ranges/{p}/{t}")
            lane_rows = add_lane(key, f"{lane.prefix}NVTX · {lane.name}", subs, -1, lane.rank)
            add(r, np.asarray(lane_rows)[depth], range_cls[r])
        o = mine[w == _OP]
        a = mine[w == _API]
        if o.size or a.size:
            raw = nesting_depth(starts[o], ends[o])
            depth = np.minimum(raw, MAX_OP_DEPTH - 1)
            n = int(depth.max()) + 1 if o.size else 0
            subs = depth_subs("ops", n, bool(o.size and raw.max() > depth.max())) + (
                ["CUDA API calls"] if a.size else []
            )
            key = _lane_key(lane.rank, multi, f"cpu/{p}/{t}")
            lane_rows = add_lane(key, f"{lane.prefix}CPU · {lane.name}", subs, -1, lane.rank)
            if o.size:
                add(o, np.asarray(lane_rows)[depth], op_cls[o])
            if a.size:
                add(a, lane_rows[-1], CLASS_INDEX["runtime"])

    def _add_fold(rank: int, mine: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> str:
        """The rank's folded lane: per sub-row of :data:`FOLD_SUBS`, the union of each colour's intervals of
        the rank's lanes (one sort of the rank's intervals; the unions are vectorised)."""
        key = f"r{rank}/fold"
        if not mine:
            add_lane(key, f"rank {rank} · folded", ["nothing drawn"], -1, rank, folded=True)
            return key
        s_ = np.concatenate([m[0] for m in mine])
        e_ = np.concatenate([m[1] for m in mine])
        g_ = np.concatenate([m[2] for m in mine])
        cls = g_ % N_CLASSES
        on_gpu_row = np.array([r.device >= 0 for r in rows], dtype=bool)[g_ // N_CLASSES]
        sub = np.full(s_.size, -1, dtype=np.int64)
        for i, (_, classes, gpu_side) in enumerate(FOLD_SUBS):
            m = np.isin(cls, [CLASS_INDEX[c] for c in classes])
            m &= on_gpu_row == gpu_side
            sub[m & (sub < 0)] = i
        keep = sub >= 0
        if on_gpu_row.any():  # a rank with GPU work folds to its GPU rows: its host rows would only add height
            keep &= np.isin(sub, [i for i, (_, _, gpu_side) in enumerate(FOLD_SUBS) if gpu_side])
        s_, e_, cls, sub = s_[keep], e_[keep], cls[keep], sub[keep]
        code = sub * N_CLASSES + cls
        order = np.lexsort((s_, code))
        s_, e_, code = s_[order], e_[order], code[order]
        present = np.unique(code // N_CLASSES)
        names = [FOLD_SUBS[int(i)][0] for i in present]
        fold_rows = dict(zip(present.tolist(),
                             add_lane(key, f"rank {rank} · folded", names, -1, rank, folded=True)))
        bounds = np.flatnonzero(np.diff(code)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, code.size]):
            u_s, u_e = iv.union(s_[lo:hi], e_[lo:hi])
            c = int(code[lo])
            parts.append((u_s, u_e, np.full(u_s.size, fold_rows[c // N_CLASSES] * N_CLASSES + c % N_CLASSES,
                                             dtype=np.int64), np.full(u_s.size, -1, dtype=np.int64)))
        return key

    def add_set(ivs: iv.Intervals, row: int, cls_key: str) -> None:
        s_, e_ = ivs
        if s_.size:
            parts.append((s_ - t0, e_ - t0, np.full(s_.size, row * N_CLASSES + CLASS_INDEX[cls_key], dtype=np.int64),
                          np.full(s_.size, -1, dtype=np.int64)))

    multi = layout.multi_rank
    members = layout.members()
    # every GPU's interval sets in one pass: filtering the whole frame once per GPU made this function grow with
    # ranks x events (1.45 s at 64 ranks)
    gpu_sets = all_device_sets(ev)
    devices = device_overlap(ev, sets=gpu_sets)
    is_comm = ev["collective"].cat.codes.to_numpy() > 0
    # what is drawn as communication: comm kernels on their stream's kernels row, and the host records of a
    # collective (gloo's ranges, record_param_comms ops) on their thread's rows
    kernel_cls = np.where(is_comm, CLASS_INDEX["comm"], CLASS_INDEX["kernel"])
    range_cls = np.where(is_comm, CLASS_INDEX["comm"], CLASS_INDEX["range"])
    op_cls = np.where(is_comm, CLASS_INDEX["comm"], CLASS_INDEX["cpu_op"])

    by_device: dict[DeviceKey, list[Lane]] = {}
    for lane in layout.lanes:
        if lane.device_key is not None:
            by_device.setdefault(lane.device_key, []).append(lane)
    gpus = _gpus(timeline, layout)
    # rank → device → stream: each rank's GPUs (bands, then streams), then its host threads
    all_ranks = sorted({g.rank for g in gpus} | {lane.rank for lane in layout.lanes})
    fold_lanes: dict[int, str] = {}
    for rank_ in all_ranks:
        first_part = len(parts)
        for gpu in (g for g in gpus if g.rank == rank_):
            _add_gpu(gpu, by_device.get(gpu, []))
        for lane in layout.lanes:
            if lane.rank == rank_ and not lane.on_gpu:
                _add_host(lane)
        if multi:
            fold_lanes[rank_] = _add_fold(rank_, parts[first_part:])

    if parts:
        s = np.concatenate([p_[0] for p_ in parts]).astype(np.int64)
        e = np.concatenate([p_[1] for p_ in parts]).astype(np.int64)
        g = np.concatenate([p_[2] for p_ in parts]).astype(np.int64)
        src = np.concatenate([p_[3] for p_ in parts]).astype(np.int64)
        order = np.lexsort((s, g))
        s, e, g, src = s[order], e[order], g[order], src[order]
    else:
        s = e = g = src = np.empty(0, dtype=np.int64)
    view = TimelineView(timeline, t0, span, rows, lanes, s, e, g, src, devices, fold_lanes)
    if multi_rank is not None:
        view.__dict__["multi_rank"] = multi_rank  # (the cached property, as asked rather than from the rows)
    return view
