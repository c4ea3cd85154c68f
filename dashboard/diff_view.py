"""The diff of two runs (:func:`tracer.analysis.diff.diff_timelines`) drawn for the compare page: where the time
went, a table of the largest differences, and bar charts of the largest count and time differences (HTA's
``visualize_counts_diff`` / ``visualize_duration_diff``: A, B and their difference per item). Pure functions of a
:class:`~tracer.analysis.diff.TraceDiff`; the page computes it once per pair."""

from __future__ import annotations

import html as _html
from typing import Any

import plotly.graph_objects as go
from dash import dcc, html
from plotly.subplots import make_subplots

from tracer.analysis.diff import TraceDiff

# The diff's component ids. They belong in dashboard/ids.py with the others; kept here until that file's owner
# moves them (nothing but this module and its tests names them).
DIFF_SECTION = "compare-diff"
DIFF_TABLE = "compare-diff-table"
DIFF_CHART = "compare-diff-chart"

#: rows of the table and bars per chart
TABLE_ROWS = 20
CHART_ITEMS = 10
LABEL_CHARS = 40

_COLORS = {"A": "#7f8c8d", "B": "#2e86de", "diff": "#e67e22"}


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def _short(name: str, n: int = LABEL_CHARS) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def _label(name: str) -> str:
    """An item's name for a Plotly axis: cut short and made inert (Plotly renders a subset of HTML in labels)."""
    return _html.escape(_short(name), quote=False)


def diff_table(d: TraceDiff, *, rows: int = TABLE_ROWS) -> Any:
    """The largest |time difference| items as an HTML table (Dash escapes every cell)."""
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
                html.Td(_ms(i.time_a_ns), className="num"),
                html.Td(_ms(i.time_b_ns), className="num"),
                html.Td(f"{i.diff_ns / 1e6:+,.3f}", className="num"),
                html.Td("–" if i.ratio is None else f"×{i.ratio:,.2f}", className="num"),
            ]
        )
        for i in d.items[:rows]
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
    span = f"{(d.span_b_ns - d.span_a_ns) / 1e6:+,.3f} ms"
    if not d.account:
        return html.P(f"Span {span}; no lane, overlap or idle time changed beyond the threshold.", className="muted")
    return html.Div(
        [html.P(f"Where the time went (span {span}), largest first:"),
         html.Ul([html.Li(line.text) for line in d.account[:lines]])]
        + [html.P(note, className="muted") for note in d.notes],
        className="diff-account",
    )


def diff_figure(d: TraceDiff, labels: tuple[str, str] = ("A", "B"), *, items: int = CHART_ITEMS) -> go.Figure:
    """Two bar charts: the ``items`` largest |count differences| and the ``items`` largest |time differences|,
    each item's A, B and B − A side by side."""
    by_count = sorted((i for i in d.items if i.count_diff), key=lambda i: (-abs(i.count_diff), i.kind, i.name))
    by_time = [i for i in d.items if i.diff_ns][:items]  # items are sorted by |time difference| already
    by_count = by_count[:items]
    la, lb = (_html.escape(str(x), quote=False) for x in labels)
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.25,
                        subplot_titles=("Count: largest differences", "Total time (ms): largest differences"))
    for row, chosen, value in ((1, by_count, lambda i, s: (i.count_a, i.count_b, i.count_diff)[s]),
                               (2, by_time, lambda i, s: (i.time_a_ns / 1e6, i.time_b_ns / 1e6, i.diff_ns / 1e6)[s])):
        x = [_label(f"{i.kind}: {i.name}") for i in chosen]
        for s, (name, color) in enumerate(((la, _COLORS["A"]), (lb, _COLORS["B"]), ("B − A", _COLORS["diff"]))):
            fig.add_trace(go.Bar(name=name, x=x, y=[value(i, s) for i in chosen], marker_color=color,
                                 legendgroup=name, showlegend=row == 1), row=row, col=1)
    fig.update_layout(barmode="group", height=640, margin={"l": 60, "r": 20, "t": 40, "b": 140},
                      legend={"orientation": "h", "y": 1.08})
    fig.update_xaxes(tickangle=-30, automargin=True)
    return fig


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
