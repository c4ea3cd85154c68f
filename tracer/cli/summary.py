"""`tracer summary`: compute, copy and overlap per GPU, per stream, per NVTX range."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from tracer.cli import TracerCommand, app
from tracer.errors import TracerError


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "–"


def wrap_name(name: str, width: int) -> str:
    """``name`` in lines of at most ``width`` characters, broken after ``/ - _ . + :`` where it can be."""
    lines: list[str] = []
    while len(name) > width:
        cut = max(name.rfind(sep, 0, width) for sep in "/-_.+: ") + 1
        if cut <= width // 3:  # no separator far enough in: cut at the width
            cut = width
        lines.append(name[:cut].rstrip())
        name = name[cut:].lstrip()
    lines.append(name)
    return "\n".join(lines)


def _table_width(table: Any, rows: list[list[str]]) -> int:
    """The width ``table``'s columns (headers included) and ``rows`` need, borders and padding included."""
    from copy import deepcopy

    from rich.console import Console

    probe = deepcopy(table)
    for row in rows:
        probe.add_row(*row)
    console = Console(width=10_000)
    return console.measure(probe).maximum


def render_summary(summary: dict[str, Any], *, max_ranges: int = 12, width: int = 100) -> list[Any]:
    """Rich renderables for a summary dict (see :func:`tracer.analysis.summary.summarize`), for a terminal
    ``width`` characters wide."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    out: list[Any] = []
    gpu_span = summary.get("gpu_span_ns", 0)
    head = Text.assemble(
        (summary.get("source", ""), "bold"),
        f"  [{summary['format']}]  span {_ms(summary['span_ns'])} ms",
        f", GPU work over {_ms(gpu_span)} ms" if gpu_span else "",
        f", {summary.get('events', 0):,} intervals",
    )
    out.append(head)
    run = summary.get("run")
    if run:
        out.append(Text(f"run: {run.get('scenario', '?')} · variant {run.get('variant', 'all')} · "
                        f"{run.get('mode', '?')} · backend {run.get('backend', '?')}", style="dim"))
    names = summary.get("gpu_names", {})
    threads = summary.get("threads") or []
    if not summary["devices"]:
        where = " (CPU-only run?): per host thread below." if threads else "."
        out.append(Text(f"No GPU work in this trace{where}", style="yellow"))
    else:
        gpus = ", ".join(f"GPU {k} = {v}" for k, v in names.items())
        t = Table(
            box=box.SIMPLE_HEAD,
            title="Per GPU (ms): compute = kernels, copy = memcpys, overlap = copy hidden behind compute",
            caption=gpus or None,
        )
        for col in ("GPU", "kernels", "copies", "compute", "copy", "overlap", "hidden", "busy"):
            t.add_column(col, justify="right", no_wrap=True)
        for dev, d in summary["devices"].items():
            t.add_row(dev, f"{d['kernels']:,}", f"{d['memcpys']:,}", _ms(d["compute_ns"]), _ms(d["copy_ns"]),
                      _ms(d["overlap_ns"]), _pct(d["overlap_ns"], d["copy_ns"]),
                      _ms(d['busy_ns']))
        out.append(t)
        lanes = Table(box=box.SIMPLE_HEAD, title="Per stream")
        for col in ("GPU", "stream", "kernels", "memcpys", "memsets", "busy ms"):
            lanes.add_column(col, justify="right")
        for lane in summary["lanes"]:
            lanes.add_row(str(lane["device"]), str(lane["stream"]), f"{lane['kernels']:,}", f"{lane['memcpys']:,}",
                          f"{lane['memsets']:,}", _ms(lane["busy_ns"]))
        out.append(lanes)
        copies = summary.get("copies") or []
        if copies:
            ct = Table(box=box.SIMPLE_HEAD, title="Copies by direction")
            for col in ("GPU", "direction", "count", "MB", "copy ms", "GB/s"):
                ct.add_column(col, justify="right")
            for c in copies:
                ct.add_row(str(c["device"]), c["copy_kind"], f"{c['count']:,}", f"{c['bytes'] / 1e6:,.1f}",
                           _ms(c["total_ns"]), f"{c['gb_per_s']:.1f}")
            out.append(ct)
        kernels = summary.get("top_kernels") or []
        if kernels:
            kt = Table(box=box.SIMPLE_HEAD, title="Top kernels by total time")
            for col in ("kernel", "count", "total ms", "mean µs"):
                kt.add_column(col, justify="left" if col == "kernel" else "right")
            for k in kernels[:5]:
                name = k["name"] if len(k["name"]) <= 50 else k["name"][:49] + "…"
                kt.add_row(name, f"{k['count']:,}", _ms(k["total_ns"]), f"{k['mean_ns'] / 1e3:,.1f}")
            out.append(kt)
        conc = summary.get("concurrent_gpus_ns", {})
        if len(summary["devices"]) > 1 and conc:
            together = sum(v for k, v in conc.items() if int(k) >= 2)
            out.append(Text(f"Two or more GPUs busy at once for {_ms(together)} ms "
                            f"({_pct(together, sum(conc.values()))} of the time any GPU was busy)."))
    if threads and (not summary["devices"] or len(threads) > 1):
        span = summary["span_ns"]
        th = Table(box=box.SIMPLE_HEAD, title="Host threads: framework ops (nested ops counted once)")
        for col in ("pid", "tid", "thread", "ops", "busy ms", "of span", "CUDA calls"):
            th.add_column(col, justify="left" if col == "thread" else "right")
        for t in threads[:8]:
            th.add_row(str(t["pid"]), str(t["tid"]), t.get("name", "")[:20], f"{t['ops']:,}", _ms(t["busy_ns"]),
                       _pct(t["busy_ns"], span), f"{t['launches']:,}")
        if len(threads) > 8:
            th.caption = f"{len(threads) - 8} more threads in --json"
        out.append(th)
    ranges = summary.get("ranges") or []
    if ranges:
        cols = ("range", "count", "host ms", "GPU busy ms", "kernels", "memcpys")
        rows = [
            [row["name"], f"{row['count']:,}", _ms(row["host_ns"]), _ms(row["gpu_busy_ns"]),
             f"{row['kernels']:,}", f"{row['memcpys']:,}"]
            for row in ranges[:max_ranges]
        ]
        r = Table(box=box.SIMPLE_HEAD, title="NVTX / record_function ranges → the GPU work they launched")
        for col in cols:
            r.add_column(col, justify="left" if col == "range" else "right", no_wrap=True)
        # Range names share long prefixes without spaces ("mlp-data-parallel/forward-backward"): break them
        # after a separator to fit what the numbers leave, instead of letting the table cut them mid-word.
        room = max(12, width - _table_width(r, [["", *row[1:]] for row in rows]))
        for row in rows:
            r.add_row(wrap_name(row[0], room), *row[1:])
        caption = [summary["range_rule"] + "; own-thread figures in --json"] if summary.get("range_rule") else []
        if len(ranges) > max_ranges:
            caption.append(f"{len(ranges) - max_ranges} more ranges in --json")
        r.caption = "\n".join(caption) or None
        out.append(r)
    return out


def _progress(console: Any, path: Path) -> Any:
    """A spinner on stderr while a big trace is parsed (nothing for small ones or when not on a terminal)."""
    import contextlib

    try:
        size = path.stat().st_size if path.is_file() else 0
    except OSError:
        size = 0
    if size < PROGRESS_MIN_BYTES or not console.is_terminal:
        return contextlib.nullcontext()
    return console.status(f"Parsing {path.name} ({size / 1e6:,.0f} MB) …")


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
) -> None:
    """Compute, copy and their overlap per GPU; busy time per stream; GPU time per NVTX range.

    compute = union of a GPU's kernel intervals, copy = union of its memcpy intervals, overlap = their
    intersection (copy time hidden behind compute), busy = union of all its GPU work. Times in ms (ns in --json).
    """
    from rich.console import Console

    from tracer.analysis.summary import summarize
    from tracer.cli._report import left_out_text, say_cached
    from tracer.errors import TraceFormatError
    from tracer.parsers import load_trace

    console = Console()
    status_console = Console(stderr=True)
    failed: list[TracerError] = []
    from tracer.discover import expand

    found = expand(paths)
    for path in found:
        try:
            with _progress(status_console, path):
                timeline = load_trace(path, cache=not no_cache, on_cache_write=say_cached)
            # Events the parser could not use (ts not a number, GPU work without a device ...) are left out of
            # every figure: say which and how many, or with --strict refuse the trace.
            skipped = timeline.meta.extra.get("skipped") or {}
            ignored = timeline.meta.extra.get("ignored") or {}
            left_out = left_out_text(skipped, ignored)
            if strict and skipped:
                raise TraceFormatError(path, f"{left_out} (--strict)")
            try:
                result = summarize(timeline)
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
        notes = timeline.meta.extra.get("notes") or []
        for note in notes:  # what the figures mean for this file (CUDA graphs traced whole ...)
            print(f"tracer: note: {path}: {note}", file=sys.stderr)
        if not result["events"] and not skipped:
            print(f"tracer: note: {path}: the trace holds no events (a profiler that caught nothing writes this)",
                  file=sys.stderr)
        if skipped or ignored or notes:
            result["meta"] = {"skipped": skipped, "ignored": ignored, "notes": notes}
        if json:
            sys.stdout.buffer.write(orjson.dumps(result) + b"\n")
            sys.stdout.flush()
        else:
            for renderable in render_summary(result, width=console.width):
                console.print(renderable)
            console.print()
    if failed:
        raise typer.Exit(2)
