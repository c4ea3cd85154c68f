"""The what-if replay of a job carries collectives across ranks: a rank's part of a collective ends no earlier than
every other rank's replayed arrival (its start) plus the part's measured transfer (from the last measured arrival
to its end). On hand-made jobs (every figure known; the pair of tests/test_explain_xrank.py) and on the bundled
real jobs (HTA's NCCL pair, the gloo pair). Every expected time here is worked out from the traces' figures by hand,
not read back from the replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.job_runs import GLOO_RANKS, HTA_RANKS
from tests.test_explain_xrank import BASE_NS, _hand_job, _job, _launch, _x
from tracer.explain import build_graph
from tracer.explain.graph import Graph
from tracer.explain.replay import Plan, _Setup, _simulate, replay

US = 1_000
#: The hand-made pair (tests/test_explain_xrank.py, times in µs from the traces' base): both ranks launch a GEMM at
#: 2 (the call takes 2) that runs from 10; rank 0's takes 50, rank 1's 240. Each then launches an allreduce at 61
#: (record_param_comms 60–65 around the 61–63 call). Rank 0's allreduce kernel runs 65–302, rank 1's 252–300: rank 1
#: arrives last, at 252; the transfers (end − last arrival) are 302 − 252 = 50 (rank 0) and 300 − 252 = 48 (rank 1).
T0, T1 = 50, 48
#: What binds rank 1's allreduce kernel in the replay once its GEMM is shorter: its launch (the call's start at 61
#: + the kernel's lag behind it: 8, the typical launch lag of the pair: the GEMMs' 10 − 2 and 10 − 2, the allreduce's
#: 65 − 61, median 8), or its stream (the GEMM's end + the 2 µs gap measured on rank 1, the binding one there).
LAUNCH_READY, STREAM_GAP = 61 + 8, 2


def _kernel(graph: Graph, rank: int, prefix: str) -> int:
    n = graph.nodes
    hit = n[(n["rank"] == rank).to_numpy() & n["name"].astype(str).str.startswith(prefix).to_numpy()
            & n["kind"].astype(str).eq("kernel").to_numpy()]
    assert len(hit) == 1, hit
    return int(hit.index[0])


def _local(s: _Setup, node: int) -> int:
    return int(np.flatnonzero(s.nodes["node"].to_numpy() == node)[0])


def _run(s: _Setup) -> tuple[np.ndarray, np.ndarray, float]:
    """Replayed start and end of each node, absolute µs (the traces' base at 0), and the predicted span (µs)."""
    start, end = _simulate(s)
    t0 = (int(s.start.min()) - BASE_NS) / US
    return start / US + t0, end / US + t0, float(end.max() - start.min()) / US


def _setup(graph: Graph) -> _Setup:
    return _Setup(graph, graph.nodes.index.to_numpy(), {})


def test_the_unchanged_plan_replays_each_rank_s_allreduce_to_its_measured_end(tmp_path: Path) -> None:
    g = build_graph(_job(_hand_job(tmp_path)))
    r = replay(g)
    assert r.predicted_ns == r.measured_ns == (302 - 2) * US  # from the first launch at 2 to rank 0's end at 302
    ends = r.nodes.set_index("node")["end_ns"]
    t0 = 2 * US  # (the replay counts from the window's first start)
    assert ends[_kernel(g, 0, "nccl")] == pytest.approx((302 * US) - t0, abs=1)
    assert ends[_kernel(g, 1, "nccl")] == pytest.approx((300 * US) - t0, abs=1)
    # the pass took the collective edges, at the measured transfer (end − the last arrival)
    s = _setup(g)
    c = s.edges[(s.edges["type"] == "collective").to_numpy()]
    a0, a1 = _local(s, _kernel(g, 0, "nccl")), _local(s, _kernel(g, 1, "nccl"))
    assert sorted(zip(c["src"], c["dst"], c["overhead"])) == sorted([(a1, a0, T0 * US), (a0, a1, T1 * US)])
    assert (s.arrival[a0], s.arrival[a1]) == (BASE_NS + 252 * US, BASE_NS + 252 * US)
    assert any(n.startswith("collectives: 2 ranks' parts of collectives (1 of them waited)") for n in r.notes)


@pytest.mark.parametrize("gemm1_us", [100, 20])
def test_a_shorter_straggler_gemm_lets_the_other_rank_s_allreduce_end_earlier(tmp_path: Path, gemm1_us: int) -> None:
    # No plan shortens a kernel of one rank: the straggler's GEMM is made shorter in the pass's own setup.
    g = build_graph(_job(_hand_job(tmp_path)))
    s = _setup(g)
    gemm1 = _local(s, _kernel(g, 1, "slow_gemm"))
    a0, a1 = _local(s, _kernel(g, 0, "nccl")), _local(s, _kernel(g, 1, "nccl"))
    assert s.dur[gemm1] == 240 * US
    s.dur[gemm1] = gemm1_us * US
    start, end, span = _run(s)
    # rank 1 arrives when its stream or its launch lets it; rank 0 still arrives at 65 (its own work is unchanged)
    arrive1 = max(10 + gemm1_us + STREAM_GAP, LAUNCH_READY)
    assert start[a1] == pytest.approx(arrive1, abs=1e-3) and start[a0] == pytest.approx(65, abs=1e-3)
    # each part ends at the last arrival + its own transfer
    assert end[a0] == pytest.approx(max(65, arrive1) + T0, abs=1e-3)
    assert end[a1] == pytest.approx(max(65, arrive1) + T1, abs=1e-3)
    if gemm1_us == 100:
        # 140 µs less GEMM: rank 0's allreduce ends 140 µs sooner (302 → 162), and so does the job
        assert end[a0] == pytest.approx(302 - 140, abs=1e-3)
        assert span == pytest.approx(162 - 2, abs=1e-3)
    else:
        # 220 µs less GEMM, but rank 1 cannot arrive before its launch (69): rank 0's allreduce gains 183 µs, not 220
        assert end[a0] == pytest.approx(LAUNCH_READY + T0, abs=1e-3) == 119
        assert span == pytest.approx(119 - 2, abs=1e-3)


def test_a_later_rank_0_delays_rank_1_s_allreduce(tmp_path: Path) -> None:
    # 400 µs more launch overhead on rank 0's allreduce: it arrives at 61 + 4 + 400 = 465, after rank 1 (252)
    g = build_graph(_job(_hand_job(tmp_path)))
    s = _setup(g)
    a0, a1 = _local(s, _kernel(g, 0, "nccl")), _local(s, _kernel(g, 1, "nccl"))
    e = s.edges
    lk = np.flatnonzero((e["type"] == "launch").to_numpy() & (e["dst"] == a0).to_numpy())
    assert len(lk) == 1 and e["overhead"].iloc[lk[0]] == 4 * US  # (65 − 61: the measured lag behind the call's start)
    s.edges = e.assign(overhead=e["overhead"].to_numpy(float) + np.where(np.arange(len(e)) == lk[0], 400 * US, 0))
    start, end, span = _run(s)
    assert start[a0] == pytest.approx(465, abs=1e-3) and start[a1] == pytest.approx(252, abs=1e-3)
    # rank 1 now waits for rank 0: its allreduce ends at 465 + its transfer (48), 213 µs after its measured 300
    assert end[a1] == pytest.approx(465 + T1, abs=1e-3) == 513
    # rank 0 arrived last: it takes its own transfer from its own start
    assert end[a0] == pytest.approx(465 + T0, abs=1e-3)
    assert span == pytest.approx(465 + T0 - 2, abs=1e-3)


def test_a_plan_that_removes_the_straggler_s_allocation_ends_both_ranks_allreduce_sooner(tmp_path: Path) -> None:
    """The same through a real plan: rank 1 is late because of a 200 µs cudaMalloc (20–220) before it launches its
    allreduce (at 250, the kernel at 252). ``warm`` gives device allocations no time: rank 1's host reaches the
    launch 200 µs sooner."""
    from tests.test_explain_xrank import _allreduce, _write

    r0 = [*_launch("gemm", 2, 10, 50, 1), *_allreduce(1, 61, 65, 237, 2)]
    r1 = [*_launch("gemm", 2, 10, 50, 1), _x("cuda_runtime", "cudaMalloc", 20, 200, 10, 1),
          *_allreduce(1, 250, 252, 48, 2)]
    paths = [_write(tmp_path / "rank0.json", 0, r0), _write(tmp_path / "rank1.json", 1, r1)]
    g = build_graph(_job(paths))
    unchanged, warm = replay(g), replay(g, Plan(warm=True))
    assert unchanged.predicted_ns == unchanged.measured_ns == 300 * US
    a0, a1 = _kernel(g, 0, "nccl"), _kernel(g, 1, "nccl")
    ends = warm.nodes.set_index("node")["end_ns"] / US + 2  # absolute µs
    starts = warm.nodes.set_index("node")["start_ns"] / US + 2
    # rank 1's thread: the cudaMalloc (20) now takes no time, the 29 µs untraced gap to record_param_comms (249) and
    # the 1 µs to the call (250) are kept: the call at 50, the kernel 2 µs after it (its lag) at 52 — but its stream
    # holds it to the GEMM's end (60) + the typical stream gap (no binding stream edge in the pair: 1 µs)
    assert starts[a1] == pytest.approx(61, abs=1e-3)
    # rank 0 now arrives last (65): both parts take their transfers from there, rank 0's own start binding it
    assert ends[a0] == pytest.approx(65 + 50, abs=1e-3)  # 302 → 115: 187 µs sooner, not the 200 the plan saved
    assert ends[a1] == pytest.approx(65 + 48, abs=1e-3)  # 300 → 113
    assert warm.predicted_ns == pytest.approx((115 - 2) * US, abs=1)


def _rank_trace(path: Path, rank: int, world: int, gemm_us: int, ar_start: int, ar_end: int) -> Path:
    meta = {"Collective name": "allreduce", "Process Group Name": "0", "Seq": 1, "In msg nelems": 1024,
            "Out msg nelems": 1024, "dtype": "Float", "Group size": world}
    events: list[dict[str, Any]] = [
        *_launch(f"gemm{rank}", 2, 10, gemm_us, 1), _x("cpu_op", "record_param_comms", 60, 5, 10, 1, **meta),
        *_launch("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 61, ar_start, ar_end - ar_start, 2)]
    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS,
                                "distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": events}))
    return path


def test_three_ranks_the_binding_source_is_the_last_arrival(tmp_path: Path) -> None:
    # GEMMs of 50, 240 and 150 µs: the allreduce kernels arrive at 65, 252 and 162 (stream gap 2) and end at 302,
    # 300 and 301, so the transfers from the last arrival (252) are 50, 48 and 49
    spec = [(50, 65, 302), (240, 252, 300), (150, 162, 301)]
    g = build_graph(_job([_rank_trace(tmp_path / f"rank{r}.json", r, 3, *x) for r, x in enumerate(spec)]))
    assert int((g.edges["type"] == "collective").sum()) == 6  # every part from each other rank
    s = _setup(g)
    ar = [_local(s, _kernel(g, r, "nccl")) for r in range(3)]
    transfer = [302 - 252, 300 - 252, 301 - 252]
    assert [int(s.transfer[a]) for a in ar] == [t * US for t in transfer]
    start, end, _ = _run(s)
    assert [round(float(end[a]), 3) for a in ar] == [302, 300, 301]  # unchanged: as measured
    # rank 1's GEMM 140 µs shorter: it arrives at 10 + 100 + 2 = 112; the last arrival is rank 2's now (162)
    s = _setup(g)
    s.dur[_local(s, _kernel(g, 1, "gemm1"))] = 100 * US
    start, end, span = _run(s)
    assert [round(float(start[a]), 3) for a in ar] == [65, 112, 162]
    assert [round(float(end[a]), 3) for a in ar] == [162 + t for t in transfer]  # 212, 210, 211
    assert span == pytest.approx(162 + 50 - 2, abs=1e-3)
    # rank 2's GEMM 140 µs shorter instead: it arrives when its launch lets it (69, not 10 + 10 + 2), rank 1 still
    # arrives last, and nothing else moves
    s = _setup(g)
    s.dur[_local(s, _kernel(g, 2, "gemm2"))] = 10 * US
    start, end, _ = _run(s)
    assert round(float(start[ar[2]]), 3) == max(10 + 10 + STREAM_GAP, LAUNCH_READY) == 69
    assert [round(float(end[a]), 3) for a in ar] == [302, 300, 301]


def test_a_collective_edge_the_clocks_contradict_stays_out_of_the_replay(tmp_path: Path) -> None:
    # rank 1 400 µs behind (test_explain_xrank): its part (−148 to −100) ended before rank 0's started (65); only
    # rank 1 → rank 0 is an edge, and rank 0's part did not wait for rank 1 (it arrived at −148): no wait to recompute
    g = build_graph(_job(_hand_job(tmp_path, rank1_shift_us=-400)))
    s = _setup(g)
    c = s.edges[(s.edges["type"] == "collective").to_numpy()]
    a0, a1 = _local(s, _kernel(g, 0, "nccl")), _local(s, _kernel(g, 1, "nccl"))
    assert list(zip(c["src"], c["dst"])) == [(a1, a0)]
    assert (s.transfer[a0], s.transfer[a1]) == (237 * US, 48 * US)  # their whole measured times
    start, end, _ = _run(s)
    assert (round(float(end[a0]), 3), round(float(end[a1]), 3)) == (302, -100)


@pytest.mark.parametrize("ranks, span_ns", [(HTA_RANKS, 1_231_970_000), (GLOO_RANKS, 373_817_746)])
def test_the_bundled_jobs_unchanged_replay_is_the_measured_timeline(ranks: list[Path], span_ns: int) -> None:
    g = build_graph(_job(ranks))
    r = replay(g)
    assert r.measured_ns == span_ns and abs(r.predicted_ns - span_ns) <= 1
    # every rank's part of a collective ends where it ended (the wait recomputed from the other ranks' arrivals)
    c = g.edges[(g.edges["type"] == "collective").to_numpy()]
    parts = np.unique(c["dst"].to_numpy())
    n = r.nodes.set_index("node")
    t0 = int(g.nodes.loc[n.index, "start_ns"].min())
    assert np.abs(n.loc[parts, "end_ns"].to_numpy() - (g.nodes.loc[parts, "end_ns"].to_numpy() - t0)).max() < 1
