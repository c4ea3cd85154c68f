"""The dashboard on runs a newcomer makes without a GPU (issue 36): a CPU scenario run, a CPU training script (one
that exited 0, one that failed) and a two-rank gloo job say only what is true of them; a run recorded while the
dashboard runs opens at its address; how a run ended and when it was recorded are said as they were."""

from __future__ import annotations

import os
import re
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import find_component
from tracer.dashboard import data, explain_view, ids
from tracer.dashboard.app import route
from tracer.dashboard.data import FILE_DATE, RunStore, run_date, run_status, trace_time_ns
from tracer.dashboard.figures import LABEL_CHAR_PX, LABEL_PAD_PX, timeline_figure
from tracer.dashboard.pages import common, runs, timeline
from tracer.errors import InputNotFoundError

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ (job_runs), as pytest has it
from job_runs import GLOO_RANKS, make_job_run  # noqa: E402

DATA = Path(__file__).parent / "data"
CPU_RUNS = DATA / "cpu-runs"
SCENARIO = CPU_RUNS / "compute-copy-cpu-threads-20261206-212918"
TRAIN = CPU_RUNS / "train-cpu"
FAILED = CPU_RUNS / "train-cpu-failed"
DDP = CPU_RUNS / "ddp-gloo-2ranks-20261206-213039"  # tracer record ddp -p ranks=2 -p steps=4, gloo on the CPU
SIDE = DATA / "copy_side_stream.json.gz"

#: Claims no page may make of a run without GPU work: each is of copies, overlap or a GPU it did not have.
FALSE_ON_HOST = (
    "compute ∩ copy", "overlap band", "every copy overlapped", "GPU -1", "stream -1", "GPU idle gap",
    "Click a kernel or copy", "why work did not overlap", "of copy time hidden", "copies or memsets",
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> RunStore:
    """The recorded CPU runs, and a job made of the gloo fixture's two rank traces (its collectives' stragglers are
    findings)."""
    job = make_job_run(tmp_path_factory.mktemp("jobs") / "gloo-job", GLOO_RANKS)
    return RunStore([SCENARIO, TRAIN, FAILED, DDP, job], examples=False, runs_dir=None)


def _key(store: RunStore, name: str) -> str:
    return next(i.key for i in store.runs() if i.name == name)


def _texts(obj: Any) -> list[str]:
    """Every string a Dash component tree shows (children, tables' rows), and a figure's legend, lane labels and
    annotations."""
    out: list[str] = []
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, (list, tuple)):
        for x in obj:
            out += _texts(x)
        return out
    children = getattr(obj, "children", None)
    if children is not None:
        out += _texts(children)
    for row in getattr(obj, "rowData", None) or ():
        out += [str(v) for v in row.values()]
    fig = getattr(obj, "figure", None)
    if fig is not None:
        out += [t.name for t in fig.data if t.name and t.showlegend is not False]
        out += [str(a.text) for a in fig.layout.annotations or ()]
        out += [str(t) for t in fig.layout.yaxis.ticktext or ()]
    return out


@pytest.mark.parametrize("name", [SCENARIO.name, TRAIN.name, FAILED.name, DDP.name, "gloo-job"])
def test_a_host_only_run_s_page_claims_no_copy_overlap_or_gpu(store: RunStore, name: str) -> None:
    key = _key(store, name)
    page = timeline.layout(store, key)
    text = "\n".join(_texts(page))
    assert "Cannot open" not in text
    for claim in FALSE_ON_HOST:
        assert claim not in text, claim
    view = store.view(key)
    assert not view.devices
    assert explain_view.section_title(view) == "Findings: why work waited"
    assert "Hover over a bar" in text  # (what a click on GPU work would show, it has none)


def test_a_gloo_job_s_heading_counts_its_folded_lanes_and_its_findings_are_on_the_host(store: RunStore) -> None:
    view = store.view(_key(store, DDP.name))
    counts = common.trace_counts(view)
    pieces = common.piece_counts(view)
    assert set(pieces) == {"folded"}  # the pieces that are no event: the ranks' folded lanes, no band at all
    assert f"+ {pieces['folded']:,} pieces of the ranks' folded lanes (drawn when a rank is folded)" in counts
    view = store.view(_key(store, "gloo-job"))
    result = explain_view.explained(view)
    rows = explain_view.table_rows(view, result)
    assert rows, "the gloo job's straggler waits are findings"
    assert {r["where"] for r in rows} <= {"rank 0 · host", "rank 1 · host"}
    assert explain_view.where_text(0, 7) == "GPU 0 · stream 7"


def test_a_gpu_run_still_names_its_overlap_band(store: RunStore) -> None:
    gpu = RunStore([SIDE], examples=False, runs_dir=None)
    view = gpu.view(gpu.runs()[0].key)
    assert " + " in common.trace_counts(view) and "compute ∩ copy pieces (the overlap band)" in common.trace_counts(view)
    assert explain_view.section_title(view) == "Findings: why work did not overlap"
    assert "every copy overlapped compute" in explain_view.no_findings_text(view)


def test_an_empty_findings_table_on_a_host_run_says_what_it_means(store: RunStore) -> None:
    for name in ("train-cpu", "compute-copy-cpu-threads-20261206-212918"):
        view = store.view(_key(store, name))
        result = explain_view.explained(view)
        assert result.findings.empty
        said = explain_view.no_findings_text(view)
        assert said.startswith("No findings: this run has host work only") and "copy" not in said


def test_the_runs_table_shows_a_host_run_s_threads_and_marks_a_failed_run(store: RunStore) -> None:
    rows = {r["name"]: r for r in runs.table_rows(store)}
    train = rows["train-cpu"]
    threads = store.summary(_key(store, "train-cpu"))["threads"]  # type: ignore[index]
    busy = max(t["busy_ns"] for t in threads) / 1e6
    assert train["host"].startswith(f"host only · busy {busy:,.2f}") and f"{sum(t['ops'] for t in threads):,} ops" in \
        train["host"]
    job = rows[DDP.name]["host"]
    assert re.fullmatch(r"host only · busy r\d [\d.,]+ · r\d [\d.,]+ ms \(2 threads\) · [\d,]+ ops", job), job
    assert "r0 " in job and "r1 " in job  # each rank's thread
    assert rows["train-cpu-failed"]["status"].text == "failed (exit 1)" and train["status"] is None
    table = runs.render_table(list(rows.values()), None, [])
    body = table.children[1].children
    for tr in body:
        cells = tr.children
        host = [c for c in cells if getattr(c, "colSpan", None) == len(runs.GPU_COLUMNS)]
        assert len(host) == 1  # one cell across the GPU columns, where they showed "–" four times
        assert len(cells) == 1 + len(runs.COLUMNS) - len(runs.GPU_COLUMNS) + 1
        assert "–" not in _texts(cells)
    failed = next(tr for tr in body if tr.to_plotly_json()["props"]["data-run"] == _key(store, "train-cpu-failed"))
    assert failed.className == "run-failed" and "failed (exit 1)" in _texts(failed)
    heading = "".join(_texts(common.run_heading(store.get(_key(store, "train-cpu-failed")))))
    assert "failed (exit 1)" in heading


def test_how_a_command_ended_is_told_from_meta_json() -> None:
    assert run_status({"exit_code": 0}) is None and run_status({"scenario": "ddp"}) is None
    assert run_status({"exit_code": 1}).text == "failed (exit 1)"  # type: ignore[union-attr]
    interrupted = run_status({"exit_code": 130, "interrupted": True})
    assert interrupted is not None and (interrupted.kind, interrupted.text) == ("interrupted", "interrupted (exit 130)")
    killed = run_status({"exit_code": 137})
    assert killed is not None and killed.kind == "failed" and "signal 9" in killed.title


# ----- a run recorded while the dashboard runs (issue 36, point 5)


def test_a_run_recorded_while_the_dashboard_runs_opens_at_its_address(tmp_path: Path) -> None:
    store = RunStore([], examples=False, runs_dir=tmp_path)
    assert store.runs() == []
    shutil.copytree(TRAIN, tmp_path / "train-cpu")  # recorded now, after the dashboard started
    store._last_scan -= data.RESCAN_INTERVAL_S  # (a second later)
    page = route(store, "/timeline", "?run=train-cpu", None)  # straight to its address: no visit to the runs page
    assert "Cannot open" not in str(page)
    assert store.get("train-cpu").origin == "runs"


def test_an_unknown_run_s_message_names_an_upload_only_for_an_upload(tmp_path: Path) -> None:
    store = RunStore([tmp_path], examples=False, runs_dir=None)
    with pytest.raises(InputNotFoundError) as plain:
        store.get("train-cpu")
    assert "no such run in this dashboard" in str(plain.value) and "upload" not in str(plain.value)
    with pytest.raises(InputNotFoundError) as upload:
        store.get("upload-trace")
    assert "uploaded before a restart" in str(upload.value)


def test_unknown_runs_rescan_the_folders_at_most_once_a_second(tmp_path: Path, monkeypatch) -> None:
    store = RunStore([tmp_path], examples=False, runs_dir=None)
    scans: list[float] = []
    refresh = store.refresh

    def counted() -> list[Any]:
        scans.append(1.0)
        return refresh()

    monkeypatch.setattr(store, "refresh", counted)
    store._last_scan -= data.RESCAN_INTERVAL_S
    for i in range(300):  # a flood of unknown names: one scan
        with pytest.raises(InputNotFoundError):
            store.get(f"nope-{i}")
    assert len(scans) == 1
    store._last_scan -= data.RESCAN_INTERVAL_S  # a second later: one more
    with pytest.raises(InputNotFoundError):
        store.get("nope")
    assert len(scans) == 2


# ----- when a run was recorded


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def test_a_trace_without_meta_json_is_dated_by_its_own_clock_not_its_file(tmp_path: Path) -> None:
    trace = tmp_path / "side.json.gz"
    shutil.copy(SIDE, trace)
    os.utime(trace, (2_000_000_000, 2_000_000_000))  # written (copied) in 2033
    store = RunStore([trace], examples=False, runs_dir=None)
    info = store.runs()[0]
    assert run_date(info) == "2033-05-18 03:33" + FILE_DATE  # not read yet: the file's date, said so
    view = store.view(info.key)
    when = trace_time_ns(view.timeline)
    assert when is not None and run_date(info) == _utc(when) and run_date(info).startswith("2026-12-02")
    assert f"Recorded with: Kineto trace (torch.profiler), {_utc(when)}" in "".join(_texts(common.run_heading(info, view)))


def test_a_job_s_heading_is_dated_by_its_traces_not_its_folder(tmp_path: Path) -> None:
    files = []
    for f in GLOO_RANKS:
        shutil.copy(f, tmp_path / f.name)
        files.append(tmp_path / f.name)
    os.utime(tmp_path, (2_000_000_000, 2_000_000_000))
    store = RunStore([], examples=False, runs_dir=None, jobs=[files])
    info = store.runs()[0]
    view = store.view(info.key)
    when = trace_time_ns(view.timeline)
    assert when is not None and not _utc(when).startswith("2033")
    heading = "".join(_texts(common.run_heading(info, view)))
    assert f", {_utc(when)}" in heading and FILE_DATE not in heading


# ----- range labels and the critical path


def test_range_names_on_one_row_never_cover_each_other(store: RunStore) -> None:
    view = store.view(_key(store, DDP.name))  # (its ranges nest deeper than the rows: 8 names overlapped)
    width = 1270
    fig = timeline_figure(view, width_px=width)
    (names,) = [t for t in fig.data if t.name == "range names"]
    scale = width / (fig.layout.xaxis.range[1] - fig.layout.xaxis.range[0])
    boxes: dict[float, list[tuple[float, float]]] = {}
    for x, y, text in zip(names.x, names.y, names.text):
        half = len(text) * LABEL_CHAR_PX / 2 + LABEL_PAD_PX
        boxes.setdefault(y, []).append((x * scale - half, x * scale + half))
    for row in boxes.values():
        row.sort()
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(row, row[1:])), row
    assert len(names.text) >= 4  # (names are still drawn: the ProfilerStep and forward / backward ones)


def test_the_critical_path_starts_off_on_a_busy_run_only() -> None:
    busy = DATA / "h200-sizes" / "mlp-data-parallel-streams-20261203-194824"
    store = RunStore([busy, DATA / "copy_nonblocking_same_stream.json.gz"], examples=False, runs_dir=None)
    for info in store.runs():
        page = timeline.layout(store, info.key)
        toggle = find_component(page, ids.TL_PATH)
        note = find_component(page, ids.TL_PATH_NOTE)
        if info.path == busy:
            assert toggle.value == [] and note is not None and "busy run" in note.children
        else:
            assert toggle.value == ["on"] and note is None

