"""tracer.explain.replay: the what-if replay on real H200 traces (tests/data and the bundled runs), no GPU.

An unchanged plan must replay to the measured span within 2%; each plan's prediction is checked for its
direction and against what the same session measured for the changed program (bench/whatif.py prints all).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.conftest import DATA, cli_main
from tracer.explain import build_graph
from tracer.explain.occupancy import demand_of, kernel_demand, overlap_demand
from tracer.explain.replay import Plan, issued_nodes, parse_plan, replay
from tracer.parsers import load_trace
from tracer.parsers.demand import read_kineto_launch_figures, read_launch_figures

EXAMPLES = Path(__file__).resolve().parent.parent / "tracer" / "examples"
H200 = {"numSms": 132, "maxThreadsPerMultiprocessor": 2048, "regsPerMultiprocessor": 65536, "warpSize": 32,
        "sharedMemPerMultiprocessor": 233472}


def _kineto_demand(path: Path) -> dict[int, float]:
    """The kernels' demand from a Kineto trace's launch figures (none for any other file)."""
    figures = read_kineto_launch_figures(path)
    return demand_of([figures] if figures is not None else [])[0]


def _load(path: Path):
    t = load_trace(path, cache=False)
    return t, build_graph(t), _kineto_demand(path)


def _range(timeline, name: str) -> tuple[int, int]:
    ev = timeline.events
    r = ev[(ev["kind"].astype(str) == "range").to_numpy() & (ev["name"].astype(str) == name).to_numpy()]
    return int(r["start_ns"].min()), int(r["end_ns"].max())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["copy_nonblocking_same_stream.json.gz", "copy_side_stream.json.gz",
                                  "two_streams.json.gz", "graph_kineto.json.gz", "pair_kineto.json.gz",
                                  "mlp_train_200.json.gz", "pair.sqlite.gz"])
def test_unchanged_plan_reproduces_the_measured_span(name):
    t = load_trace(DATA / name, cache=False)
    r = replay(build_graph(t), demand=_kineto_demand(DATA / name))
    assert r.measured_ns > 0
    assert abs(r.ratio - 1) < 0.02, (name, r.measured_ns, r.predicted_ns)


def test_unchanged_plan_reproduces_a_range():
    t, g, d = _load(EXAMPLES / "dependency-graph-streams-20261202-161236" / "trace.json.gz")
    lo, hi = _range(t, "dependency-graph/parallel")  # four streams, kernels sharing the GPU
    r = replay(g, start_ns=lo, end_ns=hi, demand=d)
    assert abs(r.ratio - 1) < 0.02
    assert len(issued_nodes(g, lo, hi)) == len(r.nodes)


def test_kernel_demand_from_launch_figures():
    # the bundled runs' 4000² matmul: 512 blocks of 256 threads, 254 registers: one block per SM, 3.88 waves in 4
    args = {"grid": [16, 32, 1], "block": [256, 1, 1], "registers per thread": 254, "shared memory": 67584}
    assert kernel_demand(args, H200) == pytest.approx(512 / 528)
    assert kernel_demand({**args, "grid": [8, 8, 1]}, H200) == pytest.approx(64 / 132)
    assert kernel_demand({"grid": [1, 1, 1]}, H200) is None  # no block size


def test_side_stream_predicts_the_side_stream_run():
    # the fixtures are one session's non-blocking same-stream run and its side-stream run
    _, g, d = _load(DATA / "copy_nonblocking_same_stream.json.gz")
    r = replay(g, Plan(side_stream=True), demand=d)
    side = replay(build_graph(load_trace(DATA / "copy_side_stream.json.gz", cache=False)))
    assert r.predicted_ns < 0.8 * r.measured_ns  # the copies hide behind the matmuls
    assert abs(r.predicted_ns / side.measured_ns - 1) < 0.15


def test_pinned_side_stream_predicts_the_blocking_runs_fix():
    t, g, d = _load(EXAMPLES / "compute-copy-blocking-streams-20261202-161350" / "trace.json.gz")
    lo, hi = _range(t, "compute-copy/run+copy-blocking")
    # the run has no pinned copy to take a bandwidth from: an H200 takes tracer's reference, and says so ...
    ref = replay(g, Plan(pinned=True), start_ns=lo, end_ns=hi, demand=d)
    assert any("DtoH 55.1 GB/s" in n and "NVIDIA H200" in n for n in ref.notes)
    # ... another model is asked for a bandwidth
    with pytest.raises(Exception, match="pinned=GBPS"):
        replay(dataclasses.replace(g, gpu_names={0: "NVIDIA A100-SXM4-80GB"}), Plan(pinned=True), start_ns=lo,
               end_ns=hi, demand=d)
    pinned = replay(g, Plan(pinned=True, pinned_gbps=54.0), start_ns=lo, end_ns=hi, demand=d)
    both = replay(g, Plan(pinned=True, pinned_gbps=54.0, side_stream=True), start_ns=lo, end_ns=hi, demand=d)
    assert both.predicted_ns < pinned.predicted_ns < 0.2 * pinned.measured_ns  # 2.1 s of pageable copies go
    ts, gs, _ = _load(EXAMPLES / "compute-copy-side-stream-streams-20261202-161322" / "trace.json.gz")
    slo, shi = _range(ts, "compute-copy/run+copy-side-stream")
    measured = replay(gs, start_ns=slo, end_ns=shi).measured_ns
    assert abs(both.predicted_ns / measured - 1) < 0.15


def test_no_sync_predicts_two_filling_matmul_streams_at_096_of_the_sum():
    t, g, d = _load(EXAMPLES / "multi-device-streams-20261202-161153" / "trace.json.gz")
    lo, _ = _range(t, "multi-device/alone-0")
    _, hi = _range(t, "multi-device/alone-1")
    r = replay(g, Plan(no_sync=True), start_ns=lo, end_ns=hi, demand=d)
    assert 0.93 < r.ratio < 0.99  # not 0.5: each 4000² matmul fills the GPU
    tlo, thi = _range(t, "multi-device/together")
    together = replay(g, start_ns=tlo, end_ns=thi).measured_ns
    assert abs(r.predicted_ns / together - 1) < 0.05
    # every kernel counted as filling the GPU: no gain beyond the host's overlap
    full = replay(g, Plan(no_sync=True), start_ns=lo, end_ns=hi)
    assert full.predicted_ns >= r.predicted_ns


def test_streams_spread_independent_chains_with_a_bound():
    t, g, d = _load(EXAMPLES / "small-ops-streams-20261202-161222" / "trace.json.gz")
    lo, hi = _range(t, "small-ops/one-stream-1024")
    r = replay(g, Plan(streams=8), start_ns=lo, end_ns=hi, demand=d)
    # 64-block matmuls hold 48% of the SM slots: at most about twice as fast, and faster than one stream
    assert 0.45 * r.measured_ns < r.predicted_ns < 0.9 * r.measured_ns
    # what the kernels showed when they did share the GPU (the streams part) caps the gain
    seen = overlap_demand(g.nodes)
    assert seen and all(0.5 < v <= 1 for v in seen.values())


def test_streams_from_child_ranges_and_warm():
    t, g, d = _load(EXAMPLES / "dependency-graph-streams-20261202-161236" / "trace.json.gz")
    lo, hi = _range(t, "dependency-graph/serial")
    ev = t.events
    kids = ev[(ev["kind"].astype(str) == "range").to_numpy() & (ev["start_ns"] >= lo).to_numpy()
              & (ev["end_ns"] <= hi).to_numpy() & (ev["name"].astype(str) != "dependency-graph/serial").to_numpy()]
    kids = kids[["name", "start_ns", "end_ns"]].assign(name=kids["name"].astype(str))
    plan = Plan(streams=4, warm=True)
    r = replay(g, plan, start_ns=lo, end_ns=hi, demand=d, children=kids)
    assert any("9 chains" in n for n in r.notes) and any(n.startswith("warm: ") for n in r.notes)
    plo, phi = _range(t, "dependency-graph/parallel")
    measured = replay(g, start_ns=plo, end_ns=phi).measured_ns
    assert abs(r.predicted_ns / measured - 1) < 0.1
    warm_only = replay(g, Plan(warm=True), start_ns=lo, end_ns=hi, demand=d, children=kids)
    assert r.predicted_ns < warm_only.predicted_ns < r.measured_ns


@pytest.mark.parametrize(("spec", "phrase"), [(["bogus"], "is not a plan"), (["streams=1"], "from 2 to 1024"),
                                              (["pinned=x"], "GB/s")])
def test_parse_plan_rejects_bad_specs(spec, phrase):
    with pytest.raises(Exception, match=phrase):
        parse_plan(spec)


def test_parse_plan_combines():
    p = parse_plan(["side-stream", "pinned=25", "no-sync=cudaStreamSynchronize", "streams=3"])
    assert (p.side_stream, p.pinned_gbps, p.no_sync_name, p.streams) == (True, 25.0, "cudaStreamSynchronize", 3)
    assert parse_plan([]).unchanged


@pytest.mark.slow
def test_cli_what_if_json_and_bad_plan():
    path = str(DATA / "copy_nonblocking_same_stream.json.gz")
    proc = cli_main("explain", "--json", "--what-if", "side-stream", path)
    assert proc.returncode == 0, proc.stderr
    w = json.loads(proc.stdout)["what_if"]
    assert w["plan"] == "side-stream" and w["predicted_ns"] < 0.8 * w["measured_ns"]
    assert abs(w["unchanged_ns"] / w["measured_ns"] - 1) < 0.02
    proc = cli_main("explain", "--what-if", "streams=zero", path)
    err = [line for line in proc.stderr.splitlines() if line.startswith("tracer: error:")]
    assert proc.returncode == 2 and len(err) == 1 and "streams" in err[0] and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == err[0]  # refused before the trace is read: no note about it first


def test_nsys_launch_figures_give_the_same_demand_as_kineto():
    kineto, _ = demand_of(read_launch_figures(EXAMPLES / "multi-device-streams-20261202-161153"))
    nsys, sms = demand_of(read_launch_figures(EXAMPLES / "multi-device-streams-20261202-161443"))
    assert sms == 132 and len(nsys) == len(kineto) == 200
    assert sorted(set(round(v, 4) for v in nsys.values())) == sorted(set(round(v, 4) for v in kineto.values()))
    assert read_launch_figures(DATA / "graph_nsys_stats.txt") == ()  # neither format: nothing, no error
    assert demand_of(()) == ({}, None)


@pytest.mark.slow
def test_kineto_demand_typed_read_equals_the_loose_one_and_refuses_a_bomb(tmp_path):
    # The typed decode reads only the kernels' launch figures; a trace it refuses (here one event whose args are
    # a list) is read whole: both must give the same demand, from an independent computation over the JSON.
    import gzip

    import orjson

    src = EXAMPLES / "multi-device-streams-20261202-161153" / "trace.json.gz"
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    props = {d["id"]: d for d in doc["deviceProperties"]}
    expected = {e["args"]["correlation"]: kernel_demand(e["args"], props[e["args"]["device"]])
                for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    typed, sms = demand_of(read_launch_figures(src))
    assert typed == expected and len(typed) == 200 and sms == 132
    doc["traceEvents"].append({"ph": "i", "cat": "instant", "name": "odd", "ts": 1, "args": [1, 2]})
    odd = tmp_path / "odd.json"
    odd.write_bytes(orjson.dumps(doc))
    assert demand_of(read_launch_figures(odd)) == (expected, 132)
    bomb = tmp_path / "bomb.json.gz"  # 200 MB of spaces in 0.2 MB: refused by the parsers' ratio check
    bomb.write_bytes(gzip.compress(b"{" + b" " * 200_000_000 + b"}", 9))
    assert read_kineto_launch_figures(bomb) is None


@pytest.mark.slow
def test_cli_what_if_streams_reads_the_ranges_chains():
    run = EXAMPLES / "dependency-graph-streams-20261202-161236"
    proc = cli_main("explain", "--range", "dependency-graph/serial", "--what-if", "streams=4", "--what-if", "warm",
                   "--top", "0", str(run))
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "What if streams=4 + warm" in out and "9 chains from the window's child ranges" in out


def test_plans_join_with_a_plus_and_predict_the_real_side_stream_run_from_the_blocking_one() -> None:
    from tracer.explain import explain
    from tracer.parsers.demand import read_launches

    assert parse_plan(["pinned+side-stream"]) == parse_plan(["pinned", "side-stream"])
    blocking = EXAMPLES / "compute-copy-blocking-streams-20261202-161350"
    real = load_trace(EXAMPLES / "compute-copy-side-stream-streams-20261202-161322")
    real_ns = int(real.events["end_ns"].max() - real.events["start_ns"].min())
    t = load_trace(blocking)
    result = explain(t, launches=read_launches(blocking, t.meta.extra), fix_replays=False, what_if=["pinned+side-stream"])
    assert result.what_if is not None
    predicted = result.what_if["predicted_ns"]
    assert abs(predicted - real_ns) / real_ns < 0.15  # the bench's bar (bench/whatif.py): within 15%
    # a side stream alone leaves pageable copies synchronous, and says so
    alone = explain(t, fix_replays=False, what_if=["side-stream"]).what_if
    assert alone is not None and any("pageable copies stay synchronous" in n for n in alone["notes"])
