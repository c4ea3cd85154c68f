"""Pieces several pages share: summary cards, the run's heading, window parsing."""

from __future__ import annotations

from typing import Any

from dash import html

from dashboard.data import RunInfo, speedup_of
from dashboard.figures import Window, fmt_duration
from dashboard.model import TimelineView
from tracer.analysis.overlap import DeviceOverlap


def device_cards(view: TimelineView) -> list[Any]:
    """Per GPU: compute, copy, overlap, busy and the share of copy time hidden behind compute."""
    if not view.devices:
        return [html.Div("No GPU work in this trace (a CPU-only run?).", className="muted")]
    names = view.timeline.meta.gpu_names
    out = []
    for d in view.devices:
        out.append(device_card(d, names.get(d.device, "")))
    return out


def device_card(d: DeviceOverlap, gpu_name: str = "") -> html.Div:
    hidden = f"{100 * d.copy_hidden_frac:.0f}%" if d.copy_ns else "–"

    def stat(label: str, value: str, cls: str = "") -> html.Div:
        return html.Div(
            [html.Div(value, className="stat-value"), html.Div(label, className="stat-label")],
            className=f"stat {cls}",
        )

    return html.Div(
        [
            html.Div(
                [html.B(f"GPU {d.device}"), html.Span(f" {gpu_name}", className="muted")],
                className="card-title",
            ),
            html.Div(
                [
                    stat("compute", fmt_duration(d.compute_ns), "c-kernel"),
                    stat("copy", fmt_duration(d.copy_ns), "c-copy"),
                    stat("overlap", fmt_duration(d.overlap_ns), "c-overlap"),
                    stat("busy", fmt_duration(d.busy_ns)),
                    stat("of copy time hidden", hidden, "c-overlap"),
                ],
                className="stats",
            ),
            html.Div(
                f"{d.kernels:,} kernels · {d.memcpys:,} copies · {d.memsets:,} memsets",
                className="muted small",
            ),
        ],
        className="card",
    )


def run_heading(info: RunInfo, view: TimelineView | None = None) -> html.Div:
    bits = []
    scenario = info.meta.get("scenario")
    variant = info.meta.get("variant")
    if scenario:
        bits.append(f"{scenario}" + (f" · {variant}" if variant else ""))
    if view is not None:
        bits.append(view.timeline.meta.format)
        bits.append(f"span {fmt_duration(view.span_ns)}")
        bits.append(f"{len(view.timeline.events):,} intervals")
    speedup = speedup_of(info.meta)
    if speedup is not None:
        bits.append(f"speedup ×{speedup:.2f}")
    return html.Div([html.H2(info.name), html.Div(" · ".join(bits), className="muted")], className="heading")


def window_from_relayout(data: dict[str, Any] | None, axis: str = "xaxis") -> Window | str | None:
    """The x window (ns) a plotly relayout event asks for; "full" for autorange; None if it has none."""
    if not data:
        return None
    if data.get(f"{axis}.autorange"):
        return "full"
    lo = data.get(f"{axis}.range[0]")
    hi = data.get(f"{axis}.range[1]")
    if lo is None and isinstance(data.get(f"{axis}.range"), list):
        lo, hi = data[f"{axis}.range"][:2]
    if lo is None or hi is None:
        return None
    try:
        return round(float(lo) * 1e6), round(float(hi) * 1e6)
    except (TypeError, ValueError):
        return None


def plot_width(viewport: dict[str, Any] | None) -> int:
    """Pixels of the plotting area, from the browser's width less the lane labels and the page margins."""
    width = (viewport or {}).get("width") or 1500
    return int(max(400, min(width - 330, 4000)))


GRAPH_CONFIG = {
    "displaylogo": False,
    "scrollZoom": True,
    "doubleClick": "autosize",
    "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d", "toImage"],
}
