"""`tracer lines`: a line profiler's table of a run recorded with Python stacks: each line of your code with the GPU
time of the work it launched, its share of the run's GPU time, its time on the critical path, the time its calls
waited for the GPU and its copies' time beside no compute (issue 37)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from tracer.analysis.source import SourceRule
from tracer.analysis.source_code import SourceFiles, short_names
from tracer.cli import TracerCommand, app
from tracer.cli._job import parse_ranks
from tracer.cli._read import read_timeline
from tracer.cli._report import warn_left_out
from tracer.cli._tables import cut_name
from tracer.errors import TracerError
from tracer.explain import explain_lines
from tracer.explain.lines import read_sources, source_folders

# tracer.explain (numpy, pandas) and the parsers are imported inside the command: every `tracer` command imports
# this module (as tracer/cli/explain.py says).


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def render_lines(report: Any, *, top: int, width: int = 120) -> list[Any]:
    """Rich renderables for a :class:`tracer.explain.lines.LinesReport`: per rank, the ``top`` lines by GPU time,
    then what no line of yours launched; nothing where there are no lines (the command says why on stderr)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    sources = report.sources
    if not sources.has_lines:
        return []
    table = report.table
    out: list[Any] = []
    ranks = sorted(set(table["rank"].tolist())) or [0]
    multi = len(report.gpu_ns) > 1 or len(ranks) > 1
    unread = sources.sites.unread
    if unread:
        out.append(Text(f"not found, so lines are each function's first: {', '.join(unread[:5])}"
                        f"{' …' if len(unread) > 5 else ''} (--source-root DIR says where)", style="yellow"))
    for rank in ranks:
        rows = table[table["rank"] == rank]
        mine = rows[rows["file"] != ""]
        rest = rows[rows["file"] == ""]
        gpu = report.gpu_ns.get(rank, 0)
        head = f"rank {rank}: " if multi else ""
        if gpu:
            out.append(Text(f"{head}{_ms(int(mine['gpu_ns'].sum()))} ms of the {_ms(gpu)} ms of GPU work were "
                            f"launched from {len(mine):,} lines of your code; critical path {_ms(report.path_ns)} ms",
                            style="bold"))
        else:
            out.append(Text(f"{head}no GPU work: {len(mine):,} lines of your code by their time on the critical path "
                            f"({_ms(report.path_ns)} ms)", style="bold"))
        cols = [("line", False), *((c, True) for c in (("GPU ms", "share") if gpu else ())),
                ("path ms", True), *((c, True) for c in (("sync ms", "copy ms") if gpu else ())), ("code", False)]
        shown = mine.head(max(top, 0))
        short = short_names(shown["file"].tolist())
        body = []
        for r in shown.itertuples():
            nums = [_ms(r.gpu_ns), f"{100 * r.gpu_share:.1f}%"] if gpu else []
            nums.append(_ms(r.path_ns))
            nums += [_ms(r.sync_ns), _ms(r.exposed_copy_ns)] if gpu else []
            body.append([cut_name(f"{short[r.file]}:{r.line}" + ("" if r.exact else "*"), 28), *nums,
                         r.text or f"{r.function}()"])
        # the figures and the line keep their width; the code takes what is left, cut with an ellipsis
        fixed = [max([len(c), 9 if i == 0 and len(rest) else 0, *(len(b[i]) for b in body)])
                 for i, (c, _) in enumerate(cols[:-1])]
        room = max(12, width - sum(fixed) - 3 * len(cols) - 2)
        t = Table(box=box.SIMPLE_HEAD)
        for i, (col, right) in enumerate(cols):
            t.add_column(col, justify="right" if right else "left", no_wrap=True,
                         min_width=fixed[i] if i < len(fixed) else None)
        for b in body:
            t.add_row(*b[:-1], cut_name(b[-1], room))
        for r in rest.itertuples():
            t.add_row("(no line)", _ms(r.gpu_ns), f"{100 * r.gpu_share:.1f}%", "", "", _ms(r.exposed_copy_ns),
                      cut_name("launched by no traced call under a line of yours", room), style="dim")
        out.append(t)
        if len(mine) > top:
            out.append(Text(f"({len(mine) - top:,} more lines: --top N, or --json)", style="dim"))
    if len(table):
        out.append(Text("path: time on the critical path" + ("; sync: its calls waiting for the GPU; copy: its copies' "
                        "time beside no compute (exposed)" if any(report.gpu_ns.values()) else "") +
                        "; --json adds kernels, copies, communication and the callers", style="dim"))
    if not table["exact"].all():
        out.append(Text("*: the function's first line (the call's line could not be read from its source)",
                        style="dim"))
    return out


@app.command(cls=TracerCommand)
def lines(
    paths: Annotated[
        list[Path],
        typer.Argument(metavar="PATH", help="A trace recorded with Python stacks (torch.profiler with_stack=True; "
                       "`tracer record --stacks`) or its run directory; or a job: several traces, or a folder of "
                       "them, one per rank."),
    ],
    json: Annotated[bool, typer.Option("--json", help="Print the lines as JSON (one object).")] = False,
    top: Annotated[int, typer.Option("--top", metavar="N", help="Lines listed per rank, by GPU time (--json: all).")]
    = 20,
    source_root: Annotated[
        list[str] | None,
        typer.Option("--source-root", metavar="DIR|GLOB", help="Files under DIR, or matching GLOB ('mylib/*'), count "
                     "as your code, and DIR is searched for your files (after the trace's folder and the run's "
                     "working directory). Repeatable."),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse afresh; don't read or write the Parquet cache beside big traces.")
    ] = False,
    clock_fix: Annotated[
        bool, typer.Option("--clock-fix", help="A job: move each rank's clock by the collectives' fix first (as "
                           "`tracer explain --clock-fix`).")
    ] = False,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", metavar="ADDRESS", help="A job: parse its ranks on this Dask scheduler."),
    ] = None,
    skip_bad_ranks: Annotated[
        bool, typer.Option("--skip-bad-ranks", help="A job: leave out a rank whose trace cannot be read (and say "
                           "which).")
    ] = False,
    ranks: Annotated[
        str | None, typer.Option("--ranks", metavar="LIST", help="A job: only these ranks (0,2,4-7).")
    ] = None,
) -> None:
    """GPU time per line of your code, like a line profiler's table: for each line, the GPU time of the kernels,
    copies and collectives it launched, its share of the run's GPU time, its time on the critical path, the time
    its calls waited for the GPU (syncs) and its copies' time beside no compute; per rank for a job. Needs Python
    stacks (torch.profiler with_stack=True). Times in ms (ns in --json). docs/lines.md."""
    if top < 0:
        raise TracerError("--top", f"{top} is not a count; give 0 or more")
    job_options = {"scheduler": scheduler, "skip_bad_ranks": skip_bad_ranks,
                   "ranks": parse_ranks(ranks) if ranks is not None else None}
    path, timeline = read_timeline(paths, no_cache=no_cache, clock_fix=clock_fix, job=job_options)
    warn_left_out(path, timeline.meta.extra)
    roots = tuple(source_root or ())
    sources = read_sources(timeline, SourceRule(roots), SourceFiles(source_folders(timeline, Path(paths[0]), roots)))
    report = explain_lines(timeline, sources, name=str(path))
    if not sources.has_lines:
        print(f"tracer: note: {path}: {sources.note}", file=sys.stderr)
    if json:
        sys.stdout.buffer.write(orjson.dumps(report.to_dict()) + b"\n")
        sys.stdout.flush()
        return
    console = Console()
    for renderable in render_lines(report, top=top, width=console.width):
        console.print(renderable, highlight=False)
