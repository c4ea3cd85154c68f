"""The timeline page's source lines (issue 37, part 5; dashboard/lines_view.py), without a browser: the "by source
line" table under the findings, the intervals a click on a line outlines, and the user frame of a clicked interval,
on the hand-made GPU training loop with planted slow-downs (tests/stack_traces.py), on a CPU recording with stacks
(tests/data/stacks_cpu.json.gz), on the same GPU loop without stacks, and on a two-rank job of it."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from dash import no_update
from job_runs import make_job_run  # tests/job_runs.py
from stack_traces import SCRIPT, write_planted  # tests/stack_traces.py

from tests.conftest import find_component
from tracer.analysis.source import NO_STACKS
from tracer.analysis.source_code import SourceFiles
from tracer.dashboard import explain_view, ids, lines_view
from tracer.dashboard.app import create_app
from tracer.dashboard.data import RunStore
from tracer.dashboard.figures import OUTLINE_NAME, timeline_figure
from tracer.dashboard.pages import timeline
from tracer.explain import explain_lines
from tracer.explain.lines import read_sources
from tracer.parsers import load_trace

DATA = Path(__file__).parent / "data"
STACKS_CPU = DATA / "stacks_cpu.json.gz"


def _texts(obj: Any) -> list[str]:
    """Every string a component tree shows (children, a grid's headers and rows)."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _texts(x)]
    out = _texts(getattr(obj, "children", None) or [])
    out += [str(c["headerName"]) for c in getattr(obj, "columnDefs", None) or ()]
    out += [str(v) for r in getattr(obj, "rowData", None) or () for v in r.values()]
    return out


def _state(store: RunStore, key: str) -> dict[str, Any]:
    return dict(find_component(timeline.layout(store, key), ids.TL_STATE).data)


def _pos(view: Any, mask: Any) -> list[int]:
    """Events row positions where ``mask`` holds."""
    return np.flatnonzero(np.asarray(mask)).tolist()


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunStore, str, Path]:
    folder = tmp_path_factory.mktemp("planted")
    path = write_planted(folder)
    store = RunStore([path], examples=False, runs_dir=None)
    return store, store.runs()[0].key, path


# ----- the table


def test_the_table_is_tracer_lines_table_from_the_same_graph_and_path(planted):
    store, key, path = planted
    view = store.view(key)
    lines = explain_view.explained(view).lines
    t = load_trace(path, cache=False)
    cli = explain_lines(t, read_sources(t, files=SourceFiles([path.parent])))
    pd.testing.assert_frame_equal(lines.table, cli.table)  # (the same rows, figures and order as `tracer lines`)
    assert lines.note is None and lines.gpu and lines.path_ns == cli.path_ns == 19_260_000


def test_the_table_rows_rank_the_lines_as_tracer_lines_does(planted):
    store, key, _ = planted
    view = store.view(key)
    lines = explain_view.explained(view).lines
    rows = lines_view.table_rows(lines, view.multi_rank)
    assert [r["where"] for r in rows] == ["train.py:5", "train.py:7", "train.py:9", "train.py:10", "train.py:6"]
    by = {r["where"]: r for r in rows}
    assert by["train.py:5"] == {"id": 0, "where": "train.py:5", "function": "step()", "code": "out = model(x)",
                                "gpu_ms": 8.0, "share": 64.3, "path_ms": 8.499, "sync_ms": 0.0, "copy_ms": 0.0}
    assert (by["train.py:7"]["sync_ms"], by["train.py:7"]["copy_ms"]) == (4.12, 4.0)
    assert by["train.py:6"]["code"] == "torch.cuda.synchronize()" and by["train.py:6"]["sync_ms"] == 7.88
    assert lines_view.heading(lines, False) == ("12.45 ms of the 12.45 ms of GPU work were launched from 5 lines of "
                                                "your code; critical path 19.26 ms.")


def test_the_page_shows_the_table_under_the_findings_and_each_finding_s_line(planted):
    store, key, _ = planted
    page = timeline.layout(store, key)
    findings = find_component(page, ids.TL_FINDINGS)
    table = find_component(findings, ids.TL_LINES_TABLE)
    assert table is not None and [r["id"] for r in table.rowData] == ["0", "1", "2", "3", "4"]
    assert [c["headerName"] for c in table.columnDefs] == ["Line", "Function", "Code", "GPU ms", "Share of GPU %",
                                                         "Critical path ms", "Host sync ms", "Exposed copy ms"]
    # under the findings table, in the same panel
    kids = findings.children
    assert [getattr(k, "id", None) for k in kids].index(ids.TL_LINES) > [
        getattr(k, "id", None) for k in kids].index(ids.TL_FIND_TABLE)
    grid = find_component(page, ids.TL_FIND_TABLE)
    assert [c["headerName"] for c in grid.columnDefs][:2] == ["Why", "Your line"]
    assert {r["line"] for r in grid.rowData} == {"train.py:6", "train.py:7", "train.py:9", "train.py:10"}
    assert find_component(page, ids.TL_LINE) is not None and find_component(page, ids.TL_LINE).data is None


# ----- the intervals of a line


def test_a_line_s_intervals_are_its_host_calls_and_the_gpu_work_they_launched(planted):
    store, key, _ = planted
    view = store.view(key)
    lines = explain_view.explained(view).lines
    ev = view.timeline.events
    names = ev["name"].astype(str).to_numpy()
    by_where = {lines.label(i): i for i in range(len(lines.table))}

    def members(where: str) -> list[int]:
        return sorted(view.src[lines.members(by_where[where])].tolist())

    # train.py:5: 4 GEMMs, their 4 launches and the 4 aten::linear ops around them
    got = names[members("train.py:5")]
    assert sorted(set(got)) == ["aten::linear", "cudaLaunchKernel", "gemm_kernel"] and len(got) == 12
    assert (got == "gemm_kernel").sum() == 4
    # train.py:9: the loop's 80 tiny kernels, 80 launches, 80 aten::mul
    got = names[members("train.py:9")]
    assert {n: int((got == n).sum()) for n in set(got)} == {"elementwise_mul": 80, "cudaLaunchKernel": 80,
                                                             "aten::mul": 80}
    # train.py:6: the four cudaDeviceSynchronize calls, nothing launched
    assert set(names[members("train.py:6")]) == {"cudaDeviceSynchronize"} and len(members("train.py:6")) == 4
    # every GPU interval of a line was launched by one of the line's calls (the launch join)
    for i in range(len(lines.table)):
        rows = set(view.src[lines.members(i)].tolist())
        gpu = [r for r in rows if int(ev["device"].iloc[r]) >= 0]
        assert all(int(view.launch_src[r]) in rows for r in gpu)
        assert bool(gpu) == (lines.label(i) != "train.py:6")
    # no interval belongs to two lines, and the members are ascending (sorted by row and start, as drawn)
    every = np.concatenate([lines.members(i) for i in range(len(lines.table))])
    assert len(every) == len(set(every.tolist()))
    assert all((np.diff(lines.members(i)) > 0).all() for i in range(len(lines.table)))


def test_the_outline_is_the_figure_s_last_trace_and_counts_the_intervals_in_the_window(planted):
    store, key, _ = planted
    view = store.view(key)
    lines = explain_view.explained(view).lines
    loop = lines.members(2)  # train.py:9
    fig = timeline_figure(view, width_px=100_000, outline=loop)  # (wide: no merging)
    assert fig.data[-1].name == OUTLINE_NAME and fig.layout.meta["outlined"] == 240
    assert np.isnan(np.asarray(fig.data[-1].x, dtype=float)).sum() == 240  # one rectangle each
    # a window of the first step holds its 60 intervals of the line
    step = (int(view.start_ns[loop].min()), int(view.end_ns[loop].min()) + 1_500_000)
    fig = timeline_figure(view, step, width_px=100_000, outline=loop)
    inside = (view.start_ns[loop] < step[1]) & (view.end_ns[loop] >= step[0])
    assert fig.layout.meta["outlined"] == int(inside.sum()) == 60
    # narrow: the 240 merge into blocks, at most a few per pixel of each row
    fig = timeline_figure(view, width_px=60, outline=loop)
    blocks = int(np.isnan(np.asarray(fig.data[-1].x, dtype=float)).sum())
    assert fig.layout.meta["outlined"] == 240 and 0 < blocks < 240
    # none: an empty trace, still last; a lane hidden: its intervals are not outlined
    assert timeline_figure(view, outline=timeline.NO_LINE).data[-1].x == (None,)  # (a gap: drawn, shows nothing)
    host_lanes = [k for k, _ in view.lanes if not k.startswith("gpu")]
    fig = timeline_figure(view, lanes=host_lanes, width_px=100_000, outline=loop)
    assert fig.layout.meta["outlined"] == 160  # (the host's 80 launches and 80 ops; the kernels' lane hidden)


# ----- the callbacks


def test_clicking_a_line_patches_the_outline_alone_and_a_zoom_keeps_it(planted):
    store, key, _ = planted
    view = store.view(key)
    lines = explain_view.explained(view).lines
    state = _state(store, key)
    line, status = timeline.choose_line(store, state, None, {"rowId": "1", "colId": "where"})
    assert line == {"run": key, "row": 1} and status is no_update
    fig, minimap, status, launch, new_state = timeline.update(store, state, None, None, None, None, line=line)
    # only the line changed since the layout drew the chart: a patch of the last trace and its count
    ops = fig.to_plotly_json()["operations"]
    assert [(o["operation"], o["location"]) for o in ops] == [("Assign", ["data", -1]),
                                                              ("Assign", ["layout", "meta", "outlined"])]
    assert ops[0]["params"]["value"].name == OUTLINE_NAME and ops[1]["params"]["value"] == 20
    assert minimap is no_update and launch is no_update
    assert status.endswith("· outlined train.py:7: 20 of its intervals in this window")
    assert new_state == {**state, "line": 1}
    # a zoom draws the whole figure again, the outline with it, at the new window's level of detail
    lo, hi = int(view.start_ns[lines.members(1)].min()), int(view.end_ns[lines.members(1)].min())
    want = {"range_ms": [lo / 1e6, hi / 1e6 + 0.01]}
    fig, _, status, _, zoomed = timeline.update(store, new_state, want, None, None, None, line=line)
    assert fig.data[-1].name == OUTLINE_NAME and fig.layout.meta["outlined"] > 0 and zoomed["line"] == 1
    assert f"outlined train.py:7: {fig.layout.meta['outlined']} of its intervals" in status
    # a second click on the same line clears it; so does the button
    assert timeline.choose_line(store, zoomed, line, {"rowId": "1"}) == (None, no_update)
    fig, *_, cleared = timeline.update(store, zoomed, want, None, None, None, line=None)
    assert fig.to_plotly_json()["operations"][0]["params"]["value"].x == (None,) and cleared["line"] is None


@pytest.mark.parametrize("cell", [{"rowId": "5"}, {"rowId": "-1"}, {"rowId": 1}, {"rowId": "01"}, "x", None])
def test_a_cell_that_names_no_line_is_a_message(planted, cell):
    store, key, _ = planted
    line, status = timeline.choose_line(store, _state(store, key), None, cell)
    assert line is no_update
    assert status is no_update if cell is None else "no such line" in str(status.children)


@pytest.mark.parametrize("line", [{"run": "trace", "row": 99}, {"run": "other", "row": 0}, {"row": "0"},
                                  {"run": "trace", "row": True}, [0], "0"])
def test_a_forged_line_is_a_message_in_the_status_line(planted, line):
    store, key, _ = planted
    out = timeline.update(store, _state(store, key), None, None, None, None, line=line)
    assert out[0] is no_update and "no such line" in str(out[2].children)


def test_clicking_a_kernel_or_a_host_call_names_its_line_and_the_chain_above(planted):
    store, key, _ = planted
    view = store.view(key)
    ev = view.timeline.events
    names = ev["name"].astype(str).to_numpy()
    state = _state(store, key)
    gemm = _pos(view, names == "gemm_kernel")[0]
    *_, launch, _ = timeline.update(store, state, None, None, {"points": [{"customdata": gemm}]}, None)
    text = " ".join(_texts(launch))
    assert "cudaLaunchKernel" in text and "correlation" in text  # (the launch, as before)
    frame = find_component(launch, ids.TL_FRAME)
    said = "".join(_texts(frame))
    # innermost first: the launch's line, then its callers outwards
    assert said == ("From your code: train.py:5 step() out = model(x) ← train.py:15 main() ← train.py:18 "
                    "<module>()")
    item = _pos(view, names == "aten::item")[0]
    *_, launch, _ = timeline.update(store, state, None, None, {"points": [{"customdata": item}]}, None)
    assert "aten::item" in " ".join(_texts(launch))
    assert "train.py:10 step() return out.sum().item()" in "".join(_texts(find_component(launch, ids.TL_FRAME)))
    assert lines_view.frame_of(view, len(ev)) is None and lines_view.frame_of(view, -1) is None


class _Client:
    """Posts callback requests to an app's ``/_dash-update-component`` as the browser's renderer does (as
    tests/test_dashboard_hostile.py's DashClient, and for a callback with a duplicate output too: ``…@hash``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.client = app.server.test_client()
        assert self.client.get("/_dash-layout").status_code == 200  # Dash sets itself up on a first request

    def post(self, prefix: str, values: list[Any]) -> Any:
        return self.client.post("/_dash-update-component", json=self.body(prefix, values))

    def body(self, prefix: str, values: list[Any]) -> dict[str, Any]:
        key = next(k for k in self.app.callback_map if k.lstrip(".").startswith(prefix))
        spec = self.app.callback_map[key]
        args = spec["inputs"] + spec["state"]
        assert len(values) == len(args)
        filled = [{**a, "value": v} for a, v in zip(args, values, strict=True)]
        outputs = [o.rsplit(".", 1) for o in key.strip(".").split("...")]
        return {"output": key, "outputs": [{"id": i, "property": p.split("@")[0]} for i, p in outputs],
                "inputs": filled[: len(spec["inputs"])], "state": filled[len(spec["inputs"]) :],
                "changedPropIds": [f"{args[0]['id']}.{args[0]['property']}"]}


def test_the_app_answers_a_line_click_and_forged_values_with_200_and_a_message(planted):
    store, key, _ = planted
    client = _Client(create_app(store=store))
    state = _state(store, key)
    # the table's click -> TL_LINE (the callback whose first output is the line store)
    resp = client.post(ids.TL_LINE, [{"rowId": "2"}, None, None, state])
    assert resp.status_code == 200
    assert resp.get_json()["response"][ids.TL_LINE]["data"] == {"run": key, "row": 2}
    resp = client.post(ids.TL_LINE, [{"rowId": "nope"}, None, None, state])
    assert resp.status_code == 200 and "no such line" in str(resp.get_json()["response"][ids.TL_STATUS])
    # TL_LINE -> the chart: a patch of the outline alone
    resp = client.post(ids.TL_GRAPH, [None, None, None, None, None, {"run": key, "row": 2}, state, None])
    assert resp.status_code == 200
    figure = resp.get_json()["response"][ids.TL_GRAPH]["figure"]
    assert figure["__dash_patch_update"] and figure["operations"][0]["location"] == ["data", -1]
    resp = client.post(ids.TL_GRAPH, [None, None, None, None, None, {"run": key, "row": "x" * 10_000}, state, None])
    assert resp.status_code == 200 and "no such line" in str(resp.get_json()["response"][ids.TL_STATUS])


def test_a_line_of_a_run_not_explained_yet_is_refused(planted, monkeypatch):
    store, key, path = planted
    fresh = RunStore([path], examples=False, runs_dir=None)
    monkeypatch.setattr(explain_view, "EAGER_EVENTS", 10)
    state = _state(fresh, key)
    assert not explain_view.is_computed(fresh.view(key))
    line, status = timeline.choose_line(fresh, state, None, {"rowId": "0"})
    assert line is no_update and "not explained yet" in str(status.children)
    out = timeline.update(fresh, state, None, None, None, None, line={"run": key, "row": 0})
    assert out[0] is no_update and "not explained yet" in str(out[2].children)
    assert not explain_view.is_computed(fresh.view(key))


# ----- traces without stacks, host-only runs, jobs


def test_a_trace_without_stacks_says_so_in_one_line_and_the_page_works(tmp_path):
    path = write_planted(tmp_path, with_stack=False)
    store = RunStore([path], examples=False, runs_dir=None)
    key = store.runs()[0].key
    page = timeline.layout(store, key)
    part = find_component(page, ids.TL_LINES)
    assert _texts(part) == ["By source line", NO_STACKS[:1].upper() + NO_STACKS[1:] + "."]
    assert find_component(page, ids.TL_LINES_TABLE) is None and find_component(page, ids.TL_FIND_TABLE) is not None
    grid = find_component(page, ids.TL_FIND_TABLE)
    assert "Your line" not in [c["headerName"] for c in grid.columnDefs]  # (no stacks: no line column)
    view = store.view(key)
    gemm = _pos(view, view.timeline.events["name"].astype(str).to_numpy() == "gemm_kernel")[0]
    *_, launch, _ = timeline.update(store, _state(store, key), None, None, {"points": [{"customdata": gemm}]}, None)
    assert "correlation" in " ".join(_texts(launch)) and find_component(launch, ids.TL_FRAME) is None


def test_a_host_only_run_s_lines_say_no_gpu_copy_or_sync_word(tmp_path):
    shutil.copy(STACKS_CPU, tmp_path / STACKS_CPU.name)
    shutil.copy(DATA / "stacks_cpu.py", tmp_path / "stacks_cpu.py")
    store = RunStore([tmp_path / STACKS_CPU.name], examples=False, runs_dir=None)
    key = store.runs()[0].key
    view = store.view(key)
    lines = explain_view.explained(view).lines
    assert lines.note is None and not lines.gpu and len(lines.table)
    rows = lines_view.table_rows(lines, False)
    assert [r["path_ms"] for r in rows] == sorted((r["path_ms"] for r in rows), reverse=True)  # (by path time)
    assert {r["code"] for r in rows} >= {"loss.backward()", "opt.step()", "return loss.item()"}
    words = " ".join(_texts(find_component(timeline.layout(store, key), ids.TL_LINES))).lower()
    for word in ("gpu", "copy", "copies", "sync", "overlap", "kernel", "launched"):
        assert word not in words, word
    assert "critical path ms" in words and "calls" in words
    # a host line's intervals are its host calls
    ev = view.timeline.events
    kinds = set(ev["kind"].astype(str).to_numpy()[view.src[lines.members(0)]])
    assert kinds <= {"cpu_op", "runtime", "driver"} and kinds


def test_a_job_s_lines_are_per_rank_with_a_rank_column(tmp_path):
    traces = []
    for r in (0, 1):
        folder = tmp_path / f"r{r}"
        folder.mkdir()
        raw = write_planted(folder).read_bytes()
        traces.append(folder / "trace.json.gz")
        traces[-1].write_bytes(gzip.compress(raw))
    run = make_job_run(tmp_path / "job", traces)
    (run / "train.py").write_text(SCRIPT.replace("STEPS", "4"))
    store = RunStore([run], examples=False, runs_dir=None)
    key = store.runs()[0].key
    view = store.view(key)
    assert view.multi_rank
    lines = explain_view.explained(view).lines
    rows = lines_view.table_rows(lines, True)
    assert [(r["rank"], r["where"]) for r in rows] == [
        (rank, f"train.py:{n}") for rank in (0, 1) for n in (5, 7, 9, 10, 6)]
    assert [c for c, _, _ in lines_view.columns(lines, True)][0] == "rank"
    assert lines.label(0) == "rank 0 · train.py:5" and lines.label(5) == "rank 1 · train.py:5"
    # a line's intervals are its rank's only
    ranks = view.timeline.events["rank"].to_numpy()
    assert set(ranks[view.src[lines.members(0)]].tolist()) == {0}
    assert set(ranks[view.src[lines.members(5)]].tolist()) == {1}
    assert "on 2 ranks" in lines_view.heading(lines, True)


@pytest.mark.parametrize(("line", "ids_"), [({"run": "trace", "row": 3}, ["3"]), (None, []), ({"row": True}, []),
                                            ({"row": -1}, []), ("3", [])])
def test_the_chosen_line_s_row_is_marked_in_the_table(line, ids_):
    assert timeline.marked_rows(line) == {"ids": ids_}


def test_the_page_reads_no_file_outside_the_trace_s_folder_and_working_directory(tmp_path):
    """An uploaded trace names whatever files it likes: the dashboard shows the text of those under the trace's
    folder (or the run's working directory) only; elsewhere a line is its function's first, as without the file."""
    inside, outside = tmp_path / "runs", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    path = write_planted(inside)
    # the file outside says so on every line: its text must never reach the page
    (outside / "train.py").write_text((inside / "train.py").read_text().replace("out = model(x)",
                                                                              "secret = model(x)"))
    raw = path.read_text()
    for name, where in (("far.json", f"{outside}/train.py("), ("up.json", "../elsewhere/train.py(")):
        (inside / name).write_text(raw.replace("train.py(", where))
        store = RunStore([inside / name], examples=False, runs_dir=None)
        lines = explain_view.explained(store.view(store.runs()[0].key)).lines
        mine = lines.table[lines.table["file"] != ""]
        assert len(mine) and not mine["text"].str.contains("secret").any(), name
        if name == "up.json":  # (a relative path that leaves the folder: not read at all)
            assert (mine["text"] == "").all() and not mine["exact"].any()
        else:  # (an absolute path elsewhere: the copy beside the trace, found by its name, as from another machine)
            assert "out = model(x)" in set(mine["text"])
    # (tracer lines, the user's own command, reads what the trace names)
    t = load_trace(inside / "far.json", cache=False)
    assert "secret = model(x)" in set(read_sources(t, files=SourceFiles([inside])).sites.calls["text"])
    # a file under the trace's folder is read, by an absolute path too
    (inside / "near.json").write_text(raw.replace("train.py(", f"{inside}/train.py("))
    store = RunStore([inside / "near.json"], examples=False, runs_dir=None)
    lines = explain_view.explained(store.view(store.runs()[0].key)).lines
    assert "out = model(x)" in set(lines.table["text"])
    files = lines_view.ConfinedSourceFiles([inside])
    assert files.find("train.py") == (inside / "train.py").resolve() and files.find("/etc/passwd") is None
    assert files.find("../elsewhere/train.py") is None
    assert files.find(str(outside / "train.py")) == (inside / "train.py").resolve()  # (the copy inside, by its name)
    assert files.find(str(outside / "other.py")) is None


def test_a_click_made_with_the_line_s_change_still_draws_the_whole_chart(planted):
    """The patch is for the line alone: a host call clicked at the same time (no arrow: the bars are the same) still
    needs its frame said under the chart, so the figure and the launch text are drawn again."""
    store, key, _ = planted
    view = store.view(key)
    explain_view.explained(view)
    state = _state(store, key)
    item = _pos(view, view.timeline.events["name"].astype(str).to_numpy() == "aten::item")[0]
    fig, _, _, launch, new_state = timeline.update(store, state, None, None, {"points": [{"customdata": item}]},
                                                   None, line={"run": key, "row": 3})
    assert fig.data[-1].name == OUTLINE_NAME and fig.layout.meta["outlined"] == 32  # (a whole figure, outlined)
    assert "train.py:10" in "".join(_texts(find_component(launch, ids.TL_FRAME))) and new_state["line"] == 3
