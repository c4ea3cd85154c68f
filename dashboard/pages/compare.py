"""Compare page: two runs stacked on one time axis (each from its own first event), zoomed together, with
their per-GPU summaries side by side — e.g. ``compute-copy`` with blocking copies against a side stream."""

from __future__ import annotations

from typing import Any

from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update

from tracer.analysis.diff import diff_timelines
from tracer.dashboard import ids
from tracer.dashboard.data import RunStore, quoted
from tracer.dashboard.diff_view import add_highlight, diff_section, highlight_text, item_of, table_items
from tracer.dashboard.figures import clamp_span, compare_figure
from tracer.dashboard.pages.common import (
    GRAPH_CONFIG,
    alert,
    device_cards,
    error_message,
    on_error,
    plot_width,
    run_heading,
    window_from_relayout,
    window_from_state,
    window_text,
)
from tracer.errors import TracerError, UsageError


def _full(views) -> tuple[int, int]:
    return 0, max(max(v.span_ns for v in views), 1)


def layout(store: RunStore, keys: list[str], viewport: dict[str, Any] | None = None) -> Any:
    if len(keys) != 2 or not all(keys):
        return html.Div(
            ["Tick two runs on the ", dcc.Link("runs page", href="/runs"), " to compare them."],
            className="notice",
        )
    try:
        infos = [store.get(k) for k in keys]
        views = [store.view(k) for k in keys]
    except TracerError as exc:
        return html.Div(f"Cannot open this comparison: {exc}", className="alert alert-error", role="alert")
    window = _full(views)
    fig = compare_figure(views, [i.name for i in infos], window, width_px=plot_width(viewport))
    diff, rows = diff_part(views, (infos[0].name, infos[1].name))
    columns = [
        html.Div(
            [run_heading(info, view), html.Div(device_cards(view), className="cards")],
            className="compare-col",
        )
        for info, view in zip(infos, views)
    ]
    return html.Div(
        [
            html.H2("Compare"),
            html.Div(columns, className="compare-cols"),
            html.Div(
                [
                    html.Button("Whole runs", id=ids.CMP_RESET, className="button"),
                    html.Button("Clear highlight", id=ids.CMP_CLEAR, className="button",
                                title="Remove the outlines of the item chosen in the diff table"),
                    html.Span(status_text(fig), id=ids.CMP_STATUS, className="status muted"),
                ],
                className="controls",
            ),
            dcc.Graph(id=ids.CMP_GRAPH, figure=fig, config=GRAPH_CONFIG),
            diff,
            dcc.Store(id=ids.CMP_STATE, data={"runs": keys, "window": list(window), "highlight": None}),
            dcc.Store(id=ids.CMP_ROWS, data=rows),
        ],
        className="compare-page",
    )


def diff_part(views, labels: tuple[str, str]) -> tuple[Any, list[list[str]]]:
    """The diff of the two runs (first against second) under the timelines: where the time went, the largest
    differences as a table and as bars; with the ``[kind, name]`` of the table's rows (what a click chooses).
    A diff the analysis refuses is a message there, and the page stays."""
    try:
        d = diff_timelines(views[0].timeline, views[1].timeline)
    except TracerError as exc:
        return html.Div(f"Cannot compare these runs item by item: {error_message(exc)}",
                        className="alert alert-error", role="alert"), []
    return diff_section(d, labels), table_items(d)


def status_text(fig: Any) -> str:
    meta = fig.layout.meta or {}
    lo, hi = meta.get("window_ns", [0, 0])
    return f"Window {window_text(lo, hi)}, the same scale for both runs{highlight_text(meta)}"


def _figure(views, infos, window, viewport, item) -> Any:
    fig = compare_figure(views, [i.name for i in infos], window, width_px=plot_width(viewport))
    return add_highlight(fig, views, window, item)


def update(
    store: RunStore,
    state: Any,
    trigger: Any,
    relayout: Any,
    viewport: Any,
) -> tuple[Any, Any, Any]:
    """(figure, status, state) for a zoom on either run or the reset button. An unknown run or a zoom to
    no window (``inf``, NaN, text) is a message in the status line, never an HTTP 500."""
    try:
        return _update(store, state, trigger, relayout, viewport)
    except TracerError as exc:
        return failed(error_message(exc))


def failed(message: str) -> tuple[Any, Any, Any]:
    """The callback's outputs when a request could not be answered: the message in the status line."""
    return no_update, alert(message), no_update


def runs_of_state(state: Any) -> list[str]:
    """The two run keys the page's state store names; :class:`UsageError` otherwise."""
    keys = state.get("runs") if isinstance(state, dict) else None
    if not isinstance(keys, list) or len(keys) != 2 or not all(isinstance(k, str) and k for k in keys):
        raise UsageError("compare", "the page's state names no two runs; tick two on the runs page again")
    return keys


def _update(store: RunStore, state: Any, trigger: Any, relayout: Any, viewport: Any) -> tuple[Any, Any, Any]:
    keys = runs_of_state(state)
    infos = [store.get(k) for k in keys]
    views = [store.view(k) for k in keys]
    full = _full(views)
    window = window_from_state(state.get("window")) or full
    if trigger == ids.CMP_RESET:
        window = full
    else:
        asked = None
        for axis in ("xaxis", "xaxis2"):
            asked = window_from_relayout(relayout, axis)
            if asked is not None:
                break
        if asked is None:
            return no_update, no_update, no_update
        window = full if asked == "full" else asked
    window = clamp_span(full[1], window)
    item = item_of(state.get("highlight"))  # kept across zooms; anything else in the store is dropped
    fig = _figure(views, infos, window, viewport, item)
    return fig, status_text(fig), _state(keys, window, item)


def _state(keys: list[str], window: tuple[int, int], item: tuple[str, str] | None) -> dict[str, Any]:
    return {"runs": keys, "window": [int(window[0]), int(window[1])], "highlight": list(item) if item else None}


def choose(store: RunStore, state: Any, trigger: Any, rows: Any, viewport: Any) -> tuple[Any, Any, Any]:
    """(figure, status, state) for a click on a row of the diff table (``trigger`` its id, ``{"type": DIFF_ROW,
    "index": i}``) or on "Clear highlight": the row's item outlined in both timelines over the current window,
    or no outline (a second click on the same row clears too). A row that is not in the table is a message in
    the status line, never an HTTP 500."""
    try:
        return _choose(store, state, trigger, rows, viewport)
    except TracerError as exc:
        return failed(error_message(exc))


def _choose(store: RunStore, state: Any, trigger: Any, rows: Any, viewport: Any) -> tuple[Any, Any, Any]:
    keys = runs_of_state(state)
    current = item_of(state.get("highlight"))
    if trigger == ids.CMP_CLEAR:
        item = None
    elif isinstance(trigger, dict) and trigger.get("type") == ids.DIFF_ROW:
        index = trigger.get("index")
        in_table = (isinstance(index, int) and not isinstance(index, bool) and isinstance(rows, list)
                    and 0 <= index < len(rows))
        item = item_of(rows[index]) if in_table else None
        if item is None:
            raise UsageError("diff table", f"no row {quoted(index)} in the table; reload the compare page")
        if item == current:
            item = None  # a second click on the chosen row
    else:
        return no_update, no_update, no_update
    infos = [store.get(k) for k in keys]
    views = [store.view(k) for k in keys]
    full = _full(views)
    window = clamp_span(full[1], window_from_state(state.get("window")) or full)
    fig = _figure(views, infos, window, viewport, item)
    return fig, status_text(fig), _state(keys, window, item)


def register(app: Dash, store: RunStore) -> None:
    @app.callback(
        Output(ids.CMP_GRAPH, "figure"),
        Output(ids.CMP_STATUS, "children"),
        Output(ids.CMP_STATE, "data"),
        Input(ids.CMP_GRAPH, "relayoutData"),
        Input(ids.CMP_RESET, "n_clicks"),
        State(ids.CMP_STATE, "data"),
        State(ids.VIEWPORT, "data"),
        prevent_initial_call=True,
        on_error=on_error(failed),  # anything update() did not foresee: still a message, not a 500
    )
    def _callback(relayout, _reset, state, viewport):
        return update(store, state, ctx.triggered_id, relayout, viewport)

    @app.callback(
        Output(ids.CMP_GRAPH, "figure", allow_duplicate=True),
        Output(ids.CMP_STATUS, "children", allow_duplicate=True),
        Output(ids.CMP_STATE, "data", allow_duplicate=True),
        Input({"type": ids.DIFF_ROW, "index": ALL}, "n_clicks"),
        Input(ids.CMP_CLEAR, "n_clicks"),
        State(ids.CMP_STATE, "data"),
        State(ids.CMP_ROWS, "data"),
        State(ids.VIEWPORT, "data"),
        prevent_initial_call=True,
        on_error=on_error(failed),
    )
    def _choose_callback(_rows_clicks, _clear, state, rows, viewport):
        if not ctx.triggered or not ctx.triggered[0].get("value"):
            return no_update, no_update, no_update  # a row drawn anew (n_clicks 0), not clicked
        return choose(store, state, ctx.triggered_id, rows, viewport)

    @app.callback(
        Output({"type": ids.DIFF_ROW, "index": ALL}, "className"),
        Input(ids.CMP_STATE, "data"),
        State(ids.CMP_ROWS, "data"),
        prevent_initial_call=True,
    )
    def _mark_row(state, rows):
        return row_classes(state, rows, len(ctx.outputs_list))


def row_classes(state: Any, rows: Any, n: int) -> list[str]:
    """The class of each of the table's ``n`` rows: the chosen item's row is ``selected``."""
    item = item_of(state.get("highlight")) if isinstance(state, dict) else None
    rows = rows if isinstance(rows, list) else []
    return [
        "diff-row selected" if item is not None and i < len(rows) and item_of(rows[i]) == item else "diff-row"
        for i in range(n)
    ]
