"""A job's dependency graph across ranks (tracer.explain.collective), the straggler finding, and the legacy
default stream's implicit synchronisation: on hand-made 2-rank traces (every figure known), on HTA's real NCCL
pair and on the 2-rank gloo job in tests/data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.conftest import cli_main, run_cli
from tests.job_runs import GLOO_RANKS, HTA_RANKS, make_job_run
from tracer.analysis.comm import collectives
from tracer.explain import build_graph, critical_path
from tracer.explain.critical import Walker
from tracer.explain.findings import findings
from tracer.job.clocks import fix_clocks
from tracer.job.load import load_job
from tracer.parsers import load_trace
from tracer.timeline import Timeline

BASE_NS = 1_700_000_000_000_000_000


def _x(cat: str, name: str, ts: int, dur: int, pid: Any, tid: Any, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _launch(name: str, call_ts: int, ts: int, dur: int, corr: int, stream: int = 7,
            call: str = "cudaLaunchKernel", **args: Any) -> list[dict[str, Any]]:
    return [_x("cuda_runtime", call, call_ts, 2, 10, 1, correlation=corr),
            _x("kernel", name, ts, dur, 0, stream, device=0, stream=stream, correlation=corr, **args)]


def _allreduce(seq: int, call_ts: int, ts: int, dur: int, corr: int, stream: int = 7) -> list[dict[str, Any]]:
    meta = {"Collective name": "allreduce", "Process Group Name": "0", "Seq": seq, "In msg nelems": 1024,
            "Out msg nelems": 1024, "dtype": "Float", "Group size": 2}
    return [_x("cpu_op", "record_param_comms", call_ts - 1, 5, 10, 1, **meta),
            *_launch("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", call_ts, ts, dur, corr, stream=stream)]


def _write(path: Path, rank: int, events: list[dict[str, Any]], shift_us: int = 0) -> Path:
    for e in events:
        e["ts"] += shift_us
    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS,
                                "distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}))
    return path


def _hand_job(tmp_path: Path, rank1_shift_us: int = 0) -> list[Path]:
    """Both ranks: a GEMM, then allreduce seq 1 on the same stream. Rank 0's GEMM takes 50 µs (10–60), its
    allreduce kernel starts at 65 and ends at 302; rank 1's GEMM takes 240 µs (10–250): it arrives at 252 (the
    straggler) and its allreduce ends at 300. Rank 0 waited 252 − 65 = 187 µs."""
    r0 = [*_launch("fast_gemm", 2, 10, 50, 1), *_allreduce(1, 61, 65, 237, 2)]
    r1 = [*_launch("slow_gemm", 2, 10, 240, 1), *_allreduce(1, 61, 252, 48, 2)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    return [_write(tmp_path / "rank0.json", 0, r0), _write(tmp_path / "rank1.json", 1, r1, rank1_shift_us)]


def _job(paths: list[Path]) -> Timeline:
    return load_job(paths, load=lambda p: load_trace(p, cache=False))


def _node(graph: Any, rank: int, name_start: str) -> int:
    n = graph.nodes
    hit = n[(n["rank"] == rank).to_numpy() & n["name"].astype(str).str.startswith(name_start).to_numpy()
            & n["kind"].astype(str).eq("kernel").to_numpy()]
    assert len(hit) == 1, hit
    return int(hit.index[0])


def test_hand_job_has_one_collective_edge_each_way_met_at_the_sources_arrival(tmp_path: Path) -> None:
    g = build_graph(_job(_hand_job(tmp_path)))
    a0, a1 = _node(g, 0, "ncclDevKernel"), _node(g, 1, "ncclDevKernel")
    c = g.edges[(g.edges["type"] == "collective").to_numpy()]
    assert sorted(zip(c["src"].tolist(), c["dst"].tolist())) == sorted([(a0, a1), (a1, a0)])
    assert set(c["to"].astype(str)) == {"end"} and not c["inferred"].any()  # matched by pg + seq: read, not inferred
    e = c.set_index("src")
    assert e.loc[a1, "ready_ns"] == BASE_NS + 252_000  # rank 1 arrived at 252 µs
    assert e.loc[a1, "lag_ns"] == 302_000 - 252_000  # rank 0's part ran 50 µs after it
    assert e.loc[a0, "ready_ns"] == BASE_NS + 65_000
    parts = g.collectives
    assert parts["rank"].tolist() == [0, 1] and parts["seq"].tolist() == [1, 1]
    assert parts["first"].tolist() == [a0, a1]


def test_hand_job_critical_path_crosses_to_the_straggler(tmp_path: Path) -> None:
    g = build_graph(_job(_hand_job(tmp_path)))
    path = critical_path(g)
    p = path.pieces.merge(g.nodes[["rank"]], left_on="node", right_index=True)
    assert path.end_ns == BASE_NS + 302_000  # rank 0's allreduce ends last
    assert set(p["rank"]) == {0, 1}  # the path crosses ranks
    # rank 0's allreduce is on the path only from the straggler's arrival: its 187 µs of waiting are not
    a0 = _node(g, 0, "ncclDevKernel")
    mine = p[p["node"] == a0]
    assert mine[["start_ns", "end_ns"]].values.tolist() == [[BASE_NS + 252_000, BASE_NS + 302_000]]
    assert mine["label"].astype(str).tolist() == ["communication"] and mine["edge"].tolist() == ["collective"]
    # ... then the straggler's GEMM, whole; rank 0's GEMM is not on the path
    slow = p[(p["name"] == "slow_gemm").to_numpy() & (p["edge"] == "").to_numpy()]
    assert slow["dur_ns"].sum() == 240_000 and (p["name"] != "fast_gemm").all()
    # the pieces tile the path
    assert int(path.pieces["dur_ns"].sum()) == path.length_ns
    assert (path.pieces["start_ns"].to_numpy()[1:] == path.pieces["end_ns"].to_numpy()[:-1]).all()


def test_hand_job_straggler_finding_names_rank_time_and_what_it_was_doing(tmp_path: Path) -> None:
    g = build_graph(_job(_hand_job(tmp_path)))
    f = findings(g)
    s = f[f["kind"] == "straggler"]
    assert len(s) == 1
    r = s.iloc[0]
    assert (r["rank"], r["cost_ns"]) == (1, 187_000)
    assert (r["start_ns"], r["end_ns"]) == (BASE_NS + 65_000, BASE_NS + 252_000)
    assert r["node"] == _node(g, 1, "ncclDevKernel")
    assert _node(g, 0, "ncclDevKernel") in r["nodes"] and _node(g, 1, "slow_gemm") in r["nodes"]
    assert "rank 1 arrived 187.0 µs after the first" in r["evidence"]
    assert "slow_gemm (gpu compute) 185.0 µs" in r["evidence"]  # (its part inside the 65–252 µs wait)
    assert r["path_ns"] == 187_000  # the straggler's GEMM and its 2 µs stream gap: on the path, the whole wait
    assert f.iloc[0]["kind"] == "straggler"  # ranked with the others: the costliest on the path


def test_a_small_skew_is_no_finding(tmp_path: Path) -> None:
    g = build_graph(_job(_hand_job(tmp_path)))
    assert (findings(g, min_gap_ns=200_000)["kind"] != "straggler").all()  # 187 µs < 200 µs


def test_a_clock_that_contradicts_the_collective_drops_its_edge_and_says_so(tmp_path: Path) -> None:
    # rank 1 is 400 µs behind: its allreduce (now −148 to −100 µs) ends before rank 0's starts (65)
    g = build_graph(_job(_hand_job(tmp_path, rank1_shift_us=-400)))
    c = g.edges[(g.edges["type"] == "collective").to_numpy()]
    assert len(c) == 1  # rank 1 → rank 0 is kept (it started before rank 0's part ended); the other is not
    assert any("1 of 2 cross-rank (collective) edges contradict the ranks' clocks" in n for n in g.notes)
    s = findings(g)
    assert (s["kind"] != "straggler").all()  # the only waiting rank's part ended before the other arrived


def test_the_clock_fix_moves_the_rank_that_is_behind_and_says_by_how_much(tmp_path: Path) -> None:
    skewed = _job(_hand_job(tmp_path, rank1_shift_us=-400))
    fixed = fix_clocks(skewed)
    assert fixed.fixes[0] == 0 and fixed.fixes[1] is not None and fixed.fixes[1] > 0  # rank 1 moved forward
    assert fixed.timeline.meta.extra["clock_fix_ns"] == {"1": fixed.fixes[1]}
    moved = fixed.timeline.events
    assert (moved["start_ns"] - skewed.events["start_ns"]).groupby(skewed.events["rank"]).unique().to_dict() == {
        0: [0], 1: [fixed.fixes[1]]}
    assert not any("contradict" in n for n in build_graph(fixed.timeline).notes)  # the collectives agree now


def test_a_job_whose_clocks_agree_is_left_as_it_is(tmp_path: Path) -> None:
    job = _job(_hand_job(tmp_path))
    fixed = fix_clocks(job)
    assert fixed.timeline is job and not any(fixed.fixes.values()) and "clock_fix_ns" not in job.meta.extra


def test_explain_of_a_job_folder_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command's own path, quickly (the slow test below runs it as a user does)."""
    from tracer.cli import main

    _hand_job(tmp_path / "job")
    assert main(["explain", str(tmp_path / "job"), "--json", "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {g["kind"]: g["cost_ns"] for g in doc["findings"]["groups"]}["straggler"] == 187_000


@pytest.mark.slow
def test_cli_explain_of_a_job_folder_and_clock_fix(tmp_path: Path) -> None:
    _hand_job(tmp_path / "job")
    out = run_cli("explain", str(tmp_path / "job"), "--json", "--no-cache")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    kinds = {g["kind"]: g for g in doc["findings"]["groups"]}
    assert kinds["straggler"]["cost_ns"] == 187_000
    assert doc["length_ns"] == 302_000 - 2_000  # from rank 0's (or 1's) first launch at 2 µs to 302 µs
    assert doc["job"]["ranks"] == [0, 1] and doc["job"]["collective_edges"] == 2 and doc["job"]["instances"] == 1
    assert "not corrected" in doc["job"]["clock"]
    text = cli_main("explain", str(tmp_path / "job" / "rank0.json"), str(tmp_path / "job" / "rank1.json"),
                   "--no-cache", "--top", "3")
    assert text.returncode == 0, text.stderr
    words = " ".join(text.stdout.split())  # (rich wraps lines at the terminal's width)
    assert "collective waited for a straggler rank" in words and "rank 1 GPU 0 stream 7" in words
    # a clock 400 µs behind: the edge is dropped (a note), and --clock-fix moves rank 1 back
    _hand_job(tmp_path / "skewed", rank1_shift_us=-400)
    skewed = cli_main("explain", str(tmp_path / "skewed"), "--json", "--no-cache")
    assert "contradict the ranks' clocks" in skewed.stderr
    fixed = cli_main("explain", str(tmp_path / "skewed"), "--json", "--no-cache", "--clock-fix")
    assert fixed.returncode == 0, fixed.stderr
    assert "rank 1: clock moved by" in fixed.stderr and "contradict" not in fixed.stderr
    assert json.loads(fixed.stdout)["job"]["clock"].startswith("moved by the collectives' fix (--clock-fix): rank 1 +")
    one = cli_main("explain", str(tmp_path / "job" / "rank0.json"), "--clock-fix")
    assert one.returncode == 2 and one.stderr.strip().count("\n") == 0 and "applies to a job" in one.stderr


def test_hta_nccl_pair_collective_edges_and_a_walk_that_crosses_ranks() -> None:
    job = _job(HTA_RANKS)
    g = build_graph(job)
    c = g.edges[(g.edges["type"] == "collective").to_numpy()]
    nodes = g.nodes
    src, dst = c["src"].to_numpy(), c["dst"].to_numpy()
    assert len(c) == 14  # 10 instances × 2 directions, 6 contradicted by the ranks' clocks (a note says so)
    assert any("6 of 20 cross-rank" in n for n in g.notes)
    assert (nodes["rank"].to_numpy()[src] != nodes["rank"].to_numpy()[dst]).all()
    assert (nodes["collective"].astype(str).to_numpy()[src] != "").all()
    assert (nodes["collective"].astype(str).to_numpy()[dst] != "").all()
    assert (c["ready_ns"].to_numpy() == nodes["start_ns"].to_numpy()[src]).all()
    assert c["inferred"].all()  # no sequence numbers in these traces: matched by order
    # an early rank's collective whose binding edge is the other rank's arrival: walked back, the path goes on
    # through the other rank's work
    binding = c.sort_values("ready_ns").drop_duplicates("dst", keep="last")
    early = binding[binding["ready_ns"].to_numpy() > nodes["start_ns"].to_numpy()[binding["dst"].to_numpy()]]
    assert len(early)
    w = Walker(g)
    for d, s in zip(early["dst"].tolist(), early["src"].tolist()):
        walked = w.walk(d, int(nodes.at[d, "end_ns"]), int(nodes.at[d, "start_ns"]))
        ranks = set(nodes["rank"].to_numpy()[walked.node].tolist())
        assert ranks == {int(nodes.at[d, "rank"]), int(nodes.at[s, "rank"])}


@pytest.mark.slow
def test_hta_nccl_pair_straggler_findings_match_the_collectives_table() -> None:
    job = _job(HTA_RANKS)
    g = build_graph(job)
    f = findings(g)
    s = f[f["kind"] == "straggler"]
    assert len(s) == 4
    table = {(c.start_ns, c.start_ns + c.skew_ns): c for c in collectives(job.events).rows}
    for r in s.itertuples():
        c = table[(r.start_ns, r.end_ns)]  # the same instance: first arrival to the last
        assert r.rank == c.straggler
        assert r.cost_ns == c.skew_ns  # two ranks: the one early rank waited the whole skew


def test_gloo_job_barriers_wait_for_rank_1_by_its_sleep() -> None:
    """record_gloo.py makes rank 1 sleep 2 ms before each barrier: each barrier's finding names rank 1, and its
    cost is the start skew of the k-th gloo:barrier range of the two ranks, computed here from the rows."""
    job = _job(GLOO_RANKS)
    g = build_graph(job)
    c = g.edges[(g.edges["type"] == "collective").to_numpy()]
    assert len(c) == 24  # 12 instances × 2 directions, on the gloo ranges (host nodes)
    assert set(g.nodes["name"].astype(str).to_numpy()[c["src"].to_numpy()]) <= {
        "gloo:all_reduce", "gloo:all_gather", "gloo:broadcast", "gloo:barrier"}
    ev = job.events
    bar = ev[(ev["name"] == "gloo:barrier").to_numpy()].sort_values("start_ns")
    starts = {r: grp["start_ns"].to_numpy() for r, grp in bar.groupby("rank")}
    skew = starts[1] - starts[0]
    assert (skew >= 2_000_000).all()  # rank 1 slept 2 ms each time
    f = findings(g)
    s = f[(f["kind"] == "straggler").to_numpy() & (f["name"] == "gloo:barrier").to_numpy()].sort_values("start_ns")
    assert s["rank"].tolist() == [1, 1, 1]
    assert s["cost_ns"].tolist() == skew.tolist()


@pytest.mark.slow
def test_explain_a_job_run_directory(tmp_path: Path) -> None:
    run = make_job_run(tmp_path / "run", GLOO_RANKS)
    out = cli_main("explain", str(run), "--json", "--top", "0")
    assert out.returncode == 0, out.stderr
    groups = {g["kind"]: g for g in json.loads(out.stdout)["findings"]["groups"]}
    assert groups["straggler"]["count"] == 12


# ------------------------------------------------------------------------------------------ the legacy stream


def _legacy_trace(tmp_path: Path, call: str = "cudaLaunchKernel") -> Timeline:
    """k1 on stream 13 (10–100 µs), k2 on stream 7 launched after it (starts 101), k3 on stream 13 launched
    after k2 (starts 151): what CUDA's legacy default stream does with a blocking stream."""
    ev = [*_launch("k1", 2, 10, 90, 1, stream=13, call=call), *_launch("k2", 5, 101, 49, 2, stream=7, call=call),
          *_launch("k3", 8, 151, 20, 3, stream=13, call=call)]
    p = tmp_path / f"legacy-{call}.json"
    p.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": ev}))
    return load_trace(p, cache=False)


def _with_flags(t: Timeline, flags: dict[int, str]) -> Timeline:
    gpu = t.events[t.events["kind"].astype(str).eq("kernel").to_numpy()]
    pid = int(gpu["pid"].iloc[0])
    t.meta.extra["stream_flags"] = {"pid": [pid] * len(flags), "stream": list(flags), "flag": list(flags.values())}
    return t


def _legacy_edges(g: Any) -> list[tuple[str, str]]:
    e = g.edges[(g.edges["type"] == "legacy_stream").to_numpy()]
    names = g.nodes["name"].astype(str).to_numpy()
    return sorted(zip(names[e["src"].to_numpy()], names[e["dst"].to_numpy()]))


def test_legacy_default_stream_waits_for_blocking_streams_and_they_for_it(tmp_path: Path) -> None:
    g = build_graph(_with_flags(_legacy_trace(tmp_path), {7: "null", 13: "blocking"}))
    assert _legacy_edges(g) == [("k1", "k2"), ("k2", "k3")]
    path = critical_path(g)
    assert path.pieces["name"].tolist().count("k2") >= 1  # k3 waited for k2 (legacy), not only for k1 (stream)
    waits = path.pieces[path.pieces["edge"] == "legacy_stream"]
    assert set(waits["label"].astype(str)) == {"waiting on another stream"} and waits["dur_ns"].sum() == 2_000


@pytest.mark.parametrize("flags, call", [
    ({7: "null", 13: "non-blocking"}, "cudaLaunchKernel"),  # PyTorch's own streams: no implicit sync
    ({7: "null", 13: "blocking"}, "cudaLaunchKernel_ptsz"),  # the per-thread default stream: none either
])
def test_no_legacy_edges_where_the_trace_does_not_show_a_legacy_stream_beside_a_blocking_one(
        tmp_path: Path, flags: dict[int, str], call: str) -> None:
    assert _legacy_edges(build_graph(_with_flags(_legacy_trace(tmp_path, call), flags))) == []
    assert _legacy_edges(build_graph(_legacy_trace(tmp_path, call))) == []  # Kineto says no stream's kind


def test_nsys_stream_kinds_are_read_and_one_stream_gives_no_legacy_edge(data_dir: Path, tmp_path: Path) -> None:
    import gzip

    db = tmp_path / "ex.sqlite"
    db.write_bytes(gzip.decompress((data_dir / "external" / "extrap_ex-gpu.s1000.sqlite.gz").read_bytes()))
    t = load_trace(db, cache=False)
    flags = pd.DataFrame(t.meta.extra["stream_flags"]).set_index("stream")["flag"]
    assert flags[7] == "null" and flags[6] == "blocking" and flags[8] == "non-blocking"
    g = build_graph(t)
    gpu = g.nodes[g.nodes["kind"].astype(str).isin(["kernel", "memcpy"]).to_numpy()]
    assert set(gpu["stream"]) == {7}  # all its work is on the NULL stream: nothing to wait for
    assert not np.any(g.edges["type"].astype(str).to_numpy() == "legacy_stream")


def test_a_jobs_ranks_keep_their_recorded_sync_edges(tmp_path: Path, data_dir: Path) -> None:
    """Each rank's cuda_sync table is kept in the job's meta per part: the job's graph reads every rank's, as
    one trace's graph reads its own (recorded, not inferred)."""
    import gzip

    src = data_dir / "external" / "HTA_cuda_event_sync_multi_stream_event_sync_trace.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    paths = []
    for rank in (0, 1):
        doc["distributedInfo"]["rank"] = rank
        paths.append(tmp_path / f"r{rank}.json")
        paths[-1].write_text(json.dumps(doc))

    def counts(g: Any) -> dict[tuple[str, bool], int]:
        return {k: int(v) for k, v in g.edges.groupby(["type", "inferred"], observed=True).size().items()}

    one, job = build_graph(load_trace(src, cache=False)), build_graph(_job(paths))
    assert job.has_sync_events and not job.notes
    assert counts(one)[("event_wait", False)] == 1 and counts(one)[("host_wait", False)] == 3
    assert counts(job) == {k: 2 * v for k, v in counts(one).items()}


def test_a_range_of_a_job_spans_that_instance_on_every_rank() -> None:
    job = _job(HTA_RANKS)
    from tracer.explain import window_of_range

    ev = job.events
    steps = ev[(ev["name"] == "ProfilerStep#552").to_numpy()]
    assert sorted(steps["rank"].tolist()) == [0, 1]
    w = window_of_range(job, "ProfilerStep", 1)  # the second step of each rank
    assert (w.start_ns, w.end_ns) == (int(steps["start_ns"].min()), int(steps["end_ns"].max()))
    assert w.what.endswith("instance 1 of 2 on ranks 0, 1") and w.issued
    path = critical_path(build_graph(job), w)
    assert w.start_ns is not None and path.start_ns >= w.start_ns and path.length_ns > 0


@pytest.mark.slow
def test_exposed_comm_findings_add_up_to_the_comm_analysis_exposed_comm_per_gpu():
    """Each NCCL kernel's part beside no compute is an ``exposed_comm`` finding; with no threshold, per GPU they
    add up to the ``comm`` analysis' exposed comm where the GPU's comm kernels do not overlap one another."""
    from tracer.analysis import intervals as iv
    from tracer.analysis.comm import device_comm

    job = _job(HTA_RANKS)
    g = build_graph(job)
    f = findings(g, min_gap_ns=0)
    ex = f[f["kind"] == "exposed_comm"]
    assert len(ex) > 0
    ev = job.events
    checked = 0
    for d in device_comm(ev):
        k = ev[(ev["rank"] == d.rank).to_numpy() & (ev["device"] == d.device).to_numpy()
               & (ev["kind"] == "kernel").to_numpy() & (ev["collective"] != "").to_numpy()]
        s, e = k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64)
        if iv.total(iv.union(s, e)) != int((e - s).sum()):
            continue  # comm kernels overlapping one another: per-kernel parts count the overlap twice
        mine = ex[(ex["rank"] == d.rank).to_numpy() & (ex["device"] == d.device).to_numpy()]
        # (parts of 1 µs or less are not findings)
        assert 0 <= d.exposed_comm_ns - int(mine["cost_ns"].sum()) <= 1_000 * len(k)
        checked += 1
    assert checked > 0
    assert "ran beside no compute" in ex["evidence"].iloc[0]


@pytest.mark.slow
def test_the_replay_gives_each_rank_s_gpu_its_own_resources_even_where_device_indexes_repeat() -> None:
    # Ranks on different hosts each have a GPU 0: their kernels share no SMs. HTA's pair has rank r on GPU r;
    # with rank 1's rows put on GPU 0 too, the replay must set up the same solo durations and no shared resource.
    from tracer.explain.replay import Plan, _Setup, replay

    job = load_job(HTA_RANKS, cache=False)
    ev = job.events.copy()
    ev.loc[(ev["rank"] == 1).to_numpy() & (ev["device"] == 1).to_numpy(), "device"] = 0
    setups, predicted = [], []
    for t in (job, Timeline(ev, job.meta)):
        g = build_graph(t)
        s = _Setup(g, g.nodes.index.to_numpy(), {})
        rank = s.nodes["rank"].to_numpy()
        used = [set(s.resource[(rank == r) & (s.resource >= 0)].tolist()) for r in (0, 1)]
        assert used[0] and used[1] and not used[0] & used[1]  # no resource shared across ranks
        setups.append(s)
        # a plan that re-chains streams keeps each rank's streams its own
        predicted.append([replay(g, plan).predicted_ns for plan in (Plan(side_stream=True), Plan(streams=2))])
    assert np.array_equal(setups[0].dur, setups[1].dur)
    assert predicted[0] == predicted[1]


def test_a_job_s_kernel_demand_is_read_per_rank(tmp_path: Path) -> None:
    # Each rank counts its own correlation ids, so two ranks' ids collide: demand is keyed by (rank, correlation)
    # and each kernel of the job gets the demand its own trace gives it.
    import gzip

    from tracer.explain.occupancy import demand_of, demand_of_nodes, job_demand
    from tracer.parsers.demand import read_job_launch_figures, read_launch_figures

    examples = Path(__file__).resolve().parent.parent / "tracer" / "examples"
    runs = ["multi-device-streams-20261202-161153", "compute-copy-side-stream-streams-20261202-161322"]
    files = []
    for rank, run in enumerate(runs):
        doc = json.loads(gzip.decompress((examples / run / "trace.json.gz").read_bytes()))
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
        files.append(tmp_path / f"rank{rank}.json")
        files[-1].write_text(json.dumps(doc))
    job = load_job(files, cache=False)
    demand = job_demand(read_job_launch_figures(job.meta.extra["ranks"]))
    per_rank = [demand_of(read_launch_figures(f))[0] for f in files]
    assert set(per_rank[0]) & set(per_rank[1])  # (the ids do collide)
    assert len(demand) == len(per_rank[0]) + len(per_rank[1])
    nodes = build_graph(job).nodes
    got = demand_of_nodes(nodes, demand)
    for rank, f in enumerate(files):
        alone = build_graph(load_trace(f, cache=False)).nodes
        want = demand_of_nodes(alone, per_rank[rank])
        mine = (nodes["rank"] == rank).to_numpy()
        assert np.array_equal(np.sort(got[mine][~np.isnan(got[mine])]), np.sort(want[~np.isnan(want)]))
        assert (~np.isnan(want)).sum() > 0


@pytest.mark.slow
def test_explain_takes_the_job_options_of_summary(tmp_path: Path) -> None:
    # explain read a job without --ranks / --skip-bad-ranks / --scheduler (yet obeyed $TRACER_DASK_SCHEDULER)
    import gzip
    import shutil

    folder = tmp_path / "job"
    folder.mkdir()
    for p in HTA_RANKS:
        shutil.copy(p, folder / p.name)
    one = cli_main("explain", "--json", "--no-cache", str(folder), "--ranks", "1", "--scheduler", "sync")
    alone = cli_main("explain", "--json", "--no-cache", str(folder / HTA_RANKS[1].name))
    assert one.returncode == alone.returncode == 0, one.stderr + alone.stderr
    keys = ("start_ns", "end_ns", "length_ns", "pieces")
    assert {k: json.loads(one.stdout)[k] for k in keys} == {k: json.loads(alone.stdout)[k] for k in keys}
    # a damaged rank: one line naming it, or left out and said
    bad = folder / "HTA_trace_filter_sampled_rank-2.json.gz"
    bad.write_bytes(gzip.compress(b'{"distributedInfo": {"rank": 2}, "traceEvents": [')[:-8])
    failed = cli_main("explain", "--no-cache", str(folder))
    assert failed.returncode == 2 and failed.stderr.startswith(f"tracer: error: {bad}: ")
    skipped = cli_main("explain", "--json", "--no-cache", "--skip-bad-ranks", str(folder))
    assert skipped.returncode == 0, skipped.stderr
    assert f"tracer: warning: {bad}: " in skipped.stderr and "(--skip-bad-ranks)" in skipped.stderr
    # on one trace they mean nothing: one line
    plain = cli_main("explain", str(HTA_RANKS[0]), "--ranks", "0")
    assert plain.returncode == 2
    assert plain.stderr == ("tracer: error: --ranks: applies to a job: give its rank traces, a folder of them or "
                            "its run directory\n")
