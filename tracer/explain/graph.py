"""The dependency graph of a run, read from its timeline: which interval had to wait for which.

Nodes are GPU work (kernel, memcpy, memset: one node each) and host time (cpu_op, runtime and driver calls,
flattened per thread into *slices*: a nested call stack becomes the sequence of its innermost intervals, so one
thread's nodes never overlap and run one after another). Edges are typed (:data:`EDGE_TYPES`):

- ``stream``: a GPU op waits for the previous op on its stream;
- ``launch``: a GPU op waits for the runtime / driver call that launched it (correlation id,
  :func:`tracer.timeline.launch_links`);
- ``event_wait``: a GPU op waits for the op before a ``cudaEventRecord`` on another stream
  (``cudaStreamWaitEvent``; read from Kineto's cuda_sync rows);
- ``host_wait``: a blocking host call (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, a synchronous copy, ``.item()``'s copy + sync) cannot *end* before the GPU op it
  waited for ends; the host's next slice follows it on the thread;
- ``thread``: a host slice waits for the previous slice of its thread;
- ``collective`` (a job): a rank's part of a collective cannot *end* before every other rank's part *started*
  (:mod:`tracer.explain.collective`);
- ``legacy_stream``: an op on the legacy default stream waits for the last op issued before it on every
  blocking stream of its device, and an op on a blocking stream for the last one issued before it on the legacy
  stream (CUDA's implicit synchronisation; only where the trace says which stream is which: nsys'
  ``TARGET_INFO_CUDA_STREAM``).

Every edge says when its dependency was satisfied (``ready_ns``) and how long the dependent started after that
(``lag_ns``). docs/explain.md says what each trace format gives and what is inferred.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracer.explain import collective as coll
from tracer.timeline import Timeline, launch_links

GPU_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset")
HOST_KINDS: tuple[str, ...] = ("cpu_op", "runtime", "driver")
#: Edge types, in the order a tie between two equally late dependencies is broken (first wins).
EDGE_TYPES: tuple[str, ...] = ("host_wait", "collective", "event_wait", "legacy_stream", "stream", "launch",
                               "thread")

NODE_COLUMNS: tuple[str, ...] = (
    "row", "kind", "name", "start_ns", "end_ns", "rank", "pid", "tid", "device", "stream", "correlation",
    "copy_kind", "src_mem", "dst_mem", "bytes", "collective", "launches", "blocking",
)
EDGE_COLUMNS: tuple[str, ...] = ("src", "dst", "type", "to", "ready_ns", "lag_ns", "inferred")

# Host calls that return only when GPU work they wait for is done (nsys names carry a _v<N> suffix, dropped
# first). cudaMemcpy / cuMemcpy* without Async are synchronous for every memory kind; the Async ones only with
# pageable host memory (handled by the copy's src_mem / dst_mem).
_SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize",
})
_STREAM_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent"})
#: An inferred cross-stream wait: the op started at most this long after the other stream's op ended, and at
#: least :data:`UNEXPLAINED_NS` after both its stream's previous op and its launch were done.
EVENT_WAIT_TOLERANCE_NS = 20_000
UNEXPLAINED_NS = 2_000
_SYNC_COPY_RE = re.compile(r"^(cudaMemcpy|cudaMemcpy2D|cudaMemcpy3D|cudaMemset|cuMemcpy[A-Za-z0-9]*|hipMemcpy)$")
_VERSION_SUFFIX_RE = re.compile(r"_v\d+$")

# Kineto's cuda_sync names (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION types)
_STREAM_WAIT = "Stream Wait Event"
_EVENT_SYNC = "Event Sync"
_STREAM_SYNC = "Stream Sync"
_CONTEXT_SYNC = "Context Sync"


@dataclass(frozen=True)
class Graph:
    """A run's dependency graph as two DataFrames.

    ``nodes`` (index = node id, 0..n-1): ``row`` (the timeline row the node is, or for a host slice is part of),
    ``kind``, ``name``, ``start_ns``, ``end_ns``, ``rank``, ``pid``, ``tid``, ``device``, ``stream``,
    ``correlation``, ``copy_kind``, ``src_mem``, ``dst_mem``, ``bytes``, ``collective`` (the row's),
    ``launches`` (a host call that launched GPU work) and ``blocking`` (a host call that waits for the GPU).

    ``edges``: ``src`` → ``dst`` (node ids), ``type`` (:data:`EDGE_TYPES`), ``to`` ("start": dst cannot start
    before src ends; "end": dst cannot end before src ends, the host waits), ``ready_ns`` (when the dependency
    was met as the trace shows it: src's end, no later than dst's start for "start" edges), ``lag_ns`` (dst's
    start, or for "end" edges its end, minus ``ready_ns``) and ``inferred`` (True where the edge comes from
    timing and names, not from ids the trace gives).

    ``notes``: what the trace lacked, each with what to record instead. ``collectives`` (a job): each rank's
    part of each collective instance two ranks or more ran (:data:`tracer.explain.collective.PART_COLUMNS`:
    instance ``key``, ``collective``, ``pg``, ``seq``, ``matched_by``, ``rank``, its ``first`` and ``last``
    node, ``start_ns``, ``end_ns``).
    """

    nodes: pd.DataFrame
    edges: pd.DataFrame
    notes: tuple[str, ...] = field(default=())
    has_sync_events: bool = False
    collectives: pd.DataFrame = field(default_factory=coll.no_parts)
    #: The timeline's GPU names by device index (``meta.gpu_names``): what a plan may look up per GPU model.
    gpu_names: dict[int, str] = field(default_factory=dict)


def base_name(name: str) -> str:
    """A runtime call's name without nsys' ``_v3020``-style version suffix."""
    return _VERSION_SUFFIX_RE.sub("", name)


def _named(names: pd.Series, among: frozenset[str]) -> np.ndarray:
    """Which of ``names`` (a categorical column) are in ``among``, nsys' version suffix dropped: one test per
    distinct name, not per row."""
    cat = names.astype("category").cat
    hit = np.array([base_name(str(c)) in among for c in cat.categories] + [False], dtype=bool)
    found: np.ndarray = hit[cat.codes.to_numpy()]  # (code -1, a missing name, reads the False at the end)
    return found


def build_graph(timeline: Timeline) -> Graph:
    """The dependency graph of ``timeline`` (every rank, process, device and thread in it)."""
    ev = timeline.events
    kind = ev["kind"].astype(str).to_numpy()
    gpu = ev[np.isin(kind, GPU_KINDS) & (ev["device"].to_numpy() >= 0)]
    inst, where = coll.comm_instances(ev)
    is_host = np.isin(kind, HOST_KINDS)
    if where == "host":  # a job's collectives on the host (gloo's ranges on its worker threads) are nodes too
        is_host |= ev.index.isin(inst["row"].to_numpy())
    host = ev[is_host]
    links = launch_links(ev)
    slices = host_slices(host)
    nodes = _nodes(ev, gpu, slices, links)
    n_gpu = len(gpu)
    node_of_gpu_row = pd.Series(np.arange(n_gpu, dtype=np.int64), index=gpu.index)
    # the first and last slice of each host row: where it starts; where a call's launch or its return happens
    host_nodes = nodes.iloc[n_gpu:]
    by_row = pd.Series(host_nodes.index.to_numpy(), index=host_nodes["row"].to_numpy())
    first_slice = by_row[~by_row.index.duplicated(keep="first")]
    last_slice = by_row[~by_row.index.duplicated(keep="last")]
    parts_table = coll.parts(inst, where, node_of_gpu_row, first_slice, last_slice)

    parts = [
        _stream_edges(nodes.iloc[:n_gpu]),
        _launch_edges(links, node_of_gpu_row, last_slice),
        _thread_edges(host_nodes),
    ]
    notes: list[str] = []
    cross = coll.edges(parts_table)
    if len(cross):
        parts.append(cross)
        starts = nodes["start_ns"].to_numpy(np.int64)[cross["src"].to_numpy()]
        ends = nodes["end_ns"].to_numpy(np.int64)[cross["dst"].to_numpy()]
        contradicted = int((starts > ends).sum())
        if contradicted:
            notes.append(f"{contradicted:,} of {len(cross):,} cross-rank (collective) edges contradict the ranks' "
                         "clocks (a collective would end on one rank before it started on another) and are left "
                         "out; --clock-fix moves each rank's clock by the collectives' fix where one offset fits "
                         "them all")
    syncs = _sync_table(timeline)
    flags = _stream_flag_table(timeline)
    if flags is not None and n_gpu and len(links):
        parts.append(_legacy_stream_edges(_launched(nodes, links, node_of_gpu_row, ev), flags, nodes, ev, links))
    if n_gpu and links.empty:
        notes.append("the trace ties no GPU work to the host call that launched it (no correlation ids): record "
                     "with torch.profiler (CPU and CUDA activities) or nsys --trace=cuda")
    if syncs is not None:
        parts += _recorded_sync_edges(nodes, syncs, links, node_of_gpu_row, last_slice, ev)
    elif n_gpu:
        notes.append("no CUDA synchronisation records: cross-stream waits (cudaStreamWaitEvent) and host waits are "
                     "inferred from timing and call names; record with `tracer record` (it turns on torch.profiler's "
                     "enable_cuda_sync_events) to have them read, not inferred")
    recorded = _recorded_calls(ev, syncs) if syncs is not None else np.zeros(0, np.int64)
    parts.append(_inferred_host_waits(nodes, links, node_of_gpu_row, last_slice, recorded))
    if syncs is None and _named(ev["name"], _STREAM_WAIT_CALLS).any():
        parts.append(_inferred_event_waits(nodes.iloc[:n_gpu], pd.concat(parts[:2], ignore_index=True), nodes))
    edges = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else _no_edges()
    edges = _finish_edges(edges, nodes)
    nodes["blocking"] = False
    # a call that waited: one a host_wait edge points at whose GPU op ended while it ran
    hw = edges[(edges["type"] == "host_wait").to_numpy()]
    waited = hw.loc[(hw["ready_ns"].to_numpy() >= nodes["start_ns"].to_numpy()[hw["dst"].to_numpy()]), "dst"].to_numpy()
    nodes.loc[np.unique(waited), "blocking"] = True
    is_sync_name = _named(nodes["name"], _SYNC_CALLS)
    nodes.loc[is_sync_name & nodes["kind"].isin(["runtime", "driver"]).to_numpy(), "blocking"] = True
    return Graph(nodes, edges, tuple(notes), syncs is not None, parts_table, dict(timeline.meta.gpu_names))


def host_slices(host: pd.DataFrame) -> pd.DataFrame:
    """Host intervals flattened per thread (rank, pid, tid): ``row``, ``start_ns``, ``end_ns`` of each piece of
    time during which ``row`` was the innermost open interval, in time order. An interval that only partly
    overlaps the one it starts in is cut at that one's end (a trace's call stacks nest; a rounding can make two
    stamps cross). A zero-length interval (or one wholly covered by its children) keeps one zero-length slice at
    its start, so that every row has a node.
    """
    if host.empty:
        return pd.DataFrame({"row": np.zeros(0, np.int64), "start_ns": np.zeros(0, np.int64),
                             "end_ns": np.zeros(0, np.int64)})
    thread = host.groupby(["rank", "pid", "tid"], sort=False, observed=True).ngroup().to_numpy(np.int64)
    start = host["start_ns"].to_numpy(np.int64)
    end = host["end_ns"].to_numpy(np.int64)
    rows = host.index.to_numpy(np.int64)
    order = np.lexsort((-end, start, thread))
    out_row: list[int] = []
    out_start: list[int] = []
    out_end: list[int] = []

    def emit(row: int, s: int, e: int) -> None:
        out_row.append(row)
        out_start.append(s)
        out_end.append(e)

    # A stack walk: Python, but one step per host interval (a million intervals take about a second).
    stack_row: list[int] = []
    stack_end: list[int] = []
    cursor = 0

    def close(until: int | None) -> None:
        """Pop the open intervals that end by ``until`` (all: None), each keeping its time after the cursor."""
        nonlocal cursor
        while stack_row and (until is None or stack_end[-1] <= until):
            top_end, top_row = stack_end.pop(), stack_row.pop()
            if cursor < top_end:
                emit(top_row, cursor, top_end)
                cursor = top_end

    current = -1
    for i in order.tolist():
        th, s, e, r = int(thread[i]), int(start[i]), int(end[i]), int(rows[i])
        if th != current:
            close(None)
            current, cursor = th, s
        close(s)
        if stack_row:
            if cursor < s:
                emit(stack_row[-1], cursor, s)
            e = min(e, stack_end[-1])
        cursor = max(cursor, s)
        stack_row.append(r)
        stack_end.append(e)
    close(None)
    sl = pd.DataFrame({"row": np.array(out_row, dtype=np.int64), "start_ns": np.array(out_start, dtype=np.int64),
                       "end_ns": np.array(out_end, dtype=np.int64)})
    missing = np.setdiff1d(rows, sl["row"].to_numpy())
    if len(missing):
        at = host.loc[missing, "start_ns"].to_numpy(np.int64)
        sl = pd.concat([sl, pd.DataFrame({"row": missing, "start_ns": at, "end_ns": at})], ignore_index=True)
    th_of_row = pd.Series(thread, index=rows)
    sl["_thread"] = th_of_row.loc[sl["row"].to_numpy()].to_numpy()
    sl = sl.sort_values(["_thread", "start_ns", "end_ns"], kind="stable").drop(columns="_thread")
    return sl.reset_index(drop=True)


def _nodes(ev: pd.DataFrame, gpu: pd.DataFrame, slices: pd.DataFrame, links: pd.DataFrame) -> pd.DataFrame:
    keep = ["kind", "name", "rank", "pid", "tid", "device", "stream", "correlation", "copy_kind", "src_mem",
            "dst_mem", "bytes", "collective"]
    g = gpu[keep + ["start_ns", "end_ns"]].copy()
    g.insert(0, "row", gpu.index.to_numpy(np.int64))
    h = ev.loc[slices["row"].to_numpy(), keep].reset_index(drop=True)
    h.insert(0, "row", slices["row"].to_numpy())
    h["start_ns"] = slices["start_ns"].to_numpy()
    h["end_ns"] = slices["end_ns"].to_numpy()
    nodes = pd.concat([g.reset_index(drop=True), h], ignore_index=True)
    for c in ("kind", "name", "copy_kind", "src_mem", "dst_mem", "collective"):
        nodes[c] = nodes[c].astype(str).astype("category")
    nodes["launches"] = nodes["row"].isin(links["call_row"].to_numpy()).to_numpy() & (nodes.index >= len(g))
    nodes["blocking"] = False
    return nodes[list(NODE_COLUMNS)]


def _no_edges() -> pd.DataFrame:
    return pd.DataFrame({"src": np.zeros(0, np.int64), "dst": np.zeros(0, np.int64), "type": [], "to": [],
                         "inferred": np.zeros(0, bool)})


def _edges(src: np.ndarray, dst: np.ndarray, kind: str, to: str = "start", inferred: bool = False) -> pd.DataFrame:
    return pd.DataFrame({"src": np.asarray(src, np.int64), "dst": np.asarray(dst, np.int64), "type": kind, "to": to,
                         "inferred": inferred})


def _chain(frame: pd.DataFrame, keys: list[str], kind: str) -> pd.DataFrame:
    """Edges from each node to the next of its group (``keys``) in time order."""
    if len(frame) < 2:
        return _no_edges()
    f = frame.sort_values([*keys, "start_ns", "end_ns"], kind="stable")
    group = f.groupby(keys, sort=False, observed=True).ngroup().to_numpy()
    ids = f.index.to_numpy(np.int64)
    same = group[1:] == group[:-1]
    return _edges(ids[:-1][same], ids[1:][same], kind)


def _stream_edges(gpu_nodes: pd.DataFrame) -> pd.DataFrame:
    return _chain(gpu_nodes, ["rank", "device", "stream"], "stream")


def _thread_edges(host_nodes: pd.DataFrame) -> pd.DataFrame:
    # (host_slices' order is time order per thread already; _chain sorts again, stably)
    return _chain(host_nodes, ["rank", "pid", "tid"], "thread")


def _launch_edges(links: pd.DataFrame, node_of_gpu_row: pd.Series, last_slice: pd.Series) -> pd.DataFrame:
    if links.empty:
        return _no_edges()
    ok = links["work_row"].isin(node_of_gpu_row.index) & links["call_row"].isin(last_slice.index)
    lk = links[ok.to_numpy()]
    return _edges(last_slice.loc[lk["call_row"].to_numpy()].to_numpy(),
                  node_of_gpu_row.loc[lk["work_row"].to_numpy()].to_numpy(), "launch")


def _rank_tables(timeline: Timeline, key: str) -> list[pd.DataFrame]:
    """The table ``meta.extra[key]`` (columns as lists) of a trace, or of each rank of a job (kept per part under
    ``extra["parts"]``, in rank order: :func:`tracer.job.load.load_job`), each with its ``rank`` column."""
    extra = timeline.meta.extra
    table = extra.get(key)
    if isinstance(table, dict) and table.get(next(iter(table), "")):
        info = extra.get("distributed_info")
        rank = int(info["rank"]) if isinstance(info, dict) and isinstance(info.get("rank"), int) else 0
        return [pd.DataFrame(table).assign(rank=rank)]
    parts, ranks = extra.get("parts"), extra.get("ranks")
    if not isinstance(parts, list) or not isinstance(ranks, dict) or len(parts) != len(ranks):
        return []
    out = []
    for rank, part in zip(sorted(int(r) for r in ranks), parts):
        t = (part.get("extra") or {}).get(key) if isinstance(part, dict) else None
        if isinstance(t, dict) and t.get(next(iter(t), "")):
            out.append(pd.DataFrame(t).assign(rank=rank))
    return out


def _sync_table(timeline: Timeline) -> pd.DataFrame | None:
    """Kineto's cuda_sync rows (``meta.extra["cuda_sync"]``: a trace's, or every rank's of a job), or None when
    the trace has none."""
    tables = _rank_tables(timeline, "cuda_sync")
    return pd.concat(tables, ignore_index=True) if tables else None


def _stream_flag_table(timeline: Timeline) -> pd.DataFrame | None:
    """Each stream's kind (``meta.extra["stream_flags"]``: rank, pid, stream, flag), or None where the trace does
    not say (Kineto)."""
    tables = _rank_tables(timeline, "stream_flags")
    return pd.concat(tables, ignore_index=True) if tables else None


def _legacy_stream_edges(launched: pd.DataFrame, flags: pd.DataFrame, nodes: pd.DataFrame, ev: pd.DataFrame,
                         links: pd.DataFrame) -> pd.DataFrame:
    """``legacy_stream`` edges: CUDA's legacy default stream (the NULL stream, launched to without the
    per-thread ``_ptsz`` / ``_ptds`` API) waits for all work issued before on the blocking streams of its device,
    and they for it. Issue order is the launching calls' order (:func:`_launched`)."""
    if launched.empty:
        return _no_edges()
    by = ["rank", "pid", "device", "stream"]
    f = flags[["rank", "pid", "stream", "flag"]].astype({"rank": np.int64, "pid": np.int64, "stream": np.int64})
    g = launched.merge(f.drop_duplicates(["rank", "pid", "stream"], keep="last"), on=["rank", "pid", "stream"],
                       how="left")
    # a NULL stream used through the per-thread API is the per-thread default stream: no implicit sync
    call_of_row = links.drop_duplicates("work_row").set_index("work_row")["call_row"]
    rows = nodes["row"].to_numpy(np.int64)[g["node"].to_numpy(np.int64)]
    call = call_of_row.reindex(rows).to_numpy()
    names = ev["name"].astype(str).to_numpy()
    per_thread = np.array([c == c and ("_ptsz" in names[int(c)] or "_ptds" in names[int(c)]) for c in call],
                          dtype=bool) if len(call) else np.zeros(0, bool)
    flag = g["flag"].astype(object).to_numpy()
    legacy = g.loc[(flag == "null") & ~per_thread, by].drop_duplicates()
    blocking = g.loc[flag == "blocking", by].drop_duplicates()
    if legacy.empty or blocking.empty:
        return _no_edges()
    out: list[pd.DataFrame] = []
    for waiters, others in ((legacy, blocking), (blocking, legacy)):
        ops = g.merge(waiters, on=by)[["rank", "pid", "device", "node", "launch_ns"]]
        at = ops.merge(others, on=["rank", "pid", "device"]).reset_index(drop=True)
        if at.empty:
            continue
        w = _last_launched_before(launched, at.rename(columns={"launch_ns": "at_ns"})[["at_ns", *by]], by)
        out.append(_edges(w["node"].to_numpy(np.int64), at.loc[w["key"].to_numpy(), "node"].to_numpy(np.int64),
                          "legacy_stream", inferred=True))
    return pd.concat(out, ignore_index=True) if out else _no_edges()


def _launched(nodes: pd.DataFrame, links: pd.DataFrame, node_of_gpu_row: pd.Series, ev: pd.DataFrame) -> pd.DataFrame:
    """GPU nodes with the start of the call that launched them (``launch_ns``) and that call's correlation."""
    lk = links[links["work_row"].isin(node_of_gpu_row.index).to_numpy()]
    g = nodes.loc[node_of_gpu_row.loc[lk["work_row"].to_numpy()].to_numpy(), ["rank", "pid", "device", "stream"]]
    g = g.copy()
    g["node"] = g.index.to_numpy()
    g["launch_ns"] = ev.loc[lk["call_row"].to_numpy(), "start_ns"].to_numpy(np.int64)
    return g.sort_values("launch_ns", kind="stable").reset_index(drop=True)


def _last_launched_before(launched: pd.DataFrame, at: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """For each row of ``at`` (``at_ns`` and the ``by`` keys; index kept in ``key``), the last GPU node on the
    same ``by`` launched before ``at_ns`` (column ``node``; rows without one are dropped)."""
    if at.empty or launched.empty:
        return pd.DataFrame({"key": [], "node": []})
    left = at.assign(key=at.index.to_numpy()).sort_values("at_ns", kind="stable")
    left["at_ns"] = left["at_ns"].astype(np.int64)
    right = launched[[*by, "launch_ns", "node"]].copy()
    for c in by:
        left[c] = left[c].astype(np.int64)
        right[c] = right[c].astype(np.int64)
    m = pd.merge_asof(left, right, left_on="at_ns", right_on="launch_ns", by=by, direction="backward",
                      allow_exact_matches=False)
    m = m[m["node"].notna()]
    return pd.DataFrame({"key": m["key"].to_numpy(), "node": m["node"].to_numpy(np.int64)})


def _recorded_sync_edges(nodes: pd.DataFrame, syncs: pd.DataFrame, links: pd.DataFrame,
                         node_of_gpu_row: pd.Series, last_slice: pd.Series, ev: pd.DataFrame) -> list[pd.DataFrame]:
    """``event_wait`` and ``host_wait`` edges from Kineto's cuda_sync rows."""
    call = _call_table(ev)
    s = syncs.merge(call, on=["rank", "correlation"], how="inner")
    rec = call.rename(columns={"correlation": "wait_correlation", "call_row": "record_row", "call_ns": "record_ns"})
    s = s.merge(rec[["rank", "wait_correlation", "record_ns"]], on=["rank", "wait_correlation"], how="left")
    launched = _launched(nodes, links, node_of_gpu_row, ev)
    out: list[pd.DataFrame] = []
    # the op an event stands for: the last one launched on wait_stream before its cudaEventRecord
    waits_event = s["name"].isin([_STREAM_WAIT, _EVENT_SYNC]).to_numpy() & s["record_ns"].notna().to_numpy()
    ev_at = s[waits_event]
    src = _last_launched_before(
        launched, pd.DataFrame({"at_ns": ev_at["record_ns"], "rank": ev_at["rank"], "pid": ev_at["pid"],
                                "device": ev_at["device"], "stream": ev_at["wait_stream"]}),
        ["rank", "pid", "device", "stream"])
    src_of = pd.Series(src["node"].to_numpy(), index=src["key"].to_numpy())
    # cudaStreamWaitEvent: the first op launched on the waiting stream after the call waits for it
    sw = s[(s["name"] == _STREAM_WAIT).to_numpy() & s.index.isin(src_of.index)]
    if len(sw) and len(launched):
        left = pd.DataFrame({"key": sw.index.to_numpy(), "at_ns": sw["call_ns"].to_numpy(np.int64),
                             "rank": sw["rank"].to_numpy(np.int64), "pid": sw["pid"].to_numpy(np.int64),
                             "device": sw["device"].to_numpy(np.int64), "stream": sw["stream"].to_numpy(np.int64)})
        right = launched[["rank", "pid", "device", "stream", "launch_ns", "node"]].astype(np.int64)
        m = pd.merge_asof(left.sort_values("at_ns"), right, left_on="at_ns", right_on="launch_ns",
                          by=["rank", "pid", "device", "stream"], direction="forward")
        m = m[m["node"].notna()]
        out.append(_edges(src_of.loc[m["key"].to_numpy()].to_numpy(), m["node"].to_numpy(np.int64), "event_wait"))
    # cudaEventSynchronize: the host call cannot return before the event's op ends. CUPTI also files an "Event
    # Sync" under cudaEventQuery, which does not wait (it says whether the event is done): not an edge.
    call_name = ev.loc[s["call_row"].to_numpy(), "name"].astype(str).map(base_name).to_numpy()
    es = s[(s["name"] == _EVENT_SYNC).to_numpy() & s.index.isin(src_of.index) & (call_name != "cudaEventQuery")]
    if len(es):
        out.append(_edges(src_of.loc[es.index.to_numpy()].to_numpy(),
                          last_slice.loc[es["call_row"].to_numpy()].to_numpy(), "host_wait", "end"))
    # cudaStreamSynchronize: the last op launched on the stream before the call; cudaDeviceSynchronize: on every
    # stream of the device
    ss = s[(s["name"] == _STREAM_SYNC).to_numpy()]
    if len(ss):
        w = _last_launched_before(launched, pd.DataFrame({"at_ns": ss["call_ns"], "rank": ss["rank"], "pid": ss["pid"],
                                                          "device": ss["device"], "stream": ss["stream"]}),
                                  ["rank", "pid", "device", "stream"])
        out.append(_edges(w["node"].to_numpy(), last_slice.loc[ss.loc[w["key"], "call_row"].to_numpy()].to_numpy(),
                          "host_wait", "end"))
    cs = s[(s["name"] == _CONTEXT_SYNC).to_numpy()]
    if len(cs) and len(launched):
        streams = launched[["rank", "pid", "device", "stream"]].drop_duplicates()
        at = cs[["call_ns", "call_row", "rank", "pid", "device"]].rename(columns={"call_ns": "at_ns"})
        at = at.assign(_i=np.arange(len(at))).merge(streams, on=["rank", "pid", "device"])
        w = _last_launched_before(launched, at[["at_ns", "rank", "pid", "device", "stream"]],
                                  ["rank", "pid", "device", "stream"])
        out.append(_edges(w["node"].to_numpy(), last_slice.loc[at.loc[w["key"], "call_row"].to_numpy()].to_numpy(),
                          "host_wait", "end"))
    return out


def _call_table(ev: pd.DataFrame) -> pd.DataFrame:
    """Runtime / driver calls with a correlation id: rank, pid, correlation, call_row, call_ns (first per id)."""
    calls = ev[ev["kind"].isin(["runtime", "driver"]).to_numpy() & ev["correlation"].notna().to_numpy()]
    call = pd.DataFrame({"rank": calls["rank"].to_numpy(np.int64), "pid": calls["pid"].to_numpy(np.int64),
                         "correlation": calls["correlation"].to_numpy(np.int64),
                         "call_row": calls.index.to_numpy(np.int64),
                         "call_ns": calls["start_ns"].to_numpy(np.int64)})
    return call.drop_duplicates(["rank", "correlation"], keep="first")


def _recorded_calls(ev: pd.DataFrame, syncs: pd.DataFrame) -> np.ndarray:
    """Timeline rows of the calls a sync record is filed under."""
    m = syncs[["rank", "correlation"]].merge(_call_table(ev), on=["rank", "correlation"], how="inner")
    return np.unique(m["call_row"].to_numpy(np.int64))


def _inferred_host_waits(nodes: pd.DataFrame, links: pd.DataFrame, node_of_gpu_row: pd.Series,
                         last_slice: pd.Series, recorded: np.ndarray) -> pd.DataFrame:
    """``host_wait`` edges read from names and timing: a synchronous copy or memset waits for the work it
    launched; a synchronising call that no sync record is filed under (``recorded``: rows that have one) waits
    for the GPU op of its process that ended last while it ran."""
    out: list[pd.DataFrame] = []
    lk = links[links["work_row"].isin(node_of_gpu_row.index).to_numpy()
               & links["call_row"].isin(last_slice.index).to_numpy()]
    if len(lk):
        work = node_of_gpu_row.loc[lk["work_row"].to_numpy()].to_numpy()
        call = last_slice.loc[lk["call_row"].to_numpy()].to_numpy()
        w = nodes.loc[work]
        cname = nodes.loc[call, "name"].astype(str).map(base_name).to_numpy()
        is_copy = w["kind"].isin(["memcpy", "memset"]).to_numpy()
        pageable = ((w["src_mem"].astype(str) == "pageable") | (w["dst_mem"].astype(str) == "pageable")).to_numpy()
        sync_copy = np.array([bool(_SYNC_COPY_RE.match(n)) for n in cname], dtype=bool)
        blocking = is_copy & (pageable | sync_copy)
        out.append(_edges(work[blocking], call[blocking], "host_wait", "end", inferred=True))
    h = nodes[nodes["kind"].isin(["runtime", "driver"]).to_numpy() & ~nodes["row"].isin(recorded).to_numpy()]
    h = h[_named(h["name"], _SYNC_CALLS)]
    g = nodes[nodes["kind"].isin(list(GPU_KINDS)).to_numpy()]
    if len(h) and len(g):
        gs = g.sort_values("end_ns", kind="stable")
        left = pd.DataFrame({"key": h.index.to_numpy(), "at_ns": h["end_ns"].to_numpy(np.int64),
                             "rank": h["rank"].to_numpy(np.int64), "pid": h["pid"].to_numpy(np.int64)})
        right = pd.DataFrame({"end_ns": gs["end_ns"].to_numpy(np.int64), "rank": gs["rank"].to_numpy(np.int64),
                              "pid": gs["pid"].to_numpy(np.int64), "node": gs.index.to_numpy(np.int64)})
        m = pd.merge_asof(left.sort_values("at_ns"), right, left_on="at_ns", right_on="end_ns",
                          by=["rank", "pid"], direction="backward")
        m = m[m["node"].notna()]
        start = h.loc[m["key"].to_numpy(), "start_ns"].to_numpy(np.int64)
        ran = m["end_ns"].to_numpy(np.int64) >= start  # the op ended while the call ran: the call waited for it
        out.append(_edges(m["node"].to_numpy(np.int64)[ran], m["key"].to_numpy(np.int64)[ran], "host_wait", "end",
                          inferred=True))
    return pd.concat(out, ignore_index=True) if out else _no_edges()


def _inferred_event_waits(gpu_nodes: pd.DataFrame, known: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """``event_wait`` edges read from timing, for a trace of a process that called cudaStreamWaitEvent but has no
    sync records saying for what: a GPU op that started later than its stream and its launch explain
    (:data:`UNEXPLAINED_NS`) and within :data:`EVENT_WAIT_TOLERANCE_NS` of the end of an op on another stream of
    its device waited for that op (the last one to end before it started)."""
    if gpu_nodes.empty or known.empty:
        return _no_edges()
    end = nodes["end_ns"].to_numpy(np.int64)
    start = nodes["start_ns"].to_numpy(np.int64)
    k = known[known["dst"].to_numpy() < len(gpu_nodes)]
    ready = pd.Series(np.minimum(end[k["src"].to_numpy()], start[k["dst"].to_numpy()]), index=k["dst"].to_numpy())
    explained = ready.groupby(level=0).max()
    g = gpu_nodes
    at = pd.Series(np.iinfo(np.int64).min, index=g.index, dtype=np.int64)
    at.loc[explained.index] = explained.to_numpy()
    late = g[(g["start_ns"].to_numpy(np.int64) - at.to_numpy()) > UNEXPLAINED_NS]
    if late.empty:
        return _no_edges()
    left = pd.DataFrame({"key": late.index.to_numpy(np.int64), "at_ns": late["start_ns"].to_numpy(np.int64),
                         "rank": late["rank"].to_numpy(np.int64), "device": late["device"].to_numpy(np.int64)})
    gs = g.sort_values("end_ns", kind="stable")
    right = pd.DataFrame({"end_ns": gs["end_ns"].to_numpy(np.int64), "rank": gs["rank"].to_numpy(np.int64),
                          "device": gs["device"].to_numpy(np.int64), "node": gs.index.to_numpy(np.int64)})
    m = pd.merge_asof(left.sort_values("at_ns"), right, left_on="at_ns", right_on="end_ns", by=["rank", "device"],
                      direction="backward", tolerance=EVENT_WAIT_TOLERANCE_NS)
    m = m[m["node"].notna()]
    src = m["node"].to_numpy(np.int64)
    other = nodes["stream"].to_numpy()[src] != nodes["stream"].to_numpy()[m["key"].to_numpy(np.int64)]
    return _edges(src[other], m["key"].to_numpy(np.int64)[other], "event_wait", inferred=True)


def _finish_edges(edges: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """Drop duplicates and edges the trace contradicts; add ``ready_ns`` and ``lag_ns``."""
    edges = edges.drop_duplicates(["src", "dst", "type"]).reset_index(drop=True)
    edges = edges[edges["src"].to_numpy() != edges["dst"].to_numpy()]
    s_start = nodes["start_ns"].to_numpy(np.int64)[edges["src"].to_numpy()]
    s_end = nodes["end_ns"].to_numpy(np.int64)[edges["src"].to_numpy()]
    d_start = nodes["start_ns"].to_numpy(np.int64)[edges["dst"].to_numpy()]
    d_end = nodes["end_ns"].to_numpy(np.int64)[edges["dst"].to_numpy()]
    to_end = edges["to"].to_numpy() == "end"
    # a "start" dependency that began after its dependent, or a wait whose op ended after the call returned,
    # is not what happened (a non-blocking query recorded as a sync, a stream reused across a capture): dropped
    # A collective edge is met when its source *starts* (that rank arrived): one that ends on dst before src
    # started is the ranks' clocks disagreeing, dropped too (build_graph counts them in a note)
    arrival = edges["type"].to_numpy() == "collective"
    ok = np.where(arrival, s_start <= d_end, np.where(to_end, s_end <= d_end, s_start <= d_start))
    edges = edges[ok].copy()
    s_start, s_end, d_start, d_end, to_end = s_start[ok], s_end[ok], d_start[ok], d_end[ok], to_end[ok]
    ready = np.where(to_end, s_end, np.minimum(s_end, d_start))
    ready = np.where(arrival[ok], s_start, ready)
    # A call that returned only after the op it launched had ended (a synchronous or pageable copy) launched it
    # at its start: the op was ready then, not when the call returned (else the call's wait for the stream
    # ahead of its copy would hide the work it waited for)
    launched_early = (edges["type"].to_numpy() == "launch") & (s_end >= d_end)
    ready = np.where(launched_early, np.minimum(s_start, d_start), ready)
    edges["ready_ns"] = ready
    edges["lag_ns"] = np.where(to_end, d_end, d_start) - ready
    edges["type"] = pd.Categorical(edges["type"], categories=list(EDGE_TYPES))
    edges["to"] = pd.Categorical(edges["to"], categories=["start", "end"])
    edges["inferred"] = edges["inferred"].astype(bool)
    return edges[list(EDGE_COLUMNS)].reset_index(drop=True)
