"""The what-if plan ``balance`` (tracer.explain.replay._apply_balance): each rank's work between two collectives
evened out over the ranks. On hand-made jobs (tests/test_explain_xrank.py's pair, every figure known: the scaled
durations and the replayed ends are worked out here from the traces' figures, not read back from the replay), on
the bundled gloo job (its host parts tied to the training thread), and the refusal without collectives.

bench/balance_rerun.py times the plan against real re-runs of the ddp scenario."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.job_runs import GLOO_RANKS
from tests.test_explain_xrank import BASE_NS, _allreduce, _hand_job, _job, _launch, _write
from tests.test_replay_xrank import LAUNCH_READY, STREAM_GAP, T0, T1, _kernel, _local, _setup
from tracer.cli._whatif import FIX_PLANS, NOT_PRICED
from tracer.errors import TracerError
from tracer.explain import build_graph
from tracer.explain.replay import Plan, _host_part_edges, _simulate, balance_segments, parse_plan, replay

US = 1_000
#: The hand-made pair: each rank's segment before the allreduce runs from its first start (the GEMM's launch call
#: at 2) to its arrival: rank 0 at 65 (63 µs), rank 1 at 252 (250 µs); their mean is 156.5 µs.
L0, L1 = 65 - 2, 252 - 2
MEAN = (L0 + L1) / 2
F0, F1 = MEAN / L0, MEAN / L1  # rank 0's work × 2.484, rank 1's × 0.626


def test_the_plan_is_parsed_described_and_prices_the_straggler() -> None:
    assert parse_plan(["balance"]) == Plan(balance=True) and Plan(balance=True).describe() == "balance"
    assert not Plan(balance=True).unchanged
    with pytest.raises(TracerError, match="balance"):
        parse_plan(["balance=2"])
    assert FIX_PLANS["straggler"] == ["balance"] and "straggler" not in NOT_PRICED


def test_the_pair_s_segments_and_scaled_durations(tmp_path: Path) -> None:
    g = build_graph(_job(_hand_job(tmp_path)))
    s = _setup(g)
    seg = balance_segments(s, g).set_index("rank")
    assert seg.loc[0, "seg_start"] == seg.loc[1, "seg_start"] == BASE_NS + 2 * US
    assert (seg.loc[0, "arrival"], seg.loc[1, "arrival"]) == (BASE_NS + 65 * US, BASE_NS + 252 * US)
    assert (seg.loc[0, "length"], seg.loc[1, "length"]) == (L0 * US, L1 * US)
    assert seg.loc[0, "factor"] == pytest.approx(F0) and seg.loc[1, "factor"] == pytest.approx(F1)
    r = replay(g, Plan(balance=True))
    note = next(n for n in r.notes if n.startswith("balance:"))
    # scaled: both GEMMs and both ranks' two launch calls; not the allreduce kernels nor record_param_comms
    assert "6 nodes in 1 collectives' segments scaled ×0.63 to ×2.48 (rank 0 ×2.48; rank 1 ×0.63)" in note
    from tracer.explain.replay import _apply_balance

    before = s.dur.copy()
    _apply_balance(s, g)
    gemm0, gemm1 = _local(s, _kernel(g, 0, "fast_gemm")), _local(s, _kernel(g, 1, "slow_gemm"))
    assert s.dur[gemm0] == pytest.approx(50 * US * F0) and s.dur[gemm1] == pytest.approx(240 * US * F1)
    changed = np.flatnonzero(s.dur != before)
    names = s.nodes["name"].astype(str).to_numpy()
    assert sorted(names[changed].tolist()) == ["cudaLaunchKernel"] * 4 + ["fast_gemm", "slow_gemm"]
    calls = changed[names[changed] == "cudaLaunchKernel"]
    rank = s.nodes["rank"].to_numpy()
    assert np.allclose(s.own[calls], 2 * US * np.where(rank[calls] == 0, F0, F1))


def test_the_pair_s_predicted_ends(tmp_path: Path) -> None:
    g = build_graph(_job(_hand_job(tmp_path)))
    r = replay(g, Plan(balance=True))
    start = r.nodes.set_index("node")["start_ns"] / US + 2  # absolute µs (the replay counts from the first start, 2)
    end = r.nodes.set_index("node")["end_ns"] / US + 2
    a0, a1 = _kernel(g, 0, "nccl"), _kernel(g, 1, "nccl")
    # rank 1: its GEMM still starts at 10 (its launch call still starts at 2), takes 240 × 0.626 = 150.24 µs, and
    # the allreduce follows on its stream 2 µs later (its launch allows it from 61 + 8: the host thread's call at 2
    # now takes 2 × 0.626, the 56 µs gap before record_param_comms and the 1 µs of it are kept: 60.252 + 4)
    arrive1 = 10 + 240 * F1 + STREAM_GAP
    host1 = 2 + 2 * F1 + 56 + 1
    assert arrive1 > host1 + 4 and LAUNCH_READY < arrive1
    assert start[a1] == pytest.approx(arrive1, abs=1e-3)
    # rank 0: its GEMM takes 50 × 2.484 = 124.2 µs (10–134.2); its allreduce's stream edge keeps the typical 2 µs
    arrive0 = 10 + 50 * F0 + STREAM_GAP
    assert start[a0] == pytest.approx(arrive0, abs=1e-3)
    # rank 1 still arrives last (162.24, not 252): both parts end at that arrival + their measured transfers
    assert end[a0] == pytest.approx(arrive1 + T0, abs=1e-3) and end[a1] == pytest.approx(arrive1 + T1, abs=1e-3)
    assert r.predicted_ns == pytest.approx((arrive1 + T0 - 2) * US, abs=1)  # 210.24 µs, measured 300
    assert r.measured_ns == 300 * US


def test_two_collectives_each_segment_from_the_previous_part_s_end(tmp_path: Path) -> None:
    # after the pair's allreduce, a second GEMM (rank 0 20 µs, 320–340; rank 1 100 µs, 320–420) and allreduce seq 2
    # (rank 0 arrives at 355, rank 1 at 430, the last one; both end at 452 and 450)
    r0 = [*_launch("fast_gemm", 2, 10, 50, 1), *_allreduce(1, 61, 65, 237, 2),
          *_launch("gemm_b", 310, 320, 20, 3), *_allreduce(2, 351, 355, 97, 4)]
    r1 = [*_launch("slow_gemm", 2, 10, 240, 1), *_allreduce(1, 61, 252, 48, 2),
          *_launch("gemm_b", 310, 320, 100, 3), *_allreduce(2, 426, 430, 20, 4)]
    g = build_graph(_job([_write(tmp_path / "rank0.json", 0, r0), _write(tmp_path / "rank1.json", 1, r1)]))
    s = _setup(g)
    seg = balance_segments(s, g)
    by = {(int(k), int(r)): (int(a), int(b)) for k, r, a, b in
          zip(seg["key"], seg["rank"], seg["seg_start"] - BASE_NS, seg["arrival"] - BASE_NS)}
    k1, k2 = sorted({k for k, _ in by})
    # the second segment starts where the rank's part of the first ended: rank 0 at 302, rank 1 at 300
    assert by == {(k1, 0): (2 * US, 65 * US), (k1, 1): (2 * US, 252 * US),
                  (k2, 0): (302 * US, 355 * US), (k2, 1): (300 * US, 430 * US)}
    m2 = ((355 - 302) + (430 - 300)) / 2  # 91.5
    from tracer.explain.replay import _apply_balance

    _apply_balance(s, g)
    gb0 = _local(s, int(g.nodes.index[(g.nodes["name"] == "gemm_b").to_numpy() & (g.nodes["rank"] == 0).to_numpy()
                                      & (g.nodes["kind"].astype(str) == "kernel").to_numpy()][0]))
    gb1 = _local(s, int(g.nodes.index[(g.nodes["name"] == "gemm_b").to_numpy() & (g.nodes["rank"] == 1).to_numpy()
                                      & (g.nodes["kind"].astype(str) == "kernel").to_numpy()][0]))
    assert s.dur[gb0] == pytest.approx(20 * US * m2 / 53) and s.dur[gb1] == pytest.approx(100 * US * m2 / 130)
    assert s.dur[_local(s, _kernel(g, 0, "fast_gemm"))] == pytest.approx(50 * US * F0)


def test_one_rank_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _hand_job(tmp_path)[0]
    g = build_graph(_job([path]))
    with pytest.raises(TracerError) as exc:
        replay(g, Plan(balance=True))
    assert exc.value.problem.startswith("balance: the window has no collective that two ranks or more ran")
    assert "\n" not in exc.value.problem


def test_gloo_host_parts_follow_their_training_thread_and_replay_unchanged_as_measured() -> None:
    # the bundled gloo job: its parts are gloo:all_reduce ranges on worker threads, tied to nothing on the training
    # thread in the graph. balance's enqueue and wait edges (at the measured lags) leave the replay as measured
    g = build_graph(_job(GLOO_RANKS))
    s = _setup(g)
    seg = balance_segments(s, g)
    n_enq, n_wait = _host_part_edges(s, seg)
    assert n_enq == len(seg) and n_wait > 0
    added = s.edges[s.edges["type"].isin(["part_launch", "part_wait"]).to_numpy()]
    assert (added["overhead"].to_numpy() >= 0).all()
    start, end = _simulate(s)
    t0 = int(s.start.min())
    assert np.abs(end - (s.end - t0)).max() < 1 and np.abs(start - (s.start - t0)).max() < 1
    # the job's shards were equal: the plan finds little to even out and gives no longer a job
    r = replay(g, Plan(balance=True))
    assert r.predicted_ns <= r.measured_ns
    assert any("host parts (gloo)" in n for n in r.notes)
