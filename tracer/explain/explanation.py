"""One explanation of a timeline, as ``tracer explain`` prints it and the dashboard's findings panel shows it
(:func:`explain`): the dependency graph, the critical path of the whole trace, a window or a range, the kernels'
demand, the findings, the replayed time of each finding's fix and the what-if replays, in one typed result
(:class:`Explanation`). A function of what it is given (the timeline; the kernels' launch figures, which
:mod:`tracer.parsers.demand` reads from the trace file): it reads no file and prints nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from tracer.errors import TracerError
from tracer.explain.critical import CriticalPath, Window, critical_path, has_gpu_work, window_of_range
from tracer.explain.findings import MIN_GAP_NS, findings, group_findings
from tracer.explain.findings import to_dict as findings_dict
from tracer.explain.graph import Graph, build_graph
from tracer.explain.lines import (
    LinesReport,
    Sources,
    finding_sources,
    findings_by_line,
    gpu_work_ns,
    line_table,
    read_sources,
)
from tracer.explain.occupancy import launch_demand
from tracer.explain.whatif import Replays, fix_gains
from tracer.timeline import Timeline

if TYPE_CHECKING:  # (the type of what it is given; the reader itself is never imported here)
    from tracer.parsers.demand import Launches

#: Event kinds a dependency graph is built from; the GPU's among them.
GRAPH_KINDS = ("kernel", "memcpy", "memset", "cpu_op", "runtime", "driver")
GPU_KINDS = ("kernel", "memcpy", "memset")
#: Why a timeline without any of :data:`GRAPH_KINDS` cannot be explained.
NO_WORK = ("no GPU work and no host operators or CUDA calls to build a dependency graph from: record with "
           "torch.profiler (CPU and CUDA activities) or nsys --trace=cuda")


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain` found. ``graph``: the dependency graph (:func:`tracer.explain.build_graph`); ``path``:
    the critical path of the window asked for (``path.window``); ``findings``: one row per finding, costliest on
    the path first (:func:`tracer.explain.findings.findings`), those of at least ``min_gap_ns``; ``gains``: each
    finding kind's fix replayed (:func:`tracer.explain.whatif.fix_gains`; empty where not asked for);
    ``what_if``: the ``--what-if`` replay (:meth:`tracer.explain.whatif.Replays.what_if`), None where none was
    asked for; ``job``: for a timeline of two ranks or more, its ``ranks``, the ``collective_edges`` and the
    collective ``instances`` that join them, else None; ``notes``: what the graph says of the trace (one line
    each); ``sources``: the user's frame and line of each host call (:func:`tracer.explain.lines.read_sources`),
    which gives each finding its ``source`` (a column of ``findings``: None where not known)."""

    graph: Graph
    path: CriticalPath
    findings: pd.DataFrame
    min_gap_ns: int
    gains: dict[str, Any]
    what_if: dict[str, Any] | None
    job: dict[str, Any] | None
    notes: tuple[str, ...]
    sources: Sources | None = None

    @property
    def host_only(self) -> bool:
        """Whether the trace has no GPU work (kernels, copies, memsets): its findings speak of the host alone."""
        return not has_gpu_work(self.graph.nodes)

    def groups(self) -> pd.DataFrame:
        """The findings by kind, ranked (:func:`tracer.explain.group_findings`)."""
        return group_findings(self.findings)

    def by_line(self) -> pd.DataFrame:
        """The findings by the user's source line, ranked (:func:`tracer.explain.lines.findings_by_line`); empty
        without Python stacks."""
        return findings_by_line(self.findings)

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        """As plain data (``tracer explain --json``, less its ``job``, whose clocks the command words): the path
        with its ``top`` intervals and names, every finding, each kind's ``fix_replay`` and the ``what_if``."""
        out = self.path.to_dict(top=top)
        out["findings"] = {"min_gap_ns": self.min_gap_ns, **findings_dict(self.findings)}
        for group in out["findings"]["groups"]:
            if group["kind"] in self.gains:
                group["fix_replay"] = self.gains[group["kind"]]
        if self.sources is not None:
            out["findings"]["by_line"] = self.by_line().to_dict(orient="records")
            out["source"] = self.sources.meta()
        if self.what_if is not None:
            out["what_if"] = self.what_if
        return out


def parse_window(text: str, origin_ns: int) -> tuple[int | None, int | None]:
    """``START:END`` in ms from ``origin_ns`` (the trace's first interval) → trace-clock ns; a side left empty
    is open. Raises :class:`TracerError` for anything else."""
    parts = text.split(":")
    if len(parts) != 2:
        raise TracerError("--window", f"{text!r} is not START:END (ms from the trace's start, e.g. 10:25.5 or 10:)")
    out: list[int | None] = []
    for p in parts:
        p = p.strip()
        if not p:
            out.append(None)
            continue
        try:
            ms = float(p)
        except ValueError:
            raise TracerError("--window", f"{p!r} is not a number of ms (START:END, e.g. 10:25.5)") from None
        if not (ms == ms and abs(ms) < 1e12):  # (NaN, inf)
            raise TracerError("--window", f"{p!r} is not a number of ms (START:END, e.g. 10:25.5)")
        out.append(origin_ns + round(ms * 1e6))
    lo, hi = out
    if lo is not None and hi is not None and hi <= lo:
        raise TracerError("--window", f"{text!r} " + ("is empty: it ends where it starts" if hi == lo
                                                     else "ends before it starts"))
    return lo, hi


def choose_window(timeline: Timeline, *, window: str | None = None, range_name: str | None = None,
                  instance: int | None = None, origin_ns: int | None = None) -> Window:
    """What the path is asked for: the ``instance``-th (default the first) of the range or operator
    ``range_name`` (:func:`tracer.explain.window_of_range`), else ``window`` (``START:END`` in ms from the
    trace's first interval, :func:`parse_window`; ``origin_ns``: that interval's start where ``timeline`` is only
    the part of a trace near the window), else the whole trace."""
    if range_name is not None:
        return window_of_range(timeline, range_name, instance or 0)
    if window is not None:
        origin = int(timeline.events["start_ns"].min()) if origin_ns is None else origin_ns
        lo, hi = parse_window(window, origin)
        return Window(lo, hi, f"the window {window} ms")
    return Window()


def explainable_graph(timeline: Timeline, name: str) -> Graph:
    """The dependency graph of ``timeline``; :class:`TracerError` (subject ``name``) where no path can be read
    from it: no work to build a graph of, or GPU work that no host call is tied to."""
    ev = timeline.events
    if not ev["kind"].isin(list(GRAPH_KINDS)).any():
        raise TracerError(name, NO_WORK)
    graph = build_graph(timeline)
    is_gpu = graph.nodes["kind"].isin(list(GPU_KINDS)).to_numpy()
    if is_gpu.any() and not (graph.edges["type"] == "launch").any():
        calls = ev["kind"].isin(["runtime", "driver"]).any()
        why = ("the trace has no correlation ids" if calls else
               "the trace has GPU work but none of the CUDA runtime or driver calls that launched it")
        raise TracerError(name, f"no GPU work is tied to the host call that launched it ({why}), so no path can "
                          "cross from the host to the GPU: record with torch.profiler (CPU and CUDA activities) "
                          "or nsys --trace=cuda")
    return graph


def job_facts(timeline: Timeline, graph: Graph) -> dict[str, Any] | None:
    """A job's ranks and the collective edges and instances that join them; None for one rank."""
    ranks = sorted(int(r) for r in timeline.events["rank"].unique())
    if len(ranks) < 2:
        return None
    return {"ranks": ranks, "collective_edges": int((graph.edges["type"] == "collective").sum()),
            "instances": int(graph.collectives["key"].nunique())}


def explain(timeline: Timeline, *, window: str | None = None, range_name: str | None = None,
            instance: int | None = None, min_gap_ns: int = MIN_GAP_NS, what_if: Sequence[str] | None = None,
            launches: Launches = (), fix_replays: bool = True, name: str | None = None,
            on_note: Callable[[str], None] | None = None, sources: Sources | None = None,
            origin_ns: int | None = None) -> Explanation:
    """Explain ``timeline``: build its graph (:func:`explainable_graph`), walk the critical path of the window
    asked for (:func:`choose_window`: ``range_name`` and its ``instance``, or ``window``, else the whole trace),
    read the findings (idle gaps and waits of at least ``min_gap_ns``) with the kernels' demand made from
    ``launches`` (:func:`tracer.parsers.demand.read_launches`; none: a full GPU is not told from serialised
    kernels), then, with ``fix_replays``, replay each finding kind's fix, and replay the plan ``what_if``
    (``NAME[=VALUE]``, :func:`tracer.explain.parse_plan`) where given.

    ``sources``: each host call's user frame and line (:func:`tracer.explain.lines.read_sources`, with the
    rule and the folders the user's files are read from); default: read with the default rule and no file (each
    finding's line is then its function's first).

    ``origin_ns``: where ``window``'s times count from, when ``timeline`` is only the part of a trace that bears on
    the window (a large job's rows near it, :func:`tracer.job.load.read_job_window`): the trace's first interval.

    ``name`` (default: the timeline's source) is the subject of the errors about the trace as a whole;
    ``on_note`` hears the graph's notes as soon as the findings are read (before a replay can fail). Raises
    :class:`TracerError` where the trace cannot be explained, the range or window is not in it or holds no
    work, or a what-if plan needs what the trace lacks."""
    name = name if name is not None else (timeline.meta.source or "trace")
    graph = explainable_graph(timeline, name)
    chosen = choose_window(timeline, window=window, range_name=range_name, instance=instance, origin_ns=origin_ns)
    ev = timeline.events
    # (the whole trace's path covers the trace's span, as the summary gives it: every interval, ranges included)
    span = (int(ev["start_ns"].min()), int(ev["end_ns"].max())) if len(ev) else None
    try:
        path = critical_path(graph, chosen, span)
    except TracerError as exc:
        raise TracerError(name, exc.problem) from None
    # the kernels' demand (their share of the GPU's block slots, from the trace file's launch figures): the
    # findings tell a full GPU from serialised kernels with it, and the replays share it; a job's is keyed by
    # (rank, correlation id)
    demand = launch_demand(launches)
    found = findings(graph, path, min_gap_ns=min_gap_ns, demand=demand)
    # the line of the user's code behind each finding (None without Python stacks)
    sources = sources if sources is not None else read_sources(timeline)
    found["source"] = finding_sources(found, graph, sources)
    for note in graph.notes:
        if on_note is not None:
            on_note(note)
    # the fixes' replays and the what-if's share the kernels' demand and the unchanged replay
    # (the path's pieces of no interval: the whole trace's span before and after its work, kept by every plan)
    untraced = int(path.pieces.loc[path.pieces["node"] < 0, "dur_ns"].sum())
    replays = Replays(timeline, graph, chosen, demand, untraced) if (fix_replays and len(found)) or what_if else None
    # the replayed time of each finding kind's fix (the same replay as --what-if with that kind's plan)
    gains = fix_gains(replays, sorted(set(found["kind"].astype(str))), found) \
        if fix_replays and replays is not None and len(found) else {}
    replayed = None
    if what_if and replays is not None:
        try:
            replayed = replays.what_if(list(what_if))
        except TracerError as exc:
            raise TracerError(name if exc.subject == "replay" else exc.subject, exc.problem) from None
    return Explanation(graph, path, found, min_gap_ns, gains, replayed, job_facts(timeline, graph),
                       tuple(graph.notes), sources)


def explain_lines(timeline: Timeline, sources: Sources | None = None, *, name: str | None = None) -> LinesReport:
    """``tracer lines``: each user line's GPU time, critical-path time, host-sync time and exposed copy time
    (:func:`tracer.explain.lines.line_table`) over the whole trace, from ``sources`` (default: the default rule,
    no file read). Where no graph can be built (no GPU work tied to its launches), the lines have their GPU
    figures and no path or sync time."""
    name = name if name is not None else (timeline.meta.source or "trace")
    sources = sources if sources is not None else read_sources(timeline)
    graph: Graph | None = None
    path: CriticalPath | None = None
    if sources.has_lines:
        try:
            graph = explainable_graph(timeline, name)
            ev = timeline.events
            path = critical_path(graph, Window(), (int(ev["start_ns"].min()), int(ev["end_ns"].max())))
        except TracerError:
            graph = path = None
    return lines_report(timeline, sources, graph, path)


def lines_report(timeline: Timeline, sources: Sources, graph: Graph | None = None,
                 path: CriticalPath | None = None) -> LinesReport:
    """The per-line table of ``timeline`` (:func:`tracer.explain.lines.line_table`) from a graph and the whole
    trace's critical path already built (the dashboard's, from :func:`explain` of the whole trace); None for
    either: the lines have their GPU figures and no path or sync time."""
    table = line_table(timeline, sources, graph, path)
    return LinesReport(table, sources, path.length_ns if path is not None else 0, gpu_work_ns(timeline))
