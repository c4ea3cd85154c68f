"""Plotly figures of a run, built by pure functions: usable from a notebook as well as by the app.

    from tracer.parsers import load_trace
    from tracer.dashboard.figures import timeline_figure
    timeline_figure(load_trace("tests/data/copy_side_stream.json.gz")).show()

Every interval set is drawn through :mod:`tracer.dashboard.lod`: for the visible window, intervals narrower than a
pixel merge into busy blocks, and each colour is *one* SVG ``go.Scatter`` trace whose rectangles are
NaN-separated closed paths filled ``toself``. That draws a million intervals in well under a second, where
one bar or marker per interval (``px.timeline``, ``go.Bar``) takes tens of seconds. Hover text exists only
per block, carried by one invisible marker trace.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from tracer.dashboard.lod import Blocks, merge_blocks
from tracer.dashboard.model import CLASS_INDEX, CLASSES, N_CLASSES, Row, TimelineView, prepare
from tracer.timeline import Timeline
from tracer.timeline.layout import rank_prefix

#: Default plot width in pixels when the browser has not said (the level of detail depends on it).
DEFAULT_WIDTH_PX = 1200
ROW_PX = 26
BAR_HALF = 0.38  # half the height of a bar, in rows
HOVER_STEP_PX = 24  # hover points along a wide block, so that hovering anywhere on it finds one
#: Names drawn on range bars: the font, a generous average character width for it (so that a cut name never
#: spills over its bar), the padding each side and the narrowest bar that gets a name at all.
LABEL_FONT_PX = 10
LABEL_CHAR_PX = 6.2
LABEL_PAD_PX = 3
MIN_LABEL_PX = 2 * LABEL_PAD_PX + 4 * LABEL_CHAR_PX
FONT = "Inter, system-ui, -apple-system, Segoe UI, Roboto, sans-serif"
#: Classes drawn hatched: the overlap band, so that it never reads as one more copy colour.
FILL_PATTERNS: dict[str, dict[str, Any]] = {
    "overlap": dict(shape="/", fgcolor="#000000", size=6, solidity=0.25),
    # the compute ∩ comm band: hatched the other way, on the comm colour's pale tint
    "comm_overlap": dict(shape="\\", fgcolor="#2B0F40", size=6, solidity=0.25),
}

Window = tuple[int, int]

# Unchecked traces: the lanes' traces are built with ``_validate=False`` because a figure checks every trace it is
# given (``go.Figure`` and ``add_traces`` make each one again from its properties, validated); checking them as
# they are built too did the work twice, a fifth of a zoom with thousands of hover texts (issue 39). Each is
# still checked once, by the figure that draws it.


def fmt_duration(ns: float) -> str:
    """A duration in the unit that reads best: 850 ns, 12.3 µs, 4.56 ms, 1.23 s."""
    ns = float(ns)
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.3g} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.4g} ms"
    return f"{ns / 1e9:.4g} s"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def full_window(view: TimelineView) -> Window:
    return 0, max(view.span_ns, 1)


def clamp_window(view: TimelineView, window: Window | None) -> Window:
    """``window`` kept inside the run (a little beyond is fine: users pan past the ends) and at least 1 µs."""
    if window is None:
        return full_window(view)
    return clamp_span(view.span_ns, window)


def clamp_span(span_ns: int, window: Window) -> Window:
    """``window`` with both ends inside ``[-span, 2 span]`` and at least 1 µs wide: any window a request
    asks for (1e300 ms included) becomes one whose nanoseconds fit int64."""
    lo, hi = int(window[0]), int(window[1])
    if hi < lo:
        lo, hi = hi, lo
    span = max(int(span_ns), 1)
    lo = min(max(lo, -span), 2 * span)
    hi = min(max(hi, -span), 2 * span)
    if hi - lo < 1000:
        mid = (lo + hi) // 2
        lo, hi = mid - 500, mid + 500
    return lo, hi


@dataclass(frozen=True)
class PathPieces:
    """A critical path to draw over the lanes (:func:`tracer.explain.critical_path`'s pieces): one entry per piece,
    in time order, times in ns since the view's ``t0_ns``; ``src`` is the events row (position) the piece belongs
    to, whose drawn row the line runs along (-1: none)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    src: np.ndarray
    label: np.ndarray  # "gpu compute", "copy", "host gap" ...
    name: np.ndarray

    def __len__(self) -> int:
        return int(self.start_ns.size)


#: The path overlay's colour (black: over every lane colour) and the most points one figure sends of it, per
#: pixel of the plot's width (merged as the lanes are, :func:`tracer.dashboard.lod.merge_blocks`).
PATH_COLOR = "#000000"
PATH_WIDTH = 1.5
PATH_BUDGET_PER_PX = 1.0


@dataclass
class Drawn:
    """The traces of one run's lanes for one window, and what went into them."""

    traces: list[go.Scatter]
    rows: list[Row]  # the rows shown, top to bottom (y = index)
    blocks: int
    intervals: int  # intervals touching the window
    row_of: dict[int, int]  # view row index -> y


def _shown_rows(view: TimelineView, lanes: list[str] | None) -> list[int]:
    """The rows of ``lanes`` (None: every lane, folded ones left out), in display order."""
    if lanes is None:
        return [i for i, r in enumerate(view.rows) if not r.folded]
    keep = set(lanes)
    return [i for i, r in enumerate(view.rows) if r.lane in keep]


def rows_shown(view: TimelineView, lanes: list[str] | None) -> dict[int, int]:
    """View row -> y of each row :func:`timeline_figure` draws for ``lanes`` (its ``Drawn.row_of``), without
    drawing anything."""
    return {r: y for y, r in enumerate(_shown_rows(view, lanes))}


def _select(view: TimelineView, rows: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The sorted arrays restricted to ``rows`` (:meth:`TimelineView.select`)."""
    return view.select(rows)


def _hover_texts(view: TimelineView, blocks: Blocks, src: np.ndarray, cls: np.ndarray) -> list[str]:
    """One hover text per block: the interval's details when it is alone, else what the block merges."""
    single = (blocks.count == 1) & (src >= 0)
    details: dict[int, str] = {}
    if single.any():
        sub = view.event_rows(src[single])
        names = sub["name"].astype(str).to_numpy()
        kinds = sub["kind"].astype(str).to_numpy()
        copy_kinds = sub["copy_kind"].astype(str).to_numpy()
        devs = sub["device"].to_numpy()
        streams = sub["stream"].to_numpy()
        tids = sub["tid"].to_numpy()
        ranks = sub["rank"].to_numpy()
        nbytes = sub["bytes"].to_numpy(dtype="float64", na_value=np.nan)
        corr = sub["correlation"].to_numpy(dtype="float64", na_value=np.nan)
        colls = sub["collective"].astype(str).to_numpy()
        pgs = sub["pg"].astype(str).to_numpy()
        seqs = sub["seq"].to_numpy(dtype="float64", na_value=np.nan)
        group_sizes = sub["group_size"].to_numpy()
        starts = sub["start_ns"].to_numpy() - view.t0_ns
        durs = sub["end_ns"].to_numpy() - sub["start_ns"].to_numpy()
        for j, b in enumerate(np.flatnonzero(single).tolist()):
            name = names[j] if len(names[j]) <= 110 else names[j][:107] + "…"
            where = f"GPU {devs[j]} · stream {streams[j]}" if devs[j] >= 0 else f"thread {tids[j]}"
            where = rank_prefix(int(ranks[j]), view.multi_rank) + where
            what = f"{kinds[j]} {copy_kinds[j]}".strip()
            lines = [
                f"<b>{escape_label(name)}</b>",
                escape_label(f"{what} · {where}"),
                f"start {starts[j] / 1e6:.4f} ms · duration {fmt_duration(durs[j])}",
            ]
            if colls[j]:
                lines.append(escape_label(comm_text(colls[j], pgs[j], seqs[j], int(group_sizes[j]))))
            if not np.isnan(nbytes[j]):
                rate = f" · {nbytes[j] / durs[j]:.1f} GB/s" if durs[j] > 0 else ""
                size = "message " if colls[j] else ""
                lines.append(f"{size}{fmt_bytes(nbytes[j])}{rate}")
            if not np.isnan(corr[j]):
                lines.append(
                    f"correlation {int(corr[j])}" + (" · click: show its launch" if devs[j] >= 0 else "")
                )
            details[int(b)] = "<br>".join(lines)
    out = []
    # (plain Python numbers, not numpy scalars: a zoom has thousands of merged blocks, and numpy's scalar
    # arithmetic was most of this function's time; the texts are the same)
    labels = [c.label for c in CLASSES]
    for b, (k, n, lo, hi, busy) in enumerate(zip(cls.tolist(), blocks.count.tolist(), blocks.start_ns.tolist(),
                                                 blocks.end_ns.tolist(), blocks.busy_ns.tolist())):
        if b in details:
            out.append(details[b])
            continue
        span = max(hi - lo, 1)
        head = labels[k] if n == 1 else f"{n:,} × {labels[k]} (merged: zoom in for each)"
        out.append(
            f"<b>{head}</b><br>{lo / 1e6:.4f} – {hi / 1e6:.4f} ms"
            f"<br>busy {fmt_duration(busy)} of {fmt_duration(span)} "
            f"({100 * busy / span:.0f}%)"
        )
    return out


def comm_text(collective: str, pg: str, seq: float, group_size: int = 0) -> str:
    """What the hover says of a communication row: ``"allreduce · process group 0 · seq 12 · 8 ranks"``
    (each part only where the trace says it)."""
    parts = [collective, f"process group {pg}" if pg else "process group not named"]
    if not np.isnan(seq):
        parts.append(f"seq {int(seq)}")
    if group_size > 0:
        parts.append(f"{group_size} rank{'s' if group_size != 1 else ''}")
    return " · ".join(parts)


def _darker(color: str, f: float = 0.6) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({int(r * f)},{int(g * f)},{int(b * f)})"


def escape_label(s: str) -> str:
    """Text from a trace made inert for Plotly, which renders a subset of HTML (links, styled spans) in
    labels, hover texts and annotations: a thread named ``<a href=...>`` must not become a link."""
    return html.escape(str(s), quote=False)


def lane_traces(
    view: TimelineView,
    window: Window,
    width_px: int,
    *,
    lanes: list[str] | None = None,
    xaxis: str = "x",
    yaxis: str = "y",
    legend: set[str] | None = None,
) -> Drawn:
    """The traces that draw ``view``'s lanes over ``window`` at ``width_px`` pixels (merged blocks)."""
    t0, t1 = window
    ns_per_px = (t1 - t0) / max(width_px, 50)
    shown = _shown_rows(view, lanes)
    row_of = {r: y for y, r in enumerate(shown)}
    # a large job's folded lanes: busy share per pixel column (heatmap rows), not blocks (tracer.dashboard.job_view)
    grid = [r for r in shown if view.rows[r].folded] if hasattr(view, "fold_grid") else []
    drawn_as_blocks = [r for r in shown if not view.rows[r].folded] if grid else shown
    blocks, src = view.blocks_in(drawn_as_blocks, t0, t1, ns_per_px)
    traces: list[go.Scatter] = []
    if len(blocks):
        row = blocks.group // N_CLASSES
        cls = blocks.group % N_CLASSES
        y_of_row = np.full(len(view.rows), -1, dtype=np.int64)
        y_of_row[shown] = np.arange(len(shown))
        y = y_of_row[row].astype(np.float64)
        x0 = blocks.start_ns.astype(np.float64)
        x1 = np.maximum(blocks.end_ns.astype(np.float64), x0 + ns_per_px)  # at least a pixel wide
        for k in np.unique(cls):
            m = cls == k
            c = CLASSES[int(k)]
            half = BAR_HALF * (0.7 if c.key in FILL_PATTERNS else 1.0)
            nan = np.full(int(m.sum()), np.nan)
            xs = np.column_stack([x0[m], x1[m], x1[m], x0[m], x0[m], nan]).ravel() / 1e6
            ys = np.column_stack(
                [y[m] - half, y[m] - half, y[m] + half, y[m] + half, y[m] - half, nan]
            ).ravel()
            pattern = FILL_PATTERNS.get(c.key)
            first = legend is None or c.key not in legend
            if legend is not None:
                legend.add(c.key)
            traces.append(
                go.Scatter(
                    x=xs,
                    _validate=False,  # (see "Unchecked traces" above)
                    y=ys.astype(np.float32),
                    mode="lines",
                    fill="toself",
                    fillcolor=c.color,
                    fillpattern=dict(pattern, bgcolor=c.color) if pattern else None,
                    # A darker edge of the same hue, so back-to-back intervals stay two bars.
                    line=dict(width=0.7, color=pattern["fgcolor"] if pattern else _darker(c.color)),
                    name=c.label,
                    legendgroup=c.key,
                    showlegend=first,
                    hoverinfo="skip",
                    xaxis=xaxis,
                    yaxis=yaxis,
                    uid=f"{yaxis}-{c.key}",
                )
            )
        names = _range_names(view, blocks, src, cls, x0, x1, y, window, ns_per_px, xaxis, yaxis)
        if names is not None:
            traces.append(names)
        traces.append(_hover_trace(view, blocks, src, cls, x0, x1, y, ns_per_px, xaxis, yaxis))
    cells = 0
    if grid:
        heatmaps, cells = _fold_heatmaps(view, grid, row_of, window, width_px, xaxis, yaxis)
        traces += heatmaps
    return Drawn(traces, [view.rows[i] for i in shown], len(blocks) + cells, blocks.n_in_window + cells, row_of)


def _fold_heatmaps(view: Any, rows: list[int], row_of: dict[int, int], window: Window, width_px: int, xaxis: str,
                   yaxis: str) -> tuple[list[Any], int]:
    """A large job's folded lanes over ``window``: per colour class, one heatmap of the busy share of each pixel
    column (:meth:`tracer.dashboard.job_view.JobView.fold_grid`) on the rows that have it; and the cells drawn
    (not empty)."""
    bins = max(int(width_px), 50)
    out: list[Any] = []
    cells = 0
    x = np.linspace(window[0], window[1], bins + 1) / 1e6
    for k, class_rows, share in view.fold_grid(rows, int(window[0]), int(window[1]), bins):
        ys = np.array([row_of[r] for r in class_rows], dtype=np.int64)
        lo, hi = int(ys.min()), int(ys.max())
        z = np.zeros((hi - lo + 1, bins), dtype=np.uint8)
        z[ys - lo] = share
        cells += int(np.count_nonzero(share))
        c = CLASSES[int(k)]
        r, g, b = (int(c.color[i : i + 2], 16) for i in (1, 3, 5))
        out.append(go.Heatmap(
            _validate=False,  # (see "Unchecked traces" above)
            z=z, x=x, y=np.arange(lo, hi + 2) - 0.5, zmin=0, zmax=100, showscale=False, ygap=3,
            colorscale=[[0, f"rgba({r},{g},{b},0)"], [0.005, f"rgba({r},{g},{b},0.25)"], [1, f"rgb({r},{g},{b})"]],
            hovertemplate=f"<b>{escape_label(c.label)}</b> (a folded rank)<br>%{{x:.4f}} ms: busy %{{z}}%"
                          "<extra></extra>",
            name=f"{c.label} (folded)", xaxis=xaxis, yaxis=yaxis, uid=f"{yaxis}-fold-{c.key}",
        ))
    return out, cells


def fit_label(name: str, width_px: float, char_px: float = LABEL_CHAR_PX) -> str | None:
    """``name`` cut to what ``width_px`` pixels hold (ending in "…" when cut); None if not even 3 characters
    and the ellipsis fit."""
    room = int((width_px - 2 * LABEL_PAD_PX) // char_px)
    if room >= len(name):
        return name
    if room < 4:
        return None
    return name[: room - 1].rstrip() + "…"


def _range_names(
    view: TimelineView,
    blocks: Blocks,
    src: np.ndarray,
    cls: np.ndarray,
    x0: np.ndarray,
    x1: np.ndarray,
    y: np.ndarray,
    window: Window,
    ns_per_px: float,
    xaxis: str,
    yaxis: str,
) -> go.Scatter | None:
    """A text trace naming each NVTX / ``record_function`` range on its bar, where the bar is wide enough.

    Only unmerged ranges in the window are looked at (merged blocks are narrow by construction), and only
    their visible part counts, so the cost follows what is drawn, not the size of the trace."""
    x_lo = np.maximum(x0, window[0])
    x_hi = np.minimum(x1, window[1])
    visible_px = (x_hi - x_lo) / ns_per_px
    pick = np.flatnonzero(
        (cls == CLASS_INDEX["range"]) & (blocks.count == 1) & (src >= 0) & (visible_px >= MIN_LABEL_PX)
    )
    if not pick.size:
        return None
    names = view.event_rows(src[pick])["name"].astype(str).to_numpy()
    xs, ys, texts = [], [], []
    # Ranges of one sub-row may overlap (a thread's deepest nesting levels share the last one, and a job's ranks'
    # gloo ranges): the widest bars are named first, and a name that would cover one already placed on its row is
    # left out (its hover still names it).
    placed: dict[float, list[tuple[float, float]]] = {}
    for j in np.argsort(-visible_px[pick], kind="stable").tolist():
        b = pick[j]
        text = fit_label(names[j], visible_px[b])
        if text is None:
            continue
        mid_px = (x_lo[b] + x_hi[b]) / 2 / ns_per_px
        half = len(text) * LABEL_CHAR_PX / 2 + LABEL_PAD_PX
        row = placed.setdefault(float(y[b]), [])
        if any(lo < mid_px + half and mid_px - half < hi for lo, hi in row):
            continue
        row.append((mid_px - half, mid_px + half))
        xs.append((x_lo[b] + x_hi[b]) / 2e6)
        ys.append(float(y[b]))
        texts.append(escape_label(text))
    if not texts:
        return None
    return go.Scatter(
        x=xs,
        _validate=False,  # (see "Unchecked traces" above)
        y=ys,
        mode="text",
        text=texts,
        textposition="middle center",
        textfont=dict(family=FONT, size=LABEL_FONT_PX, color="#222"),
        hoverinfo="skip",
        showlegend=False,
        name="range names",
        xaxis=xaxis,
        yaxis=yaxis,
        uid=f"{yaxis}-range-names",
    )


def _hover_trace(view, blocks, src, cls, x0, x1, y, ns_per_px, xaxis, yaxis) -> go.Scatter:
    """Invisible markers along each block (one per ~HOVER_STEP_PX) that carry its hover text."""
    texts = np.array(_hover_texts(view, blocks, src, cls), dtype=object)
    width_px = (x1 - x0) / ns_per_px
    k = np.clip(np.ceil(width_px / HOVER_STEP_PX), 1, 200).astype(np.int64)
    idx = np.repeat(np.arange(len(blocks)), k)
    j = np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k)
    frac = (j + 0.5) / np.repeat(k, k)
    hx = (x0[idx] + frac * (x1[idx] - x0[idx])) / 1e6
    return go.Scatter(
        x=hx,
        _validate=False,  # (see "Unchecked traces" above)
        y=y[idx].astype(np.float32),
        # No markers are drawn (no DOM node per point), yet plotly.js hovers and clicks on the points.
        mode="none",
        text=texts[idx].tolist(),
        customdata=src[idx].tolist(),  # a typed array here never reaches clickData (plotly.js 3)
        hovertemplate="%{text}<extra></extra>",
        showlegend=False,
        name="hover",
        xaxis=xaxis,
        yaxis=yaxis,
        uid=f"{yaxis}-hover",
    )


def _lane_shapes(rows: list[Row], yref: str, xref: str) -> list[dict[str, Any]]:
    """Shaded bands behind every other lane and a line between devices (and ranks): where one lane ends is
    obvious."""
    shapes: list[dict[str, Any]] = []
    lane_idx = -1
    prev_lane = prev_dev = None
    for y, r in enumerate(rows):
        if r.lane != prev_lane:
            lane_idx += 1
            if prev_dev is not None and (r.rank, r.device) != prev_dev:
                shapes.append(
                    dict(
                        type="line",
                        xref=f"{xref} domain",
                        yref=yref,
                        x0=0,
                        x1=1,
                        y0=y - 0.5,
                        y1=y - 0.5,
                        line=dict(color="#888", width=1),
                    )
                )
        if lane_idx % 2 == 1:
            shapes.append(
                dict(
                    type="rect",
                    xref=f"{xref} domain",
                    yref=yref,
                    x0=0,
                    x1=1,
                    y0=y - 0.5,
                    y1=y + 0.5,
                    fillcolor="#f3f5f8",
                    line=dict(width=0),
                    layer="below",
                )
            )
        prev_lane, prev_dev = r.lane, (r.rank, r.device)
    return shapes


def launch_of(view: TimelineView, src: int) -> dict[str, Any] | None:
    """The host call that launched GPU work row ``src`` (the timeline's launch join: same rank, process and
    correlation id), or None."""
    if src < 0 or src >= view.n_events:
        return None
    launch = view.launch_pos(src)
    if launch < 0:
        return None
    both = view.event_rows(np.array([src, launch], dtype=np.int64))
    row, lrow = both.iloc[0], both.iloc[1]
    return {
        "work_src": int(src),
        "work_name": str(row["name"]),
        "work_start_ns": int(row["start_ns"]) - view.t0_ns,
        "work_end_ns": int(row["end_ns"]) - view.t0_ns,
        "launch_src": int(launch),
        "launch_name": str(lrow["name"]),
        "launch_start_ns": int(lrow["start_ns"]) - view.t0_ns,
        "launch_end_ns": int(lrow["end_ns"]) - view.t0_ns,
        "tid": int(lrow["tid"]),
        "correlation": int(row["correlation"]),
    }


def _highlight(
    view: TimelineView, drawn: Drawn, link: dict[str, Any], xref: str, yref: str
) -> tuple[list[dict[str, Any]], go.Scatter | None]:
    """Outlines of the clicked work and its launch, and the arrow from the launch to the work.

    The arrow is a line trace with an arrowhead marker rather than an annotation: traces are clipped to the
    plot area, so when the launch lies outside the window the arrow leaves through the plot's edge instead of
    being drawn across the lane labels (annotation arrows are never clipped)."""
    shapes = []
    ys = {}
    for key in ("work", "launch"):
        r = view.row_of_src(link[f"{key}_src"])
        if r is not None and r in drawn.row_of:
            y = drawn.row_of[r]
            ys[key] = y
            shapes.append(
                dict(
                    type="rect",
                    xref=xref,
                    yref=yref,
                    x0=link[f"{key}_start_ns"] / 1e6,
                    x1=link[f"{key}_end_ns"] / 1e6,
                    y0=y - 0.48,
                    y1=y + 0.48,
                    line=dict(color="#000", width=2),
                    fillcolor="rgba(0,0,0,0)",
                )
            )
    if len(ys) < 2:
        return shapes, None
    arrow = go.Scatter(
        x=[link["launch_end_ns"] / 1e6, link["work_start_ns"] / 1e6],
        y=[ys["launch"], ys["work"]],
        mode="lines+markers",
        line=dict(color="#000", width=1.5),
        marker=dict(symbol=["circle", "arrow"], size=[5, 11], angleref="previous", color="#000"),
        cliponaxis=True,
        hoverinfo="skip",
        showlegend=False,
        name="launch → work",
        xaxis=xref,
        yaxis=yref,
        uid=f"{yref}-launch-arrow",
    )
    return shapes, arrow


def _base_layout(height: int) -> dict[str, Any]:
    return dict(
        height=height,
        margin=dict(l=10, r=20, t=36, b=44),
        plot_bgcolor="#ffffff",
        paper_bgcolor="#ffffff",
        font=dict(family=FONT, size=12, color="#222"),
        hovermode="closest",
        hoverdistance=14,
        dragmode="zoom",
        legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom", xanchor="left", bgcolor="rgba(0,0,0,0)"),
        hoverlabel=dict(bgcolor="#fff", font=dict(family=FONT, size=12), align="left"),
    )


def _yaxis(rows: list[Row]) -> dict[str, Any]:
    n = len(rows)
    return dict(
        tickvals=list(range(n)),
        ticktext=[escape_label(r.label) for r in rows],  # thread names come from the trace
        range=[n - 0.5, -0.5],
        fixedrange=True,
        showgrid=False,
        zeroline=False,
        automargin=True,
        ticks="",
        tickfont=dict(size=11),
    )


def _xaxis(window: Window, title: str | None) -> dict[str, Any]:
    return dict(
        range=[window[0] / 1e6, window[1] / 1e6],
        title=dict(text=title, standoff=6) if title else None,
        showgrid=True,
        gridcolor="#e6e8eb",
        zeroline=False,
        ticksuffix=" ms",
        showline=True,
        linecolor="#999",
    )


def timeline_figure(
    view: TimelineView | Timeline,
    window: Window | None = None,
    *,
    width_px: int = DEFAULT_WIDTH_PX,
    lanes: list[str] | None = None,
    highlight: int | None = None,
    uirevision: str | None = None,
    path: PathPieces | None = None,
    outline: np.ndarray | None = None,
) -> go.Figure:
    """The Gantt chart of one run over ``window`` (ns since its first event; default: all of it).

    ``lanes`` keeps only those lane keys; ``highlight`` is an events row of GPU work whose launching host
    call gets outlined and linked by an arrow; ``path`` is drawn as a thin line along the rows its pieces lie on
    (:func:`path_trace`); ``outline`` (positions in the view's sorted interval arrays: a source line's intervals)
    is outlined by :func:`outline_trace`, the figure's last trace, there even when empty so that a page can
    replace it alone. ``layout.meta`` says what was drawn (window, blocks, intervals, path blocks, and
    ``outlined``: the outlined intervals in the window).
    """
    if isinstance(view, Timeline):
        view = prepare(view)
    window = clamp_window(view, window)
    drawn = lane_traces(view, window, width_px, lanes=lanes)
    traces = list(drawn.traces)
    shapes = _lane_shapes(drawn.rows, "y", "x")
    annotations: list[dict[str, Any]] = []
    link = launch_of(view, highlight) if highlight is not None else None
    if link:
        outlines, arrow = _highlight(view, drawn, link, "x", "y")
        shapes += outlines
        if arrow is not None:
            traces.append(arrow)
    path_blocks = path_crossed = 0
    if path is not None and len(path):
        line = path_trace(view, drawn, path, window, width_px)
        if line is not None:
            traces.append(line)
            path_blocks = len(line.x) // 3
            path_crossed = rows_crossed(line)
    outlined = 0
    if outline is not None:  # (last: the timeline page replaces this trace alone when only the line changes)
        trace, outlined = outline_trace(view, drawn.row_of, outline, window, width_px)
        traces.append(trace)
    if not drawn.rows:
        annotations.append(
            dict(text="No lanes selected", xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
        )
    layout = dict(
        **_base_layout(max(220, ROW_PX * len(drawn.rows) + 90)),
        # A new revision per window: the server's range always replaces whatever the user's last zoom,
        # pan or double-click (autorange) left, while layout.uirevision keeps legend toggles.
        xaxis=dict(
            _xaxis(window, "time since the run's first event"),
            autorange=False,
            uirevision=f"{window[0]}:{window[1]}",
        ),
        yaxis=_yaxis(drawn.rows),
        shapes=shapes,
        annotations=annotations,
        uirevision=uirevision,
        meta=dict(
            window_ns=list(window), blocks=drawn.blocks, intervals=drawn.intervals, rows=len(drawn.rows),
            path_blocks=path_blocks, path_rows_crossed=path_crossed, outlined=outlined,
        ),
    )
    # (the traces and the layout given at once: a figure made and then updated went through plotly's update
    # machinery, ~15 ms a zoom, and each trace added was checked as it came)
    fig = go.Figure(data=traces, layout=layout)
    return fig


def path_trace(
    view: TimelineView, drawn: Drawn, path: PathPieces, window: Window, width_px: int
) -> go.Scatter | None:
    """The critical path over ``window`` as one thin line trace: a segment along the row of each piece, joined
    where the path moves from one row to another. Pieces narrower than a few pixels merge as the lanes' intervals
    do (:func:`tracer.dashboard.lod.merge_blocks`; a merged block is drawn on the row of its longest piece), so
    the line never has more than :data:`PATH_BUDGET_PER_PX` blocks per pixel of width, however long the path.
    A piece on a row not shown (a hidden lane) leaves a break in the line. None when no piece is in the window."""
    t0, t1 = window
    width = max(width_px, 50)
    ns_per_px = (t1 - t0) / width
    budget = max(int(PATH_BUDGET_PER_PX * width), 1)
    s, e = path.start_ns, path.end_ns
    big_px = 3.0
    blocks = merge_blocks(s, e, np.zeros(s.size, np.int64), t0, t1, ns_per_px, big_px=big_px)
    while len(blocks) > budget:  # (pieces tile the path, so at most ~2/3 of a block per pixel: never in practice)
        big_px *= 2
        blocks = merge_blocks(s, e, np.zeros(s.size, np.int64), t0, t1, ns_per_px, big_px=big_px)
    if not len(blocks):
        return None
    # each block's longest piece (within the window) gives its row and its hover
    first = blocks.first
    member = np.repeat(np.arange(len(blocks)), blocks.count)
    k = first[member] + (np.arange(member.size) - np.repeat(np.cumsum(blocks.count) - blocks.count, blocks.count))
    dur = np.minimum(e[k], t1) - np.maximum(s[k], t0)
    order = np.lexsort((-dur, member))
    longest = k[order[np.r_[0, np.flatnonzero(np.diff(member[order])) + 1]]]
    row_of_src = _chart_rows(view)
    src = path.src[longest]
    view_row = np.where(src >= 0, row_of_src[np.clip(src, 0, None)], -1)
    y = np.array([drawn.row_of.get(int(r), np.nan) if r >= 0 else np.nan for r in view_row], dtype=np.float64)
    x0 = blocks.start_ns.astype(np.float64) / 1e6
    x1 = np.maximum(blocks.end_ns.astype(np.float64), blocks.start_ns + ns_per_px) / 1e6
    texts = []
    for b, j in enumerate(longest.tolist()):
        what = f"{escape_label(str(path.label[j]))}: {escape_label(str(path.name[j]))[:90]}"
        if blocks.count[b] > 1:
            what = f"{blocks.count[b]:,} pieces merged (zoom in for each); the longest: {what}"
        texts.append(f"<b>critical path</b><br>{what}<br>{x0[b]:.4f} – {x1[b]:.4f} ms")
    # (x0, y), (x1, y) per block, then the next block's start: the line steps between rows where the path does
    xs = np.column_stack([x0, x1, x1]).ravel()
    nxt = np.r_[y[1:], np.nan]
    ys = np.column_stack([y, y, nxt]).ravel() - 0.44  # along the top edge of the bars: the bars stay readable
    hover = np.repeat(np.array(texts, dtype=object), 3)
    custom = np.repeat(src, 3)  # a click on the line is a click on the piece's interval (its launch link)
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        line=dict(color=PATH_COLOR, width=PATH_WIDTH),
        connectgaps=False,
        text=hover.tolist(),
        customdata=custom.tolist(),
        hovertemplate="%{text}<extra></extra>",
        name="critical path",
        showlegend=True,
        uid="y-critical-path",
    )


#: The outline of a chosen source line's intervals: the diff table's highlight colour (dashboard/diff_view.py), a
#: magenta far from every lane colour and from the black of the path and the launch arrow.
OUTLINE_COLOR = "#e6007e"
OUTLINE_NAME = "source line"


def outline_trace(
    view: TimelineView, row_of: dict[int, int], positions: np.ndarray, window: Window, width_px: int
) -> tuple[go.Scatter, int]:
    """An outline around each of the intervals at ``positions`` (in the view's sorted arrays, ascending) that lies
    in ``window`` on a row shown (``row_of``: view row -> y), as one line trace of NaN-separated rectangles, with
    the number of those intervals. Intervals narrower than a few pixels merge as the lanes' do
    (:func:`tracer.dashboard.lod.merge_blocks`), so the trace holds at most a few blocks per pixel of a row
    however many intervals the line launched. Where there is nothing to outline the trace is still there, one gap
    point."""
    t0, t1 = window
    ns_per_px = (t1 - t0) / max(width_px, 50)
    pos = np.asarray(positions, dtype=np.int64)
    # nothing to outline: one gap point, which draws nothing yet keeps the trace's group in the plot (an empty
    # trace gets none, and whatever counts the drawn traces against the figure's would wait for it forever)
    x: Any = [None]
    y: Any = [None]
    n = 0
    if pos.size and row_of:
        y_of_row = np.full(len(view.rows), -1, dtype=np.int64)
        y_of_row[list(row_of)] = list(row_of.values())
        pos = pos[y_of_row[view.group[pos] // N_CLASSES] >= 0]
        # (ascending positions are sorted by (group, start), as merge_blocks needs)
        blocks = merge_blocks(view.start_ns[pos], view.end_ns[pos], view.group[pos], t0, t1, ns_per_px)
        n = blocks.n_in_window
        if len(blocks):
            x0 = blocks.start_ns.astype(np.float64)
            x1 = np.maximum(blocks.end_ns.astype(np.float64), x0 + ns_per_px) / 1e6  # at least a pixel wide
            x0 /= 1e6
            yy = y_of_row[blocks.group // N_CLASSES].astype(np.float64)
            nan = np.full(len(blocks), np.nan)
            x = np.column_stack([x0, x1, x1, x0, x0, nan]).ravel()
            y = np.column_stack([yy - 0.46, yy - 0.46, yy + 0.46, yy + 0.46, yy - 0.46, nan]).ravel()
    trace = go.Scatter(
        x=x, y=y, mode="lines", line=dict(color=OUTLINE_COLOR, width=2), hoverinfo="skip", showlegend=False,
        name=OUTLINE_NAME, cliponaxis=True, uid="y-source-line",
    )
    return trace, n


def rows_crossed(line: go.Scatter) -> int:
    """How many rows the path's line crosses in all where it steps from one row to another: the ink it lays over
    the bars between (a busy run's path steps between the host's and the GPU's rows hundreds of times)."""
    ys = np.asarray(line.y, dtype=np.float64)
    ys = ys[~np.isnan(ys)]
    return int(round(float(np.abs(np.diff(ys)).sum()))) if ys.size > 1 else 0


def _chart_rows(view: TimelineView) -> np.ndarray:
    """Per events row (position), the view row it is drawn on; -1 where it is not drawn (kept on the view)."""
    cache = view.__dict__
    if "_chart_rows" not in cache:
        out = np.full(len(view.timeline.events), -1, dtype=np.int64)
        drawn = view.src >= 0  # (the bands' and folded lanes' unions have no events row: -1)
        out[view.src[drawn]] = view.group[drawn] // N_CLASSES
        cache["_chart_rows"] = out
    found: np.ndarray = cache["_chart_rows"]
    return found


def short_lane_label(label: str, limit: int = 16) -> str:
    """A lane's label short enough for the overview strip: "GPU 0 · stream 7" → "GPU0 s7",
    "NVTX · thread 424 (python3)" → "NVTX t424", "GPU 0 · compute ∩ copy" → "GPU0 overlap",
    "rank 1 · GPU 0 · stream 7" → "r1 GPU0 s7"."""
    s = label.replace(" · compute ∩ copy", " overlap").replace(" · compute ∩ comm", " comm∩")
    s = re.sub(r"^rank (\d+) · ", r"r\1 ", s)
    s = re.sub(r"GPU (\d+)", r"GPU\1", s)
    s = re.sub(r"stream (\d+)", r"s\1", s)
    s = re.sub(r"thread (\d+)(?: \([^)]*\))?", r"t\1", s)
    s = s.replace(" · ", " ")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def minimap_figure(view: TimelineView, window: Window | None = None, *, bins: int = 600) -> go.Figure:
    """Lanes × time busy-fraction heatmap of the whole run, with the current window outlined.

    The honest overview: a pixel column's shade is the share of that time the lane was busy, however many
    intervals that took. Its x axis is fixed to the whole run; a drag across it is a horizontal selection
    (``selectedData["range"]["x"]``, in ms), which the timeline page turns into the main chart's window.
    """
    labels, z = view.lane_busy(bins)
    span = max(view.span_ns, 1)
    x = (np.arange(bins) + 0.5) * (span / bins) / 1e6
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=x,
            y=[escape_label(label) for label in labels],  # category axis: the hover names the lane in full
            colorscale=[[0, "#ffffff"], [0.02, "#e3eef8"], [1, "#08306b"]],
            zmin=0,
            zmax=1,
            showscale=False,
            hovertemplate="%{y}<br>%{x:.3f} ms: busy %{z:.0%}<extra></extra>",
        )
    )
    fig.update_layout(
        **_base_layout(max(70, min(220, 11 * max(len(labels), 1) + 34))),
        xaxis=dict(
            range=[0, span / 1e6],
            fixedrange=True,  # the strip always shows the whole run: a drag selects, it never zooms
            showgrid=False,
            zeroline=False,
            ticksuffix=" ms",
            tickfont=dict(size=10),
        ),
        yaxis=dict(
            autorange="reversed",
            fixedrange=True,
            tickvals=[escape_label(label) for label in labels],
            ticktext=[escape_label(short_lane_label(label)) for label in labels],  # cut first: no half entity
            tickfont=dict(size=9),
            ticks="",
            automargin=True,
            showgrid=False,
            zeroline=False,
            type="category",
        ),
        shapes=minimap_shapes(view, window),
    )
    fig.update_layout(
        margin=dict(l=10, r=20, t=4, b=24),
        showlegend=False,
        dragmode="select",
        selectdirection="h",
        # the selection box goes as soon as the main chart has jumped (the page clears layout.selections)
        newselection=dict(line=dict(color="#D55E00", width=1, dash="dot")),
    )
    return fig


def minimap_shapes(view: TimelineView, window: Window | None) -> list[dict[str, Any]]:
    """The outline of ``window`` on the minimap (none for the whole run). A zoom only sends these."""
    if window is None:
        return []
    lo, hi = clamp_window(view, window)
    if (lo, hi) == full_window(view):
        return []
    return [
        dict(
            type="rect",
            xref="x",
            yref="paper",
            x0=lo / 1e6,
            x1=hi / 1e6,
            y0=0,
            y1=1,
            line=dict(color="#D55E00", width=2),
            fillcolor="rgba(213,94,0,0.08)",
        )
    ]


def compare_figure(
    views: list[TimelineView],
    names: list[str],
    window: Window | None = None,
    *,
    width_px: int = DEFAULT_WIDTH_PX,
) -> go.Figure:
    """Runs stacked on one shared time axis (ns since each run's own first event), zoomed together."""
    if window is None:
        window = (0, max(max(v.span_ns for v in views), 1))
    n_rows = [max(len(v.rows), 1) for v in views]
    total = sum(n_rows)
    gap = 0.1
    fig = go.Figure()
    legend: set[str] = set()
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    layout: dict[str, Any] = {}
    top = 1.0
    meta = []
    usable = 1.0 - gap * (len(views) - 1)
    for i, (view, name) in enumerate(zip(views, names)):
        ax = "" if i == 0 else str(i + 1)
        h = usable * n_rows[i] / total
        drawn = lane_traces(view, window, width_px, xaxis=f"x{ax}", yaxis=f"y{ax}", legend=legend)
        fig.add_traces(drawn.traces)
        shapes += _lane_shapes(drawn.rows, f"y{ax}", f"x{ax}")
        y_axis = _yaxis(drawn.rows)
        y_axis["domain"] = [max(0.0, top - h), min(1.0, top)]
        x_axis = _xaxis(window, "time since each run's first event" if i == len(views) - 1 else None)
        x_axis["anchor"] = f"y{ax}"
        if i:
            x_axis["matches"] = "x"
        layout[f"yaxis{ax}"] = y_axis
        layout[f"xaxis{ax}"] = x_axis
        annotations.append(
            dict(
                text=f"<b>{escape_label(name)}</b>",
                xref="paper",
                yref="paper",
                x=0,
                y=top,
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=13),
            )
        )
        meta.append(dict(blocks=drawn.blocks, intervals=drawn.intervals, rows=len(drawn.rows)))
        top -= h + gap
    fig.update_layout(
        **_base_layout(ROW_PX * total + 160 + 40 * len(views)),
        shapes=shapes,
        annotations=annotations,
        meta=dict(window_ns=[int(window[0]), int(window[1])], runs=meta),
        **layout,
    )
    fig.update_layout(legend=dict(y=1.06))
    return fig
