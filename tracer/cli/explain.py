"""`tracer explain`: the critical path of a run, a window or a range, what its time went to, and the findings:
why copies and GPU idle gaps did not overlap compute, ranked by what they cost."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.text import Text

from tracer.analysis.source import SourceRule
from tracer.analysis.source_code import SourceFiles, short_names
from tracer.cli import TracerCommand, app
from tracer.cli._job import parse_ranks
from tracer.cli._read import read_large_job_window, read_timeline
from tracer.cli._report import warn_left_out
from tracer.cli._tables import wrap_name
from tracer.errors import TracerError
from tracer.explain import build_graph
from tracer.explain import explain as explain_timeline
from tracer.explain.findings import findings, group_findings
from tracer.explain.lines import line_summary, read_sources, source_folders
from tracer.explain.occupancy import launch_demand
from tracer.explain.replay import parse_plan
from tracer.parsers import load_trace
from tracer.parsers.demand import read_launch_figures, read_launches


def render_path(path: Any, *, top: int, width: int = 100) -> list[Any]:
    """Rich renderables for a :class:`tracer.explain.CriticalPath`: the breakdown and its top intervals."""
    from rich import box
    from rich.table import Table

    out: list[Any] = [Text(f"Critical path of {path.window.what}: {path.length_ns / 1e6:,.3f} ms "
                           f"({len(path.pieces):,} pieces)")]
    t = Table(box=box.SIMPLE_HEAD, title="Where the path's time went")
    t.add_column("label")
    t.add_column("ms", justify="right")
    t.add_column("share", justify="right")
    for r in path.breakdown().itertuples():
        t.add_row(str(r.label), f"{r.ns / 1e6:,.3f}", f"{100 * r.share:.1f}%")
    out.append(t)
    tops = path.top(top)
    if len(tops):
        t = Table(box=box.SIMPLE_HEAD, title=f"Top {len(tops)} intervals on the path")
        t.add_column("ms", justify="right")
        t.add_column("label")
        t.add_column("kind")
        t.add_column("name")
        room = max(20, width - 48)
        for r in tops.itertuples():
            t.add_row(f"{r.ns / 1e6:,.3f}", str(r.label), str(r.kind), wrap_name(str(r.name), room))
        out.append(t)
    names = path.by_name(top)
    if len(names):
        t = Table(box=box.SIMPLE_HEAD, title=f"Top {len(names)} names on the path (summed over their intervals)")
        t.add_column("ms", justify="right")
        t.add_column("count", justify="right")
        t.add_column("label")
        t.add_column("name")
        room = max(20, width - 46)
        for r in names.itertuples():
            t.add_row(f"{r.ns / 1e6:,.3f}", f"{r.count:,}", str(r.label), wrap_name(str(r.name), room))
        out.append(t)
    return out


def render_findings(found: Any, *, top: int, min_gap_ns: int, gains: dict[str, Any] | None = None,
                    ranks: bool = False, host_only: bool = False) -> list[Any]:
    """Rich renderables for the findings (:func:`tracer.explain.findings.findings`): one row per kind (with the
    replayed time of its fix, from ``gains``, where the replay models it), then the ``top`` costliest findings
    with their evidence (and their rank: ``ranks``, for a job)."""
    if found.empty:
        if host_only:  # (no GPU, no copy: nothing to say of either)
            return [Text("Findings: none (this trace has host work only; the findings are about work on GPUs and a "
                         "job's collectives).")]
        return [Text(f"Findings: none (no exposed copy, GPU idle gap over {min_gap_ns / 1e3:g} µs or waiting kernel "
                     "with a reason in the trace).")]
    groups = group_findings(found)
    what = "why work waited" if host_only else "why work did not overlap"
    out: list[Any] = [Text(f"Findings: {what}, by kind (ranked by time on the critical path)", style="bold")]
    for r in groups.itertuples():
        out.append(Text.assemble(f"  {r.path_ns / 1e6:>10,.3f} ms on the path ({r.cost_ns / 1e6:,.3f} ms in all)  "
                                 f"{r.count:,} × ", (str(r.reason), "bold")))
        out.append(Text(f"      fix: {r.fix}", style="dim"))
        g = (gains or {}).get(str(r.kind))
        what = "predicted with more room (" if r.kind == "gpu_full" else "predicted with the fix ("
        if g is not None and "not_priced" in g:
            out.append(Text(f"      not priced: {g['not_priced']}", style="dim"))
        elif g is not None and "error" in g:
            out.append(Text(f"      {what}{g['plan']}): not replayed: {g['error']}", style="dim"))
        elif g is not None and g["measured_ns"]:
            where = f" of {g['window']}" if "window" in g and r.kind == "one_stream" else ""
            out.append(Text(f"      {what}{g['plan']}): {g['predicted_ns'] / 1e6:,.3f} ms instead of "
                            f"{g['measured_ns'] / 1e6:,.3f} ms{where} ({-g['gain_ns'] / 1e6:+,.3f} ms; replayed)",
                            style="dim"))
            for note in g.get("notes", []):
                out.append(Text(f"        {note}", style="dim"))
    shown = found.head(max(top, 0))
    if len(shown):
        out.append(Text(f"Top {len(shown)} of {len(found):,} findings (`--json` lists all, with their nodes and rows)",
                        style="bold"))
        for i, r in enumerate(shown.itertuples(), 1):
            where = f"GPU {r.device} stream {r.stream}" if r.device >= 0 else "host"
            if ranks:
                where = f"rank {r.rank} {where}"
            out.append(Text(f"{i:>3}. {r.path_ns / 1e6:,.3f} ms on the path ({r.cost_ns / 1e6:,.3f} ms in all) · "
                            f"{r.reason} · {where}: {r.evidence}"))
    return out


def render_by_line(explained: Any, *, top: int) -> list[Any]:
    """Rich renderables for the findings grouped by the user's source line (:meth:`Explanation.by_line`): one
    line each, ``top`` of them, with the chain of callers under it; or the one note that says why there are none
    (no Python stacks, no frame of the user's)."""
    sources = explained.sources
    if explained.findings.empty or sources is None:
        return []
    if not sources.has_lines:
        return [Text(f"Findings by source line: none ({sources.note}).", style="dim")]
    by = explained.by_line()
    groups = explained.groups()
    out: list[Any] = [Text("Findings by source line (ranked by time on the critical path)", style="bold")]
    shown = by.head(max(top, 0))
    short = short_names([*shown["file"], *(c["file"] for chain in shown["chain"] for c in chain)])
    for r in shown.itertuples():
        out.append(Text(f"  {line_summary(r._replace(file=short.get(r.file, r.file)), explained.gains, groups)}"))
        if r.chain:
            callers = " ← ".join(f"{c['function']}() {short.get(c['file'], c['file'])}:{c['line']}" for c in r.chain)
            out.append(Text(f"      in {r.function}() ← {callers}", style="dim"))
    if len(by) > top:
        out.append(Text(f"  ({len(by) - top:,} more line(s): --top N, or --json's findings.by_line)", style="dim"))
    return out


def findings_lines(path: Path, n: int = 3) -> list[str]:
    """One line per kind of finding, the ``n`` costliest, for ``tracer record`` to print after a run; none where
    the run's trace cannot give a graph."""
    try:
        timeline = load_trace(path, cache=False)  # (writes nothing into the run directory)
        graph = build_graph(timeline)
        if not (graph.edges["type"] == "launch").any():
            return []  # (no GPU work tied to its launch: a CPU run)
        groups = group_findings(findings(graph, demand=launch_demand(read_launch_figures(path)))).head(n)
    except Exception as exc:  # noqa: BLE001 - the run is written: a summary after it must not fail the command
        print(f"tracer: note: {path}: no findings ({type(exc).__name__}: {exc}); try `tracer explain {path}`",
              file=sys.stderr)
        return []
    return [f"finding: {r.reason} ({r.count:,}×): {r.path_ns / 1e6:,.1f} ms on the critical path, "
            f"{r.cost_ns / 1e6:,.1f} ms in all; fix: {r.fix}" for r in groups.itertuples()]


def clock_text(timeline: Any, clock_fix: bool = False) -> str:
    """What ``--json``'s ``job`` says of the clocks a job's graph was built on: moved by ``--clock-fix`` (by how
    much, each rank), or each rank's as written."""
    fixed = timeline.meta.extra.get("clock_fix_ns") or {}
    if fixed:
        return "moved by the collectives' fix (--clock-fix): " + ", ".join(
            f"rank {r} {int(ns) / 1e3:+,.1f} µs" for r, ns in fixed.items())
    if clock_fix:
        return "each rank's as its trace was written (Unix time): --clock-fix moved none (stderr says why)"
    return "each rank's as its trace was written (Unix time), not corrected (--clock-fix corrects them)"


@app.command(cls=TracerCommand)
def explain(
    paths: Annotated[
        list[Path],
        typer.Argument(metavar="PATH", help="A trace file (Kineto JSON[.gz], nsys .sqlite/.nsys-rep, Parquet) or a "
                       "run directory; or a job: several traces, or a folder of them, one per rank (read as "
                       "`tracer summary --job` does)."),
    ],
    json: Annotated[bool, typer.Option("--json", help="Print the path as JSON (one object).")] = False,
    window: Annotated[
        str | None,
        typer.Option("--window", metavar="START:END", help="Only work issued in this window: ms from the trace's "
                     "first interval; a side left empty is open (10:, :25.5)."),
    ] = None,
    range_name: Annotated[
        str | None,
        typer.Option("--range", metavar="NAME", help="Only work issued during a range or operator (ProfilerStep#3; "
                     "a name that matches none exactly matches every name that contains it)."),
    ] = None,
    instance: Annotated[
        int | None, typer.Option("--instance", metavar="I", help="Which instance of --range, in time order (0: the "
                                 "first, -1: the last).")
    ] = None,
    top: Annotated[int, typer.Option("--top", metavar="N", help="Intervals and findings listed, by their time on the "
                                     "path (--json: intervals; it has every finding).")] = 10,
    min_gap_us: Annotated[
        float, typer.Option("--min-gap-us", metavar="US", help="Shortest GPU idle gap, or wait of a ready kernel, "
                            "that is a finding (µs).")
    ] = 50.0,
    what_if: Annotated[
        list[str] | None,
        typer.Option("--what-if", metavar="NAME[=VALUE]", help="Replay the window under a changed plan and print its "
                     "predicted time beside the measured one: side-stream, pinned[=GBPS], no-sync[=NAME], "
                     "streams=N, warm, launch[=US], graphs[=US], concurrent, no-wait, balance (several combine: "
                     "repeat the option or join with +, e.g. pinned+side-stream). "
                     "docs/explain.md."),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse afresh; don't read or write the Parquet cache beside big traces.")
    ] = False,
    clock_fix: Annotated[
        bool,
        typer.Option("--clock-fix", help="A job: move each rank's clock by the smallest shift that makes every "
                     "matched collective consistent (as `tracer summary --job --clock-fix`); without it the ranks "
                     "stay on the clocks their traces were written with."),
    ] = False,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", metavar="ADDRESS", help="A job: parse its ranks on this running Dask cluster, or "
                     "a local scheduler, as `tracer summary --job --scheduler`. Default: $TRACER_DASK_SCHEDULER."),
    ] = None,
    skip_bad_ranks: Annotated[
        bool,
        typer.Option("--skip-bad-ranks", help="A job: open it without a rank whose trace cannot be read (and say "
                     "which), instead of failing on it."),
    ] = False,
    ranks: Annotated[
        str | None,
        typer.Option("--ranks", metavar="LIST", help="A job: only these ranks (0,2,4-7); the path crosses only "
                     "between them."),
    ] = None,
    source_root: Annotated[
        list[str] | None,
        typer.Option("--source-root", metavar="DIR|GLOB", help="With Python stacks (torch.profiler with_stack=True): "
                     "files under DIR, or matching GLOB ('mylib/*'), count as your code, and DIR is searched for "
                     "your files (after the trace's folder and the run's working directory). Repeatable."),
    ] = None,
) -> None:
    """The critical path: the chain of dependent intervals that set the end-to-end time, each piece labelled
    (gpu compute, communication, copy, launch overhead, host work, waiting on a sync, waiting on another stream,
    gpu gap, host gap); then the findings: every copy that did not overlap compute and every GPU idle gap over
    --min-gap-us, with the reason read from the graph, what it cost and the fix, ranked by time on the path.
    Times in ms (ns in --json). A job's ranks are joined by their collectives: none completes on a rank before
    every rank arrived, so the path crosses to the straggler, and a collective that waited for one is a finding.
    docs/explain.md says how the graph is read from the trace."""
    if window is not None and range_name is not None:
        raise TracerError("explain", "give --window or --range, not both")
    if instance is not None and range_name is None:
        raise TracerError("--instance", "picks one instance of --range: give --range NAME too")
    if not (0 <= min_gap_us < 1e12):
        raise TracerError("--min-gap-us", f"{min_gap_us:g} is not a duration in µs (0 or more, e.g. 50)")
    if top < 0:
        raise TracerError("--top", f"{top} is not a count; give 0 or more")
    if what_if:
        parse_plan(what_if)  # a plan that is not one: refused before the trace is read
    job_options = {"scheduler": scheduler, "skip_bad_ranks": skip_bad_ranks,
                   "ranks": parse_ranks(ranks) if ranks is not None else None}
    near = read_large_job_window(paths, window=window, no_cache=no_cache, clock_fix=clock_fix, job=job_options)
    origin = None
    if near is not None:  # (a job too large to read whole: its stored rows near the window)
        path, timeline, origin = near
    else:
        path, timeline = read_timeline(paths, no_cache=no_cache, clock_fix=clock_fix, job=job_options)
    warn_left_out(path, timeline.meta.extra)

    def say_note(note: str) -> None:
        print(f"tracer: note: {path}: {note}", file=sys.stderr)

    if near is not None:
        launches: Any = ()
        say_note("read from its stored dataset near the window; the kernels' launch figures (in its traces, not "
                 "the dataset) are not read, so a kernel that filled its GPU is not told from kernels that merely "
                 "ran one at a time")
    else:
        launches = read_launches(path, timeline.meta.extra)

    roots = tuple(source_root or ())
    sources = read_sources(timeline, SourceRule(roots),
                           SourceFiles(source_folders(timeline, Path(paths[0]), roots)))
    explained = explain_timeline(timeline, window=window, range_name=range_name, instance=instance,
                                 min_gap_ns=round(min_gap_us * 1e3), what_if=what_if,
                                 launches=launches, name=str(path), on_note=say_note, sources=sources,
                                 origin_ns=origin)
    job = None if explained.job is None else {**explained.job, "clock": clock_text(timeline, clock_fix)}
    if json:
        out = explained.to_dict(top=max(top, 0))
        if job is not None:
            out["job"] = job
        sys.stdout.buffer.write(orjson.dumps(out) + b"\n")
        sys.stdout.flush()
        return
    console = Console()
    for renderable in render_path(explained.path, top=max(top, 0), width=console.width):
        console.print(renderable)
    if job is not None:
        console.print(f"A job of {len(job['ranks'])} ranks, joined by {job['collective_edges']:,} collective edges "
                      f"({job['instances']:,} collectives run by two ranks or more); clocks: {job['clock']}.",
                      highlight=False)
    for renderable in render_findings(explained.findings, top=max(top, 0), min_gap_ns=explained.min_gap_ns,
                                      gains=explained.gains, ranks=timeline.events["rank"].nunique() > 1,
                                      host_only=explained.host_only):
        console.print(renderable)
    for renderable in render_by_line(explained, top=max(top, 0)):
        console.print(renderable, highlight=False)
    if explained.what_if is not None:
        for line in _render_what_if(explained.what_if):
            console.print(line, highlight=False, markup=False)


def _render_what_if(result: dict[str, Any]) -> list[str]:
    """A what-if replay (:meth:`tracer.explain.whatif.Replays.what_if`) as lines for a terminal."""
    m, u, p = result["measured_ns"] / 1e6, result["unchanged_ns"] / 1e6, result["predicted_ns"] / 1e6
    out = [f"What if {result['plan']} ({result['window']}): predicted {p:,.3f} ms, measured {m:,.3f} ms "
           f"({100 * (p - m) / m:+.1f}%; the unchanged plan replays to {u:,.3f} ms)" if m else
           f"What if {result['plan']}: no time measured in the window"]
    out += [f"  {n}" for n in result["notes"]]
    return out
