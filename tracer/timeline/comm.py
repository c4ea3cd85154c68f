"""Which rows of a timeline are communication, and of which collective.

The trace's own collective metadata decides first: Kineto writes "Collective name", "Process Group Name", "Seq",
"Group size", "In/Out msg nelems" and "dtype" into the args of ``record_param_comms`` and, in newer PyTorch, of
the NCCL kernel itself (the parser reads them into the ``collective``, ``pg``, ``seq``, ``group_size`` and
``bytes`` columns). Names decide second (:func:`collective_of_name`): NCCL / RCCL kernels
(``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_...``; NCCL >= 2.19 and RCCL's
``ncclDevKernel_Generic`` say nothing of the collective: "other") and the host records PyTorch writes around a
collective (``nccl:all_reduce``, ``gloo:broadcast`` ranges, a ``record_param_comms`` op). Third, a comm kernel
that carries no metadata takes it from the host record its launch call ran inside (:func:`inherit_from_host`):
``ncclDevKernel_Generic`` launched inside ``record_param_comms`` {"Collective name": "allreduce"} is an allreduce
of that process group and sequence number.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracer.timeline import COLLECTIVES, KINDS
from tracer.timeline.links import launch_links
from tracer.vocabulary import DTYPE_BYTES as DTYPE_BYTES
from tracer.vocabulary import message_bytes as message_bytes
from tracer.vocabulary import normalise_collective as normalise_collective

#: NCCL / RCCL kernels: ncclKernel_AllReduce_…, ncclDevKernel_AllGather_…, ncclDevKernel_Generic(…).
_KERNEL_RE = re.compile(r"^_*[nr]ccl(?:Dev)?Kernel_?([A-Za-z]*)")
#: Host records of a collective: PyTorch's record_function around a backend's call ("nccl:all_reduce",
#: "gloo:broadcast"; "ucc:", "mpi:", "xccl:" for the other backends)
_HOST_RANGE_RE = re.compile(r"^(?:nccl|rccl|gloo|ucc|mpi|xccl):(\w+)$")
#: The op PyTorch records with the collective's parameters in its args
PARAM_COMMS = "record_param_comms"


def collective_of_name(name: str, kind: str) -> str:
    """The collective a row's name says it is part of ("" for a name of no communication): NCCL / RCCL kernels,
    and on the host ``nccl:*`` / ``gloo:*`` ranges and ``record_param_comms`` ("other": its args, read by the
    parser, are what name the collective)."""
    if kind == "kernel":
        m = _KERNEL_RE.match(name)
        if m is None:
            return ""
        return normalise_collective(m.group(1)) or "other"  # ncclDevKernel_Generic → other
    if kind in ("range", "gpu_range", "cpu_op"):
        if name == PARAM_COMMS:
            return "other"
        m = _HOST_RANGE_RE.match(name)
        if m is not None:
            return normalise_collective(m.group(1)) or "other"
    return ""


def mark_by_name(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` with ``collective`` filled from the names (:func:`collective_of_name`) where the trace's
    metadata left it empty, or said only "other" (decided once per distinct kind and name, not per row), then
    comm kernels without metadata given their host record's (:func:`inherit_from_host`). Returns the frame
    (changed in place: call it before the frame is handed over)."""
    if events.empty:
        return events
    kind_codes = events["kind"].cat.codes.to_numpy()  # (the kind's categories are KINDS, fixed)
    name_codes = events["name"].cat.codes.to_numpy()
    coll = events["collective"]
    codes = coll.cat.codes.to_numpy()
    other = COLLECTIVES.index("other")
    name_cats = events["name"].cat.categories
    # one decision per distinct (kind, name), looked up for every row at once
    table = np.zeros((len(KINDS), max(len(name_cats), 1)), dtype=np.int8)
    for kind in ("kernel", "range", "gpu_range", "cpu_op"):
        k = KINDS.index(kind)
        for n in np.unique(name_codes[kind_codes == k]).tolist():
            if n >= 0:
                table[k, n] = COLLECTIVES.index(collective_of_name(str(name_cats[n]), kind))
    by_name = table[kind_codes, np.maximum(name_codes, 0)]
    # a name that says more than the metadata's "other" wins; a name of no communication leaves what was read
    better = (by_name > 0) & ((codes == 0) | ((codes == other) & (by_name != other)))
    if better.any():
        codes = codes.copy()
        codes[better] = by_name[better]
        events["collective"] = pd.Categorical.from_codes(codes, dtype=coll.dtype)
    return inherit_from_host(events)


def inherit_from_host(events: pd.DataFrame) -> pd.DataFrame:
    """Comm kernels the trace gave no process group or sequence number take them (and the collective as called,
    message size and group size, where their own say less) from the host record their launch call ran inside: the
    innermost ``record_param_comms`` (or other comm op carrying metadata) of the launching thread that encloses
    the call, else the innermost ``nccl:*`` range (which gives the collective only). In place; returns
    ``events``."""
    coll = events["collective"].cat.codes.to_numpy()
    kind = events["kind"].cat.codes.to_numpy()
    is_comm_kernel = (coll > 0) & (kind == KINDS.index("kernel"))
    if not is_comm_kernel.any():
        return events
    pg_codes = events["pg"].cat.codes.to_numpy()
    seq_na = events["seq"].isna().to_numpy()
    no_pg = (pg_codes < 0) | (pg_codes == _empty_code(events["pg"]))
    needs = is_comm_kernel & ((seq_na & no_pg) | (coll == COLLECTIVES.index("other")))
    if not needs.any():
        return events
    host = (coll > 0) & ((kind == KINDS.index("cpu_op")) | (kind == KINDS.index("range")))
    if not host.any():
        return events
    links = launch_links(events)
    if links.empty:
        return events
    # (links name index labels; what follows works on positions)
    work = events.index.get_indexer(links["work_row"].to_numpy())
    call = events.index.get_indexer(links["call_row"].to_numpy())
    pick = needs[work]
    work, call = work[pick], call[pick]
    if not work.size:
        return events
    with_meta = host & (~seq_na | ~no_pg)
    named = host & (coll != COLLECTIVES.index("other"))
    new = {c: events[c].copy() for c in ("collective", "pg", "seq", "group_size", "bytes")}
    for hosts, full in ((named, False), (with_meta, True)):  # the fuller source last: it wins
        src = _enclosing(events, np.flatnonzero(hosts), call)
        ok = src >= 0
        if not ok.any():
            continue
        w, s = work[ok], src[ok]
        own = new["collective"].cat.codes.to_numpy()[w]
        theirs = coll[s]
        # the collective as called (the host's) over the kernel's name: older NCCL runs an alltoall, and at
        # scale an allreduce, as ncclKernel_SendRecv; matching across ranks needs the call
        take = (theirs != COLLECTIVES.index("other")) & (theirs != own)
        if take.any():
            codes = new["collective"].cat.codes.to_numpy().copy()
            codes[w[take]] = theirs[take]
            new["collective"] = pd.Series(pd.Categorical.from_codes(codes, dtype=events["collective"].dtype),
                                          index=events.index)
        if not full:
            continue
        pg_now = new["pg"].astype(str).to_numpy(dtype=object)
        pg_src = events["pg"].astype(str).to_numpy(dtype=object)
        fill = pg_now[w] == ""
        pg_now[w[fill]] = pg_src[s[fill]]
        new["pg"] = pd.Series(pg_now, index=events.index, dtype="category")
        for c in ("seq", "bytes"):
            col = new[c].copy()
            missing = col.isna().to_numpy()[w]
            col.iloc[w[missing]] = events[c].iloc[s[missing]].to_numpy()
            new[c] = col
        gs = new["group_size"].to_numpy().copy()
        zero = gs[w] == 0
        gs[w[zero]] = events["group_size"].to_numpy()[s[zero]]
        new["group_size"] = pd.Series(gs, index=events.index, dtype=events["group_size"].dtype)
    for c, v in new.items():
        events[c] = v
    return events


def _empty_code(pg: pd.Series) -> int:
    cats = list(pg.cat.categories)
    return cats.index("") if "" in cats else -1


def _enclosing(events: pd.DataFrame, hosts: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """For each call row, the innermost of the ``hosts`` rows on its thread (rank, pid, tid) that encloses it
    (starts at or before it, ends at or after it); -1 where none does. Host records of one thread nest, so the
    innermost is the latest-starting one that still encloses the call: found by a search per thread."""
    out = np.full(calls.size, -1, dtype=np.int64)
    if not hosts.size or not calls.size:
        return out
    key_cols = ("rank", "pid", "tid")
    h = events.iloc[hosts]
    c = events.iloc[calls]
    h_key = pd.MultiIndex.from_arrays([h[k].to_numpy() for k in key_cols])
    c_key = pd.MultiIndex.from_arrays([c[k].to_numpy() for k in key_cols])
    h_start, h_end = h["start_ns"].to_numpy(), h["end_ns"].to_numpy()
    c_start, c_end = c["start_ns"].to_numpy(), c["end_ns"].to_numpy()
    groups = pd.Series(np.arange(len(h)), index=h_key).groupby(level=[0, 1, 2]).indices
    for key, call_idx in pd.Series(np.arange(len(c)), index=c_key).groupby(level=[0, 1, 2]).indices.items():
        mine = groups.get(key)
        if mine is None:
            continue
        order = mine[np.argsort(h_start[mine], kind="stable")]
        starts = h_start[order]
        for i in call_idx.tolist():
            # walk back from the latest host row starting at or before the call to the first that encloses it
            j = int(np.searchsorted(starts, c_start[i], side="right")) - 1
            while j >= 0 and h_end[order[j]] < c_end[i]:
                j -= 1
            if j >= 0:
                out[i] = hosts[order[j]]
    return out
