"""The summary of a timeline: every registered analysis's typed result, in one object.

:func:`analyze` makes a :class:`Summary`; ``Summary.to_dict()`` is what ``tracer summary --json`` prints and run
directories store as summary.json, and ``Summary.from_dict`` reads that back. The CLI's text, the JSON and the
dashboard all read the same object, through the registry (:mod:`tracer.analysis.registry`; the summary's own
analyses are listed in :mod:`tracer.analysis.catalog`).
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterator, Mapping
from typing import Any, cast

from tracer.analysis import catalog as _catalog  # noqa: F401 - registers the summary's own analyses, in order
from tracer.analysis import registry
from tracer.analysis.overlap import DeviceOverlap, shared_work
from tracer.analysis.results import (
    Concurrency,
    CopyStat,
    DeviceIdle,
    HostThread,
    KernelStat,
    LaneStat,
    Ranges,
    Span,
    TraceInfo,
)
from tracer.errors import UsageError
from tracer.timeline import DeviceKey, Timeline, is_multi_rank


class Summary(Mapping[str, Any]):
    """Every registered analysis's result for one timeline (:meth:`part`, or the typed properties below).

    Lazy analyses (ranges) are computed on first use, from the timeline the summary was made of; the summary
    holds that timeline (or, with ``keep_timeline=False``, only a weak reference: a lazy part is then there
    while the caller keeps the timeline loaded).

    A read-only mapping too, of its JSON: ``summary["devices"]`` is ``summary.to_dict()["devices"]``, computing
    only the analysis that writes that key, so code written against summary.json dicts reads either.
    """

    def __init__(self, parts: Mapping[str, Any], *, multi_rank: bool = False, timeline: Timeline | None = None,
                 keep_timeline: bool = True) -> None:
        self._parts: dict[str, Any] = dict(parts)
        #: whether the timeline holds several ranks (labels then name the rank: "1/0")
        self.multi_rank: bool = multi_rank
        self._timeline: Timeline | None = timeline if keep_timeline else None
        self._timeline_ref = weakref.ref(timeline) if timeline is not None else None

    @classmethod
    def of(cls, timeline: Timeline) -> Summary:
        """A summary of ``timeline`` that computes each part when first asked for (nothing now): for a caller
        that shows one or two parts."""
        return cls({}, multi_rank=is_multi_rank(timeline.events), timeline=timeline)

    # ----- parts

    def part(self, name: str) -> Any:
        """The result of the analysis called ``name``, computed now if it is lazy and was not yet."""
        if name in self._parts:
            return self._parts[name]
        analysis = registry.get(name)
        timeline = self._timeline_ref() if self._timeline_ref is not None else None
        if timeline is None:
            raise UsageError("summary", f"{analysis.title!r} ({name}) was not computed, and the timeline it needs "
                             "is gone; analyze the timeline again")
        result = analysis.compute(timeline)
        self._parts[name] = result
        if self._timeline is not None and all(a.name in self._parts for a in registry.analyses()):
            self._timeline = None  # everything computed: nothing more needs it
        return result

    def has(self, name: str) -> bool:
        """Whether the part is computed (or was read) already."""
        return name in self._parts

    @property
    def trace(self) -> TraceInfo:
        return cast("TraceInfo", self.part("trace"))

    @property
    def format(self) -> str:
        return self.trace.format

    @property
    def source(self) -> str:
        return self.trace.source

    @property
    def devices(self) -> list[DeviceOverlap]:
        """Per GPU (rank, device): compute, copy, overlap, busy, counts, and ``copy_hidden_frac``."""
        return cast("list[DeviceOverlap]", self.part("devices"))

    def device(self, key: DeviceKey) -> DeviceOverlap | None:
        return next((d for d in self.devices if d.key == key), None)

    @property
    def lanes(self) -> list[LaneStat]:
        return cast("list[LaneStat]", self.part("lanes"))

    @property
    def span(self) -> Span:
        return cast("Span", self.part("span"))

    @property
    def gpu_names(self) -> dict[int, str]:
        return cast("dict[int, str]", self.part("gpu_names"))

    @property
    def concurrency(self) -> Concurrency:
        return cast("Concurrency", self.part("concurrency"))

    @property
    def events(self) -> int:
        return cast("int", self.part("events"))

    @property
    def threads(self) -> list[HostThread]:
        return cast("list[HostThread]", self.part("threads"))

    @property
    def run(self) -> dict[str, Any] | None:
        return cast("dict[str, Any] | None", self.part("run"))

    @property
    def idle(self) -> list[DeviceIdle]:
        return cast("list[DeviceIdle]", self.part("idle"))

    @property
    def top_kernels(self) -> list[KernelStat]:
        return cast("list[KernelStat]", self.part("top_kernels"))

    @property
    def copies(self) -> list[CopyStat]:
        return cast("list[CopyStat]", self.part("copies"))

    @property
    def ranges(self) -> Ranges | None:
        """Per range name; None where the summary was read from JSON without ranges."""
        return cast("Ranges | None", self.part("ranges"))

    # ----- JSON

    def to_dict(self, *, skip: Collection[str] = ()) -> dict[str, Any]:
        """The summary's JSON (``tracer summary --json``, summary.json), every registered analysis's keys in
        registration order; ``skip``: analyses left out (by name)."""
        out: dict[str, Any] = {}
        for analysis in registry.analyses():
            if analysis.name not in skip:
                out.update(analysis.to_json(self.part(analysis.name), self))
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Summary:
        """A summary read back from its JSON (a run's summary.json). Keys it lacks read as empty; a one-rank
        summary does not say its rank, which then reads as 0."""
        parts = {a.name: a.from_json(d) for a in registry.analyses()}
        multi = any("/" in str(k) for k in (d.get("devices") or {})) or any(
            "rank" in row for key in ("lanes", "threads", "copies") for row in d.get(key) or []
        )
        return cls(parts, multi_rank=multi)

    def __getitem__(self, key: str) -> Any:
        analysis = registry.owner_of(key)
        if analysis is None:
            raise KeyError(key)
        return analysis.to_json(self.part(analysis.name), self)[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Summary({self._parts.get('trace')!r}, parts={list(self._parts)})"


def analyze(timeline: Timeline, *, keep_timeline: bool = True) -> Summary:
    """Run every registered analysis on ``timeline`` (the lazy ones, ranges, when first asked for)."""
    with shared_work():  # (the GPU rows and each GPU's sets found once for all the analyses)
        parts = {a.name: a.compute(timeline) for a in registry.analyses() if not a.lazy}
    return Summary(parts, multi_rank=is_multi_rank(timeline.events), timeline=timeline, keep_timeline=keep_timeline)


def summarize(timeline: Timeline, *, ranges: bool = True) -> dict[str, Any]:
    """The summary's JSON as a dict: ``analyze(timeline).to_dict()`` (``ranges=False``: without "range_rule" and
    "ranges", for a caller that does not want to pay for them).

    Shape (other keys may be added, none removed)::

        {"format": "kineto" | "nsys" | ..., "devices": {"0": {...}}, "lanes": [{...}], "span_ns": int}
    """
    return analyze(timeline).to_dict(skip=() if ranges else ("ranges",))
