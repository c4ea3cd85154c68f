"""The predicted gain of `tracer explain`'s fixes checked against real "after" parts (issue 10, parts 3-6): for the
finding kinds priced by the fix_gains of ``tracer/explain/whatif.py``, the prediction made from the "before" part
alone beside what the same run measured for its "after" part.

    PYTHONPATH=. python bench/fix_gains.py [RUN_DIR_OR_TRACE ...]

Without arguments: the bundled small-ops and independent-ops runs (one stream -> streams: the one_stream finding's
fix), tests/data/graphs_kineto.json.gz (eager -> CUDA graph: the launch-bound finding's fix, plan ``graphs``), and
the kernels that waited on a full GPU (gpu_full: plan ``concurrent`` must give ~nothing). Runs of the lead's
/work/newruns may be given as arguments. docs/explain.md quotes the output.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

from tracer.explain import Window, build_graph, critical_path
from tracer.explain.findings import findings
from tracer.explain.graph import Graph
from tracer.explain.occupancy import demand_of
from tracer.explain.replay import parse_plan, replay
from tracer.explain.whatif import Replays, fix_gains
from tracer.parsers import load_trace
from tracer.parsers.demand import read_launch_figures

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [*sorted((ROOT / "tracer" / "examples").glob("small-ops-*")),
           *sorted((ROOT / "tracer" / "examples").glob("independent-ops-*")),
           ROOT / "tests" / "data" / "graphs_kineto.json.gz"]
#: "after" range of a "before" range, by scenario
AFTER = {"one-stream-": "streams-", "serial": "spread", "graphs/eager": "graphs/graph"}


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or DEFAULT
    print(f"{'trace':<44} {'finding -> fix':<30} {'before ms':>9} {'predicted':>9} {'after ms':>9} {'error':>7}")
    errors = []
    for p in paths:
        t = load_trace(p, cache=False)
        g = build_graph(t)
        demand = demand_of(read_launch_figures(p))[0]
        f = findings(g, critical_path(g), demand=demand)
        ev = t.events
        r = ev[(ev["kind"].astype(str) == "range").to_numpy()]
        rng = {str(n): (int(a), int(b)) for n, a, b in zip(r["name"], r["start_ns"], r["end_ns"], strict=True)}

        def span(name: str, g: Graph = g, rng: dict[str, tuple[int, int]] = rng,
                 demand: dict[int, float] = demand) -> int:
            lo, hi = rng[name]
            return replay(g, start_ns=lo, end_ns=hi, demand=demand).measured_ns

        def after_of(name: str, rng: dict[str, tuple[int, int]] = rng) -> str | None:
            for a, b in AFTER.items():
                if a in name and name.replace(a, b) in rng:
                    return name.replace(a, b)
            return None

        label = p.name[:44]
        rows: list[tuple[str, int, int, int]] = []
        if "graphs/eager" in rng:
            lo, hi = rng["graphs/eager"]
            x = replay(g, parse_plan(["graphs"]), start_ns=lo, end_ns=hi, demand=demand)
            rows.append(("launch_bound -> graphs", x.measured_ns, x.predicted_ns, span("graphs/graph")))
        runs = f[f["kind"] == "one_stream"]
        for run in runs.itertuples():
            # the range the run was issued in, and its "after" range
            name = next((n for n, (lo, hi) in rng.items() if lo <= run.start_ns <= hi and after_of(n)), None)
            if name is None:
                continue
            one = runs[runs["node"] == run.node]
            gain = fix_gains(Replays(t, g, Window(), demand), ["one_stream"], one)["one_stream"]
            after_name = after_of(name)
            assert after_name is not None
            rows.append((f"one_stream -> {gain['plan']}", gain["measured_ns"], gain["predicted_ns"], span(after_name)))
        full = f[f["kind"] == "gpu_full"]
        if len(full):
            names = {n for n, (lo, hi) in rng.items() if ((full["start_ns"] >= lo) & (full["start_ns"] <= hi)).any()
                     and "/" in n and not n.endswith(("serial", "one-stream"))}
            for name in sorted(names):
                lo, hi = rng[name]
                x = replay(g, parse_plan(["concurrent"]), start_ns=lo, end_ns=hi, demand=demand)
                rows.append((f"gpu_full ({int(((full['start_ns'] >= lo) & (full['start_ns'] <= hi)).sum())}) "
                             "-> concurrent", x.measured_ns, x.predicted_ns, x.measured_ns))
        for what, before, predicted, after in rows:
            err = 100.0 * (predicted - after) / after
            if not what.startswith("gpu_full"):
                errors.append(abs(err))
            print(f"{label:<44} {what:<30} {before / 1e6:9.3f} {predicted / 1e6:9.3f} {after / 1e6:9.3f} {err:+6.1f}%")
    if errors:
        print(f"\n{len(errors)} fixes checked against a measured after: median |error| "
              f"{statistics.median(errors):.1f}%, max {max(errors):.1f}%, within 15%: "
              f"{int(np.sum(np.array(errors) <= 15))}/{len(errors)} (gpu_full rows: the after is the part itself)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
