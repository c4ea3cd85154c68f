"""Cross-rank edges of a job's dependency graph: a collective cannot complete on any rank before every rank
of it has arrived.

Each collective instance is matched across ranks by :func:`tracer.analysis.comm.instances` (process group and
sequence number where the trace gives them, else order; the one matching tracer has). A rank's *part* of an
instance is its comm kernel(s) (on GPUs), else its host record (a ``gloo:*`` / ``nccl:*`` range or
``record_param_comms`` op). For each instance, every rank's part gets a ``collective`` edge from the part of
each other rank: ``src`` = that rank's first node of the instance, ``dst`` = this rank's last node, ``to`` =
"end", and the dependency is met when ``src`` *starts* (``ready_ns`` = the source's start: its arrival), not when
it ends. The binding one (met last) comes from the rank that arrived last, the straggler: the critical path of
an early rank's collective leaves it at the straggler's arrival and goes on through the straggler's work
before it. Edges, not a synthetic join node: no node without a timeline row (findings, replay and the
dashboard map every node to a row), and the straggler is the source of the binding edge by itself.

Only the :data:`MAX_SOURCES` latest arrivals of an instance are sources (the binding edge is the latest one;
the cap keeps a group of n ranks at n × 8 edges instead of n²).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracer.analysis.comm import instances

#: Sources per instance: the parts of its latest-arriving ranks.
MAX_SOURCES = 8
PART_COLUMNS: tuple[str, ...] = ("key", "collective", "pg", "seq", "matched_by", "rank", "first", "last",
                                 "start_ns", "end_ns")


def no_parts() -> pd.DataFrame:
    """An empty parts table (:data:`PART_COLUMNS`)."""
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("collective", "pg", "matched_by") else np.int64)
                         for c in PART_COLUMNS})


def comm_instances(events: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """:func:`~tracer.analysis.comm.instances` where two ranks or more ran them (else an empty frame, "")."""
    df, where = instances(events)
    if df.empty or df["rank"].nunique() < 2:
        return pd.DataFrame(), ""
    return df, where


def parts(inst: pd.DataFrame, where: str, node_of_gpu_row: pd.Series, first_slice: pd.Series,
          last_slice: pd.Series) -> pd.DataFrame:
    """One row per (instance ``key``, ``rank``) that two ranks or more ran: its ``first`` node (the earliest to
    start) and ``last`` node (the latest to end), and their ``start_ns`` / ``end_ns`` (:data:`PART_COLUMNS`)."""
    if inst.empty:
        return no_parts()
    rows = inst["row"].to_numpy()
    if where == "gpu":
        first = node_of_gpu_row.reindex(rows).to_numpy()
        last = first
    else:
        first = first_slice.reindex(rows).to_numpy()
        last = last_slice.reindex(rows).to_numpy()
    ok = ~(pd.isna(first) | pd.isna(last))
    df = inst[ok].assign(first=np.asarray(first[ok], np.int64), last=np.asarray(last[ok], np.int64))
    if df.empty:
        return no_parts()
    by = ["key", "rank"]
    head = df.sort_values([*by, "start_ns", "end_ns"], kind="stable").drop_duplicates(by, keep="first")
    tail = df.sort_values([*by, "end_ns", "start_ns"], kind="stable").drop_duplicates(by, keep="last")
    p = head[["key", "collective", "pg", "seq", "matched_by", "rank", "first", "start_ns"]].merge(
        tail[["key", "rank", "last", "end_ns"]], on=by)
    p = p[p.groupby("key")["rank"].transform("nunique").to_numpy() > 1]
    p = p.sort_values(["start_ns", "key", "rank"], kind="stable").reset_index(drop=True)
    for c in ("key", "seq", "rank", "first", "last", "start_ns", "end_ns"):
        p[c] = p[c].astype(np.int64)
    return p[list(PART_COLUMNS)]


def edges(p: pd.DataFrame) -> pd.DataFrame:
    """``collective`` edges between the parts ``p`` of each instance (columns src, dst, type, to, inferred:
    matched by order, not by sequence number, is inferred)."""
    if p.empty:
        return pd.DataFrame({"src": np.zeros(0, np.int64), "dst": np.zeros(0, np.int64), "type": [], "to": [],
                             "inferred": np.zeros(0, bool)})
    late = p.sort_values(["key", "start_ns", "rank"], ascending=[True, False, True], kind="stable")
    late = late[late.groupby("key").cumcount().to_numpy() < MAX_SOURCES]
    pairs = late[["key", "rank", "first", "matched_by"]].merge(p[["key", "rank", "last"]], on="key",
                                                               suffixes=("_src", "_dst"))
    pairs = pairs[pairs["rank_src"].to_numpy() != pairs["rank_dst"].to_numpy()]
    return pd.DataFrame({"src": pairs["first"].to_numpy(np.int64), "dst": pairs["last"].to_numpy(np.int64),
                         "type": "collective", "to": "end",
                         "inferred": (pairs["matched_by"] != "seq").to_numpy()})
