"""Runs page: every run the dashboard knows, sortable and filterable; open one, or pick two to compare."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update

from tracer.dashboard import ids
from tracer.dashboard.data import (
    RunInfo,
    RunStore,
    backend_text,
    command_text,
    device_text,
    mode_short,
    params_text,
    rank_count,
    run_date,
    run_status,
    speedups,
    variant_text,
    what_ran,
)
from tracer.dashboard.pages.common import SPEEDUP_SOURCE, alert, on_error, speedup_text

#: (column id, header, numeric?) in display order.
COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("name", "Run", False),
    ("scenario", "Scenario", False),
    ("variant", "Variant · parameters", False),
    ("devices", "Device", False),
    ("date", "Recorded", False),
    ("span_ms", "Span ms", True),
    ("compute_ms", "Compute ms", True),
    ("copy_ms", "Copy ms", True),
    ("overlap_ms", "Overlap ms", True),
    ("hidden_pct", "Copy hidden", True),
    ("speedup", "Speedup", True),
)


#: Header tooltips: what a column holds, where the page alone cannot say it.
HEADER_TITLES = {
    "variant": "The variant recorded (all: every variant, one after another) and, below it, the scenario's "
    "parameters from the run's meta.json (tracer scenarios explains each)",
    "devices": "Device, and how the scenario used it: the mode of tracer record",
    "date": "When it was recorded (UTC: meta.json, else the trace's own clock, else the file's date) and, below, "
    "the profiler that recorded it (run directories) or what wrote the trace",
    "compute_ms": "Per GPU: union of its kernels. A run without GPU work shows its host threads' busy time "
    "(the union of each thread's framework ops) and its op count across these four columns",
    "speedup": "The scenario's own speedup, first time / second time (above 1: the second way is faster), "
    + SPEEDUP_SOURCE,
    "hidden_pct": "Overlap / copy: the share of copy time hidden behind compute",
}


def run_row(info: RunInfo, summary: dict[str, Any] | None) -> dict[str, Any]:
    """One table row: display text per column plus a sort value for the numeric ones."""
    meta = info.run_meta
    device, how = device_text(meta, summary)
    row: dict[str, Any] = {
        "key": info.key,
        "name": info.name,
        "origin": info.origin,
        "scenario": what_ran(meta),
        "scenario_title": command_text(meta, limit=1000) or None,  # (a long command in full, on hover)
        "variant": variant_text(meta),
        "params": params_text(meta),
        "variant_detail": params_text(meta),  # under the variant: runs that differ only here stay apart
        "trace": backend_text(meta, (summary or {}).get("format")),
        "devices": device,
        "devices_detail": mode_short(meta),
        "devices_title": how,
        "date": run_date(info),
        "date_detail": backend_text(meta, (summary or {}).get("format")),
        "error": info.error,
        "status": run_status(meta),
        "ranks": rank_count(info, summary),
    }
    if row["ranks"] > 1:  # a job: its rank count under the device, and in what the filter searches
        row["devices_detail"] = " · ".join(x for x in (f"job of {row['ranks']} ranks", row["devices_detail"]) if x)
    devs = (summary or {}).get("devices") or {}

    def per_device(field: str) -> tuple[float | None, str]:
        if not devs:
            return None, "–" if summary is not None else ""
        vals = [d.get(field, 0) / 1e6 for d in devs.values()]
        text = " · ".join(f"{v:,.1f}" for v in vals)
        return sum(vals), text

    for col, field in (("compute_ms", "compute_ns"), ("copy_ms", "copy_ns"), ("overlap_ms", "overlap_ns")):
        row[col], row[col + "_text"] = per_device(field)
    span = (summary or {}).get("span_ns")
    row["span_ms"] = span / 1e6 if span else None
    row["span_ms_text"] = f"{span / 1e6:,.1f}" if span else ""
    copy = sum(d.get("copy_ns", 0) for d in devs.values())
    overlap = sum(d.get("overlap_ns", 0) for d in devs.values())
    row["hidden_pct"] = 100.0 * overlap / copy if copy else None
    row["hidden_pct_text"] = f"{row['hidden_pct']:.0f}%" if copy else ("–" if summary is not None else "")
    row["host"] = host_figures(summary) if summary is not None and not devs else None
    found = speedups(meta)
    row["speedup"] = found[0][0] if found else None
    row["speedup_text"] = f"×{found[0][0]:.2f}" if found else ""
    # what each speedup compares, under the value: "single / parallel", "size 64: one stream / streams"
    # what it compares, under the value ("single / parallel"); every speedup of the run in the tooltip
    row["speedup_detail"] = found[0][1] if found else ""
    row["speedup_title"] = " · ".join(speedup_text(v, label) for v, label in found)
    return row


#: Host threads named one by one in a run's host figures; the rest are summed up in a count.
HOST_THREADS_SHOWN = 4
#: The GPU columns a run without GPU work shows its host figures across (one cell).
GPU_COLUMNS = ("compute_ms", "copy_ms", "overlap_ms", "hidden_pct")


def host_figures(summary: dict[str, Any]) -> str:
    """What a run without GPU work has, for its row: each host thread's busy time (the union of its framework ops;
    the busiest :data:`HOST_THREADS_SHOWN`) and the ops counted: ``"host only · busy 9.97 · 0.54 ms (2 threads) ·
    228 ops"``; a job's threads carry their rank (``r1 5.54``)."""
    threads = [t for t in summary.get("threads") or () if isinstance(t, dict)]
    if not threads:
        return "host only · no framework ops"
    threads.sort(key=lambda t: -float(t.get("busy_ns") or 0))
    ranks = {t.get("rank", 0) for t in threads}
    busy = " · ".join(
        (f"r{t.get('rank', 0)} " if len(ranks) > 1 else "") + f"{float(t.get('busy_ns') or 0) / 1e6:,.2f}"
        for t in threads[:HOST_THREADS_SHOWN]
    )
    more = f" + {len(threads) - HOST_THREADS_SHOWN} more" if len(threads) > HOST_THREADS_SHOWN else ""
    ops = sum(int(t.get("ops") or 0) for t in threads)
    count = f"{len(threads)} thread{'s' if len(threads) != 1 else ''}"
    return f"host only · busy {busy}{more} ms ({count}) · {ops:,} ops"


def table_rows(store: RunStore, *, rescan: bool = True) -> list[dict[str, Any]]:
    """A row per run. With ``rescan`` (a page load) the folders are looked through again and runs without a
    summary small enough to parse are parsed; without (filtering, sorting) the runs and summaries known are
    used as they are: a keystroke in the filter must not walk the disk or parse a 32 MB trace."""
    if rescan:
        return [run_row(info, store.summary(info.key)) for info in store.refresh()]
    return [run_row(info, store.summary(info.key, parse=False)) for info in store.runs()]


def filter_sort(
    rows: list[dict[str, Any]], text: str | None, sort: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Rows whose text contains every word of ``text`` (any column), sorted by ``sort['col']``."""
    words = (text or "").lower().split()
    if words:

        def hay(r: dict[str, Any]) -> str:
            return " ".join(
                str(r.get(c) or "")
                for c in (
                    "name",
                    "scenario",
                    "variant",
                    "params",
                    "trace",
                    "devices",
                    "devices_detail",
                    "date",
                    "origin",
                )
            ).lower()

        rows = [r for r in rows if all(w in hay(r) for w in words)]
    sort = sort or {}
    col = sort.get("col")
    if col:
        numeric = {c: num for c, _, num in COLUMNS}.get(col, False)
        present = [r for r in rows if r.get(col) not in (None, "")]
        missing = [r for r in rows if r.get(col) in (None, "")]
        present.sort(key=lambda r: r[col] if numeric else str(r[col]).lower(), reverse=bool(sort.get("desc")))
        rows = present + missing  # rows without the value stay at the bottom either way
    return rows


def render_table(rows: list[dict[str, Any]], sort: dict[str, Any] | None, picked: list[str]) -> html.Table:
    sort = sort or {}
    head = [html.Th("Compare", className="pick-col")]
    for col, title, numeric in COLUMNS:
        arrow = ""
        if sort.get("col") == col:
            arrow = " ▼" if sort.get("desc") else " ▲"
        head.append(
            html.Th(
                html.Button(title + arrow, id={"type": ids.RUNS_SORT_BUTTON, "col": col}, className="sort"),
                className=("num " if numeric else "") + f"col-{col}",
                title=HEADER_TITLES.get(col),
            )
        )
    body = []
    for r in rows:
        cells = [
            html.Td(
                dcc.Checklist(
                    id={"type": ids.RUNS_PICK, "run": r["key"]},
                    options=[{"label": "", "value": r["key"]}],
                    value=[r["key"]] if r["key"] in picked else [],
                    className="pick",
                )
            )
        ]
        for col, _, numeric in COLUMNS:
            if col in GPU_COLUMNS and r.get("host"):
                if col == GPU_COLUMNS[0]:  # a run without GPU work: what it has, across the GPU columns
                    cells.append(html.Td(r["host"], colSpan=len(GPU_COLUMNS), className="host-figures small",
                                         title=HEADER_TITLES["compute_ms"]))
                continue
            if col == "name":
                content: Any = [
                    dcc.Link(
                        r["name"], href="/timeline?" + urlencode({"run": r["key"]}), className="run-link",
                        title=r["name"],
                    ),
                    html.Span(r["origin"], className=f"badge badge-{r['origin']}"),
                ]
                if r.get("ranks", 1) > 1:
                    content.append(html.Span(f"{r['ranks']} ranks", className="badge badge-ranks",
                                             title="a job: one trace per rank, read as one timeline"))
                status = r.get("status")
                if status is not None:
                    content.append(html.Span(status.text, className=f"badge badge-{status.kind}",
                                             title=status.title))
                if r.get("error"):
                    content.append(html.Div(r["error"], className="small error-text"))
            else:
                content = r.get(col + "_text", r.get(col, "")) if numeric else r.get(col, "")
                detail = r.get(col + "_detail")
                if detail:  # a second, smaller line: how the device was used, what a speedup compares
                    content = [html.Div(content), html.Div(detail, className="small muted")]
            cells.append(
                html.Td(
                    content,
                    className=("num " if numeric else "") + f"col-{col}",
                    title=r.get(col + "_title") or None,
                )
            )
        status = r.get("status")
        body.append(html.Tr(cells, className=f"run-{status.kind}" if status is not None else None,
                            **{"data-run": r["key"]}))
    if not body:
        body = [html.Tr(html.Td("No runs match.", colSpan=len(COLUMNS) + 1, className="muted"))]
    return html.Table([html.Thead(html.Tr(head)), html.Tbody(body)], className="runs")


def layout(store: RunStore) -> Any:
    rows = table_rows(store)
    sort = {"col": "date", "desc": True}
    return html.Div(
        [
            html.Div(
                [
                    html.H2("Runs"),
                    html.Div(
                        "Bundled examples, ./runs and the paths given to `tracer dashboard`. Times per GPU "
                        "(several GPUs: one value each). Open a run, or tick two and compare them.",
                        className="muted",
                    ),
                ],
                className="heading",
            ),
            html.Div(
                [
                    dcc.Input(
                        id=ids.RUNS_FILTER,
                        type="search",
                        placeholder="Filter: scenario, variant, name …",
                        debounce=False,
                        className="filter",
                    ),
                    dcc.Link(
                        "Compare the two ticked runs",
                        id=ids.RUNS_COMPARE,
                        href="",
                        className="button disabled",
                    ),
                    html.Span(id=ids.RUNS_COUNT, className="muted"),
                ],
                className="controls",
            ),
            html.Div(render_table(filter_sort(rows, "", sort), sort, []), id=ids.RUNS_TABLE),
            dcc.Store(id=ids.RUNS_SORT, data=sort),
            dcc.Store(id=ids.RUNS_PICKED, data=[]),
        ],
        className="runs-page",
    )


def compare_link(picked: list[str]) -> tuple[str, str, str]:
    """(href, className, count text) of the compare link for the ticked runs."""
    if len(picked) == 2:
        return "/compare?" + urlencode({"a": picked[0], "b": picked[1]}), "button", "2 runs ticked"
    return "", "button disabled", f"{len(picked)} ticked: tick two to compare" if picked else ""


def register(app: Dash, store: RunStore) -> None:
    @app.callback(
        Output(ids.RUNS_SORT, "data"),
        Input({"type": ids.RUNS_SORT_BUTTON, "col": ALL}, "n_clicks"),
        State(ids.RUNS_SORT, "data"),
        prevent_initial_call=True,
        on_error=on_error(lambda _message: no_update),  # only a forged request gets here: keep the order
    )
    def _sort(clicks, sort):
        trig = ctx.triggered_id
        if not trig or not any(clicks):
            return sort
        col = trig["col"]
        if sort and sort.get("col") == col:
            return {"col": col, "desc": not sort.get("desc")}
        return {"col": col, "desc": {c: n for c, _, n in COLUMNS}.get(col, False)}

    @app.callback(
        Output(ids.RUNS_TABLE, "children"),
        Input(ids.RUNS_FILTER, "value"),
        Input(ids.RUNS_SORT, "data"),
        State(ids.RUNS_PICKED, "data"),
        prevent_initial_call=True,
        on_error=on_error(alert),
    )
    def _table(text, sort, picked):
        # Runs as the page load found them (the filter fires on every keystroke: debounce=False)
        return render_table(filter_sort(table_rows(store, rescan=False), text, sort), sort, picked or [])

    @app.callback(
        Output(ids.RUNS_PICKED, "data"),
        Output(ids.RUNS_COMPARE, "href"),
        Output(ids.RUNS_COMPARE, "className"),
        Output(ids.RUNS_COUNT, "children"),
        Input({"type": ids.RUNS_PICK, "run": ALL}, "value"),
        State(ids.RUNS_PICKED, "data"),
        prevent_initial_call=True,
        on_error=on_error(lambda message: (no_update, no_update, no_update, alert(message))),
    )
    def _pick(values, previous):
        shown = [item["id"]["run"] for item in ctx.inputs_list[0]]
        order = picked_runs(previous or [], shown, values)
        return (order, *compare_link(order))


def picked_runs(previous: list[str], shown: list[str], values: list[list[str]]) -> list[str]:
    """Ticked runs in the order they were ticked (the first is drawn on top); runs hidden by the filter
    keep their tick."""
    ticked = {k for k, v in zip(shown, values) if v}
    kept = [k for k in previous if k in ticked or k not in shown]
    return kept + [k for k in shown if k in ticked and k not in kept]
