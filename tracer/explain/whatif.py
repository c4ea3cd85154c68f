"""What-if replays of one window of a trace: under a changed plan, beside the measured time (``tracer explain
--what-if``), and the plan that applies each finding's fix with what it would give back (:func:`fix_gains`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tracer.errors import TracerError
from tracer.explain.critical import Window
from tracer.explain.findings import kernel_demand_of
from tracer.explain.graph import Graph
from tracer.explain.replay import independent_pairs, parse_plan, replay
from tracer.timeline import Timeline


class Replays:
    """Replays of one window of one trace under several plans, sharing what every plan needs: the kernels'
    ``demand`` (:mod:`tracer.explain.occupancy`; none: every kernel fills its GPU) and the unchanged replay."""

    def __init__(self, timeline: Timeline, graph: Graph, window: Window,
                 demand: Mapping[Any, float] | None = None, untraced_ns: int = 0) -> None:
        self.timeline, self.graph, self.window = timeline, graph, window
        self.demand = demand
        #: time of the window that holds no traced work (the whole trace's span before its first interval and
        #: after its last, :func:`tracer.explain.critical.critical_path`): no plan changes it, and every time
        #: below counts it, so that "measured" is the critical path's length
        self.untraced_ns = untraced_ns
        self._unchanged_ns: int | None = None

    def unchanged_ns(self) -> int:
        """The window replayed under the plan it ran (computed once)."""
        if self._unchanged_ns is None:
            w = self.window
            self._unchanged_ns = replay(self.graph, start_ns=w.start_ns, end_ns=w.end_ns,
                                        demand=self.demand).predicted_ns + self.untraced_ns
        return self._unchanged_ns

    def what_if(self, specs: list[str]) -> dict[str, Any]:
        """The unchanged replay and the replay under ``specs`` (``NAME[=VALUE]``,
        :data:`tracer.explain.replay.PLANS`) of the work issued in the window, as one JSON-able object. Raises
        :class:`tracer.errors.TracerError` for a bad plan or a window without work."""
        plan = parse_plan(specs)
        w = self.window
        r = replay(self.graph, plan, start_ns=w.start_ns, end_ns=w.end_ns, demand=self.demand,
                   children=child_ranges(self.timeline, w))
        notes = list(r.notes)  # (the replay says itself when the kernels have no launch figures)
        if self.untraced_ns:
            notes.append(f"{self.untraced_ns / 1e6:,.3f} ms of the trace's span hold no traced work (before its first "
                         "interval or after its last): counted as they were, under every plan")
        measured, predicted = r.measured_ns + self.untraced_ns, r.predicted_ns + self.untraced_ns
        return {"plan": plan.describe(), "window": w.what, "measured_ns": measured,
                "unchanged_ns": self.unchanged_ns(), "predicted_ns": predicted,
                "gain_ns": measured - predicted, "notes": sorted(set(notes), key=notes.index)}


#: The plan that applies each finding kind's fix (tracer.explain.findings.KINDS), where the replay models it. For
#: gpu_full the plan is the check that more room would give nothing (the GPU was full), not a fix.
FIX_PLANS: dict[str, list[str]] = {
    "same_stream": ["side-stream"],
    "pageable": ["pinned", "side-stream"],
    "host_sync": ["no-sync"],
    "launch_bound": ["graphs"],
    "serialised": ["concurrent"],
    "gpu_full": ["concurrent"],
    "straggler": ["balance"],
}
#: Kinds whose fix the replay cannot price, and why (said beside the finding, never guessed).
NOT_PRICED: dict[str, str] = {
    "event_wait": "a true dependency as far as the trace shows: the program declared it (cudaStreamWaitEvent; or "
                  "it was inferred from timing where the trace has no CUDA sync records), and no two sibling "
                  "ranges of one stem (load0, load1) hold the waiter and the work it waited for; the trace has no "
                  "tensor ids to show more",
    "one_at_a_time": "the trace has no kernel launch figures (grid, block, registers) to tell a full GPU from "
                     "serialised kernels",
    "exposed_comm": "whether compute could run beside the collective depends on what the program lets run before "
                    "it completes (data dependencies the trace does not show); the finding's time is what full "
                    "overlap would save at most",
}
#: Most streams a one_stream fix spreads over: CUDA's default number of hardware queues
#: (CUDA_DEVICE_MAX_CONNECTIONS).
MAX_STREAMS = 8


def fix_gains(replays: Replays, kinds: list[str], found: pd.DataFrame | None = None) -> dict[str, Any]:
    """For each finding kind in ``kinds``: the replay with its fix applied (:data:`FIX_PLANS`,
    :meth:`Replays.what_if`; ``one_stream``: each run of ``found`` spread over streams, :func:`one_stream_gain`),
    keyed by kind; ``{"plan": ..., "error": why}`` where the replay cannot run (e.g. no pinned copy to take a
    bandwidth from), ``{"plan": None, "not_priced": why}`` for a kind the replay does not model
    (:data:`NOT_PRICED`)."""
    out: dict[str, Any] = {}
    for kind in kinds:
        if kind in FIX_PLANS:
            try:
                out[kind] = replays.what_if(FIX_PLANS[kind])
            except TracerError as exc:
                out[kind] = {"plan": " + ".join(FIX_PLANS[kind]), "error": exc.problem}
        elif kind == "one_stream" and found is not None:
            out[kind] = one_stream_gain(replays, found[found["kind"] == kind])
        elif kind == "event_wait" and found is not None:
            out[kind] = event_wait_gain(replays, found[found["kind"] == kind])
        elif kind in NOT_PRICED:
            out[kind] = {"plan": None, "not_priced": NOT_PRICED[kind]}
    return out


def event_wait_gain(replays: Replays, waits: pd.DataFrame) -> dict[str, Any]:
    """The event_wait findings' fix where the trace shows the work waited for independent (the waiter and the op
    it waited for launched in sibling ranges of one stem, :func:`tracer.explain.replay.independent_pairs`): the
    window replayed with ``no-wait``; else ``not_priced`` (a true dependency as far as the trace shows)."""
    g = replays.graph
    e = g.edges[(g.edges["type"] == "launch").to_numpy()]
    launch_of = dict(zip(e["dst"].tolist(), e["src"].tolist()))
    start = g.nodes["start_ns"].to_numpy(np.int64)

    def at(i: int) -> int:
        return int(start[launch_of.get(i, i)])

    ops = [int(n[0]) for n in waits["nodes"]]
    srcs = [int(n[1]) if len(n) > 1 else int(n[0]) for n in waits["nodes"]]
    free = independent_pairs(child_ranges(replays.timeline, replays.window),
                             np.array([at(x) for x in srcs], np.int64), np.array([at(x) for x in ops], np.int64))
    if not free.any():
        return {"plan": None, "not_priced": NOT_PRICED["event_wait"]}
    out = replays.what_if(["no-wait"])
    out["notes"] = [*out["notes"], f"{int(free.sum())} of {len(waits)} waits found are between sibling ranges of one "
                    "stem: independent as the ranges say; the rest are kept"]
    return out


def one_stream_gain(replays: Replays, runs: pd.DataFrame) -> dict[str, Any]:
    """The one_stream findings' fix: each run's work (issued from its first kernel's launch to its last one's)
    replayed with ``streams=N``, N = as many of its kernels as fit on the GPU at once (1 / the largest demand,
    2 to :data:`MAX_STREAMS`); measured and predicted summed over the runs."""
    g = replays.graph
    e = g.edges[(g.edges["type"] == "launch").to_numpy()]
    launch_of = pd.Series(e["src"].to_numpy(), index=e["dst"].to_numpy())
    launch_of = launch_of[~launch_of.index.duplicated()]
    dem = kernel_demand_of(g.nodes, replays.demand)
    measured = predicted = 0
    notes: list[str] = []
    plans = []
    for r in runs.itertuples():
        ks = [k for k in r.nodes if k in launch_of.index]
        if not ks:
            continue
        calls = launch_of.loc[ks].to_numpy()
        lo = int(g.nodes["start_ns"].to_numpy()[calls].min())
        hi = int(g.nodes["start_ns"].to_numpy()[calls].max())
        n = max(2, min(MAX_STREAMS, math.floor(1 / float(np.nanmax(dem[list(r.nodes)])))))
        plan = parse_plan([f"streams={n}"])
        res = replay(g, plan, start_ns=lo, end_ns=hi, demand=replays.demand)
        measured += res.measured_ns
        predicted += res.predicted_ns
        plans.append(plan.describe())
        notes += list(res.notes)
    notes.append("streams: N = as many of the run's kernels as fit on the GPU at once (1 / their largest demand, "
                 f"at most {MAX_STREAMS}); only if the work is independent, which the trace cannot show")
    plan_text = " / ".join(dict.fromkeys(plans)) or "streams"
    return {"plan": plan_text, "window": f"{len(plans)} run(s) of one stream", "measured_ns": measured,
            "unchanged_ns": measured, "predicted_ns": predicted, "gain_ns": measured - predicted,
            "notes": sorted(set(notes), key=notes.index)}


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
