"""The keys every groupby of a timeline uses: a GPU is (rank, device), a lane (rank, device, stream), a host
thread (rank, pid, tid).

Two one-GPU traces of a job, ranks 0 and 1, both call their GPU "0"; grouped by device alone they would come
out as one GPU holding both ranks' kernels. Every analysis, layout and exporter therefore groups by these keys,
and labels them with :func:`device_label` / :func:`lane_label`, which name the rank only where the timeline
holds more than one (a one-process trace reads exactly as before).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

#: Columns of each key, for ``DataFrame.groupby``.
DEVICE_COLUMNS: tuple[str, str] = ("rank", "device")
LANE_COLUMNS: tuple[str, str, str] = ("rank", "device", "stream")
THREAD_COLUMNS: tuple[str, str, str] = ("rank", "pid", "tid")


class DeviceKey(NamedTuple):
    """One GPU of one rank (device -1: the host)."""

    rank: int
    device: int


class LaneKey(NamedTuple):
    """One stream of one GPU of one rank."""

    rank: int
    device: int
    stream: int

    @property
    def device_key(self) -> DeviceKey:
        return DeviceKey(self.rank, self.device)


def ranks(events: pd.DataFrame) -> list[int]:
    """The distinct ranks of a timeline, ascending ([0] for an empty one: every row's default)."""
    if events.empty:
        return [0]
    return sorted(int(r) for r in pd.unique(events["rank"].to_numpy()))


def is_multi_rank(events: pd.DataFrame) -> bool:
    """Whether the timeline holds more than one rank (and labels must then name it)."""
    col = events["rank"].to_numpy()
    return bool(col.size) and bool((col != col[0]).any())


def device_label(key: DeviceKey, multi_rank: bool) -> str:
    """The key of a GPU in summaries: ``"0"`` in a one-rank timeline (as always), ``"1/0"`` (rank/device) in a
    job's."""
    return f"{key.rank}/{key.device}" if multi_rank else str(key.device)


def device_title(key: DeviceKey, multi_rank: bool) -> str:
    """A GPU for people: ``"GPU 0"``, ``"rank 1 · GPU 0"``."""
    return f"rank {key.rank} · GPU {key.device}" if multi_rank else f"GPU {key.device}"


def lane_title(key: LaneKey, multi_rank: bool) -> str:
    """A stream for people: ``"GPU 0 · stream 7"``, ``"rank 1 · GPU 0 · stream 7"``."""
    return f"{device_title(key.device_key, multi_rank)} · stream {key.stream}"


def pack(*columns: np.ndarray | pd.Series) -> np.ndarray:
    """One int64 per row from up to three small integer key columns (rank int16, device int16, stream or tid
    int32 as the schema stores them), for numpy-speed grouping (``intervals.grouped_union_total``). Equal keys
    give equal codes and different keys different codes; the order of codes is the order of the keys.

    Wider values (a pid, an int64 tid) do not fit: group those with pandas instead.
    """
    widths = (16, 16, 32)[-len(columns):] if len(columns) <= 3 else None
    if widths is None:
        raise ValueError("pack takes at most three columns")
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for col, width in zip(columns, widths):
        arr = np.asarray(col, dtype=np.int64)
        lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
        if arr.size and (arr.min() < lo or arr.max() > hi):
            raise ValueError(f"key value beyond {width} bits")
        # offset to unsigned, so that the order of codes is the order of keys
        code = (code << width) | (arr - lo)
    return code


def key_codes(*columns: np.ndarray | pd.Series, rows: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Per row (of ``rows``, positions into the columns, where given), an int64 code of its key (the columns'
    values together, of any integer width: a pid too) whose order is the order of the keys, and a bound above
    every code that is at most the number of rows (or 1), so that ``np.bincount(codes, minlength=bound)`` counts
    per key, keys ascending. Codes need not be dense.

    What ``groupby(columns, sort=True).ngroup()`` numbers, without its pandas overhead: each column is
    factorized (sorted) apart, a constant one (one rank, one process) not at all, and the codes are combined
    positionally, renumbered whenever their range would pass the number of rows (so products stay far from
    int64's limit).
    """
    n = len(columns[0]) if rows is None else len(rows)
    code = np.zeros(n, dtype=np.int64)
    bound = 1
    for col in columns:
        arr = np.asarray(col)
        if n == 0 or arr.min() == arr.max():  # (constant over all rows, so over ``rows`` too: nothing to copy)
            continue
        c, uniques = pd.factorize(arr if rows is None else arr[rows], sort=True)
        code = code * len(uniques) + c
        bound *= len(uniques)
        if bound > n:
            code, seen = pd.factorize(code, sort=True)
            code, bound = code.astype(np.int64, copy=False), len(seen)
    return code, bound


def row_positions(index: pd.Index, labels: np.ndarray) -> np.ndarray:
    """Where rows of these labels are in a frame with this index (what ``.loc`` finds, as positions for numpy)."""
    labels = np.asarray(labels)
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        if labels.size and (labels.min() < 0 or labels.max() >= len(index)):
            raise KeyError("row labels not in the frame")
        return labels.astype(np.intp, copy=False)
    pos = index.get_indexer(labels)
    if pos.size and pos.min() < 0:
        raise KeyError("row labels not in the frame")
    return np.asarray(pos, dtype=np.intp)
