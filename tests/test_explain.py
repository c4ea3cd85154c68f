"""tracer.explain: the dependency graph's edges and the critical path, on real traces (HTA's, and the H200 runs).

HTA's figures were printed once by bench/hta_critpath.py (HolisticTraceAnalysis 0.5.0 in its own environment,
critical_path_analysis with the window HTA's own tests use); the tests do not need HTA.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import DATA, cli_main, run_cli
from tracer.explain import Window, build_graph, critical_path, window_of_range
from tracer.explain.graph import host_slices
from tracer.parsers import load_trace

EXTERNAL = "external/HTA_cuda_event_sync_multi_stream_event_sync_trace.json.gz"
ALEXNET = "external/HTA_critpath_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"
ALEXNET_FORWARD = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"


@pytest.fixture(scope="module")
def event_sync():
    return load_trace(DATA / EXTERNAL, cache=False)


@pytest.fixture(scope="module")
def alexnet():
    return load_trace(DATA / ALEXNET, cache=False)


def _by_corr(graph, correlation: int, kind: str) -> int:
    n = graph.nodes
    hit = n[(n["correlation"] == correlation).fillna(False).to_numpy() & (n["kind"] == kind).to_numpy()]
    return int(hit.index[-1])  # (a host row's last slice)


def test_kineto_parser_keeps_what_cuda_sync_rows_wait_on(event_sync):
    assert event_sync.meta.extra["cuda_sync"] == {
        "correlation": [24, 54, 1389, 1410, 1424],
        "name": ["Event Sync", "Event Sync", "Stream Wait Event", "Event Sync", "Context Sync"],
        "device": [0, 0, 0, 0, 0],
        "stream": [-1, -1, 24, -1, -1],
        "wait_stream": [-1, 20, 20, 28, -1],
        "wait_correlation": [-1, 32, 1385, 62, -1],
    }


def test_event_sync_fixture_edges(event_sync):
    g = build_graph(event_sync)
    assert g.has_sync_events and g.notes == ()
    e = g.edges
    counts = e["type"].value_counts().to_dict()
    assert (counts["launch"], counts["stream"], counts["event_wait"], counts["host_wait"]) == (6, 3, 1, 3)
    assert not e["inferred"].any()
    # cudaStreamWaitEvent (corr 1389) on stream 24 waits for the record (corr 1385) on stream 20: the last op
    # launched on stream 20 before it is the sgemm of corr 27; the first op launched on 24 after it is the
    # memset of corr 1411
    (w,) = e[e["type"] == "event_wait"].itertuples()
    assert (w.src, w.dst) == (_by_corr(g, 27, "kernel"), _by_corr(g, 1411, "memset"))
    assert w.lag_ns == g.nodes.at[w.dst, "start_ns"] - g.nodes.at[w.src, "end_ns"] > 0
    # cudaDeviceSynchronize (corr 1424) cannot return before the last op of each of the three streams ends
    hw = e[e["type"] == "host_wait"]
    sync = _by_corr(g, 1424, "runtime")
    assert set(hw["dst"]) == {sync} and set(hw["to"]) == {"end"}
    assert set(hw["src"]) == {_by_corr(g, c, "kernel") for c in (27, 57, 1413)}
    # CUPTI files "Event Sync" rows under cudaEventQuery, which does not wait: no edge from them
    queries = g.nodes.index[(g.nodes["name"] == "cudaEventQuery").to_numpy()]
    assert not hw["dst"].isin(queries).any()
    assert g.nodes.at[sync, "blocking"] and not g.nodes.loc[queries, "blocking"].any()


def test_every_edge_points_forward_in_time(alexnet):
    g = build_graph(alexnet)
    n, e = g.nodes, g.edges
    start, end = n["start_ns"].to_numpy(), n["end_ns"].to_numpy()
    s, d = e["src"].to_numpy(), e["dst"].to_numpy()
    to_start = (e["to"] == "start").to_numpy()
    assert (start[s][to_start] <= start[d][to_start]).all()
    assert (end[s][~to_start] <= end[d][~to_start]).all()
    assert (e["lag_ns"] >= 0).all()
    # each host thread's slices never overlap
    h = n[n["device"] < 0].sort_values(["pid", "tid", "start_ns"], kind="stable")
    for _, t in h.groupby(["pid", "tid"]):
        assert (t["start_ns"].to_numpy()[1:] >= t["end_ns"].to_numpy()[:-1]).all()


def test_host_slices_flatten_a_call_stack():
    # op [0,100) holds call A [10,20) and call B [30,100) (B ends with op); a second op [100,100) is empty
    host = pd.DataFrame({"start_ns": [0, 10, 30, 100], "end_ns": [100, 20, 100, 100], "rank": 0, "pid": 1,
                         "tid": 1}, index=[7, 8, 9, 10])
    sl = host_slices(host)
    assert list(map(tuple, sl[["row", "start_ns", "end_ns"]].to_numpy())) == [
        (7, 0, 10), (8, 10, 20), (7, 20, 30), (9, 30, 100), (10, 100, 100)]


def _assert_tiles(path):
    p = path.pieces
    assert int(p["dur_ns"].sum()) == path.length_ns
    assert (p["start_ns"].to_numpy()[1:] == p["end_ns"].to_numpy()[:-1]).all()
    assert p["start_ns"].iat[0] == path.start_ns and p["end_ns"].iat[-1] == path.end_ns


def test_critical_path_matches_hta_on_the_event_sync_trace(event_sync):
    path = critical_path(build_graph(event_sync))
    _assert_tiles(path)
    # HTA (bench/hta_critpath.py): 1178 µs, from the first aten::matmul to the end of the last sgemm on stream 24.
    # HTA gives the three cudaEventQuery calls zero weight (a call with a CUDA sync record is "blocking" to it);
    # they do not block, and tracer counts the 6 + 5 + 5 µs they took. Everything else is the same path.
    queries = int(path.pieces.loc[path.pieces["name"] == "cudaEventQuery", "dur_ns"].sum())
    assert queries == 16_000
    assert path.traced_ns() - queries == 1_178_000
    # HTA ends at the last sgemm's end; tracer goes on to the return of the cudaDeviceSynchronize waiting for it
    last, before = path.pieces.iloc[-1], path.pieces.iloc[-2]
    assert (last["name"], last["label"], last["edge"]) == ("cudaDeviceSynchronize", "waiting on a sync", "host_wait")
    assert before["name"] == "ampere_sgemm_128x64_nn" and last["dur_ns"] == 13_000


def test_critical_path_matches_hta_on_alexnet(alexnet):
    g = build_graph(alexnet)
    # HTA, the window of its own test (instance 1 of the forward annotation): 35,835 µs over 140 edges
    forward = critical_path(g, window_of_range(alexnet, ALEXNET_FORWARD, 1))
    _assert_tiles(forward)
    assert abs(forward.traced_ns() - 35_835_000) / 35_835_000 < 0.01
    assert abs(forward.length_ns - 36_025_000) / 36_025_000 < 0.01  # HTA's path: first node to last
    b = dict(zip(forward.breakdown()["label"], forward.breakdown()["ns"], strict=True))
    assert abs(b["gpu compute"] - 3_249_000) / 3_249_000 < 0.15  # HTA: gpu_compute_bound 3,249 µs (see docs)
    top = forward.top(4)
    assert list(top["name"]) == ["cudaMalloc"] * 4  # HTA: the same four cudaMallocs, 11.6, 8.6, 8.3, 3.1 ms
    assert list(top["ns"]) == [11_592_000, 8_551_000, 8_275_000, 3_107_000]
    # HTA, the whole trace: 43,355,656 µs
    whole = critical_path(g)
    _assert_tiles(whole)
    assert abs(whole.traced_ns() - 43_355_656_000) / 43_355_656_000 < 0.01


def test_side_stream_copies_are_off_the_path_and_same_stream_copies_on_it(data_dir):
    # H200, 50 matmuls 4000² each followed by a 64 MB device-to-host copy. Same stream: the copies queue behind
    # the matmuls, so all of them are on the path: `tracer summary --json` of the trace says compute_ns 130964108,
    # copy_ns 58004331.
    same = critical_path(build_graph(load_trace(data_dir / "copy_nonblocking_same_stream.json.gz", cache=False)))
    b = dict(zip(same.breakdown()["label"], same.breakdown()["ns"], strict=True))
    assert b["copy"] == 58_004_331 and b["gpu compute"] == 130_964_108
    # Side stream with events: the trace has no sync records, so each copy's wait for its matmul is inferred
    # from timing (50 edges); only the last copy, after the last matmul, is on the path.
    g = build_graph(load_trace(data_dir / "copy_side_stream.json.gz", cache=False))
    waits = g.edges[g.edges["type"] == "event_wait"]
    assert len(waits) == 50 and waits["inferred"].all()
    assert set(g.nodes.loc[waits["src"], "kind"]) == {"kernel"} and set(g.nodes.loc[waits["dst"], "kind"]) == {"memcpy"}
    side = critical_path(g)
    _assert_tiles(side)
    b = dict(zip(side.breakdown()["label"], side.breakdown()["ns"], strict=True))
    assert b["gpu compute"] == 130_922_833  # every matmul (`tracer summary`: compute_ns 130922833)
    assert b["copy"] < 58_000_000 / 40  # one copy of the 50
    assert any("enable_cuda_sync_events" in n for n in g.notes)


def test_a_window_cuts_the_path_at_its_edges(data_dir):
    t = load_trace(data_dir / "copy_side_stream.json.gz", cache=False)
    origin = int(t.events["start_ns"].min())
    path = critical_path(build_graph(t), Window(origin + 50_000_000, origin + 60_000_000, "50:60"))
    _assert_tiles(path)
    assert path.length_ns == 10_000_000
    assert set(path.pieces["label"]) <= {"gpu compute", "gpu gap"}


def test_range_window_errors(event_sync):
    with pytest.raises(Exception, match="no range or operator named 'nope'"):
        window_of_range(event_sync, "nope")
    with pytest.raises(Exception, match="has 3 instance"):
        window_of_range(event_sync, "aten::matmul", 5)


@pytest.mark.slow
def test_cli_explain_json(data_dir):
    proc = cli_main("explain", "--json", "--range", ALEXNET_FORWARD, "--instance", "1", str(data_dir / ALEXNET))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["length_ns"] == sum(b["ns"] for b in out["breakdown"])
    assert abs(out["traced_ns"] - 35_835_000) / 35_835_000 < 0.01
    assert out["top"][0]["name"] == "cudaMalloc" and out["by_name"][0]["name"] == "cudaMalloc"
    assert out["window"]["what"].startswith("range " + ALEXNET_FORWARD)


@pytest.mark.slow
def test_cli_explain_text(data_dir):
    proc = run_cli("explain", str(data_dir / "copy_nonblocking_same_stream.json.gz"), module=True)
    assert proc.returncode == 0, proc.stderr
    assert "Critical path of the whole trace: 192.557 ms" in proc.stdout  # the span, as the summary says
    assert "copy" in proc.stdout and "58.004" in proc.stdout
    assert "enable_cuda_sync_events" in proc.stderr  # what to record to have the waits read, not inferred


def _no_correlation_trace(tmp_path):
    ev = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
           "args": {"device": 0, "stream": 7}}]
    p = tmp_path / "nocorr.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": ev}).encode()))
    return p


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--window", "5:x"], "--window: 'x' is not a number of ms"),
        (["--window", "9:3"], "ends before it starts"),
        (["--window", "3:3"], "'3:3' is empty: it ends where it starts"),
        (["--top", "-1"], "--top: -1 is not a count; give 0 or more"),
        (["--instance", "2"], "--instance: picks one instance of --range: give --range NAME too"),
        (["--range", "nope"], "no range or operator named 'nope'"),
        (["--range", "a", "--window", "1:2"], "give --window or --range, not both"),
        (["--window", "1e9:"], "no host or GPU work ran in"),
    ],
)
def test_cli_explain_bad_options_one_line_exit_2(data_dir, args, phrase):
    proc = cli_main("explain", *args, str(data_dir / "copy_side_stream.json.gz"))
    assert proc.returncode == 2
    err = [line for line in proc.stderr.splitlines() if line.startswith("tracer: error:")]
    assert len(err) == 1 and phrase in err[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_cli_explain_says_when_the_launching_calls_are_missing(tmp_path):
    # GPU rows with correlation ids but no runtime call in the trace: the message said "no correlation ids"
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
           "args": {"device": 0, "stream": 7, "correlation": 5}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 20}]
    p = tmp_path / "gpu_only.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    proc = cli_main("explain", str(p))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "none of the CUDA runtime or driver calls that launched it" in proc.stderr


@pytest.mark.slow
def test_cli_explain_says_what_to_record_for_a_trace_without_correlation(tmp_path):
    proc = cli_main("explain", str(_no_correlation_trace(tmp_path)))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no correlation ids" in proc.stderr
    assert "record with torch.profiler" in proc.stderr


def test_record_turns_on_cuda_sync_events_where_torch_takes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._C._profiler as prof

    from tracer.record.profiler import _experimental_config

    seen: list[dict[str, bool]] = []

    class Config:
        def __init__(self, **kw: bool) -> None:
            seen.append(kw)

    monkeypatch.setattr(prof, "_ExperimentalConfig", Config)
    assert isinstance(_experimental_config(all_threads=True, cuda_sync=True), Config)
    assert seen == [{"profile_all_threads": True, "enable_cuda_sync_events": True}]
    assert _experimental_config(all_threads=False, cuda_sync=False) is None  # (CPU, one thread: nothing asked)

    class Old:  # a torch that knows profile_all_threads but not enable_cuda_sync_events
        def __init__(self, profile_all_threads: bool = False) -> None:
            seen.append({"profile_all_threads": profile_all_threads})

    seen.clear()
    monkeypatch.setattr(prof, "_ExperimentalConfig", Old)
    assert isinstance(_experimental_config(all_threads=True, cuda_sync=True), Old)
    assert seen == [{"profile_all_threads": True}]


@pytest.mark.slow
def test_explain_imports_no_dashboard():
    import subprocess

    code = "import sys, tracer.explain, tracer.cli.explain; print('dash' in sys.modules or 'plotly' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_graph_of_a_host_only_trace_has_thread_edges_only(data_dir):
    t = load_trace(data_dir / "mlp_train_200.json.gz", cache=False)
    ev = t.events
    host_only = type(t)(ev[ev["device"].to_numpy() < 0].copy(), t.meta)
    g = build_graph(host_only)
    assert set(g.edges["type"].astype(str)) == {"thread"}
    path = critical_path(g)
    _assert_tiles(path)
    assert np.isin(path.pieces["label"].astype(str), ["host work", "host gap", "launch overhead",
                                                       "waiting on a sync"]).all()


def test_nsys_synchronization_table_gives_the_cross_stream_edges(data_dir):
    # pair.sqlite (H200, nsys): 20 rounds of a matmul on stream 7, an event recorded after it, and a copy on
    # stream 17 that waits for the event (cudaStreamWaitEvent)
    t = load_trace(data_dir / "pair.sqlite.gz", cache=False)
    s = pd.DataFrame(t.meta.extra["cuda_sync"])
    assert s["name"].value_counts().to_dict() == {"Stream Wait Event": 21, "Event Sync": 20, "Context Sync": 1}
    waits = s[(s["name"] == "Stream Wait Event") & (s["wait_correlation"] >= 0)]
    assert len(waits) == 20 and set(waits["stream"]) == {17} and set(waits["wait_stream"]) == {7}
    records = t.events[t.events["correlation"].isin(waits["wait_correlation"]).to_numpy()
                       & (t.events["kind"] == "runtime").to_numpy()]
    assert set(records["name"].astype(str)) == {"cudaEventRecordWithFlags_v11010"} and len(records) == 20
    g = build_graph(t)
    e = g.edges[g.edges["type"] == "event_wait"]
    assert len(e) == 20 and not e["inferred"].any()
    n = g.nodes
    assert set(zip(n.loc[e["src"], "stream"], n.loc[e["dst"], "stream"], strict=True)) == {(7, 17)}
    assert set(n.loc[e["dst"], "kind"].astype(str)) == {"memcpy"}
    # the Context Sync record names no call in the export; cudaDeviceSynchronize's wait is inferred: the last
    # copy, which ended while it ran
    (hw,) = g.edges[g.edges["type"] == "host_wait"].itertuples()
    assert hw.inferred and n.at[hw.dst, "name"] == "cudaDeviceSynchronize_v3020"
    assert n.at[hw.src, "end_ns"] == n.loc[n["device"] >= 0, "end_ns"].max()


@pytest.mark.slow
def test_the_explain_function_is_what_the_command_prints_and_reads_no_file():
    # tracer.explain.explain() gives `tracer explain --json` byte for byte (the path, the findings with their fixes'
    # replays, the what-if), from the timeline and the kernels' launch figures it is given; importing tracer.explain
    # imports no reader of trace files (tracer.parsers.demand reads the figures)
    import subprocess

    import orjson

    from tracer.explain import explain
    from tracer.parsers.demand import read_launches

    code = "import sys, tracer.explain; print([m for m in sys.modules if m.startswith('tracer.parsers')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    run = Path(__file__).resolve().parent.parent / "tracer" / "examples" / "compute-copy-blocking-streams-20261202-161350"
    proc = cli_main("explain", "--json", "--what-if", "side-stream", str(run))
    assert proc.returncode == 0, proc.stderr
    t = load_trace(run, cache=False)
    e = explain(t, what_if=["side-stream"], launches=read_launches(run, t.meta.extra), name=str(run))
    assert e.gains and e.what_if is not None and e.job is None
    assert orjson.dumps(e.to_dict()) + b"\n" == proc.stdout.encode()
