"""A large job drawn from its stored dataset, rank by rank, never read whole (:class:`JobView`).

A job whose traces hold more than :data:`tracer.job.store.LARGE_JOB_BYTES` (64 ranks of 0.5 GB: 75 million
intervals, ~6 GB as one pandas frame) is not read into one timeline. Its first open lays each rank out on the
worker that parses it and keeps the result beside the rank's partition (:mod:`tracer.job.views`: the rank's
rows and lanes, its GPUs' figures, its folded lane with coarser levels of detail). The dashboard then reads
only those packs to open the job: its rows are the ranks' rows in rank order (the rows a job read whole has),
and every rank starts folded, drawn from its pack, whole or zoomed, at the coarsest level of detail that is at
most a pixel fine (:func:`tracer.analysis.lod.merge_disjoint`). A rank the page unfolds is read from its
partition and laid out alone (:func:`tracer.job.views.lay_out_rank`), at most :data:`MAX_UNFOLDED` at once and
as many kept (least recently drawn dropped): memory follows the ranks shown, not the job.

What needs the job whole is left out or read narrowly: the critical path and the findings (``tracer explain
--window`` reads a window of it), the collectives (read as their own rows from each partition), a click's
launch (the clicked rank's own). The view's ``src`` of an interval is the rank's first position plus its row in
the rank's partition: each rank's events numbered after the ranks before it.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.comm import Collectives, DeviceComm, collectives
from tracer.analysis.launches import LaunchStat
from tracer.analysis.lod import Blocks, Level, busy_fraction, merge_disjoint
from tracer.analysis.overlap import DeviceOverlap
from tracer.dashboard.model import N_CLASSES, Row, TimelineView
from tracer.job import partitions, views
from tracer.job import store as jobstore
from tracer.job.views import Pack
from tracer.timeline import Timeline, concat, empty_events
from tracer.timeline.combine import concat_meta

#: Ranks drawn unfolded at once (each read from its partition and laid out: ~150 MB for a rank of 0.5 GB of
#: JSON); a page that unfolds more shows the others folded and says so.
MAX_UNFOLDED = 4


class JobView(TimelineView):
    """A stored large job as the dashboard draws it (see the module's docstring). Built by :meth:`open`."""

    def __init__(
        self, dataset: Path, entries: Sequence[jobstore.RankEntry], packs: Sequence[Pack], source: Path | None
    ) -> None:
        order = sorted(range(len(packs)), key=lambda i: packs[i].rank)
        self.packs = [packs[i] for i in order]
        self.entries = [sorted(entries, key=lambda e: e.rank)[i] for i in range(len(order))]
        self.dataset = dataset
        keep = [i for i, p in enumerate(self.packs) if p.events] or [0]
        meta = concat_meta([p.meta for p in self.packs], keep)
        meta.source = str(source) if source is not None else str(dataset.parent)
        meta.extra["ranks"] = {str(e.rank): {"source": e.sources[0], "rank_from": e.rank_from} for e in self.entries}
        meta.extra["stored_as"] = str(dataset)
        live = [p for p in self.packs if p.events]
        t0 = min((p.t0_ns for p in live), default=0)
        span = max((p.t0_ns + p.span_ns for p in live), default=0) - t0
        rows: list[Row] = []
        lanes: list[tuple[str, str]] = []
        devices: list[DeviceOverlap] = []
        self.row_offset: dict[int, int] = {}
        self.event_offset = np.zeros(len(self.packs) + 1, dtype=np.int64)
        for i, p in enumerate(self.packs):
            self.row_offset[p.rank] = len(rows)
            rows += p.rows
            lanes += p.lanes
            devices += p.devices
            self.event_offset[i + 1] = self.event_offset[i] + p.events
        e = np.empty(0, dtype=np.int64)
        super().__init__(
            Timeline(empty_events(), meta),
            t0,
            span,
            rows,
            lanes,
            e,
            e,
            e,
            e,
            devices,
            {p.rank: p.fold_lane for p in self.packs},
            source,
        )
        self.partial = (
            f"a job of {len(self.packs)} ranks read rank by rank from its stored dataset "
            f"({self.event_offset[-1]:,} events)"
        )
        self.__dict__["multi_rank"] = len(self.packs) > 1
        self._ranks_in_order = [p.rank for p in self.packs]
        self._index_of = {p.rank: i for i, p in enumerate(self.packs)}
        self._loaded: OrderedDict[int, TimelineView] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def open(cls, stored: jobstore.StoredJob, source: Path | None = None) -> JobView:
        """The view of the stored job ``stored``: each rank's pack, laid out from its partition (and kept) where
        the dataset has none (a job stored by an older tracer)."""
        packs = []
        for e in stored.entries:
            path = views.pack_file(stored.dataset, e.rank)
            pack = views.read_pack(path)
            if pack is None:
                rank_view = views.lay_out_rank(
                    partitions.read_partition(jobstore.partition_file(stored.dataset, e.rank))
                )
                pack = views.pack_of(rank_view)
                views.write_pack(pack, path)
            packs.append(pack)
        return cls(stored.dataset, stored.entries, packs, source)

    # -- what the pages read -----------------------------------------------------------------------------------

    @property
    def n_events(self) -> int:
        return int(self.event_offset[-1])

    @property
    def default_folded(self) -> list[int]:
        return list(self._ranks_in_order)

    @cached_property
    def comm(self) -> list[DeviceComm]:
        return [c for p in self.packs for c in p.comm]

    @cached_property
    def launches(self) -> list[LaunchStat]:
        return [x for p in self.packs for x in p.launches]

    @cached_property
    def collectives(self) -> Collectives:
        """Every collective matched across the ranks, from each rank's collective rows (its pack's; else read from
        its partition, only those rows)."""
        parts = []
        for p, e in zip(self.packs, self.entries):
            t = (
                p.comm_rows
                if p.comm_rows is not None
                else partitions.read_comm(jobstore.partition_file(self.dataset, e.rank))
            )
            if t is not None and len(t.events):
                parts.append(t)
        if not parts:
            return collectives(empty_events())
        job = concat(parts)
        return collectives(job.events)

    def shown_lanes(
        self, lanes: list[str] | None = None, ranks: list[int] | None = None, folded: list[int] | None = None
    ) -> list[str] | None:
        """As a job's view's (:meth:`TimelineView.shown_lanes`), every rank folded unless ``folded`` says (None:
        :attr:`default_folded`), and at most :data:`MAX_UNFOLDED` ranks unfolded: the first of those asked."""
        fold = set(self.default_folded if folded is None else folded)
        open_ = [r for r in self._ranks_in_order if r not in fold and (ranks is None or r in ranks)]
        fold |= set(open_[MAX_UNFOLDED:])
        shown = super().shown_lanes(lanes, ranks, sorted(fold))
        return shown if shown is not None else [k for k, _ in self.lanes]

    def unfolded_beyond(self, ranks: list[int] | None, folded: list[int] | None) -> int:
        """How many ranks asked to be unfolded are drawn folded (past :data:`MAX_UNFOLDED`)."""
        fold = set(self.default_folded if folded is None else folded)
        open_ = [r for r in self._ranks_in_order if r not in fold and (ranks is None or r in ranks)]
        return max(len(open_) - MAX_UNFOLDED, 0)

    def lane_busy(self, bins: int) -> tuple[list[str], np.ndarray]:
        """Per rank, the busy fraction of its folded lane (all its GPU work, or its host work) in ``bins`` columns
        of the whole run (the minimap: one row per rank)."""
        key = ("lane_busy", bins)
        cache = self.__dict__.setdefault("_busy_cache", {})
        if key not in cache:
            z = np.zeros((len(self.packs), bins))
            span = max(self.span_ns, 1)
            for i, p in enumerate(self.packs):
                lv = _level_for(p, span / bins / 4)
                s, e = iv.union(lv.start_ns - self.t0_ns, lv.end_ns - self.t0_ns)
                z[i] = busy_fraction(s, e, 0, span, bins)
            cache[key] = z
        return [f"rank {p.rank}" for p in self.packs], cache[key]

    # -- drawing -------------------------------------------------------------------------------------------------

    def blocks_in(self, rows: list[int], t0: int, t1: int, ns_per_px: float) -> tuple[Blocks, np.ndarray]:
        """The blocks of ``rows`` over [``t0``, ``t1``): each folded rank's from its pack (the coarsest level at
        most ``ns_per_px`` fine), each unfolded rank's from its own layout; rank by rank, so in (group, start)
        order as one view's are."""
        parts: list[tuple[Blocks, np.ndarray]] = []
        chosen = np.asarray(sorted(rows), dtype=np.int64)
        for i, p in enumerate(self.packs):
            off = self.row_offset[p.rank]
            mine = chosen[(chosen >= off) & (chosen < off + len(p.rows))] - off
            if not mine.size:
                continue
            if all(p.rows[r].folded for r in mine.tolist()):
                parts.append(self._fold_blocks(p, mine, t0, t1, ns_per_px, off))
                continue
            view = self.rank_view(p.rank)
            shift = view.t0_ns - self.t0_ns
            b, src = view.blocks_in(mine.tolist(), t0 - shift, t1 - shift, ns_per_px)
            parts.append(
                (
                    Blocks(
                        b.group + off * N_CLASSES,
                        b.start_ns + shift,
                        b.end_ns + shift,
                        b.count,
                        b.busy_ns,
                        b.first,
                        b.n_in_window,
                    ),
                    np.where(src >= 0, src + self.event_offset[i], -1),
                )
            )
        if not parts:
            e = np.empty(0, dtype=np.int64)
            return Blocks(e, e, e, e, e, e, 0), e
        cat = np.concatenate
        blocks = Blocks(
            cat([b.group for b, _ in parts]),
            cat([b.start_ns for b, _ in parts]),
            cat([b.end_ns for b, _ in parts]),
            cat([b.count for b, _ in parts]),
            cat([b.busy_ns for b, _ in parts]),
            cat([b.first for b, _ in parts]),
            sum(b.n_in_window for b, _ in parts),
        )
        return blocks, cat([s for _, s in parts])

    def _fold_blocks(
        self, p: Pack, local_rows: np.ndarray, t0: int, t1: int, ns_per_px: float, off: int
    ) -> tuple[Blocks, np.ndarray]:
        lv = _level_for(p, ns_per_px)
        lo, hi = self.t0_ns + t0, self.t0_ns + t1
        pos = []
        where = _groups_of(lv)
        for r in local_rows.tolist():
            # (disjoint within a group: its ends are sorted as its starts are; per colour class of the row)
            for _cls, (c0, c1) in where.get(r, ()):
                a = c0 + np.searchsorted(lv.end_ns[c0:c1], lo, side="left")
                b = c0 + np.searchsorted(lv.start_ns[c0:c1], hi, side="left")
                if b > a:
                    pos.append(np.arange(a, b))
        if not pos:
            e = np.empty(0, dtype=np.int64)
            return Blocks(e, e, e, e, e, e, 0), e
        at = np.concatenate(pos)
        b = merge_disjoint(
            lv.start_ns[at] - self.t0_ns,
            lv.end_ns[at] - self.t0_ns,
            lv.group[at] + off * N_CLASSES,
            lv.count[at],
            lv.busy_ns[at],
            t0,
            t1,
            ns_per_px,
        )
        return b, np.full(len(b), -1, dtype=np.int64)

    def fold_grid(self, rows: list[int], t0: int, t1: int, bins: int) -> list[tuple[int, list[int], np.ndarray]]:
        """The folded ``rows`` over [``t0``, ``t1``) as their busy share (percent) in ``bins`` equal columns, per
        colour class: (class, the rows that have it, a uint8 array of rows × bins). From each pack's coarsest level
        at most a quarter of a column fine, each block's busy time spread evenly over it: a folded lane drawn as a
        heatmap row costs the same however busy the rank was."""
        px = (t1 - t0) / max(bins, 1)
        lo, hi = self.t0_ns + t0, self.t0_ns + t1
        found: dict[int, tuple[list[int], list[np.ndarray]]] = {}
        chosen = np.asarray(sorted(rows), dtype=np.int64)
        for p in self.packs:
            off = self.row_offset[p.rank]
            mine = chosen[(chosen >= off) & (chosen < off + len(p.rows))] - off
            if not mine.size:
                continue
            lv = _level_for(p, px / 4)
            where = _groups_of(lv)
            for r in mine.tolist():
                for cls, (c0, c1) in where.get(r, ()):
                    a = c0 + np.searchsorted(lv.end_ns[c0:c1], lo, side="left")
                    b = c0 + np.searchsorted(lv.start_ns[c0:c1], hi, side="left")
                    share = _busy_share(lv.start_ns[a:b], lv.end_ns[a:b], lv.busy_ns[a:b], lo, hi, bins)
                    got = found.setdefault(cls, ([], []))
                    got[0].append(r + off)
                    got[1].append(np.round(100 * share).astype(np.uint8))
        return [(cls, found[cls][0], np.vstack(found[cls][1])) for cls in sorted(found)]

    def rank_view(self, rank: int) -> TimelineView:
        """Rank ``rank`` read from its partition and laid out alone (kept: the :data:`MAX_UNFOLDED` drawn last)."""
        with self._lock:
            if rank in self._loaded:
                self._loaded.move_to_end(rank)
                return self._loaded[rank]
        view = views.lay_out_rank(partitions.read_partition(jobstore.partition_file(self.dataset, rank)))
        with self._lock:
            self._loaded[rank] = view
            while len(self._loaded) > MAX_UNFOLDED:
                self._loaded.popitem(last=False)
        # Reading and laying out a rank leaves many objects promoted towards the collector's oldest generation:
        # its next full pass (60-130 ms on the 2-core machine) then fell inside one of the next zooms, the p95 of
        # 40 (issue 39: 92 -> 45 ms on 8 ranks). Done here, beside the read (~1 s), the zooms after it have none.
        gc.collect()
        return view

    def _where(self, src: int) -> tuple[int, int]:
        """(index of the rank, position in its partition) of a view's ``src``."""
        i = int(np.searchsorted(self.event_offset, src, side="right")) - 1
        return i, int(src - self.event_offset[i])

    def event_rows(self, src: np.ndarray) -> pd.DataFrame:
        src = np.asarray(src, dtype=np.int64)
        if not src.size:
            return self.timeline.events.iloc[:0]
        idx = np.searchsorted(self.event_offset, src, side="right") - 1
        out: list[pd.DataFrame] = []
        order: list[np.ndarray] = []
        for i in np.unique(idx).tolist():
            m = np.flatnonzero(idx == i)
            ev = self.rank_view(self.packs[i].rank).timeline.events
            out.append(ev.iloc[src[m] - self.event_offset[i]])
            order.append(m)
        frame = pd.concat(out) if len(out) > 1 else out[0]
        return frame.iloc[np.argsort(np.concatenate(order), kind="stable")]

    def launch_pos(self, src: int) -> int:
        i, local = self._where(src)
        launch = self.rank_view(self.packs[i].rank).launch_pos(local)
        return launch + int(self.event_offset[i]) if launch >= 0 else -1

    def row_of_src(self, src: int) -> int | None:
        i, local = self._where(src)
        row = self.rank_view(self.packs[i].rank).row_of_src(local)
        return None if row is None else row + self.row_offset[self.packs[i].rank]


def _busy_share(s: np.ndarray, e: np.ndarray, busy: np.ndarray, t0: int, t1: int, bins: int) -> np.ndarray:
    """Share of each of ``bins`` equal columns of [``t0``, ``t1``) that disjoint sorted intervals keep busy, each
    interval's ``busy`` ns spread evenly over it (:func:`tracer.analysis.lod.busy_fraction`, with weights)."""
    edges = t0 + np.arange(bins + 1, dtype=np.float64) * ((t1 - t0) / bins)
    if not s.size:
        return np.zeros(bins)
    length = (e - s).astype(np.float64)
    density = np.divide(busy, length, out=np.zeros(s.size), where=length > 0)
    before = np.concatenate([[0.0], np.cumsum(busy.astype(np.float64))])
    k = np.searchsorted(s, edges, side="right") - 1
    kk = np.clip(k, 0, s.size - 1)
    inside = np.clip(edges - s[kk], 0.0, length[kk]) * density[kk]
    covered = np.where(k >= 0, before[kk] + inside, 0.0)
    share: np.ndarray = np.clip(np.diff(covered) / np.diff(edges), 0.0, 1.0)
    return share


_GROUPS: dict[int, tuple[Level, dict[int, list[tuple[int, tuple[int, int]]]]]] = {}
_GROUPS_LOCK = threading.Lock()


def _groups_of(lv: Level) -> dict[int, list[tuple[int, tuple[int, int]]]]:
    """Per row of a level (sorted by group): its colour classes and each one's [start, end) in the level's arrays,
    found once per level (kept while the level is)."""
    with _GROUPS_LOCK:
        got = _GROUPS.get(id(lv))
        if got is not None and got[0] is lv:
            return got[1]
    groups, first = np.unique(lv.group, return_index=True)
    ends = np.append(first[1:], lv.group.size)
    out: dict[int, list[tuple[int, tuple[int, int]]]] = {}
    for g, a, b in zip(groups.tolist(), first.tolist(), ends.tolist()):
        out.setdefault(g // N_CLASSES, []).append((g % N_CLASSES, (a, b)))
    with _GROUPS_LOCK:
        if len(_GROUPS) > 4096:  # (levels of views no longer open)
            _GROUPS.clear()
        _GROUPS[id(lv)] = (lv, out)
    return out


def _level_for(p: Pack, ns_per_px: float) -> Level:
    """The coarsest of the pack's levels at most ``ns_per_px`` fine (its own intervals where none is)."""
    fine = [lv for lv in p.levels if lv.ns_per_px <= ns_per_px]
    return fine[-1] if fine else p.fold


def open_job(files: Sequence[Path], source: Path | None = None, **load: Any) -> TimelineView:
    """The view of the job whose rank traces are ``files``: a :class:`JobView` of its stored dataset where the job
    is too large to read whole (parsed and stored first where it is not), else the job read as one timeline and
    laid out. ``load``: :func:`tracer.job.load.load_job`'s options (progress, the dataset written)."""
    from tracer.analysis.drawing import prepare
    from tracer.job.load import load_job, store_job

    paths = [Path(f) for f in files]
    if jobstore.is_large_job(paths):
        stored = store_job(paths, on_rank=load.get("on_rank"), on_cache_write=load.get("on_cache_write"))
        if stored is not None:
            return JobView.open(stored, source)
    return prepare(load_job(paths, **load))
