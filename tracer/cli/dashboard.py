"""`tracer dashboard`: the Plotly Dash app over runs and traces (Dash is imported only when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tracer.cli import TracerCommand, app
from tracer.errors import InputNotFoundError, UsageError


@app.command(cls=TracerCommand)
def dashboard(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
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
    debug: Annotated[bool, typer.Option(help="Dash debug mode (reloader, error overlay).")] = False,
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
    paths = list(paths or [])
    for p in paths:
        if not p.exists():
            raise InputNotFoundError(p, "no such file or directory")

    from dashboard.app import create_app
    from dashboard.data import RunStore

    store = RunStore(paths, examples=not no_examples, max_upload_bytes=max_upload_mb * 1024 * 1024)
    first = store.initial_run
    if first is not None:
        typer.echo(f"loading {paths[0]} ...", err=True)
        store.view(first)  # parse now: errors surface as one line and exit 2, and the first page is fast
    typer.echo(
        f"tracer dashboard: {len(store.runs())} run(s); open http://{host}:{port}/  (Ctrl-C to stop)",
        err=True,
    )
    create_app(store=store).run(host=host, port=port, debug=debug)
