"""Times a trace can hold but no run can have made: said, not silently summed.

:func:`tracer.timeline.drop_impossible` leaves out what no trace can mean (an end before its start, a time past
±146 years). Between that and a real run there is still room for nonsense that used to pass at exit 0: a kernel
of 11.6 days, or GPU rows at −1e15 µs in a trace whose other rows are at +1.7e15 µs (a span of 31.9 years), which
make every figure over the span (utilisation, idle time) meaningless. No profiler's trace covers a day: such rows
are counted and said, in one note (:func:`implausible`), and kept (which of the rows is wrong cannot be known).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: Longer than this, one row, or this far from the trace's middle, a row's times are not a profiler's: a trace
#: covers seconds to minutes of a run, a long recording hours.
PLAUSIBLE_NS = 86_400 * 10**9


def duration_text(ns: float) -> str:
    """A long duration in the unit that reads best: "3.2 hours", "11.6 days", "31.9 years"."""
    seconds = abs(float(ns)) / 1e9
    for unit, size in (("years", 365.25 * 86_400), ("days", 86_400), ("hours", 3_600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.1f} s"


def implausible(events: pd.DataFrame) -> dict[str, int] | None:
    """What in ``events`` no run can have made, or None: how many rows last longer than :data:`PLAUSIBLE_NS`
    (``long``) and the longest (``longest_ns``); how many start further than that from the trace's median start
    (``far``), and how far the farthest is (``farthest_ns``)."""
    if events.empty:
        return None
    start = events["start_ns"].to_numpy(np.int64)
    end = events["end_ns"].to_numpy(np.int64)
    dur = end - start  # (within int64: load_trace kept times within ±2**62)
    # (in float: two times ±2**62 apart would overflow int64's difference; a day is far above float's error)
    away = np.abs(start.astype(np.float64) - float(np.median(start)))
    long, far = dur > PLAUSIBLE_NS, away > PLAUSIBLE_NS
    if not long.any() and not far.any():
        return None
    return {"long": int(long.sum()), "longest_ns": int(dur.max()), "far": int(far.sum()),
            "farthest_ns": int(away.max())}


def implausible_note(found: dict[str, Any]) -> str:
    """The one note that says :func:`implausible`'s ``found``."""
    parts = []
    if found.get("long"):
        n = int(found["long"])
        parts.append(f"{n:,} event{'s' if n != 1 else ''} last{'s' if n == 1 else ''} longer than a day (the "
                     f"longest {duration_text(found['longest_ns'])})")
    if found.get("far"):
        n = int(found["far"])
        parts.append(f"{n:,} event{'s' if n != 1 else ''} start{'s' if n == 1 else ''} more than a day away from "
                     f"the trace's others (the farthest {duration_text(found['farthest_ns'])})")
    return (" and ".join(parts) + ": times no profiler records (damaged, or another clock); the span and the "
            "figures over it include them")
