"""The Dash app factory: ``create_app(paths)`` builds an app over a :class:`~tracer.dashboard.data.RunStore`.

Routing is a plain ``dcc.Location`` callback rather than ``dash.register_page``: Dash pages keep a global
registry, and tests build many apps in one process. Pages: ``/runs`` (or ``/``), ``/timeline?run=KEY``,
``/compare?a=KEY&b=KEY``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from dash import Dash, Input, Output, State, dcc, html, no_update
from flask import Flask, abort, request
from werkzeug.exceptions import HTTPException

from tracer.dashboard import ids
from tracer.dashboard.data import DEFAULT_MAX_UPLOAD_BYTES, RunStore, quoted, request_limit_bytes
from tracer.dashboard.pages import compare, runs, timeline
from tracer.dashboard.pages.common import error_message, on_error
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
        update_title=None,  # type: ignore[arg-type]  # (None turns it off, as Dash's docs say; its hint omits it)
    )
    app.tracer_store = store  # type: ignore[attr-defined]  # (the pages' callbacks find the store on the app)
    guard_server(app.server, request_limit_bytes(store.max_upload_bytes))
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
                # page changes only, not every zoom (Dash's generated hint for this dict is an empty TypedDict)
                target_components={ids.PAGE: "children"},  # type: ignore[arg-type]
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
        on_error=on_error(lambda message: _error_banner("Cannot show this page. ", message)),
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
        on_error=on_error(lambda message: (_upload_error(message), no_update, no_update)),
    )
    def _upload(contents: str | None, filename: str | None) -> tuple[Any, Any, Any]:
        return upload(store, contents, filename)

    # A file over the limit is refused by the server before it reads the request (413), which the page
    # would not show: say so here, in the browser, from the size of what is about to be sent.
    app.clientside_callback(
        TOO_BIG_JS
        % {"limit_chars": store.max_upload_bytes * 4 // 3 + 64, "limit_mb": store.max_upload_bytes / 1e6},
        Output(ids.UPLOAD_STATUS, "children", allow_duplicate=True),
        Input(ids.UPLOAD, "contents"),
        State(ids.UPLOAD, "filename"),
        prevent_initial_call=True,
    )

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


def upload(store: RunStore, contents: Any, filename: Any) -> tuple[Any, Any, Any]:
    """Parse an uploaded trace; go to its timeline, or say in the page why it could not be opened."""
    if not contents:
        return no_update, no_update, no_update
    try:
        info, evicted = store.add_upload(filename or "upload", contents)
        events = len(store.timeline(info.key).events)
    except TracerError as exc:
        return _upload_error(error_message(exc)), no_update, no_update
    text = f"Opened {info.name}: {events:,} intervals."
    if evicted:
        text += (
            f" Removed the oldest upload{'s' if len(evicted) > 1 else ''} ({quoted(', '.join(evicted))}) to "
            f"keep at most {store.max_uploads} uploads and {store.max_kept_upload_bytes / 1e6:,.0f} MB."
        )
    banner = html.Div(text, className="alert alert-ok", role="status")
    return banner, "/timeline", "?" + urlencode({"run": info.key})


def _error_banner(title: str, message: str, **kw: Any) -> html.Div:
    return html.Div([html.B(title), message], className="alert alert-error", role="alert", **kw)


def _upload_error(message: str) -> html.Div:
    return _error_banner("Could not open the upload. ", message, id="upload-error")


#: Clientside: the message for a file over the upload limit (base64 is 4 characters per 3 bytes).
TOO_BIG_JS = """
function(contents, filename) {
    if (!contents || contents.length <= %(limit_chars)d) {
        return window.dash_clientside.no_update;
    }
    const mb = Math.round(contents.length * 3 / 4 / 1e6);
    return {
        namespace: "dash_html_components", type: "Div",
        props: {
            id: "upload-error", className: "alert alert-error", role: "alert",
            children: "Could not open the upload. " + (filename || "the file") + ": " + mb +
                " MB is over the upload limit of %(limit_mb).0f MB; open it with `tracer dashboard " +
                (filename || "FILE") + "` instead"
        }
    };
}
"""


def guard_server(server: Flask, max_request_bytes: int) -> None:
    """Refuse what must not be read, and answer what cannot be served in one line, on the Flask server.

    A request longer than ``max_request_bytes`` (an upload over the limit) gets 413 before its body is
    read: checked on the upload's size after decoding, a 201 MB file cost 1.4 GB. A request Dash cannot
    dispatch (a malformed callback body) is a 400 with one line, not a 500 and a traceback in the log.
    """
    server.config["MAX_CONTENT_LENGTH"] = max_request_bytes

    @server.before_request
    def _refuse_oversize() -> None:
        if (request.content_length or 0) > max_request_bytes:
            abort(413)

    @server.errorhandler(413)
    def _too_large(_exc: Exception) -> tuple[str, int]:
        limit = max_request_bytes / 1e6
        return f"Request over the limit of {limit:,.0f} MB (tracer dashboard --max-upload-mb).\n", 413

    @server.errorhandler(Exception)
    def _bad_request(exc: Exception) -> Any:
        if isinstance(exc, HTTPException):
            return exc
        return f"Bad request: {error_message(exc)}\n", 400
