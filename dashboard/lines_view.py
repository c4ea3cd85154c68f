"""The timeline page's source lines (issue 37): the "by source line" table under the findings, what a click on one of
its lines outlines on the timeline, and the user's frame of a clicked interval.

- The table is ``tracer lines``'s (:func:`tracer.explain.lines.line_table`, ranked as it ranks them: per rank by GPU
  time, then critical-path time), computed with the findings from the same graph and critical path
  (:mod:`tracer.dashboard.explain_view` runs both once per run). A run without GPU work shows no GPU, sync or copy
  column; a trace without Python stacks shows the one note ``tracer lines`` gives, and nothing else.
- A line's intervals — its host calls and the kernels, copies and memsets they launched (the timeline's launch join,
  :func:`tracer.timeline.launch_links`) — are found once per run as positions in the view's sorted interval arrays
  (:attr:`Lines.order`, :meth:`Lines.members`); the page outlines them with one overlay trace
  (:func:`tracer.dashboard.figures.outline_trace`), merged per pixel as the lanes are.
- A clicked interval's user frame (:func:`frame_of`): a host call's own, GPU work's launching call's; with the user
  frames above it, innermost first.

The user's files are read from the trace's folder (a run directory itself) and the run's working directory
(meta.json's ``cwd``), as ``tracer lines`` does without ``--source-root``, and only from there
(:class:`ConfinedSourceFiles`): the page shows a line's text to whoever can open it, and an uploaded trace names
whatever files it likes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from dash import html

from tracer.analysis.source_code import SourceFiles, candidates, short_names
from tracer.dashboard import ids, row_table
from tracer.dashboard.figures import fmt_duration
from tracer.dashboard.model import TimelineView
from tracer.dashboard.row_table import clickable_table
from tracer.errors import UsageError
from tracer.timeline import GPU_WORK_KINDS

if TYPE_CHECKING:  # (tracer.explain is imported when a run is first explained, not with the app)
    from tracer.explain.critical import CriticalPath
    from tracer.explain.graph import Graph
    from tracer.explain.lines import Sources

#: Lines sent to the browser at most (in the table's order).
MAX_ROWS = 500
PAGE_SIZE = 10
#: What the ``(no line)`` row stands for (as ``tracer lines`` words it).
NO_LINE = "launched by no traced call under a line of yours"


@dataclass(frozen=True)
class Lines:
    """A run's source lines as the page uses them. ``note``: why there are none (no Python stacks, no frame of the
    user's: the note ``tracer lines`` prints), else None; ``table``: :func:`tracer.explain.lines.line_table`'s rows
    (``file`` "": a rank's work launched under no line of the user's); ``gpu``: whether the run has GPU work (else
    no GPU, sync or copy word is shown); ``path_ns``: the critical path's length (0: none could be walked);
    ``unread``: the user's files not found (their lines are each function's first); ``order`` and ``bounds``: the
    positions in the view's sorted interval arrays of each table row's intervals (:meth:`members`)."""

    note: str | None
    table: pd.DataFrame
    gpu: bool
    path_ns: int = 0
    gpu_ns: dict[int, int] = field(default_factory=dict)
    unread: tuple[str, ...] = ()
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bounds: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))

    def members(self, i: int) -> np.ndarray:
        """The positions (ascending, in the view's sorted arrays) of the intervals of table row ``i``: its host
        calls and the GPU work they launched (for a ``(no line)`` row, the rank's GPU work no line launched)."""
        return self.order[int(self.bounds[i]) : int(self.bounds[i + 1])]

    def label(self, i: int) -> str:
        """Table row ``i`` as the page names it: ``train.py:7`` (``*``: the function's first line), or
        ``(no line)``; with its rank in a job."""
        r = self.table.iloc[i]
        file = short_names(self.table["file"].tolist()).get(r["file"], r["file"])
        where = f"{file}:{r['line']}" + ("" if r["exact"] else "*") if r["file"] else "(no line)"
        return f"rank {int(r['rank'])} · {where}" if self.table["rank"].nunique() > 1 else where


class ConfinedSourceFiles(SourceFiles):
    """:class:`tracer.analysis.source_code.SourceFiles` that reads only files inside its roots: a frame's absolute
    path outside every root, or a relative one that leaves its root (``../``, a link out), is not read (its line is
    its function's first). ``tracer lines`` reads what the user's own trace names; a dashboard shows the text to
    whoever can open the page, and an uploaded trace could name any Python file on the server."""

    def find(self, file: str) -> Path | None:
        p = Path(file)  # (no ~ expansion: a trace's name, not the user's)
        roots = []
        for r in self.roots:
            try:
                roots.append(r.resolve())
            except OSError:
                continue
        for c in candidates(p, roots):
            try:
                real = c.resolve()
                if any(real.is_relative_to(r) for r in roots) and real.is_file():
                    return real
            except (OSError, RuntimeError):  # (a loop of links)
                continue
        return None


_lock = threading.Lock()


def sources_of(view: TimelineView) -> Sources:
    """Each host call's user frame and line in the run (:func:`tracer.explain.lines.read_sources` with the default
    rule, the user's files read only from beside the trace and its working directory), computed once per run and
    kept on ``view``."""
    cache = view.__dict__
    if "_sources" not in cache:
        with _lock:
            if "_sources" not in cache:
                from tracer.analysis.source import SourceRule
                from tracer.explain.lines import read_sources, source_folders

                files = (ConfinedSourceFiles(source_folders(view.timeline, view.source))
                         if view.source is not None else None)
                cache["_sources"] = read_sources(view.timeline, SourceRule(), files)
    found: Sources = cache["_sources"]
    return found


def compute(view: TimelineView, sources: Sources, graph: Graph | None, path: CriticalPath | None) -> Lines:
    """The run's lines from the graph and the whole trace's critical path that explained it (None: explain could
    not run; the lines then have their GPU figures and no path or sync time, as ``tracer lines`` gives them)."""
    from tracer.explain.explanation import lines_report  # (tracer.explain: when a run is first explained)

    report = lines_report(view.timeline, sources, graph, path)
    gpu = any(report.gpu_ns.values())
    if not sources.has_lines:
        return Lines(sources.note, report.table, gpu, report.path_ns, report.gpu_ns)
    order, bounds = member_positions(view, sources, report.table)
    return Lines(None, report.table, gpu, report.path_ns, report.gpu_ns, tuple(sources.sites.unread), order, bounds)


def member_positions(view: TimelineView, sources: Sources, table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): the positions in the view's sorted interval arrays of each row of ``table``'s intervals,
    row after row (``order[bounds[i]:bounds[i + 1]]``, ascending). A line's are its host calls (those of its rank
    under that file and line) and the GPU work they launched; a ``(no line)`` row's, the rank's GPU work no line
    launched. Vectorised: one line number per events row, one stable sort of the drawn intervals by it."""
    ev = view.timeline.events
    n = len(ev)
    line_of = np.full(n, -1, dtype=np.int64)  # per events row (position): its table row
    calls = sources.sites.calls
    rank = ev["rank"].to_numpy(np.int64)
    mine = table[(table["file"] != "").to_numpy()]
    if len(mine) and len(calls):
        call_pos = ev.index.get_indexer(calls.index)
        keys = pd.MultiIndex.from_arrays([mine["rank"].to_numpy(np.int64), mine["file"].to_numpy(),
                                          mine["line"].to_numpy(np.int64)])
        got = keys.get_indexer(pd.MultiIndex.from_arrays([rank[call_pos], calls["file"].to_numpy(),
                                                          calls["line"].to_numpy(np.int64)]))
        line_of[call_pos] = np.where(got >= 0, mine.index.to_numpy(np.int64)[np.maximum(got, 0)], -1)
    # GPU work takes its launching call's line (the launch join read_sources kept: work row -> call row)
    links = sources.call_of
    if len(links):
        work = ev.index.get_indexer(links.index)
        call = ev.index.get_indexer(links.to_numpy())
        line_of[work] = np.where(call >= 0, line_of[np.maximum(call, 0)], -1)
    # each rank's GPU work under no line of the user's: its "(no line)" row, as line_table counts it
    rest = table[(table["file"] == "").to_numpy()]
    if len(rest):
        row_of_rank = pd.Series(rest.index.to_numpy(np.int64), index=rest["rank"].to_numpy(np.int64))
        gpu = (ev["kind"].isin(list(GPU_WORK_KINDS)).to_numpy() & (ev["device"].to_numpy() >= 0)
               & (line_of < 0))
        hit = row_of_rank.reindex(rank[gpu]).to_numpy()
        line_of[np.flatnonzero(gpu)] = np.where(pd.isna(hit), -1, np.nan_to_num(hit, nan=-1)).astype(np.int64)
    src = view.src
    drawn = np.where(src >= 0, line_of[np.maximum(src, 0)] if n else -1, -1)
    order = np.argsort(drawn, kind="stable")  # (stable: each row's positions stay ascending)
    order = order[drawn[order] >= 0]
    bounds = np.searchsorted(drawn[order], np.arange(len(table) + 1), side="left")
    return order.astype(np.int64), bounds.astype(np.int64)


# -- the table ------------------------------------------------------------------------------------------------


def columns(lines: Lines, multi_rank: bool) -> list[tuple[str, str, str]]:
    """The table's columns (id, header, type): a run without GPU work has no GPU, sync or copy column."""
    cols = [("rank", "Rank", "numeric")] if multi_rank else []
    cols += [("where", "Line", "text"), ("function", "Function", "text"), ("code", "Code", "text")]
    if lines.gpu:
        cols += [("gpu_ms", "GPU ms", "numeric"), ("share", "Share of GPU %", "numeric"),
                 ("path_ms", "Critical path ms", "numeric"), ("sync_ms", "Host sync ms", "numeric"),
                 ("copy_ms", "Exposed copy ms", "numeric")]
    else:
        cols += [("path_ms", "Critical path ms", "numeric"), ("calls", "Calls", "numeric")]
    return cols


def table_rows(lines: Lines, multi_rank: bool, limit: int = MAX_ROWS) -> list[dict[str, Any]]:
    """The first ``limit`` lines in the table's order, times in ms; ``id`` is the row's position in
    :attr:`Lines.table`."""
    out = []
    short = short_names(lines.table["file"].tolist())
    for i, r in enumerate(lines.table.head(limit).itertuples(index=False)):
        mine = bool(r.file)
        row: dict[str, Any] = {
            "id": i,
            "where": f"{short.get(r.file, r.file)}:{r.line}" + ("" if r.exact else "*") if mine else "(no line)",
            "function": f"{r.function}()" if mine and r.function else "",
            "code": (r.text or "") if mine else NO_LINE,
            "path_ms": round(r.path_ns / 1e6, 3),
        }
        if multi_rank:
            row["rank"] = int(r.rank)
        if lines.gpu:
            row.update(gpu_ms=round(r.gpu_ns / 1e6, 3), share=round(100 * r.gpu_share, 1),
                       sync_ms=round(r.sync_ns / 1e6, 3), copy_ms=round(r.exposed_copy_ns / 1e6, 3))
        else:
            row["calls"] = int(r.calls)
        out.append(row)
    return out


def heading(lines: Lines, multi_rank: bool) -> str:
    """One line above the table, as ``tracer lines`` says it: how much of the GPU work the user's lines launched
    (a run without GPU work: how many lines, by their time on the critical path)."""
    mine = lines.table[(lines.table["file"] != "").to_numpy()]
    n = len(mine[["rank", "file", "line"]].drop_duplicates()) if multi_rank else len(mine)
    where = f" on {mine['rank'].nunique():,} ranks" if multi_rank else ""
    path = f"; critical path {fmt_duration(lines.path_ns)}" if lines.path_ns else ""
    if lines.gpu:
        total = sum(lines.gpu_ns.values())
        return (f"{fmt_duration(int(mine['gpu_ns'].sum()))} of the {fmt_duration(total)} of GPU work were launched "
                f"from {n:,} lines of your code{where}{path}.")
    return f"{n:,} lines of your code{where}, by their time on the critical path{path}."


def section_children(view: TimelineView, lines: Lines) -> list[Any]:
    """The "by source line" part under the findings: the note where there are no lines; else the heading, the
    table (a click outlines the line's intervals on the timeline), what its columns mean and a button that
    clears the outline."""
    title = html.H4("By source line")
    if lines.note is not None:
        # (the note `tracer lines` prints, as it words it)
        return [title, html.P(lines.note[:1].upper() + lines.note[1:] + ".", className="muted", id=ids.TL_LINES_NOTE)]
    multi = view.multi_rank
    rows = table_rows(lines, multi)
    shown = "" if len(rows) == len(lines.table) else f" (the first {len(rows):,} of {len(lines.table):,} shown)"
    what = "its host calls and the kernels and copies they launched" if lines.gpu else "its host calls"
    out: list[Any] = [title, html.P(heading(lines, multi), className="muted small")]
    if lines.unread:
        names = ", ".join(lines.unread[:5]) + (" …" if len(lines.unread) > 5 else "")
        out.append(html.P(f"Not found beside the trace or in its working directory, so their lines are each "
                          f"function's first (*): {names}; `tracer lines --source-root DIR` reads them.",
                          className="muted small"))
    out += [
        html.P(f"Each line of your code{' per rank' if multi else ''}, as `tracer lines` ranks them{shown}. "
               f"Click a row to outline {what} on the timeline above; click it again to clear.",
               className="muted small"),
        clickable_table(ids.TL_LINES_TABLE, columns(lines, multi), rows, page_size=PAGE_SIZE, wrap=True,
                        column_style={"code": {"fontFamily": "ui-monospace, SFMono-Regular, Menlo, monospace"}},
                        marked=True),
        html.P(legend(lines), className="muted small"),
        html.Button("Clear outline", id=ids.TL_LINE_CLEAR, className="button",
                    title="Remove the outline of the line chosen in the table"),
    ]
    return out


def legend(lines: Lines) -> str:
    """What the columns mean (``tracer lines``'s footnote)."""
    text = "Critical path: time on the whole run's critical path of the line's calls"
    if lines.gpu:
        text += (" and the work they launched. GPU: the kernels, copies and collectives it launched; host sync: its "
                 "calls waiting for the GPU; exposed copy: its copies' time beside no compute")
    text += "."
    if not lines.table["exact"].all():
        text += " *: the function's first line (the call's line could not be read from its source)."
    return text


# -- choosing a line ------------------------------------------------------------------------------------------


def row_of_cell(cell: Any, n: int) -> int:
    """The line a clicked cell of the table belongs to; :class:`UsageError` for a cell that names none of the
    ``n``."""
    return row_table.row_of_cell(cell, n, table="source lines table", thing="line")


def line_of_request(value: Any, key: str, n: int) -> int | None:
    """The line a ``TL_LINE`` value chooses for run ``key`` (``{"run": key, "row": i}``, ``i`` one of the ``n``
    rows), None for none; :class:`UsageError` for anything else."""
    if value is None:
        return None
    row = value.get("row") if isinstance(value, dict) else None
    if (not isinstance(value, dict) or value.get("run") != key or isinstance(row, bool) or not isinstance(row, int)
            or not 0 <= row < n):
        raise UsageError("source lines table", "no such line in the table; reload the page")
    return row


# -- the frame of a clicked interval --------------------------------------------------------------------------


def frame_of(view: TimelineView, src: int) -> dict[str, Any] | None:
    """The user frame behind events row ``src`` (a position): a host call's own, GPU work's launching call's
    (:meth:`tracer.explain.lines.Sources.source`: file, line, function, text, exact, chain outwards); None where
    the trace has no stacks or the interval came from no line of the user's."""
    ev = view.timeline.events
    if not 0 <= src < len(ev):
        return None
    sources = sources_of(view)
    if not sources.has_lines:
        return None
    call = int(sources.calls_of(np.asarray([ev.index[src]], np.int64))[0])
    return sources.source(call) if call >= 0 else None


def frame_text(frame: dict[str, Any]) -> html.Span:
    """A frame and its chain, innermost first: ``train.py:10 step() `return out.sum().item()` ← train.py:15 main()
    ← train.py:18 <module>()``."""
    where = f"{frame['file']}:{frame['line']}" + ("" if frame["exact"] else "*")
    parts: list[Any] = ["From your code: ", html.B(where), f" {frame['function']}()"]
    if frame["text"]:
        parts += [" ", html.Code(frame["text"])]
    for c in frame["chain"]:
        parts.append(f" ← {c['file']}:{c['line']} {c['function']}()")
    if frame.get("borrowed"):
        parts.append(" (its thread had no frame of yours: the line another thread of its process was in)")
    return html.Span(parts, className="frame", id=ids.TL_FRAME)
