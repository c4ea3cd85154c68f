"""Pieces several pages share: summary cards, the run's heading, window parsing, one unit per line."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from dash import dcc, html

from tracer.analysis.comm import DeviceComm, comm_total
from tracer.analysis.launches import LaunchStat
from tracer.analysis.overlap import DeviceOverlap
from tracer.analysis.summary import Summary
from tracer.dashboard.data import (
    RunInfo,
    backend_text,
    command_text,
    device_text,
    params_text,
    quoted,
    run_date,
    run_status,
    speedups,
    variant_text,
)
from tracer.dashboard.figures import Window, fmt_duration
from tracer.dashboard.model import CLASS_INDEX, N_CLASSES, TimelineView
from tracer.errors import TracerError, UsageError
from tracer.timeline import device_title

#: Where the speedups on the pages come from, said once for every label and tooltip.
SPEEDUP_SOURCE = (
    "from the wall times the scenario measured itself during the run (devices synchronised before and "
    "after; meta.json), not from the timeline"
)
UNITS = ((1e6, "ms"), (1e3, "µs"), (1.0, "ns"))


def unit_for(ns: float) -> tuple[float, str]:
    """(scale, name) of the unit that reads best for ``ns``: the one unit every number of a card shares."""
    for scale, name in UNITS:
        if abs(ns) >= scale:
            return scale, name
    return UNITS[0]  # nothing at all: ms, the unit of the time axis


def fmt_in(ns: float, unit: tuple[float, str], decimals: int) -> str:
    return f"{ns / unit[0]:,.{decimals}f} {unit[1]}"


def card_format(values: list[float]) -> tuple[tuple[float, str], int]:
    """The unit and the decimals that give the largest of ``values`` four significant digits (at most 3)."""
    top = max((abs(v) for v in values), default=0.0)
    unit = unit_for(top)
    scaled = top / unit[0]
    digits = math.floor(math.log10(scaled)) + 1 if scaled >= 1 else 1
    return unit, min(3, max(0, 4 - digits))


def window_text(lo: int, hi: int) -> str:
    """``"40.000 – 45.000 ms (5.000 ms wide)"``: in ms like the time axis, with as many decimals as the
    window's width needs (four significant digits of it, at least three decimals)."""
    width_ms = max(hi - lo, 0) / 1e6
    decimals = 3 if width_ms <= 0 else max(3, 3 - math.floor(math.log10(width_ms)))
    return f"{lo / 1e6:.{decimals}f} – {hi / 1e6:.{decimals}f} ms ({width_ms:.{decimals}f} ms wide)"


def _stat(label: str, value: str, cls: str = "", title: str | None = None) -> html.Div:
    return html.Div(
        [html.Div(value, className="stat-value"), html.Div(label, className="stat-label")],
        className=f"stat {cls}",
        title=title,
    )


def run_mode(view: TimelineView) -> str:
    """The recording mode from the run's meta.json, when the timeline came from a run directory."""
    run = view.timeline.meta.extra.get("run")
    return str(run.get("mode") or "") if isinstance(run, dict) else ""


def device_cards(view: TimelineView) -> list[Any]:
    """Per GPU: compute, copy, overlap, busy and the share of copy time hidden behind compute. A run without
    GPU work gets a sentence saying so and a card per host thread instead (:func:`host_cards`)."""
    if not view.devices:
        return host_cards(view)
    names = view.timeline.meta.gpu_names
    multi_rank = view.multi_rank
    comm = {c.key: c for c in view.comm}
    launches = {(x.rank, x.device): x for x in view.launches}
    cards = [
        device_card(d, names.get(d.device, ""), multi_rank=multi_rank, comm=comm.get(d.key),
                    launches=launches.get((d.key.rank, d.key.device)))
        for d in view.devices
    ]
    if multi_rank and len(view.comm) > 1:
        cards.append(job_comm_card(view.comm))
    return cards


def job_comm_card(gpus: list[DeviceComm]) -> html.Div:
    """The job's communication: every GPU's figures summed (``summary``'s ``comm_total``, its ``job`` row)."""
    t = comm_total(gpus)
    unit, dec = card_format([t.compute_ns, t.comm_ns, t.overlap_ns, t.exposed_comm_ns])
    pct = t.comm_hidden_pct
    return html.Div(
        [
            html.Div([html.B("job"), html.Span(f" {len(gpus):,} GPUs summed (GPU-time)", className="muted")],
                     className="card-title"),
            html.Div(
                [
                    _stat("compute", fmt_in(t.compute_ns, unit, dec), "c-kernel", "every GPU's compute, summed"),
                    _stat("comm", fmt_in(t.comm_ns, unit, dec), "c-comm", "every GPU's communication, summed"),
                    _stat("compute ∩ comm", fmt_in(t.overlap_ns, unit, dec), "c-comm",
                          "communication hidden behind compute, summed"),
                    _stat("exposed comm", fmt_in(t.exposed_comm_ns, unit, dec), "c-comm",
                          "comm − compute ∩ comm, summed"),
                    _stat("of comm time hidden", "–" if pct is None else f"{pct:.0f}%", "c-comm",
                          "overlap / comm of the sums"),
                ],
                className="stats",
            ),
            # (DeviceComm.kernels counts the compute kernels only: the GPU cards' count is every kernel)
            html.Div(f"{t.kernels + t.comm_kernels:,} kernels ({t.comm_kernels:,} communication)",
                     className="muted small"),
        ],
        className="card",
    )


def device_card(
    d: DeviceOverlap, gpu_name: str = "", *, multi_rank: bool = False, comm: DeviceComm | None = None,
    launches: LaunchStat | None = None,
) -> html.Div:
    """One GPU's card: the summary's figures of it (``tracer summary``'s per-GPU row), with ``comm`` its
    communication beside compute (the ``comm`` analysis' row), with ``launches`` one line of how far the host
    ran ahead of it (the ``launches`` analysis' row)."""
    frac = d.copy_hidden_frac
    hidden = "–" if frac is None else f"{100 * frac:.0f}%"
    values: list[float] = [d.compute_ns, d.copy_ns, d.overlap_ns, d.busy_ns]
    if comm is not None:
        values += [comm.comm_ns, comm.overlap_ns, comm.exposed_comm_ns]
    unit, dec = card_format(values)
    comm_stats: list[Any] = []
    if comm is not None:
        pct = comm.comm_hidden_pct
        comm_stats = [
            _stat("comm", fmt_in(comm.comm_ns, unit, dec), "c-comm", "union of the GPU's communication kernels"),
            _stat("compute ∩ comm", fmt_in(comm.overlap_ns, unit, dec), "c-comm",
                  "communication hidden behind compute"),
            _stat("exposed comm", fmt_in(comm.exposed_comm_ns, unit, dec), "c-comm",
                  "comm − compute ∩ comm: the GPU only communicated"),
            _stat("of comm time hidden", "–" if pct is None else f"{pct:.0f}%", "c-comm", "overlap / comm"),
        ]
    return html.Div(
        [
            html.Div(
                [html.B(device_title(d.key, multi_rank)), html.Span(f" {gpu_name}", className="muted")],
                className="card-title",
            ),
            html.Div(
                [
                    _stat(
                        "compute", fmt_in(d.compute_ns, unit, dec), "c-kernel", "union of the GPU's kernels"
                    ),
                    _stat("copy", fmt_in(d.copy_ns, unit, dec), "c-copy", "union of the GPU's memcpys"),
                    _stat(
                        "overlap",
                        fmt_in(d.overlap_ns, unit, dec),
                        "c-overlap",
                        "compute ∩ copy: copy time hidden",
                    ),
                    _stat("busy", fmt_in(d.busy_ns, unit, dec), title="union of all the GPU's work"),
                    _stat("of copy time hidden", hidden, "c-overlap", "overlap / copy"),
                ],
                className="stats",
            ),
            *([html.Div(comm_stats, className="stats")] if comm_stats else []),
            html.Div(
                f"{d.kernels:,} kernels"
                + (f" ({comm.comm_kernels:,} communication)" if comm is not None else "")
                + f" · {d.memcpys:,} copies · {d.memsets:,} memsets",
                className="muted small",
            ),
            *([launch_line(launches)] if launches is not None and launches.launches else []),
        ],
        className="card",
    )


#: At or above this share of launches finding the stream's queue empty, the GPU mostly waited for the host.
HOST_BOUND_EMPTY = 0.5


def launch_line(x: LaunchStat) -> html.Div:
    """The ``launches`` figures of one GPU in words: how long its work waited after the launch call (median and
    95th percentile), how often the call found the stream's queue empty, and what that says: the GPU waited for
    the host, or the host ran ahead of the GPU."""
    empty = x.empty_at_launch / x.launches
    verdict = ("the GPU often waited for the host to launch" if empty >= HOST_BOUND_EMPTY
               else "the host ran ahead of the GPU, which was busy")
    parts = [f"Work started {fmt_duration(x.delay_p50_ns)} after its launch call returned (median; 95th "
             f"percentile {fmt_duration(x.delay_p95_ns)})",
             f"the stream's queue was empty at {100 * empty:.0f}% of launches: {verdict}"]
    if x.kernels:
        parts.append(f"{100 * x.short_kernels / x.kernels:.0f}% of kernels ran shorter than their launch call")
    return html.Div(
        [html.B("Launches: "), " · ".join(parts) + "."], className="muted small launch-line",
        title="launch delay: the GPU work's start − its launch call's end (tracer summary's launches table); a long "
              "delay is work queued behind earlier work (the host is ahead), a short one with an empty queue is a "
              "GPU waiting for the host (launch-bound: fewer, larger kernels or CUDA graphs help)")


#: More host threads than this get one line instead of a card each.
MAX_HOST_CARDS = 8


def host_cards(view: TimelineView) -> list[Any]:
    """For a run without GPU work: what it is, and per host thread that ran framework ops its busy time
    (the union of its ops, nested ops once), share of the span, ops and CUDA calls (``tracer summary``'s
    host-thread table)."""
    mode = run_mode(view)
    if mode == "cpu-threads":
        why = (
            "This run has no GPU activity: it was recorded on the CPU (mode cpu-threads), where CPU threads "
            "stand in for devices."
        )
    else:
        why = "This trace has no GPU activity: it ran on the host only."
    # the summary's own host-thread figures (computed alone: nothing else of the summary is shown here)
    summary = Summary.of(view.timeline)
    stats = summary.threads
    shown = "Shown instead: each host thread's framework ops — busy is their union, nested ops counted once."
    if not stats:
        shown = "It has no framework ops either: the chart shows what host activity it has."
    out: list[Any] = [html.Div([why, " ", shown], className="muted no-gpu", style={"flexBasis": "100%"})]
    span = max(view.span_ns, 1)
    cuda = any(row.launches for row in stats)  # (a CPU run's "0 CUDA calls" on every card would say nothing)
    for row in stats[:MAX_HOST_CARDS]:
        busy = row.busy_ns
        unit, dec = card_format([busy, span])
        name = row.name.strip() or f"thread {row.tid}"
        rank = f"rank {row.rank} · " if summary.multi_rank else ""
        out.append(
            html.Div(
                [
                    html.Div(
                        [html.B(f"{rank}CPU · {name}"), html.Span(f" pid {row.pid}", className="muted")],
                        className="card-title",
                    ),
                    html.Div(
                        [
                            _stat("busy", fmt_in(busy, unit, dec), "c-kernel", "union of the thread's ops"),
                            _stat(
                                "of the run's span",
                                f"{100 * busy / span:.0f}%",
                                title=f"span {fmt_in(span, unit, dec)}",
                            ),
                            _stat("framework ops", f"{row.ops:,}"),
                            *([_stat("CUDA calls", f"{row.launches:,}", title="CUDA runtime / driver calls")]
                              if cuda else []),
                        ],
                        className="stats",
                    ),
                ],
                className="card host-card",
            )
        )
    if len(stats) > MAX_HOST_CARDS:
        out.append(
            html.Div(
                f"… and {len(stats) - MAX_HOST_CARDS} more threads (tracer summary lists all).",
                className="muted small",
            )
        )
    return out


def speedup_text(value: float, label: str) -> str:
    """``"×1.04 (sum alone / together)"``."""
    return f"×{value:.2f}" + (f" ({label})" if label else "")


#: What the chart's pieces that are no event are, by where they are drawn (:func:`piece_counts`).
PIECE_WORDS = {
    "overlap": "compute ∩ copy pieces (the overlap band)",
    "comm_overlap": "compute ∩ comm pieces (the comm overlap band)",
    "folded": "pieces of the ranks' folded lanes (drawn when a rank is folded)",
}


def piece_counts(view: TimelineView) -> dict[str, int]:
    """The chart's bars that are no event of the trace, by what they are: the compute ∩ copy band's pieces, the
    compute ∩ comm band's, the folded lanes' unions (:data:`PIECE_WORDS`); only those the view has."""
    synth = view.src < 0
    if not synth.any():
        return {}
    groups = view.group[synth]
    cls = groups % N_CLASSES
    folded = np.array([r.folded for r in view.rows], dtype=bool)[groups // N_CLASSES]
    counts = {
        "overlap": int(np.count_nonzero(~folded & (cls == CLASS_INDEX["overlap"]))),
        "comm_overlap": int(np.count_nonzero(~folded & (cls == CLASS_INDEX["comm_overlap"]))),
        "folded": int(np.count_nonzero(folded)),
    }
    return {k: n for k, n in counts.items() if n}


def trace_counts(view: TimelineView) -> str:
    """How the trace's events become the chart's bars: every drawn event is one bar, the bands (compute ∩ copy,
    compute ∩ comm) and a job's folded lanes add pieces of their own (not events), each named only where the run
    has it, and kinds without a lane (e.g. gpu_range) are not drawn."""
    if view.partial is not None:  # (a large job read rank by rank: its events are counted, not at hand)
        return f"{view.n_events:,} events in {len(view.ranks)} ranks, drawn from the job's stored dataset"
    ev = view.timeline.events
    drawn = int(np.count_nonzero(view.src >= 0))
    pieces = piece_counts(view)
    left = len(ev) - drawn
    if not pieces and not left:
        return f"{len(ev):,} events, one bar each"
    text = f"{len(ev):,} events in the trace → {len(view.src):,} bars on the chart: {drawn:,} events"
    for what, n in pieces.items():
        text += f" + {n:,} {PIECE_WORDS[what]}"
    if left > 0:
        mask = np.ones(len(ev), dtype=bool)
        mask[view.src[view.src >= 0]] = False
        kinds = ev["kind"].astype(str).to_numpy()[mask]
        names, counts = np.unique(kinds, return_counts=True)
        text += f"; {left:,} not drawn (" + ", ".join(f"{k} ×{c}" for k, c in zip(names, counts)) + ")"
    return text


def _fact(label: str, *content: Any, title: str | None = None) -> html.Div:
    return html.Div([html.B(label + ": "), *content], className="fact muted", title=title)


def run_heading(info: RunInfo, view: TimelineView | None = None) -> html.Div:
    """The run's name and what a reader needs to tell it from a similar one: scenario, variant, parameters,
    device and mode, back end, when; with the timeline, its span and counts; the speedup and what it
    compares."""
    meta = info.meta or {}
    run = view.timeline.meta.extra.get("run") if view is not None else None
    if not meta and isinstance(run, dict):
        meta = run
    summary = info.summary
    facts: list[Any] = []
    scenario = meta.get("scenario")
    if scenario:
        variant = variant_text(meta)
        facts.append(_fact("Scenario", f"{scenario}" + (f" · variant {variant}" if variant else "")))
    elif command_text(meta):  # tracer record -- COMMAND: what ran, and how it ended
        code, status = meta.get("exit_code"), run_status(meta)
        ended = f" · {status.text}" if status is not None else f" · exit {code}" if code is not None else ""
        facts.append(_fact("Command", command_text(meta, limit=200),
                           html.Span(ended, className=f"status-{status.kind}" if status is not None else None,
                                     title=status.title if status is not None else None)))
    params = params_text(meta)
    if params:
        facts.append(_fact("Parameters", params))
    gpu_names = {str(k): v for k, v in view.timeline.meta.gpu_names.items()} if view is not None else None
    device, how = device_text(
        meta,
        {"gpu_names": gpu_names, "devices": {d.device: 1 for d in view.devices}}
        if view is not None
        else summary,
    )
    if device or how:
        facts.append(_fact("Device", device + (f" — {how}" if device and how else how)))
    fmt = view.timeline.meta.format if view is not None else (summary or {}).get("format")
    backend = backend_text(meta, fmt)
    when = run_date(info)
    if backend or when:
        facts.append(_fact("Recorded with", backend + (f", {when}" if backend and when else when)))
    if view is not None:
        unit = unit_for(view.span_ns)
        facts.append(_fact("Trace", f"span {fmt_in(view.span_ns, unit, 3)} · {trace_counts(view)}"))
    found = speedups(meta)
    if found:
        facts.append(
            _fact(
                "Speedup" if len(found) == 1 else "Speedups",
                " · ".join(speedup_text(v, label) for v, label in found),
                html.Span(f" — {SPEEDUP_SOURCE}", className="small"),
                title="speedup = the first time / the second: above 1 the second way is faster",
            )
        )
    return html.Div([html.H2(info.name), *facts], className="heading")


def window_from_relayout(data: Any, axis: str = "xaxis") -> Window | Literal["full"] | None:
    """The x window (ns) a plotly relayout event asks for; "full" for autorange; None if it names none.

    Raises :class:`UsageError` for a range that is not two finite numbers (``inf``, NaN, ``1e308``, text):
    the page says so instead of a 500."""
    if not data:
        return None
    if not isinstance(data, dict):
        raise UsageError("zoom", f"expected the chart's relayout data, got {quoted(type(data).__name__)}")
    if data.get(f"{axis}.autorange"):
        return "full"
    lo = data.get(f"{axis}.range[0]")
    hi = data.get(f"{axis}.range[1]")
    if lo is None and isinstance(data.get(f"{axis}.range"), list) and len(data[f"{axis}.range"]) >= 2:
        lo, hi = data[f"{axis}.range"][:2]
    if lo is None or hi is None:
        return None
    return window_from_ms(lo, hi)


def window_from_ms(lo: Any, hi: Any) -> Window:
    """An x range in ms (what Plotly sends) as a window in ns; :class:`UsageError` unless both ends are
    finite numbers that stay finite in ns."""
    try:
        lo_ns, hi_ns = float(lo) * 1e6, float(hi) * 1e6
    except (TypeError, ValueError):
        lo_ns = hi_ns = math.nan
    if not (math.isfinite(lo_ns) and math.isfinite(hi_ns)):
        raise UsageError("zoom", f"the x range asked for is not two finite numbers of ms: {quoted([lo, hi])}")
    return round(lo_ns), round(hi_ns)


def window_from_state(value: Any) -> Window | None:
    """The window a page's state store holds (``[lo, hi]`` in ns); None when it holds none or garbage (a
    request may send anything there: the page then falls back to the whole run)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    try:
        return window_from_ms(value[0] / 1e6, value[1] / 1e6)
    except (TypeError, UsageError):
        return None


def lanes_from_request(lanes: Any) -> list[str] | None:
    """The lane filter's value: None (all) or lane keys; :class:`UsageError` for anything else."""
    if lanes is None:
        return None
    if not isinstance(lanes, list) or not all(isinstance(k, str) for k in lanes):
        raise UsageError("lanes", "expected a list of lane names")
    return lanes


def alert(text: str) -> Any:
    """A one-line error message for the page."""
    return html.Span(text, className="error-text", role="alert")


def error_message(exc: Exception) -> str:
    """One line saying what went wrong with a request: a :class:`TracerError`'s own words, else the kind of
    failure (never a traceback: requests can send anything, and the log must not fill with them)."""
    if isinstance(exc, TracerError):
        return quoted(str(exc), 300)
    return f"This request could not be answered ({type(exc).__name__}: {quoted(exc, 200)})."


def on_error(fallback: Callable[[str], Any]) -> Callable[[Exception], Any]:
    """A Dash ``on_error`` handler: whatever a callback raises becomes ``fallback(message)`` — the outputs
    that say so on the page — instead of an HTTP 500 with a traceback in the log."""

    def handle(exc: Exception) -> Any:
        return fallback(error_message(exc))

    return handle


def plot_width(viewport: dict[str, Any] | None) -> int:
    """Pixels of the plotting area, from the browser's width less the lane labels and the page margins."""
    width = viewport.get("width") if isinstance(viewport, dict) else None
    if not isinstance(width, (int, float)) or not math.isfinite(width):
        width = 1500  # not said yet, or nonsense from a request
    return int(max(400, min(width - 330, 4000)))


GRAPH_CONFIG: dcc.Graph.Config = {
    "displaylogo": False,
    "scrollZoom": True,
    "doubleClick": "autosize",
    "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d", "toImage"],
}
