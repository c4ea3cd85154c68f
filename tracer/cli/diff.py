"""`tracer diff A B`: what work was added, removed, grew or shrank from A to B, and where the time went."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.text import Text

from tracer.analysis.diff import diff_timelines, ms_text, parse_threshold, ratio_text, signed_ms_text
from tracer.cli import TracerCommand, app
from tracer.cli._report import say_cached, warn_left_out
from tracer.cli._tables import table_width
from tracer.errors import TracerError, UsageError
from tracer.parsers import load_trace
from tracer.timeline import device_title

#: The columns of --csv, one row per item.
CSV_COLUMNS = ("change", "kind", "name", "count_a", "count_b", "count_diff", "time_a_ns", "time_b_ns", "diff_ns",
               "ratio")


def _us(ns: int) -> str:
    return f"{ns / 1e3:,.1f}"


def _pct(frac: float | None) -> str:
    return "–" if frac is None else f"{100 * frac:.1f}%"


_CHANGE_STYLE = {"added": "green", "removed": "red", "increased": "yellow", "decreased": "cyan", "unchanged": "dim"}


def render_diff(d: Any, *, top: int = 20, width: int = 100) -> list[Any]:
    """Rich renderables for a :class:`tracer.analysis.diff.TraceDiff`."""
    from rich import box
    from rich.table import Table

    out: list[Any] = [
        Text.assemble(("A ", "bold"), d.source_a),
        Text.assemble(("B ", "bold"), d.source_b),
    ]
    if d.step is not None:
        out.append(Text(f"ProfilerStep#{d.step} of each (host work started in it, GPU work it launched)", style="dim"))
    for note in d.notes:
        out.append(Text(f"note: {note}", style="yellow"))
    head = Table(box=box.SIMPLE_HEAD, title="Headline figures (ms): B − A")
    for col in ("figure", "A", "B", "B − A"):
        head.add_column(col, justify="left" if col == "figure" else "right", no_wrap=True)
    head.add_row("span", ms_text(d.span_a_ns), ms_text(d.span_b_ns), signed_ms_text(d.span_b_ns - d.span_a_ns))
    if d.gpu_span_a_ns or d.gpu_span_b_ns:  # (two host-only traces: no GPU row)
        head.add_row("GPU work span", ms_text(d.gpu_span_a_ns), ms_text(d.gpu_span_b_ns),
                     signed_ms_text(d.gpu_span_b_ns - d.gpu_span_a_ns))
    for dev in d.devices:
        a, b = dev.a, dev.b
        gpu = device_title(dev.key, d.multi_rank)
        for label, va, vb in (("compute", a.compute_ns, b.compute_ns), ("copy", a.copy_ns, b.copy_ns),
                              ("overlap", a.overlap_ns, b.overlap_ns), ("busy", a.busy_ns, b.busy_ns),
                              ("idle", a.idle_ns, b.idle_ns)):
            head.add_row(f"{gpu} {label}", ms_text(va), ms_text(vb), signed_ms_text(vb - va))
        ha, hb = a.copy_hidden_frac, b.copy_hidden_frac
        delta = "–" if ha is None or hb is None else f"{100 * (hb - ha):+.1f} pt"
        head.add_row(f"{gpu} copy hidden", _pct(ha), _pct(hb), delta)
        if a.launches or b.launches:  # (did it wait for the host? the launches analysis)
            la, lb = a.launch_delay_p50_ns, b.launch_delay_p50_ns
            head.add_row(f"{gpu} launch delay (µs)", _us(la) if a.launches else "–",
                         _us(lb) if b.launches else "–",
                         f"{(lb - la) / 1e3:+,.1f}" if a.launches and b.launches else "–")
            ea, eb = a.empty_queue_frac, b.empty_queue_frac
            delta = "–" if ea is None or eb is None else f"{100 * (eb - ea):+.1f} pt"
            head.add_row(f"{gpu} queue empty at launch", _pct(ea), _pct(eb), delta)
    out.append(head)

    span_delta = d.span_b_ns - d.span_a_ns
    if d.states:
        # the partition first: what ran at each instant of the span, whose changes add up to the span's
        out.append(Text(f"Where the time went (span {signed_ms_text(span_delta)} ms, the sum of these), by what ran "
                        "at each instant:", style="bold"))
        for line in d.states:
            out.append(Text("  " + line.text))
    if d.account:
        out.append(Text("In detail, largest first (views that overlap one another):", style="bold"))
        for line in d.account[:8]:
            out.append(Text("  " + line.text))
        if len(d.account) > 8:
            out.append(Text(f"  {len(d.account) - 8} more lines in --json", style="dim"))
    else:
        out.append(Text("No lane, overlap or idle time changed beyond the threshold.", style="dim"))

    counts = d.counts()
    items = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                  title=f"Work by kind and name, largest |time difference| first (top {top})")
    cols = ("change", "kind", "name", "n A", "n B", "ms A", "ms B", "B − A ms", "B / A")
    rows = [
        [item.change, item.kind, item.name, f"{item.count_a:,}", f"{item.count_b:,}", ms_text(item.time_a_ns),
         ms_text(item.time_b_ns), signed_ms_text(item.diff_ns), ratio_text(item.ratio)]
        for item in d.items[:top]
    ]
    # The name column gives way on a narrow terminal (names are cut with "…"); the other columns keep the width of
    # their cells, so a figure is never cut short or split: where even a short name leaves no room, the table is
    # printed wider than the terminal (crop=False below), whole.
    least = [max([len(w) for w in col.split()] + [len(r[i]) for r in rows]) for i, col in enumerate(cols)]
    for i, col in enumerate(cols):
        if col in ("change", "kind", "name"):
            items.add_column(col, justify="left", no_wrap=True, min_width=least[i] if col != "name" else None)
        else:
            items.add_column(col, justify="right", no_wrap=True, min_width=least[i])
    fixed = table_width(items, [[*r[:2], r[2][:8], *r[3:]] for r in rows])  # (names cut to 8 characters)
    if fixed > width:
        items.width = fixed
    room = max(8, min(80, width - table_width(items, [[*r[:2], "", *r[3:]] for r in rows])))
    for row in rows:
        name = row[2] if len(row[2]) <= room else row[2][: room - 1] + "…"
        items.add_row(Text(row[0], style=_CHANGE_STYLE[row[0]]), row[1], name, *row[3:])
    caption = [", ".join(f"{n} {c}" for c, n in counts.items()) + f"; unchanged: {d.threshold.text()}"]
    if len(d.items) > top:
        caption.append(f"{len(d.items) - top} more items in --json / --csv")
    items.caption = "\n".join(caption)
    out.append(items)
    return out


def items_csv(d: Any) -> str:
    """Every item as CSV (header :data:`CSV_COLUMNS`; times in ns; ratio empty where A's total is 0)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for item in d.items:
        row = item.as_dict()
        w.writerow(["" if row[c] is None else row[c] for c in CSV_COLUMNS])
    return buf.getvalue()


def _load(path: Path, no_cache: bool) -> Any:
    """One of the two traces, what its parser left out said on stderr; a rank of a stored job (``tracer summary
    --job``) is read from the job's dataset, not parsed again."""
    timeline = None
    if not no_cache and path.is_file():
        from tracer.job.load import read_stored_rank  # (a job's front door: no pandas, no Dask)

        timeline = read_stored_rank(path)
    if timeline is None:
        timeline = load_trace(path, cache=not no_cache, on_cache_write=say_cached)
    warn_left_out(path, timeline.meta.extra)
    return timeline


@app.command(cls=TracerCommand)
def diff(
    a: Annotated[Path, typer.Argument(metavar="A", help="The baseline: a trace (Kineto JSON[.gz], nsys "
                                      ".sqlite/.nsys-rep, Parquet) or a run directory.")],
    b: Annotated[Path, typer.Argument(metavar="B", help="The trace compared against A (differences are B − A).")],
    top: Annotated[int, typer.Option("--top", min=1, help="Items shown in the table (--json and --csv carry "
                                     "all).")] = 20,
    threshold: Annotated[
        str,
        typer.Option("--threshold", help="When a total counts as unchanged (same count, |B − A| within it): a "
                     "duration, a share of A's total, or both, e.g. '1us,1%' (the default), '5%', '0.5ms'."),
    ] = "1us,1%",
    step: Annotated[
        int | None,
        typer.Option("--step", help="Compare one profiler step of each: ProfilerStep#STEP's host work and the GPU "
                     "work it launched."),
    ] = None,
    exact_names: Annotated[
        bool, typer.Option("--exact-names", help="Match names as written (no step / address / id normalising).")
    ] = False,
    json: Annotated[bool, typer.Option("--json", help="Print one JSON object with every item.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print every item as CSV (times in ns).")] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse afresh; don't read or write the Parquet cache beside big traces.")
    ] = False,
) -> None:
    """Compare two traces: work matched by kind and name (added, removed, increased, decreased, unchanged),
    the headline figures side by side, and where the time went.

    Kernels, CPU operators, runtime calls and NVTX / record_function ranges match by name (step numbers,
    addresses and long ids normalised: ProfilerStep#1012 → ProfilerStep#N), copies by direction. Times are
    summed durations, in ms (ns in --json and --csv). docs/diff.md has the rules.
    """
    if json and as_csv:
        raise UsageError("", "--json and --csv each print every item; choose one")
    rule = parse_threshold(threshold)
    if step is not None and step < 0:
        raise UsageError("--step", f"{step} is not a step number (ProfilerStep#N counts from 0)")
    ta = _load(a, no_cache)
    tb = _load(b, no_cache)
    try:
        result = diff_timelines(ta, tb, threshold=rule, exact_names=exact_names, step=step)
    except TracerError as exc:  # a total the analysis refused names no file: it is one of the two
        if exc.subject:
            raise
        raise type(exc)(f"{a} vs {b}", exc.problem) from None
    if json:
        sys.stdout.buffer.write(orjson.dumps(result.as_dict()) + b"\n")
        sys.stdout.flush()
        return
    if as_csv:
        sys.stdout.write(items_csv(result))
        sys.stdout.flush()
        return
    console = Console()
    for renderable in render_diff(result, top=top, width=console.width):
        console.print(renderable, crop=False)  # (a table wider than the terminal: nothing cut)
