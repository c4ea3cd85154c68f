"""Split the intervals of one lane into sub-tracks on which every pair of intervals nests or is disjoint.

Viewers that draw a thread as a stack of slices (Perfetto, chrome://tracing, Nsight Systems' NVTX push/pop
rows) need each track to be a proper nesting: two intervals on a track either do not overlap or one contains
the other. GPU streams normally satisfy that (work on one stream serialises), host threads too (a call stack),
but not always: an annotation projected onto a stream can straddle kernel boundaries, Kineto's ranges can end
after the op that opened them. Instead of dropping what does not nest, such intervals move to a further
sub-track of the same lane.
"""

from __future__ import annotations

import numpy as np


def nesting_order(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Indices that sort intervals by start, longest first among equal starts: parents before children."""
    return np.lexsort((-np.asarray(ends, dtype=np.int64), np.asarray(starts, dtype=np.int64)))


def sub_tracks(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each interval, the index (0, 1, ...) of the sub-track it goes to.

    Greedy first fit in nesting order: an interval goes to the first sub-track whose open intervals (those not
    yet ended at its start) all contain it. Disjoint lanes, the common case, take a vectorised fast path.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    out = np.zeros(s.size, dtype=np.int64)
    if s.size < 2:
        return out
    order = nesting_order(s, e)
    so, eo = s[order], e[order]
    reach = np.maximum.accumulate(eo)
    if bool((so[1:] >= reach[:-1]).all()):
        return out  # no two intervals overlap at all
    stacks: list[list[int]] = []
    assigned = np.empty(s.size, dtype=np.int64)
    for i, (start, end) in enumerate(zip(so.tolist(), eo.tolist())):
        for k, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                assigned[i] = k
                break
        else:
            stacks.append([end])
            assigned[i] = len(stacks) - 1
    out[order] = assigned
    return out

