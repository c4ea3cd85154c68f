"""NVTX / record_function ranges projected onto the GPU work they launched.

A host range on thread T covers the runtime/driver calls that T made inside it; the timeline's launch join
(correlation ids, per rank and process) names the kernels, copies and memsets they launched. So "how long did
range X keep the GPU busy" is the union of that GPU work, per range instance, summed per range name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.overlap import kind_mask
from tracer.timeline import GPU_WORK_KINDS, THREAD_COLUMNS, launch_links
from tracer.timeline.keys import key_codes, row_positions

RANGE_COLUMNS = ["name", "count", "host_ns", "gpu_busy_ns", "gpu_window_ns", "kernels", "memcpys", "memsets"]


#: How GPU work is credited to ranges (``range_launches``' ``rule``):
#: - "thread": only the work launched by calls the range's own thread made inside it;
#: - "process" (the default): that, plus the work launched from threads of the same process that had no range
#:   open at the time (PyTorch runs ``loss.backward()``'s kernels from autograd threads, so a step range on the
#:   main thread would otherwise miss the whole backward pass).
RULES = ("thread", "process")
RULE_TEXT = {
    "thread": "GPU work launched by calls on the range's own thread",
    "process": "GPU work launched on the range's thread, plus launches from threads of the same process with no "
    "range open (autograd's backward threads) while the range was open",
}


def _calls_inside(r_starts: np.ndarray, r_ends: np.ndarray, r_rows: np.ndarray, call_starts: np.ndarray,
                  calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(range row, call) for every call (``calls``: their numbers, sorted by start) that starts inside a range
    (its start, end and row label), ranges in the order given, each one's calls in start order."""
    lo = np.searchsorted(call_starts, r_starts, side="left")
    hi = np.searchsorted(call_starts, r_ends, side="right")
    n = hi - lo
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # positions lo..hi-1 for every range, without a Python loop
    offsets = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
    call_pos = np.repeat(lo, n) + offsets
    return np.repeat(r_rows, n).astype(np.int64), calls[call_pos].astype(np.int64)


def _covered(starts: np.ndarray, r_starts: np.ndarray, r_ends: np.ndarray) -> np.ndarray:
    """Which points of ``starts`` lie inside the union of [r_starts, r_ends]."""
    u_s, u_e = iv.union(r_starts, np.maximum(r_ends, r_starts + 1))  # a zero-length range still covers its point
    i = np.searchsorted(u_s, starts, side="right") - 1
    return (i >= 0) & (starts < u_e[np.maximum(i, 0)]) & (len(u_s) > 0)


def range_launches(events: pd.DataFrame, rule: str = "process") -> pd.DataFrame:
    """Pairs (range row index, GPU work row index): which GPU work each host range instance launched, by
    ``rule`` (see :data:`RULES`)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, not {rule!r}")
    pairs = launch_pairs(events)
    if rule == "thread":
        pairs = pairs[pairs["own_thread"]]
    return pairs[["range_row", "work_row"]].reset_index(drop=True)


def launch_pairs(events: pd.DataFrame) -> pd.DataFrame:
    """The pairs of the "process" rule, each marked ``own_thread`` where the "thread" rule credits it too (a
    launch by the range's own thread): both rules' figures from one matching.

    Which call launched which GPU work is the timeline's one launch join (:func:`tracer.timeline.launch_links`,
    keyed on rank, process and correlation id), so a range on rank r is credited only with rank r's work; a
    range's calls are those of its own (rank, pid, tid) and, by the "process" rule, of the other threads of its
    (rank, pid)."""
    empty = pd.DataFrame({"range_row": pd.Series([], dtype="int64"), "work_row": pd.Series([], dtype="int64"),
                          "own_thread": pd.Series([], dtype=bool)})
    # (numpy on the columns used, threads as integer codes: no copies of the whole frame, no groupby)
    kind = events["kind"]
    range_pos = np.flatnonzero(kind_mask(kind, ("range",)))
    if not range_pos.size:
        return empty
    links = launch_links(events)
    if links.empty:
        return empty
    # only GPU work counts (gpu_range rows are the profiler's drawing of a range, not work), and only calls that
    # launched some
    work_rows = links["work_row"].to_numpy(np.int64)
    link_calls = links["call_row"].to_numpy(np.int64)
    gpu = kind_mask(kind, GPU_WORK_KINDS)[row_positions(events.index, work_rows)]
    work_rows, link_calls = work_rows[gpu], link_calls[gpu]
    if not link_calls.size:
        return empty
    # the calls, each once, by label (as events.loc took them): marked on the rows, not sorted
    link_call_pos = row_positions(events.index, link_calls)
    marked = np.zeros(len(events), dtype=bool)
    marked[link_call_pos] = True
    call_pos = np.flatnonzero(marked)
    call_rows = events.index.to_numpy()[call_pos]
    if not events.index.is_monotonic_increasing:
        by_label = np.argsort(call_rows, kind="stable")
        call_pos, call_rows = call_pos[by_label], call_rows[by_label]
    # each link's call as a number 0..calls-1, for the join below
    call_number = np.empty(len(events), dtype=np.intp)
    call_number[call_pos] = np.arange(call_pos.size)
    link_call = call_number[link_call_pos]
    starts, ends = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    r_starts, r_ends, r_rows = starts[range_pos], ends[range_pos], events.index.to_numpy()[range_pos]
    c_starts = starts[call_pos]
    # one numbering of the ranges' and calls' threads, and of their processes
    rows = np.concatenate([range_pos, call_pos])
    keys = [events[c].to_numpy() for c in THREAD_COLUMNS]
    thread, _ = key_codes(*keys, rows=rows)
    process, _ = key_codes(*keys[:2], rows=rows)
    r_thread, c_thread = thread[:range_pos.size], thread[range_pos.size:]
    r_process, c_process = process[:range_pos.size], process[range_pos.size:]
    _, first = np.unique(c_thread, return_index=True)
    parts: list[tuple[np.ndarray, np.ndarray, bool]] = []
    for at in np.sort(first):  # the calls' threads in the order first met (as groupby(sort=False) took them)
        t, p = c_thread[at], c_process[at]
        mine = np.flatnonzero(c_thread == t)
        mine = mine[np.argsort(c_starts[mine], kind="stable")]
        cs, calls = c_starts[mine], mine  # (the calls by number, 0..calls-1)
        own = np.flatnonzero(r_thread == t)
        if own.size:
            parts.append((*_calls_inside(r_starts[own], r_ends[own], r_rows[own], cs, calls), True))
            orphan = ~_covered(cs, r_starts[own], r_ends[own])
            cs, calls = cs[orphan], calls[orphan]
        if len(cs):
            others = np.flatnonzero((r_process == p) & (r_thread != t))
            if others.size:
                parts.append((*_calls_inside(r_starts[others], r_ends[others], r_rows[others], cs, calls), False))
    parts = [part for part in parts if part[0].size]
    if not parts:
        return empty
    # (a range row belongs to one thread, so a (range, call) pair is either its own thread's or another's)
    pair_range = np.concatenate([part[0] for part in parts])
    pair_call = np.concatenate([part[1] for part in parts])
    pair_own = np.concatenate([np.full(part[0].size, part[2]) for part in parts])
    # each pair once per GPU work its call launched, in the links' order (what an inner merge on call_row gives):
    # the links grouped by call number (stable), each call's block at its offset
    by_call = np.argsort(link_call, kind="stable")
    n_links = np.bincount(link_call, minlength=call_pos.size)
    lo = (np.cumsum(n_links) - n_links)[pair_call]
    n = n_links[pair_call]
    offsets = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return pd.DataFrame({
        "range_row": np.repeat(pair_range, n),
        "work_row": work_rows[by_call[np.repeat(lo, n) + offsets]],
        "own_thread": np.repeat(pair_own, n),
    })


INSTANCE_COLUMNS = ["gpu_busy_ns", "gpu_window_ns", "kernels", "memcpys", "memsets"]


def range_instances(events: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per range instance (index: its events row) that ``pairs`` credits with GPU work: the union of that work
    (``gpu_busy_ns``), first start → last end (``gpu_window_ns``) and its counts by kind."""
    rows, figures = _instances(events, pairs["range_row"].to_numpy(), pairs["work_row"].to_numpy())
    return pd.DataFrame(figures, index=pd.Index(rows, name="range_row"))[INSTANCE_COLUMNS]


def _instances(events: pd.DataFrame, range_rows: np.ndarray, work_rows: np.ndarray
               ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """:func:`range_instances` as arrays: the instances' row labels (ascending) and each figure, int64, in that
    order; the pairs sorted once by (range, work start) and every figure a ``reduceat`` over each range's
    block (no groupby, no join)."""
    pos = row_positions(events.index, work_rows)
    starts, ends = events["start_ns"].to_numpy()[pos], events["end_ns"].to_numpy()[pos]
    order = np.lexsort((starts, range_rows))
    ranges, starts, ends, pos = np.asarray(range_rows)[order], starts[order], ends[order], pos[order]
    if not ranges.size:
        return ranges, {c: np.zeros(0, dtype=np.int64) for c in INSTANCE_COLUMNS}
    opens = np.flatnonzero(np.r_[True, ranges[1:] != ranges[:-1]])
    instance = np.repeat(np.arange(opens.size), np.diff(np.r_[opens, ranges.size]))
    has_length = ends > starts  # (the union leaves zero-length work out; the window does not)
    present, lengths = iv.sorted_union_totals(instance[has_length], starts[has_length], ends[has_length])
    busy = np.zeros(opens.size, dtype=np.int64)
    busy[present] = lengths
    window = np.maximum.reduceat(ends, opens) - starts[opens]  # (each block's first start is its earliest)
    iv.checked_sum(busy, "range GPU time (ns)")
    iv.checked_sum(window, "range GPU window (ns)")
    figures = {"gpu_busy_ns": busy, "gpu_window_ns": window.astype(np.int64)}
    for kind in ("kernel", "memcpy", "memset"):
        figures[f"{kind}s"] = np.add.reduceat(kind_mask(events["kind"], (kind,))[pos].astype(np.int64), opens)
    return ranges[opens], figures


def range_summary(events: pd.DataFrame, rule: str = "process", *, pairs: pd.DataFrame | None = None,
                  own_thread: bool = False) -> pd.DataFrame:
    """Per range name: instances, host time (sum of durations), GPU busy time of the work they launched
    (union per instance, summed), GPU window (first launched start → last end, summed) and work counts; the
    work credited by ``rule`` (see :data:`RULES`), or by ``pairs`` already matched (:func:`range_launches`).

    ``own_thread`` (``pairs`` from :func:`launch_pairs`): also ``own_thread_gpu_busy_ns`` and
    ``own_thread_kernels``, the busy time and kernels of the pairs the "thread" rule credits too (what the
    summary shows beside the default rule's), from the same ranges."""
    extra = ["own_thread_gpu_busy_ns", "own_thread_kernels"] if own_thread else []
    range_pos = np.flatnonzero(kind_mask(events["kind"], ("range",)))
    if not range_pos.size:
        return pd.DataFrame({c: pd.Series([], dtype="int64" if c != "name" else object)
                             for c in [*RANGE_COLUMNS, *extra]})
    dur = events["end_ns"].to_numpy()[range_pos] - events["start_ns"].to_numpy()[range_pos]
    iv.checked_sum(dur, "range time (ns)")  # bounds every per-name total below
    name = events["name"]
    if not isinstance(name.dtype, pd.CategoricalDtype):
        name = name.astype("category")
    # per name category (integer codes: np.bincount / np.add.at, no groupby); a missing name is no row
    codes = name.cat.codes.to_numpy()
    size = len(name.cat.categories)
    r_code = codes[range_pos]
    named = r_code >= 0
    count = np.bincount(r_code[named], minlength=size)
    host_ns = np.zeros(size, dtype=np.int64)
    np.add.at(host_ns, r_code[named], dur[named])
    # the instances' figures are summed per name as text (the names a job's ranks share), and each name
    # category reads its text's sums
    text = name.cat.categories.astype(str)
    text_code = pd.factorize(text)[0] if not text.is_unique else np.arange(size)
    if pairs is None:
        pairs = range_launches(events, rule)

    def by_name(subset: pd.DataFrame) -> dict[str, np.ndarray]:
        rows, figures = _instances(events, subset["range_row"].to_numpy(), subset["work_row"].to_numpy())
        i_code = codes[row_positions(events.index, rows)]
        named = i_code >= 0
        group = text_code[i_code[named]]
        out = {}
        for c, v in figures.items():
            summed = np.zeros(size, dtype=np.int64)
            np.add.at(summed, group, v[named])
            out[c] = summed[text_code]
        return out

    figures = by_name(pairs)
    out = pd.DataFrame({"count": count, "host_ns": host_ns, **figures})
    if own_thread:
        strict = by_name(pairs[pairs["own_thread"].to_numpy(dtype=bool)])
        out["own_thread_gpu_busy_ns"] = strict["gpu_busy_ns"]
        out["own_thread_kernels"] = strict["kernels"]
    seen = np.flatnonzero(count > 0)  # (the names that ranges have, in category order)
    out = out.iloc[seen].astype("int64")
    out.insert(0, "name", text[seen])
    return longest_first(out.reset_index(drop=True))[[*RANGE_COLUMNS, *extra]]


def longest_first(table: pd.DataFrame) -> pd.DataFrame:
    """Range rows (one per name) by host time, longest first; names ascending among equal times, so that the order
    does not hang on the order the names were met in (a job's ranks, summed apart, meet them in another). Numbered
    names of one stem (``ProfilerStep#0`` … ``#10``) stay together, in the order of their numbers, where the
    longest of them stands."""
    if table.empty:
        return table.reset_index(drop=True)
    parts = table["name"].astype(str).str.extract(_NUMBERED_NAME)
    numbered = parts["n"].notna()
    stem = parts["stem"].where(numbered, table["name"].astype(str))
    keys = pd.DataFrame({
        "group": table["host_ns"].groupby(stem.to_numpy()).transform("max").to_numpy(),
        "stem": stem.to_numpy(),
        "n": pd.to_numeric(parts["n"], errors="coerce").fillna(-1).to_numpy(),
        "host": table["host_ns"].to_numpy(),
        "name": table["name"].astype(str).to_numpy(),
    })
    # (an unnumbered name is a group of its own: the order of those is host time, then name, as it was)
    order = keys.sort_values(["group", "stem", "n", "host", "name"], ascending=[False, True, True, False, True],
                             kind="stable").index.to_numpy()
    return table.iloc[order].reset_index(drop=True)


#: ``<stem>#<number>``: a numbered range (``ProfilerStep#7``), grouped by stem and ordered by number
_NUMBERED_NAME = r"^(?P<stem>.*)#(?P<n>\d{1,9})$"
