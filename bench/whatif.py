"""The what-if replay checked against real re-runs: from the "before" part of a scenario's trace, predict the
"after" part's time and compare it with what the same run (or its sibling run of the same session) measured.

    PYTHONPATH=. python bench/whatif.py [--slots-only] [RUN_DIR ...]

Without arguments: every bundled H200 run in tracer/examples/ and the runs at other sizes in
tests/data/h200-sizes/ that have a before/after pair. A run
directory of a scenario (meta.json ``scenario``) may be given instead; compute-copy pairs need the
non-blocking, blocking and side-stream runs side by side (as ``tracer record`` writes them). Prints one row per
pair: the before and after time measured, the predicted after time, the error, and the plan. docs/explain.md
quotes it.

Diagnostic columns (read from both parts, so never part of a prediction): ``busy``, the share of the before
part's time the GPU was busy (under 50%: launch-bound, the host sets the time); ``host×``, the host's speed in
the after part relative to the before part (per-name median durations of the host slices both parts hold, calls
that waited for the GPU left out); ``tail×``, the same by means over medians (slow outliers, not the typical op);
``@host``, a launch-bound pair's error once its prediction is scaled by ``host× · tail×``: how much of the error
the host's own change explains; ``demand``, for a GPU-bound pair, whether its main kernel's demand came from
other scenarios' traces (``seenN``: N traces ran it beside itself) or from its block slots alone (``slots``).
Runs with no pair (a single-only run) are named with why. mlp-data-parallel: see :func:`second_recording`.

A kernel's demand on the GPU is the larger of its block-slot share (Kineto's launch figures) and what the
traces of *other* scenarios showed when kernels of the same name shared the GPU (``--slots-only``: the slot
share alone).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tracer.explain import build_graph
from tracer.explain.graph import GPU_KINDS, HOST_KINDS, Graph
from tracer.explain.occupancy import demand_of, merge_demand, overlap_demand
from tracer.explain.replay import Plan, issued_nodes, pinned_bandwidth, replay
from tracer.parsers import load_trace
from tracer.parsers.demand import read_launch_figures
from tracer.timeline import Timeline

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tracer" / "examples"
#: H200 runs recorded at other sizes than the bundled ones (2026-12-03; tests/data/FIXTURES.md)
SIZES = ROOT / "tests" / "data" / "h200-sizes"


@dataclass
class Loaded:
    path: Path
    meta: dict[str, object]
    timeline: Timeline
    graph: Graph
    demand: dict[int, float]
    seen: dict[str, float]  # kernel demand by name, from this trace's overlaps
    learned: dict[str, list[str]] = field(default_factory=dict)  # kernel name -> the runs its demand came from

    def rng(self, name: str) -> tuple[int, int]:
        ev = self.timeline.events
        r = ev[(ev["kind"].astype(str) == "range").to_numpy() & (ev["name"].astype(str) == name).to_numpy()]
        if r.empty:
            raise KeyError(f"{self.path.name}: no range {name!r}")
        return int(r["start_ns"].min()), int(r["end_ns"].max())

    def children(self, lo: int, hi: int, parent: str) -> pd.DataFrame:
        ev = self.timeline.events
        r = ev[(ev["kind"].astype(str) == "range").to_numpy() & (ev["start_ns"] >= lo).to_numpy()
               & (ev["end_ns"] <= hi).to_numpy() & (ev["name"].astype(str) != parent).to_numpy()]
        return pd.DataFrame({"name": r["name"].astype(str).to_numpy(), "start_ns": r["start_ns"].to_numpy(),
                             "end_ns": r["end_ns"].to_numpy()})

    def measured(self, name: str) -> int:
        lo, hi = self.rng(name)
        return replay(self.graph, start_ns=lo, end_ns=hi, demand=self.demand).measured_ns


def load(run: Path) -> Loaded:
    meta = json.loads((run / "meta.json").read_text())
    trace = run / "trace.json.gz"
    t = load_trace(trace if trace.is_file() else run, cache=False)
    demand, _ = demand_of(read_launch_figures(run))
    g = build_graph(t)
    return Loaded(run, meta, t, g, demand, overlap_demand(g.nodes))


@dataclass
class Host:
    """How the host ran in the "after" part relative to the "before" part, from the host slices (graph nodes:
    the innermost cpu_op / runtime intervals) of the names both parts hold, calls that waited for the GPU left
    out. A diagnostic read from *both* parts: the prediction never sees it."""

    busy: float  # share of the before window's time the GPU was busy (kernels, copies, memsets: their union)
    speed: float | None  # per-name median duration, after / before, weighted by the after part's counts
    total: float | None  # the common names' time in the after part / the same counts at the before part's means
    kernel: str | None = None  # the kernel name that holds the most GPU time of the before part


@dataclass
class Row:
    run: str
    pair: str
    plan: str
    before_ns: int
    predicted_ns: int | None
    measured_ns: int | None
    why: str = ""
    host: Host | None = None

    @property
    def error(self) -> float | None:
        if self.predicted_ns is None or not self.measured_ns:
            return None
        return 100.0 * (self.predicted_ns - self.measured_ns) / self.measured_ns


def missing_work(run: Loaded, before: str, after: str) -> str:
    """What the ``after`` range holds that the ``before`` range has no node for, in numbers: a replay rewrites
    the nodes and edges it has, it cannot create work of a shape it never saw."""
    n = run.graph.nodes

    def part(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        lo, hi = run.rng(name)
        m = n.loc[issued_nodes(run.graph, lo, hi)]
        gpu = m["kind"].astype(str).isin(["kernel", "memcpy", "memset"]).to_numpy()
        return m[gpu], m[~gpu]

    (gb, hb), (ga, ha) = part(before), part(after)

    def pageable_ms(g: pd.DataFrame) -> float:
        c = g[(g["kind"].astype(str) == "memcpy").to_numpy() & ((g["src_mem"].astype(str) == "pageable")
                                                                | (g["dst_mem"].astype(str) == "pageable")).to_numpy()]
        return float((c["end_ns"] - c["start_ns"]).sum()) / 1e6

    def host_ms(h: pd.DataFrame) -> float:
        return float((h["end_ns"] - h["start_ns"]).sum()) / 1e6

    params = run.meta.get("params") or {}
    cpu = isinstance(params, dict) and float(params.get("cpu_share") or 0) > 0
    streams_b, streams_a = gb["stream"].nunique(), ga["stream"].nunique()
    return (f"the replicas run other work than the single range holds: {len(ga)} GPU ops on {streams_a} streams "
            f"vs {len(gb)} on {streams_b} (half-batch kernels, the gather's cat/sum), pageable copies "
            f"{pageable_ms(ga):.1f} ms vs {pageable_ms(gb):.1f}"
            + (" (the parameters to the CPU share and its gradients back, each blocking the host)" if cpu else "")
            + f", host slices {host_ms(ha):.1f} ms vs {host_ms(hb):.1f}"
            + (" (the CPU share's forward/backward)" if cpu else "")
            + ": no plan creates work of a shape the trace never ran")


def _window(run: Loaded, names: list[str]) -> tuple[int, int]:
    return min(run.rng(b)[0] for b in names), max(run.rng(b)[1] for b in names)


def host_change(run: Loaded, before: list[str], after: str) -> Host:
    """:class:`Host` for one pair: ``before`` ranges (their window) against the ``after`` range."""
    n = run.graph.nodes
    kind = n["kind"].astype(str).to_numpy()
    host = np.isin(kind, list(HOST_KINDS)) & ~n["blocking"].to_numpy(bool)
    gpu = np.isin(kind, list(GPU_KINDS))

    def part(lo: int, hi: int) -> pd.DataFrame:
        inside = (n["start_ns"] >= lo).to_numpy() & (n["end_ns"] <= hi).to_numpy() & host
        m = n[inside]
        f = pd.DataFrame({"name": m["name"].astype(str).to_numpy(),
                          "dur": (m["end_ns"] - m["start_ns"]).to_numpy(np.int64)})
        # stalls (1 ms and 10 times their name's median, lazy loading) are the warm plan's to price, not speed
        med = f.groupby("name")["dur"].transform("median")
        return f[~((f["dur"] >= 1_000_000) & (f["dur"] >= 10 * med)).to_numpy()]

    blo, bhi = _window(run, before)
    g = n[gpu & (n["start_ns"] < bhi).to_numpy() & (n["end_ns"] > blo).to_numpy()].sort_values("start_ns")
    busy, reach = 0, blo
    for s, e in zip(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)):
        s, e = max(int(s), reach), min(int(e), bhi)
        if e > s:
            busy, reach = busy + e - s, e
    top = g.assign(d=g["end_ns"] - g["start_ns"]).groupby(g["name"].astype(str))["d"].sum()
    kernel = str(top.idxmax()) if len(top) else None
    b, a = part(blo, bhi), part(*run.rng(after))
    gb, ga = b.groupby("name")["dur"], a.groupby("name")["dur"]
    common = sorted(set(b["name"]) & set(a["name"]))
    if not common:
        return Host(busy / max(bhi - blo, 1), None, None, kernel)
    count = ga.size()[common]
    speed = float((count * ga.median()[common]).sum() / (count * gb.median()[common]).sum())
    total = float(ga.sum()[common].sum() / (count * gb.mean()[common]).sum())
    return Host(busy / max(bhi - blo, 1), speed, total, kernel)


def predict(run: Loaded, before: list[str], plan: Plan) -> tuple[int, int]:
    """(measured before, predicted after) for the window from the first ``before`` range's start to the last's
    end."""
    lo, hi = _window(run, before)
    kids = run.children(lo, hi, before[0]) if len(before) == 1 else pd.DataFrame(
        {"name": [], "start_ns": [], "end_ns": []})
    r = replay(run.graph, plan, start_ns=lo, end_ns=hi, demand=run.demand, children=kids)
    return r.measured_ns, r.predicted_ns


def session(run: Loaded) -> tuple[object, str, str]:
    """Runs of one recording session: same backend, same size, same day in the directory name."""
    day = next((p for p in run.path.name.split("-") if len(p) == 8 and p.isdigit()), "")
    return run.meta.get("backend"), size_label(run.meta), day


def size_label(meta: dict[str, object]) -> str:
    """The recorded size of a scenario's work, as the pair column shows it ("" where the run has none)."""
    params = meta.get("params") or {}
    assert isinstance(params, dict)
    if "hidden" in params:
        return f"hidden {params['hidden']}"
    if "size" in params:
        return f"{params['size']}²"
    return ""


def rows_for(run: Loaded, siblings: dict[str, Loaded]) -> list[Row]:
    """Every before -> after pair ``run`` holds (compute-copy: with its sibling variant runs), size in the pair."""
    out = _rows_for(run, siblings)
    size = size_label(run.meta)
    for r in out:
        if size and "²)" not in r.pair:
            r.pair = f"{r.pair} ({size})"
    return out


def _rows_for(run: Loaded, siblings: dict[str, Loaded]) -> list[Row]:
    sc = str(run.meta["scenario"])
    name = run.path.name
    pre = sc + "/"
    out: list[Row] = []
    if sc == "multi-device":
        plan = Plan(no_sync=True)
        b, p = predict(run, [pre + "alone-0", pre + "alone-1"], plan)
        out.append(Row(name, "alone -> together", plan.describe(), b, p, run.measured(pre + "together"),
                       host=host_change(run, [pre + "alone-0", pre + "alone-1"], pre + "together")))
    elif sc == "cpu-gpu-copy":
        plan = Plan(no_sync=True)
        b, p = predict(run, [pre + "serial-device", pre + "serial-copies", pre + "serial-cpu"], plan)
        out.append(Row(name, "serial -> together", plan.describe(), b, p, run.measured(pre + "together"),
                       host=host_change(run, [pre + "serial-device", pre + "serial-copies", pre + "serial-cpu"],
                                        pre + "together")))
    elif sc == "dependency-graph":
        lanes = len(run.meta.get("lanes", [])) or 4  # type: ignore[arg-type]
        after = run.measured(pre + "parallel")
        plan = Plan(streams=lanes)
        b, p = predict(run, [pre + "serial"], plan)
        out.append(Row(name, "serial -> parallel (as recorded)", plan.describe(), b, p, after,
                       "the serial part, run first, pays first-use host stalls the parallel part does not"))
        plan = Plan(streams=lanes, warm=True)
        b, p = predict(run, [pre + "serial"], plan)
        out.append(Row(name, "serial -> parallel", plan.describe(), b, p, after,
                       host=host_change(run, [pre + "serial"], pre + "parallel")))
    elif sc == "independent-ops":
        lanes = len(run.meta.get("lanes", [])) or 8  # type: ignore[arg-type]
        after = run.measured(pre + "spread")
        plan = Plan(streams=lanes, warm=True)
        b, p = predict(run, [pre + "serial"], plan)
        out.append(Row(name, "serial -> spread", plan.describe(), b, p, after,
                       host=host_change(run, [pre + "serial"], pre + "spread")))
        cold = Plan(streams=lanes)
        b, p_cold = predict(run, [pre + "serial"], cold)
        if abs(p_cold - p) > 0.001 * p:  # the row as recorded only where warm changed something
            out.insert(0, Row(name, "serial -> spread (as recorded)", cold.describe(), b, p_cold, after,
                              "the serial part, run first, grows the allocator's pool (cudaMalloc) for both"))
    elif sc == "small-ops":
        plan = Plan(streams=len(run.meta.get("lanes", [])) or 8)  # type: ignore[arg-type]
        for size in str(run.meta["params"]["sizes"]).split(","):  # type: ignore[index]
            b, p = predict(run, [f"{pre}one-stream-{size}"], plan)
            out.append(Row(name, f"one stream -> streams ({size}²)", plan.describe(), b, p,
                           run.measured(f"{pre}streams-{size}"),
                           host=host_change(run, [f"{pre}one-stream-{size}"], f"{pre}streams-{size}")))
    elif sc == "mlp-data-parallel":
        if str(run.meta.get("variant")) == "single":  # a reference run of the single part alone: no pair
            return out
        b = run.measured(pre + "single")
        out.append(Row(name, "single -> parallel", "—", b, None, run.measured(pre + "parallel"),
                       "not modelled: " + missing_work(run, pre + "single", pre + "parallel")))
    elif sc == "compute-copy":
        variant = str(run.meta["variant"])
        side = siblings.get("side-stream")
        side_ns = side.measured(pre + "run+copy-side-stream") if side else None
        if variant == "non-blocking":
            plan = Plan(side_stream=True)
            b, p = predict(run, [pre + "run+copy-non-blocking"], plan)
            out.append(Row(name, "non-blocking -> side-stream", plan.describe(), b, p, side_ns))
        elif variant == "blocking":
            nb = siblings.get("non-blocking")
            rate = pinned_bandwidth(nb.graph).get("DtoH") if nb else None
            # the blocking run has no pinned copy to take a bandwidth from: the non-blocking run of the same
            # session's pinned DtoH copies give it
            plan = Plan(side_stream=True, pinned=True, pinned_gbps=rate)
            b, p = predict(run, [pre + "run+copy-blocking"], plan)
            out.append(Row(name, "blocking -> pinned side-stream", plan.describe(), b, p, side_ns))
    return out


def second_recording(run: Loaded, loaded: list[Loaded]) -> Row | None:
    """mlp single -> parallel from a *second* recording: a single-only run (variant single) of the same session
    and model whose batch is one replica's share (the pair's batch / its lanes, no CPU share). Where that run is
    launch-bound (its GPU busy < :data:`LAUNCH_BOUND`), its time is its host's, and one host thread submits
    every replica's work: the parallel part takes about lanes × its time. Not a replay of the pair's trace (the
    replicas' half-batch kernels are not in it): a separate estimate, outside the headline figures."""
    params = run.meta.get("params")
    lanes = len(run.meta.get("lanes") or [])  # type: ignore[arg-type]
    if run.meta["scenario"] != "mlp-data-parallel" or run.meta.get("variant") == "single" or not lanes \
            or not isinstance(params, dict) or float(params.get("cpu_share") or 0) > 0:
        return None
    same = ("inputs", "hidden", "classes", "steps")
    for ref in loaded:
        rp = ref.meta.get("params")
        if (ref.meta["scenario"] == run.meta["scenario"] and ref.meta.get("variant") == "single"
                and isinstance(rp, dict) and session(ref)[::2] == session(run)[::2]
                and all(rp.get(k) == params.get(k) for k in same) and int(rp["batch"]) * lanes == int(params["batch"])):
            host = host_change(ref, ["mlp-data-parallel/single"], "mlp-data-parallel/single")
            half = ref.measured("mlp-data-parallel/single")
            pre = "mlp-data-parallel/"
            if host.busy >= LAUNCH_BOUND:
                return None
            return Row(run.path.name, f"single -> parallel, 2nd recording ({size_label(run.meta)})",
                       f"{lanes} × single batch={rp['batch']} ({ref.path.name[-15:]}, GPU busy {host.busy:.0%})",
                       run.measured(pre + "single"), lanes * half, run.measured(pre + "parallel"))
    return None


#: a pair whose before part kept the GPU busy less than this share of its time is launch-bound: its time is the
#: host's, and a host that runs slower or faster in the after part moves the measured time by as much
LAUNCH_BOUND = 0.5


def at_host(row: Row) -> float | None:
    """The error of a launch-bound pair's prediction scaled by the host's time change (``host×`` · ``tail×``,
    after / before): how much of the error the host's own speed explains. ``None`` for other pairs. Uses the
    after part: a diagnostic, never the prediction."""
    h = row.host
    if h is None or h.total is None or h.busy >= LAUNCH_BOUND or row.predicted_ns is None or not row.measured_ns:
        return None
    return 100.0 * (row.predicted_ns * h.total - row.measured_ns) / row.measured_ns


def collect(runs: list[Path], slots_only: bool = False) -> tuple[list[Row], list[str], list[Loaded]]:
    """Every pair of ``runs`` (sorted), the lines naming runs with no pair, and the loaded runs."""
    loaded = []
    for r in runs:
        meta = json.loads((r / "meta.json").read_text())
        if not meta.get("scenario"):
            continue
        loaded.append(load(r))
    # a kernel's demand as other scenarios' traces saw it share the GPU (never the run's own scenario, whose
    # "after" part is what is predicted)
    if not slots_only:
        for x in loaded:
            seen: dict[str, list[float]] = {}
            for y in loaded:
                if y.meta["scenario"] != x.meta["scenario"]:
                    for k, v in y.seen.items():
                        seen.setdefault(k, []).append(v)
                        x.learned.setdefault(k, []).append(y.path.name)
            x.demand = merge_demand(x.graph.nodes, x.demand, {k: statistics.mean(v) for k, v in seen.items()})
    # compute-copy siblings: the variant runs of the same session (backend, size and day of the run's name)
    rows: list[Row] = []
    skipped: list[str] = []
    for x in loaded:
        cc = {str(y.meta["variant"]): y for y in loaded
              if y.meta["scenario"] == "compute-copy" and session(y) == session(x)}
        try:
            found = rows_for(x, cc)
        except KeyError as missing:  # a run without the ranges its scenario's pair needs: say so, go on
            skipped.append(f"{x.path.name}: skipped, {missing.args[0]}")
            continue
        if not found and not (x.meta["scenario"] == "compute-copy" and x.meta.get("variant") == "side-stream"):
            phases = x.meta.get("phases")
            skipped.append(f"{x.path.name}: no pair (variant {x.meta.get('variant')!r}: "
                           f"{', '.join(map(str, phases)) if isinstance(phases, list) else 'no phases'})")
        rows += found
    rows.sort(key=lambda r: (r.run.split("-streams")[0], r.run))
    return rows, skipped, loaded


def main(argv: list[str]) -> int:
    flags = {a for a in argv if a.startswith("--")}
    argv = [a for a in argv if not a.startswith("--")]
    runs = [Path(a) for a in argv] or sorted(p for d in (EXAMPLES, SIZES) for p in d.iterdir()
                                             if (p / "meta.json").is_file())
    rows, skipped, loaded = collect(runs, "--slots-only" in flags)
    by_run = {x.path.name: x for x in loaded}
    print(f"{'run':<46} {'pair':<40} {'before ms':>9} {'predicted':>9} {'measured':>9} {'error':>7} "
          f"{'busy':>5} {'host×':>6} {'tail×':>6} {'@host':>7} {'demand':>6}  plan")
    errors = []
    for row in rows:
        pred = f"{row.predicted_ns / 1e6:9.3f}" if row.predicted_ns is not None else f"{'—':>9}"
        meas = f"{row.measured_ns / 1e6:9.3f}" if row.measured_ns is not None else f"{'—':>9}"
        err = row.error
        if err is not None:
            errors.append(abs(err))
        e = f"{err:+6.1f}%" if err is not None else f"{'—':>7}"
        h = row.host
        diag = (f"{h.busy:5.0%} " + (f"{h.speed:6.3f} {h.total / h.speed:6.3f}" if h.speed and h.total else
                                     f"{'—':>6} {'—':>6}")) if h else f"{'—':>5} {'—':>6} {'—':>6}"
        at = at_host(row)
        dem = ""  # where a GPU-bound pair's main kernel got its demand: other traces ran it beside itself, or not
        if h and h.busy >= LAUNCH_BOUND and h.kernel:
            dem = f"seen{len(by_run[row.run].learned.get(h.kernel, []))}" if h.kernel in by_run[
                row.run].learned else "slots"
        print(f"{row.run[:46]:<46} {row.pair:<40} {row.before_ns / 1e6:9.3f} {pred} {meas} {e} {diag} "
              + (f"{at:+6.1f}%" if at is not None else f"{'':>7}") + f" {dem:>6}  {row.plan}")
        if row.why:
            print(f"{'':<46}   {row.why}")
    for line in skipped:
        print(line)
    extra = [r for r in (second_recording(x, loaded) for x in loaded) if r is not None]
    if extra:
        print("\nwith a second recording (an estimate from another run, not counted below):")
    for row in extra:
        assert row.predicted_ns is not None and row.measured_ns is not None
        print(f"{row.run[:46]:<46} {row.pair:<40} {row.before_ns / 1e6:9.3f} {row.predicted_ns / 1e6:9.3f} "
              f"{row.measured_ns / 1e6:9.3f} {row.error:+6.1f}%  {row.plan}")
    if errors:
        print(f"\n{len(errors)} pairs predicted: median |error| {statistics.median(errors):.1f}%, "
              f"max {max(errors):.1f}%, within 15%: {sum(e <= 15 for e in errors)}/{len(errors)}")
        clean = [abs(r.error) for r in rows if r.error is not None and not r.why]
        if clean and len(clean) < len(errors):
            print(f"without the rows marked with a reason: {len(clean)} pairs, median |error| "
                  f"{statistics.median(clean):.1f}%, max {max(clean):.1f}%, within 15%: "
                  f"{sum(e <= 15 for e in clean)}/{len(clean)}")
        bound = [r for r in rows if at_host(r) is not None and r.error is not None and not r.why]
        if bound:
            print(f"launch-bound pairs (GPU busy < {LAUNCH_BOUND:.0%} of the before part): {len(bound)}, median "
                  f"|error| {statistics.median(abs(r.error or 0) for r in bound):.1f}%, max "
                  f"{max(abs(r.error or 0) for r in bound):.1f}%; at the after part's host time (diagnostic: "
                  f"after-part data) median {statistics.median(abs(at_host(r) or 0) for r in bound):.1f}%, max "
                  f"{max(abs(at_host(r) or 0) for r in bound):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
