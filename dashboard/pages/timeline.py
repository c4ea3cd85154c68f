"""Timeline page: one run's lanes on a zoomable time axis, its per-GPU summary cards and a minimap.

Zooming or panning sends the new x range to the server (``relayoutData``), which merges the intervals of
that window at the plot's pixel width and sends back only the blocks to draw.
"""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, Patch, State, ctx, dcc, html, no_update

from dashboard import ids
from dashboard.data import RunStore
from dashboard.figures import (
    clamp_window,
    fmt_duration,
    full_window,
    minimap_figure,
    minimap_shapes,
    timeline_figure,
)
from dashboard.model import TimelineView
from dashboard.pages.common import (
    GRAPH_CONFIG,
    device_cards,
    plot_width,
    run_heading,
    window_from_relayout,
    window_text,  # the status line's one unit
)
from tracer.errors import TracerError


def layout(store: RunStore, key: str | None, viewport: dict[str, Any] | None = None) -> Any:
    if not key:
        return html.Div(["Pick a run on the ", dcc.Link("runs page", href="/runs"), "."], className="notice")
    try:
        info = store.get(key)
        view = store.view(key)
    except TracerError as exc:
        return html.Div(f"Cannot open this run: {exc}", className="alert alert-error", role="alert")
    width = plot_width(viewport)
    window = full_window(view)
    lanes = [k for k, _ in view.lanes]
    fig = timeline_figure(view, window, width_px=width, uirevision=key)
    return html.Div(
        [
            run_heading(info, view),
            html.Div(device_cards(view), id=ids.TL_CARDS, className="cards"),
            html.Div(
                [
                    dcc.Dropdown(
                        id=ids.TL_LANES,
                        options=[{"label": label, "value": k} for k, label in view.lanes],
                        value=lanes,
                        multi=True,
                        placeholder="Lanes to show",
                        clearable=True,
                        className="lane-filter",
                    ),
                    html.Button("Whole run", id=ids.TL_RESET, className="button"),
                ],
                className="controls",
            ),
            html.Div(status_text(fig), id=ids.TL_STATUS, className="status muted"),
            dcc.Graph(id=ids.TL_GRAPH, figure=fig, config=GRAPH_CONFIG, className="timeline-graph"),
            html.Div(
                "Overview: share of each lane busy per pixel column — drag across it to zoom there",
                className="muted small minimap-title",
            ),
            dcc.Graph(
                id=ids.TL_MINIMAP,
                figure=minimap_figure(view, window),
                config={**GRAPH_CONFIG, "scrollZoom": False},
            ),
            html.Div(id=ids.TL_LAUNCH, className="launch muted"),
            dcc.Store(id=ids.TL_STATE, data={"run": key, "window": list(window), "highlight": None}),
        ],
        className="timeline-page",
    )


def status_text(fig: Any) -> str:
    """The window and what was drawn of it, in ms like the time axis. "Bars" are what the heading counts
    too: the drawn events plus the overlap band's pieces, here only those that touch the window."""
    meta = fig.layout.meta or {}
    lo, hi = meta.get("window_ns", [0, 0])
    blocks, n = meta.get("blocks", 0), meta.get("intervals", 0)
    if n == 0:
        detail = "no bars in this window"
    elif blocks >= n:
        detail = f"all {n:,} bars in this window drawn one by one"
    else:
        detail = f"{n:,} bars in this window merged into {blocks:,} blocks (zoom in to see each)"
    return f"Window {window_text(lo, hi)} · {detail}"


def launch_text(view: TimelineView, link: dict[str, Any] | None) -> Any:
    if link is None:
        return "Click a kernel or copy to see the host call that launched it."
    delay = link["work_start_ns"] - link["launch_start_ns"]
    return html.Span(
        [
            html.B(link["launch_name"]),
            f" on thread {link['tid']} at {link['launch_start_ns'] / 1e6:.4f} ms launched ",
            html.B(link["work_name"][:90]),
            f" (correlation {link['correlation']}), which started {fmt_duration(delay)} later.",
        ]
    )


def update(
    store: RunStore,
    state: dict[str, Any],
    trigger: str | None,
    relayout: dict[str, Any] | None,
    minimap_relayout: dict[str, Any] | None,
    lanes: list[str] | None,
    click: dict[str, Any] | None,
    viewport: dict[str, Any] | None,
) -> tuple[Any, Any, Any, Any, Any]:
    """The page's one callback, as a plain function: (figure, minimap, status, launch text, state).

    ``trigger`` is what changed: ids.TL_GRAPH (zoom/pan), ids.TL_MINIMAP, ids.TL_LANES, ids.TL_RESET or
    "click" (a click on the chart).
    """
    from dashboard.figures import launch_of

    key = state["run"]
    view = store.view(key)
    window = tuple(state.get("window") or full_window(view))
    highlight = state.get("highlight")
    launch = no_update
    if trigger == ids.TL_GRAPH:
        asked = window_from_relayout(relayout)
        if asked is None:
            return no_update, no_update, no_update, no_update, no_update
        window = full_window(view) if asked == "full" else clamp_window(view, asked)
    elif trigger == ids.TL_MINIMAP:
        asked = window_from_relayout(minimap_relayout)
        if asked is None:
            return no_update, no_update, no_update, no_update, no_update
        window = full_window(view) if asked == "full" else clamp_window(view, asked)
    elif trigger == ids.TL_RESET:
        window = full_window(view)
    elif trigger == "click":
        points = (click or {}).get("points") or []
        src = points[0].get("customdata") if points else None
        link = launch_of(view, int(src)) if isinstance(src, (int, float)) else None
        highlight = int(src) if link else None
        launch = launch_text(view, link)
    fig = timeline_figure(
        view, window, width_px=plot_width(viewport), lanes=lanes, highlight=highlight, uirevision=key
    )
    # The minimap's heatmap never changes: send only the window's outline.
    minimap = Patch()
    minimap["layout"]["shapes"] = minimap_shapes(view, window)
    new_state = {"run": key, "window": [int(window[0]), int(window[1])], "highlight": highlight}
    return fig, minimap, status_text(fig), launch, new_state


def ctx_props() -> list[str]:
    return [t["prop_id"].split(".", 1)[-1] for t in ctx.triggered]


def register(app: Dash, store: RunStore) -> None:
    @app.callback(
        Output(ids.TL_GRAPH, "figure"),
        Output(ids.TL_MINIMAP, "figure"),
        Output(ids.TL_STATUS, "children"),
        Output(ids.TL_LAUNCH, "children"),
        Output(ids.TL_STATE, "data"),
        Input(ids.TL_GRAPH, "relayoutData"),
        Input(ids.TL_MINIMAP, "relayoutData"),
        Input(ids.TL_LANES, "value"),
        Input(ids.TL_GRAPH, "clickData"),
        Input(ids.TL_RESET, "n_clicks"),
        State(ids.TL_STATE, "data"),
        State(ids.VIEWPORT, "data"),
        prevent_initial_call=True,
    )
    def _update(relayout, minimap_relayout, lanes, click, _reset, state, viewport):
        props = ctx_props()
        trigger = "click" if "clickData" in props else ctx.triggered_id
        return update(store, state, trigger, relayout, minimap_relayout, lanes, click, viewport)
