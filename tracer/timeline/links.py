"""The one join from GPU work to the host call that launched it.

A runtime or driver call (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``cudaGraphLaunch`` ...) and the GPU work it
queued carry the same correlation id. Ids are unique only within one process of one rank (CUPTI numbers each
process from 1, and every rank of a job is such a process), so the key is (rank, pid, correlation); a GPU row's
pid is the launching process in every parser (docs/design.md). Where a trace repeats an id within one process
(it should not), the first call keeps it.

Ranges (``analysis.ranges``), the exporters' flow arrows and process ids, and the dashboard's hover all read
this one table, computed once per events frame.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import pandas as pd

#: Kinds of host rows that launch GPU work, and of rows that are launched.
CALL_KINDS: tuple[str, ...] = ("runtime", "driver")
LAUNCHED_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset", "gpu_range")

LINK_COLUMNS = ("work_row", "call_row")

# id(events) -> (weak reference to the frame, its links). A frame is never changed in place once built (every
# parser ends with validate() and hands it over), so a result stays right while the frame lives.
_cache: dict[int, tuple[Any, pd.DataFrame]] = {}


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype="int64") for c in LINK_COLUMNS})


def launch_links(events: pd.DataFrame) -> pd.DataFrame:
    """One row per launched row (kernel, memcpy, memset, gpu_range on a GPU) whose call is in the timeline:
    ``work_row`` and ``call_row``, both labels of ``events``' index, in the order of the launched rows.

    Cached per frame: the second call on the same ``events`` costs a dictionary lookup.
    """
    hit = _cache.get(id(events))
    if hit is not None and hit[0]() is events:
        return hit[1]
    links = _join(events)
    key = id(events)
    def forget(_r: object, key: int = key) -> None:
        _cache.pop(key, None)

    try:
        ref = weakref.ref(events, forget)
    except TypeError:  # (not weak-referenceable: no cache)
        return links
    _cache[key] = (ref, links)
    return links


def _join(events: pd.DataFrame) -> pd.DataFrame:
    kind = events["kind"]
    has_corr = events["correlation"].notna().to_numpy()
    calls = events[kind.isin(CALL_KINDS).to_numpy() & has_corr]
    work = events[kind.isin(LAUNCHED_KINDS).to_numpy() & (events["device"].to_numpy() >= 0) & has_corr]
    if calls.empty or work.empty:
        return _empty()
    keys = ["rank", "pid", "correlation"]

    def frame(rows: pd.DataFrame, label: str) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "rank": rows["rank"].to_numpy(np.int64),
                "pid": rows["pid"].to_numpy(np.int64),
                "correlation": rows["correlation"].to_numpy(np.int64),
                label: rows.index.to_numpy(np.int64),
            }
        )

    c = frame(calls, "call_row").drop_duplicates(keys, keep="first")
    w = frame(work, "work_row")
    out = w.merge(c, on=keys, how="inner", sort=False)
    return out[list(LINK_COLUMNS)].reset_index(drop=True)


def launch_of(events: pd.DataFrame) -> pd.Series:
    """For each launched row that has one, the index label of its call (a Series indexed by work row)."""
    links = launch_links(events)
    return pd.Series(links["call_row"].to_numpy(), index=links["work_row"].to_numpy(), name="call_row")
