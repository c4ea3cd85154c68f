import numpy as np

from tracer.analysis import intervals as iv


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_union_merges_overlapping_nested_and_touching():
    s, e = iv.union(arr(10, 0, 5, 30, 40, 50), arr(20, 6, 8, 40, 45, 50))
    # [0,8) from 0-6 and 5-8; [10,20); [30,45) from touching 30-40 and 40-45; 50-50 is empty
    assert s.tolist() == [0, 10, 30]
    assert e.tolist() == [8, 20, 45]
    assert iv.total((s, e)) == 8 + 10 + 15


def test_union_of_nothing():
    s, e = iv.union(arr(), arr())
    assert s.size == 0 and iv.total((s, e)) == 0


def test_intersect():
    a = iv.union(arr(0, 10, 30), arr(5, 20, 40))
    b = iv.union(arr(3, 15, 40), arr(12, 35, 50))
    s, e = iv.intersect(a, b)
    assert list(zip(s.tolist(), e.tolist())) == [(3, 5), (10, 12), (15, 20), (30, 35)]


def test_intersect_touching_is_empty():
    a = iv.union(arr(0), arr(10))
    b = iv.union(arr(10), arr(20))
    assert iv.total(iv.intersect(a, b)) == 0


def test_intersect_matches_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(50):
        sa = rng.integers(0, 1000, 20)
        a = iv.union(sa, sa + rng.integers(0, 80, 20))
        sb = rng.integers(0, 1000, 20)
        b = iv.union(sb, sb + rng.integers(0, 80, 20))
        cover_a = np.zeros(1200, bool)
        cover_b = np.zeros(1200, bool)
        for s, e in zip(*a):
            cover_a[s:e] = True
        for s, e in zip(*b):
            cover_b[s:e] = True
        assert iv.total(iv.intersect(a, b)) == int((cover_a & cover_b).sum())
        assert iv.total(a) == int(cover_a.sum())


def test_clip():
    s, e = iv.clip(iv.union(arr(0, 10), arr(5, 20)), 3, 12)
    assert list(zip(s.tolist(), e.tolist())) == [(3, 5), (10, 12)]


def test_grouped_union_total():
    groups = np.array([1, 1, 2, 2, 2])
    totals = iv.grouped_union_total(groups, arr(0, 5, 0, 100, 100), arr(10, 15, 10, 110, 105))
    assert totals.to_dict() == {1: 15, 2: 20}


def test_grouped_union_total_keeps_a_1_ns_gap_at_epoch_nanoseconds():
    # ~1.77e18 ns (a 2025 epoch stamp): float64 steps there are 256 ns; the gap between the two kernels of
    # lane_gap.json (100 ns) must not be counted as busy.
    base = 1_766_169_255_000_000_000
    s = np.array([base + 218_039_954, base + 218_046_294], dtype=np.int64)
    e = np.array([base + 218_046_193, base + 218_056_294], dtype=np.int64)
    totals = iv.grouped_union_total(np.array([7, 7]), s, e)
    assert totals.to_dict() == {7: int((e - s).sum())}
    one = iv.grouped_union_total(np.array([7, 7]), np.array([base, base + 11]), np.array([base + 10, base + 20]))
    assert one.to_dict() == {7: 19}


def test_grouped_union_total_matches_a_per_group_union():
    rng = np.random.default_rng(3)
    g = rng.integers(0, 5, 2000)
    s = rng.integers(0, 10**6, 2000) + 1_700_000_000_000_000_000
    e = s + rng.integers(0, 5000, 2000)
    totals = iv.grouped_union_total(g, s, e)
    for k in np.unique(g):
        m = g == k
        assert totals[k] == iv.total(iv.union(s[m], e[m]))
