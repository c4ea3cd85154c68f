"""Interval arithmetic on numpy arrays of integer nanoseconds.

An interval set is a pair ``(starts, ends)`` of int64 arrays. :func:`union` returns a *normalised* set:
sorted, disjoint, non-touching. Every other function takes and returns normalised sets. No Python loops
over intervals: merging is a running maximum, intersection a +1/−1 sweep.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

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
    """Per group key, the length of the union of that group's intervals (one vectorised pass)."""
    df = pd.DataFrame({"g": groups, "s": np.asarray(starts, np.int64), "e": np.asarray(ends, np.int64)})
    df = df[df["e"] > df["s"]].sort_values(["g", "s"], kind="stable")
    if df.empty:
        return pd.Series(dtype=np.int64)
    reach = df.groupby("g", sort=False)["e"].cummax()
    prev_reach = reach.groupby(df["g"], sort=False).shift(1)
    new_block = prev_reach.isna() | (df["s"] > prev_reach)
    block = new_block.cumsum()
    blocks = df.assign(block=block.to_numpy()).groupby(["g", "block"], sort=False).agg(s=("s", "min"), e=("e", "max"))
    return (blocks["e"] - blocks["s"]).groupby(level="g", sort=False).sum()
