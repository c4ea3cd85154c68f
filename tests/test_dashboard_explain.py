"""The timeline page's findings panel and critical path overlay (dashboard/explain_view.py), without a browser:
the builders and the callbacks as plain functions, on the bundled H200 compute-copy runs (50 same-stream findings
on one, none on the other) and on a trace without correlation ids (explain cannot run)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dash import html, no_update

from tests.conftest import find_component
from tracer.dashboard import explain_view, ids
from tracer.dashboard.data import RunStore
from tracer.dashboard.figures import PATH_BUDGET_PER_PX, timeline_figure
from tracer.dashboard.pages import timeline
from tracer.explain import build_graph, critical_path
from tracer.parsers import load_trace

DATA = Path(__file__).parent / "data"
SAME = DATA / "copy_nonblocking_same_stream.json.gz"
SIDE = DATA / "copy_side_stream.json.gz"
SAME_KEY, SIDE_KEY = "copy_nonblocking_same_stream", "copy_side_stream"


@pytest.fixture(scope="module")
def store() -> RunStore:
    return RunStore([SAME, SIDE], examples=False, runs_dir=None)


def _path_trace(fig):
    return next((t for t in fig.data if t.name == "critical path"), None)


# ----- the panel


@pytest.mark.filterwarnings("error::DeprecationWarning")  # (dash_table.DataTable warned on every table built)
def test_same_stream_run_lists_its_50_copies_as_one_ranked_kind(store):
    view = store.view(SAME_KEY)
    result = explain_view.explained(view)
    assert result.reason is None and len(result.findings) == 50
    assert list(result.groups["kind"]) == ["same_stream"] and int(result.groups["count"].iloc[0]) == 50
    rows = explain_view.table_rows(view, result)
    assert [r["id"] for r in rows] == list(range(50))
    # the costliest on the path first; every copy's whole exposed time is on the path (58.0 ms in all)
    assert [r["path_ms"] for r in rows] == sorted((r["path_ms"] for r in rows), reverse=True)
    assert sum(r["path_ms"] for r in rows) == pytest.approx(58.004, abs=0.01)
    assert {r["where"] for r in rows} == {"GPU 0 · stream 7"}
    assert all(r["name"].startswith("Memcpy DtoH") and "queued behind" in r["evidence"] for r in rows)
    # the fix, the same for every row of a kind, is said once in the kinds' table, not on each of the 50 rows
    assert all("fix" not in r for r in rows) and "fix" not in {c for c, _, _ in explain_view.COLUMNS}
    page = timeline.layout(store, SAME_KEY)
    table = find_component(page, ids.TL_FIND_TABLE)
    assert table is not None and [r["id"] for r in table.rowData] == [str(i) for i in range(50)]
    assert table.getRowId == "params.data.id"
    assert [(c["field"], c["headerName"]) for c in table.columnDefs] == [(c, name) for c, name, _ in explain_view.COLUMNS]
    groups = find_component(page, ids.TL_FIND_GROUPS)
    assert "same stream as the compute it queued behind" in str(groups)
    assert str(groups).count("move the copy to a side stream") == 1
    assert "Critical path of the whole trace 192.6 ms" in str(find_component(page, ids.TL_FINDINGS))


def test_side_stream_run_has_no_finding_and_says_so(store):
    view = store.view(SIDE_KEY)
    result = explain_view.explained(view)
    assert result.reason is None and result.findings.empty
    page = timeline.layout(store, SIDE_KEY)
    assert find_component(page, ids.TL_FIND_TABLE) is None
    assert "No findings: every copy overlapped compute" in str(find_component(page, ids.TL_FINDINGS))


def test_explain_runs_once_per_run_and_is_kept_on_the_cached_view(store):
    view = store.view(SAME_KEY)
    first = explain_view.explained(view)
    assert explain_view.explained(store.view(SAME_KEY)) is first
    assert explain_view.is_computed(view)


def _no_correlation(tmp_path: Path) -> Path:
    """The same-stream run with its correlation ids removed, as a Parquet timeline."""
    from tracer.exporters import parquet

    t = load_trace(SAME, cache=False)
    t.events["correlation"] = pd.array([pd.NA] * len(t.events), dtype=t.events["correlation"].dtype)
    dest = tmp_path / "nocorr.parquet"
    parquet.write(t, dest, final=dest)
    return dest


def test_a_trace_without_correlation_ids_shows_the_one_line_reason_instead_of_the_panel(tmp_path):
    path = _no_correlation(tmp_path)
    store = RunStore([path], examples=False, runs_dir=None)
    key = store.runs()[0].key
    page = timeline.layout(store, key)
    reason = find_component(page, ids.TL_FIND_REASON)
    assert reason is not None and "no correlation ids" in reason.children and "record with torch.profiler" in (
        reason.children)
    assert find_component(page, ids.TL_FIND_TABLE) is None and find_component(page, ids.TL_FIND_GROUPS) is None
    # no path to draw either, toggle on or not; the chart draws as before
    fig = timeline.update(store, {"run": key, "window": None, "highlight": None}, {"path": True}, None, None,
                          None)[0]
    assert _path_trace(fig) is None and fig.layout.meta["path_blocks"] == 0


# ----- clicking a finding


def test_clicking_a_finding_zooms_to_its_intervals(store):
    view = store.view(SAME_KEY)
    result = explain_view.explained(view)
    state = {"run": SAME_KEY, "window": None, "highlight": None, "path": True}
    want, status = timeline.zoom_to_finding(store, state, {"value": 1.2, "colId": "path_ms", "rowIndex": 3, "rowId": "0",
                                                           "timestamp": 1_700_000_000_000})
    assert status is no_update and want["finding"] == 0
    f = result.findings.iloc[0]
    ev = view.timeline.events
    lo_ms, hi_ms = want["range_ms"]
    for row in f["rows"]:  # the copy and the kernel it queued behind, both inside
        assert lo_ms * 1e6 < ev.loc[row, "start_ns"] - view.t0_ns and ev.loc[row, "end_ns"] - view.t0_ns < hi_ms * 1e6
    # the timeline callback then draws that window
    fig, _, _, _, new_state = timeline.update(store, state, want, None, None, None)
    assert new_state["window"] == [round(lo_ms * 1e6), round(hi_ms * 1e6)] and new_state["path"] is True
    assert _path_trace(fig) is not None


@pytest.mark.parametrize("cell", [{"rowId": "50"}, {"rowId": "-1"}, {"rowId": True}, {"rowId": 1e300}, {"rowId": 0},
                                  {"rowId": "00"}, {"rowId": " 1"}, {"rowId": "١"}, {"rowId": None}, {"row_id": 0},
                                  "abc", [0]])
def test_a_cell_that_names_no_finding_is_a_message(store, cell):
    want, status = timeline.zoom_to_finding(store, {"run": SAME_KEY}, cell)
    assert want is no_update and "no such finding" in json.dumps(status.to_plotly_json(), default=str)


def test_a_click_on_a_run_without_findings_zooms_nowhere(store):
    want, status = timeline.zoom_to_finding(store, {"run": SIDE_KEY}, {"rowId": "0"})
    assert want is no_update and "no such finding" in str(status.children)


# ----- the critical path over the lanes


def test_the_path_is_drawn_along_the_rows_of_its_pieces(store):
    view = store.view(SAME_KEY)
    result = explain_view.explained(view)
    fig = timeline_figure(view, width_px=100_000, path=result.path)  # wide enough that no piece merges
    line = _path_trace(fig)
    # 206 pieces of work, and the trace's span before the first of them (no row: a break in the line)
    assert fig.layout.meta["path_blocks"] == len(result.path) == 207
    rows = [r.label for r in view.rows]
    ys = np.asarray(line.y, dtype=float)[0::3] + 0.44  # each block's (x0, y) point
    labels = result.path.label
    copy_y = {round(y) for y, lab in zip(ys, labels) if lab == "copy"}
    kernel_y = {round(y) for y, lab in zip(ys, labels) if lab == "gpu compute"}
    assert [rows[y] for y in copy_y] == ["GPU 0 · stream 7 · copies"]
    assert [rows[y] for y in kernel_y] == ["GPU 0 · stream 7 · kernels"]
    # the line starts where the path starts and ends where it ends
    assert line.x[0] == pytest.approx(result.path.start_ns[0] / 1e6)
    assert np.nanmax(np.asarray(line.x, dtype=float)) == pytest.approx(result.path.end_ns[-1] / 1e6)


@pytest.mark.parametrize("width_px", [50, 120, 1200])
def test_the_path_never_sends_more_than_its_budget(store, width_px):
    """Level of detail as for the lanes: pieces under a few pixels merge, so a figure holds at most
    PATH_BUDGET_PER_PX blocks per pixel of width, however long the path (here 206 pieces)."""
    view = store.view(SAME_KEY)
    result = explain_view.explained(view)
    fig = timeline_figure(view, width_px=width_px, path=result.path)
    blocks = fig.layout.meta["path_blocks"]
    assert 0 < blocks <= PATH_BUDGET_PER_PX * width_px
    assert len(_path_trace(fig).x) == 3 * blocks
    if width_px < 200:
        assert blocks < len(result.path)  # (narrow: merged)


def test_the_path_of_a_window_holds_only_the_pieces_in_it(store):
    view = store.view(SAME_KEY)
    result = explain_view.explained(view)
    window = (100_000_000, 110_000_000)
    line = _path_trace(timeline_figure(view, window, width_px=100_000, path=result.path))
    inside = (result.path.end_ns > window[0]) & (result.path.start_ns < window[1])
    assert len(line.x) == 3 * int(inside.sum())
    xs = np.asarray(line.x, dtype=float)
    assert xs.min() >= window[0] / 1e6 and xs.max() <= window[1] / 1e6


def test_the_toggle_turns_the_path_on_and_off_and_the_page_keeps_it(store):
    state = {"run": SAME_KEY, "window": None, "highlight": None, "path": True}
    fig, _, _, _, off = timeline.update(store, state, {"path": False}, None, None, None)
    assert _path_trace(fig) is None and off["path"] is False
    zoom = {"relayout": {"xaxis.range[0]": 40.0, "xaxis.range[1]": 45.0}}
    fig, _, _, _, still = timeline.update(store, off, zoom, None, None, None)
    assert _path_trace(fig) is None and still["path"] is False
    fig, _, _, _, on = timeline.update(store, still, {"path": True}, None, None, None)
    assert _path_trace(fig) is not None and on["path"] is True and on["window"] == [40_000_000, 45_000_000]


@pytest.mark.parametrize("want", [{"path": "yes"}, {"path": 1}, {"path": [True]}])
def test_a_toggle_value_that_is_no_boolean_is_a_message(store, want):
    out = timeline.update(store, {"run": SAME_KEY, "window": None, "highlight": None}, want, None, None, None)
    assert out[0] is no_update and "expected the toggle's state" in str(out[2].children)


def test_a_big_trace_is_explained_only_when_asked(monkeypatch):
    """Over EAGER_EVENTS the page opens without explaining (path off, a button); the button explains it once."""
    monkeypatch.setattr(explain_view, "EAGER_EVENTS", 10)
    store = RunStore([SAME], examples=False, runs_dir=None)
    page = timeline.layout(store, SAME_KEY)
    view = store.view(SAME_KEY)
    assert not explain_view.is_computed(view)
    assert find_component(page, ids.TL_PATH).value == [] and find_component(page, ids.TL_STATE).data["path"] is False
    assert find_component(page, ids.TL_FIND_RUN).style is None  # the button is shown
    assert "705 events" in str(find_component(page, ids.TL_FINDINGS))
    children, style = timeline.explain_run(store, {"run": SAME_KEY})
    assert style == {"display": "none"} and explain_view.is_computed(view)
    assert find_component(html.Div(children), ids.TL_FIND_TABLE) is not None
    # a forged state is one line, nothing computed for it
    children, style = timeline.explain_run(store, {"run": "no-such-run"})
    assert style is no_update and "no-such-run" in str(children.children)


def test_the_overlay_is_the_path_tracer_explain_walks(store):
    """The drawn pieces are tracer.explain's (critical_path of build_graph), not a copy of its logic."""
    view = store.view(SIDE_KEY)
    ev = view.timeline.events
    path = critical_path(build_graph(view.timeline), span=(int(ev["start_ns"].min()), int(ev["end_ns"].max())))
    drawn = explain_view.explained(view).path
    assert len(drawn) == len(path.pieces) == 109
    assert int(drawn.end_ns[-1] - drawn.start_ns[0]) == path.length_ns


def test_the_panel_reads_the_kernels_demand_from_the_trace_file_as_the_cli_does():
    """small-ops' 1024² GEMMs each hold half the GPU's block slots: waiting beside two others they met a full
    GPU (``gpu_full``), which the panel can only say with the launch figures of the trace file."""
    run = next(Path(__file__).parent.parent.joinpath("tracer", "examples").glob("small-ops-streams-*"))
    store = RunStore([run], examples=False, runs_dir=None)
    (key,) = [r.key for r in store.runs()]
    view = store.view(key)
    assert view.source == run
    kinds = set(explain_view.explained(view).groups["kind"])
    assert "gpu_full" in kinds and "one_at_a_time" not in kinds
