"""`tracer export`: a trace or run directory → Nsight Systems SQLite, NVTXT, Chrome/Perfetto JSON or Parquet."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from tracer.cli import TracerCommand, app

#: Show a progress bar on stderr (on a terminal) for timelines at least this long.
PROGRESS_MIN_EVENTS = 200_000


@contextlib.contextmanager
def _progress(console: Any, events: int) -> Iterator[Any]:
    """A progress callback for the exporters: a rich bar for big timelines on a terminal, else nothing."""
    if events < PROGRESS_MIN_EVENTS or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    ) as bar:
        task = bar.add_task("exporting", total=events)

        def update(stage: str, done: int, total: int) -> None:
            # one bar; exporters report rows done so far out of all rows, the stage names the part being written
            bar.update(task, description=stage, completed=done, total=total or None)

        yield update


@app.command(cls=TracerCommand)
def export(
    path: Annotated[
        Path, typer.Argument(help="A trace (Kineto JSON[.gz], nsys .sqlite/.nsys-rep, Parquet) or a run directory.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The file to write; its suffix picks the format unless --to.")
    ],
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="nsys-sqlite (.sqlite), nvtxt (.nvtxt), chrome (.json, .json.gz) or parquet (.parquet); "
            "default: from OUTPUT's suffix.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite OUTPUT if it exists.")] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse afresh; don't read or write the Parquet cache beside big traces.")
    ] = False,
) -> None:
    """Write a trace in another tool's format, for Nsight Systems (`nsys stats`, ImportNvtxt), Perfetto or
    DataFrame tools. The file appears only when it is complete; an existing OUTPUT needs --force.

    Examples: `tracer export trace.json.gz -o trace.sqlite` then `nsys stats -r cuda_gpu_kern_sum trace.sqlite`;
    `tracer export report.sqlite -o trace.json.gz` then open it in ui.perfetto.dev.
    """
    from rich.console import Console

    from tracer.cli._report import say_cached, warn_left_out
    from tracer.exporters import check_output, export_timeline, get_exporter
    from tracer.parsers import load_trace

    # Bad arguments fail before a possibly long parse.
    check_output(output, force=force)
    exporter = get_exporter(to, output)
    status = Console(stderr=True)
    timeline = load_trace(path, cache=not no_cache, on_cache_write=say_cached)
    warn_left_out(path, timeline.meta.extra)
    with _progress(status, len(timeline.events)) as progress:
        result = export_timeline(timeline, output, exporter.name, force=force, progress=progress)
    counts = ", ".join(f"{v:,} {k}" for k, v in result.counts.items() if v) or "no events (the trace has none)"
    print(f"wrote {result.path} ({result.format}): {counts}", file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
