"""Any trace tracer reads opened as one :class:`~tracer.timeline.Timeline` (:func:`load_trace`): its format told from
its content (:func:`tracer.parsers.detect_format`), its reader taken from the format table
(:data:`tracer.files.formats.FORMATS`, whose readers are imported on first use), what no trace can mean dropped and
counted, and any error one line naming the file. A run directory is opened through its stored timeline.

This module imports the timeline, so pandas: :func:`tracer.parsers.load_trace`, imported without it, imports this
module where a trace is first read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tracer.errors import TraceFormatError, TracerError
from tracer.files import rundir
from tracer.files.formats import FORMATS
from tracer.parsers import detect_format
from tracer.timeline import Timeline, drop_impossible
from tracer.timeline.plausible import implausible, implausible_note


def load_trace(
    path: str | os.PathLike[str],
    *,
    cache: bool = True,
    on_cache_write: Callable[[Path], None] | None = None,
    on_raw: Callable[[bytes], None] | None = None,
) -> Timeline:
    """:func:`tracer.parsers.load_trace` (which says what it does), from this side of the package: the timeline's.
    The readers and a job's workers, which have pandas already, call it here."""
    p = Path(path)
    fmt = detect_format(p)
    if fmt == "run-dir":
        return worded(p, lambda: _load_run_dir(p, cache=cache, on_cache_write=on_cache_write))
    if fmt == "kineto" and on_raw is not None:
        return worded(p, lambda: without_impossible_rows(
            FORMATS[fmt].load_reader()(p, cache=cache, on_cache_write=on_cache_write, on_raw=on_raw)))
    return worded(p, lambda: without_impossible_rows(
        FORMATS[fmt].read(p, cache=cache, on_cache_write=on_cache_write)))


def worded(p: Path, read: Callable[[], Timeline]) -> Timeline:
    """``read()``, its errors one line naming ``p``."""
    try:
        return read()
    except TracerError as exc:
        if exc.subject:
            raise
        # raised where the file is not known (tracer.timeline.build_events): name it here
        raise type(exc)(p, exc.problem) from None
    except RecursionError:
        raise TraceFormatError(p, "nested too deeply (hundreds of levels) to be a trace") from None
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
        # Content no parser check foresaw (deviceProperties id "x", distributedInfo rank 70000 ...): still bad
        # input, so one line naming the file; the exception's own words say what the parser tripped on.
        raise TraceFormatError(p, f"could not be read: unexpected content ({type(exc).__name__}: {exc})") from None


def without_impossible_rows(timeline: Timeline) -> Timeline:
    """The last line of defence for every format: drop what no trace can mean, and count it with the parser's
    own skipped events (``meta.extra["skipped"]``, which ``tracer summary`` reports and ``--strict`` refuses)."""
    events, dropped = drop_impossible(timeline.events)
    if dropped:
        skipped = dict(timeline.meta.extra.get("skipped") or {})
        for reason, n in dropped.items():
            skipped[reason] = skipped.get(reason, 0) + n
        timeline.meta.extra["skipped"] = dict(sorted(skipped.items()))
        timeline.events = events
    _say_implausible(timeline)
    return timeline


def _say_implausible(timeline: Timeline) -> None:
    """Rows kept whose times no run can have made (a kernel of days, rows years apart): counted in
    ``meta.extra["implausible"]`` and said in a note (issue 38.4: they passed at exit 0, in silence)."""
    found = implausible(timeline.events)
    if found is None:
        return
    timeline.meta.extra["implausible"] = found
    note, notes = implausible_note(found), list(timeline.meta.extra.get("notes") or [])
    timeline.meta.extra["notes"] = notes if note in notes else [*notes, note]


def _load_run_dir(p: Path, *, cache: bool, on_cache_write: Callable[[Path], None] | None = None) -> Timeline:
    """A run directory (:mod:`tracer.files.rundir`): its stored timeline, else its trace, with its meta.json as read
    (``meta.extra["run"]``)."""
    run_meta = rundir.load_meta_json(p)
    source = rundir.timeline_source(p)
    if source is None:
        names = (rundir.TIMELINE, *rundir.TRACE_CANDIDATES)
        raise TraceFormatError(p, f"directory is not a tracer run: none of {', '.join(names)} is in it")
    timeline = load_trace(source, cache=cache, on_cache_write=on_cache_write)
    timeline.meta.extra["run"] = run_meta
    timeline.meta.extra["run_dir"] = str(p)
    timeline.meta.extra["run_file"] = source.name
    timeline.meta.source = str(p)
    return timeline
