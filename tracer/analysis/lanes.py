"""Per-lane figures: a lane is one (rank, device, stream) of GPU work; and per host thread (rank, pid, tid)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.overlap import gpu_work, kind_mask
from tracer.analysis.work import kind_counts
from tracer.timeline import LANE_COLUMNS, THREAD_COLUMNS
from tracer.timeline.keys import key_codes, pack

LANE_STAT_COLUMNS = [*LANE_COLUMNS, "kernels", "memcpys", "memsets", "busy_ns"]
THREAD_STAT_COLUMNS = [*THREAD_COLUMNS, "ops", "busy_ns", "launches"]


def lane_stats(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, device, stream): kernels, memcpys, memsets (counts) and busy_ns (union of its work),
    by lane."""
    work = gpu_work(events)
    cols = LANE_STAT_COLUMNS
    if work.empty:
        return pd.DataFrame({c: pd.Series([], dtype="int64") for c in cols})
    keys = [work[c] for c in LANE_COLUMNS]
    counts = kind_counts(work["kind"], keys)
    busy = iv.grouped_union_total(pack(*keys), work["start_ns"].to_numpy(), work["end_ns"].to_numpy())
    out = counts.reset_index()
    out["busy_ns"] = pd.Series(pack(*(out[c] for c in LANE_COLUMNS))).map(busy).fillna(0).to_numpy()
    out = out.astype({c: "int64" for c in (*LANE_COLUMNS, "busy_ns")})
    out.columns.name = None
    return out[cols].sort_values(list(LANE_COLUMNS)).reset_index(drop=True)


def host_thread_stats(events: pd.DataFrame) -> pd.DataFrame:
    """One row per host thread (rank, pid, tid) that ran framework ops: ops (count), busy_ns (union of its cpu_op
    intervals, so nested ops count once) and launches (CUDA runtime/driver calls). On a CPU-only run, where
    threads stand in for devices, this is what "busy per device" means. Busiest first."""
    return busiest_first(thread_rows(events))


def busiest_first(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`thread_rows` (of one timeline, or of a job's ranks stacked in rank order) busiest first, as
    :func:`host_thread_stats` orders them."""
    return rows.sort_values("busy_ns", ascending=False, ignore_index=True)


def thread_rows(events: pd.DataFrame) -> pd.DataFrame:
    """:func:`host_thread_stats`' rows in (rank, pid, tid) order: what a job's ranks compute apart and stack."""
    cols = THREAD_STAT_COLUMNS
    # numpy on the few columns used, not boolean filters of the whole frame (each copies every column)
    host = events["device"].to_numpy() < 0
    op_rows = np.flatnonzero(host & kind_mask(events["kind"], ("cpu_op",)))
    if not op_rows.size:
        return pd.DataFrame({c: pd.Series([], dtype="int64") for c in cols})
    call_rows = np.flatnonzero(host & kind_mask(events["kind"], ("runtime", "driver")))
    # one numbering of ops' and calls' threads: the ops' codes first, the calls' after (slices, not copies)
    rows = np.concatenate([op_rows, call_rows])
    keys = [events[c].to_numpy() for c in THREAD_COLUMNS]
    code, bound = key_codes(*keys, rows=rows)
    op_code, call_code = code[:op_rows.size], code[op_rows.size:]
    ops = np.bincount(op_code, minlength=bound)
    launches = np.bincount(call_code, minlength=bound)  # (a thread's CUDA runtime/driver calls)
    threads = np.flatnonzero(ops)  # codes ascending: the threads that ran ops, in (rank, pid, tid) order
    busy = iv.coded_union_totals(op_code, events["start_ns"].to_numpy()[op_rows], events["end_ns"].to_numpy()[op_rows],
                                 bound)
    row_of = np.empty(bound, dtype=np.intp)
    row_of[op_code] = np.arange(op_code.size)  # a row of each code (which one does not matter: they share the key)
    at = rows[row_of[threads]]
    out = {c: k[at] for c, k in zip(THREAD_COLUMNS, keys)}
    out.update(ops=ops[threads], busy_ns=busy[threads], launches=launches[threads])
    return pd.DataFrame({c: np.asarray(out[c], dtype=np.int64) for c in cols})
