"""The critical path: the chain of dependent intervals that set a run's (or a window's) end-to-end time.

Found by walking back from the interval that ended last: at each node, the dependency that was met last (the
edge with the latest ``ready_ns``) is the one that held it up; the walk follows it until it reaches the start
of the window or a node nothing held up. Each step gives pieces of time that tile the path with no gap and no
overlap: the node's own time (``gpu compute``, ``communication``, ``copy``, ``host work``, ``launch overhead``
for a call that launched GPU work, ``waiting on a sync`` for a blocking call) and the lag on the edge between
the dependency's end and the dependent's start (``gpu gap`` on a stream, ``launch overhead`` from a launch,
``waiting on another stream`` after an event, ``waiting on a sync`` from the GPU op's end to the host call's
return, ``host gap`` between two traced intervals of a thread: untraced host time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracer.errors import TracerError
from tracer.explain.graph import EDGE_TYPES, Graph
from tracer.timeline import Timeline
from tracer.vocabulary import GPU_WORK_KINDS

#: What a piece of the path is, in the order breakdowns list them.
LABELS: tuple[str, ...] = (
    "gpu compute", "communication", "copy", "launch overhead", "host work", "waiting on a sync",
    "waiting on another stream", "gpu gap", "host gap",
)
#: Labels of the time between a dependency's end and its dependent's start, by edge type.
LAG_LABELS: dict[str, str] = {
    "stream": "gpu gap", "launch": "launch overhead", "event_wait": "waiting on another stream",
    "legacy_stream": "waiting on another stream", "host_wait": "waiting on a sync", "thread": "host gap",
    # a rank's part of a collective from the last rank's arrival to its end: the collective itself
    "collective": "communication",
}
#: The name of a piece of the whole trace's path that no interval of the trace covers: the trace's span (ranges
#: included) before the path's first interval or after its last.
UNTRACED = "(untraced: the trace's span before its first or after its last traced interval)"
PIECE_COLUMNS: tuple[str, ...] = ("start_ns", "end_ns", "dur_ns", "label", "node", "row", "kind", "name", "edge")


@dataclass(frozen=True)
class Window:
    """What the path is asked for: [``start_ns``, ``end_ns``] (trace clock; None: open), ``what`` it is, in words,
    and which work counts: with ``issued`` (a range: HTA's rule) the work issued in the window, host intervals
    that start in it and GPU work whose launch does, followed to its end; else the work that ran in it, cut at
    its edges."""

    start_ns: int | None = None
    end_ns: int | None = None
    what: str = "the whole trace"
    issued: bool = False


@dataclass(frozen=True)
class CriticalPath:
    """The path as ``pieces`` (one row per piece, in time order: ``start_ns``, ``end_ns``, ``dur_ns``, ``label``,
    ``node`` (graph node the piece belongs to; for an edge's lag, the dependent), ``row`` (its timeline row),
    ``kind``, ``name``, ``edge`` (the edge type for a lag, "" for a node's own time)).
    """

    pieces: pd.DataFrame
    start_ns: int
    end_ns: int
    window: Window
    notes: tuple[str, ...] = field(default=())

    @property
    def length_ns(self) -> int:
        """End-to-end time of the path: its pieces' sum."""
        return self.end_ns - self.start_ns

    def breakdown(self) -> pd.DataFrame:
        """Time per label (``ns``, ``share`` of the path), in :data:`LABELS` order, labels with no time left out."""
        by = self.pieces.groupby("label", observed=True)["dur_ns"].sum()
        rows = [(lb, int(by[lb])) for lb in LABELS if lb in by.index and by[lb] > 0]
        total = max(self.length_ns, 1)
        return pd.DataFrame({"label": [r[0] for r in rows], "ns": [r[1] for r in rows],
                             "share": [r[1] / total for r in rows]})

    def top(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` intervals with the most time on the path (their pieces summed per timeline row and label):
        ``row``, ``kind``, ``name``, ``label``, ``ns``, ``start_ns``."""
        p = self.pieces[self.pieces["row"] >= 0]
        g = p.groupby(["row", "label"], observed=True, sort=False).agg(
            ns=("dur_ns", "sum"), kind=("kind", "first"), name=("name", "first"), start_ns=("start_ns", "min"))
        g = g.reset_index().sort_values(["ns", "start_ns"], ascending=[False, True], kind="stable").head(n)
        return g[["row", "kind", "name", "label", "ns", "start_ns"]].reset_index(drop=True)

    def by_name(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` names (kernel, operator, call) with the most time on the path, summed over their intervals:
        ``name``, ``kind``, ``label``, ``ns``, ``count`` (intervals)."""
        p = self.pieces[self.pieces["row"] >= 0]
        g = p.groupby(["name", "kind", "label"], observed=True, sort=False).agg(
            ns=("dur_ns", "sum"), count=("row", "nunique"))
        g = g.reset_index().sort_values(["ns", "name"], ascending=[False, True], kind="stable").head(n)
        return g[["name", "kind", "label", "ns", "count"]].reset_index(drop=True)

    def traced_ns(self) -> int:
        """The path's length without its ``host gap`` pieces (time no traced interval covers) and the lag of
        host waits: what a path of zero-weight dependency edges (HTA's) measures."""
        p = self.pieces
        lag_free = (p["label"] != "host gap") & ~((p["edge"] == "host_wait") & (p["label"] == "waiting on a sync"))
        return int(p.loc[lag_free, "dur_ns"].sum())

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        """The path as plain data (``tracer explain --json``)."""
        b = self.breakdown()
        return {
            "window": {"start_ns": self.window.start_ns, "end_ns": self.window.end_ns, "what": self.window.what},
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "length_ns": self.length_ns,
            "traced_ns": self.traced_ns(),
            "pieces": len(self.pieces),
            "breakdown": [{"label": r.label, "ns": int(r.ns), "share": float(r.share)} for r in b.itertuples()],
            "top": [{"row": int(r.row), "kind": str(r.kind), "name": str(r.name), "label": str(r.label),
                     "ns": int(r.ns), "start_ns": int(r.start_ns)} for r in self.top(top).itertuples()],
            "by_name": [{"name": str(r.name), "kind": str(r.kind), "label": str(r.label), "ns": int(r.ns),
                         "count": int(r.count)} for r in self.by_name(top).itertuples()],
            "notes": list(self.notes),
        }


def window_of_range(timeline: Timeline, name: str, instance: int = 0) -> Window:
    """The window of one instance (0: the first, in time order) of a host range or operator named ``name``
    (exactly, else every one whose name contains it, as HTA's ``annotation`` does). In a job, instances are
    counted per rank and the window spans the ``instance``-th of every rank that has it (a training step on
    all ranks). Raises :class:`TracerError` when there is none."""
    ev = timeline.events
    host = ev[ev["kind"].isin(["range", "cpu_op"]).to_numpy()]
    names = host["name"].astype(str)
    hit = host[(names == name).to_numpy()]
    if hit.empty:
        hit = host[names.str.contains(name, regex=False).to_numpy()]
    if hit.empty:
        raise TracerError(timeline.meta.source or "trace", f"no range or operator named {name!r}: "
                          "`tracer summary` lists the ranges the trace has")
    hit = hit.sort_values(["start_ns", "end_ns"], kind="stable")
    per_rank = [g for _, g in hit.groupby("rank", sort=True)]
    most = max(len(g) for g in per_rank)
    if not -most <= instance < most:
        raise TracerError(timeline.meta.source or "trace",
                          f"range {name!r} has {most} instance(s){' per rank' if len(per_rank) > 1 else ''}; "
                          f"instance {instance} asked for")
    chosen = pd.DataFrame([g.iloc[instance] for g in per_rank if -len(g) <= instance < len(g)])
    r = chosen.iloc[0]
    shown = str(r["name"]) if str(r["name"]) == name else f"{r['name']} (matched {name!r})"
    what = f"range {shown}, instance {instance % most} of {most}"
    if len(per_rank) > 1:
        ranks = sorted(int(x) for x in chosen["rank"])
        what += f" on ranks {', '.join(map(str, ranks))}" if len(ranks) < 8 else f" on {len(ranks)} ranks"
    return Window(int(chosen["start_ns"].min()), int(chosen["end_ns"].max()), what, issued=True)


def _binding(edges: pd.DataFrame, n: int, to: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node: the source, ready time and type code of its ``to`` edge met last (-1: none)."""
    src = np.full(n, -1, np.int64)
    ready = np.zeros(n, np.int64)
    kind = np.full(n, -1, np.int64)
    e = edges[(edges["to"] == to).to_numpy()]
    if len(e):
        code = e["type"].cat.codes.to_numpy(np.int64)
        f = pd.DataFrame({"dst": e["dst"].to_numpy(), "src": e["src"].to_numpy(), "ready": e["ready_ns"].to_numpy(),
                          "code": code})
        f = f.sort_values(["dst", "ready", "code"], ascending=[True, False, True], kind="stable")
        f = f.drop_duplicates("dst", keep="first")
        d = f["dst"].to_numpy()
        src[d], ready[d], kind[d] = f["src"].to_numpy(), f["ready"].to_numpy(), f["code"].to_numpy()
    return src, ready, kind


def node_labels(nodes: pd.DataFrame) -> np.ndarray:
    """The label of each node's own time."""
    kind = nodes["kind"].astype(str).to_numpy()
    comm = nodes["collective"].astype(str).to_numpy() != ""
    labels: np.ndarray = np.select(
        [(kind == "kernel") & comm, kind == "kernel", np.isin(kind, ["memcpy", "memset"]),
         nodes["blocking"].to_numpy(bool), nodes["launches"].to_numpy(bool)],
        ["communication", "gpu compute", "copy", "waiting on a sync", "launch overhead"],
        default="host work",
    )
    return labels


def _in_window(graph: Graph, window: Window) -> np.ndarray:
    """Nodes of the window's work (:class:`Window`): issued in it (host slices that start in it, GPU ops whose
    launch did or, with no launch in the graph, that start in it), or running in it."""
    nodes, edges = graph.nodes, graph.edges
    lo = np.iinfo(np.int64).min if window.start_ns is None else window.start_ns
    hi = np.iinfo(np.int64).max if window.end_ns is None else window.end_ns
    if not window.issued:
        running: np.ndarray = (nodes["start_ns"].to_numpy(np.int64) < hi) & (nodes["end_ns"].to_numpy(np.int64) > lo)
        return running
    at = nodes["start_ns"].to_numpy(np.int64).copy()
    launch = edges[(edges["type"] == "launch").to_numpy()]
    at[launch["dst"].to_numpy()] = nodes["start_ns"].to_numpy(np.int64)[launch["src"].to_numpy()]
    inside: np.ndarray = (at >= lo) & (at <= hi)
    return inside


@dataclass
class Walked:
    """The pieces of one walk back (in the order met: latest first) and where it stopped (``start_ns``)."""

    start_ns: int
    s: list[int] = field(default_factory=list)
    e: list[int] = field(default_factory=list)
    label: list[str] = field(default_factory=list)
    node: list[int] = field(default_factory=list)
    edge: list[str] = field(default_factory=list)


class Walker:
    """Walks back from a node through its binding edges (the dependency met last), as the critical path does.
    The binding edges of every node are chosen once, vectorised; each walk only follows them."""

    def __init__(self, graph: Graph) -> None:
        nodes = graph.nodes
        n = len(nodes)
        s_src, s_ready, s_type = _binding(graph.edges, n, "start")
        e_src, e_ready, e_type = _binding(graph.edges, n, "end")
        # (plain lists: indexing them is several times faster than numpy scalars, one step per node)
        self.start = nodes["start_ns"].to_numpy(np.int64).tolist()
        self.s_src, self.s_ready, self.s_type = s_src.tolist(), s_ready.tolist(), s_type.tolist()
        self.e_src, self.e_ready, self.e_type = e_src.tolist(), e_ready.tolist(), e_type.tolist()
        self.labels = node_labels(nodes).tolist()

    def walk(self, node: int, t: int, lo: int) -> Walked:
        """The pieces from ``node`` at time ``t`` back to ``lo`` (or to a node nothing held up)."""
        types = list(EDGE_TYPES)
        start_l, labels_l = self.start, self.labels
        s_src_l, s_ready_l, s_type_l = self.s_src, self.s_ready, self.s_type
        e_src_l, e_ready_l, e_type_l = self.e_src, self.e_ready, self.e_type
        out = Walked(t)

        def piece(s: int, e: int, label: str, node: int, edge: str) -> None:
            if e > s:
                out.s.append(s)
                out.e.append(e)
                out.label.append(label)
                out.node.append(node)
                out.edge.append(edge)

        # A node can be met twice: a blocking copy call hands the path to its copy (host_wait), whose launch
        # edge leads back to the call, now at the copy's start; only the same node at the same time is a loop.
        seen: set[tuple[int, int]] = set()
        while node >= 0 and (node, t) not in seen:
            seen.add((node, t))
            w = e_src_l[node]
            if w >= 0 and start_l[node] <= e_ready_l[node] <= t:
                # a blocking call that returned when the GPU op it waited for ended, or a rank's part of a
                # collective that ended after the last rank arrived: the path goes through what it waited for
                edge = types[e_type_l[node]]
                r = max(e_ready_l[node], lo)
                piece(r, t, LAG_LABELS[edge], node, edge)
                if r <= lo:
                    t = lo
                    break
                node, t = w, r
                continue
            s = max(start_l[node], lo)
            piece(s, t, labels_l[node], node, "")
            t = s
            if s <= lo or s_src_l[node] < 0:
                break
            r = max(s_ready_l[node], lo)
            edge = types[s_type_l[node]]
            piece(r, t, LAG_LABELS[edge], node, edge)
            t = r
            if r <= lo:
                break
            node = s_src_l[node]
        out.start_ns = t
        return out


def has_gpu_work(nodes: pd.DataFrame) -> bool:
    """Whether graph ``nodes`` hold GPU work (kernels, copies, memsets): a host-only trace's have none."""
    return bool(nodes["kind"].astype(str).isin(GPU_WORK_KINDS).any())


def critical_path(graph: Graph, window: Window | None = None, span: tuple[int, int] | None = None) -> CriticalPath:
    """The critical path of the work of ``window`` (default: the whole trace), ending where the last of it
    ends (for a window of running work: where it ends or the window does). ``span``: the trace's (first start,
    last end) over every interval, ranges included; for the whole trace the path is stretched to cover it, the
    time before its first piece and after its last (a range open with no traced work in it: Python's own time)
    as ``host gap``, so that the path of the whole trace is as long as the trace; in a host-only trace, where a
    walk stops at the start of a thread's chain, the path goes on from the work that ended last before it (threads
    hand work over through nothing a trace records). Raises :class:`TracerError` when the window holds no work."""
    window = window or Window()
    nodes = graph.nodes
    scope = _in_window(graph, window)
    if not scope.any():
        raise TracerError("window", f"no host or GPU work {'issued' if window.issued else 'ran'} in {window.what}")
    end = nodes["end_ns"].to_numpy(np.int64)
    hi = np.iinfo(np.int64).max if window.end_ns is None or window.issued else window.end_ns
    ends = np.where(scope, np.minimum(end, hi), np.iinfo(np.int64).min)
    last = int(np.argmax(ends))
    lo = np.iinfo(np.int64).min if window.start_ns is None else window.start_ns
    walker = Walker(graph)
    walked = walker.walk(last, int(ends[last]), lo)
    t, stop = walked.start_ns, int(ends[last])
    out_s, out_e, out_label, out_node, out_edge = walked.s, walked.e, walked.label, walked.node, walked.edge
    whole = span is not None and window.start_ns is None and window.end_ns is None
    if whole and not has_gpu_work(nodes):
        # A host-only trace: Python threads hand work to each other (futures, joins, queues) through nothing the
        # trace records, so a walk stops where a thread's chain began. Before it, the work that ended last is
        # what the host did before (the time between, a host gap): the path goes on from there, to the start.
        by_end = np.argsort(np.where(scope, end, np.iinfo(np.int64).max), kind="stable")
        sorted_end = end[by_end][: int(scope.sum())]
        while True:
            k = int(np.searchsorted(sorted_end, t, side="right")) - 1
            if k < 0:
                break
            node = int(by_end[k])
            more = walker.walk(node, int(end[node]), lo)
            if more.start_ns >= t:  # (no progress: an interval of no length at t)
                break
            if t > int(end[node]):
                out_s.append(int(end[node]))
                out_e.append(t)
                out_label.append("host gap")
                out_node.append(-1)
                out_edge.append("")
            out_s += more.s
            out_e += more.e
            out_label += more.label
            out_node += more.node
            out_edge += more.edge
            t = more.start_ns
    if whole:
        assert span is not None
        for s, e in ((span[0], t), (stop, span[1])):
            if e > s:  # (node -1: no interval of the trace; its row is -1 below)
                out_s.append(s)
                out_e.append(e)
                out_label.append("host gap")
                out_node.append(-1)
                out_edge.append("")
        t, stop = min(t, span[0]), max(stop, span[1])
    order = np.argsort(np.array(out_s, dtype=np.int64), kind="stable")
    idx = np.array(out_node, dtype=np.int64)[order]
    pieces = pd.DataFrame({
        "start_ns": np.array(out_s, dtype=np.int64)[order],
        "end_ns": np.array(out_e, dtype=np.int64)[order],
    })
    pieces["dur_ns"] = pieces["end_ns"] - pieces["start_ns"]
    pieces["label"] = pd.Categorical(np.array(out_label, dtype=object)[order], categories=list(LABELS))
    pieces["node"] = idx
    known = idx >= 0
    rows = np.full(len(idx), -1, np.int64)
    kinds = np.full(len(idx), "", dtype=object)
    names = np.full(len(idx), UNTRACED, dtype=object)
    rows[known] = nodes["row"].to_numpy(np.int64)[idx[known]]
    kinds[known] = nodes["kind"].astype(str).to_numpy()[idx[known]]
    names[known] = nodes["name"].astype(str).to_numpy()[idx[known]]
    pieces["row"], pieces["kind"], pieces["name"] = rows, kinds, names
    pieces["edge"] = np.array(out_edge, dtype=object)[order]
    return CriticalPath(pieces[list(PIECE_COLUMNS)], t, stop, window, graph.notes)
