"""Compare page: two runs stacked on one time axis (each from its own first event), zoomed together, with
their per-GPU summaries side by side — e.g. ``compute-copy`` with blocking copies against a side stream."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from dashboard import ids
from dashboard.data import RunStore
from dashboard.figures import clamp_span, compare_figure
from dashboard.pages.common import (
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
                    html.Span(status_text(fig), id=ids.CMP_STATUS, className="status muted"),
                ],
                className="controls",
            ),
            dcc.Graph(id=ids.CMP_GRAPH, figure=fig, config=GRAPH_CONFIG),
            diff_part(views, (infos[0].name, infos[1].name)),
            dcc.Store(id=ids.CMP_STATE, data={"runs": keys, "window": list(window)}),
        ],
        className="compare-page",
    )


def diff_part(views, labels: tuple[str, str]) -> Any:
    """The diff of the two runs (first against second) under the timelines: where the time went, the largest
    differences as a table and as bars. A diff the analysis refuses is a message there, and the page stays."""
    from dashboard.diff_view import diff_section
    from tracer.analysis.diff import diff_timelines

    try:
        d = diff_timelines(views[0].timeline, views[1].timeline)
    except TracerError as exc:
        return html.Div(f"Cannot compare these runs item by item: {error_message(exc)}",
                        className="alert alert-error", role="alert")
    return diff_section(d, labels)


def status_text(fig: Any) -> str:
    meta = fig.layout.meta or {}
    lo, hi = meta.get("window_ns", [0, 0])
    return f"Window {window_text(lo, hi)}, the same scale for both runs"


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
    fig = compare_figure(views, [i.name for i in infos], window, width_px=plot_width(viewport))
    return fig, status_text(fig), {"runs": keys, "window": [int(window[0]), int(window[1])]}


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
