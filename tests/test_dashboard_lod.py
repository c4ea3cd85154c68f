"""Level-of-detail merging and the busy-fraction overview (dashboard/lod.py), on hand-made intervals."""

import numpy as np
import pytest

from tracer.dashboard.lod import busy_fraction, merge_blocks, sort_order
from tracer.dashboard.model import nesting_depth


def _merge(starts, ends, groups, t0, t1, ns_per_px, **kw):
    s, e, g = (np.asarray(a, dtype=np.int64) for a in (starts, ends, groups))
    o = sort_order(g, s)
    return merge_blocks(s[o], e[o], g[o], t0, t1, ns_per_px, **kw)


def test_sub_pixel_intervals_merge_into_one_block_with_count_and_busy_time():
    # ten 1 ns kernels 2 ns apart at 10 ns per pixel: one block
    starts = np.arange(10) * 3
    b = _merge(starts, starts + 1, np.zeros(10), 0, 1000, 10.0)
    assert len(b) == 1
    assert (b.start_ns[0], b.end_ns[0], b.count[0], b.busy_ns[0]) == (0, 28, 10, 10)


def test_gap_of_a_pixel_or_more_splits_blocks():
    b = _merge([0, 5, 30], [2, 7, 32], [0, 0, 0], 0, 1000, 10.0)
    assert b.count.tolist() == [2, 1]
    assert b.start_ns.tolist() == [0, 30]


def test_wide_intervals_stay_alone_even_back_to_back():
    """Zoomed in, consecutive kernels with no gap must stay separate bars (with their own details)."""
    b = _merge([0, 100, 200], [100, 200, 300], [0, 0, 0], 0, 300, 1.0)
    assert b.count.tolist() == [1, 1, 1]
    assert b.first.tolist() == [0, 1, 2]


def test_groups_never_merge_with_each_other():
    b = _merge([0, 1, 2, 3], [1, 2, 3, 4], [0, 1, 0, 1], 0, 100, 10.0)
    assert b.group.tolist() == [0, 1]
    assert b.count.tolist() == [2, 2]


def test_window_clips_and_excludes():
    b = _merge([0, 50, 200], [100, 60, 300], [0, 0, 0], 40, 150, 1.0)
    assert b.n_in_window == 2
    assert b.start_ns.tolist() == [40, 50]
    assert b.end_ns.tolist() == [100, 60]


def test_nested_intervals_count_busy_time_once():
    # an outer op [0, 10) with two children: at 100 ns/px all three are sub-pixel and merge
    b = _merge([0, 1, 5], [10, 4, 8], [0, 0, 0], 0, 10_000, 100.0)
    assert (b.count[0], b.busy_ns[0], b.end_ns[0]) == (3, 10, 10)


def test_small_interval_after_a_wide_one_gets_its_own_block_end():
    """Regression: the block end was the group's running maximum, so a small op nested in a wide one was
    drawn as long as its parent."""
    b = _merge([0, 10], [100, 11], [0, 0], 0, 1000, 1.0)
    assert b.end_ns.tolist() == [100, 11]


def test_empty_inputs_and_windows():
    assert len(_merge([], [], [], 0, 10, 1.0)) == 0
    assert len(_merge([0], [5], [0], 10, 20, 1.0)) == 0
    assert len(_merge([0], [5], [0], 5, 5, 1.0)) == 0


def test_million_intervals_merge_into_at_most_a_block_per_pixel_and_class():
    # Speed is bench/dashboard.py's job (a timed unit test flakes on a loaded machine); this checks the merge
    # keeps every interval and bounds what the browser receives, whatever the input size.
    rng = np.random.default_rng(0)
    n = 1_000_000
    g = rng.integers(0, 12, n)
    s = np.sort(rng.integers(0, 10**10, n))
    e = s + rng.integers(100, 10**5, n)
    o = sort_order(g, s)
    s, e, g = s[o], e[o], g[o]
    b = merge_blocks(s, e, g, 0, 10**10, 10**10 / 1500)
    assert b.count.sum() == n
    assert len(b) <= 12 * 1500


def test_busy_fraction_per_column():
    frac = busy_fraction(np.array([0, 50]), np.array([10, 100]), 0, 100, 10)
    assert frac.tolist() == [1, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    half = busy_fraction(np.array([5]), np.array([15]), 0, 20, 2)
    assert half.tolist() == pytest.approx([0.5, 0.5])
    assert busy_fraction(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 0, 10, 3).tolist() == [
        0,
        0,
        0,
    ]


def test_nesting_depth_of_ranges():
    #  [0 ........................ 100)
    #     [10 ..... 50)  [60 .. 90)
    #        [20 30)
    starts = np.array([0, 10, 20, 60])
    ends = np.array([100, 50, 30, 90])
    assert nesting_depth(starts, ends).tolist() == [0, 1, 2, 1]


def test_a_view_s_blocks_are_those_of_every_interval_of_its_rows():
    # TimelineView.blocks_in reads only the intervals near the window (two binary searches per group); its blocks
    # must be merge_blocks' of all the rows' intervals, on a real run and on nested, overlapping, instant ones
    from pathlib import Path

    from tracer.analysis.drawing import N_CLASSES, Row, TimelineView, prepare
    from tracer.parsers import load_trace
    from tracer.timeline import Timeline, TraceMeta, empty_events

    real = prepare(load_trace(Path(__file__).parent / "data" / "mlp_train_200.json.gz", cache=False))
    rng = np.random.default_rng(39)
    n = 5000
    s = rng.integers(0, 10**6, n)
    e = s + rng.choice([0, 1, 50, 3000, 200_000], n)  # instant markers, short, long (overlapping) intervals
    g = rng.integers(0, 4, n) * N_CLASSES + rng.integers(0, 2, n)
    # and a sparse group whose instant marker at 500_000 reaches furthest of its group so far
    s = np.append(s, [10, 500_000, 700_000])
    e = np.append(e, [20, 500_000, 800_000])
    g = np.append(g, [3 * N_CLASSES + 5] * 3)
    n += 3
    o = sort_order(g, s)
    rows = [Row(f"l{i}", "l", "s", "l", -1) for i in range(4)]
    made = TimelineView(Timeline(empty_events(), TraceMeta("kineto")), 0, int(e.max()), rows, [], s[o], e[o], g[o],
                        np.arange(n)[o])
    for view in (real, made):
        span = view.span_ns
        every = list(range(len(view.rows)))
        marks = [500_000] if view is made else []  # windows from an instant marker, to one
        for chosen in (every, every[::2], every[1:2]):
            cs, ce, cg, pos = view.select(chosen)
            for t0, t1 in [(0, span), (-span, 2 * span), (span // 3, span // 3 + span // 50), (span, span + 10),
                           *((m, m + span // 10) for m in marks), *((m - span // 10, m) for m in marks),
                           *((int(a), int(a) + int(w)) for a, w in zip(rng.integers(-1000, span, 20),
                                                                       rng.integers(1, span // 4, 20)))]:
                for px in ((t1 - t0) / 1400, (t1 - t0) / 50):
                    got, src = view.blocks_in(chosen, t0, t1, px)
                    want = merge_blocks(cs, ce, cg, t0, t1, px)
                    for f in ("group", "start_ns", "end_ns", "count", "busy_ns"):
                        assert np.array_equal(getattr(got, f), getattr(want, f)), (f, t0, t1)
                    assert got.n_in_window == want.n_in_window
                    assert np.array_equal(src, view.src[pos[want.first]])
