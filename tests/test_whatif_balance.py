"""The what-if plan ``balance`` (tracer.explain.replay._apply_balance): each rank's work between two collectives
evened out over the ranks. On hand-made jobs (tests/test_explain_xrank.py's pair, every figure known: the scaled
durations and the replayed ends are worked out here from the traces' figures, not read back from the replay), on
the bundled gloo job (its host parts tied to the training thread), and the refusal without collectives.

bench/balance_rerun.py times the plan against real re-runs of the ddp scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.job_runs import GLOO_RANKS
from tests.test_explain_xrank import BASE_NS, _allreduce, _hand_job, _job, _launch, _write, _x
from tests.test_replay_xrank import LAUNCH_READY, STREAM_GAP, T0, T1, _kernel, _local, _setup
from tracer.errors import TracerError
from tracer.explain import build_graph
from tracer.explain.replay import (
    GapIndex,
    Plan,
    _host_part_edges,
    _simulate,
    balance_segments,
    last_started_before,
    parse_plan,
    replay,
)
from tracer.explain.whatif import FIX_PLANS, NOT_PRICED

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
    # scaled: both GEMMs and their launch calls; not the allreduce kernels, their launch calls (communication)
    # nor record_param_comms
    assert "balance: 4 nodes in 1 collectives' segments rescaled (segment factors: rank 0 ×2.48; rank 1 ×0.63)" in note
    from tracer.explain.replay import _apply_balance

    before = s.dur.copy()
    _apply_balance(s, g)
    gemm0, gemm1 = _local(s, _kernel(g, 0, "fast_gemm")), _local(s, _kernel(g, 1, "slow_gemm"))
    assert s.dur[gemm0] == pytest.approx(50 * US * F0) and s.dur[gemm1] == pytest.approx(240 * US * F1)
    changed = np.flatnonzero(s.dur != before)
    names = s.nodes["name"].astype(str).to_numpy()
    assert sorted(names[changed].tolist()) == ["cudaLaunchKernel"] * 2 + ["fast_gemm", "slow_gemm"]
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
    # now takes 2 × 0.626, the 56 µs gap before record_param_comms, the 1 µs of it and the allreduce's own launch
    # call are kept: 60.252 + 4)
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
    added = s.edges[(s.edges["type"] == "part_launch").to_numpy()]
    assert (added["overhead"].to_numpy() >= 0).all()
    start, end = _simulate(s)
    t0 = int(s.start.min())
    assert np.abs(end - (s.end - t0)).max() < 1 and np.abs(start - (s.start - t0)).max() < 1
    # the job's shards were equal: the plan finds little to even out and gives no longer a job
    r = replay(g, Plan(balance=True))
    assert r.predicted_ns <= r.measured_ns
    assert any("host parts (gloo)" in n for n in r.notes)


def _pair(tmp_path: Path, r0: list[dict[str, Any]], r1: list[dict[str, Any]]) -> Any:
    return build_graph(_job([_write(tmp_path / "rank0.json", 0, r0), _write(tmp_path / "rank1.json", 1, r1)]))


def test_a_node_that_runs_past_a_short_segment_grows_only_by_its_time_inside_it(tmp_path: Path) -> None:
    # rank 0: allreduce 1 ends at 215, a 300 µs kernel on stream 9 is launched in the 2 µs before allreduce 2 (at
    # 217); rank 1's segment before allreduce 2 is 210 µs. Scaling the whole kernel by rank 0's factor (×53) made
    # it 15.9 ms and the job 13.5 ms instead of 0.5 ms: only its time inside the segment counts
    g = _pair(tmp_path,
              [*_launch("gemm", 2, 10, 100, 1), *_allreduce(1, 111, 115, 100, 2),
               *_launch("side", 215, 216, 300, 3, stream=9), *_allreduce(2, 214, 217, 100, 4)],
              [*_launch("gemm", 2, 10, 100, 1), *_allreduce(1, 111, 115, 100, 2),
               *_launch("g2", 216, 220, 200, 3), *_allreduce(2, 420, 425, 20, 4)])
    s = _setup(g)
    seg = balance_segments(s, g)
    k2 = seg[seg["seg_start"] > BASE_NS + 150 * US]
    length = dict(zip(k2["rank"], k2["length"] / US))
    assert length == {0: 2, 1: 210}  # rank 0's segment: 215–217, rank 1's: 215–425
    factor0 = (2 + 210) / 2 / 2
    from tracer.explain.replay import _apply_balance

    side = _local(s, _kernel(g, 0, "side"))
    solo = float(s.dur[side])  # (its solo time: it shared the GPU with allreduce 2)
    _apply_balance(s, g)
    # the kernel spends 1 µs (216–217) of its 300 inside rank 0's segment: that share of it × the factor
    assert s.dur[side] == pytest.approx(solo * (1 + 1 * (factor0 - 1) / 300))
    r = replay(g, Plan(balance=True))
    assert r.predicted_ns < 2 * r.measured_ns


def test_an_instance_where_a_rank_s_parts_overlap_is_left_as_it_is(tmp_path: Path) -> None:
    # rank 1 runs allreduce 2 on stream 8 while allreduce 1 still runs: its segment is empty, and an empty segment
    # in the mean shrank rank 0's own GEMM before allreduce 2 by half with no imbalance at all
    g = _pair(tmp_path,
              [*_launch("gemm", 2, 10, 100, 1), *_allreduce(1, 20, 112, 200, 2),
               *_launch("gemm2", 30, 312, 28, 3), *_allreduce(2, 40, 342, 18, 4)],
              [*_launch("gemm", 2, 10, 100, 1), *_allreduce(1, 20, 111, 201, 2),
               *_allreduce(2, 40, 150, 210, 4, stream=8)])
    s = _setup(g)
    seg = balance_segments(s, g)
    k2 = seg[seg["arrival"] > BASE_NS + 140 * US]
    assert (k2["factor"] == 1.0).all() and (k2["length"] == 0).any()
    from tracer.explain.replay import _apply_balance

    gemm2 = _local(s, _kernel(g, 0, "gemm2"))
    before = float(s.dur[gemm2])
    _apply_balance(s, g)
    assert s.dur[gemm2] == before
    assert any("1 collectives left as they are" in n for n in s.notes)


def test_a_slice_that_starts_with_its_rank_s_part_is_not_its_enqueuer(tmp_path: Path) -> None:
    # gloo-like pair: rank 1's "after" slice and its gloo:all_reduce range both start at 110 µs, the last arrival.
    # "after" was taken for the part's enqueuer (a slice starting at or before it) and also waited for the part:
    # a two-node cycle ("never became ready"). Strictly before, and never both
    import json

    def write(path: Path, rank: int, events: list[dict[str, Any]]) -> Path:
        path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": events,
                                    "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}))
        return path

    dims = {"Input Dims": [[1000]], "Input type": ["float"]}

    def rank_events(work_end: int, call: int, after: int, part: int, part_end: int) -> list[dict[str, Any]]:
        return [_x("cpu_op", "work", 1, work_end - 1, 10, 1), _x("cpu_op", "c10d::allreduce_", call, 5, 10, 1),
                _x("cpu_op", "after", after, 5, 10, 1),
                _x("user_annotation", "gloo:all_reduce", part, part_end - part, 10, 2, **dims)]

    g = build_graph(_job([write(tmp_path / "r0.json", 0, rank_events(9, 10, 125, 20, 121)),
                          write(tmp_path / "r1.json", 1, rank_events(99, 100, 110, 110, 120))]))
    r = replay(g, Plan(balance=True))
    assert r.predicted_ns > 0 and any(n.startswith("balance:") for n in r.notes)


def test_the_first_segments_start_when_every_rank_s_trace_has_begun(tmp_path: Path) -> None:
    # rank 1's trace begins 100 µs after rank 0's: rank 0's work before that is not compared with anything
    g = _pair(tmp_path, [*_launch("early", 2, 10, 50, 1), *_launch("gemm", 102, 110, 50, 3),
                         *_allreduce(1, 161, 165, 100, 2)],
              [*_launch("gemm", 102, 110, 100, 3), *_allreduce(1, 211, 215, 50, 2)])
    s = _setup(g)
    seg = balance_segments(s, g).set_index("rank")
    assert seg.loc[0, "seg_start"] == seg.loc[1, "seg_start"] == BASE_NS + 102 * US
    assert (seg.loc[0, "length"], seg.loc[1, "length"]) == (63 * US, 113 * US)
    from tracer.explain.replay import _apply_balance

    early = _local(s, _kernel(g, 0, "early"))
    before = float(s.dur[early])
    _apply_balance(s, g)
    assert s.dur[early] == before  # (10–60: before the segment)


def test_time_inside_weighted_segments_equals_a_count_ns_by_ns() -> None:
    from tracer.explain.replay import _in_segments

    rng = np.random.default_rng(7)
    for _ in range(200):
        cuts = np.sort(rng.choice(np.arange(0, 400), size=2 * int(rng.integers(1, 5)), replace=False))
        lo, hi = cuts[0::2], cuts[1::2]
        weight = rng.uniform(-0.9, 5, size=len(lo))
        start = rng.integers(-20, 420, size=30)
        end = start + rng.integers(0, 200, size=30)
        got = _in_segments(start, end, lo, hi, weight)
        w_at = np.zeros(440)  # weight of each ns from -20 to 420
        for a, b, w in zip(lo, hi, weight):
            w_at[a + 20 : b + 20] = w
        want = np.array([w_at[s + 20 : e + 20].sum() for s, e in zip(start, end)])
        assert np.allclose(got, want)


def test_last_started_before_matches_a_scan_of_every_node() -> None:
    """The enqueuer of each gloo host part (a binary search per part) is the node a full scan finds: same
    group, a candidate, started strictly before, the latest start, the lowest index among equal starts."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        start = rng.integers(0, 12, n).astype(np.int64)  # few values: many ties
        group = rng.integers(0, 3, n).astype(np.int64)
        candidates = rng.random(n) < 0.6
        points = np.unique(rng.integers(0, n, int(rng.integers(1, n + 1))))
        expected: dict[int, int] = {}
        for p in points.tolist():
            running = np.flatnonzero(candidates & (group == group[p]) & (start < start[p]))
            if len(running):
                expected[p] = int(running[np.argmax(start[running])])
        assert last_started_before(points, candidates, group, start) == expected


def test_gap_index_finds_the_gaps_a_scan_of_every_gap_finds() -> None:
    """The gaps over a collective's last arrival (per thread, a window of sorted gaps) are the ones a scan of
    every gap of the job finds: on one of the ranks asked for, begun no later and ended no sooner, ascending;
    negative gaps (nested slices) included in the input."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(0, 50))
        lo = rng.integers(0, 40, n).astype(np.int64)
        hi = lo + rng.integers(-5, 15, n)
        rank = rng.integers(0, 3, n).astype(np.int64)
        thread = np.array([f"{r}/{t}" for r, t in zip(rank.tolist(), rng.integers(0, 3, n).tolist())], dtype=object)
        index = GapIndex(lo, hi, rank, thread)
        for _ in range(5):
            moment = int(rng.integers(-2, 45))
            ranks = rng.integers(0, 3, int(rng.integers(1, 4)))
            expected = np.flatnonzero(np.isin(rank, ranks) & (lo <= moment) & (hi >= moment)).tolist()
            assert index.over(moment, ranks) == expected
