"""Timeline page: one run's lanes on a zoomable time axis, its per-GPU summary cards and a minimap.

Zooming or panning sends the new x range to the server (``relayoutData``), which merges the intervals of
that window at the plot's pixel width and sends back only the blocks to draw.

Two callbacks, so that no event is ever lost. Dash runs one request per callback at a time: when an input
changes while the callback's request is in flight, that request's answer is *dropped* and a new one is sent
with only the newest change marked as the trigger. Plotly sends ``relayoutData`` for things that are not
zooms at all (``{"autosize": true}`` right after every first draw), so one callback that both listened to
relayoutData and acted on "what triggered me" lost a click made just after the page drew (the browser
tests' flake). Now:

1. a clientside callback turns the events that ask for a window (zoom/pan/double-click relayouts, a drag
   on the overview strip, **Whole run**) into ``ids.TL_WANT`` and ignores the rest, in the browser;
2. the server callback is a pure function of its inputs (that window request, the lanes, the last click),
   never of which one changed: a request that replaces a dropped one still draws everything asked for.

A click on a row of the source lines table (:mod:`tracer.dashboard.lines_view`) sets ``ids.TL_LINE``, one more
input of the server callback: where nothing else changed since the chart was drawn (the state's ``drawn``
digest), its answer is a patch that replaces the outline trace alone, not the whole figure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import orjson
from dash import Dash, Input, Output, Patch, State, ctx, dcc, html, no_update

from tracer.dashboard import collectives_view, explain_view, ids, lines_view
from tracer.dashboard.data import RunStore
from tracer.dashboard.figures import (
    PathPieces,
    Window,
    clamp_window,
    fmt_duration,
    full_window,
    launch_of,
    minimap_figure,
    minimap_shapes,
    outline_trace,
    rows_shown,
    timeline_figure,
)
from tracer.dashboard.job_view import MAX_UNFOLDED, JobView
from tracer.dashboard.model import TimelineView
from tracer.dashboard.pages.common import (
    GRAPH_CONFIG,
    alert,
    device_cards,
    error_message,
    lanes_from_request,
    on_error,
    plot_width,
    run_heading,
    window_from_ms,
    window_from_relayout,
    window_from_state,
    window_text,  # the status line's one unit
)
from tracer.errors import TracerError, UsageError


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
    collectives = collectives_view.section(view) if view.multi_rank else None
    # (big traces: off until asked; a large job read rank by rank: none, its path needs the job whole)
    path_on = view.n_events <= explain_view.EAGER_EVENTS and view.partial is None
    shown = view.shown_lanes(None, None, view.default_folded) if view.default_folded else None
    fig = timeline_figure(view, window, width_px=width, uirevision=key, path=path_of(view, path_on), lanes=shown,
                          outline=NO_LINE)
    path_why = None
    crossed = fig.layout.meta["path_rows_crossed"]
    if crossed > PATH_DEFAULT_MAX_ROWS_CROSSED:  # a busy run's path would hide its bars
        path_on = False
        path_why = (f"Off at first: over the whole run the path's line crosses {crossed:,} rows and would hide the "
                    "bars; tick to draw it, or zoom in first")
        fig = timeline_figure(view, window, width_px=width, uirevision=key, lanes=shown, outline=NO_LINE)
    minimap_config: dcc.Graph.Config = {
        **GRAPH_CONFIG, "scrollZoom": False, "doubleClick": False, "displayModeBar": False
    }
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
                    html.Span(dcc.Checklist(
                        id=ids.TL_PATH,
                        options=[{"label": " Critical path", "value": "on"}],
                        value=["on"] if path_on else [],
                        inline=True,
                        className="path-toggle",
                    ), title=path_why),
                    *([html.Span("(off at first: it would hide the bars of this busy run)", className="muted small",
                                 id=ids.TL_PATH_NOTE, title=path_why)] if path_why else []),
                ],
                className="controls",
            ),
            rank_controls(view),
            html.Div(status_text(fig), id=ids.TL_STATUS, className="status muted"),
            dcc.Graph(id=ids.TL_GRAPH, figure=fig, config=TIMELINE_CONFIG, className="timeline-graph"),
            html.Div(
                "Overview of the whole run: share of each lane busy per pixel column — drag across it to "
                "show that stretch above",
                className="muted small minimap-title",
            ),
            dcc.Graph(id=ids.TL_MINIMAP, figure=minimap_figure(view, window), config=minimap_config),
            html.Div(launch_text(view, None), id=ids.TL_LAUNCH, className="launch muted"),
            explain_view.section(view),
            *([collectives] if collectives is not None else []),
            dcc.Store(id=ids.TL_STATE, data={"run": key, "window": list(window), "highlight": None, "path": path_on,
                                             "line": None,
                                             "drawn": drawn_of(view, window, None, None, path_on, width, fig)}),
            dcc.Store(id=ids.TL_WANT, data=None),
            dcc.Store(id=ids.TL_LINE, data=None),
        ],
        className="timeline-page",
    )


#: The critical path starts off where its line over the whole run would cross more rows than this in all: the
#: bundled mlp-data-parallel and blocking compute-copy runs' lines cross 200–530 rows, hiding their bars; most
#: others' under 70.
PATH_DEFAULT_MAX_ROWS_CROSSED = 100


def rank_controls(view: TimelineView) -> html.Div:
    """A job's rank filter (the ranks shown) and fold boxes (each folded rank is drawn as one lane: the union
    of its compute, comm, copies and host work). Present but hidden for one rank: the callback listens to
    them."""
    options = [{"label": f"rank {r}", "value": r} for r in view.ranks]
    return html.Div(
        [
            html.Span("Ranks shown:", className="muted small"),
            dcc.Checklist(id=ids.TL_RANKS, options=options, value=list(view.ranks), inline=True,
                          className="rank-filter"),
            html.Span("Fold into one lane:", className="muted small",
                      title="A folded rank shows one lane: per sub-row, the union of its GPU compute, "
                      "communication, copies and host work"),
            dcc.Checklist(id=ids.TL_FOLD, options=options, value=list(view.default_folded), inline=True,
                          className="rank-fold"),
            *([html.Div(f"{view.partial[0].upper()}{view.partial[1:]}: every rank starts folded; untick a rank "
                        f"to draw its lanes (at most {MAX_UNFOLDED} at once).", className="muted small")]
              if view.partial else []),
        ],
        id=ids.TL_RANK_CONTROLS,
        className="controls rank-controls",
        style=None if view.multi_rank else {"display": "none"},
    )


#: At most this many ranks in a request's rank filter (a job has at most a few thousand ranks).
MAX_RANKS_ASKED = 100_000


def ranks_from_request(value: Any, what: str = "ranks") -> list[int] | None:
    """A rank checklist's value: None (not on the page) or rank numbers; :class:`UsageError` for anything
    else, or for more than :data:`MAX_RANKS_ASKED` of them (the work done must stay bounded)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_RANKS_ASKED or not all(
        isinstance(r, int) and not isinstance(r, bool) for r in value
    ):
        raise UsageError(what, f"expected a list of at most {MAX_RANKS_ASKED:,} rank numbers")
    return value


def status_text(fig: Any, line: str | None = None) -> str:
    """The window and what was drawn of it, in ms like the time axis. "Bars" are what the heading counts
    too: the drawn events plus the overlap band's pieces, here only those that touch the window; ``line``:
    the source line outlined (its label), and how many of its intervals are in the window."""
    return status_of(fig.layout.meta or {}, line)


def status_of(meta: dict[str, Any], line: str | None = None) -> str:
    """:func:`status_text` from a figure's ``layout.meta`` (or what the page's state kept of it)."""
    lo, hi = meta.get("window_ns", [0, 0])
    blocks, n = meta.get("blocks", 0), meta.get("intervals", 0)
    if n == 0:
        detail = "no bars in this window"
    elif blocks >= n:
        detail = f"all {n:,} bars in this window drawn one by one"
    else:
        detail = f"{n:,} bars in this window merged into {blocks:,} blocks (zoom in to see each)"
    if line is not None:
        k = int(meta.get("outlined", 0))
        detail += f" · outlined {line}: {k:,} of its intervals in this window"
    return f"Window {window_text(lo, hi)} · {detail}"


def launch_text(view: TimelineView, link: dict[str, Any] | None, frame: dict[str, Any] | None = None,
                src: int | None = None) -> Any:
    """The lines under the chart: the clicked GPU work's launch, and the line of the user's code it came from
    (``frame``, :func:`tracer.dashboard.lines_view.frame_of`: a GPU interval's launching call's, a host call's
    own; with the user frames above it), or what a click would show. A run without GPU work has no launches to
    show: its line says what a bar's hover tells instead."""
    if link is None and frame is None:
        if not view.devices:
            return "Hover over a bar to see its name, thread, start and duration."
        return "Click a kernel or copy to see the host call that launched it."
    parts: list[Any] = []
    if link is not None:
        delay = link["work_start_ns"] - link["launch_start_ns"]
        parts.append(html.Span(
            [
                html.B(link["launch_name"]),
                f" on thread {link['tid']} at {link['launch_start_ns'] / 1e6:.4f} ms launched ",
                html.B(link["work_name"][:90]),
                f" (correlation {link['correlation']}), which started {fmt_duration(delay)} later.",
            ]
        ))
    elif src is not None:  # a host call of the user's line: what was clicked
        row = view.timeline.events.iloc[src]
        at_ms = (int(row["start_ns"]) - view.t0_ns) / 1e6
        parts.append(html.Span([html.B(str(row["name"])[:90]), f" on thread {int(row['tid'])} at {at_ms:.4f} ms."]))
    if frame is not None:
        parts.append(html.Div(lines_view.frame_text(frame)))
    return html.Div(parts)


#: The main chart's Plotly config: a double-click sets ``xaxis.autorange`` (the y axis is fixed), which the
#: page answers by drawing the whole run again.
TIMELINE_CONFIG: dcc.Graph.Config = {**GRAPH_CONFIG, "doubleClick": "autosize"}

#: Clientside: which events ask for a window. Relayouts that touch no x-axis key (autosize, dragmode,
#: selections) return no_update, so they never reach — and never cancel — the server callback.
WANT_JS = f"""
function(relayout, selected, reset, path) {{
    const nu = window.dash_clientside.no_update;
    const fired = (window.dash_clientside.callback_context.triggered || []).map(t => t.prop_id);
    if (fired.some(p => p.startsWith("{ids.TL_PATH}."))) {{
        return {{path: Array.isArray(path) && path.includes("on")}};
    }}
    if (fired.some(p => p.startsWith("{ids.TL_RESET}."))) {{
        return {{whole: reset || 0}};
    }}
    if (fired.some(p => p.startsWith("{ids.TL_MINIMAP}."))) {{
        const r = selected && selected.range && selected.range.x;
        return r ? {{range_ms: [r[0], r[1]]}} : nu;
    }}
    if (relayout && Object.keys(relayout).some(k => k.startsWith("xaxis."))) {{
        return {{relayout: relayout}};
    }}
    return nu;
}}
"""


def wanted_window(view: TimelineView, want: Any, current: Window) -> Window:
    """The window a ``TL_WANT`` value asks for: the whole run, an x range from a zoom or from the overview
    strip; ``current`` when it names none. :class:`UsageError` for a range that is not finite numbers."""
    if not want:  # nothing asked yet: the page's first window
        return current
    if not isinstance(want, dict):
        raise UsageError("zoom", "expected a window request")
    if "path" in want and not isinstance(want["path"], bool):
        raise UsageError("critical path", "expected the toggle's state (true or false)")
    if "whole" in want:
        return full_window(view)
    if "range_ms" in want:
        pair = want["range_ms"]
        if not isinstance(pair, list) or len(pair) != 2:
            raise UsageError("zoom", "expected an x range of two numbers of ms")
        asked: Window | Literal["full"] | None = window_from_ms(*pair)
    else:
        asked = window_from_relayout(want.get("relayout"))
    if asked is None:
        return current
    return full_window(view) if asked == "full" else clamp_window(view, asked)


def clicked_src(click: Any) -> int | None:
    """The events row behind the last clicked point (its customdata), if any."""
    points = click.get("points") if isinstance(click, dict) else None
    point = points[0] if isinstance(points, list) and points else None
    src = point.get("customdata") if isinstance(point, dict) else None
    if isinstance(src, bool) or not isinstance(src, (int, float)) or not 0 <= src < 2**62:
        return None  # nothing clicked, or nonsense (inf, NaN, text) from a request
    return int(src)


def path_wanted(state: Any, want: Any) -> bool:
    """Whether the critical path is drawn: what the toggle last asked (``want``), else what the page drew last
    (``state``); anything but ``true`` is off."""
    if isinstance(want, dict) and "path" in want:
        return want["path"] is True
    return isinstance(state, dict) and state.get("path") is True


def path_of(view: TimelineView, on: bool) -> PathPieces | None:
    """The critical path to draw (explained once per run, :func:`tracer.dashboard.explain_view.explained`), or
    None when it is off or the trace cannot give one (the findings panel says why)."""
    if not on or view.partial is not None:  # (a large job read rank by rank: its path needs the job whole)
        return None
    result = explain_view.explained(view)
    return result.path if result.reason is None else None


def run_of_state(state: Any) -> str:
    """The run key a page's state store names; :class:`UsageError` when it holds none."""
    key = state.get("run") if isinstance(state, dict) else None
    if not isinstance(key, str) or not key:
        raise UsageError("timeline", "the page's state names no run; open the run again from the runs page")
    return key


def update(
    store: RunStore,
    state: Any,
    want: Any,
    lanes: Any,
    click: Any,
    viewport: Any,
    ranks: Any = None,
    folded: Any = None,
    line: Any = None,
) -> tuple[Any, Any, Any, Any, Any]:
    """The page's server callback, as a plain function: (figure, minimap patch, status, launch text, state).

    A pure function of what is asked — the window (``want``, a ``TL_WANT`` value), the lanes, the ranks shown
    and folded, the last click and the source line outlined (``line``, a ``TL_LINE`` value) — not of which of
    them changed (see the module's docstring for why). Where only the line differs from what the chart was drawn
    from (the state's ``drawn``), the figure is a patch that replaces the outline trace alone.
    Whatever a request sends, an unknown run or a window that is no window is a message in the status line,
    never an HTTP 500.
    """
    try:
        return _update(store, state, want, lanes_from_request(lanes), click, viewport,
                       ranks_from_request(ranks), ranks_from_request(folded, "folded ranks"), line)
    except TracerError as exc:
        return failed(error_message(exc))


def failed(message: str) -> tuple[Any, Any, Any, Any, Any]:
    """The callback's outputs when a request could not be answered: the message in the status line."""
    return no_update, no_update, alert(message), no_update, no_update


def _update(
    store: RunStore,
    state: Any,
    want: Any,
    lanes: list[str] | None,
    click: Any,
    viewport: Any,
    ranks: list[int] | None = None,
    folded: list[int] | None = None,
    line: Any = None,
) -> tuple[Any, Any, Any, Any, Any]:
    key = run_of_state(state)
    view = store.view(key)
    src = clicked_src(click)
    chosen = chosen_line(view, key, line)
    if ranks is not None and set(ranks) >= set(view.ranks):
        ranks = None  # every rank: the fast path
    folded = [r for r in folded or () if r in view.fold_lanes]
    if (want is None and src is None and chosen is None and (lanes is None or lanes == [k for k, _ in view.lanes])
            and ranks is None and sorted(folded) == sorted(view.default_folded)):
        # Nothing asked yet: the page as its layout drew it. Dash calls this once when the page appears
        # (TL_WANT is another callback's output, so prevent_initial_call does not hold it back); a redraw
        # here would replace the figure just drawn, under the user's first click.
        return no_update, no_update, no_update, no_update, no_update
    current = window_from_state(state.get("window")) or full_window(view)
    window = wanted_window(view, want, current)
    link = launch_of(view, src) if src is not None else None
    highlight = src if link else None
    shown = view.shown_lanes(lanes, ranks, folded)
    path_on = path_wanted(state, want)
    width = plot_width(viewport)
    lines = explain_view.explained(view).lines if chosen is not None else None
    outline = lines.members(chosen) if lines is not None and chosen is not None else NO_LINE
    label = lines.label(chosen) if lines is not None and chosen is not None else None
    drawn = state.get("drawn")
    if (isinstance(drawn, dict) and drawn.get("key") == drawn_key(view, window, shown, src, path_on, width)
            and state.get("line") != chosen):
        # only the line changed: replace the outline trace (the figure's last), not the whole chart
        return outline_only(view, state, window, shown, width, outline, label, chosen)
    fig = timeline_figure(
        view, window, width_px=width, lanes=shown, highlight=highlight, uirevision=key,
        path=path_of(view, path_on), outline=outline,
    )
    # The minimap's heatmap never changes: send only the window's outline, and drop the selection box a
    # drag across it left (the outline now shows where the main chart is).
    minimap = Patch()
    minimap["layout"]["shapes"] = minimap_shapes(view, window)
    minimap["layout"]["selections"] = []
    frame = lines_view.frame_of(view, src) if src is not None else None
    new_state = {"run": key, "window": [int(window[0]), int(window[1])], "highlight": highlight, "path": path_on,
                 "line": chosen, "drawn": drawn_of(view, window, shown, src, path_on, width, fig)}
    status = status_text(fig, label)
    beyond = view.unfolded_beyond(ranks, folded) if isinstance(view, JobView) else 0
    if beyond:
        status += (f" · {beyond} more rank{'s' if beyond > 1 else ''} asked unfolded drawn folded: at most "
                   f"{MAX_UNFOLDED} at once in a job this large")
    return fig, minimap, status, launch_text(view, link, frame, src), new_state


def _count(value: Any) -> int:
    """A bar count the page's state kept (0 for anything a request made of it that is no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62 else 0


#: No source line outlined: the outline trace is drawn empty (it is always the figure's last trace).
NO_LINE = np.zeros(0, dtype=np.int64)


def chosen_line(view: TimelineView, key: str, line: Any) -> int | None:
    """The row of the lines table a ``TL_LINE`` value outlines (:func:`tracer.dashboard.lines_view.line_of_request`);
    None for none. A line of a run not explained yet is refused (its table was never shown)."""
    if line is None:
        return None
    if not explain_view.is_computed(view):
        raise UsageError("source lines table", "this run is not explained yet; explain it first")
    return lines_view.line_of_request(line, key, len(explain_view.explained(view).lines.table))


def drawn_key(view: TimelineView, window: Window, shown: list[str] | None, clicked: int | None, path_on: bool,
              width: int) -> str:
    """A digest of what the chart and the lines under it are drawn from, but the source line: the window, the
    lanes, the clicked interval, the path toggle and the width (equal digests: the same bars, path, arrow and
    launch text)."""
    lanes = shown if shown is not None else [k for k, _ in view.lanes]
    raw = orjson.dumps([int(window[0]), int(window[1]), lanes, clicked, path_on, width])
    return hashlib.blake2b(raw, digest_size=12).hexdigest()


def drawn_of(view: TimelineView, window: Window, shown: list[str] | None, clicked: int | None, path_on: bool,
             width: int, fig: Any) -> dict[str, Any]:
    """What the page's state keeps of a drawn chart: its :func:`drawn_key`, and the bar counts the status line
    says (so that a patch of the outline alone can say them again)."""
    meta = fig.layout.meta or {}
    return {"key": drawn_key(view, window, shown, clicked, path_on, width), "blocks": int(meta.get("blocks", 0)),
            "intervals": int(meta.get("intervals", 0))}


def outline_only(view: TimelineView, state: dict[str, Any], window: Window, shown: list[str] | None, width: int,
                 outline: np.ndarray, label: str | None, chosen: int | None) -> tuple[Any, Any, Any, Any, Any]:
    """The callback's outputs when only the source line changed: a patch of the figure that replaces its last
    trace (the outline, :func:`tracer.dashboard.figures.outline_trace`) and its ``outlined`` count, the status
    line, and the state with the new line."""
    trace, n = outline_trace(view, rows_shown(view, shown), outline, window, width)
    fig = Patch()
    fig["data"][-1] = trace
    fig["layout"]["meta"]["outlined"] = n
    drawn = state["drawn"]
    meta = {"window_ns": [int(window[0]), int(window[1])], "blocks": _count(drawn.get("blocks")),
            "intervals": _count(drawn.get("intervals")), "outlined": n}
    return fig, no_update, status_of(meta, label), no_update, {**state, "line": chosen}


def register(app: Dash, store: RunStore) -> None:
    app.clientside_callback(
        WANT_JS,
        Output(ids.TL_WANT, "data"),
        Input(ids.TL_GRAPH, "relayoutData"),
        Input(ids.TL_MINIMAP, "selectedData"),
        Input(ids.TL_RESET, "n_clicks"),
        Input(ids.TL_PATH, "value"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output(ids.TL_GRAPH, "figure"),
        Output(ids.TL_MINIMAP, "figure"),
        Output(ids.TL_STATUS, "children"),
        Output(ids.TL_LAUNCH, "children"),
        Output(ids.TL_STATE, "data"),
        Input(ids.TL_WANT, "data"),
        Input(ids.TL_LANES, "value"),
        Input(ids.TL_GRAPH, "clickData"),
        Input(ids.TL_RANKS, "value"),
        Input(ids.TL_FOLD, "value"),
        Input(ids.TL_LINE, "data"),
        State(ids.TL_STATE, "data"),
        State(ids.VIEWPORT, "data"),
        prevent_initial_call=True,
        on_error=on_error(failed),  # anything update() did not foresee: still a message, not a 500
    )
    def _update(want, lanes, click, ranks, folded, line, state, viewport):
        return update(store, state, want, lanes, click, viewport, ranks, folded, line)

    @app.callback(
        Output(ids.TL_LINE, "data"),
        Output(ids.TL_STATUS, "children", allow_duplicate=True),
        Input(ids.TL_LINES_TABLE, "cellClicked"),
        Input(ids.TL_LINE_CLEAR, "n_clicks"),
        State(ids.TL_LINE, "data"),
        State(ids.TL_STATE, "data"),
        prevent_initial_call=True,
        on_error=on_error(lambda message: (no_update, alert(message))),
    )
    def _choose_line(cell, clear, current, state):
        if ctx.triggered_id == ids.TL_LINE_CLEAR:
            return (None, no_update) if clear else (no_update, no_update)  # (drawn anew, not clicked)
        return choose_line(store, state, current, cell)

    @app.callback(
        Output(ids.TL_LINES_TABLE, "selectedRows"),
        Input(ids.TL_LINE, "data"),
        prevent_initial_call=True,
    )
    def _mark_line(line):
        return marked_rows(line)

    for table, zoom in ((ids.TL_COLL_TABLE, zoom_to_collective), (ids.TL_FIND_TABLE, zoom_to_finding)):
        _register_row_zoom(app, store, table, zoom)

    @app.callback(
        Output(ids.TL_FINDINGS, "children"),
        Output(ids.TL_FIND_RUN, "style"),
        Input(ids.TL_FIND_RUN, "n_clicks"),
        State(ids.TL_STATE, "data"),
        prevent_initial_call=True,
        on_error=on_error(lambda message: (alert(message), no_update)),
    )
    def _explain(_clicks, state):
        return explain_run(store, state)


def _register_row_zoom(app: Dash, store: RunStore, table: str,
                       zoom: Callable[[RunStore, Any, Any], tuple[Any, Any]]) -> None:
    """A click on a row of ``table`` (the collectives or the findings) asks for the window ``zoom`` finds for it."""

    @app.callback(
        Output(ids.TL_WANT, "data", allow_duplicate=True),
        Output(ids.TL_STATUS, "children", allow_duplicate=True),
        Input(table, "cellClicked"),
        State(ids.TL_STATE, "data"),
        prevent_initial_call=True,
        on_error=on_error(lambda message: (no_update, alert(message))),
    )
    def _zoom_to_row(cell, state):
        # (every click is a new cellClicked, its time in it: a second click on the same row zooms to it again)
        return zoom(store, state, cell)


def zoom_to_finding(store: RunStore, state: Any, cell: Any) -> tuple[Any, Any]:
    """(window request, status) for a click on a row of the findings table: the timeline's window becomes that
    finding's intervals (found on the server from the row's id). A cell that names no finding is a message in
    the status line."""
    if cell is None:
        return no_update, no_update
    try:
        view = store.view(run_of_state(state))
        result = explain_view.explained(view)
        i = explain_view.row_of_cell(cell, len(result.findings))
    except TracerError as exc:
        return no_update, alert(error_message(exc))
    lo, hi = explain_view.finding_window(view, result, i)
    return {"range_ms": [lo / 1e6, hi / 1e6], "finding": i}, no_update


def choose_line(store: RunStore, state: Any, current: Any, cell: Any) -> tuple[Any, Any]:
    """(``TL_LINE`` value, status) for a click on a row of the source lines table: that line is outlined on the
    timeline (the main callback draws it), or none where it already was (a second click clears). A cell that
    names no line is a message in the status line."""
    if cell is None:
        return no_update, no_update
    try:
        key = run_of_state(state)
        view = store.view(key)
        if not explain_view.is_computed(view):
            raise UsageError("source lines table", "this run is not explained yet; explain it first")
        i = lines_view.row_of_cell(cell, len(explain_view.explained(view).lines.table))
    except TracerError as exc:
        return no_update, alert(error_message(exc))
    if isinstance(current, dict) and current.get("run") == key and current.get("row") == i:
        return None, no_update
    return {"run": key, "row": i}, no_update


def marked_rows(line: Any) -> dict[str, list[str]]:
    """The lines table's ``selectedRows`` for a ``TL_LINE`` value: the chosen line's row marked, or none."""
    row = line.get("row") if isinstance(line, dict) else None
    ok = isinstance(row, int) and not isinstance(row, bool) and row >= 0
    return {"ids": [str(row)] if ok else []}


def explain_run(store: RunStore, state: Any) -> tuple[Any, Any]:
    """(panel, button style) for the **Explain this run** button of a big trace: explain it (once per run) and
    show the panel; the button goes."""
    try:
        view = store.view(run_of_state(state))
    except TracerError as exc:
        return alert(error_message(exc)), no_update
    return explain_view.panel(view, explain_view.explained(view)), {"display": "none"}


def zoom_to_collective(store: RunStore, state: Any, cell: Any) -> tuple[Any, Any]:
    """(window request, status) for a click on a row of the collectives table: the timeline's window becomes
    that collective's (found on the server from the row's id). A cell that names no collective is a message
    in the status line."""
    if cell is None:
        return no_update, no_update
    try:
        view = store.view(run_of_state(state))
        i = collectives_view.row_of_cell(cell, len(view.collectives.rows))
    except TracerError as exc:
        return no_update, alert(error_message(exc))
    lo, hi = view.collective_window(i)
    return {"range_ms": [lo / 1e6, hi / 1e6], "collective": i}, no_update
