"""`tracer explain --what-if`: the replay of the chosen window under a changed plan, beside the measured time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from tracer.explain import Window
from tracer.explain.graph import Graph
from tracer.timeline import Timeline


class Replays:
    """Replays of one window of one trace under several plans, sharing what every plan needs: the kernels'
    demand (read from the trace file once: it is a whole second parse of a Kineto JSON) and the unchanged
    replay."""

    def __init__(self, path: Path, timeline: Timeline, graph: Graph, window: Window) -> None:
        from tracer.explain.occupancy import read_demand

        self.timeline, self.graph, self.window = timeline, graph, window
        self.demand, _ = read_demand(path)
        self._unchanged_ns: int | None = None

    def unchanged_ns(self) -> int:
        """The window replayed under the plan it ran (computed once)."""
        from tracer.explain.replay import replay

        if self._unchanged_ns is None:
            w = self.window
            self._unchanged_ns = replay(self.graph, start_ns=w.start_ns, end_ns=w.end_ns,
                                        demand=self.demand).predicted_ns
        return self._unchanged_ns

    def what_if(self, specs: list[str]) -> dict[str, Any]:
        """The unchanged replay and the replay under ``specs`` (``NAME[=VALUE]``,
        :data:`tracer.explain.replay.PLANS`) of the work issued in the window, as one JSON-able object. Raises
        :class:`tracer.errors.TracerError` for a bad plan or a window without work."""
        from tracer.explain.replay import parse_plan, replay

        plan = parse_plan(specs)
        w = self.window
        r = replay(self.graph, plan, start_ns=w.start_ns, end_ns=w.end_ns, demand=self.demand,
                   children=child_ranges(self.timeline, w))
        notes = list(r.notes)
        if not self.demand:
            notes.append("no kernel launch figures (Kineto JSON and nsys SQLite have them): every kernel counts "
                         "as filling its GPU")
        return {"plan": plan.describe(), "window": w.what, "measured_ns": r.measured_ns,
                "unchanged_ns": self.unchanged_ns(), "predicted_ns": r.predicted_ns,
                "gain_ns": r.measured_ns - r.predicted_ns, "notes": sorted(set(notes), key=notes.index)}


#: The plan that applies each finding kind's fix (tracer.explain.findings.KINDS), where the replay models it.
FIX_PLANS: dict[str, list[str]] = {
    "same_stream": ["side-stream"],
    "pageable": ["pinned", "side-stream"],
    "host_sync": ["no-sync"],
}


def fix_gains(replays: Replays, kinds: list[str]) -> dict[str, Any]:
    """For each finding kind in ``kinds`` whose fix the replay models (:data:`FIX_PLANS`): the replay with that
    fix applied (:meth:`Replays.what_if`), keyed by kind; where the replay cannot run (e.g. no pinned copy to take
    a bandwidth from), ``{"plan": ..., "error": why}`` instead."""
    from tracer.errors import TracerError

    out: dict[str, Any] = {}
    for kind in kinds:
        if kind in FIX_PLANS:
            try:
                out[kind] = replays.what_if(FIX_PLANS[kind])
            except TracerError as exc:
                out[kind] = {"plan": " + ".join(FIX_PLANS[kind]), "error": exc.problem}
    return out


def child_ranges(timeline: Timeline, window: Window) -> pd.DataFrame:
    """The ranges that lie inside ``window`` (name, start_ns, end_ns), the window's own range left out: the
    chains ``streams=N`` spreads."""
    ev = timeline.events
    r = ev[(ev["kind"].astype(str) == "range").to_numpy()]
    if window.start_ns is not None:
        r = r[(r["start_ns"] >= window.start_ns).to_numpy()]
    if window.end_ns is not None:
        r = r[(r["end_ns"] <= window.end_ns).to_numpy()]
    if window.start_ns is not None and window.end_ns is not None:
        r = r[~((r["start_ns"] == window.start_ns) & (r["end_ns"] == window.end_ns)).to_numpy()]
    return pd.DataFrame({"name": r["name"].astype(str).to_numpy(), "start_ns": r["start_ns"].to_numpy(),
                         "end_ns": r["end_ns"].to_numpy()})


def render(result: dict[str, Any]) -> list[str]:
    """Lines for a terminal."""
    m, u, p = result["measured_ns"] / 1e6, result["unchanged_ns"] / 1e6, result["predicted_ns"] / 1e6
    out = [f"What if {result['plan']} ({result['window']}): predicted {p:,.3f} ms, measured {m:,.3f} ms "
           f"({100 * (p - m) / m:+.1f}%; the unchanged plan replays to {u:,.3f} ms)" if m else
           f"What if {result['plan']}: no time measured in the window"]
    out += [f"  {n}" for n in result["notes"]]
    return out
