"""What-if replay: a discrete-event pass over a run's dependency graph under a changed plan (issue 10, part 4).

Every node of the graph (:func:`tracer.explain.build_graph`) is replayed in dependency order: it starts when its
incoming edges allow, after the overhead the trace showed on its binding edge (a launch's latency, a stream's
gap, a host gap), and its resource lets it run:

- **one GPU's SMs** are shared by the kernels running on it at once: each kernel has a *demand* (the share of
  the GPU it keeps busy alone, :mod:`tracer.explain.occupancy`), and while the demands of the running kernels
  sum to more than 1 each progresses at 1 / sum of its solo speed (a kernel that fills the GPU does not get
  faster beside another). Kernels without launch figures count as filling the GPU (demand 1);
- **copy engines**, one per direction (HtoD, DtoH, DtoD ...) per device, shared the same way (demand 1 each);
- **each host thread** runs its slices one after another (its ``thread`` edges); a blocking call ends when
  both its own time and the GPU op it waited for (``host_wait``) are done;
- **collectives** (a job): a rank's part of a collective ends no earlier than its own start + its *transfer* (its
  measured time from the last arrival among the ranks to its end), nor than every other rank's replayed arrival
  (that part's start, a ``collective`` edge) + that transfer: the wait before the last arrival is recomputed, the
  transfer taken as measured. A comm kernel keeps its share of its GPU while it waits.

Durations are *solo* durations: a kernel's measured time with the slowdown the sharing model gives for the
kernels it overlapped in the trace taken out, so that an unchanged plan replays to the measured times.

A :class:`Plan` rewrites nodes and edges before the pass (:data:`PLANS`): copies on a side stream, pinned
memory, host syncs removed, independent chains spread over N streams, a job's work evened out over its ranks.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracer.errors import TracerError
from tracer.explain.graph import Graph
from tracer.explain.occupancy import demand_of_nodes
from tracer.timeline.keys import key_codes

#: What-if plans and what they do (``--what-if NAME[=VALUE]``).
PLANS: dict[str, str] = {
    "side-stream": "every copy runs on a side stream of its device, after an event from the kernel that produced "
                   "its data (DtoH, DtoD) or before the kernel that uses it (HtoD)",
    "pinned": "copies from or to pageable memory use pinned memory: asynchronous, at the bandwidth pinned copies "
              "of the same direction reached in the trace (those of 1 MiB or more where there are some; "
              "pinned=GBPS: at GBPS GB/s), and no faster than a small pinned copy",
    "no-sync": "host syncs removed (no-sync=NAME: only calls named NAME); the last one of each thread is kept, "
               "so the window still ends when its GPU work does",
    "warm": "first-use host stalls removed: a host slice of 1 ms or more, 10 times the median of its name over "
            "the whole trace, that waited for no GPU work takes that median (lazy module loading in a first step), "
            "and device allocations (cudaMalloc: the caching allocator growing its pool) take no time",
    "launch": "every call that launched GPU work takes US µs of the host (launch=US; default: the fastest tenth "
              "of the trace's own launches): fewer, cheaper launches (CUDA graphs, fusion); the operators' own host "
              "time and the untraced gaps are kept",
    "graphs": "the window's GPU work captured as CUDA graphs (graphs=US; default: 1.3 µs per GPU op, measured on "
              "the H200): the launching threads' host work in the window (operators, calls, untraced gaps) is "
              "replaced by US µs per GPU op launched; syncs still wait",
    "no-wait": "event waits between independent chains removed: a GPU op launched in one range waiting for an op "
               "launched in a sibling range of the same stem (load0 / load1: the chains streams=N takes as "
               "independent); waits the ranges do not show independent are kept",
    "concurrent": "kernels that waited while ready (their stream and launch done) start when ready, sharing the "
                  "GPU's block slots as the occupancy model says: a false serialisation removed",
    "balance": "each rank's work between two collectives evened out over the ranks (a job): the time its "
               "non-communication nodes spend between the end of its part of one collective and its arrival at the "
               "next is scaled by the ranks' mean length of that segment / the rank's own (the same work, shared "
               "evenly, as equal shards of a data-parallel step would); work after a rank's last collective is kept",
    "streams": "independent chains spread over N streams (streams=N, default 2): the window's child ranges "
               "(same-stem ranges such as load0..load3 are independent, a range of another stem waits for those "
               "before it), else N equal consecutive parts of each stream's work",
}

_GPU = ("kernel", "memcpy", "memset")
#: Host time of one GPU op in a CUDA graph's replay: cudaGraphLaunch of 1,600 kernels took 2.10 ms (1.31 µs each)
#: and of 1,200 took 1.74 ms (1.45 µs) on the H200, torch 2.11 (tests/data/record_graphs.py, sizes 256 and 1024).
GRAPH_NODE_US = 1.3
#: The GPU's gap between two ops of one stream in a CUDA graph's replay: median 0.26 µs (256², 2.4 µs kernels) and
#: 0.42 µs (1024²) in the same recordings; eager launches there left 3.6 and 1.1 µs between ops bound by their stream.
GRAPH_GAP_NS = 300
#: Overhead of an edge a plan adds, where the trace has no binding edge of that type to take it from.
DEFAULT_OVERHEAD_NS = {"stream": 1_000, "event_wait": 2_000, "launch": 5_000, "host_wait": 5_000, "thread": 0}
_STEM_RE = re.compile(r"\d+$")
#: Calls by which the caching allocator grows its device pool (``warm`` drops them).
_ALLOC_CALLS = ("cudaMalloc", "cuMemAlloc_v2", "cuMemCreate", "cuMemMap")


@dataclass(frozen=True)
class Plan:
    """A changed plan: which rewrites apply (:data:`PLANS`)."""

    side_stream: bool = False
    pinned: bool = False
    pinned_gbps: float | None = None  # None: from the trace's pinned copies
    no_sync: bool = False
    no_sync_name: str | None = None
    streams: int = 1
    warm: bool = False
    launch: bool = False
    launch_us: float | None = None  # None: the fastest tenth of the trace's launches
    concurrent: bool = False
    graphs: bool = False
    graphs_us: float | None = None  # None: GRAPH_NODE_US
    no_wait: bool = False
    balance: bool = False

    @property
    def unchanged(self) -> bool:
        return not (self.side_stream or self.pinned or self.no_sync or self.streams > 1 or self.warm or self.launch
                    or self.concurrent or self.graphs or self.no_wait or self.balance)

    def describe(self) -> str:
        parts = []
        if self.balance:
            parts.append("balance")
        if self.side_stream:
            parts.append("side-stream")
        if self.pinned:
            parts.append("pinned" + (f"={self.pinned_gbps:.1f}" if self.pinned_gbps else ""))
        if self.no_sync:
            parts.append("no-sync" + (f"={self.no_sync_name}" if self.no_sync_name else ""))
        if self.streams > 1:
            parts.append(f"streams={self.streams}")
        if self.warm:
            parts.append("warm")
        if self.launch:
            parts.append("launch" + (f"={self.launch_us:g}" if self.launch_us is not None else ""))
        if self.concurrent:
            parts.append("concurrent")
        if self.no_wait:
            parts.append("no-wait")
        if self.graphs:
            parts.append("graphs" + (f"={self.graphs_us:g}" if self.graphs_us is not None else ""))
        return " + ".join(parts) or "unchanged"


def parse_plan(specs: Sequence[str]) -> Plan:
    """A :class:`Plan` from ``NAME[=VALUE]`` strings; raises :class:`TracerError` for an unknown name or a bad
    value."""
    kw: dict[str, object] = {}
    # (plans combine: repeated, or joined with "+" in one spec, e.g. pinned+side-stream)
    for spec in [part for given in specs for part in given.split("+")]:
        name, _, value = spec.partition("=")
        name, value = name.strip(), value.strip()
        if name == "side-stream" and not value:
            kw["side_stream"] = True
        elif name == "pinned":
            kw["pinned"] = True
            if value:
                try:
                    gbps = float(value)
                except ValueError:
                    gbps = -1.0
                if not (0 < gbps < 1e5):
                    raise TracerError("--what-if", f"pinned={value!r}: give the bandwidth in GB/s (e.g. pinned=50)")
                kw["pinned_gbps"] = gbps
        elif name == "no-sync":
            kw["no_sync"] = True
            kw["no_sync_name"] = value or None
        elif name == "warm" and not value:
            kw["warm"] = True
        elif name == "concurrent" and not value:
            kw["concurrent"] = True
        elif name == "no-wait" and not value:
            kw["no_wait"] = True
        elif name == "balance" and not value:
            kw["balance"] = True
        elif name in ("launch", "graphs"):
            kw[name] = True
            if value:
                try:
                    us = float(value)
                except ValueError:
                    us = -1.0
                if not (0 <= us < 1e6):
                    raise TracerError("--what-if", f"{name}={value!r}: give the host time of one launch in µs "
                                      f"(e.g. {name}=2)")
                kw[f"{name}_us"] = us
        elif name == "streams":
            try:
                n = int(value or "2")
            except ValueError:
                n = 0
            if not 1 < n <= 1024:
                raise TracerError("--what-if", f"streams={value!r}: give a number of streams from 2 to 1024")
            kw["streams"] = n
        else:
            raise TracerError("--what-if", f"{spec!r} is not a plan: one of " + ", ".join(
                ["side-stream", "pinned[=GBPS]", "no-sync[=NAME]", "streams=N", "warm", "launch[=US]",
                 "graphs[=US]", "concurrent", "no-wait", "balance"]))
    return Plan(**kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Replay:
    """A replay's result: the ``measured`` and ``predicted`` span (ns) of the window's work, each node's replayed
    ``start_ns`` / ``end_ns`` (``nodes``: graph node id, relative to the window's first start) and ``notes``:
    what the replay assumed (a bandwidth, a guess at chains)."""

    plan: Plan
    measured_ns: int
    predicted_ns: int
    nodes: pd.DataFrame
    notes: tuple[str, ...] = field(default=())

    @property
    def ratio(self) -> float:
        """Predicted / measured."""
        return self.predicted_ns / self.measured_ns if self.measured_ns else float("nan")


def issued_nodes(graph: Graph, start_ns: int | None = None, end_ns: int | None = None) -> np.ndarray:
    """Graph node ids issued in [start_ns, end_ns] (None: open): host slices that start in it and GPU work whose
    launching call does."""
    n = graph.nodes
    s = n["start_ns"].to_numpy(np.int64)
    lo = np.iinfo(np.int64).min if start_ns is None else start_ns
    hi = np.iinfo(np.int64).max if end_ns is None else end_ns
    is_gpu = n["kind"].isin(list(_GPU)).to_numpy()
    host_in = ~is_gpu & (s >= lo) & (s <= hi)
    e = graph.edges
    launch = e[(e["type"] == "launch").to_numpy()]
    gpu_in = np.zeros(len(n), dtype=bool)
    gpu_in[launch["dst"].to_numpy()[host_in[launch["src"].to_numpy()]]] = True
    if start_ns is None and end_ns is None:
        gpu_in |= is_gpu
    return np.flatnonzero(host_in | gpu_in)


def solo_durations(nodes: pd.DataFrame, demand: np.ndarray, resource: np.ndarray,
                   begin: np.ndarray | None = None) -> np.ndarray:
    """Each GPU node's duration as if alone on its resource: its measured time with the sharing model's slowdown
    (1 / max(1, summed demand) of solo speed) over the stretches it overlapped others taken out (one +/- sweep
    per resource). Host nodes (resource -1) keep their measured time. ``begin`` (ns, one per node, at or after
    its start): the solo time from there to the node's end instead (a collective's transfer after the last
    arrival); the nodes' load over time is the same."""
    start = nodes["start_ns"].to_numpy(np.int64)
    end = nodes["end_ns"].to_numpy(np.int64)
    out: np.ndarray = (end - start).astype(float)
    from_ns = start if begin is None else np.asarray(begin, dtype=np.int64)
    late = from_ns > start
    out[late] = (end[late] - from_ns[late]).astype(float)
    for r in np.unique(resource[resource >= 0]):
        idx = np.flatnonzero(resource == r)
        t = np.concatenate([start[idx], end[idx]])
        d = np.concatenate([demand[idx], -demand[idx]])
        order = np.argsort(t, kind="stable")
        t, d = t[order], d[order]
        load = np.cumsum(d)  # summed demand from t[i] to t[i+1]
        speed = 1.0 / np.maximum(1.0, load[:-1] - 1e-9)
        integral = np.concatenate([[0.0], np.cumsum(np.diff(t) * speed)])
        # F(x) at a time x: the integral up to the last boundary at or before x (x is a boundary itself)
        pos_s = np.searchsorted(t, start[idx], side="left")
        pos_e = np.searchsorted(t, end[idx], side="left")
        out[idx] = integral[pos_e] - integral[pos_s]
        if late[idx].any():
            # F(x) at a time x between boundaries: the integral up to the boundary before it, then that stretch's
            # speed (x lies inside the node, so before the last boundary)
            j = idx[late[idx]]
            k = np.searchsorted(t, from_ns[j], side="right") - 1
            at = integral[k] + (from_ns[j] - t[k]) * speed[np.minimum(k, len(speed) - 1)]
            out[j] = integral[np.searchsorted(t, end[j], side="left")] - at
    return out


class _Setup:
    """The window's nodes and edges, in local ids, ready for a plan to rewrite and the pass to run."""

    def __init__(self, graph: Graph, ids: np.ndarray, demand_of: Mapping[Any, float]) -> None:
        nodes = graph.nodes.loc[ids].reset_index().rename(columns={"index": "node"})
        self.nodes = nodes
        self.start = nodes["start_ns"].to_numpy(np.int64)
        self.end = nodes["end_ns"].to_numpy(np.int64)
        local = pd.Series(np.arange(len(ids)), index=ids)
        e = graph.edges
        e = e[e["src"].isin(ids).to_numpy() & e["dst"].isin(ids).to_numpy()].copy()
        e["src"] = local.loc[e["src"].to_numpy()].to_numpy()
        e["dst"] = local.loc[e["dst"].to_numpy()].to_numpy()
        e["type"] = e["type"].astype(str)
        e["to"] = e["to"].astype(str)
        # cross-rank collective edges (a job) are met at their source's *start*: kept apart from the others
        coll = (e["type"] == "collective").to_numpy()
        coll_e, e = e[coll].copy(), e[~coll]
        kind = nodes["kind"].astype(str).to_numpy()
        self.is_gpu = np.isin(kind, _GPU)
        self.is_kernel = kind == "kernel"
        # resources: (GPU, "sm") for kernels, (GPU, copy kind) for copies; memsets take no shared resource. A GPU is
        # (rank, device): the ranks of a job on several hosts each have a GPU 0, and they share nothing
        res_key = np.where(self.is_kernel, "sm", np.where(kind == "memcpy", nodes["copy_kind"].astype(str), ""))
        dev, rank = nodes["device"].to_numpy(), nodes["rank"].to_numpy()
        keys = [f"{r}/{d}/{k}" if g and k else "" for r, d, k, g in zip(rank, dev, res_key, self.is_gpu)]
        codes, uniq = pd.factorize(pd.Series(keys))
        empty = np.flatnonzero(np.asarray(uniq) == "")
        res = codes.astype(np.int64)
        if len(empty):
            res[res == empty[0]] = -1
        self.resource = res
        given = demand_of_nodes(nodes, demand_of)  # (by correlation id, or by (rank, correlation id) for a job)
        self.demand_known = self.is_kernel & ~np.isnan(given)
        self.demand = np.where(self.demand_known, given, 1.0)
        self.demand[~self.is_gpu] = 0.0
        # A rank's part of a collective (the dst of collective edges) is its wait, from its start to the last
        # arrival among the sources here (clipped to the part), then its transfer, from there to its end. The pass
        # recomputes the wait: the part ends no earlier than its own start + transfer, nor than each source's
        # replayed start + transfer (the edge's overhead); the transfer is taken as the plan leaves it
        arrival = self.start.copy()
        np.maximum.at(arrival, coll_e["dst"].to_numpy(np.int64), self.start[coll_e["src"].to_numpy(np.int64)])
        arrival = np.minimum(arrival, self.end)
        #: each node's last arrival (its own start but for a collective's part that waited) and transfer, ns
        self.arrival = arrival
        self.transfer = self.end - arrival
        coll_e["overhead"] = self.transfer[coll_e["dst"].to_numpy(np.int64)]
        # (a GPU part's own time is the solo time of its transfer; it holds its share of the GPU while it waits)
        self.dur = solo_durations(nodes, self.demand, self.resource, begin=arrival)
        self.stream = nodes["stream"].to_numpy(np.int64).copy()
        #: each node's GPU as one integer, (rank, device): what a stream belongs to (ranks repeat device indexes)
        self.gpu = key_codes(nodes["rank"].to_numpy(np.int64), nodes["device"].to_numpy(np.int64))[0]
        # each start edge's overhead: its lag when it bound the node (the dependency met last), else no more
        # than the typical binding lag of its type (so that it cannot bind later than the trace shows)
        start_e = e[(e["to"] == "start").to_numpy()].copy()
        # a GPU op can start before its launching call returns (a synchronous copy runs inside its call): a
        # launch edge counts from the call's start
        lk = (start_e["type"] == "launch").to_numpy()
        s_start = self.start[start_e["src"].to_numpy()]
        start_e.loc[lk, "ready_ns"] = s_start[lk]
        start_e.loc[lk, "lag_ns"] = self.start[start_e["dst"].to_numpy()][lk] - s_start[lk]
        binding = start_e.sort_values("ready_ns", kind="stable").drop_duplicates("dst", keep="last").index
        start_e["binding"] = start_e.index.isin(binding)
        self.typical = dict(DEFAULT_OVERHEAD_NS)
        for t, lag in start_e[start_e["binding"].to_numpy()].groupby("type", observed=True)["lag_ns"]:
            self.typical[str(t)] = int(lag.median())
        typ = start_e["type"].map(self.typical).fillna(0).to_numpy(np.int64)
        lag = start_e["lag_ns"].to_numpy(np.int64)
        start_e["overhead"] = np.where(start_e["binding"].to_numpy(), lag, np.minimum(lag, typ))
        # an end edge (a host wait) likewise: its lag where it bound the call (the GPU op that finished last,
        # and after the call began: the call really waited), else no more than the typical one. A
        # cudaDeviceSynchronize waits for every stream, and a sync called after the GPU went idle waited for
        # nothing: the lag behind an op that was done long before is not a cost the call pays after that op
        end_e = e[(e["to"] == "end").to_numpy()].copy()
        end_bind = end_e.sort_values("ready_ns", kind="stable").drop_duplicates("dst", keep="last").index
        bound = end_e.index.isin(end_bind) & (end_e["ready_ns"].to_numpy(np.int64)
                                              > self.start[end_e["dst"].to_numpy()])
        end_lag = end_e["lag_ns"].to_numpy(np.int64)
        end_typ = int(np.median(end_lag[bound])) if bound.any() else DEFAULT_OVERHEAD_NS["host_wait"]
        end_e["overhead"] = np.where(bound, end_lag, np.minimum(end_lag, end_typ))
        parts = [start_e, end_e, coll_e] if len(coll_e) else [start_e, end_e]
        self.edges = pd.concat(parts, ignore_index=True)[["src", "dst", "type", "to", "overhead"]]
        # a host node's own time: a call that waited for the GPU keeps only a typical call's time of its own
        waited = end_e["dst"].to_numpy()
        calls = ~self.is_gpu & nodes["kind"].isin(["runtime", "driver"]).to_numpy()
        not_waiting = calls.copy()
        not_waiting[waited] = False
        nw = self.dur[not_waiting & ~nodes["blocking"].to_numpy(bool)]
        self.call_ns = float(np.median(nw)) if len(nw) else 5_000.0
        self.own = self.dur.copy()
        # the rest of a waiting call's time is the wait, which the pass recomputes from its edges. A blocking
        # call with no wait edge here waited for work the window does not hold (issued before it, or untraced:
        # the cudaDeviceSynchronize that opens a profile waits for the warm-up): it keeps its measured time
        blocking = np.zeros(len(nodes), dtype=bool)
        blocking[waited] = True
        blocking &= ~self.is_gpu
        self.own[blocking] = np.minimum(self.dur[blocking], self.call_ns)
        self.notes: list[str] = []
        if len(coll_e):
            waited = int((self.arrival > self.start).sum())
            self.notes.append(f"collectives: {int(np.unique(coll_e['dst']).size)} ranks' parts of collectives "
                              f"({waited} of them waited) end no earlier than every other rank's replayed arrival "
                              "plus their measured transfer (from the last arrival to their end), which no plan "
                              "changes")

    def add_edges(self, src: Sequence[int] | np.ndarray, dst: Sequence[int] | np.ndarray, kind: str,
                  to: str = "start") -> None:
        if not len(src):
            return
        ov = self.typical.get(kind, DEFAULT_OVERHEAD_NS[kind]) if to == "start" else 0
        add = pd.DataFrame({"src": np.asarray(src, np.int64), "dst": np.asarray(dst, np.int64), "type": kind,
                            "to": to, "overhead": ov})
        self.edges = pd.concat([self.edges, add], ignore_index=True)

    def restream(self, new_stream: np.ndarray) -> None:
        """Give GPU nodes new streams: drop every stream edge and chain each (GPU, stream) again in its
        original order; a host wait that waited for a moved op also waits for the last op of every other stream
        launched before the call."""
        e = self.edges
        self.edges = e[(e["type"] != "stream").to_numpy()]
        self.stream = new_stream
        g = np.flatnonzero(self.is_gpu)
        frame = pd.DataFrame({"i": g, "dev": self.gpu[g], "s": new_stream[g],
                              "t": self.start[g]}).sort_values(["dev", "s", "t", "i"], kind="stable")
        ids = frame["i"].to_numpy()
        same = (frame["dev"].to_numpy()[1:] == frame["dev"].to_numpy()[:-1]) & \
               (frame["s"].to_numpy()[1:] == frame["s"].to_numpy()[:-1])
        self.add_edges(ids[:-1][same], ids[1:][same], "stream")


def _launch_of(setup: _Setup) -> dict[int, int]:
    e = setup.edges
    lk = e[(e["type"] == "launch").to_numpy()]
    return dict(zip(lk["dst"].to_numpy().tolist(), lk["src"].to_numpy().tolist()))


def balance_segments(s: _Setup, graph: Graph) -> pd.DataFrame:
    """The segments ``balance`` evens out: one row per (collective instance ``key``, ``rank``) that two ranks or
    more ran in the window, with the rank's segment ``seg_start`` (the end of its part of the instance before, in
    the order the rank arrived at them; before its first, the moment every rank's trace has begun) to ``arrival``
    (its part's start), ``length`` (ns), the ranks' ``mean`` length for the instance and the ``factor`` its work
    takes (mean / length). An instance where any rank's segment is empty (its parts overlap: several process
    groups or streams) is not evened out: factor 1 on every rank. Measured times (ns); ``first`` / ``last``: the
    part's local node ids."""
    local = pd.Series(np.arange(len(s.nodes)), index=s.nodes["node"].to_numpy())
    p = graph.collectives
    p = p[p["first"].isin(local.index).to_numpy() & p["last"].isin(local.index).to_numpy()]
    p = p[(p.groupby("key")["rank"].transform("nunique") > 1).to_numpy()]
    cols = ["key", "rank", "first", "last", "seg_start", "arrival", "length", "mean", "factor"]
    if p.empty:
        return pd.DataFrame({c: pd.Series(dtype=np.float64 if c in ("mean", "factor") else np.int64) for c in cols})
    p = p.assign(first=local.loc[p["first"].to_numpy()].to_numpy(np.int64),
                 last=local.loc[p["last"].to_numpy()].to_numpy(np.int64))
    p = p.assign(arrival=s.start[p["first"].to_numpy()], done=s.end[p["last"].to_numpy()])
    p = p.sort_values(["rank", "arrival", "key"], kind="stable").reset_index(drop=True)
    rank = s.nodes["rank"].to_numpy(np.int64)
    # (a rank whose trace began later has no work to compare before then: the first segments start together)
    begun = max(int(s.start[rank == r].min()) for r in np.unique(p["rank"].to_numpy(np.int64)).tolist())
    seg = np.zeros(len(p), np.int64)
    prev_rank, at = None, 0
    for i, (r, done) in enumerate(zip(p["rank"].to_numpy(np.int64).tolist(), p["done"].to_numpy(np.int64).tolist())):
        if r != prev_rank:
            prev_rank, at = r, max(int(s.start[rank == r].min()), begun)
        seg[i] = at
        at = max(at, done)
    p["seg_start"] = seg
    p["length"] = np.maximum(p["arrival"].to_numpy(np.int64) - seg, 0)
    p["mean"] = p.groupby("key")["length"].transform("mean").to_numpy(float)
    length = p["length"].to_numpy(float)
    even = (p.groupby("key")["length"].transform("min") > 0).to_numpy()
    p["factor"] = np.where(even, p["mean"].to_numpy(float) / np.maximum(length, 1.0), 1.0)
    return p[cols]


def _in_segments(start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 weight: np.ndarray) -> np.ndarray:
    """For each interval [start, end): the sum over the disjoint, sorted segments [lo, hi) of weight × the time the
    interval spends in the segment (a piecewise-linear integral read at both ends, as solo_durations does)."""
    if not len(lo):
        return np.zeros(len(start))
    bounds = np.empty(2 * len(lo), np.int64)
    bounds[0::2], bounds[1::2] = lo, hi
    rate = np.zeros(2 * len(lo))
    rate[0::2] = weight  # (inside a segment from its lo; nothing from its hi to the next lo)
    integral = np.concatenate([[0.0], np.cumsum(np.diff(bounds) * rate[:-1])])

    def at(x: np.ndarray) -> np.ndarray:
        j = np.searchsorted(bounds, x, side="right") - 1
        inside = j >= 0
        jj = np.maximum(j, 0)
        out: np.ndarray = np.where(inside, integral[jj] + (x - bounds[jj]) * rate[jj], 0.0)
        return out

    extra: np.ndarray = at(end) - at(start)
    return extra


def _apply_balance(s: _Setup, graph: Graph) -> None:
    seg = balance_segments(s, graph)
    if seg.empty:
        raise TracerError("--what-if", "balance: the window has no collective that two ranks or more ran (one "
                          "rank, or no job): there is no work to even out across ranks")
    rank = s.nodes["rank"].to_numpy(np.int64)
    # communication: the parts themselves, every node of a collective's row (record_param_comms, gloo's ranges)
    # and the launch calls of parts; the rest of a rank's nodes is its work
    comm = s.nodes["collective"].astype(str).replace({"nan": "", "None": "", "<NA>": ""}).to_numpy() != ""
    parts = np.concatenate([seg["first"].to_numpy(np.int64), seg["last"].to_numpy(np.int64)])
    comm[parts] = True
    e = s.edges
    launches = (e["type"] == "launch").to_numpy() & np.isin(e["dst"].to_numpy(np.int64), parts)
    comm[e["src"].to_numpy(np.int64)[launches]] = True
    # and a host slice still running when its rank arrived (the collective's call, which may wait in it)
    for r, arrivals in seg.groupby("rank")["arrival"]:
        a = np.sort(arrivals.to_numpy(np.int64))
        idx = np.flatnonzero((rank == int(r)) & ~s.is_gpu)
        nxt = np.searchsorted(a, s.start[idx], side="right")
        comm[idx[(nxt < len(a)) & (a[np.minimum(nxt, len(a) - 1)] < s.end[idx])]] = True
    # Each node's time inside a segment is scaled by the segment's factor, the rest of it kept: a node that runs on
    # past the arrival (compute on another stream beside the collective) grows only by its part in the segment,
    # so a lane of a rank gains at most (mean − its length) per segment
    mult = np.ones(len(s.nodes))
    for r, rows in seg[seg["factor"] != 1.0].groupby("rank"):
        rows = rows.sort_values("seg_start")
        idx = np.flatnonzero((rank == int(r)) & ~comm)
        extra = _in_segments(s.start[idx], s.end[idx], rows["seg_start"].to_numpy(np.int64),
                             rows["arrival"].to_numpy(np.int64), rows["factor"].to_numpy(float) - 1.0)
        span = (s.end[idx] - s.start[idx]).astype(float)
        mult[idx] = np.where(span > 0, 1.0 + extra / np.maximum(span, 1.0), 1.0)
    s.dur *= mult
    s.own *= mult
    # a host part (gloo's range on its worker thread) is tied to its rank's other threads by no edge: the graph
    # has the worker's gaps, kept as measured. Two edges make the part follow the work balance moves
    n_enq, n_wait = _host_part_edges(s, seg)
    evened = seg[seg["factor"] != 1.0]
    skipped = int(seg["key"].nunique()) - int(seg.loc[(seg["length"] > 0).groupby(seg["key"]).transform("all"),
                                                      "key"].nunique())
    by_rank = evened.groupby("rank")["factor"].agg(["min", "max"])
    shown = "; ".join(f"rank {int(r)} ×{a:.2f}" + (f"–{b:.2f}" if round(b, 2) != round(a, 2) else "")
                      for r, a, b in by_rank.itertuples())
    s.notes.append(f"balance: {int((mult != 1).sum())} nodes in {int(evened['key'].nunique())} collectives' "
                   f"segments rescaled (segment factors: {shown or 'none'}): each rank's segment before a collective "
                   "(from its previous part's end; the first from when every rank's trace has begun) takes the "
                   "ranks' mean length, each node's time inside it scaled; assumes its work divides evenly (equal "
                   "shards; its launches and traced host slices scale with it, the untraced gaps between slices do "
                   "not), and keeps the work after each rank's last collective and the collectives' transfers and "
                   "launches as measured"
                   + (f"; {skipped} collectives left as they are (a rank's parts overlap there: no segment to even "
                      "out)" if skipped else "")
                   + (f"; host parts (gloo): {n_enq} start as long after the last slice of their rank's other "
                      f"threads to start before them (the collective's call) as they did, and {n_wait} waits in "
                      "an untraced gap over the last rank's arrival (work.wait()) end as long after that arrival, "
                      "replayed, as they did" if n_enq or n_wait else ""))


class GapIndex:
    """The gaps between consecutive slices of each thread (``lo[k]``..``hi[k]``, on ``rank[k]``'s ``thread[k]``),
    indexed to find those over a moment: per thread, sorted by where they begin, with the thread's longest gap,
    so that a query searches a window of one thread's gaps instead of scanning every gap of the job (a gloo job
    has thousands of collectives, each asking)."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, rank: np.ndarray, thread: np.ndarray) -> None:
        self._lo, self._hi = lo, hi
        codes, names = pd.factorize(pd.Series(thread, dtype=object))
        order = np.lexsort((lo, codes))
        cuts = np.flatnonzero(np.diff(codes[order])) + 1
        self._threads: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray, int]]] = {}
        for ks in np.split(order, cuts) if len(order) else []:
            span = hi[ks] - lo[ks]
            longest = int(span.max()) if len(span) else 0
            self._threads.setdefault(int(rank[ks[0]]), []).append((lo[ks], hi[ks], ks, longest))

    def over(self, moment: int, ranks: np.ndarray) -> list[int]:
        """The gaps of ``ranks``' threads that began no later and ended no sooner than ``moment``, ascending."""
        hits: list[int] = []
        for r in np.unique(ranks).tolist():
            for lo, hi, ks, longest in self._threads.get(int(r), ()):
                if longest < 0:
                    continue
                i, j = np.searchsorted(lo, moment - longest, "left"), np.searchsorted(lo, moment, "right")
                hits += ks[i:j][hi[i:j] >= moment].tolist()
        return sorted(hits)


def last_started_before(points: np.ndarray, candidates: np.ndarray, group: np.ndarray,
                        start: np.ndarray) -> dict[int, int]:
    """For each node in ``points``: the candidate node (``candidates``, a mask) of the same ``group`` that
    started last strictly before it (the lowest index among equal starts), where there is one. One sort and a
    binary search per point, not a scan of every node per point (a gloo job has thousands of host parts)."""
    cand = np.flatnonzero(candidates)
    order = np.lexsort((cand, start[cand], group[cand]))  # by group, then start, then index
    cand = cand[order]
    g, st = group[cand], start[cand]
    out: dict[int, int] = {}
    for p in np.asarray(points, np.int64).tolist():
        lo, hi = np.searchsorted(g, group[p], "left"), np.searchsorted(g, group[p], "right")
        # strictly before: a slice that starts with the part may be the one that waits for it
        at = lo + int(np.searchsorted(st[lo:hi], start[p], "left")) - 1
        if at < lo:
            continue
        first = lo + int(np.searchsorted(st[lo:hi], st[at], "left"))  # the first of the nodes that started then
        out[p] = int(cand[first])
    return out


def _host_part_edges(s: _Setup, seg: pd.DataFrame) -> tuple[int, int]:
    """For each host part in ``seg`` (a worker thread's range), on the other threads of its rank that hold no
    part: a ``part_launch`` edge from the last slice there to start before the part did (the collective's call,
    which enqueued it; the part starts that long after the slice's start, as :func:`_simulate` counts launch
    edges); and for each untraced gap of those threads over the moment the instance's last rank arrived (the
    wait for it: DDP's ``work.wait()`` has no slice), ``part_launch`` edges from every rank's part to the slice
    after the gap, each at the measured time from the last arrival to that slice: the wait ends when the last
    rank has arrived, replayed, + the transfer and lag it took. The part's and each gap's thread edges keep no
    more than the typical thread lag. Returns how many parts and waits were tied."""
    firsts = np.unique(seg["first"].to_numpy(np.int64))
    firsts = firsts[~s.is_gpu[firsts]]
    parts = np.unique(seg["last"].to_numpy(np.int64))
    parts = parts[~s.is_gpu[parts]]
    if not len(parts):
        return 0, 0
    n = s.nodes
    thread = (n["rank"].astype(str) + "/" + n["pid"].astype(str) + "/" + n["tid"].astype(str)).to_numpy()
    part_threads = set(thread[np.unique(np.concatenate([seg["first"].to_numpy(np.int64), parts]))].tolist())
    e = s.edges.astype({"overhead": float})
    th = np.flatnonzero((e["type"] == "thread").to_numpy())
    a, b = e["src"].to_numpy(np.int64)[th], e["dst"].to_numpy(np.int64)[th]
    keep = ~np.isin(thread[b], list(part_threads))
    into_part = th[~keep]
    th, a, b = th[keep], a[keep], b[keep]
    rank = n["rank"].to_numpy(np.int64)
    typical = float(s.typical.get("thread", 0))
    ov = e["overhead"].to_numpy(float).copy()
    free = ~s.is_gpu & ~np.isin(thread, list(part_threads))
    l_src: list[int] = []
    l_dst: list[int] = []
    l_lag: list[float] = []
    part_dst = e["dst"].to_numpy(np.int64)[into_part]
    enqueuer = last_started_before(firsts, free, rank, s.start)
    for p, q in enqueuer.items():
        l_src.append(q)
        l_dst.append(p)
        l_lag.append(float(s.start[p] - s.start[q]))
    tied = np.isin(part_dst, np.fromiter(enqueuer, np.int64, len(enqueuer)))
    ov[into_part[tied]] = np.minimum(ov[into_part[tied]], typical)
    # the waits: a gap of a training thread over the moment the last rank arrived (measured) ends no sooner than
    # that moment, replayed (every rank's part's start), + what it took then (the transfer and the lag after it)
    src: list[int] = []
    dst: list[int] = []
    lag: list[float] = []
    host_seg = seg[~s.is_gpu[seg["first"].to_numpy(np.int64)]]
    gaps = GapIndex(s.end[a], s.start[b], rank[b], thread[b])
    for _key, inst in host_seg.groupby("key", sort=False):
        firsts_k = inst["first"].to_numpy(np.int64)
        last_arrival = int(s.start[firsts_k].max())
        for k in gaps.over(last_arrival, inst["rank"].to_numpy(np.int64)):
            for f in firsts_k.tolist():
                if enqueuer.get(f) == int(b[k]):  # (the part's own call cannot also wait for it: a cycle)
                    continue
                src.append(f)
                dst.append(int(b[k]))
                lag.append(float(s.start[b[k]] - last_arrival))
            ov[th[k]] = min(ov[th[k]], typical)
    add = pd.DataFrame({"src": np.asarray(l_src + src, np.int64), "dst": np.asarray(l_dst + dst, np.int64),
                        "type": ["part_launch"] * (len(l_src) + len(src)), "to": "start",
                        "overhead": np.asarray(l_lag + lag, float)})
    s.edges = pd.concat([e.assign(overhead=ov), add], ignore_index=True)
    return len(l_src), len(set(dst))


def _pageable_copies(nodes: pd.DataFrame) -> np.ndarray:
    """Which nodes are copies from or to pageable memory (synchronous to the host whatever their stream)."""
    kind = nodes["kind"].astype(str).to_numpy()
    pageable: np.ndarray = (kind == "memcpy") & ((nodes["src_mem"].astype(str) == "pageable") |
                                                 (nodes["dst_mem"].astype(str) == "pageable")).to_numpy()
    return pageable


def _apply_side_stream(s: _Setup) -> None:
    nodes = s.nodes
    copy = (nodes["kind"].astype(str) == "memcpy").to_numpy()
    if not copy.any():
        s.notes.append("side-stream: the window has no copies; nothing moved")
        return
    # the op a copy's data comes from is not in a trace (no tensor ids): a run of k copies queued behind
    # kernels on one stream pairs copy i with the i-th of the last k kernels before the run
    order = np.lexsort((s.start, s.stream, s.gpu))
    producer: dict[int, int] = {}
    consumer: dict[int, int] = {}
    run: list[int] = []
    before: list[int] = []
    prev_key: tuple[int, int] | None = None

    def close_run(nxt: int | None) -> None:
        k = len(run)
        kernels = before[-k:] if k <= len(before) else before
        for j, c in enumerate(run):
            kind = str(nodes.at[c, "copy_kind"])
            if kind.startswith("HtoD") or kind == "HtoH":
                if nxt is not None:
                    consumer[c] = nxt
            elif kernels:
                producer[c] = kernels[min(j, len(kernels) - 1)]
        run.clear()

    for i in order.tolist():
        key = (int(s.gpu[i]), int(s.stream[i]))
        if key != prev_key:
            if run:
                close_run(None)
            before, prev_key = [], key
        if copy[i]:
            run.append(i)
        else:
            if run:
                close_run(i)
            if s.is_kernel[i]:
                before.append(i)
    if run:
        close_run(None)
    new = s.stream.copy()
    side = -1 - nodes["stream"].to_numpy(np.int64)  # one side stream per original stream
    new[copy] = side[copy]
    s.restream(new)
    s.add_edges(list(producer.values()), list(producer.keys()), "event_wait")
    s.add_edges(list(consumer.keys()), list(consumer.values()), "event_wait")
    s.notes.append(f"side-stream: {int(copy.sum())} copies moved; a copy's producer is the kernel it was queued "
                   "behind in order (the trace has no tensor ids)")


def _apply_pinned(s: _Setup, gbps: float | None, pinned_rate: dict[str, float],
                  reference: tuple[dict[str, float], str | None] = ({}, None)) -> None:
    nodes = s.nodes
    pageable = _pageable_copies(nodes)
    if not pageable.any():
        s.notes.append("pinned: the window has no pageable copies; nothing changed")
        return
    ck = nodes["copy_kind"].astype(str).to_numpy()
    byt = nodes["bytes"].to_numpy(float)
    floor = pinned_latency(nodes)
    ref, model = reference
    used: dict[str, str] = {}  # direction -> where its rate came from, said once
    for i in np.flatnonzero(pageable):
        way = str(ck[i]).split()[0]
        rate = gbps if gbps else pinned_rate.get(way)  # GB/s = bytes per ns
        if rate is not None:
            used.setdefault(way, f"{way} {rate:.3g} GB/s" + (" (given)" if gbps else " (this trace's pinned copies)"))
        elif way in ref:
            rate = ref[way]
            used.setdefault(way, f"{way} {rate:.3g} GB/s (the trace has no pinned {way} copy of 64 KiB or more: "
                                 f"what pinned copies reached on an {model} in tracer's own recordings; "
                                 "--what-if pinned=GBPS gives another)")
        if rate is None:
            raise TracerError("--what-if", f"pinned: the trace has no pinned {ck[i]} copy to take a bandwidth "
                              "from; give one: --what-if pinned=GBPS")
        if byt[i] == byt[i]:
            s.dur[i] = max(byt[i] / rate, floor.get(way, 0.0))
    # asynchronous now: the host no longer waits for these copies (in the call itself or a sync after it)
    e = s.edges
    s.edges = e[~((e["type"] == "host_wait").to_numpy() & pageable[e["src"].to_numpy()])]
    s.notes.append(f"pinned: {int(pageable.sum())} pageable copies at {'; '.join(used.values())}, asynchronous")


def _apply_warm(s: _Setup, graph: Graph) -> None:
    n = graph.nodes
    host = n[~n["kind"].isin(list(_GPU)).to_numpy()]
    median = (host["end_ns"] - host["start_ns"]).groupby(host["name"].astype(str)).median()
    names = s.nodes["name"].astype(str)
    typical = names.map(median).to_numpy(float).copy()
    waited = np.zeros(len(s.nodes), dtype=bool)
    waited[s.edges.loc[(s.edges["to"] == "end").to_numpy(), "dst"].to_numpy()] = True
    stall = ~s.is_gpu & ~waited & (s.own >= 1e6) & (s.own >= 10 * typical)
    # PyTorch's caching allocator calls cudaMalloc only when its pool grows, which a warmed-up step (the same
    # shapes again) does not: those calls go whatever their length
    alloc = ~s.is_gpu & ~waited & names.isin(list(_ALLOC_CALLS)).to_numpy()
    typical[alloc] = 0.0
    s.notes.append(f"warm: {int((stall & ~alloc).sum())} host stalls ({s.own[stall & ~alloc].sum() / 1e6:.1f} ms) "
                   f"take their name's median time; {int(alloc.sum())} device allocations "
                   f"({s.own[alloc].sum() / 1e6:.2f} ms) take none")
    stall |= alloc
    removed = np.where(stall, s.own - typical, 0.0)
    s.own[stall] = typical[stall]
    s.dur[stall] = typical[stall]
    # a launch edge's lag counts from the call's start: a kernel launched by a stalled call waited for the
    # stall too (lazy loading happens inside cudaLaunchKernel), so its lag loses the time removed
    e = s.edges
    lk = (e["type"] == "launch").to_numpy() & stall[e["src"].to_numpy()]
    if lk.any():
        ov = e["overhead"].to_numpy(float).copy()
        ov[lk] = np.maximum(ov[lk] - removed[e["src"].to_numpy()[lk]], 0.0)
        s.edges = e.assign(overhead=ov)


def _apply_no_sync(s: _Setup, name: str | None) -> None:
    e = s.edges
    hw = e[(e["type"] == "host_wait").to_numpy()]
    names = s.nodes["name"].astype(str).to_numpy()
    dst = hw["dst"].to_numpy()
    pick = np.ones(len(hw), dtype=bool) if name is None else (names[dst] == name)
    # keep the last waiting call of each thread: the window still ends when the work it waited for does
    waiting = pd.DataFrame({"d": np.unique(dst)})
    waiting["rank"] = s.nodes["rank"].to_numpy()[waiting["d"]]
    waiting["pid"] = s.nodes["pid"].to_numpy()[waiting["d"]]
    waiting["tid"] = s.nodes["tid"].to_numpy()[waiting["d"]]
    waiting["t"] = s.start[waiting["d"]]
    last = waiting.sort_values("t", kind="stable").drop_duplicates(["rank", "pid", "tid"], keep="last")["d"]
    keep = np.isin(dst, last.to_numpy())
    drop = pick & ~keep
    s.edges = e.drop(hw.index[drop])
    s.notes.append(f"no-sync: {int(np.unique(dst[drop]).size)} waiting calls no longer wait")


def launch_cost_ns(graph: Graph) -> float | None:
    """The fastest tenth (10th percentile) of the graph's launching calls that did not wait for the GPU, ns: what
    a launch costs this host at best; None without launches."""
    n = graph.nodes
    calls = n[n["launches"].to_numpy(bool) & ~n["blocking"].to_numpy(bool)]
    if calls.empty:
        return None
    return float(np.percentile((calls["end_ns"] - calls["start_ns"]).to_numpy(float), 10))


def _apply_launch(s: _Setup, us: float | None, graph: Graph) -> None:
    cost = us * 1e3 if us is not None else launch_cost_ns(graph)
    calls = s.nodes["launches"].to_numpy(bool) & ~s.is_gpu
    waited = np.zeros(len(s.nodes), dtype=bool)
    waited[s.edges.loc[(s.edges["to"] == "end").to_numpy(), "dst"].to_numpy()] = True
    calls &= ~waited & ~s.nodes["blocking"].to_numpy(bool)  # (a synchronous copy's call is its copy's time)
    if cost is None or not calls.any():
        s.notes.append("launch: the window has no launching calls; nothing changed")
        return
    before = float(s.own[calls].sum())
    s.own[calls] = np.minimum(s.own[calls], cost)
    s.dur[calls] = np.minimum(s.dur[calls], cost)
    src = "given" if us is not None else "the fastest tenth of this trace's launches"
    s.notes.append(f"launch: {int(calls.sum())} launching calls take {cost / 1e3:.1f} µs each ({src}): "
                   f"{before / 1e6:.3f} -> {float(s.own[calls].sum()) / 1e6:.3f} ms of host time; the operators' "
                   "own time and untraced host gaps are kept (CUDA graphs remove those too: --what-if graphs)")


def _apply_graphs(s: _Setup, us: float | None) -> None:
    cost = (GRAPH_NODE_US if us is None else us) * 1e3
    nodes = s.nodes
    launches = nodes["launches"].to_numpy(bool) & ~s.is_gpu
    if not launches.any():
        s.notes.append("graphs: the window has no launching calls; nothing changed")
        return
    key = (nodes["rank"].astype(str) + "/" + nodes["pid"].astype(str) + "/" + nodes["tid"].astype(str)).to_numpy()
    e = s.edges.astype({"overhead": float})
    lk = e[(e["type"] == "launch").to_numpy()]
    l_src, l_dst = lk["src"].to_numpy(np.int64), lk["dst"].to_numpy(np.int64)
    before = 0.0
    add_src: list[int] = []
    add_dst: list[int] = []
    captured = np.zeros(len(nodes), dtype=bool)
    for thread in dict.fromkeys(key[launches].tolist()):
        host = ~s.is_gpu & (key == thread)
        ops = l_dst[host[l_src]]
        captured[ops] = True
        before += float(s.own[host].sum())
        # one cudaGraphLaunch, at the thread's first launch, takes the whole graph's host time; the GPU runs the
        # graph once it returns (seen on the H200: the first kernel starts as the call ends); the thread's other
        # slices, and a blocking call's own time (it still waits for its GPU op), go
        first = int(np.flatnonzero(launches & host)[np.argmin(s.start[launches & host])])
        s.own[host] = 0.0
        s.own[first] = cost * len(ops)
        s.dur[host] = s.own[host]
        add_src += [first] * len(ops)
        add_dst += ops.tolist()
    # the untraced host time between the threads' slices (Python, the framework) goes too
    host_all = ~s.is_gpu & np.isin(key, list(dict.fromkeys(key[launches].tolist())))
    thread_e = (e["type"] == "thread").to_numpy() & host_all[e["dst"].to_numpy()]
    e.loc[thread_e, "overhead"] = 0
    # a graph's ops are queued on the GPU ahead of time: one follows the other on its stream after the graph's gap
    stream = (e["type"] == "stream").to_numpy() & captured[e["src"].to_numpy()] & captured[e["dst"].to_numpy()]
    e.loc[stream, "overhead"] = np.minimum(e.loc[stream, "overhead"].to_numpy(float), GRAPH_GAP_NS)
    # (an edge type of its own: from the graph launch's end, not its start as a launch edge counts)
    add = pd.DataFrame({"src": np.asarray(add_src, np.int64), "dst": np.asarray(add_dst, np.int64), "type": "graph",
                        "to": "start", "overhead": 0})
    s.edges = pd.concat([e, add], ignore_index=True)
    src = "given" if us is not None else "measured: cudaGraphLaunch on the H200"
    s.notes.append(f"graphs: {before / 1e6:.3f} ms of host slices of {len(set(key[launches]))} launching thread(s) "
                   f"(and their untraced gaps) replaced by one graph launch of {cost / 1e3:.2f} µs per GPU op "
                   f"({int(captured.sum())} ops; {src}), the GPU starting when it returns, {GRAPH_GAP_NS / 1e3:g} µs "
                   "between ops of a stream (measured likewise); syncs still wait; assumes the window's GPU work can "
                   "be captured (no host work the GPU waits for inside it)")


def innermost_range(children: pd.DataFrame, at: np.ndarray) -> np.ndarray:
    """For each time in ``at``: the position in ``children`` (name, start_ns, end_ns) of the shortest range that
    holds it, -1 where none does."""
    out = np.full(len(at), -1, dtype=np.int64)
    if children.empty or not len(at):
        return out
    cs, ce = children["start_ns"].to_numpy(np.int64), children["end_ns"].to_numpy(np.int64)
    best = np.full(len(at), np.iinfo(np.int64).max)
    for k in np.argsort(ce - cs, kind="stable")[::-1].tolist():  # longest first: shorter ones overwrite
        inside = (at >= cs[k]) & (at <= ce[k])
        out[inside] = k
        best[inside] = ce[k] - cs[k]
    return out


def independent_pairs(children: pd.DataFrame, src_at: np.ndarray, dst_at: np.ndarray) -> np.ndarray:
    """Whether work launched at ``src_at`` and at ``dst_at`` lies in two sibling ranges of one stem (load0, load1:
    what ``streams=N`` takes as independent chains), pairwise."""
    a, b = innermost_range(children, src_at), innermost_range(children, dst_at)
    names = children["name"].astype(str).to_numpy() if len(children) else np.array([], dtype=object)
    stems = np.array([_STEM_RE.sub("", n) for n in names], dtype=object)
    ok = (a >= 0) & (b >= 0) & (a != b)
    out = np.zeros(len(a), dtype=bool)
    idx = np.flatnonzero(ok)
    if len(idx):
        out[idx] = (stems[a[idx]] == stems[b[idx]]) & np.array(
            [names[i] != stems[i] and names[j] != stems[j] for i, j in zip(a[idx], b[idx], strict=True)])
    return out


def _apply_no_wait(s: _Setup, children: pd.DataFrame) -> None:
    e = s.edges
    ew = np.flatnonzero((e["type"] == "event_wait").to_numpy())
    launch = _launch_of(s)
    def at(i: int) -> int:
        return int(s.start[launch[i]]) if i in launch else int(s.start[i])
    src = np.array([at(int(x)) for x in e["src"].to_numpy()[ew]], dtype=np.int64)
    dst = np.array([at(int(x)) for x in e["dst"].to_numpy()[ew]], dtype=np.int64)
    drop = ew[independent_pairs(children, src, dst)]
    s.edges = e.drop(e.index[drop])
    s.notes.append(f"no-wait: {len(drop)} of {len(ew)} event waits removed (between sibling ranges of one stem); "
                   "the others are dependencies as far as the trace shows")


def _apply_concurrent(s: _Setup, waited_ns: int = 50_000) -> None:
    e = s.edges.astype({"overhead": float})  # (a median may be a half ns)
    into_kernel = s.is_kernel[e["dst"].to_numpy()] & (e["to"] == "start").to_numpy()
    ov = e["overhead"].to_numpy(float)
    late = into_kernel & (ov > waited_ns)
    # a late kernel's edge takes the typical lag of its type among the kernels that did not wait (the median over
    # all would count the waits themselves)
    ok = e[into_kernel & ~late]
    cap = ok.groupby("type", observed=True)["overhead"].median().to_dict()
    typ = np.array([cap.get(t, DEFAULT_OVERHEAD_NS.get(str(t), 0)) for t in e["type"]], dtype=float)
    late &= ov > typ
    e.loc[late, "overhead"] = typ[late]
    s.edges = e
    s.notes.append(f"concurrent: {int(np.unique(e['dst'].to_numpy()[late]).size)} kernels that started over "
                   f"{waited_ns / 1e3:g} µs after their stream, launch and events allowed start when ready (the GPU "
                   "shared by the occupancy model)")


def _apply_streams(s: _Setup, n: int, children: pd.DataFrame) -> None:
    """Spread chains over ``n`` streams; ``children``: the window's child ranges (name, start_ns, end_ns)."""
    g = np.flatnonzero(s.is_gpu)
    launch = _launch_of(s)
    issued = np.array([s.start[launch[int(i)]] if int(i) in launch else s.start[i] for i in g], dtype=np.int64)
    chain = np.full(len(s.nodes), -1, dtype=np.int64)
    level_of: list[int] = []
    if len(children):
        # the outermost ranges only: a range inside another is part of that one's chain
        ch = children.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable")
        ends = ch["end_ns"].to_numpy(np.int64)
        before_max = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], ends[:-1]]))
        ch = ch[ends > before_max].reset_index(drop=True)
        stems = [_STEM_RE.sub("", str(x)) for x in ch["name"]]
        lvl = 0
        for k, stem in enumerate(stems):
            if k and stem != stems[k - 1]:
                lvl += 1
            level_of.append(lvl)
        pos = np.searchsorted(ch["start_ns"].to_numpy(np.int64), issued, side="right") - 1
        inside = (pos >= 0) & (issued <= ch["end_ns"].to_numpy(np.int64)[np.maximum(pos, 0)])
        chain[g[inside]] = pos[inside]
        shown = ", ".join(dict.fromkeys(stems))
        s.notes.append(f"streams: {len(ch)} chains from the window's child ranges ({shown}; ranges of one stem are "
                       f"independent), over {n} streams")
    else:
        # N equal consecutive parts of each stream's work, in order
        for st in np.unique(s.stream[g]):
            on = g[s.stream[g] == st]
            on = on[np.argsort(s.start[on], kind="stable")]
            chain[on] = (np.arange(len(on)) * n) // max(1, len(on))
        level_of = [0] * n
        s.notes.append(f"streams: no child ranges name the chains; each stream's work cut into {n} equal "
                       "consecutive parts (a guess)")
    base = s.stream.copy()
    new = base.copy()
    moved = chain >= 0
    new[moved] = np.where(chain[moved] % n == 0, base[moved], -10_000 - (chain[moved] % n) * 1000 - base[moved])
    s.restream(new)
    # a chain of a later level waits for every chain of the level before it
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i in g[np.argsort(s.start[g], kind="stable")]:
        c = int(chain[i])
        if c >= 0:
            first.setdefault(c, int(i))
            last[c] = int(i)
    src, dst = [], []
    for c, f in first.items():
        lv = level_of[c] if c < len(level_of) else 0
        for c2, l2 in last.items():
            if c2 < len(level_of) and level_of[c2] == lv - 1:
                src.append(l2)
                dst.append(f)
    s.add_edges(src, dst, "event_wait")
    # the syncs that waited for the work now wait for every stream's last op launched before them
    hw = s.edges[(s.edges["type"] == "host_wait").to_numpy()]
    extra_src, extra_dst = [], []
    for d in np.unique(hw["dst"].to_numpy()):
        for st in np.unique(new[g]):
            on = g[(new[g] == st) & (issued < s.start[d])]
            if len(on):
                extra_src.append(int(on[np.argmax(issued[np.isin(g, on)])]))
                extra_dst.append(int(d))
    s.add_edges(extra_src, extra_dst, "host_wait", to="end")


def pinned_latency(nodes: pd.DataFrame) -> dict[str, float]:
    """The median time (ns) of small (under 64 KiB) pinned copies, by direction: the least a copy takes."""
    cp = nodes[(nodes["kind"].astype(str) == "memcpy").to_numpy() & (nodes["bytes"] < 1 << 16).to_numpy()
               & (nodes["src_mem"].astype(str) != "pageable").to_numpy()
               & (nodes["dst_mem"].astype(str) != "pageable").to_numpy()]
    d = (cp["end_ns"] - cp["start_ns"]).groupby(cp["copy_kind"].astype(str).str.split().str[0]).median()
    return {str(k): float(v) for k, v in d.items()}


#: What pinned host copies of 1 MiB or more reached, GB/s by direction, per GPU model, in tracer's own recordings:
#: the fallback of ``pinned`` for a trace with no pinned copy of that direction (said in the output). NVIDIA H200
#: (PCIe Gen5 x16 host link): the median over the 21 of tracer's 41 H200 traces (tracer/examples,
#: tests/data/h200-sizes; 2026-12-02/03) that have such copies, DtoH 53.8-55.2 GB/s, HtoD 49.1-55.2 GB/s.
REFERENCE_PINNED_GBPS: dict[str, dict[str, float]] = {
    "NVIDIA H200": {"DtoH": 55.1, "HtoD": 54.7},
}


def reference_pinned(graph: Graph) -> tuple[dict[str, float], str | None]:
    """:data:`REFERENCE_PINNED_GBPS` of the graph's GPU model (where every GPU of the trace is that model) and
    its name; ``({}, None)`` for any other."""
    names = set(graph.gpu_names.values())
    if len(names) == 1:
        (name,) = names
        if name in REFERENCE_PINNED_GBPS:
            return REFERENCE_PINNED_GBPS[name], name
    return {}, None


def pinned_bandwidth(graph: Graph) -> dict[str, float]:
    """Bytes per ns (= GB/s) pinned copies reached, by direction (HtoD, DtoH), over the whole graph: from the
    copies of 1 MiB or more where there are some, else from those of 64 KiB or more; none from smaller ones
    (they measure latency: a 4-byte `.item()` copy would give 0.0 GB/s)."""
    n = graph.nodes
    cp = n[(n["kind"].astype(str) == "memcpy").to_numpy()
           & (n["src_mem"].astype(str) != "pageable").to_numpy() & (n["dst_mem"].astype(str) != "pageable").to_numpy()
           & n["bytes"].notna().to_numpy()]
    out: dict[str, float] = {}
    for k, grp in cp.groupby(cp["copy_kind"].astype(str).str.split().str[0], observed=True):
        big = grp[(grp["bytes"] >= 1 << 20).to_numpy()]
        grp = big if len(big) else grp[(grp["bytes"] >= 1 << 16).to_numpy()]
        ns = float((grp["end_ns"] - grp["start_ns"]).sum())
        if ns > 0 and str(k) in ("HtoD", "DtoH"):
            out[str(k)] = float(grp["bytes"].sum()) / ns
    return out


def replay(graph: Graph, plan: Plan | None = None, *, start_ns: int | None = None, end_ns: int | None = None,
           demand: Mapping[Any, float] | None = None, children: pd.DataFrame | None = None) -> Replay:
    """Replay the work issued in [start_ns, end_ns] (:func:`issued_nodes`) under ``plan`` (None: unchanged).

    ``demand``: each kernel's share of its GPU by correlation id (:func:`tracer.explain.occupancy.
    demand_of`); kernels not in it fill the GPU. ``children``: the child ranges of the window (name,
    start_ns, end_ns) that name independent chains for ``streams``. Raises :class:`TracerError` when the window
    has no work or a plan needs what the trace lacks.
    """
    plan = plan or Plan()
    ids = issued_nodes(graph, start_ns, end_ns)
    if not len(ids):
        raise TracerError("replay", "no work issued in the window")
    s = _Setup(graph, ids, demand or {})
    if s.is_kernel.any() and not s.demand_known[s.is_kernel].any():
        s.notes.append("no kernel launch figures (grid, block, registers): every kernel counts as filling its GPU")
    if plan.balance:
        _apply_balance(s, graph)
    if plan.warm:
        _apply_warm(s, graph)
    if plan.pinned:
        _apply_pinned(s, plan.pinned_gbps, pinned_bandwidth(graph), reference_pinned(graph))
    if plan.side_stream:
        _apply_side_stream(s)
        if not plan.pinned and _pageable_copies(s.nodes).any():
            # (a copy from or to pageable memory is synchronous to the host whatever its stream: moved alone it
            # still blocks, which is why the real side-stream variant copies into pinned memory)
            s.notes.append("side-stream: pageable copies stay synchronous on any stream; pinned+side-stream "
                           "replays copies into pinned memory on a side stream, as a real side-stream program does")
    if plan.no_sync:
        _apply_no_sync(s, plan.no_sync_name)
    if plan.launch:
        _apply_launch(s, plan.launch_us, graph)
    if plan.no_wait:
        _apply_no_wait(s, children if children is not None else pd.DataFrame(
            {"name": [], "start_ns": [], "end_ns": []}))
    if plan.graphs:
        _apply_graphs(s, plan.graphs_us)
    if plan.concurrent:
        _apply_concurrent(s)
    if plan.streams > 1:
        _apply_streams(s, plan.streams, children if children is not None else pd.DataFrame(
            {"name": [], "start_ns": [], "end_ns": []}))
    start, end = _simulate(s)
    measured = int(s.end.max() - s.start.min())
    predicted = int(round(end.max() - start.min()))
    out = pd.DataFrame({"node": s.nodes["node"].to_numpy(), "start_ns": start, "end_ns": end})
    return Replay(plan, measured, predicted, out, tuple(s.notes))


def _simulate(s: _Setup) -> tuple[np.ndarray, np.ndarray]:
    """The discrete-event pass: replayed start and end of every node (ns from the window's first start)."""
    m = len(s.nodes)
    e = s.edges.drop_duplicates(["src", "dst", "type", "to"])
    is_start = (e["to"] == "start").to_numpy()
    src, dst, ov = e["src"].to_numpy(np.int64), e["dst"].to_numpy(np.int64), e["overhead"].to_numpy(float)
    out_start: list[list[tuple[int, float]]] = [[] for _ in range(m)]
    out_end: list[list[tuple[int, float]]] = [[] for _ in range(m)]
    n_start = np.zeros(m, np.int64)
    n_end = np.zeros(m, np.int64)
    from_start = e["type"].isin(["launch", "part_launch"]).to_numpy()  # (part_launch: balance's host parts)
    arrival = (e["type"] == "collective").to_numpy()
    out_begun: list[list[tuple[int, float]]] = [[] for _ in range(m)]  # launch edges: from src's start
    out_arrived: list[list[tuple[int, float]]] = [[] for _ in range(m)]  # collective end edges: likewise
    for a, b, o, st, fs, ar in zip(src.tolist(), dst.tolist(), ov.tolist(), is_start.tolist(), from_start.tolist(),
                                   arrival.tolist()):
        if ar and not st:
            out_arrived[a].append((b, o))
            n_end[b] += 1
        elif fs:
            out_begun[a].append((b, o))
            n_start[b] += 1
        elif st:
            out_start[a].append((b, o))
            n_start[b] += 1
        else:
            out_end[a].append((b, o))
            n_end[b] += 1
    earliest = np.full(m, -np.inf)
    end_min = np.full(m, -np.inf)
    start_t = np.full(m, np.nan)
    end_t = np.full(m, np.nan)
    own_done = np.zeros(m, dtype=bool)
    held = np.zeros(m, dtype=bool)  # GPU ops on a resource whose own work is done, still waiting (a collective)
    starts: list[tuple[float, int]] = []  # (time, node)
    finishes: list[tuple[float, int]] = []  # host nodes: (time their own work is done, node)
    t0 = int(s.start.min())  # times relative to it: float ns keep sub-ns precision there, not at 1.8e18
    for i in np.flatnonzero(n_start == 0).tolist():
        heapq.heappush(starts, (float(s.start[i] - t0), i))
    remaining: dict[int, dict[int, float]] = {}  # resource -> {node: solo ns left}
    load: dict[int, float] = {}
    res, dem, is_gpu = s.resource, s.demand, s.is_gpu
    t = 0.0
    done = 0

    def release(edges: list[tuple[int, float]], at: float) -> None:
        for b, o in edges:
            earliest[b] = max(earliest[b], at + o)
            n_start[b] -= 1
            if n_start[b] == 0:
                heapq.heappush(starts, (max(earliest[b], at), b))

    def release_end(edges: list[tuple[int, float]], at: float) -> None:
        for b, o in edges:
            end_min[b] = max(end_min[b], at + o)
            n_end[b] -= 1
            if n_end[b] == 0 and own_done[b]:
                heapq.heappush(finishes, (max(end_min[b], at), b))

    def finish(i: int, at: float) -> None:
        nonlocal done
        end_t[i] = at
        done += 1
        if held[i]:  # a GPU op that waited for end edges after its own work: it leaves its resource now
            load[int(res[i])] -= dem[i]
        release(out_start[i], at)
        release_end(out_end[i], at)

    def pending_host(now: float) -> None:
        """Finish what is due by ``now``; a code -1 - node is a node whose own time is done but that may still
        wait: a host node for GPU work, a GPU node without a resource for its end edges (a collective)."""
        while finishes and finishes[0][0] <= now:
            _, code = heapq.heappop(finishes)
            if code >= 0:
                finish(code, now)
                continue
            i = -1 - code
            own_done[i] = True
            if n_end[i] == 0:
                heapq.heappush(finishes, (max(now, end_min[i]), i))

    while done < m:
        nxt = np.inf
        if starts:
            nxt = starts[0][0]
        if finishes:
            nxt = min(nxt, finishes[0][0])
        for r, left in remaining.items():
            if left:
                nxt = min(nxt, t + min(left.values()) * max(1.0, load[r]))
        if nxt == np.inf:
            break  # a cycle: the caller reports unfinished nodes
        nxt = max(nxt, t)
        dt = nxt - t
        ended: list[tuple[int, int]] = []
        for r, left in remaining.items():
            if left and dt > 0:
                speed = 1.0 / max(1.0, load[r])
                for i in left:
                    left[i] -= dt * speed
            for i, v in left.items():
                if v <= 1e-6:
                    ended.append((r, i))
        t = nxt
        for r, i in ended:
            del remaining[r][i]
            if n_end[i] or end_min[i] > t:
                # a rank's part of a collective done with its own transfer before the others arrived: it keeps its
                # share of the GPU (the comm kernel spins) until its end edges allow it to end
                held[i] = own_done[i] = True
                if n_end[i] == 0:
                    heapq.heappush(finishes, (end_min[i], i))
                continue
            load[r] -= dem[i]
            finish(i, t)
        pending_host(t)
        while starts and starts[0][0] <= t:
            _, i = heapq.heappop(starts)
            start_t[i] = t
            release(out_begun[i], t)
            release_end(out_arrived[i], t)
            if is_gpu[i] and res[i] >= 0:
                remaining.setdefault(int(res[i]), {})[i] = max(float(s.dur[i]), 1e-3)
                load[int(res[i])] = load.get(int(res[i]), 0.0) + dem[i]
            elif is_gpu[i] and n_end[i] == 0:
                heapq.heappush(finishes, (max(t + float(s.dur[i]), end_min[i]), i))
                own_done[i] = True
            elif is_gpu[i]:
                heapq.heappush(finishes, (t + float(s.dur[i]), -1 - i))
            else:
                own_done[i] = True
                if n_end[i] == 0:
                    heapq.heappush(finishes, (max(t + float(s.own[i]), end_min[i]), i))
                else:
                    own_done[i] = False
                    heapq.heappush(finishes, (t + float(s.own[i]), -1 - i))
        pending_host(t)
    if done < m:
        stuck = np.flatnonzero(np.isnan(end_t))[:3]
        what = ", ".join(f"{s.nodes.at[i, 'name']} (node {s.nodes.at[i, 'node']})" for i in stuck)
        raise TracerError("replay", f"{m - done} of {m} nodes never became ready (a cycle in the graph), e.g. {what}")
    return start_t, end_t
