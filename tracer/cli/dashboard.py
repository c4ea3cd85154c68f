"""`tracer dashboard`: the Plotly Dash app over runs and traces (Dash is imported with this module: only when
the command runs or its --help is asked for, tracer.cli.COMMANDS).

It is served by waitress, a small pure-Python production WSGI server, rather than Flask's development server:
no "do not use in production" warning and no line per request. ``--verbose`` logs each request,
``--debug`` runs Dash's development server (reloader, error overlay) instead. Uploads live in a temporary
folder that is removed on every way out: Ctrl-C, SIGTERM, a normal exit. Every trace is parsed in a child process
with a time and a memory budget (``--parse-timeout``, ``--parse-memory-mb``: :mod:`tracer.dashboard.parsing`),
killed on the same ways out.
"""

from __future__ import annotations

import atexit
import logging
import math
import socket
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from waitress import wasyncore
from waitress.server import create_server

from tracer.cli import TracerCommand, app
from tracer.cli._report import say_skipped_file
from tracer.dashboard.access import TOKEN_PARAM, is_loopback, new_token, require_token
from tracer.dashboard.app import create_app
from tracer.dashboard.data import DEFAULT_MAX_UPLOAD_BYTES, RunStore, request_limit_bytes
from tracer.dashboard.parsing import DEFAULT_TIMEOUT_S, MEMORY_ENV, MEMORY_SHARE, TIMEOUT_ENV, ParseLimits
from tracer.errors import InputNotFoundError, UsageError
from tracer.files.discover import job_traces
from tracer.sigterm import sigterm_raises


@app.command(cls=TracerCommand)
def dashboard(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="PATH",
            help="Run directories, trace files (Kineto, nsys) or folders of them. Default: the bundled "
            "examples and ./runs."
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Interface to listen on (loopback by default: traces can be private).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8050,
    no_examples: Annotated[
        bool, typer.Option("--no-examples", help="Don't list the bundled example runs.")
    ] = False,
    max_upload_mb: Annotated[int, typer.Option(help="Largest trace accepted by drag and drop, MB.")] = 200,
    parse_timeout: Annotated[
        float | None, typer.Option(metavar="SECONDS", help="Longest one parse of a trace may take (an upload, a run "
                                   "opened in the page), in a process of its own; past it the parse is stopped and "
                                   f"the page says so. 0: no limit. Default: ${TIMEOUT_ENV}, else "
                                   f"{DEFAULT_TIMEOUT_S:g}.", show_default=False)
    ] = None,
    parse_memory_mb: Annotated[
        float | None, typer.Option(metavar="MB", help="Most memory one parse may take beyond what the parser "
                                   "holds at its start; past it the parse fails and the page says so. 0: no "
                                   f"limit. Default: ${MEMORY_ENV}, else 1/{MEMORY_SHARE} of this machine's "
                                   "memory.", show_default=False)
    ] = None,
    debug: Annotated[
        bool, typer.Option(help="Dash debug mode: Flask's development server, reloader, error overlay.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log every request (method, path, status) to stderr.")
    ] = False,
    job: Annotated[
        bool, typer.Option("--job", help="Read every trace found in the PATHs as the ranks of ONE job (as `tracer "
                           "summary --job` does), shown as one run and opened straight away.")
    ] = False,
    token: Annotated[
        str | None, typer.Option("--token", envvar="TRACER_DASHBOARD_TOKEN", help="The token a browser must show "
                                 "(in the printed address, then a cookie). Default: off loopback a new random one "
                                 "each start; on loopback none.")
    ] = None,
    no_token: Annotated[
        bool, typer.Option("--no-token", help="Off loopback, serve without a token: anyone who can reach the port "
                           "sees every run and upload.")
    ] = False,
) -> None:
    """Browse runs and their timelines in the browser: compute, copies and their overlap per GPU and stream.

    With no PATH it lists the bundled example runs and ./runs; given a single trace or run, it opens straight
    on that timeline (parsed before the server starts, so a bad file fails here with one line).
    """
    # checked here: Dash asserts on a bad port only after the runs are loaded, with a traceback
    if not 1 <= port <= 65535:
        raise UsageError("--port", f"{port} is not a TCP port; choose one from 1 to 65535")
    if max_upload_mb < 1:
        raise UsageError("--max-upload-mb", f"{max_upload_mb} would refuse every upload; give 1 or more")
    for name, value in (("--parse-timeout", parse_timeout), ("--parse-memory-mb", parse_memory_mb)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(name, f"{value:g} is not a limit; give 0 (none) or a number above it")
    _check_host(host, port)
    if token is not None and (no_token or len(token) < 8):
        raise UsageError("--token", "needs 8 characters or more, and not with --no-token")
    exposed = not is_loopback(host)  # (one name lookup)
    if token is None and not no_token and exposed:
        token = new_token()  # (off loopback every machine that reaches the port could read every run)
    if token is None and exposed:
        typer.echo(f"tracer: warning: serving on {host} without a token (--no-token): anyone who can reach port "
                   f"{port} sees every run and upload", err=True)
    paths = list(paths or [])
    for p in paths:
        if not p.exists():
            raise InputNotFoundError(p, "no such file or directory")
    jobs = []
    if job:
        if not paths:
            raise UsageError("--job", "give the job's rank traces, a folder of them or its run directory")
        jobs, paths = [job_traces(paths, on_skip=say_skipped_file)], []

    store = RunStore(paths, examples=not no_examples, max_upload_bytes=max_upload_mb * 1000 * 1000, jobs=jobs,
                     parse_limits=ParseLimits.from_env(parse_timeout, parse_memory_mb))
    atexit.register(store.close)  # uploads go with the process, however it ends (but SIGKILL)
    # SIGTERM stops the server as Ctrl-C does (waitress ends on a KeyboardInterrupt, closing its sockets), exit 0:
    # the way a service manager or `docker stop` ends a server, not a failure
    with sigterm_raises(KeyboardInterrupt):
        try:
            _serve(store, paths, host, port, debug=debug, verbose=verbose, token=token)
        finally:
            store.close()


def _serve(store: Any, paths: list[Path], host: str, port: int, *, debug: bool, verbose: bool,
           token: str | None = None) -> None:
    """Parse the single PATH given, if one was, then serve until Ctrl-C or SIGTERM; with ``token``, only to a
    browser that shows it (:mod:`tracer.dashboard.access`)."""
    first = store.initial_run
    if first is not None:
        typer.echo(f"loading {store.get(first).path} ...", err=True)
        store.view(first)  # parse now: errors surface as one line and exit 2, and the first page is fast
    dash_app = create_app(store=store)
    if token is not None:
        require_token(dash_app.server, token)
    if debug:
        _check_free(host, port)  # (Flask's development server says a busy port in two lines of its own)
        dash_app.run(host=host, port=port, debug=True)
        return
    server = make_server(
        dash_app.server, host, port, verbose=verbose, max_upload_bytes=store.max_upload_bytes
    )
    url = server_url(server) + (f"?{TOKEN_PARAM}={token}" if token is not None else "")
    typer.echo(f"tracer dashboard: {len(store.runs())} run(s) at {url}  (Ctrl-C to stop)", err=True)
    server.run()  # returns on Ctrl-C and SIGTERM: waitress catches KeyboardInterrupt and closes its sockets


def server_url(server: Any) -> str:
    """The address a browser should open (the port the server really got, for port 0; the first of several
    sockets, e.g. IPv4 and IPv6 for ``localhost``)."""
    listen = getattr(server, "effective_listen", None) or [(server.effective_host, server.effective_port)]
    host, port = listen[0][0], listen[0][1]
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def make_server(
    wsgi_app: Callable[..., Iterable[bytes]],
    host: str,
    port: int,
    *,
    verbose: bool = False,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    log_to: IO[str] | None = None,
) -> Any:
    """A waitress server for ``wsgi_app`` bound to ``host:port`` (0: any free port), not yet serving.

    Quiet unless ``verbose``: waitress logs only errors (an exception in a request), nothing per request.
    Verbose: one line per request on ``log_to`` (stderr) and waitress's own messages. A port in use or a
    host that cannot be bound is a one-line :class:`UsageError`.
    """
    logger = logging.getLogger("waitress")
    if verbose:
        logger.setLevel(logging.INFO)
        if not logger.handlers:
            logger.addHandler(logging.StreamHandler(log_to or sys.stderr))
        wsgi_app = log_requests(wsgi_app, log_to or sys.stderr)
    else:
        # without this, "Task queue depth is N" warnings would reach stderr through logging's last resort
        logger.setLevel(logging.ERROR)
    try:
        return create_server(
            wsgi_app,
            host=host,
            port=port,
            threads=8,  # a page load asks for a dozen assets and callbacks at once
            # refused from the Content-Length header, before the body is read or buffered (413)
            max_request_body_size=request_limit_bytes(max_upload_bytes),
            ident="tracer",
        )
    except OSError as exc:
        raise _cannot_listen(host, port, exc) from None
    except ValueError:  # waitress: "Invalid host/port specified." (a name that does not resolve)
        raise UsageError(f"{host}:{port}", "cannot listen there (not an address of this machine); "
                                           "choose another --host") from None


def _cannot_listen(host: str, port: int, exc: OSError) -> UsageError:
    """The one line for an address nothing can listen on (a port in use ...), whichever server was to."""
    what = exc.strerror or str(exc)
    return UsageError(f"{host}:{port}", f"cannot listen there ({what}); choose another --port or --host")


def _check_free(host: str, port: int) -> None:
    """Refuse ``host:port`` as :func:`make_server` does (:func:`_cannot_listen`) where nothing can listen
    there now (a port in use, an address of another machine). Bound and let go at once: a race with another
    program remains, and then Flask says it."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(info[0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as Werkzeug binds)
            probe.bind(info[4])
    except OSError as exc:
        raise _cannot_listen(host, port, exc) from None


def _check_host(host: str, port: int) -> None:
    """Refuse a --host that names no address, before the runs are loaded (waitress raised a bare ValueError
    with a traceback; Flask's server, under --debug, a line without tracer's prefix)."""
    if not host.strip():
        raise UsageError("--host", "is empty; give an address such as 127.0.0.1 (this machine) or 0.0.0.0 (all)")
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:  # (socket.gaierror is an OSError; an IDNA label too long: UnicodeError)
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise UsageError("--host", f"{host!r} is not an address to listen on ({reason})") from None


def log_requests(wsgi_app: Callable[..., Iterable[bytes]], stream: IO[str]) -> Callable[..., Iterable[bytes]]:
    """WSGI middleware: one line per request, ``GET /timeline?run=x 200``, written when the response starts."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            query = environ.get("QUERY_STRING")
            path = environ.get("PATH_INFO", "") + (f"?{query}" if query else "")
            print(
                f"{environ.get('REQUEST_METHOD', '?')} {path} {status.split(' ', 1)[0]}",
                file=stream,
                flush=True,
            )
            return start_response(status, headers, exc_info)

        return wsgi_app(environ, start)

    return app


def stop_server(server: Any) -> None:
    """Stop a server from :func:`make_server` whose ``run()`` loop is in another thread (tests, screenshots).

    The request threads are stopped first: a thread that has just answered still pulls the trigger to wake the
    loop, and with the trigger already closed that is an "Exception when servicing" (EBADF) in the log. Then
    the sockets are closed by the loop's own thread, through that trigger: closing them from here would pull
    them out from under the loop's ``select()``.
    """
    server.task_dispatcher.shutdown()  # waits for each thread to finish the request it is serving
    socket_map = server._map  # the dispatcher's socket map (a single listening socket: TcpWSGIServer)
    # Where the trigger is closed already (EBADF seen once in a full test run; by what is not known) the loop
    # cannot be woken through it: what it would have closed is closed here, which also ends the loop (an empty
    # map) at its next select() timeout.
    if not getattr(server.trigger, "_closed", False):
        try:
            server.trigger.pull_trigger(lambda: wasyncore.close_all(socket_map))
            return
        except OSError:
            pass
    wasyncore.close_all(socket_map)
