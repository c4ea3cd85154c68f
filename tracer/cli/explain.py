"""`tracer explain`: the critical path of a run, a window or a range, and what its time went to."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from tracer.cli import TracerCommand, app
from tracer.errors import TracerError


def parse_window(text: str, origin_ns: int) -> tuple[int | None, int | None]:
    """``START:END`` in ms from ``origin_ns`` (the trace's first interval) → trace-clock ns; a side left empty
    is open. Raises :class:`TracerError` for anything else."""
    parts = text.split(":")
    if len(parts) != 2:
        raise TracerError("--window", f"{text!r} is not START:END (ms from the trace's start, e.g. 10:25.5 or 10:)")
    out: list[int | None] = []
    for p in parts:
        p = p.strip()
        if not p:
            out.append(None)
            continue
        try:
            ms = float(p)
        except ValueError:
            raise TracerError("--window", f"{p!r} is not a number of ms (START:END, e.g. 10:25.5)") from None
        if not (ms == ms and abs(ms) < 1e12):  # (NaN, inf)
            raise TracerError("--window", f"{p!r} is not a number of ms (START:END, e.g. 10:25.5)")
        out.append(origin_ns + round(ms * 1e6))
    lo, hi = out
    if lo is not None and hi is not None and hi <= lo:
        raise TracerError("--window", f"{text!r} ends before it starts")
    return lo, hi


def render_path(path: Any, *, top: int, width: int = 100) -> list[Any]:
    """Rich renderables for a :class:`tracer.explain.CriticalPath`: the breakdown and its top intervals."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from tracer.cli.summary import wrap_name

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


@app.command(cls=TracerCommand)
def explain(
    path: Annotated[
        Path,
        typer.Argument(metavar="PATH", help="A trace file (Kineto JSON[.gz], nsys .sqlite/.nsys-rep, Parquet) or a "
                       "run directory."),
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
        int, typer.Option("--instance", metavar="I", help="Which instance of --range, in time order (0: the first).")
    ] = 0,
    top: Annotated[int, typer.Option("--top", metavar="N", help="Intervals listed, by their time on the path.")] = 10,
    what_if: Annotated[
        list[str] | None,
        typer.Option("--what-if", metavar="NAME[=VALUE]", help="Replay the window under a changed plan and print its "
                     "predicted time beside the measured one: side-stream, pinned[=GBPS], no-sync[=NAME], "
                     "streams=N, warm (several combine). docs/explain.md."),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse afresh; don't read or write the Parquet cache beside big traces.")
    ] = False,
) -> None:
    """The critical path: the chain of dependent intervals that set the end-to-end time, each piece labelled
    (gpu compute, communication, copy, launch overhead, host work, waiting on a sync, waiting on another stream,
    gpu gap, host gap). Times in ms (ns in --json). docs/explain.md says how the graph is read from the trace."""
    from rich.console import Console

    from tracer.cli._report import say_cached, warn_left_out
    from tracer.explain import Window, build_graph, critical_path, window_of_range
    from tracer.parsers import load_trace

    if window is not None and range_name is not None:
        raise TracerError("explain", "give --window or --range, not both")
    timeline = load_trace(path, cache=not no_cache, on_cache_write=say_cached)
    warn_left_out(path, timeline.meta.extra)
    ev = timeline.events
    if not ev["kind"].isin(["kernel", "memcpy", "memset", "cpu_op", "runtime", "driver"]).any():
        raise TracerError(path, "no GPU work and no host operators or CUDA calls to build a dependency graph from: "
                          "record with torch.profiler (CPU and CUDA activities) or nsys --trace=cuda")
    graph = build_graph(timeline)
    is_gpu = graph.nodes["kind"].isin(["kernel", "memcpy", "memset"]).to_numpy()
    if is_gpu.any() and not (graph.edges["type"] == "launch").any():
        raise TracerError(path, "no GPU work is tied to the host call that launched it (the trace has no "
                          "correlation ids), so no path can cross from the host to the GPU: record with "
                          "torch.profiler (CPU and CUDA activities) or nsys --trace=cuda")
    if range_name is not None:
        chosen = window_of_range(timeline, range_name, instance)
    elif window is not None:
        lo, hi = parse_window(window, int(ev["start_ns"].min()))
        chosen = Window(lo, hi, f"the window {window} ms")
    else:
        chosen = Window()
    try:
        result = critical_path(graph, chosen)
    except TracerError as exc:
        raise TracerError(path, exc.problem) from None
    for note in graph.notes:
        print(f"tracer: note: {path}: {note}", file=sys.stderr)
    replayed = None
    if what_if:
        from tracer.cli import _whatif

        try:
            replayed = _whatif.what_if(path, timeline, graph, chosen, what_if)
        except TracerError as exc:
            raise TracerError(path if exc.subject == "replay" else exc.subject, exc.problem) from None
    if json:
        data = result.to_dict(top=max(top, 0))
        if replayed is not None:
            data["what_if"] = replayed
        sys.stdout.buffer.write(orjson.dumps(data) + b"\n")
        sys.stdout.flush()
        return
    console = Console()
    for renderable in render_path(result, top=max(top, 0), width=console.width):
        console.print(renderable)
    if replayed is not None:
        for line in _whatif.render(replayed):
            console.print(line, highlight=False, markup=False)
