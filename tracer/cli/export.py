"""`tracer export`: a trace or run directory → Nsight Systems SQLite, NVTXT, Chrome/Perfetto JSON or Parquet."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from tracer.cli import TracerCommand, app
from tracer.cli._job import job_progress, say_job_cached
from tracer.cli._report import say_cached, say_skipped_file, warn_left_out
from tracer.errors import OutputError, UsageError
from tracer.exporters import check_output, export_timeline, get_exporter
from tracer.files.discover import job_label, job_traces
from tracer.parsers import load_trace

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
    paths: Annotated[
        list[Path], typer.Argument(metavar="PATH", help="A trace (Kineto JSON[.gz], nsys .sqlite/.nsys-rep, Parquet) "
                                   "or a run directory; with --job, a job's rank traces, a folder of them or its run.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The file to write; its suffix picks the format unless --to. "
                           "`-`: standard output (with --to), e.g. `-o - --to chrome | gzip > t.json.gz`.")
    ],
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="nsys-sqlite (.sqlite, .sqlite.gz), nvtxt (.nvtxt), chrome (.json, .json.gz) or parquet (.parquet); "
            "default: from OUTPUT's suffix.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", "-f", help="Overwrite OUTPUT if it exists.")] = False,
    parents: Annotated[bool, typer.Option("--parents", help="Create OUTPUT's folders where they do not exist "
                                                            "(else a missing folder is refused).")] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse afresh; don't read or write the Parquet cache beside big traces.")
    ] = False,
    job: Annotated[
        bool, typer.Option("--job", help="Read every trace found in the PATHs as the ranks of ONE job (as `tracer "
                           "summary --job` does) and export the job's timeline, its rows on their ranks.")
    ] = False,
) -> None:
    """Write a trace in another tool's format, for Nsight Systems (`nsys stats`, ImportNvtxt), Perfetto or
    DataFrame tools. The file appears only when it is complete; an existing OUTPUT needs --force.

    Examples: `tracer export trace.json.gz -o trace.sqlite` then `nsys stats -r cuda_gpu_kern_sum trace.sqlite`;
    `tracer export report.sqlite -o trace.json.gz` then open it in ui.perfetto.dev;
    `tracer export --job traces/ -o job.sqlite`: a job's rank traces as one report.
    """
    # Bad arguments fail before a possibly long parse.
    if len(paths) > 1 and not job:
        raise UsageError(str(paths[1]), "one PATH is exported at a time; several that are one job's ranks: add --job")
    to_stdout = str(output) == "-"
    if to_stdout and to is None:
        raise UsageError("--to", "-o - (standard output) has no suffix to tell the format by: give --to")
    if not to_stdout:
        check_output(output, force=force, parents=parents)
    exporter = get_exporter(to, output)
    if to_stdout and exporter.name in _BINARY and sys.stdout.isatty():
        raise UsageError("-o -", f"{exporter.name} is a binary file: redirect standard output to a file or a pipe")
    status = Console(stderr=True)
    if job:
        from tracer.job.load import load_job  # (the job's reader, 20-40 ms that one trace's export need not pay)

        traces = job_traces(paths, on_skip=say_skipped_file)
        path = job_label(traces)
        timeline = load_job(traces, cache=not no_cache, on_rank=job_progress(traces, status),
                            on_cache_write=say_job_cached)
    else:
        path = paths[0]
        timeline = load_trace(path, cache=not no_cache, on_cache_write=say_cached)
    warn_left_out(path, timeline.meta.extra)
    with _progress(status, len(timeline.events)) as progress:
        if to_stdout:
            result = _export_to_stdout(timeline, exporter.name, progress)
        else:
            result = export_timeline(timeline, output, exporter.name, force=force, progress=progress)
    counts = ", ".join(f"{v:,} {k}" for k, v in result.counts.items() if v) or "no events (the trace has none)"
    print(f"wrote {'standard output' if to_stdout else result.path} ({result.format}): {counts}", file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)


#: formats whose bytes are not text: not written to a terminal
_BINARY = ("nsys-sqlite", "parquet")


def _export_to_stdout(timeline: Any, fmt: str, progress: Any) -> Any:
    """``-o -``: the export written whole to a private temporary file first (SQLite and Parquet need a file they
    can seek in; and nothing reaches the pipe unless the export succeeded), then copied to standard output."""
    with tempfile.TemporaryDirectory(prefix="tracer-export-") as tmp:
        result = export_timeline(timeline, Path(tmp) / "export", fmt, progress=progress)
        try:
            with open(result.path, "rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
            sys.stdout.buffer.flush()
        except BrokenPipeError:  # (the reader ended first: `| head`)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (so that the exit's flush is quiet)
            raise OutputError("", "cannot write standard output: the pipe's reader ended first") from None
    return result
