"""The canonical timeline: one row per interval, one schema for every trace format.

Every parser ends with :func:`validate`; every analysis, figure and exporter reads only these columns.
Times are integer nanoseconds on the trace's own clock (Kineto: ``baseTimeNanoseconds`` + ``ts``;
nsys: the session's nanosecond timestamps), never float microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from tracer.errors import TraceFormatError
from tracer.timeline.meta import CudaSyncTable as CudaSyncTable
from tracer.timeline.meta import RankSource as RankSource
from tracer.timeline.meta import StreamFlagTable as StreamFlagTable
from tracer.timeline.meta import TraceExtra as TraceExtra
from tracer.timeline.meta import fits_extra

# The schema's words and limits (kinds, copy and memory kinds, collectives, clocks, the host's lane, the bounds
# of a possible row) are tracer.vocabulary's, without pandas there: a job's scan workers import them before
# pandas is; they are the timeline's as they always were.
from tracer.vocabulary import CLOCK_NSYS_SESSION as CLOCK_NSYS_SESSION
from tracer.vocabulary import CLOCK_UNIX as CLOCK_UNIX
from tracer.vocabulary import COLLECTIVES as COLLECTIVES
from tracer.vocabulary import COPY_KINDS as COPY_KINDS
from tracer.vocabulary import END_BEFORE_START as END_BEFORE_START
from tracer.vocabulary import GPU_WORK_KINDS as GPU_WORK_KINDS
from tracer.vocabulary import HOST_DEVICE as HOST_DEVICE
from tracer.vocabulary import HOST_STREAM as HOST_STREAM
from tracer.vocabulary import HUGE_BYTES as HUGE_BYTES
from tracer.vocabulary import KINDS as KINDS
from tracer.vocabulary import MAX_EVENT_BYTES as MAX_EVENT_BYTES
from tracer.vocabulary import MEM_KINDS as MEM_KINDS
from tracer.vocabulary import NEGATIVE_BYTES as NEGATIVE_BYTES
from tracer.vocabulary import SCHEMA_VERSION as SCHEMA_VERSION
from tracer.vocabulary import TIME_LIMIT_NS as TIME_LIMIT_NS
from tracer.vocabulary import TIME_OUT_OF_RANGE as TIME_OUT_OF_RANGE

#: Column name -> dtype. The order here is the order of the columns.
COLUMNS: dict[str, Any] = {
    "start_ns": np.dtype("int64"),
    "end_ns": np.dtype("int64"),
    "kind": pd.CategoricalDtype(list(KINDS)),
    "copy_kind": pd.CategoricalDtype(list(COPY_KINDS)),
    "name": "category",
    "device": np.dtype("int16"),
    "stream": np.dtype("int32"),
    "pid": np.dtype("int64"),
    "tid": np.dtype("int64"),
    "rank": np.dtype("int16"),
    "bytes": pd.Int64Dtype(),
    "correlation": pd.Int64Dtype(),
    "src_mem": pd.CategoricalDtype(list(MEM_KINDS)),
    "dst_mem": pd.CategoricalDtype(list(MEM_KINDS)),
    "collective": pd.CategoricalDtype(list(COLLECTIVES)),
    "pg": "category",
    "seq": pd.Int64Dtype(),
    "group_size": np.dtype("int32"),
}


@dataclass
class TraceMeta:
    """What a trace says about itself, beside its intervals."""

    format: str  # "kineto" | "nsys" | "parquet"
    source: str = ""  # the file it was read from
    #: GPU index -> device name ("NVIDIA H200")
    gpu_names: dict[int, str] = field(default_factory=dict)
    #: pid -> process name; (pid, tid) keys are stored as "pid:tid" strings so that they survive JSON
    process_names: dict[int, str] = field(default_factory=dict)
    thread_names: dict[str, str] = field(default_factory=dict)
    #: anything else worth keeping (CUDA versions, what was skipped, a job's ranks ...): the keys of
    #: :class:`tracer.timeline.meta.TraceExtra`, each typed, in the order they were set
    extra: TraceExtra = field(default_factory=TraceExtra)
    #: what the times count from (CLOCK_UNIX, CLOCK_NSYS_SESSION, "" unknown), and the ns to add to them to get
    #: Unix time where that is known (0 on the Unix clock, None where unknown); ``combine.align`` applies it
    clock: str = ""
    clock_offset_ns: int | None = None
    #: what a stored ``extra`` held that is not :class:`TraceExtra`'s (a key tracer does not know, or a value of
    #: another type than its key's): kept as read and written back in its place (:meth:`add_extra`)
    other: dict[str, Any] = field(default_factory=dict)
    #: each ``other`` key -> the ``extra`` key it followed when it came ("": none), which it is written after
    _after: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def add_extra(self, items: Mapping[str, Any]) -> None:
        """Set each of ``items`` as ``extra[key] = value`` does, where :class:`TraceExtra` has the key and the value
        its type; anything else (a key tracer does not know, a value of another type: what a file may hold) is
        kept in ``other``, to be written back in its place. How stored metadata is read."""
        extra = cast(dict[str, Any], self.extra)  # (the one untyped write: each value checked first)
        for key, value in items.items():
            if fits_extra(key, value):
                if key in self.other:  # (in the place of the value it replaces)
                    del self.other[key]
                    _insert_after(extra, self._after.pop(key, ""), key, value)
                else:
                    extra[key] = value
            else:
                if key not in self.other:
                    keys = list(extra)
                    at = keys.index(key) if key in extra else len(keys)
                    self._after[key] = keys[at - 1] if at else ""
                extra.pop(key, None)
                self.other[key] = value

    def extra_dict(self) -> dict[str, Any]:
        """``extra`` with ``other`` back in its place: what is stored (``to_dict``'s "extra"). Without ``other``,
        ``extra`` itself."""
        if not self.other:
            return cast(dict[str, Any], self.extra)
        out: dict[str, Any] = {}

        def others_after(key: str) -> None:
            for k, v in self.other.items():
                if self._after.get(k) == key and k not in self.extra:
                    out[k] = v

        others_after("")
        for key, value in self.extra.items():
            out[key] = value
            others_after(key)
        for k, v in self.other.items():  # (what followed a key since dropped)
            if k not in out and k not in self.extra:
                out[k] = v
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "source": self.source,
            "gpu_names": {str(k): v for k, v in self.gpu_names.items()},
            "process_names": {str(k): v for k, v in self.process_names.items()},
            "thread_names": dict(self.thread_names),
            "extra": self.extra_dict(),
            "clock": self.clock,
            "clock_offset_ns": self.clock_offset_ns,
            "schema_version": SCHEMA_VERSION,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TraceMeta:
        # New fields are read with a default so that old files keep loading.
        meta = cls(
            format=str(d.get("format", "")),
            source=str(d.get("source", "")),
            gpu_names={int(k): str(v) for k, v in d.get("gpu_names", {}).items()},
            process_names={int(k): str(v) for k, v in d.get("process_names", {}).items()},
            thread_names={str(k): str(v) for k, v in d.get("thread_names", {}).items()},
            clock=str(d.get("clock") or ""),
            clock_offset_ns=_int_or_none(d.get("clock_offset_ns")),
        )
        meta.add_extra(dict(d.get("extra", {})))
        return meta


def _insert_after(d: dict[str, Any], after: str, key: str, value: Any) -> None:
    """``d[key] = value`` with ``key`` placed just after ``after`` ("": first; a key ``d`` lacks: last)."""
    items = list(d.items())
    at = 0 if not after else next((i + 1 for i, (k, _) in enumerate(items) if k == after), len(items))
    d.clear()
    d.update(items[:at])
    d[key] = value
    d.update(items[at:])


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


@dataclass
class Timeline:
    """A parsed trace: the intervals (``events``, schema :data:`COLUMNS`) and what the trace says of itself."""

    events: pd.DataFrame
    meta: TraceMeta

    def __setattr__(self, name: str, value: Any) -> None:
        # Analyses and the dependency graph find rows by their label (launch links, ranges, graph nodes): a frame
        # whose labels repeat (one put together by hand, or concatenated without ignore_index) gets 0..n-1, set
        # here and on every later assignment. Its labels meant nothing as row keys anyway.
        if name == "events" and isinstance(value, pd.DataFrame) and not value.index.is_unique:
            value = value.reset_index(drop=True)
        super().__setattr__(name, value)

    @property
    def gpu_devices(self) -> list[int]:
        """GPU indices that hold GPU work or are named by the trace, ascending."""
        ev = self.events
        seen = set(ev.loc[ev["device"] >= 0, "device"].unique().tolist())
        return sorted(seen | set(self.meta.gpu_names))

    @property
    def multi_rank(self) -> bool:
        """Whether the timeline holds more than one rank (a job's traces read as one)."""
        return is_multi_rank(self.events)

    def links(self) -> pd.DataFrame:
        """GPU work → the runtime/driver call that launched it (:func:`tracer.timeline.links.launch_links`)."""
        return launch_links(self.events)


def empty_events() -> pd.DataFrame:
    """A zero-row frame with the canonical columns and dtypes."""
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in COLUMNS.items()})


def build_events(columns: dict[str, Any], *, copy: bool = True) -> pd.DataFrame:
    """Make a canonical frame from column arrays; missing optional columns get their neutral value.

    ``kind`` / ``copy_kind`` / ``name`` / ``src_mem`` / ``dst_mem`` may be given as strings or as categoricals.
    Rows are sorted by start then end so that every consumer can rely on time order. ``copy=False``: arrays
    of the column's own dtype become the frame's columns as they are (pandas 3 copies them otherwise), for a
    caller that hands over arrays nothing else holds (a parser's fresh columns: at 1 GB of trace, 0.2 s and a
    quarter GB).
    """
    n = len(columns["start_ns"])
    defaults: dict[str, Any] = {
        "copy_kind": "",
        "device": HOST_DEVICE,
        "stream": HOST_STREAM,
        "pid": -1,
        "tid": -1,
        "rank": 0,
        "bytes": pd.NA,
        "correlation": pd.NA,
        "src_mem": "",
        "dst_mem": "",
        "collective": "",
        "pg": "",
        "seq": pd.NA,
        "group_size": 0,
    }
    data: dict[str, Any] = {}
    for col, dtype in COLUMNS.items():
        if col in columns:
            value = columns[col]
        elif isinstance(dtype, pd.CategoricalDtype) and defaults.get(col) == "":
            # (from codes: a column of n empty strings would be hashed row by row into its categories)
            value = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), dtype=dtype)
        elif dtype == "category" and defaults.get(col) == "":
            value = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[""])
        elif col in defaults:
            value = [defaults[col]] * n if defaults[col] is pd.NA else np.full(n, defaults[col])
        else:
            raise KeyError(f"build_events needs column {col!r}")
        if isinstance(dtype, np.dtype) and dtype.kind == "i" and dtype.itemsize < 8:
            _check_fits(col, value, dtype)
        data[col] = (pd.Series(value, dtype=dtype, copy=copy) if not isinstance(value, pd.Series)
                     else value.astype(dtype))
        data[col].index = pd.RangeIndex(n)
    # copy=False: the columns as they are, not copied again into 2-D blocks (at 1 GB of trace, every full copy
    # of the frame is ~0.1 s, most of it the kernel handing out fresh pages).
    df = pd.DataFrame(data, copy=False)
    start, end = df["start_ns"].to_numpy(), df["end_ns"].to_numpy()
    if n < 2 or bool(np.all((start[1:] > start[:-1]) | ((start[1:] == start[:-1]) & (end[1:] >= end[:-1])))):
        return df  # already in time order (parsers may sort on their plain arrays, where it is cheaper)
    order = np.lexsort((end, start))
    return df.iloc[order].reset_index(drop=True)


def _check_fits(col: str, value: Any, dtype: np.dtype) -> None:
    """A trace whose device / stream / rank does not fit the schema's narrow integer is bad input, not a crash.

    The error names no file (the caller does not know it here); :func:`tracer.parsers.load_trace` adds it.
    """
    arr = np.asarray(value)
    if arr.size == 0 or arr.dtype.kind not in "iu":
        return
    info = np.iinfo(dtype)
    lo, hi = arr.min(), arr.max()
    if lo < info.min or hi > info.max:
        bad = hi if hi > info.max else lo
        raise TraceFormatError("", f"{col} {int(bad)} is out of range (the timeline keeps {col} as {dtype})")


def validate(events: pd.DataFrame, source: str = "") -> pd.DataFrame:
    """Check that ``events`` has exactly the canonical columns and dtypes; return it.

    Raises :class:`TraceFormatError` naming ``source``: a parser that produced a bad frame has a bug or met
    input it does not understand, and either way the user should hear about it rather than see wrong numbers.
    Rows whose values no trace can mean (an end before its start ...) are not this check's business but
    :func:`drop_impossible`'s, which leaves them out and counts them instead of refusing the whole trace.
    """
    cols = list(events.columns)
    if cols != list(COLUMNS):
        raise TraceFormatError(source, f"timeline columns {cols} differ from the schema {list(COLUMNS)}")
    for col, dtype in COLUMNS.items():
        actual = events[col].dtype
        if isinstance(dtype, pd.CategoricalDtype) and dtype.categories is not None and len(dtype.categories):
            ok = isinstance(actual, pd.CategoricalDtype) and list(actual.categories) == list(dtype.categories)
        elif dtype == "category":
            ok = isinstance(actual, pd.CategoricalDtype)
        else:
            ok = actual == dtype
        if not ok:
            raise TraceFormatError(source, f"timeline column {col!r} has dtype {actual}, expected {dtype}")
    return events


def drop_impossible(events: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """``events`` without the rows no trace can mean, and how many were left out by reason.

    The last line of defence, applied by :func:`tracer.parsers.load_trace` to every format (Kineto, nsys,
    Parquet): an interval that ends before it starts, a time beyond :data:`TIME_LIMIT_NS`, a negative size or
    one beyond :data:`MAX_EVENT_BYTES`. Each row is counted once, under the first reason that applies.
    """
    if events.empty:
        return events, {}
    start, end = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    size = events["bytes"].array
    known = ~np.asarray(size.isna())
    values = np.asarray(size.fillna(0).to_numpy(dtype=np.int64))
    reasons = (
        (END_BEFORE_START, end < start),
        (TIME_OUT_OF_RANGE, (start <= -TIME_LIMIT_NS) | (start >= TIME_LIMIT_NS) | (end >= TIME_LIMIT_NS)),
        (NEGATIVE_BYTES, known & (values < 0)),
        (HUGE_BYTES, known & (values > MAX_EVENT_BYTES)),
    )
    dropped = np.zeros(len(events), dtype=bool)
    counts: dict[str, int] = {}
    for reason, rows in reasons:
        rows = rows & ~dropped
        if rows.any():
            counts[reason] = int(rows.sum())
            dropped |= rows
    if not counts:
        return events, {}
    return events[~dropped].reset_index(drop=True), counts


# The rest of the timeline package, importable from here (they import this module's names above).
from tracer.timeline.combine import align, concat  # noqa: E402
from tracer.timeline.keys import (  # noqa: E402
    DEVICE_COLUMNS,
    LANE_COLUMNS,
    THREAD_COLUMNS,
    DeviceKey,
    LaneKey,
    device_label,
    device_title,
    is_multi_rank,
    lane_title,
)
from tracer.timeline.links import launch_links  # noqa: E402

__all__ = [
    "CLOCK_NSYS_SESSION", "CLOCK_UNIX", "COLLECTIVES", "COLUMNS", "COPY_KINDS", "DEVICE_COLUMNS", "GPU_WORK_KINDS",
    "HOST_DEVICE", "MEM_KINDS",
    "HOST_STREAM", "KINDS", "LANE_COLUMNS", "MAX_EVENT_BYTES", "SCHEMA_VERSION", "THREAD_COLUMNS", "TIME_LIMIT_NS",
    "DeviceKey", "LaneKey", "Timeline", "TraceMeta", "align", "build_events", "concat", "device_label", "device_title",
    "drop_impossible", "empty_events", "is_multi_rank", "lane_title", "launch_links", "validate",
]
