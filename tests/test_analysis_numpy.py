"""The per-rank analyses computed with numpy on integer codes (threads, top kernels, ranges, idle) against plain
Python over the same rows of real traces: an independent computation, not recorded numbers."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tracer.analysis import intervals as iv
from tracer.analysis.builtin import _idle
from tracer.analysis.lanes import thread_rows
from tracer.analysis.ranges import launch_pairs, range_summary
from tracer.analysis.work import kernel_totals
from tracer.parsers import load_trace
from tracer.timeline import Timeline, align
from tracer.timeline.combine import concat
from tracer.timeline.keys import key_codes

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200-sizes"


def _union_length(pairs: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals, by a plain sweep (zero-length ones add nothing)."""
    total, reach = 0, None  # reach: the (start, end) of the run of intervals being merged
    for s, e in sorted(p for p in pairs if p[1] > p[0]):
        if reach is None or s > reach[1]:
            total += 0 if reach is None else reach[1] - reach[0]
            reach = (s, e)
        else:
            reach = (reach[0], max(reach[1], e))
    return total + (0 if reach is None else reach[1] - reach[0])


@pytest.fixture(scope="module", params=["one rank", "two ranks"])
def timeline(request) -> Timeline:
    one = load_trace(DATA / "mlp_train_200.json.gz", cache=False)
    if request.param == "one rank":
        return one
    other = load_trace(next(H200.glob("mlp-data-parallel-streams-*/trace.json.gz")), cache=False)
    return concat([align(one), align(other)], ranks=[0, 1])


def _rows(ev: pd.DataFrame) -> list[dict]:
    return ev.assign(kind=ev["kind"].astype(str), name=ev["name"].astype(str)).to_dict("records")


@pytest.mark.slow
def test_thread_rows_equal_a_plain_count_and_union_per_thread(timeline: Timeline) -> None:
    ops: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    calls: dict[tuple, int] = defaultdict(int)
    for r in _rows(timeline.events):
        key = (r["rank"], r["pid"], r["tid"])
        if r["device"] < 0 and r["kind"] == "cpu_op":
            ops[key].append((r["start_ns"], r["end_ns"]))
        elif r["device"] < 0 and r["kind"] in ("runtime", "driver"):
            calls[key] += 1
    expected = [[*k, len(ops[k]), _union_length(ops[k]), calls[k]] for k in sorted(ops)]
    out = thread_rows(timeline.events)
    assert out.values.tolist() == expected and len(expected) > 1
    assert (out.dtypes == "int64").all()


def test_kernel_totals_equal_plain_sums_per_name(timeline: Timeline) -> None:
    durs: dict[str, list[int]] = defaultdict(list)
    for r in _rows(timeline.events):
        if r["kind"] == "kernel" and r["device"] >= 0:
            durs[r["name"]].append(r["end_ns"] - r["start_ns"])
    out = kernel_totals(timeline.events)
    assert list(out.index) == sorted(durs)
    assert out.values.tolist() == [[len(d), sum(d), min(d), max(d)] for d in (durs[n] for n in sorted(durs))]


def test_kernel_totals_of_names_not_categorical_or_alike_as_text():
    ev = pd.DataFrame({"kind": pd.Categorical(["kernel"] * 4), "device": np.zeros(4, np.int16),
                       "start_ns": [0, 10, 20, 30], "end_ns": [5, 30, 21, 40]})
    for names in (pd.Series(["b", "a", "b", "a"], dtype=object), pd.Categorical([1, "1", "x", "1"])):
        out = kernel_totals(ev.assign(name=names))
        texts = [str(n) for n in names]
        assert list(out.index) == sorted(set(texts))
        assert out["total_ns"].tolist() == [sum(int(e - s) for s, e, t in zip(ev["start_ns"], ev["end_ns"], texts)
                                                if t == n) for n in sorted(set(texts))]


def test_range_summary_equals_plain_sums_over_the_instances(timeline: Timeline) -> None:
    ev = timeline.events
    pairs = launch_pairs(ev)
    assert len(pairs) and pairs["own_thread"].any() and not pairs["own_thread"].all()
    start, end = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    kind, name = ev["kind"].astype(str).to_numpy(), ev["name"].astype(str).to_numpy()
    work: dict[int, list[int]] = defaultdict(list)
    own: dict[int, list[int]] = defaultdict(list)
    for r, w, o in pairs.itertuples(index=False):
        work[r].append(w)
        if o:
            own[r].append(w)
    expected: dict[str, list[int]] = {}
    for r in np.flatnonzero(kind == "range"):
        row = expected.setdefault(name[r], [0] * 9)
        ws, os_ = work.get(int(r), []), own.get(int(r), [])
        figures = [1, int(end[r] - start[r]), _union_length([(start[w], end[w]) for w in ws]),
                   int(max(end[ws]) - min(start[ws])) if ws else 0,
                   *(sum(kind[w] == k for w in ws) for k in ("kernel", "memcpy", "memset")),
                   _union_length([(start[w], end[w]) for w in os_]), sum(kind[w] == "kernel" for w in os_)]
        expected[name[r]] = [a + int(b) for a, b in zip(row, figures)]
    out = range_summary(ev, pairs=pairs, own_thread=True)
    assert out.set_index("name").T.to_dict("list") == expected
    assert out["host_ns"].is_monotonic_decreasing
    # the same figures from a frame whose index is not 0..n-1 (a rank picked out of a job)
    tail = ev.iloc[1:]
    moved = range_summary(tail, pairs=launch_pairs(tail), own_thread=True)
    assert moved.equals(range_summary(tail.reset_index(drop=True), pairs=launch_pairs(tail.reset_index(drop=True)),
                                      own_thread=True))


def test_idle_equals_plain_gaps_per_gpu(timeline: Timeline) -> None:
    by_gpu: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for r in _rows(timeline.events):
        if r["kind"] in ("kernel", "memcpy", "memset") and r["device"] >= 0:
            by_gpu[(r["rank"], r["device"])].append((r["start_ns"], r["end_ns"]))
    expected = []
    for key in sorted(by_gpu):
        stretches: list[list[int]] = []
        for s, e in sorted(p for p in by_gpu[key] if p[1] > p[0]):
            if stretches and s <= stretches[-1][1]:
                stretches[-1][1] = max(stretches[-1][1], e)
            else:
                stretches.append([s, e])
        gaps = [b[0] - a[1] for a, b in zip(stretches, stretches[1:])]
        expected.append((*key, len(gaps), sum(gaps), max(gaps, default=0)))
    got = [(i.rank, i.device, i.gaps, i.idle_ns, i.longest_gap_ns) for i in _idle(timeline)]
    assert got == expected and len(got) >= 1


def test_key_codes_order_rows_as_their_keys():
    rng = np.random.default_rng(5)
    n = 3000
    rank = rng.integers(0, 3, n).astype(np.int16)
    pid = rng.choice([7, 2**40, 123456789012], n)
    tid = rng.choice([1, -5, 2**50, 99], n)
    code, bound = key_codes(rank, pid, tid)
    keys = sorted(set(zip(rank.tolist(), pid.tolist(), tid.tolist())))
    rank_of = {k: i for i, k in enumerate(keys)}
    order = [rank_of[k] for k in zip(rank.tolist(), pid.tolist(), tid.tolist())]
    assert bound <= n and code.max() < bound
    assert (np.argsort(code, kind="stable") == np.argsort(order, kind="stable")).all()
    rows = np.flatnonzero(rank == 1)
    sub, _ = key_codes(rank, pid, tid, rows=rows)
    assert (np.argsort(sub, kind="stable") == np.argsort(np.asarray(order)[rows], kind="stable")).all()


def test_grouped_cummax_equals_a_running_max_per_group():
    rng = np.random.default_rng(8)
    for width in (10**4, 2**62):  # the second: lifted values past int64, the pandas way
        codes = np.sort(rng.integers(0, 6, 500))
        starts = rng.integers(0, 10**6, 500) + 1_700_000_000_000_000_000
        ends = starts + rng.integers(1, 10**4, 500)
        ends[0] = starts[0] + width
        order = np.lexsort((starts, codes))
        codes, starts, ends = codes[order], starts[order], ends[order]
        expected = pd.Series(ends).groupby(codes).cummax().to_numpy()
        assert np.array_equal(iv.grouped_cummax(codes, starts, ends), expected)


def test_coded_union_totals_equal_a_union_per_code():
    rng = np.random.default_rng(9)
    codes = rng.integers(0, 7, 2000)
    s = rng.integers(0, 10**6, 2000) + 1_700_000_000_000_000_000
    e = s + rng.integers(0, 5000, 2000)
    totals = iv.coded_union_totals(codes, s, e, 9)
    assert totals.tolist() == [iv.total(iv.union(s[codes == k], e[codes == k])) for k in range(9)]


def test_the_summary_finds_the_gpu_rows_and_sets_once_per_frame(timeline: Timeline,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """overlap.shared_work: inside analyze / rank_results, gpu_work and all_device_sets run once per frame (not
    once per analysis that asks), a second frame gets its own, and outside nothing is kept (a frame changed
    between two calls is seen afresh); the figures are those computed without sharing."""
    from tracer.analysis import overlap
    from tracer.analysis.ranked import rank_results
    from tracer.analysis.summary import analyze

    calls: list[tuple[str, int]] = []
    for name in ("_gpu_work", "_all_device_sets"):
        original = getattr(overlap, name)
        def spy(ev: pd.DataFrame, f: Any = original, n: str = name) -> Any:
            calls.append((n, id(ev)))
            return f(ev)

        monkeypatch.setattr(overlap, name, spy)
    ev = timeline.events
    alone = overlap.device_overlap(ev), overlap.busy_sets(ev)
    assert [n for n, _ in calls].count("_all_device_sets") == 2  # (no sharing outside)
    calls.clear()
    with overlap.shared_work():
        shared = overlap.device_overlap(ev), overlap.busy_sets(ev)
        other = ev.copy()
        overlap.device_overlap(other)
    assert [n for n, _ in calls] == ["_all_device_sets", "_gpu_work"] * 2
    assert calls[0][1] == id(ev) and calls[2][1] == id(other)
    assert shared[0] == alone[0] and all(
        np.array_equal(a, b) for s, t in zip(shared[1], alone[1]) for a, b in zip(s, t))
    for run in (lambda: analyze(timeline).to_dict(), lambda: rank_results(timeline, 0)):
        calls.clear()
        run()
        assert sorted(n for n, _ in calls) == ["_all_device_sets", "_gpu_work"]
    changed = ev.copy()
    before = overlap.device_overlap(changed)
    changed["end_ns"] += 1_000  # (the same frame, changed: outside shared_work nothing stale is given)
    assert overlap.device_overlap(changed) != before
