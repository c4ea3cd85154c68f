"""``tracer explain`` on the timeline page: the findings panel (why work did not overlap, ranked; a click zooms the
timeline to a finding's intervals), the critical path drawn over the lanes (:class:`PathPieces`), and under the
findings the run's source lines (:mod:`tracer.dashboard.lines_view`), computed with them from the same graph and path.

Explain runs once per run, when the page first needs it (:func:`explained`), and its result is kept on the run's
cached :class:`TimelineView`; traces over :data:`EAGER_EVENTS` events get a button instead of an automatic run,
and the path overlay starts off for them. The findings table carries only each finding's position (``id``); a
click sends it back and the server finds the window itself, as the collectives table does
(:mod:`tracer.dashboard.collectives_view`): a request cannot make the page zoom anywhere a finding is not.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from dash import html

from tracer.dashboard import ids, lines_view, row_table
from tracer.dashboard.figures import PathPieces, fmt_duration
from tracer.dashboard.lines_view import Lines
from tracer.dashboard.model import TimelineView
from tracer.dashboard.row_table import clickable_table
from tracer.errors import TracerError

#: Traces with more events than this are explained only when asked (a button; the path overlay starts off):
#: explain costs ~0.1 s on the bundled 700-event runs and ~1 s on 54k events (docs/dashboard.md).
EAGER_EVENTS = 60_000
#: Findings sent to the browser at most (the costliest first).
MAX_ROWS = 500
PAGE_SIZE = 10

COLUMNS: tuple[tuple[str, str, str], ...] = (  # (id, header, type)
    ("reason", "Why", "text"),
    ("path_ms", "On the path ms", "numeric"),
    ("cost_ms", "In all ms", "numeric"),
    ("where", "Where", "text"),
    ("start_ms", "Start ms", "numeric"),
    ("name", "Interval", "text"),
    ("evidence", "Evidence", "text"),
)  # (no Fix column: a kind's fix is the same on each of its rows, and the kinds' table above says it once)


@dataclass(frozen=True)
class Explained:
    """A run's explain result, as the page uses it. ``reason``: why explain cannot run on this trace (one line;
    then everything else is empty), else None. Times in ns since the view's ``t0_ns``."""

    reason: str | None
    findings: pd.DataFrame  # tracer.explain.findings.findings(): one row per finding, costliest first
    groups: pd.DataFrame  # group_findings(): one row per kind, ranked
    path: PathPieces  # the critical path's pieces
    breakdown: pd.DataFrame  # label, ns, share
    seconds: float  # what computing it took
    lines: Lines  # the "by source line" table, from the same graph and path (dashboard/lines_view.py)


_lock = threading.Lock()


def explained(view: TimelineView) -> Explained:
    """The run's explain result, computed on the first call and kept on ``view`` (the data layer caches views
    per run, so this is once per run)."""
    cache = view.__dict__
    if "_explained" not in cache:
        with _lock:  # two callbacks of one page may ask at once: compute once
            if "_explained" not in cache:
                cache["_explained"] = compute(view)
    found: Explained = cache["_explained"]
    return found


def is_computed(view: TimelineView) -> bool:
    return "_explained" in view.__dict__


def _empty(reason: str | None, lines: Lines, seconds: float = 0.0) -> Explained:
    from tracer.explain.findings import FINDING_COLUMNS, GROUP_COLUMNS  # (tracer.explain: only by compute, see there)

    e = np.zeros(0, np.int64)
    none = PathPieces(e, e, e, np.zeros(0, object), np.zeros(0, object))
    return Explained(reason, pd.DataFrame({c: [] for c in FINDING_COLUMNS}),
                     pd.DataFrame({c: [] for c in GROUP_COLUMNS}), none,
                     pd.DataFrame({"label": [], "ns": [], "share": []}), seconds, lines)


def _lines_without_path(view: TimelineView) -> Lines:
    """The lines of a run explain cannot run on: their GPU figures, no path or sync time (as ``tracer lines``)."""
    try:
        return lines_view.compute(view, lines_view.sources_of(view), None, None)
    except Exception as exc:  # noqa: BLE001 - as in compute: one line, not a page down
        return _no_lines(exc)


def _no_lines(exc: Exception) -> Lines:
    from tracer.explain.lines import LINE_COLUMNS

    return Lines(f"source lines failed on this trace ({type(exc).__name__}: {str(exc)[:200]})",
                 pd.DataFrame({c: [] for c in LINE_COLUMNS}), gpu=False)


def compute(view: TimelineView) -> Explained:
    """Explain the whole trace as ``tracer explain`` does (:func:`tracer.explain.explain`: the graph, the critical
    path, the findings with the kernels' demand read from the trace file and each finding's source line), without
    replaying the fixes (no cache: see :func:`explained`), and the lines of ``tracer lines`` from the same graph and
    path. A trace explain cannot run on gets its one-line ``reason`` (and its lines without path times)."""
    # (tracer.explain and the trace's launch figures, ~40 ms, when a run is first explained: not at the app's start)
    from tracer.explain import explain
    from tracer.parsers.demand import read_launch_figures

    t = time.perf_counter()
    if view.partial is not None:
        from tracer.explain.lines import LINE_COLUMNS

        not_here = Lines(f"no source lines here: {view.partial}", pd.DataFrame({c: [] for c in LINE_COLUMNS}),
                         gpu=False)
        return _empty(f"not explained here: {view.partial}; `tracer explain JOB --window START:END` explains a "
                      "window of it", not_here)
    ev = view.timeline.events
    try:
        # the kernels' launch figures (in the trace file, not the timeline): tell a full GPU from kernels that were
        # merely serialised, as `tracer explain` does
        launches = read_launch_figures(view.source) if view.source is not None else ()
        sources = lines_view.sources_of(view)
        result = explain(view.timeline, launches=launches, fix_replays=False, sources=sources)
    except TracerError as exc:
        return _empty(exc.problem, _lines_without_path(view))
    except Exception as exc:  # noqa: BLE001 - an analysis bug must not take the page down: say it in one line
        return _empty(f"explain failed on this trace ({type(exc).__name__}: {str(exc)[:200]})",
                      _lines_without_path(view))
    try:  # (the whole trace's graph and path, as `tracer lines` walks them)
        lines = lines_view.compute(view, sources, result.graph, result.path)
    except Exception as exc:  # noqa: BLE001 - the findings stay; the lines say they failed
        lines = _no_lines(exc)
    path, found = result.path, result.findings
    p = path.pieces
    pos = ev.index.get_indexer(p["row"].to_numpy())  # timeline row labels -> positions (the view's src)
    pieces = PathPieces(
        start_ns=p["start_ns"].to_numpy(np.int64) - view.t0_ns,
        end_ns=p["end_ns"].to_numpy(np.int64) - view.t0_ns,
        src=pos.astype(np.int64),
        label=p["label"].astype(str).to_numpy(dtype=object),
        name=p["name"].astype(str).to_numpy(dtype=object),
    )
    return Explained(None, found, result.groups(), pieces, path.breakdown(), time.perf_counter() - t, lines)


def finding_window(view: TimelineView, result: Explained, i: int) -> tuple[int, int]:
    """Finding ``i``'s window (ns since ``t0_ns``): the intervals it names and the time it cost, with a quarter
    of that on each side (at least 5 µs)."""
    f = result.findings.iloc[i]
    ev = view.timeline.events
    pos = ev.index.get_indexer(list(f["rows"]))
    pos = pos[pos >= 0]
    lo = min([int(f["start_ns"]), *ev["start_ns"].to_numpy()[pos].tolist()]) - view.t0_ns
    hi = max([int(f["end_ns"]), *ev["end_ns"].to_numpy()[pos].tolist()]) - view.t0_ns
    pad = max((hi - lo) // 4, 5_000)
    return lo - pad, hi + pad


def table_rows(view: TimelineView, result: Explained, limit: int = MAX_ROWS) -> list[dict[str, Any]]:
    """The ``limit`` costliest findings, numbers in the units of the headers; ``id`` is the finding's position in
    :attr:`Explained.findings`."""
    f = result.findings.head(limit)
    multi = view.multi_rank
    out = []
    for i, r in enumerate(f.itertuples(index=False)):
        where = where_text(int(r.device), int(r.stream))
        src = getattr(r, "source", None)
        out.append({
            "id": i,
            "reason": r.reason,
            **({"line": f"{src['file']}:{src['line']}" + ("" if src["exact"] else "*")} if src else {}),
            "path_ms": round(r.path_ns / 1e6, 3),
            "cost_ms": round(r.cost_ns / 1e6, 3),
            "where": f"rank {r.rank} · {where}" if multi else where,
            "start_ms": round((r.start_ns - view.t0_ns) / 1e6, 4),
            "name": r.name,
            "evidence": r.evidence,
        })
    return out


def columns(result: Explained) -> list[tuple[str, str, str]]:
    """The findings table's columns: :data:`COLUMNS`, and the line of the user's code that caused each finding
    where the trace has Python stacks (after the reason)."""
    src = result.findings["source"] if "source" in result.findings.columns else pd.Series([], dtype=object)
    if not src.notna().any():
        return list(COLUMNS)
    return [COLUMNS[0], ("line", "Your line", "text"), *COLUMNS[1:]]


def where_text(device: int, stream: int) -> str:
    """Where a finding is: ``"GPU 0 · stream 7"``, or ``"host"`` for one on the host (device -1: a collective
    waiting on gloo's threads), as ``tracer explain`` says it."""
    return f"GPU {device} · stream {stream}" if device >= 0 else "host"


def groups_table(result: Explained) -> html.Table:
    """One row per kind of finding, ranked by time on the critical path: how many, that time, the time in all,
    the fix."""
    head = ["Why", "Findings", "On the critical path", "In all", "Fix"]
    body = [
        html.Tr([html.Td(str(g.reason)), html.Td(f"{int(g.count):,}", className="num"),
                 html.Td(fmt_duration(g.path_ns), className="num"), html.Td(fmt_duration(g.cost_ns), className="num"),
                 html.Td(str(g.fix), className="small")])
        for g in result.groups.itertuples()
    ]
    return html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(body)],
                      id=ids.TL_FIND_GROUPS, className="table diff-table")


def path_line(result: Explained) -> str:
    """``"Critical path 192.5 ms: gpu compute 68%, copy 30%, ..."``: where the path's time went."""
    parts = [f"{r.label} {100 * r.share:.0f}%" for r in result.breakdown.itertuples() if r.share >= 0.005]
    length = int(result.path.end_ns[-1] - result.path.start_ns[0]) if len(result.path) else 0
    return f"Critical path of the whole trace {fmt_duration(length)}: " + ", ".join(parts) + "."


def no_findings_text(view: TimelineView) -> str:
    """What an empty findings table means for this run, in terms of what it has: copies, GPU work, ranks. A run
    without GPU work is told so, not that "every copy overlapped compute" (it had none)."""
    from tracer.explain.findings import MIN_GAP_NS  # (tracer.explain: imported by compute, see there)

    straggler = "no collective waited for a straggler rank"
    if not view.devices:  # (no word of copies or idle GPUs: the run had none)
        if view.multi_rank:
            return f"No findings: this job ran on the host only, and {straggler}."
        return "No findings: this run has host work only; the findings are about work on GPUs and a job's collectives."
    parts = []
    if any(d.memcpys for d in view.devices):
        parts.append("every copy overlapped compute")
    parts.append(f"no GPU idle gap over {fmt_duration(MIN_GAP_NS)} or waiting kernel has a reason in the trace")
    if view.multi_rank:
        parts.append(straggler)
    return "No findings: " + ", and ".join(parts) + "."


def section_title(view: TimelineView) -> str:
    """The findings section's heading: overlap is what they explain on a run with GPU work; a host-only run's
    findings (a job's collectives) are about waiting."""
    return "Findings: why work did not overlap" if view.devices else "Findings: why work waited"


def panel(view: TimelineView, result: Explained) -> list[Any]:
    """The findings panel's contents: the one-line reason where explain cannot run; else the path's breakdown,
    the kinds ranked and the costliest findings (a click zooms the timeline to one); then the run's source lines
    (:func:`tracer.dashboard.lines_view.section_children`: a click outlines a line's intervals)."""
    lines = html.Div(lines_view.section_children(view, result.lines), id=ids.TL_LINES, className="lines-part")
    if result.reason is not None:
        return [html.P(f"No findings: {result.reason}.", className="muted", id=ids.TL_FIND_REASON), lines]
    head = html.P(path_line(result), className="muted small")
    if result.findings.empty:
        return [head, html.P(no_findings_text(view), className="muted", id=ids.TL_FIND_NONE), lines]
    rows = table_rows(view, result)
    shown = "" if len(rows) == len(result.findings) else f" (the {len(rows):,} costliest shown)"
    return [
        head,
        groups_table(result),
        html.P(f"{len(result.findings):,} findings{shown}, costliest on the critical path first; each kind's fix is in "
               "the table above. Click a row to show its intervals above; `tracer explain` prints the same.",
               className="muted small"),
        clickable_table(ids.TL_FIND_TABLE, columns(result), rows, page_size=PAGE_SIZE, wrap=True),
        lines,
    ]


def section(view: TimelineView) -> html.Div:
    """The page's findings section: the panel when explain is cheap or already done, else a button that runs it
    (:func:`findings_children` answers it)."""
    events = view.n_events
    if view.partial is not None:  # (a large job read rank by rank: its graph needs the job whole)
        return html.Div(
            [html.H3(section_title(view)),
             html.P(f"Not explained here: {view.partial}. `tracer explain JOB --window START:END` explains a "
                    "window of it, reading only the rows near the window.", className="muted small"),
             html.Div(id=ids.TL_FINDINGS), html.Button(id=ids.TL_FIND_RUN, style={"display": "none"})],
            id=ids.TL_FIND_SECTION, className="collectives-section")
    if events <= EAGER_EVENTS or is_computed(view):
        children = panel(view, explained(view))
    else:
        children = [html.P(f"This trace has {events:,} events: explaining it takes a few seconds.",
                           className="muted small")]
    return html.Div(
        [
            html.H3(section_title(view)),
            html.Div(children, id=ids.TL_FINDINGS),
            html.Button("Explain this run", id=ids.TL_FIND_RUN, className="button",
                        style=None if events > EAGER_EVENTS and not is_computed(view) else {"display": "none"}),
        ],
        id=ids.TL_FIND_SECTION,
        className="collectives-section",
    )


def row_of_cell(cell: Any, n: int) -> int:
    """The finding a clicked cell (the grid's ``cellClicked``) belongs to, by its row id; :class:`UsageError`
    for a cell that names none of the ``n`` findings."""
    return row_table.row_of_cell(cell, n, table="findings table", thing="finding")
