"""`tracer summary`: compute, copy and overlap per GPU, per stream, per NVTX range."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from tracer.analysis.registry import Line, TextOptions, text_analyses
from tracer.cli import TracerCommand, app
from tracer.cli._job import job_progress, parse_ranks, say_fixes, say_job_cached, say_skipped
from tracer.cli._report import left_out_text, run_failures, say_cached, say_skipped_file
from tracer.cli._tables import cut_name, table_width, wrap_name
from tracer.errors import TraceFormatError, TracerError, UsageError
from tracer.files.discover import expand, is_run_dir, job_label, job_traces
from tracer.files.rundir import load_meta_json
from tracer.parsers import load_trace

# Nothing imported above brings pandas: a job's first open (--job) starts its scan workers before pandas is
# imported (tracer.job.load), so tracer.analysis.summary is imported where it is used; and the job's reader
# (tracer.job.load, 20-40 ms) only where a job is read.

if TYPE_CHECKING:
    from tracer.timeline import TraceMeta


def _numbers_first(t: Any, rows: list[list[str]], numeric: list[bool], width: int) -> None:
    """Where ``t`` is wider than ``width``: its text columns are capped to share what the numeric ones leave (at
    least 8 characters each: a name is cut with "…"), and where even that is too wide the table is made wider than
    the terminal rather than a number cut or split (print it with ``crop=False``)."""
    if table_width(t, rows) <= width:
        return
    # (a numeric cell may hold two figures, "[lo, hi]": it may wrap at its space, never inside a figure)
    words = [[len(w) for r in rows for w in str(r[i]).split()] for i in range(len(numeric))]
    least = [max([len(w) for w in str(col.header).split()] + words[i]) for i, col in enumerate(t.columns)]
    text = [i for i, num in enumerate(numeric) if not num]
    overhead = 3 * len(numeric) + 1  # (each column's padding and the gap between columns, the table's edge)
    share = max(8, (width - overhead - sum(least[i] for i in range(len(numeric)) if numeric[i])) // max(1, len(text)))
    for i in text:
        t.columns[i].max_width = max(min(least[i], share), min(least[i], 8))
    for i, num in enumerate(numeric):
        if num:
            t.columns[i].min_width = least[i]
    needed = overhead + sum(least[i] if numeric[i] else t.columns[i].max_width for i in range(len(numeric)))
    if needed > width:
        t.width = needed


def render_blocks(blocks: list[Any], *, width: int = 100) -> list[Any]:
    """Rich renderables for text blocks (:class:`tracer.analysis.registry.Table` / ``Line``), for a terminal
    ``width`` characters wide."""
    from rich import box
    from rich.table import Table

    out: list[Any] = []
    for block in blocks:
        if isinstance(block, Line):
            out.append(Text.assemble(*block.parts) if len(block.parts) > 1 else Text(*block.parts[0]))
            continue
        t = Table(box=box.SIMPLE_HEAD, title=block.title, caption=block.caption)
        numeric = [col.justify == "right" and not col.fit for col in block.columns]
        for col, num in zip(block.columns, numeric):
            # a figure is never cut short or split ("336.9…" reads as a number, not the one computed): a numeric
            # column keeps the width of its widest figure; the text columns give way (below)
            t.add_column(col.header, justify=col.justify, no_wrap=col.no_wrap and not num)
        fit = next((i for i, c in enumerate(block.columns) if c.fit), None)
        room = 0
        if fit is not None:
            room = max(12, width - table_width(t, [[*row[:fit], "", *row[fit + 1:]] for row in block.rows]))
        fitted = cut_name if fit is not None and block.columns[fit].cut else wrap_name
        rows = [[fitted(cell, room) if i == fit else cell for i, cell in enumerate(row)] for row in block.rows]
        _numbers_first(t, rows, numeric, width)
        for row in rows:
            t.add_row(*row)
        out.append(t)
    return out


def render_summary(summary: Any, *, max_ranges: int = 12, width: int = 100, max_collectives: int = 10,
                   clock_moved_ns: Mapping[int, int] | None = None) -> list[Any]:
    """Rich renderables for a summary (a :class:`tracer.analysis.summary.Summary`, or its JSON as a dict), for a
    terminal ``width`` characters wide: each registered analysis's text blocks, in text order.
    ``clock_moved_ns``: rank → ns its clock was moved by before the summary was made (``--clock-fix``; empty: it
    moved none; None: not asked for)."""
    from tracer.analysis.summary import Summary  # (pandas: not before a job's scan workers start, see the top)

    if not isinstance(summary, Summary):
        summary = Summary.from_dict(summary)
    options = TextOptions(max_ranges=max_ranges, max_collectives=max_collectives,
                          clock_moved_ns=None if clock_moved_ns is None else tuple(sorted(clock_moved_ns.items())))
    # (text_analyses() holds only analyses with blocks; the test says so to mypy)
    blocks = [b for a in text_analyses() if a.blocks is not None
              for b in a.blocks(summary.part(a.name), summary, options)]
    return render_blocks(blocks, width=width)


def _progress(console: Any, path: Path) -> Any:
    """A line on stderr while a big trace is parsed, cleared when it is done (nothing for small ones or when not
    on a terminal). Drawn once, not animated: a spinner's refresh thread would keep the parse from scanning the
    trace's parts on forked processes (tracer.parsers.kineto_fork forks only a process of one thread)."""
    try:
        size = path.stat().st_size if path.is_file() else 0
    except OSError:
        size = 0
    if size < PROGRESS_MIN_BYTES or not console.is_terminal:
        return contextlib.nullcontext()
    line = Spinner("dots", text=f"Parsing {path.name} ({size / 1e6:,.0f} MB) …")
    return Live(line, console=console, transient=True, auto_refresh=False)


PROGRESS_MIN_BYTES = 20_000_000


@app.command(cls=TracerCommand)
def summary(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATH",
            help="Trace files (Kineto JSON[.gz], nsys .sqlite/.nsys-rep, Parquet), run directories, or folders "
            "of them (each run or trace found is summarised).",
        ),
    ],
    json: Annotated[bool, typer.Option("--json", help="Print JSON (one object per PATH, one per line).")] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse afresh; don't read or write the Parquet cache beside big traces.")
    ] = False,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Fail (exit 2) on a trace with events that could not be used, instead of "
                     "summarising the rest and naming them on stderr."),
    ] = False,
    job: Annotated[
        bool,
        typer.Option("--job", help="Read every trace found as the ranks of ONE job (torch.profiler's per-rank "
                     "files, HTA's rank-N layout): one timeline, GPUs keyed rank/device. Rank from the trace's "
                     "distributedInfo, else the file name, else the order; clocks put on Unix time."),
    ] = False,
    collectives: Annotated[
        int, typer.Option("--collectives", metavar="N", help="Collectives listed in the text, by start skew.")
    ] = 10,
    all_collectives: Annotated[
        bool, typer.Option("--all-collectives", help="List every collective matched across ranks in the text.")
    ] = False,
    clock_fix: Annotated[
        bool,
        typer.Option("--clock-fix", help="With --job: move each rank's clock by the smallest shift that makes every "
                     "matched collective consistent (none ends on one rank before it starts on another); said on "
                     "stderr. Without it the ranks stay on the clocks their traces were written with."),
    ] = False,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", metavar="ADDRESS",
                     help="With --job: parse the ranks on this running Dask cluster (tcp://HOST:PORT; its workers "
                     "must see the traces at the same paths), or a local scheduler: processes (the default: one "
                     "process per rank, up to the cores), threads, sync. Default: $TRACER_DASK_SCHEDULER."),
    ] = None,
    skip_bad_ranks: Annotated[
        bool,
        typer.Option("--skip-bad-ranks", help="With --job: open the job without a rank whose trace cannot be read "
                     "(and say which), instead of failing on it."),
    ] = False,
    ranks: Annotated[
        str | None,
        typer.Option("--ranks", metavar="LIST", help="With --job: only these ranks (0,2,4-7); a stored job reads "
                     "only their files."),
    ] = None,
) -> None:
    """Compute, copy and their overlap per GPU; busy time per stream; GPU time per NVTX range.

    compute = union of a GPU's kernel intervals, copy = union of its memcpy intervals, overlap = their
    intersection (copy time hidden behind compute), busy = union of all its GPU work. Times in ms (ns in --json).
    """
    console = Console()
    status_console = Console(stderr=True)
    failed: list[TracerError] = []

    job_only = {"--scheduler": scheduler is not None, "--skip-bad-ranks": skip_bad_ranks,
                "--ranks": ranks is not None, "--clock-fix": clock_fix}
    given = next((option for option, used in job_only.items() if used), None)
    if not job and given is not None:
        raise UsageError(given, "applies to a job's traces: add --job")
    if collectives < 0:
        raise UsageError("--collectives", f"{collectives} is not a count; give 0 or more")
    found = (job_traces if job else expand)(paths, on_skip=say_skipped_file)
    if job:
        from tracer.job.load import summarize_job  # (the job's reader: --job only, see the top)

        traces = list(found)
        found = [job_label(traces)]
        wanted = parse_ranks(ranks) if ranks is not None else None

        def read(_path: Path) -> tuple[TraceMeta, Callable[[], Any]]:  # (one job: every path at once)
            how: dict[str, Any] = dict(scheduler=scheduler, cache=not no_cache, ranks=wanted,
                                       skip_bad_ranks=skip_bad_ranks, on_rank=job_progress(traces, status_console),
                                       on_cache_write=say_job_cached, on_skip=say_skipped)
            # each rank analysed where it is read; only the results come here (tracer.analysis.ranked)
            result, meta = summarize_job(traces, **how)
            if not result.multi_rank:  # (said, so that --job is not taken for more than the plain summary)
                print(f"tracer: note: --job read one rank ({len(traces)} trace{'s' if len(traces) > 1 else ''}): "
                      "this is that rank's summary", file=sys.stderr)
            if len(paths) == 1 and is_run_dir(paths[0]):  # (a recorded job's run: its meta.json, as without --job)
                meta.extra["run"] = load_meta_json(paths[0])
            if clock_fix:
                fixes = {k.rank: k.clock_fix_ns for k in result.part("collectives").ranks}
                say_fixes(fixes)
                moved = {r: f for r, f in fixes.items() if f}
                if moved:  # (a rank moves: each rank analysed again where it is read, moved first; a reload)
                    how.update(on_rank=None, on_cache_write=None, on_skip=None)  # (said once already)
                    result, meta = summarize_job(traces, **how, shifts=moved)
            return meta, lambda: result
    else:
        from tracer.analysis.summary import analyze  # (pandas: not before a job's scan workers start, see the top)

        def read(_path: Path) -> tuple[TraceMeta, Callable[[], Any]]:
            timeline = load_trace(_path, cache=not no_cache, on_cache_write=say_cached)
            return timeline.meta, lambda: analyze(timeline)

    for path in found:
        try:
            with _progress(status_console, path) if not job else contextlib.nullcontext():
                meta, summarise = read(path)
            # Events the parser could not use (ts not a number, GPU work without a device ...) are left out of
            # every figure: say which and how many, or with --strict refuse the trace.
            skipped = meta.extra.get("skipped") or {}
            ignored = meta.extra.get("ignored") or {}
            left_out = left_out_text(skipped, ignored)
            if strict and skipped:
                raise TraceFormatError(path, f"{left_out} (--strict)")
            try:
                result = summarise()
                result.to_dict()  # every figure now, so that one the analysis refuses is this file's error
            except TracerError as exc:  # a figure the analysis refused (a total beyond int64) names no file
                if exc.subject:
                    raise
                raise type(exc)(path, exc.problem) from None
        except TracerError as exc:
            if len(found) == 1:
                raise
            # One bad file in a batch does not stop the others; report it and go on.
            print(f"tracer: error: {exc}", file=sys.stderr)
            failed.append(exc)
            continue
        if left_out:
            print(f"tracer: warning: {path}: {left_out}", file=sys.stderr)
        for failure in run_failures(meta.extra):  # (a recorded job whose ranks did not all end well)
            print(f"tracer: warning: {path}: {failure}", file=sys.stderr)
        moved_ns = {int(r): int(ns) for r, ns in (meta.extra.get("clock_fix_ns") or {}).items()}
        notes = meta.extra.get("notes") or []
        for note in notes:  # what the figures mean for this file (CUDA graphs traced whole ...)
            print(f"tracer: note: {path}: {note}", file=sys.stderr)
        if not result.events and not skipped:
            print(f"tracer: note: {path}: the trace holds no events (a profiler that caught nothing writes this)",
                  file=sys.stderr)
        if json:
            doc = result.to_dict()
            skipped_ranks = meta.extra.get("skipped_ranks") or {}
            if skipped or ignored or notes or skipped_ranks or moved_ns:
                doc["meta"] = {"skipped": skipped, "ignored": ignored, "notes": notes}
                if skipped_ranks:  # (--skip-bad-ranks: the files left out of the job, and why)
                    doc["meta"]["skipped_ranks"] = skipped_ranks
                if moved_ns:  # (--clock-fix: what each rank was moved by; collective_ranks' fix is what is left)
                    doc["meta"]["clock_fix_ns"] = {str(r): ns for r, ns in moved_ns.items()}
            sys.stdout.buffer.write(orjson.dumps(doc) + b"\n")
            sys.stdout.flush()
        else:
            shown = -1 if all_collectives else max(collectives, 0)
            for renderable in render_summary(result, width=console.width, max_collectives=shown,
                                             clock_moved_ns=moved_ns if clock_fix else None):
                console.print(renderable, crop=False)  # (a table wider than the terminal: nothing cut)
            console.print()
    if failed:
        raise typer.Exit(2)
