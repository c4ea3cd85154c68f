"""Why work did not run at once: findings read from the dependency graph (issue 10, part 3).

Three things are looked at, and each gets a finding only where the graph shows the reason:

- every **memcpy** whose time was not hidden behind compute on its GPU (``exposed_ns`` > :data:`MIN_EXPOSED_NS`):
  ``pageable`` (host memory not pinned: the copy is staged synchronously, the host waits), else ``same_stream``
  (it queued behind, or held up, compute on its own stream). A copy that waited for its producer on another
  stream and found no compute to hide behind (the last copy of a side-stream run) has no reason to fix: none.
- every **idle gap** of a GPU (no kernel, copy or memset on any of its streams) longer than ``min_gap_ns``; the
  op that ended it says why through its binding edge (the dependency met last): ``host_sync`` (launched by a
  host thread that had been blocked in a synchronous call until the GPU ran dry), ``launch_bound`` (the GPU
  waited for the host to launch, no sync in the way), ``event_wait`` (it waited for an event on another stream).
- every **kernel that waited** longer than ``min_gap_ns`` while ready (its stream and its launch done) with
  other streams' kernels occupying its GPU the whole time, starting as one of them drained, and no edge between
  them. The kernels' *demand* (their share of the GPU's block slots, :mod:`tracer.explain.occupancy`, given as
  ``demand``) says why: ``gpu_full`` (the others held >= :data:`FULL_HELD` of the slots over the wait: no room,
  no gain from more streams), ``serialised`` (room was left: something else serialised them), or
  ``one_at_a_time`` (no launch figures: not known).
- every **run of kernels queued on one stream** (each launched before the one before it ended) whose kernels
  each leave room for another (demand <= :data:`ROOMY`) while the GPU's kernels held less than that share of
  it: ``one_stream`` (streams would let them share the GPU, if the work is independent, which a trace without
  tensor ids cannot show).

Each finding names its nodes (graph node ids, the subject first; the replay rewrites their edges) and timeline
rows, the time it cost (``cost_ns``) and the part of that on the critical path (``path_ns``), and a one-line fix.
Pure functions of a :class:`Graph` and a :class:`CriticalPath`: no printing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.explain.critical import CriticalPath, Walker, _binding, critical_path
from tracer.explain.graph import EDGE_TYPES, HOST_KINDS, Graph
from tracer.explain.occupancy import demand_of_nodes

#: Finding kinds: (words shown, the fix in one line), in the order a tie in cost lists them.
KINDS: dict[str, tuple[str, str]] = {
    "pageable": ("pageable, synchronous",
                 "pin the host buffer (tensor.pin_memory() / pin_memory=True) and copy with non_blocking=True, "
                 "on a side stream that waits on an event from the producer"),
    "same_stream": ("same stream as the compute it queued behind",
                    "move the copy to a side stream that waits on an event recorded after its producer "
                    "(stream.wait_event / wait_stream; tensor.record_stream), into pinned memory"),
    "host_sync": ("the host was blocked in a synchronous call before the next launch",
                  "remove the sync (.item(), .cpu(), print of a GPU tensor, torch.cuda.synchronize) from the loop, "
                  "or copy with non_blocking=True into pinned memory and sync once, later"),
    "launch_bound": ("launch-bound: the GPU waited for the host to launch",
                     "CUDA graphs (torch.cuda.CUDAGraph, torch.compile mode='reduce-overhead') or fewer, larger "
                     "kernels (fusion, bigger batches); move host work off the launching thread"),
    "event_wait": ("waiting on an event from another stream",
                   "record the event earlier (split the producer) or give this GPU independent work meanwhile"),
    "gpu_full": ("the GPU was full: kernels ran one at a time, no gain from more streams",
                 "streams cannot help (the kernels beside it held the GPU's block slots): make the kernels cheaper "
                 "(lower precision, fusion, smaller work) or spread the work over another GPU"),
    "serialised": ("kernels ran one at a time though the GPU had room",
                   "look for what serialised them: a false dependency (a shared stream or event, the legacy default "
                   "stream), or more streams than hardware queues (CUDA_DEVICE_MAX_CONNECTIONS)"),
    "one_at_a_time": ("kernels ran one at a time (no launch figures given: whether the GPU was full is not known)",
                      "`tracer explain` on the Kineto JSON or nsys SQLite trace reads the kernels' launch figures "
                      "(grid, block, registers) and tells a full GPU (no gain from streams) from serialised kernels"),
    "one_stream": ("kernels that leave the GPU mostly empty queued on one stream",
                   "if the work is independent, spread it over streams (torch.cuda.Stream per chain, with events "
                   "where chains meet) or batch it into larger kernels"),
    "straggler": ("collective waited for a straggler rank",
                  "even out the straggler's work before the collective (its preceding work is named: uneven shards, "
                  "data loading, a slower GPU or host), or issue the collective asynchronously and give the other "
                  "ranks independent work meanwhile"),
    "exposed_comm": ("communication exposed behind no compute",
                     "overlap it with independent compute: let DDP's gradient buckets all-reduce during the backward "
                     "(bucket_cap_mb), issue the collective with async_op=True and compute before wait(), or prefetch "
                     "the next layer's parameters (FSDP)"),
}
FINDING_COLUMNS: tuple[str, ...] = (
    "kind", "reason", "node", "nodes", "rows", "name", "rank", "device", "stream", "start_ns", "end_ns", "cost_ns",
    "path_ns", "evidence", "fix",
)
GROUP_COLUMNS: tuple[str, ...] = ("kind", "reason", "count", "cost_ns", "path_ns", "fix", "example")
#: Copy time not hidden behind compute below this is timing noise, not a finding.
MIN_EXPOSED_NS = 1_000
#: Default threshold of an idle gap or a kernel's wait, ns.
MIN_GAP_NS = 50_000
#: A ready kernel counts as held back by other streams' kernels if they covered this share of its wait.
FULL_COVER = 0.9
#: ... and started at most this long after one of them ended (or in its second half).
FREED_NS = 20_000
#: A kernel of at most this demand leaves room for another as big; a one_stream run needs the GPU this empty.
ROOMY = 0.5
#: ... and the GPU counts as full if those kernels held this share of its block slots over the wait (occupancy).
FULL_HELD = 0.9
_GPU = ("kernel", "memcpy", "memset")


@dataclass(frozen=True)
class _Nodes:
    """The graph's node columns the findings read, as arrays (one lookup per finding, not a pandas one)."""

    frame: pd.DataFrame
    kind: np.ndarray
    name: np.ndarray
    row: np.ndarray
    rank: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    src_mem: np.ndarray
    dst_mem: np.ndarray
    start: np.ndarray
    end: np.ndarray
    blocking: np.ndarray

    @classmethod
    def of(cls, nodes: pd.DataFrame) -> _Nodes:
        def text(c: str) -> np.ndarray:
            a: np.ndarray = nodes[c].astype(str).to_numpy(dtype=object)
            return a

        def num(c: str) -> np.ndarray:
            a: np.ndarray = nodes[c].to_numpy(np.int64)
            return a

        return cls(nodes, text("kind"), text("name"), num("row"), num("rank"), num("pid"), num("tid"), num("device"),
                   num("stream"), text("src_mem"), text("dst_mem"), num("start_ns"), num("end_ns"),
                   nodes["blocking"].to_numpy(bool))


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.1f} µs"


def findings(graph: Graph, path: CriticalPath | None = None, *, min_gap_ns: int = MIN_GAP_NS,
             demand: Mapping[Any, float] | None = None) -> pd.DataFrame:
    """The findings of ``graph``, costliest first (by time on ``path``, then in all), one row each
    (:data:`FINDING_COLUMNS`). ``path`` (default: the whole trace's) gives ``path_ns``; for a path of a window or
    range, only the findings whose time falls in it are kept. ``min_gap_ns`` is the shortest idle gap or kernel
    wait reported. ``demand``: each kernel's share of its GPU's block slots by correlation id
    (:func:`tracer.explain.occupancy.launch_demand`): without it, kernels that ran one at a time are
    ``one_at_a_time`` (full GPU or serialised is not known)."""
    if path is None:
        path = critical_path(graph)
    nodes, edges = graph.nodes, graph.edges
    n = len(nodes)
    s_src, s_ready, s_type = _binding(edges, n, "start")
    rows: list[dict[str, Any]] = []
    nd = _Nodes.of(nodes)
    kdem = kernel_demand_of(nodes, demand)
    is_gpu = nodes["kind"].astype(str).isin(_GPU).to_numpy() & (nodes["device"].to_numpy() >= 0)
    threads: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def host_threads() -> dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        # (once for all the GPUs: a job's 64 GPUs each sorting every host node cost 20 s of 32)
        if not threads:
            threads.update(_threads(nodes))
        return threads

    for _key, dev in nodes[is_gpu].groupby(["rank", "device"], observed=True, sort=True):
        rows += _copy_findings(nd, edges, dev, s_src, s_type)
        rows += _gap_findings(nd, edges, dev, s_src, s_type, min_gap_ns, host_threads)
        rows += _full_findings(nd, dev, s_src, s_ready, s_type, min_gap_ns, kdem)
        rows += _one_stream_findings(nd, dev, s_src, s_type, min_gap_ns, kdem)
        rows += _exposed_comm_findings(nd, dev, min_gap_ns)
    rows += _straggler_findings(graph, nd, min_gap_ns)
    f = pd.DataFrame(rows, columns=[c for c in FINDING_COLUMNS if c not in ("path_ns", "reason", "fix")])
    lo, hi = path.window.start_ns, path.window.end_ns
    if len(f) and (lo is not None or hi is not None):
        # a window's findings: those whose time falls in it (a range's path may run past its end: up to that)
        hi = None if hi is None else max(hi, path.end_ns)
        keep = np.ones(len(f), bool)
        if lo is not None:
            keep &= f["end_ns"].to_numpy(np.int64) > lo
        if hi is not None:
            keep &= f["start_ns"].to_numpy(np.int64) < hi
        f = f[keep]
    f.insert(1, "reason", [KINDS[k][0] for k in f["kind"]])
    f["path_ns"] = _on_path(f, path)
    # (a one_stream finding names every kernel of its run: its path time is bounded by what it could give back)
    f["path_ns"] = np.where(f["kind"] == "one_stream", np.minimum(f["path_ns"], f["cost_ns"]), f["path_ns"])
    f["fix"] = [KINDS[k][1] for k in f["kind"]]
    order = list(KINDS)
    f["_k"] = [order.index(k) for k in f["kind"]]
    f = f.sort_values(["path_ns", "cost_ns", "_k", "start_ns"], ascending=[False, False, True, True], kind="stable")
    f = f.drop(columns="_k").reset_index(drop=True)
    for c in ("start_ns", "end_ns", "cost_ns", "path_ns", "node", "rank", "device", "stream"):
        f[c] = f[c].astype(np.int64)
    return f[list(FINDING_COLUMNS)]


def group_findings(f: pd.DataFrame) -> pd.DataFrame:
    """One row per kind (:data:`GROUP_COLUMNS`): how many, their summed cost and time on the path, the fix,
    and the costliest one's subject as an ``example``; ranked by time on the path, then cost."""
    if f.empty:
        return pd.DataFrame({c: [] for c in GROUP_COLUMNS})
    g = f.groupby("kind", sort=False).agg(count=("node", "size"), cost_ns=("cost_ns", "sum"),
                                           path_ns=("path_ns", "sum"), example=("name", "first"))
    g = g.reset_index()
    g["reason"] = [KINDS[k][0] for k in g["kind"]]
    g["fix"] = [KINDS[k][1] for k in g["kind"]]
    g = g.sort_values(["path_ns", "cost_ns"], ascending=[False, False], kind="stable").reset_index(drop=True)
    return g[list(GROUP_COLUMNS)]


def to_dict(f: pd.DataFrame) -> dict[str, Any]:
    """Findings as plain data (``tracer explain --json``): ``groups`` and every finding."""
    g = group_findings(f)
    items = []
    for r in f.itertuples(index=False):
        d = r._asdict()
        d["nodes"] = [int(x) for x in d["nodes"]]
        d["rows"] = [int(x) for x in d["rows"]]
        items.append({k: (int(v) if isinstance(v, np.integer) else v) for k, v in d.items()})
    groups = [{k: (int(v) if isinstance(v, np.integer) else v) for k, v in r._asdict().items()}
              for r in g.itertuples(index=False)]
    return {"groups": groups, "findings": items}


def _row(nd: _Nodes, kind: str, subject: int, others: list[int], start: int, end: int, cost: int,
         evidence: str) -> dict[str, Any]:
    ids = list(dict.fromkeys([subject, *others]))
    return {"kind": kind, "node": subject, "nodes": tuple(ids), "rows": tuple(int(nd.row[i]) for i in ids),
            "name": nd.name[subject], "rank": int(nd.rank[subject]),
            "device": int(nd.device[subject]), "stream": int(nd.stream[subject]),
            "start_ns": start, "end_ns": end, "cost_ns": cost, "evidence": evidence}


def _stream_neighbours(edges: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """For each GPU node: the previous op of its stream (``prev``), and the next (``nxt``)."""
    st = edges[(edges["type"] == "stream").to_numpy()]
    prev = pd.Series(st["src"].to_numpy(), index=st["dst"].to_numpy())
    nxt = pd.Series(st["dst"].to_numpy(), index=st["src"].to_numpy())
    return prev, nxt


def _copy_findings(nd: _Nodes, edges: pd.DataFrame, dev: pd.DataFrame, s_src: np.ndarray,
                   s_type: np.ndarray) -> list[dict[str, Any]]:
    kind = dev["kind"].astype(str).to_numpy()
    copies = dev[kind == "memcpy"]
    if copies.empty:
        return []
    compute = _compute(dev)
    cs, ce = copies["start_ns"].to_numpy(np.int64), copies["end_ns"].to_numpy(np.int64)
    hidden = covered(cs, ce, compute)
    exposed = (ce - cs) - hidden
    prev, nxt = _stream_neighbours(edges)
    stream_code = EDGE_TYPES.index("stream")
    node_kind = nd.kind
    hw = edges[(edges["type"] == "host_wait").to_numpy()]
    waiter = pd.Series(hw["dst"].to_numpy(), index=hw["src"].to_numpy())
    waiter = waiter[~waiter.index.duplicated()]
    memo_back: dict[int, int] = {}
    memo_ahead: dict[int, int] = {}
    out: list[dict[str, Any]] = []
    for i, c in enumerate(copies.index.to_numpy(np.int64)):
        if exposed[i] <= MIN_EXPOSED_NS:
            continue
        c = int(c)
        what = f"{_us(exposed[i])} of its {_us(ce[i] - cs[i])} ran beside no compute"
        pageable = "pageable" in (nd.src_mem[c], nd.dst_mem[c])
        if pageable:
            others = [int(waiter[c])] if c in waiter.index else []
            how = (f"; the host waited in {nd.name[others[0]]} until it ended" if others
                   else "; CUDA stages a pageable copy synchronously")
            out.append(_row(nd, "pageable", c, others, int(cs[i]), int(ce[i]), int(exposed[i]),
                            f"{nd.name[c]}: {what}{how}"))
            continue
        # same stream: it waited (through the copies queued before it) for a kernel before it on its stream, or
        # a kernel after it waited (through the copies after it) for it
        behind = _stream_bound(c, prev, s_src, s_type, node_kind, stream_code, memo_back, back=True)
        ahead = _stream_bound(c, nxt, s_src, s_type, node_kind, stream_code, memo_ahead, back=False)
        if behind < 0 and ahead < 0:
            continue
        parts = []
        if behind >= 0:
            parts.append(f"queued behind {nd.name[behind]}")
        if ahead >= 0:
            parts.append(f"held up {nd.name[ahead]}")
        out.append(_row(nd, "same_stream", c, [x for x in (behind, ahead) if x >= 0], int(cs[i]), int(ce[i]),
                        int(exposed[i]), f"on stream {int(nd.stream[c])} it {' and '.join(parts)}: {what}"))
    return out


def _compute(dev: pd.DataFrame) -> iv.Intervals:
    """The GPU's compute: its kernels that are not communication (the one definition: ``tracer summary``'s)."""
    k = dev[(dev["kind"].astype(str) == "kernel").to_numpy() & (dev["collective"].astype(str) == "").to_numpy()]
    return iv.union(k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64))


def _exposed_comm_findings(nd: _Nodes, dev: pd.DataFrame, min_gap_ns: int) -> list[dict[str, Any]]:
    """``exposed_comm``: a communication kernel (NCCL/RCCL) of which more than ``min_gap_ns`` ran beside no
    compute on its GPU (the ``comm`` analysis' exposed comm, per kernel). In a job, the part of it spent waiting
    for a straggler is in it too; the ``straggler`` finding names that part."""
    is_comm = (dev["kind"].astype(str) == "kernel").to_numpy() & (dev["collective"].astype(str) != "").to_numpy()
    comm = dev[is_comm]
    if comm.empty:
        return []
    cs, ce = comm["start_ns"].to_numpy(np.int64), comm["end_ns"].to_numpy(np.int64)
    exposed = (ce - cs) - covered(cs, ce, _compute(dev))
    out: list[dict[str, Any]] = []
    for i, c in enumerate(comm.index.to_numpy(np.int64)):
        if exposed[i] <= max(min_gap_ns, MIN_EXPOSED_NS):
            continue
        c = int(c)
        what = str(comm["collective"].iloc[i])
        out.append(_row(nd, "exposed_comm", c, [], int(cs[i]), int(ce[i]), int(exposed[i]),
                        f"{what} on stream {int(nd.stream[c])}: {_us(exposed[i])} of its {_us(ce[i] - cs[i])} ran "
                        "beside no compute on this GPU"))
    return out


def _stream_bound(c: int, step: pd.Series, s_src: np.ndarray, s_type: np.ndarray, node_kind: np.ndarray,
                  stream_code: int, memo: dict[int, int], *, back: bool) -> int:
    """The kernel that copy ``c`` queued behind on its stream (``back``; ``step``: each op's predecessor) or that
    queued behind it (else; ``step``: each op's successor), through other copies and memsets on the way, each
    link the binding (last met) dependency of the later op; -1 if none. ``memo`` keeps the answers per copy, so
    a run of copies is walked once."""
    walked: list[int] = []
    x, found = c, -1
    while True:
        if x in memo:
            found = memo[x]
            break
        walked.append(x)
        if x not in step.index:
            break
        y = int(step[x])
        later, earlier = (x, y) if back else (y, x)
        if s_type[later] != stream_code or s_src[later] != earlier:
            break
        if node_kind[y] == "kernel":
            found = y
            break
        if node_kind[y] not in ("memcpy", "memset"):
            break
        x = y
    for w in walked:
        memo[w] = found
    return found


def covered(starts: np.ndarray, ends: np.ndarray, cover: iv.Intervals) -> np.ndarray:
    """How much of each interval [starts[i], ends[i]) the normalised set ``cover`` covers (vectorised: a running
    total of the cover's length, read at both ends; :mod:`tracer.explain.lines` counts exposed copies with it)."""
    cs, ce = cover
    if cs.size == 0:
        return np.zeros(len(starts), np.int64)
    cum = np.concatenate([[0], np.cumsum(ce - cs)])

    def upto(t: np.ndarray) -> np.ndarray:
        # covered length of (-inf, t): whole intervals ending by t, plus the part of the one holding t
        k = np.searchsorted(cs, t, side="right")  # intervals that start before t
        full = cum[k]
        last = np.maximum(k - 1, 0)
        over = np.where(k > 0, np.maximum(ce[last] - t, 0), 0)
        covered: np.ndarray = full - over
        return covered

    got: np.ndarray = upto(ends) - upto(starts)
    return got


def _gap_findings(nd: _Nodes, edges: pd.DataFrame, dev: pd.DataFrame, s_src: np.ndarray,
                  s_type: np.ndarray, min_gap_ns: int,
                  host_threads: Callable[[], dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]],
                  ) -> list[dict[str, Any]]:
    busy = iv.union(dev["start_ns"].to_numpy(np.int64), dev["end_ns"].to_numpy(np.int64))
    gap_s, gap_e = busy[1][:-1], busy[0][1:]
    big = (gap_e - gap_s) > min_gap_ns
    if not big.any():
        return []
    order = dev.sort_values(["start_ns", "end_ns"], kind="stable")
    first_start = order["start_ns"].to_numpy(np.int64)
    ids = order.index.to_numpy(np.int64)
    start, end, blocking = nd.start, nd.end, nd.blocking
    threads = host_threads()
    types = list(EDGE_TYPES)
    ew = edges[(edges["type"] == "event_wait").to_numpy()]
    inferred = dict(zip(zip(ew["src"].tolist(), ew["dst"].tolist()), ew["inferred"].tolist()))
    out: list[dict[str, Any]] = []
    for g0, g1 in zip(gap_s[big].tolist(), gap_e[big].tolist(), strict=True):
        op = int(ids[np.searchsorted(first_start, g1, side="left")])  # the op that ended the gap
        src = int(s_src[op])
        if src < 0:
            continue
        edge = types[int(s_type[op])]
        gap = g1 - g0
        if edge == "event_wait":
            how = ("inferred from timing: the trace has no CUDA sync records" if inferred.get((src, op))
                   else "a recorded cudaStreamWaitEvent")
            out.append(_row(nd, "event_wait", op, [src], g0, g1, gap,
                            f"{nd.name[op]} waited for {nd.name[src]} on stream "
                            f"{int(nd.stream[src])} (device {int(nd.device[src])}; {how}): the GPU "
                            f"idled {_us(gap)}"))
            continue
        if edge != "launch" or end[src] <= g0:
            continue  # (launched before the GPU ran dry, or held by its stream: the graph has no reason; none)
        # the launching thread's slices in the gap; a blocking call among them that returned after the GPU
        # ran dry is what kept the host from launching sooner
        key = (int(nd.rank[src]), int(nd.pid[src]), int(nd.tid[src]))
        t_ids, t_start, t_end = threads[key]
        on_thread = t_ids[np.searchsorted(t_end, g0, side="right"):np.searchsorted(t_start, start[src], side="left")]
        sync = on_thread[blocking[on_thread] & (end[on_thread] >= g0) & (end[on_thread] <= start[src])]
        if len(sync):
            b = int(sync[np.argmax(end[sync])])
            after = on_thread[start[on_thread] >= end[b]].tolist()
            out.append(_row(nd, "host_sync", op, [src, b, *after], g0, g1, gap,
                            f"the host was in {nd.name[b]} until {_us(end[b] - g0)} into the gap, then "
                            f"launched {nd.name[op]}: the GPU idled {_us(gap)}"))
            continue
        busy_host = int(np.minimum(end[on_thread], g1).sum() - np.maximum(start[on_thread], g0).sum())
        traced = f"traced host intervals cover {_us(busy_host)} of it" if len(on_thread) else "no traced host work"
        out.append(_row(nd, "launch_bound", op, [src, *on_thread.tolist()], g0, g1, gap,
                        f"{nd.name[op]} was launched by {nd.name[src]} "
                        f"{_us(end[src] - g0)} after the GPU ran dry ({traced}): the GPU idled {_us(gap)}"))
    return out


def _threads(nodes: pd.DataFrame) -> dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Host nodes per thread (rank, pid, tid): ids, starts and ends in time order (a thread's slices do not
    overlap, so both are sorted)."""
    host = nodes[nodes["kind"].isin(HOST_KINDS).to_numpy()]
    host = host.sort_values(["rank", "pid", "tid", "start_ns", "end_ns"], kind="stable")
    out = {}
    for key, h in host.groupby(["rank", "pid", "tid"], sort=False, observed=True):
        out[(int(key[0]), int(key[1]), int(key[2]))] = (
            h.index.to_numpy(np.int64), h["start_ns"].to_numpy(np.int64), h["end_ns"].to_numpy(np.int64))
    return out


def _full_findings(nd: _Nodes, dev: pd.DataFrame, s_src: np.ndarray, s_ready: np.ndarray,
                   s_type: np.ndarray, min_gap_ns: int, kdem: np.ndarray) -> list[dict[str, Any]]:
    kernels = dev[(dev["kind"].astype(str) == "kernel").to_numpy()]
    if kernels["stream"].nunique() < 2:
        return []
    ids = kernels.index.to_numpy(np.int64)
    ks = kernels["start_ns"].to_numpy(np.int64)
    ready = np.where(s_src[ids] >= 0, s_ready[ids], ks)
    wait = ks - ready
    event_code = EDGE_TYPES.index("event_wait")
    late = np.flatnonzero((wait > min_gap_ns) & (s_type[ids] != event_code))
    if not len(late):
        return []
    stream = kernels["stream"].to_numpy(np.int64)
    ke = kernels["end_ns"].to_numpy(np.int64)
    dem = kdem[ids]
    out: list[dict[str, Any]] = []
    for j in late.tolist():
        lo, hi = int(ready[j]), int(ks[j])
        other = np.flatnonzero((stream != stream[j]) & (ks < hi) & (ke > lo))
        if not len(other):
            continue
        cover = iv.total(iv.clip(iv.union(ks[other], ke[other]), lo, hi))
        # it must also have started as one of them drained (in its second half, or just after its end): it got
        # room then, as the other's last blocks finished
        drained = (ke[other] >= hi - FREED_NS) & (ke[other] - hi <= (ke[other] - ks[other]) // 2)
        if cover < FULL_COVER * (hi - lo) or not drained.any():
            continue
        k = int(ids[j])
        streams = ", ".join(str(s) for s in sorted(set(stream[other].tolist())))
        seen = (f"{nd.name[k]} was ready {_us(hi - lo)} before it started; kernels of stream(s) {streams} ran on its "
                f"GPU {100 * cover / (hi - lo):.0f}% of that time and nothing orders them")
        d_other = dem[other]
        if np.isnan(d_other).any() or np.isnan(dem[j]):
            kind, why = "one_at_a_time", "occupancy: no launch figures for these kernels, so not known"
        else:
            held = _held(ks[other], ke[other], d_other, lo, hi)
            kind = "gpu_full" if held >= FULL_HELD else "serialised"
            why = (f"occupancy: they held {100 * held:.0f}% of the GPU's block slots over the wait, its own demand "
                   f"is {100 * dem[j]:.0f}%: " + ("no room" if kind == "gpu_full" else "room was left"))
        out.append(_row(nd, kind, k, [int(x) for x in ids[other][-3:]], lo, hi, hi - lo, f"{seen}; {why}"))
    return out


def _one_stream_findings(nd: _Nodes, dev: pd.DataFrame, s_src: np.ndarray, s_type: np.ndarray, min_gap_ns: int,
                         kdem: np.ndarray) -> list[dict[str, Any]]:
    """Runs of kernels on one stream, each queued behind the one before (its binding edge is its stream: it was
    launched before that one ended), each with demand <= :data:`ROOMY` (two or more fit at once), while the
    kernels of the whole GPU held less than :data:`ROOMY` of its block slots: the GPU had room the stream could
    not use. Whether the work is independent the trace cannot show (no tensor ids): the fix says "if"."""
    kernels = dev[(dev["kind"].astype(str) == "kernel").to_numpy()].sort_values(["stream", "start_ns"],
                                                                               kind="stable")
    if kernels.empty:
        return []
    ids = kernels.index.to_numpy(np.int64)
    stream = kernels["stream"].to_numpy(np.int64)
    ks, ke = kernels["start_ns"].to_numpy(np.int64), kernels["end_ns"].to_numpy(np.int64)
    dem = kdem[ids]
    stream_code = EDGE_TYPES.index("stream")
    prev = np.concatenate([[-1], ids[:-1]])
    queued = (s_type[ids] == stream_code) & (s_src[ids] == prev) & np.concatenate([[False], stream[1:] == stream[:-1]])
    roomy = dem <= ROOMY  # (NaN: unknown, not roomy)
    # a run: a roomy kernel, then roomy kernels each queued behind the one before
    link = queued & roomy & np.concatenate([[False], roomy[:-1]])
    starts = np.flatnonzero(~link)
    bounds = np.append(starts, len(ids))
    all_s, all_e = dev["start_ns"].to_numpy(np.int64), dev["end_ns"].to_numpy(np.int64)
    all_k = (dev["kind"].astype(str) == "kernel").to_numpy()
    all_d = np.nan_to_num(kdem[dev.index.to_numpy(np.int64)], nan=1.0)
    out: list[dict[str, Any]] = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if b - a < 2 or not roomy[a]:
            continue
        lo, hi = int(ks[a]), int(ke[b - 1])
        work = float(((ke[a:b] - ks[a:b]) * dem[a:b]).sum())  # the run's time at full occupancy
        cost = int(hi - lo - max(work, float((ke[a:b] - ks[a:b]).max())))
        if cost <= min_gap_ns:
            continue
        on = all_k & (all_s < hi) & (all_e > lo)
        held = _held(all_s[on], all_e[on], all_d[on], lo, hi)
        if held >= ROOMY:
            continue
        k = int(ids[a])
        out.append(_row(nd, "one_stream", k, ids[a + 1:b].tolist(), lo, hi, cost,
                        f"{b - a:,} kernels on stream {int(stream[a])} ran one after another, each queued behind the "
                        f"one before (demand {100 * float(np.min(dem[a:b])):.0f}-{100 * float(np.max(dem[a:b])):.0f}% "
                        f"of the GPU's block slots): the GPU's kernels held {100 * held:.0f}% of them over "
                        f"{_us(hi - lo)}; at full occupancy the run's work is {_us(work)}"))
    return out


def _held(starts: np.ndarray, ends: np.ndarray, demand: np.ndarray, lo: int, hi: int) -> float:
    """The share of a GPU's block slots that kernels [starts, ends) with ``demand`` held over [lo, hi), on
    average: their summed demand at each moment, capped at 1 (the GPU is full), integrated (a +/- sweep)."""
    s, e = np.clip(starts, lo, hi), np.clip(ends, lo, hi)
    t = np.concatenate([s, e])
    d = np.concatenate([demand, -demand])
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    load = np.minimum(np.cumsum(d)[:-1], 1.0)
    return float((np.diff(t) * load).sum() / max(1, hi - lo))


def kernel_demand_of(nodes: pd.DataFrame, demand: Mapping[Any, float] | None) -> np.ndarray:
    """Each node's kernel demand (:mod:`tracer.explain.occupancy`: its share of the GPU's block slots alone) from
    ``demand`` (by correlation id, or by (rank, correlation id) for a job); NaN where unknown (no launch figures,
    or not a kernel)."""
    return demand_of_nodes(nodes, demand)


def _straggler_findings(graph: Graph, nd: _Nodes, min_gap_ns: int) -> list[dict[str, Any]]:
    """``straggler``: a collective instance of a job whose last rank arrived more than ``min_gap_ns`` after the
    first. The subject is the straggler's part (its first node); the time it cost is what the early ranks' parts
    spent waiting for it to arrive (each from its own start to the straggler's, summed over the ranks:
    rank-time lost), from the earliest arrival to the last; the evidence names what the straggler was doing
    before, walked back along its binding edges (as the critical path goes) to the earliest arrival."""
    parts = graph.collectives
    if parts.empty:
        return []
    walker: Walker | None = None
    out: list[dict[str, Any]] = []
    p = parts.sort_values(["key", "start_ns", "rank"], ascending=[True, False, True], kind="stable")
    for _key, inst in p.groupby("key", sort=False):
        start = inst["start_ns"].to_numpy(np.int64)
        end = inst["end_ns"].to_numpy(np.int64)
        rank = inst["rank"].to_numpy(np.int64)
        arrived, first = int(start[0]), int(start.min())  # (row 0: the latest start, the lowest rank among equals)
        if arrived - first <= min_gap_ns:
            continue
        # a part that ended before the straggler arrived says the clocks disagree (its edge was dropped too):
        # its wait is not known, not counted
        consistent = end[1:] >= arrived
        wait = np.where(consistent, arrived - start[1:], 0)
        waited = int(wait.sum())
        if waited <= min_gap_ns:
            continue
        subject = int(inst["first"].iloc[0])
        walker = walker or Walker(graph)
        before = walker.walk(subject, arrived, first)
        doing = _doing(nd, before)
        early = ", ".join(f"rank {int(r)} {_us(int(w))}" for r, w in zip(rank[1:], wait) if w > 0)
        if not consistent.all():
            early += (f"; not counted: rank(s) {', '.join(str(int(r)) for r in rank[1:][~consistent])}, whose part "
                      "ended before it arrived (the ranks' clocks disagree)")
        r0 = inst.iloc[0]
        what = f"{r0['collective']} #{int(r0['seq'])}" + (f" of process group {r0['pg']}" if r0["pg"] else "")
        out.append(_row(nd, "straggler", subject,
                        [*inst["last"].iloc[1:].astype(int).tolist(), *dict.fromkeys(before.node)], first, arrived,
                        waited,
                        f"{what} (matched by {r0['matched_by']}): rank {int(rank[0])} arrived "
                        f"{_us(arrived - first)} after the first; waiting for it: {early} "
                        f"({_us(waited)} in all); before it, rank {int(rank[0])} was in {doing}"))
    return out


def _doing(nd: _Nodes, walked: Any) -> str:
    """What a walk back passed through, the three largest first: a node's name and label, or an edge's lag
    label (a host gap, a launch's lag)."""
    if not walked.node:
        return "no traced work that held it up (untraced time, or the start of the trace)"
    dur = np.asarray(walked.e, np.int64) - np.asarray(walked.s, np.int64)
    what = [f"{nd.name[n]} ({lb})" if not edge else lb
            for n, lb, edge in zip(walked.node, walked.label, walked.edge)]
    by = pd.Series(dur).groupby(pd.Series(what), sort=False).sum().sort_values(ascending=False, kind="stable")
    return ", ".join(f"{name} {_us(int(ns))}" for name, ns in by.head(3).items())


def _on_path(f: pd.DataFrame, path: CriticalPath) -> np.ndarray:
    """Per finding: the time of the critical path spent on its nodes within its [start_ns, end_ns). The path's
    pieces do not overlap, so the clipped pieces of a finding's nodes add up without double counting."""
    if f.empty:
        return np.zeros(0, np.int64)
    pairs = pd.DataFrame({"i": np.repeat(np.arange(len(f)), [len(x) for x in f["nodes"]]),
                          "node": np.concatenate([np.asarray(x, np.int64) for x in f["nodes"]])})
    pairs["lo"] = f["start_ns"].to_numpy(np.int64)[pairs["i"].to_numpy()]
    pairs["hi"] = f["end_ns"].to_numpy(np.int64)[pairs["i"].to_numpy()]
    m = pairs.merge(path.pieces[["node", "start_ns", "end_ns"]], on="node", how="inner")
    clipped = np.maximum(np.minimum(m["end_ns"].to_numpy(np.int64), m["hi"].to_numpy(np.int64))
                         - np.maximum(m["start_ns"].to_numpy(np.int64), m["lo"].to_numpy(np.int64)), 0)
    out = np.bincount(m["i"].to_numpy(np.int64), weights=clipped, minlength=len(f))
    return np.rint(out).astype(np.int64)
