"""Columns of rows appended a chunk at a time, each kept in one array that grows in place, and rows put in a new
order through one spare buffer per item size (:mod:`tracer.parsers.kineto_scan`'s columns).

Why not a list of chunk arrays joined at the end: on a 1 GB trace the join is a second copy of every column
(~0.25 GB), and most of its cost is the kernel handing out fresh pages (0.5 s on the 2-core VM, more than the
copy itself). Arrays reserved up front for the rows a file of that size can hold cost nothing until rows are
written into them (the pages are only mapped when touched), and a reorder that reuses each column's old
buffer for the next column touches one column's worth of new memory per item size, not the whole frame's.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt


class ColumnStore:
    """Named columns of one length, appended to a chunk at a time (:meth:`append`); :meth:`columns` views the
    rows so far. ``rows``: a guess of how many rows will come (more only costs a copy as the arrays grow)."""

    def __init__(self, dtypes: Mapping[str, npt.DTypeLike], rows: int = 0) -> None:
        self.dtypes = {k: np.dtype(v) for k, v in dtypes.items()}
        self.n = 0
        self._arrays = {k: np.empty(max(rows, 0), dtype=d) for k, d in self.dtypes.items()}

    def __len__(self) -> int:
        return self.n

    def append(self, cols: Mapping[str, np.ndarray]) -> None:
        """The rows of ``cols`` (every column, each as long as the others) after those already kept."""
        k = len(cols["start"]) if "start" in cols else len(next(iter(cols.values())))
        if not k:
            return
        end = self.n + k
        if end > len(next(iter(self._arrays.values()))):
            self._grow(end)
        for name, arr in self._arrays.items():
            arr[self.n : end] = cols[name]
        self.n = end

    def _grow(self, rows: int) -> None:
        capacity = max(rows, 2 * len(next(iter(self._arrays.values()))), 1024)
        for name, old in self._arrays.items():
            new = np.empty(capacity, dtype=old.dtype)
            new[: self.n] = old[: self.n]
            self._arrays[name] = new

    def columns(self) -> dict[str, np.ndarray]:
        """Each column's rows so far (views: the store's own arrays)."""
        return {k: v[: self.n] for k, v in self._arrays.items()}


def reorder(cols: dict[str, np.ndarray], order: npt.NDArray[np.intp]) -> dict[str, np.ndarray]:
    """Every column of ``cols`` with its rows in ``order`` (the columns of ``cols`` are used up: their buffers
    are written over). Each column is gathered into a spare buffer of its item size, and its own buffer is the
    spare for the next column of that size (where nothing else shares it)."""
    spares: dict[int, np.ndarray] = {}
    out: dict[str, np.ndarray] = {}
    n = len(order)
    for name, v in cols.items():
        spare = spares.pop(v.itemsize, None)
        target = spare.view(v.dtype) if spare is not None else np.empty(n, dtype=v.dtype)
        np.take(v, order, out=target, mode="clip")  # ("clip": no bounds check buffered; order is a permutation)
        out[name] = target
        others = [w for k, w in cols.items() if k != name and k not in out] + list(out.values())
        if (v.flags.writeable and v.flags.c_contiguous and len(v) == n
                and not any(np.may_share_memory(v, w) for w in others)):
            spares[v.itemsize] = v
    return out
