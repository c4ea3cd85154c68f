"""The Dash app factory: ``create_app(paths)`` builds an app over a :class:`~dashboard.data.RunStore`.

Routing is a plain ``dcc.Location`` callback rather than ``dash.register_page``: Dash pages keep a global
registry, and tests build many apps in one process. Pages: ``/runs`` (or ``/``), ``/timeline?run=KEY``,
``/compare?a=KEY&b=KEY``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from dash import Dash, Input, Output, State, dcc, html

from dashboard import ids
from dashboard.data import DEFAULT_MAX_UPLOAD_BYTES, RunStore
from dashboard.pages import compare, runs, timeline
from tracer.errors import TracerError

ASSETS = Path(__file__).parent / "assets"


def create_app(
    paths: list[Path] | tuple[Path, ...] = (),
    *,
    store: RunStore | None = None,
    examples: bool = True,
    runs_dir: Path | None = Path("runs"),
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
) -> Dash:
    """A Dash app showing the runs in ``paths`` (run directories, traces, folders of them), the bundled
    examples (``examples``) and ``runs_dir``. With exactly one run or trace in ``paths``, ``/`` opens its
    timeline. The app's :class:`RunStore` is ``app.tracer_store``."""
    store = store or RunStore(
        list(paths), examples=examples, runs_dir=runs_dir, max_upload_bytes=max_upload_bytes
    )
    app = Dash(
        __name__,
        title="tracer",
        assets_folder=str(ASSETS),
        suppress_callback_exceptions=True,
        update_title=None,
    )
    app.tracer_store = store  # type: ignore[attr-defined]
    app.layout = html.Div(
        [
            dcc.Location(id=ids.URL, refresh="callback-nav"),
            dcc.Store(id=ids.VIEWPORT),
            html.Header(
                [
                    dcc.Link([html.Span("tracer", className="brand")], href="/runs", className="brand-link"),
                    html.Nav([dcc.Link("Runs", href="/runs")], className="nav"),
                    dcc.Upload(
                        id=ids.UPLOAD,
                        children=html.Div(["Open a trace: drop it here or ", html.A("choose a file")]),
                        className="upload",
                        className_active="upload active",
                        multiple=False,
                    ),
                ],
                className="topbar",
            ),
            html.Div(id=ids.UPLOAD_STATUS),
            dcc.Loading(
                html.Main(id=ids.PAGE, className="page"),
                type="dot",
                delay_show=300,
                color="#0072B2",
                target_components={ids.PAGE: "children"},  # page changes only, not every zoom
            ),
        ],
        className="app",
    )

    # The browser's width decides the level of detail; read it before a page first renders.
    app.clientside_callback(
        "function(path) { return {width: window.innerWidth, height: window.innerHeight}; }",
        Output(ids.VIEWPORT, "data"),
        Input(ids.URL, "pathname"),
    )

    @app.callback(
        Output(ids.PAGE, "children"),
        Input(ids.URL, "pathname"),
        Input(ids.URL, "search"),
        Input(ids.VIEWPORT, "data"),
    )
    def _route(pathname: str | None, search: str | None, viewport: dict[str, Any] | None) -> Any:
        return route(store, pathname, search, viewport)

    @app.callback(
        Output(ids.UPLOAD_STATUS, "children"),
        Output(ids.URL, "pathname"),
        Output(ids.URL, "search"),
        Input(ids.UPLOAD, "contents"),
        State(ids.UPLOAD, "filename"),
        prevent_initial_call=True,
    )
    def _upload(contents: str | None, filename: str | None) -> tuple[Any, Any, Any]:
        return upload(store, contents, filename)

    runs.register(app, store)
    timeline.register(app, store)
    compare.register(app, store)
    return app


def route(store: RunStore, pathname: str | None, search: str | None, viewport: dict[str, Any] | None) -> Any:
    """The page for a URL."""
    query = {k: v[0] for k, v in parse_qs((search or "").lstrip("?")).items()}
    path = (pathname or "/").rstrip("/") or "/"
    if path == "/" and store.initial_run:
        return timeline.layout(store, store.initial_run, viewport)
    if path in ("/", "/runs"):
        return runs.layout(store)
    if path == "/timeline":
        return timeline.layout(store, query.get("run"), viewport)
    if path == "/compare":
        return compare.layout(store, [query.get("a", ""), query.get("b", "")], viewport)
    return html.Div(["No page here. ", dcc.Link("Back to the runs", href="/runs"), "."], className="notice")


def upload(store: RunStore, contents: str | None, filename: str | None) -> tuple[Any, Any, Any]:
    """Parse an uploaded trace; go to its timeline, or say in the page why it could not be opened."""
    from dash import no_update

    if not contents:
        return no_update, no_update, no_update
    try:
        info = store.add_upload(filename or "upload", contents)
    except TracerError as exc:
        banner = html.Div(
            [html.B("Could not open the upload. "), str(exc)],
            className="alert alert-error",
            role="alert",
            id="upload-error",
        )
        return banner, no_update, no_update
    events = len(store.timeline(info.key).events)
    banner = html.Div(f"Opened {info.name}: {events:,} intervals.", className="alert alert-ok", role="status")
    return banner, "/timeline", "?" + urlencode({"run": info.key})
