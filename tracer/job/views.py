"""A large job's ranks laid out for drawing, one rank at a time, and kept beside their partitions: what the
dashboard needs to draw the job without reading it whole.

A job whose traces hold more than :data:`tracer.job.store.LARGE_JOB_BYTES` is not read into memory whole by the
dashboard. Each of its ranks is laid out on the worker that parses it (:func:`tracer.analysis.drawing.prepare`,
as a rank of a job: lanes titled with their rank, its folded lane), and what the dashboard needs of every rank
before it reads any (the *pack*) is written beside its partition, ``rank=R/_view.npz``: the rank's rows and lanes
(the job's rows are the ranks' rows, in rank order), its GPUs' figures (the cards), the intervals of its folded
lane with their coarser levels of detail (:func:`tracer.analysis.lod.levels`: the job drawn folded, whole or
zoomed, without touching its events), and its meta. A rank unfolded on the page is then read from its partition
and laid out again, alone. The leading underscore keeps the file out of pyarrow's and DuckDB's view of the
dataset (``*/*.parquet``).

The pack is plain arrays and one JSON document (``numpy.savez``, no pickle): a dataset is a folder anyone may
have written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from tracer.analysis.comm import DeviceComm
from tracer.analysis.drawing import N_CLASSES, Row, TimelineView, prepare
from tracer.analysis.launches import LaunchStat
from tracer.analysis.lod import Level, levels
from tracer.analysis.overlap import DeviceOverlap, shared_work
from tracer.files.storage import read_timeline_parquet
from tracer.job import store as jobstore
from tracer.timeline import Timeline, TraceMeta, empty_events

#: Raise when what a pack holds changes meaning: an older pack is then laid out again, not misread.
PACK_VERSION = 1


def pack_file(dataset: Path, rank: int) -> Path:
    """Where ``rank``'s pack lies in ``dataset``."""
    return jobstore.partition_file(dataset, rank).parent / jobstore.VIEW


@dataclass
class Pack:
    """One rank of a large job as the dashboard needs it before reading the rank (see the module's docstring).
    Times are ns on the Unix clock; a fold interval's ``group`` is its row (of :attr:`rows`) × N_CLASSES + its
    colour class."""

    rank: int
    t0_ns: int  # the rank's first interval's start
    span_ns: int
    events: int
    rows: list[Row]
    lanes: list[tuple[str, str]]
    fold_lane: str
    devices: list[DeviceOverlap]
    comm: list[DeviceComm]
    launches: list[LaunchStat]
    meta: TraceMeta
    levels: list[Level]  # coarser levels of the folded lane's intervals
    #: the rank's rows of its collectives (``collective`` set: a few per step), to match them across the ranks;
    #: None where the pack does not hold them (read from the partition then)
    comm_rows: Timeline | None
    #: the folded lane's intervals (each its own: count 1); read from ``path`` on first use (a window finer
    #: than the first level's pixel), where the pack was read from a file
    own: Level | None = None
    path: Path | None = None

    @property
    def fold(self) -> Level:
        """The folded lane's intervals, each its own (count 1)."""
        if self.own is None:
            assert self.path is not None
            with np.load(self.path, allow_pickle=False) as z:
                self.own = _level(z, "fold", 0.0)
        return self.own


def lay_out_rank(timeline: Timeline) -> TimelineView:
    """One rank's timeline laid out as a rank of a job (its rows are the job's rows of it)."""
    return prepare(timeline, multi_rank=True)


def pack_of(view: TimelineView, known: Mapping[str, Any] | None = None) -> Pack:
    """The pack of a rank laid out by :func:`lay_out_rank`; ``known``: the rank's analyses' results where they
    were computed already (:attr:`tracer.analysis.ranked.RankResults.parts`: its GPUs' comm and launch figures)."""
    folded = np.array([r.folded for r in view.rows], dtype=bool)
    on_fold = folded[view.group // N_CLASSES] if view.group.size else np.zeros(0, bool)
    s = view.start_ns[on_fold] + view.t0_ns
    e = view.end_ns[on_fold] + view.t0_ns
    g = view.group[on_fold]
    rank = (
        view.rows[0].rank
        if view.rows
        else int(view.timeline.events["rank"].iloc[0])
        if len(view.timeline.events)
        else 0
    )
    known = known or {}
    with shared_work():
        comm = list(known["comm"]) if "comm" in known else view.comm
        launches = list(known["launches"]) if "launches" in known else view.launches
    fold = Level(0.0, s, e, g, np.ones(s.size, np.int64), e - s)
    ev = view.timeline.events
    comm_rows = Timeline(ev[(ev["collective"].cat.codes.to_numpy() > 0)], view.timeline.meta)
    return Pack(
        rank,
        view.t0_ns,
        view.span_ns,
        len(ev),
        list(view.rows),
        list(view.lanes),
        view.fold_lanes.get(rank, f"r{rank}/fold"),
        list(view.devices),
        comm,
        launches,
        view.timeline.meta,
        levels(s, e, g),
        comm_rows,
        own=fold,
    )


def write_pack(pack: Pack, path: Path) -> bool:
    """Write ``pack`` to ``path`` (whole or not at all); False where it could not be written."""
    doc = {
        "version": PACK_VERSION,
        "rank": pack.rank,
        "t0_ns": pack.t0_ns,
        "span_ns": pack.span_ns,
        "events": pack.events,
        "rows": [dataclasses.astuple(r) for r in pack.rows],
        "lanes": pack.lanes,
        "fold_lane": pack.fold_lane,
        "devices": [dataclasses.asdict(d) for d in pack.devices],
        "comm": [dataclasses.asdict(c) for c in pack.comm],
        "launches": [dataclasses.asdict(x) for x in pack.launches],
        "meta": pack.meta.to_dict(),
        "levels": [lv.ns_per_px for lv in pack.levels],
    }
    arrays: dict[str, np.ndarray] = {}
    doc["comm_rows"] = None if pack.comm_rows is None else len(pack.comm_rows.events)
    if pack.comm_rows is not None and len(pack.comm_rows.events):
        # (Parquet, in memory: the timeline's own columns and dtypes, no pickle)
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(pack.comm_rows.events, preserve_index=False), buf)
        arrays["comm_rows"] = np.frombuffer(buf.getvalue(), dtype=np.uint8)
    arrays["doc"] = np.frombuffer(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), dtype=np.uint8)
    for name, lv in (("fold", pack.fold), *((f"level{i}", lv) for i, lv in enumerate(pack.levels))):
        for field in ("start_ns", "end_ns", "group", "count", "busy_ns"):
            arrays[f"{name}.{field}"] = np.asarray(getattr(lv, field), dtype=np.int64)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        save: Any = np.savez  # (its stubs read a "doc" array as the allow_pickle flag)
        with open(tmp, "wb") as f:
            save(f, **arrays)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - a pack is a cache: never worth failing the job
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


def read_pack(path: Path) -> Pack | None:
    """The pack at ``path`` (its folded lane's own intervals read when first used); None where there is none, it
    is damaged or of another version."""
    try:
        with np.load(path, allow_pickle=False) as z:
            doc = orjson.loads(z["doc"].tobytes())
            if doc.get("version") != PACK_VERSION:
                return None
            return Pack(
                int(doc["rank"]),
                int(doc["t0_ns"]),
                int(doc["span_ns"]),
                int(doc["events"]),
                [Row(*r) for r in doc["rows"]],
                [(str(k), str(v)) for k, v in doc["lanes"]],
                str(doc["fold_lane"]),
                [DeviceOverlap(**d) for d in doc["devices"]],
                [DeviceComm(**c) for c in doc["comm"]],
                [LaunchStat(**x) for x in doc["launches"]],
                TraceMeta.from_dict(doc["meta"]),
                [_level(z, f"level{i}", float(px)) for i, px in enumerate(doc["levels"])],
                _comm_rows(z, doc.get("comm_rows"), TraceMeta.from_dict(doc["meta"])),
                path=path,
            )
    except Exception:  # noqa: BLE001 - a missing or damaged pack is laid out again, never an error
        return None


def _comm_rows(z: Any, count: int | None, meta: TraceMeta) -> Timeline | None:
    """A pack's collective rows: none at all (nothing read), or read; None where the pack does not say (written
    before it kept them)."""
    if count is None:
        return read_timeline_parquet(io.BytesIO(z["comm_rows"].tobytes())) if "comm_rows" in z.files else None
    if not count:
        return Timeline(empty_events(), meta)
    return read_timeline_parquet(io.BytesIO(z["comm_rows"].tobytes()))


def _level(z: Any, name: str, px: float) -> Level:
    return Level(px, *(np.asarray(z[f"{name}.{f}"]) for f in ("start_ns", "end_ns", "group", "count", "busy_ns")))


def write_rank_pack(timeline: Timeline, path: Path, known: Mapping[str, Any] | None = None) -> bool:
    """Lay one rank out (on a worker, as it is parsed) and write its pack to ``path``; ``known``: as for
    :func:`pack_of`. False where that fails."""
    try:
        return write_pack(pack_of(lay_out_rank(timeline), known), path)
    except Exception:  # noqa: BLE001 - see write_pack
        return False


def json_of(pack: Pack) -> dict[str, Any]:
    """What a pack says of its rank, for a test or a reader: its rank, rows, lanes and figures."""
    return {
        "rank": pack.rank,
        "rows": len(pack.rows),
        "lanes": len(pack.lanes),
        "events": pack.events,
        "fold": int(pack.fold.start_ns.size),
        "levels": [int(lv.start_ns.size) for lv in pack.levels],
    }
