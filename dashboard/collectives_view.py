"""The collectives of a job on its timeline page: a sortable table of every matched instance (a click zooms
the timeline to it) and the per-rank skew and clock bounds — the ``collectives`` analysis' result
(:func:`tracer.analysis.comm.collectives`), as ``tracer summary`` prints it.

The table is built on the server from :attr:`TimelineView.collectives`; each row carries only its position
(``id``), and a click sends that position back, from which the server finds the window itself: a request
cannot make the page zoom anywhere a collective is not.
"""

from __future__ import annotations

from typing import Any

from dash import html

from tracer.analysis.comm import Collectives
from tracer.dashboard import ids, row_table
from tracer.dashboard.figures import fmt_bytes, fmt_duration
from tracer.dashboard.model import TimelineView
from tracer.dashboard.row_table import clickable_table

#: Rows sent to the browser at most (a long job has tens of thousands of collectives: the largest skews
#: first, so that the stragglers that matter are always in the table).
MAX_ROWS = 2000
PAGE_SIZE = 12

COLUMNS: tuple[tuple[str, str, str], ...] = (  # (id, header, type)
    ("collective", "Collective", "text"),
    ("pg", "Process group", "text"),
    ("seq", "Seq", "numeric"),
    ("start_ms", "Start ms", "numeric"),
    ("skew_us", "Skew µs", "numeric"),
    ("straggler", "Straggler", "numeric"),
    ("dur_us", "Duration µs", "numeric"),
    ("size", "Size", "text"),
    ("busbw", "Bus GB/s", "numeric"),
    ("ranks", "Ranks", "numeric"),
)


def table_rows(view: TimelineView, limit: int = MAX_ROWS) -> list[dict[str, Any]]:
    """One row per collective instance (the ``limit`` largest skews, in time order), numbers in the units of
    the headers; ``id`` is the instance's position in :attr:`TimelineView.collectives`."""
    rows = view.collectives.rows
    chosen: list[int] = list(range(len(rows)))
    if len(rows) > limit:
        chosen = sorted(sorted(chosen, key=lambda i: -rows[i].skew_ns)[:limit])
    out = []
    for i in chosen:
        c = rows[i]
        out.append({
            "id": i,
            "collective": c.collective,
            "pg": c.pg or "–",
            "seq": c.seq,
            "start_ms": round((c.start_ns - view.t0_ns) / 1e6, 4),
            "skew_us": round(c.skew_ns / 1e3, 1),
            "straggler": c.straggler,
            "dur_us": round(c.dur_ns / 1e3, 1),
            "size": fmt_bytes(c.bytes) if c.bytes is not None else "–",
            "busbw": c.busbw_gb_s,
            "ranks": c.ranks,
        })
    return out


def rank_skew_table(result: Collectives) -> html.Table:
    """Per rank: collectives shared, how often it came last, how late on average and at most, and what the
    collectives allow of its clock against the reference rank's."""
    head = ["Rank", "Collectives", "Straggler", "Late (mean)", "Late (max)", "Clock offset allowed", "Clock fix"]
    body = []
    for r in result.ranks:
        if r.offset_lo_ns is None or r.offset_hi_ns is None:
            bounds = "no collective shared with the reference"
        elif r.offset_lo_ns > r.offset_hi_ns:
            bounds = f"none fits: [{fmt_signed(r.offset_lo_ns)}, {fmt_signed(r.offset_hi_ns)}]"
        else:
            bounds = f"[{fmt_signed(r.offset_lo_ns)}, {fmt_signed(r.offset_hi_ns)}]"
        fix = "–" if r.clock_fix_ns is None else fmt_signed(r.clock_fix_ns)
        cells = [str(r.rank) + (" (reference)" if r.rank == result.reference_rank else ""), f"{r.collectives:,}",
                 f"{r.straggler:,}", fmt_duration(r.mean_late_ns), fmt_duration(r.max_late_ns), bounds, fix]
        body.append(html.Tr([html.Td(c, className="num" if 0 < k < 5 else "") for k, c in enumerate(cells)]))
    return html.Table(
        [html.Caption("Per rank: straggler = the instances it started last (the others waited for it); late = "
                      "its start − the instance's earliest; the clock offsets every shared collective allows "
                      "(a collective cannot end on one rank before it started on another)."),
         html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(body)],
        id=ids.TL_RANK_SKEW,
        className="table diff-table",
    )


def fmt_signed(ns: int) -> str:
    return ("−" if ns < 0 else "+" if ns > 0 else "") + fmt_duration(abs(ns))


def section(view: TimelineView) -> html.Div | None:
    """The page's collectives section; None when the timeline has no matched collective."""
    result = view.collectives
    if not result.rows:
        return None
    rows = table_rows(view)
    shown = "" if len(rows) == len(result.rows) else f" (the {len(rows):,} largest skews shown)"
    where = "GPU kernels" if result.rows[0].where == "gpu" else "host records (no comm kernels in the trace)"
    return html.Div(
        [
            html.H3("Collectives"),
            html.P(
                f"{len(result.rows):,} collective instances matched across the ranks, from {where}{shown}. "
                "Skew: the latest start − the earliest; the straggler started last; duration is the "
                "straggler's. Sort by a header; click a row to show that collective above.",
                className="muted small",
            ),
            clickable_table(ids.TL_COLL_TABLE, COLUMNS, rows, page_size=PAGE_SIZE,
                            column_style={"straggler": {"fontWeight": "bold"}}),
            rank_skew_table(result),
        ],
        id=ids.TL_COLLECTIVES,
        className="collectives-section",
    )


def row_of_cell(cell: Any, n: int) -> int:
    """The collective a clicked cell (the grid's ``cellClicked``) belongs to, by its row id;
    :class:`UsageError` for a cell that names none of the ``n`` instances."""
    return row_table.row_of_cell(cell, n, table="collectives table", thing="collective")
