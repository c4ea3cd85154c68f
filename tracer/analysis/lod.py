"""Level of detail: what a time window of a big trace looks like at a given pixel width, computed on the server.

Two pure, vectorised functions, no Plotly:

- :func:`merge_blocks` turns the intervals of many rows into *blocks* for one window: intervals narrower
  than :data:`BIG_PX` pixels that lie less than ``gap_px`` apart merge into one busy block (with a count and
  the busy time inside it); wider intervals stay alone, so once zoomed in every interval is its own block
  and keeps its details. A million intervals become at most a few thousand blocks per row.
- :func:`busy_fraction` bins each row's busy time into pixel columns: the honest lanes × pixels
  utilisation overview that the minimap draws.

Input arrays are sorted by ``(group, start)`` once per run (see :func:`sort_order`); a query is then a
boolean mask, a grouped running maximum and a few ``reduceat`` calls over the rows in the window, with no
Python loop over intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Intervals at least this many pixels wide are never merged with their neighbours.
BIG_PX = 3.0


@dataclass(frozen=True)
class Blocks:
    """Merged blocks of one window, sorted by (group, start). All arrays have one entry per block."""

    group: np.ndarray  # int64: the group (row × class) the block belongs to
    start_ns: np.ndarray  # int64, clipped to the window
    end_ns: np.ndarray  # int64, clipped to the window
    count: np.ndarray  # int64: intervals merged into the block
    busy_ns: np.ndarray  # int64: union of those intervals (inside the window)
    first: np.ndarray  # int64: position (in the input arrays) of the block's first interval
    n_in_window: int  # intervals that touch the window

    def __len__(self) -> int:
        return int(self.group.size)


def sort_order(groups: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The permutation that sorts intervals by (group, start): what :func:`merge_blocks` expects."""
    return np.lexsort((np.asarray(starts), np.asarray(groups)))


def _in_window(starts: np.ndarray, ends: np.ndarray, groups: np.ndarray, t0: int, t1: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The intervals touching ``[t0, t1)`` for a merge: their positions, starts and ends clipped to the window,
    groups, and which is first of its group; None where there are none."""
    s_all = np.asarray(starts, dtype=np.int64)
    e_all = np.asarray(ends, dtype=np.int64)
    if t1 <= t0 or s_all.size == 0:
        return None
    pos = _touching(s_all, e_all, t0, t1)
    if pos.size == 0:
        return None
    g = np.asarray(groups, dtype=np.int64)[pos]
    first_in_group = np.empty(g.size, dtype=bool)
    first_in_group[0] = True
    first_in_group[1:] = g[1:] != g[:-1]
    return pos, np.clip(s_all[pos], t0, t1), np.clip(e_all[pos], t0, t1), g, first_in_group


def _touching(starts: np.ndarray, ends: np.ndarray, t0: int, t1: int) -> np.ndarray:
    """Positions of the intervals that touch ``[t0, t1)``. Zero-length intervals (instant markers) still touch the
    window when they sit inside it."""
    return np.flatnonzero((ends >= t0) & (starts < t1) & ((ends > t0) | (starts >= t0)))


def _empty_blocks() -> Blocks:
    e = np.empty(0, dtype=np.int64)
    return Blocks(e, e, e, e, e, e, 0)


def merge_blocks(
    starts: np.ndarray,
    ends: np.ndarray,
    groups: np.ndarray,
    t0: int,
    t1: int,
    ns_per_px: float,
    *,
    gap_px: float = 1.0,
    big_px: float = BIG_PX,
) -> Blocks:
    """Blocks that draw the intervals touching ``[t0, t1)`` at ``ns_per_px`` nanoseconds per pixel.

    ``starts``, ``ends`` (int64 ns) and ``groups`` (non-negative ints) must be sorted by (group, start).
    Within a group, interval *i* joins the block of interval *i-1* when both are narrower than ``big_px``
    pixels and the gap between *i* and everything before it in the group is under ``gap_px`` pixels.
    Overlapping intervals (nested host ops) merge the same way; their busy time is counted once.
    """
    t0, t1 = int(t0), int(t1)
    window = _in_window(starts, ends, groups, t0, t1)
    if window is None:
        return _empty_blocks()
    pos, s, e, g, first_in_group = window
    s, e = s - t0, e - t0
    # Within a group, how far the intervals before each one reach (the gap test must look past nested ones).
    prev_reach = _prev_running_max(e, np.cumsum(first_in_group) - 1)

    big = (e - s) >= big_px * ns_per_px
    prev_big = np.empty_like(big)
    prev_big[0] = False
    prev_big[1:] = big[:-1]
    new = first_in_group | big | prev_big | ((s - prev_reach) >= gap_px * ns_per_px)
    firsts = np.flatnonzero(new)
    lasts = np.append(firsts[1:] - 1, g.size - 1)

    # Inside each block: its end, and its busy time (each interval adds what lies beyond those before it).
    block = np.cumsum(new) - 1
    prev_in_block = _prev_running_max(e, block)
    contrib = np.maximum(e - np.maximum(s, prev_in_block), 0)
    block_end = np.maximum(prev_in_block[lasts], e[lasts])
    return Blocks(
        group=g[firsts],
        start_ns=s[firsts] + t0,
        end_ns=block_end + t0,
        count=lasts - firsts + 1,
        busy_ns=np.add.reduceat(contrib, firsts),
        first=pos[firsts],
        n_in_window=int(pos.size),
    )


_NONE = np.iinfo(np.int64).min // 4


def running_max(values: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """For each element, the maximum of its segment's elements up to it (itself included).

    ``segment`` ids are non-decreasing. One pass: offsetting each segment by more than any value's range keeps
    the running maximum from carrying over from one segment into the next.
    """
    values = np.asarray(values, dtype=np.int64)
    if not values.size:
        empty: np.ndarray = values.copy()
        return empty
    low = int(values.min())
    span = int(values.max()) - low + 1
    seg = np.asarray(segment, dtype=np.int64)
    seg = seg - int(seg[0])
    if int(seg[-1]) < (2**62) // span:
        shifted = seg * span + (values - low)
        out: np.ndarray = np.maximum.accumulate(shifted) - seg * span + low
        return out
    # astronomically long spans with very many segments: slower but overflow-free
    import pandas as pd

    cummax: np.ndarray = pd.Series(values).groupby(seg).cummax().to_numpy()
    return cummax


def _prev_running_max(values: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """For each element, the maximum of the earlier elements of its segment (``_NONE`` for a segment's first).

    ``values`` are non-negative and ``segment`` ids non-decreasing (:func:`running_max`, shifted by one).
    """
    seg = segment.astype(np.int64)
    running = running_max(values, seg)
    out = np.empty_like(running)
    out[0] = _NONE
    out[1:] = running[:-1]
    out[np.flatnonzero(np.diff(seg)) + 1] = _NONE
    return out


def busy_fraction(starts: np.ndarray, ends: np.ndarray, t0: int, t1: int, bins: int) -> np.ndarray:
    """Share of each of ``bins`` equal columns of ``[t0, t1)`` covered by a normalised interval set.

    ``starts``/``ends`` must be sorted and disjoint (e.g. from :func:`tracer.analysis.intervals.union`).
    Computed from the cumulative covered time at the bin edges: no loop over intervals or bins.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if t1 <= t0 or bins <= 0:
        return np.zeros(max(bins, 0))
    edges = t0 + (np.arange(bins + 1, dtype=np.float64) * ((t1 - t0) / bins))
    if s.size == 0:
        return np.zeros(bins)
    lengths = (e - s).astype(np.float64)
    before = np.concatenate([[0.0], np.cumsum(lengths)])  # covered time before interval k starts
    k = np.searchsorted(s, edges, side="right") - 1  # last interval starting at or before the edge
    kk = np.clip(k, 0, s.size - 1)
    inside = np.clip(edges - s[kk], 0.0, lengths[kk])
    covered = np.where(k >= 0, before[kk] + inside, 0.0)
    return np.diff(covered) / np.diff(edges)


def merge_disjoint(
    starts: np.ndarray,
    ends: np.ndarray,
    groups: np.ndarray,
    counts: np.ndarray,
    busy: np.ndarray,
    t0: int,
    t1: int,
    ns_per_px: float,
    *,
    gap_px: float = 1.0,
    big_px: float = BIG_PX,
) -> Blocks:
    """:func:`merge_blocks` of intervals that do not overlap within their group (a union of intervals, or blocks
    merged already), each standing for ``counts`` intervals and ``busy`` ns of work: what a coarser level of
    detail is made of (:func:`levels`) and read back from. An interval standing for more than one stands for
    intervals narrower than :data:`BIG_PX` pixels at the level it was merged at, so never a wide one at a coarser
    level; a lone interval is wide as merge_blocks says. Each block's ``count`` and ``busy_ns`` are its members'
    sums (busy of a member cut by the window: its share of the member's width); ``first``: the position of its
    first member in the arrays given; ``n_in_window``: the intervals its members stand for.

    Merged from a level at most ``ns_per_px`` fine, the blocks are :func:`merge_blocks`' of the intervals the
    level was made of, but at the window's edges: a member cut by the window counts all of its intervals."""
    window = _in_window(starts, ends, groups, int(t0), int(t1))
    if window is None:
        return _empty_blocks()
    pos, s, e, g, first_in_group = window
    s_in = np.asarray(starts, dtype=np.int64)[pos]
    e_in = np.asarray(ends, dtype=np.int64)[pos]
    n = np.asarray(counts, dtype=np.int64)[pos]
    width = np.maximum(e_in - s_in, 1)
    b = np.asarray(busy, dtype=np.int64)[pos]
    b = np.where((s > s_in) | (e < e_in), (b * ((e - s) / width)).astype(np.int64), b)
    big = (n == 1) & ((e - s) >= big_px * ns_per_px)
    prev_big = np.empty_like(big)
    prev_big[0] = False
    prev_big[1:] = big[:-1]
    prev_end = np.empty_like(e)
    prev_end[0] = 0
    prev_end[1:] = e[:-1]
    new = first_in_group | big | prev_big | ((s - prev_end) >= gap_px * ns_per_px)
    firsts = np.flatnonzero(new)
    lasts = np.append(firsts[1:] - 1, g.size - 1)
    return Blocks(
        group=g[firsts],
        start_ns=s[firsts],
        end_ns=e[lasts],
        count=np.add.reduceat(n, firsts),
        busy_ns=np.add.reduceat(b, firsts),
        first=pos[firsts],
        n_in_window=int(n.sum()),
    )


#: The coarsest level's pixel (ns): a level of detail this coarse holds a few blocks per row of any trace.
LEVEL_MAX_NS = 2**36
#: Each level's pixel is this many times the one below's.
LEVEL_STEP = 4
#: The first level's pixel (ns).
LEVEL_FIRST_NS = 4_096


@dataclass(frozen=True)
class Level:
    """Disjoint intervals (per group) merged at ``ns_per_px``: one level of detail (:func:`levels`)."""

    ns_per_px: float
    start_ns: np.ndarray
    end_ns: np.ndarray
    group: np.ndarray
    count: np.ndarray
    busy_ns: np.ndarray


def levels(starts: np.ndarray, ends: np.ndarray, groups: np.ndarray) -> list[Level]:
    """Coarser and coarser levels of detail of disjoint intervals sorted by (group, start) (a union per group):
    each merged from the one before at :data:`LEVEL_STEP` times its pixel, from :data:`LEVEL_FIRST_NS`, kept while
    it holds at most half the intervals of the one before (a level that merges little is not worth its bytes).
    A window drawn at ``ns_per_px`` is then merged from the coarsest level at most that fine
    (:func:`merge_disjoint`) instead of from every interval."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    g = np.asarray(groups, dtype=np.int64)
    n = np.ones(s.size, dtype=np.int64)
    b = e - s
    out: list[Level] = []
    if not s.size:
        return out
    lo, hi = int(s.min()), int(e.max()) + 1
    px = float(LEVEL_FIRST_NS)
    while px <= LEVEL_MAX_NS:
        m = merge_disjoint(s, e, g, n, b, lo, hi, px)
        if len(m) <= s.size // 2:
            out.append(Level(px, m.start_ns, m.end_ns, m.group, m.count, m.busy_ns))
            s, e, g, n, b = m.start_ns, m.end_ns, m.group, m.count, m.busy_ns
        if len(m) <= 1:
            break
        px *= LEVEL_STEP
    return out
