"""The one lane layout (tracer/timeline/layout.py) shared by the dashboard and the exporters: which lane a row goes to,
the lanes' order and titles (rank named only in a job's timeline), and the two nesting questions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracer.parsers import load_trace
from tracer.timeline import LaneKey, Timeline, TraceMeta, build_events, concat
from tracer.timeline.layout import Lane, ThreadKey, lay_out, nesting_depth, nesting_order, sub_tracks, thread_name

DATA = Path(__file__).parent / "data"


def _timeline(**extra) -> Timeline:
    """Host work on two threads of process 10, GPU work on two streams of GPU 1 and one of GPU 0."""
    ev = build_events(
        {
            "start_ns": [0, 1, 2, 3, 4, 5, 6],
            "end_ns": [10, 9, 8, 7, 6, 7, 8],
            "kind": ["range", "cpu_op", "runtime", "kernel", "memcpy", "kernel", "cpu_op"],
            "name": ["step", "aten::mm", "cudaLaunchKernel", "k", "Memcpy DtoH", "k", "aten::add"],
            "device": [-1, -1, -1, 1, 1, 0, -1],
            "stream": [-1, -1, -1, 7, 21, 7, -1],
            "pid": [10, 10, 10, 10, 10, 10, 10],
            "tid": [11, 11, 11, 7, 21, 7, 3],
            **extra,
        }
    )
    names = {"10:11": "python3", "10:3": "thread 3 (worker)"}
    return Timeline(ev, TraceMeta(format="test", thread_names=names))


def test_gpu_lanes_first_then_threads_each_in_key_order() -> None:
    t = _timeline()
    layout = lay_out(t.events, t.meta)
    assert [ln.key for ln in layout.lanes] == [
        LaneKey(0, 0, 7), LaneKey(0, 1, 7), LaneKey(0, 1, 21), ThreadKey(0, 10, 3), ThreadKey(0, 10, 11)
    ]
    assert [ln.title for ln in layout.lanes] == [
        "GPU 0 · stream 7", "GPU 1 · stream 7", "GPU 1 · stream 21",
        "thread 3 (worker)", "thread 11 (python3)",
    ]
    assert not layout.multi_rank and all(ln.prefix == "" for ln in layout.lanes)
    ev = t.events
    for i, row in enumerate(ev.itertuples()):
        lane = layout.lanes[layout.lane_of_row[i]]
        if row.device >= 0:
            assert (lane.device, lane.stream, lane.pid, lane.tid) == (row.device, row.stream, -1, -1)
        else:
            assert (lane.device, lane.stream, lane.pid, lane.tid) == (-1, -1, row.pid, row.tid)
    assert layout.devices == [(0, 0), (0, 1)]


def test_thread_names_have_one_format() -> None:
    meta = TraceMeta(format="test", thread_names={"1:2": "thread 2 (python3)", "1:3": " python3 ", "1:4": ""})
    assert thread_name(meta, 1, 2) == "thread 2 (python3)"  # Kineto's own, kept
    assert thread_name(meta, 1, 3) == "thread 3 (python3)"  # nsys says "python3"
    assert thread_name(meta, 1, 4) == "thread 4"
    assert thread_name(meta, 1, 5) == "thread 5"


def test_a_job_names_each_lane_by_its_rank() -> None:
    t = _timeline()
    job = concat([t, t], ranks=[0, 1])
    layout = lay_out(job.events, job.meta)
    assert layout.multi_rank
    titles = [ln.title for ln in layout.lanes]
    assert titles == [
        "rank 0 · GPU 0 · stream 7", "rank 0 · GPU 1 · stream 7", "rank 0 · GPU 1 · stream 21",
        "rank 1 · GPU 0 · stream 7", "rank 1 · GPU 1 · stream 7", "rank 1 · GPU 1 · stream 21",
        "rank 0 · thread 3 (worker)", "rank 0 · thread 11 (python3)",
        "rank 1 · thread 3 (worker)", "rank 1 · thread 11 (python3)",
    ]
    assert [ln.name for ln in layout.lanes[:3]] == [ln.title for ln in lay_out(t.events, t.meta).lanes[:3]]
    ranks = job.events["rank"].to_numpy()
    for lane, rows in zip(layout.lanes, layout.members()):
        assert rows.size and (ranks[rows] == lane.rank).all()
    assert sum(len(m) for m in layout.members()) == len(job.events)


def test_one_rank_that_is_not_rank_0_reads_as_before() -> None:
    t = _timeline(rank=[3] * 7)
    layout = lay_out(t.events, t.meta)
    assert [ln.title for ln in layout.lanes] == [ln.title for ln in lay_out(_timeline().events, t.meta).lanes]
    assert {ln.rank for ln in layout.lanes} == {3}


def test_only_the_rows_asked_for_are_laid_out() -> None:
    t = _timeline()
    on_gpu = t.events["device"].to_numpy() >= 0
    layout = lay_out(t.events, t.meta, rows=on_gpu)
    assert [ln.title for ln in layout.lanes] == ["GPU 0 · stream 7", "GPU 1 · stream 7", "GPU 1 · stream 21"]
    assert (layout.lane_of_row[~on_gpu] == -1).all() and (layout.lane_of_row[on_gpu] >= 0).all()
    assert [m.tolist() for m in layout.members()] == [
        np.flatnonzero(layout.lane_of_row == i).tolist() for i in range(3)
    ]


def test_keep_drops_lanes_and_renumbers() -> None:
    t = _timeline()
    layout = lay_out(t.events, t.meta)
    kept = layout.keep(np.array([False, True, False, True, False]))
    assert [(ln.index, ln.title) for ln in kept.lanes] == [(0, "GPU 1 · stream 7"), (1, "thread 3 (worker)")]
    was = layout.lane_of_row
    assert kept.lane_of_row.tolist() == [{1: 0, 3: 1}.get(int(x), -1) for x in was]


def test_an_empty_timeline_has_no_lanes() -> None:
    t = _timeline()
    empty = Timeline(t.events.iloc[:0], t.meta)
    layout = lay_out(empty.events, empty.meta)
    assert layout.lanes == () and layout.lane_of_row.size == 0 and layout.members() == []
    assert lay_out(t.events, t.meta, rows=np.zeros(len(t.events), bool)).lanes == ()


def test_lane_keys_of_a_real_trace() -> None:
    t = load_trace(DATA / "copy_side_stream.json.gz", cache=False)
    layout = lay_out(t.events, t.meta)
    titles = [ln.title for ln in layout.lanes]
    assert titles[:2] == ["GPU 0 · stream 7", "GPU 0 · stream 21"]
    assert "thread 424 (python3)" in titles
    assert all(isinstance(ln, Lane) for ln in layout.lanes)


# ----- nesting


def test_nesting_order_puts_parents_first() -> None:
    starts = np.array([5, 0, 0, 2])
    ends = np.array([6, 3, 10, 3])
    assert nesting_order(starts, ends).tolist() == [2, 1, 3, 0]


def test_nesting_depth_counts_the_open_intervals() -> None:
    starts = np.array([0, 10, 20, 50, 50])
    ends = np.array([100, 40, 30, 60, 55])  # the last two start together: the longer is the parent
    assert nesting_depth(starts, ends).tolist() == [0, 1, 2, 1, 2]
    assert nesting_depth(np.zeros(0), np.zeros(0)).tolist() == []


@pytest.mark.parametrize(
    "spans, tracks",
    [
        ([(0, 10), (2, 5), (5, 8), (10, 20)], [0, 0, 0, 0]),  # nested and back to back: one track
        ([(0, 10), (5, 15)], [0, 1]),  # overlap without nesting: a second track
        # each to the first track it nests on
        ([(0, 10), (5, 15), (6, 7), (8, 12), (9, 20), (12, 14)], [0, 1, 0, 1, 2, 0]),
    ],
)
def test_sub_tracks_keep_every_track_nested(spans, tracks) -> None:
    s = np.array([a for a, _ in spans])
    e = np.array([b for _, b in spans])
    got = sub_tracks(s, e)
    assert got.tolist() == tracks
    for k in set(got.tolist()):
        stack: list[int] = []
        for i in nesting_order(s[got == k], e[got == k]):
            a, b = s[got == k][i], e[got == k][i]
            while stack and stack[-1] <= a:
                stack.pop()
            assert not stack or stack[-1] >= b
            stack.append(b)
