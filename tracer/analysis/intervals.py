"""Interval arithmetic on numpy arrays of integer nanoseconds.

An interval set is a pair ``(starts, ends)`` of int64 arrays. :func:`union` returns a *normalised* set:
sorted, disjoint, non-touching. Every other function takes and returns normalised sets. No Python loops
over intervals: merging is a running maximum, intersection a +1/−1 sweep.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracer.errors import TraceFormatError

Intervals = tuple[np.ndarray, np.ndarray]

_EMPTY = np.empty(0, dtype=np.int64)


def empty() -> Intervals:
    return _EMPTY.copy(), _EMPTY.copy()


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping intervals into a sorted, disjoint set. Zero-length intervals vanish."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return empty()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def total(iv: Intervals) -> int:
    """Summed length of a normalised set, ns."""
    return int((iv[1] - iv[0]).sum())


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two normalised sets (a sweep: where both sets cover a point, coverage is 2)."""
    if a[0].size == 0 or b[0].size == 0:
        return empty()
    pos = np.concatenate([a[0], a[1], b[0], b[1]])
    delta = np.concatenate(
        [np.ones(a[0].size), -np.ones(a[1].size), np.ones(b[0].size), -np.ones(b[1].size)]
    ).astype(np.int8)
    # At equal positions, ends before starts: touching intervals do not intersect.
    order = np.lexsort((delta, pos))
    pos, delta = pos[order], delta[order]
    cover = np.cumsum(delta, dtype=np.int64)
    both = np.flatnonzero(cover[:-1] == 2)
    s, e = pos[both], pos[both + 1]
    keep = e > s
    return union(s[keep], e[keep])


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    """The part of a normalised set inside [lo, hi)."""
    s = np.clip(iv[0], lo, hi)
    e = np.clip(iv[1], lo, hi)
    keep = e > s
    return s[keep], e[keep]


def grouped_union_total(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pd.Series:
    """Per group key, the length of the union of that group's intervals (one vectorised pass).

    All comparisons stay in int64: a float64 step at ~1.7e18 ns (epoch nanoseconds) is 256 ns, so a shifted
    column holding NaN (float) would merge intervals up to 256 ns apart and over-count busy time.
    """
    g = np.asarray(groups)
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    g, s, e = g[keep], s[keep], e[keep]
    if s.size == 0:
        return pd.Series(dtype=np.int64)
    codes, keys = pd.factorize(g, sort=True)
    order = np.lexsort((s, codes))
    # (every code 0..len(keys)-1 holds a row: the totals come one per key, in order)
    _, totals = sorted_union_totals(codes[order], s[order], e[order])
    return pd.Series(totals, index=pd.Index(keys, name="g"), dtype=np.int64)


def coded_union_totals(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, size: int) -> np.ndarray:
    """:func:`grouped_union_total` for groups already numbered 0..size-1 (``codes``, any order): one int64 total
    per code, 0 for a code without intervals; no factorizing, no Series."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    c = np.asarray(codes)
    keep = e > s
    if not keep.all():  # (most rows have a length: no copies then)
        c, s, e = c[keep], s[keep], e[keep]
    order = np.lexsort((s, c))
    present, lengths = sorted_union_totals(c[order], s[order], e[order])
    totals = np.zeros(size, dtype=np.int64)
    totals[present] = lengths
    return totals


def sorted_union_totals(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`grouped_union_total` of rows already sorted by (code, start), each end after its start: the codes
    that hold rows (ascending) and each one's union length, int64. A caller that sorted once can pass any
    subset of the rows (a boolean mask keeps the order) without sorting again."""
    if codes.size == 0:
        return codes[:0], np.zeros(0, dtype=np.int64)
    # the furthest end reached so far within each group (int64 throughout)
    reach = grouped_cummax(codes, starts, ends)
    new = np.ones(codes.size, dtype=bool)
    new[1:] = (codes[1:] != codes[:-1]) | (starts[1:] > reach[:-1])
    first = np.flatnonzero(new)
    lengths = np.maximum.reduceat(ends, first) - starts[first]
    # every group opens with a new stretch and codes[first] is sorted: one reduceat per group, no np.add.at
    first_codes = codes[first]
    opens = np.flatnonzero(np.r_[True, first_codes[1:] != first_codes[:-1]])
    return first_codes[opens], np.add.reduceat(lengths, opens).astype(np.int64, copy=False)


def grouped_cummax(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The running maximum of ``ends`` within each group, for rows sorted by (code, start) with every end after its
    start (what :func:`sorted_union_totals` holds).

    One ``np.maximum.accumulate`` instead of a pandas groupby: each end is shifted to its group's first start and
    group k's values are lifted by k × (the widest group's span + 1), so no group's values reach the next's and
    the running maximum cannot cross a group boundary. Exact in int64; where the lifted values would not fit
    (2**62: spans and group counts no trace has), pandas' groupby does it.
    """
    opens = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    first = starts[opens]  # each group's smallest start
    width = int((np.maximum.reduceat(ends, opens) - first).max()) + 1
    if width * opens.size >= 2**62:
        return np.asarray(pd.Series(ends).groupby(codes, sort=False).cummax().to_numpy(), dtype=np.int64)
    # (one shift per row: few temporaries the size of the rows, which is what this costs)
    shift = np.repeat(np.arange(opens.size, dtype=np.int64) * width - first, np.diff(np.r_[opens, codes.size]))
    reach = ends + shift
    np.maximum.accumulate(reach, out=reach)
    reach -= shift
    return np.asarray(reach)


#: A total beyond this (2**62: 146 years of ns, 4.6 EB) is no figure a trace can mean. Sums are taken in int64,
#: which wraps silently past 2**63 (to a negative total, a negative GB/s); each is checked against a float64
#: sum of the same values, which cannot wrap, and refused before it is printed.
FIGURE_LIMIT = 2**62


def checked_sum(values: np.ndarray | pd.Series, what: str) -> int:
    """The sum of int64 ``values`` as a Python int, refused (:class:`~tracer.errors.TraceFormatError`, naming no
    file: the caller adds it) when it cannot be right.

    The magnitudes are summed, so that this bounds every partial sum too: a caller checks a column once, then
    sums it per group (per kernel name, per copy direction) in int64 without another check.
    """
    arr = np.asarray(values, dtype=np.int64)
    approx = float(np.abs(arr.astype(np.float64)).sum())
    if approx >= FIGURE_LIMIT:
        raise_unbelievable(what, approx)
    return int(arr.sum())


def raise_unbelievable(what: str, value: float) -> None:
    raise TraceFormatError(
        "", f"a total {what} of {value:.3g} is beyond what any trace can mean (2**62): the trace's times or "
        "sizes are corrupt, so no figure is printed"
    )
