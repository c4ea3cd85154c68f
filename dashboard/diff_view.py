"""The diff of two runs (:func:`tracer.analysis.diff.diff_timelines`) drawn for the compare page: where the time
went, a table of the largest differences, and bar charts of the largest count and time differences (HTA's
``visualize_counts_diff`` / ``visualize_duration_diff``: A, B and their difference per item). Pure functions of a
:class:`~tracer.analysis.diff.TraceDiff`; the page computes it once per pair."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go
from dash import dcc, html
from plotly.subplots import make_subplots

from tracer.analysis.diff import ITEM_KINDS, TraceDiff, item_keys, ms_text, ratio_text, signed_ms_text
from tracer.dashboard import ids
from tracer.dashboard.figures import escape_label
from tracer.dashboard.model import N_CLASSES, TimelineView

# The diff's component ids live in dashboard/ids.py; these names are kept for the tests that use them.
DIFF_SECTION = ids.DIFF_SECTION
DIFF_TABLE = ids.DIFF_TABLE
DIFF_CHART = ids.DIFF_CHART

#: rows of the table and bars per chart
TABLE_ROWS = 20
CHART_ITEMS = 10
LABEL_CHARS = 40

_COLORS = {"A": "#7f8c8d", "B": "#2e86de", "diff": "#e67e22"}

#: the most intervals of a chosen item outlined per run (the first ones in the window, by row then start)
HIGHLIGHT_LIMIT = 3000
HIGHLIGHT_COLOR = "#e6007e"


def _short(name: str, n: int = LABEL_CHARS) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def _label(name: str) -> str:
    """An item's name for a Plotly axis: cut short and made inert (Plotly renders a subset of HTML in labels)."""
    return escape_label(_short(name))


def table_items(d: TraceDiff, *, rows: int = TABLE_ROWS) -> list[list[str]]:
    """The ``[kind, name]`` of each row of :func:`diff_table`, in order (what a click on row ``i`` chooses)."""
    return [[i.kind, i.name] for i in d.items[:rows]]


def diff_table(d: TraceDiff, *, rows: int = TABLE_ROWS) -> Any:
    """The largest |time difference| items as an HTML table (Dash escapes every cell). A click on a row
    highlights that item's intervals in both timelines; a second click removes the highlight."""
    head = html.Tr([html.Th(c) for c in ("change", "kind", "name", "count A", "count B", "ms A", "ms B",
                                         "B − A ms", "B / A")])
    body = [
        html.Tr(
            [
                html.Td(i.change, className=f"diff-{i.change}"),
                html.Td(i.kind),
                html.Td(_short(i.name, 80), title=i.name),
                html.Td(f"{i.count_a:,}", className="num"),
                html.Td(f"{i.count_b:,}", className="num"),
                html.Td(ms_text(i.time_a_ns), className="num"),
                html.Td(ms_text(i.time_b_ns), className="num"),
                html.Td(signed_ms_text(i.diff_ns), className="num"),
                html.Td(ratio_text(i.ratio), className="num"),
            ],
            id={"type": ids.DIFF_ROW, "index": n},
            n_clicks=0,
            className="diff-row",
            title="Click to outline this work in both timelines; click again to clear",
        )
        for n, i in enumerate(d.items[:rows])
    ]
    counts = ", ".join(f"{n} {c}" for c, n in d.counts().items())
    more = f"; {len(d.items) - rows} more with `tracer diff --csv`" if len(d.items) > rows else ""
    return html.Table(
        [html.Caption(f"Work by kind and name, largest |time difference| first: {counts}{more}. "
                      f"Unchanged: {d.threshold.text()}."),
         html.Thead(head), html.Tbody(body)],
        id=DIFF_TABLE,
        className="table diff-table",
    )


def account_list(d: TraceDiff, *, lines: int = 8) -> Any:
    """Where the time went: the span by what ran at each instant (its changes add up to the span's), then the
    detail lines beyond the threshold, as ``tracer diff`` prints them."""
    span = f"{signed_ms_text(d.span_diff_ns)} ms"
    parts: list[Any] = []
    if d.states:
        parts += [html.P(f"Where the time went (span {span}, the sum of these), by what ran at each instant:"),
                  html.Ul([html.Li(line.text) for line in d.states])]
    if d.account:
        parts += [html.P("In detail, largest first (views that overlap one another):"),
                  html.Ul([html.Li(line.text) for line in d.account[:lines]])]
    else:
        parts.append(html.P(f"Span {span}; no lane, overlap or idle time changed beyond the threshold.",
                            className="muted"))
    return html.Div(parts + [html.P(note, className="muted") for note in d.notes], className="diff-account")


def diff_figure(d: TraceDiff, labels: tuple[str, str] = ("A", "B"), *, items: int = CHART_ITEMS) -> go.Figure:
    """Two bar charts: the ``items`` largest |count differences| and the ``items`` largest |time differences|,
    each item's A, B and B − A side by side."""
    by_count = sorted((i for i in d.items if i.count_diff), key=lambda i: (-abs(i.count_diff), i.kind, i.name))
    by_time = [i for i in d.items if i.diff_ns][:items]  # items are sorted by |time difference| already
    by_count = by_count[:items]
    la, lb = (escape_label(x) for x in labels)
    fig = make_subplots(rows=2, cols=1)
    ticks: list[str] = []
    for row, chosen, value in ((1, by_count, lambda i, s: (i.count_a, i.count_b, i.count_diff)[s]),
                               (2, by_time, lambda i, s: (i.time_a_ns / 1e6, i.time_b_ns / 1e6, i.diff_ns / 1e6)[s])):
        x = [_label(f"{i.kind}: {i.name}") for i in chosen]
        ticks += [f"{i.kind}: {_short(i.name)}" for i in chosen]
        for s, (name, color) in enumerate(((la, _COLORS["A"]), (lb, _COLORS["B"]), ("B − A", _COLORS["diff"]))):
            fig.add_trace(go.Bar(name=name, x=x, y=[value(i, s) for i in chosen], marker_color=color,
                                 legendgroup=name, showlegend=row == 1), row=row, col=1)
    _lay_out_charts(fig, max((len(t) for t in ticks), default=0), len(la) + len(lb))
    return fig


#: The diff charts' layout in pixels (:func:`_lay_out_charts`): each chart's plot, a title line, a legend line,
#: and the width of a tick label's character (Plotly's 12 px font, generous) at the labels' angle.
CHART_PLOT_PX = 220
CHART_TITLE_PX = 26
CHART_LEGEND_LINE_PX = 24
TICK_CHAR_PX = 7.0
TICK_ANGLE = 30
#: A legend whose run names are longer than this (characters) together is given two lines.
LEGEND_ONE_LINE = 90


def _lay_out_charts(fig: go.Figure, tick_chars: int, legend_chars: int) -> None:
    """Place the two bar charts in pixels so that nothing runs into anything: the first chart's slanted tick
    labels get the room they need (from the longest, :data:`TICK_CHAR_PX` a character) above the second chart's
    title, and the legend its own line(s) above the first title (Plotly's subplot titles and a legend at
    ``y=1.08`` sat on each other, and the labels ran into the chart below)."""
    angle = math.radians(TICK_ANGLE)
    label_px = int(tick_chars * TICK_CHAR_PX * math.sin(angle) + 14 * math.cos(angle)) + 8
    legend_px = CHART_LEGEND_LINE_PX * (1 if legend_chars <= LEGEND_ONE_LINE else 2)
    gap = label_px + CHART_TITLE_PX + 8
    plots = 2 * CHART_PLOT_PX + gap  # the plotting area: both charts and the gap between them
    top, bottom = CHART_TITLE_PX + legend_px + 8, label_px + 8
    titles = ("Count: largest differences", "Total time (ms): largest differences")
    domains = ((CHART_PLOT_PX + gap) / plots, 1.0), (0.0, CHART_PLOT_PX / plots)
    fig.update_layout(
        barmode="group", height=top + plots + bottom, margin={"l": 60, "r": 20, "t": top, "b": bottom},
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 1 + CHART_TITLE_PX / plots, "yanchor": "bottom"},
        yaxis={"domain": list(domains[0])}, yaxis2={"domain": list(domains[1])},
        annotations=[dict(text=f"<b>{t}</b>", xref="paper", yref="paper", x=0, xanchor="left", y=d[1],
                          yanchor="bottom", showarrow=False, font={"size": 13}) for t, d in zip(titles, domains)],
    )
    # (automargin: the first labels, slanted, reach left of the plot and the margins grow for them; the gap between
    # the charts, which automargin never grows, is planned above)
    fig.update_xaxes(tickangle=-TICK_ANGLE, automargin=True)


def diff_section(d: TraceDiff, labels: tuple[str, str]) -> Any:
    """What the compare page shows under the two timelines."""
    return html.Div(
        [
            html.H3("What changed (B − A)"),
            account_list(d),
            diff_table(d),
            dcc.Graph(id=DIFF_CHART, figure=diff_figure(d, labels), config={"displaylogo": False}),
        ],
        id=DIFF_SECTION,
        className="diff-section",
    )


# ---------------------------------------------------------------------------------------------------- highlight


def item_of(value: Any) -> tuple[str, str] | None:
    """``[kind, name]`` (from the table's rows or the page's state) as a pair; None for anything else."""
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and value[0] in ITEM_KINDS
        and isinstance(value[1], str)
        and len(value[1]) <= 100_000
    ):
        return str(value[0]), value[1]
    return None


def item_mask(view: TimelineView, item: tuple[str, str]) -> np.ndarray:
    """Per drawn interval of ``view`` (its sorted arrays): whether it is an instance of ``item`` — the same kind
    and the same name after :func:`tracer.analysis.diff.item_keys` (the diff's normalisation)."""
    cache = view.__dict__.setdefault("_item_keys", {})
    if "keys" not in cache:
        ev = view.timeline.events
        cache["keys"] = item_keys(ev).to_numpy(dtype=object) if len(ev) else np.empty(0, dtype=object)
        cache["kind"] = ev["kind"].astype(str).to_numpy(dtype=object) if len(ev) else np.empty(0, dtype=object)
    kind, name = item
    of_event = (cache["kind"] == kind) & (cache["keys"] == name)
    src = view.src
    out = np.zeros(src.size, dtype=bool)
    real = src >= 0
    out[real] = of_event[src[real]] if of_event.size else False
    return out


def in_window(view: TimelineView, mask: np.ndarray, window: tuple[int, int]) -> np.ndarray:
    """Positions (in the view's sorted arrays) of the ``mask``ed intervals touching ``window`` (closed)."""
    lo, hi = window
    return np.flatnonzero(mask & (view.start_ns <= hi) & (view.end_ns >= lo))


def highlight_trace(
    view: TimelineView, item: tuple[str, str], window: tuple[int, int], *, xaxis: str = "x", yaxis: str = "y",
    limit: int | None = None,
) -> tuple[go.Scatter | None, int, int]:
    """An outline around each interval of ``item`` in ``window`` (at most ``limit``), as one line trace of
    NaN-separated rectangles, with (intervals in the window, intervals outlined). Rows are the view's rows
    (every lane shown, as in :func:`tracer.dashboard.figures.compare_figure`); ``limit`` defaults to
    :data:`HIGHLIGHT_LIMIT`."""
    limit = HIGHLIGHT_LIMIT if limit is None else limit
    pos = in_window(view, item_mask(view, item), window)
    found = int(pos.size)
    pos = pos[:limit]
    if not pos.size:
        return None, found, 0
    lo, hi = window
    x0 = np.maximum(view.start_ns[pos], lo - (hi - lo)) / 1e6  # far outside the window: clipped anyway
    x1 = np.minimum(view.end_ns[pos], hi + (hi - lo)) / 1e6
    # rows as compare_figure draws them: every lane, a job's folded lanes left out
    folded = np.array([r.folded for r in view.rows], dtype=bool)
    y_of_row = np.cumsum(~folded) - 1
    y = y_of_row[view.group[pos] // N_CLASSES].astype(np.float64)
    nan = np.full(pos.size, np.nan)
    xs = np.column_stack([x0, x1, x1, x0, x0, nan]).ravel()
    ys = np.column_stack([y - 0.46, y - 0.46, y + 0.46, y + 0.46, y - 0.46, nan]).ravel()
    trace = go.Scatter(
        x=xs, y=ys, mode="lines", line=dict(color=HIGHLIGHT_COLOR, width=2), hoverinfo="skip",
        showlegend=False, name="chosen in the diff table", xaxis=xaxis, yaxis=yaxis, cliponaxis=True,
        uid=f"{yaxis}-diff-highlight",
    )
    return trace, found, int(pos.size)


def add_highlight(fig: go.Figure, views: list[TimelineView], window: tuple[int, int],
                  item: tuple[str, str] | None) -> go.Figure:
    """``fig`` (a :func:`~tracer.dashboard.figures.compare_figure` of ``views``) with ``item``'s intervals outlined on
    each run; ``layout.meta["highlight"]`` says the item and, per run, how many are in the window and drawn."""
    if item is None:
        return fig
    found, drawn = [], []
    for i, view in enumerate(views):
        ax = "" if i == 0 else str(i + 1)
        trace, n, k = highlight_trace(view, item, window, xaxis=f"x{ax}", yaxis=f"y{ax}")
        if trace is not None:
            fig.add_trace(trace)
        found.append(n)
        drawn.append(k)
    meta = dict(fig.layout.meta or {})
    meta["highlight"] = {"kind": item[0], "name": item[1], "found": found, "drawn": drawn}
    fig.update_layout(meta=meta)
    return fig


def highlight_text(meta: dict[str, Any]) -> str:
    """The status line's words for ``layout.meta["highlight"]`` ("" without one)."""
    h = meta.get("highlight") if isinstance(meta, dict) else None
    if not h:
        return ""
    found, drawn = h["found"], h["drawn"]
    per_run = " and ".join(f"{n:,}" for n in found)
    capped = f" (the first {HIGHLIGHT_LIMIT:,} of each outlined)" if any(d < n for n, d in zip(found, drawn)) else ""
    return f"; outlined {h['kind']} “{_short(h['name'], 60)}”: {per_run} in this window{capped}"
