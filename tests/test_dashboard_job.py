"""The dashboard on a job (one trace per rank): lanes grouped rank → device → stream, the rank filter and folded
ranks, communication in its own colour with a compute ∩ comm band, the collectives table, the runs and compare
pages. Figures and callbacks are called as plain functions; the figures are checked against independent numpy
computations on the real HTA and gloo two-rank jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from job_runs import GLOO_RANKS, HTA_RANKS, make_job_run  # tests/job_runs.py

from tests.conftest import find_component
from tracer.dashboard import collectives_view
from tracer.dashboard.data import RunStore
from tracer.dashboard.figures import timeline_figure
from tracer.dashboard.model import CLASS_INDEX, N_CLASSES, TimelineView, prepare
from tracer.dashboard.pages import compare, runs, timeline
from tracer.timeline import concat


def _union(s: np.ndarray, e: np.ndarray) -> list[tuple[int, int]]:
    """Plain union of intervals (independent of tracer.analysis.intervals)."""
    out: list[list[int]] = []
    for a, b in sorted(zip(s.tolist(), e.tolist())):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _intersect_total(x: list[tuple[int, int]], y: list[tuple[int, int]]) -> int:
    total, i, j = 0, 0, 0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        total += max(0, hi - lo)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("jobs")
    return {"hta": make_job_run(root / "hta", HTA_RANKS), "gloo": make_job_run(root / "gloo", GLOO_RANKS)}


@pytest.fixture(scope="module")
def store(jobs: dict[str, Path]) -> RunStore:
    return RunStore([jobs["hta"].parent], examples=False, runs_dir=None)


@pytest.fixture(scope="module")
def hta(store: RunStore) -> TimelineView:
    return store.view("hta")


def _state(view: TimelineView, key: str = "hta") -> dict[str, Any]:
    return {"run": key, "window": [0, view.span_ns], "highlight": None}


def _drawn(view: TimelineView, row: int, cls: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = row * N_CLASSES + CLASS_INDEX[cls]
    m = view.group == g
    return view.start_ns[m], view.end_ns[m], view.src[m]


# ----- layout


def test_lanes_are_grouped_rank_then_device_then_stream(hta: TimelineView) -> None:
    shown = [r for r in hta.rows if not r.folded]
    ranks = [r.rank for r in shown]
    assert ranks == sorted(ranks) and set(ranks) == {0, 1}
    for rank in (0, 1):
        mine = [r for r in shown if r.rank == rank]
        on_gpu = [r.device >= 0 for r in mine]
        assert on_gpu == sorted(on_gpu, reverse=True)  # the rank's GPUs first, then its host threads
        assert all(r.label.startswith(f"rank {rank} · ") for r in mine)
    assert hta.fold_lanes == {0: "r0/fold", 1: "r1/fold"}
    assert all(key not in dict(hta.lanes) for key in hta.fold_lanes.values())  # not in the lane filter


def test_comm_kernels_have_their_own_colour_and_every_kernel_is_drawn_once(hta: TimelineView) -> None:
    ev = hta.timeline.events
    is_comm = (ev["collective"] != "").to_numpy() & (ev["kind"] == "kernel").to_numpy()
    cls = hta.group % N_CLASSES
    drawn = hta.src >= 0
    comm_src = hta.src[drawn & (cls == CLASS_INDEX["comm"]) & np.isin(hta.src, np.flatnonzero(is_comm))]
    assert sorted(comm_src.tolist()) == np.flatnonzero(is_comm).tolist()  # 20 NCCL kernels, all purple
    kernel_src = hta.src[drawn & (cls == CLASS_INDEX["kernel"])]
    assert not np.isin(kernel_src, np.flatnonzero(is_comm)).any()
    assert int(is_comm.sum()) == 20


def test_compute_comm_band_equals_an_independent_intersection(hta: TimelineView) -> None:
    ev = hta.timeline.events
    for rank, device in ((0, 0), (1, 1)):
        (row,) = [i for i, r in enumerate(hta.rows) if r.lane == f"r{rank}/gpu{device}/comm_overlap"]
        s, e, src = _drawn(hta, row, "comm_overlap")
        assert (src == -1).all()
        k = ev[(ev["kind"] == "kernel") & (ev["rank"] == rank) & (ev["device"] == device)]
        comm = (k["collective"] != "").to_numpy()
        st, en = k["start_ns"].to_numpy() - hta.t0_ns, k["end_ns"].to_numpy() - hta.t0_ns
        expected = _intersect_total(_union(st[~comm], en[~comm]), _union(st[comm], en[comm]))
        assert expected > 0
        assert int((e - s).sum()) == expected
        assert {tuple(c.key): c.overlap_ns for c in hta.comm}[(rank, device)] == expected  # the cards' figure


def test_a_folded_rank_is_the_union_of_its_work(hta: TimelineView) -> None:
    ev = hta.timeline.events
    rows = {r.sub: i for i, r in enumerate(hta.rows) if r.lane == "r1/fold"}
    assert list(rows) == ["GPU compute", "GPU communication", "GPU copies"]  # (host rows: not for a GPU rank)
    k = ev[(ev["kind"] == "kernel") & (ev["rank"] == 1)]
    for sub, mask in (("GPU compute", k["collective"] == ""), ("GPU communication", k["collective"] != "")):
        sel = k[mask.to_numpy()]
        s, e, _ = _drawn(hta, rows[sub], "kernel" if sub == "GPU compute" else "comm")
        expected = _union(sel["start_ns"].to_numpy() - hta.t0_ns, sel["end_ns"].to_numpy() - hta.t0_ns)
        assert list(zip(s.tolist(), e.tolist())) == expected


# ----- the page's callback: rank filter, folding, hostile values


def test_rank_filter_shows_only_that_ranks_lanes(store: RunStore, hta: TimelineView) -> None:
    fig, _, status, _, _ = timeline.update(store, _state(hta), None, None, None, None, [1], [])
    labels = list(fig.layout.yaxis.ticktext)
    assert labels and all(label.startswith("rank 1 · ") for label in labels)
    assert "bars" in status


def test_folding_a_rank_replaces_its_lanes_by_one(store: RunStore, hta: TimelineView) -> None:
    fig = timeline.update(store, _state(hta), None, None, None, None, None, [0])[0]
    labels = list(fig.layout.yaxis.ticktext)
    rank0 = [label for label in labels if label.startswith("rank 0")]
    subs = ("GPU compute", "GPU communication", "GPU copies")
    assert rank0 == [f"rank 0 · folded · {s}" for s in subs]
    assert labels[: len(rank0)] == rank0  # in its rank's place, before rank 1
    whole = timeline_figure(hta)
    assert fig.layout.meta["rows"] < whole.layout.meta["rows"]


@pytest.mark.parametrize(
    "ranks, folded",
    [("1", None), ([True], None), (["0"], None), ([1.5], None), (None, {"r": 1}), (list(range(200_001)), None)],
)
def test_a_bad_rank_value_is_one_line_in_the_status(store: RunStore, hta: TimelineView, ranks: Any,
                                                     folded: Any) -> None:
    out = timeline.update(store, _state(hta), None, None, None, None, ranks, folded)
    text = out[2].children
    assert out[0] is timeline.no_update and "rank" in text and "\n" not in text and len(text) < 200


def test_unknown_ranks_are_ignored(store: RunStore, hta: TimelineView) -> None:
    fig = timeline.update(store, _state(hta), None, None, None, None, [1, 99], [7, -3])[0]
    assert all(label.startswith("rank 1") for label in fig.layout.yaxis.ticktext)


def test_hover_of_a_comm_kernel_names_the_collective(hta: TimelineView) -> None:
    ev = hta.timeline.events
    first = ev[(ev["collective"] != "") & (ev["kind"] == "kernel")].iloc[0]
    lo = int(first["start_ns"]) - hta.t0_ns
    fig = timeline_figure(hta, (lo - 1000, int(first["end_ns"]) - hta.t0_ns + 1000), width_px=1200)
    hover = next(t for t in fig.data if t.name == "hover")
    texts = [t for t in hover.text if first["name"][:40] in t]
    assert texts and f"{first['collective']} · process group" in texts[0]


# ----- collectives


@pytest.mark.filterwarnings("error::DeprecationWarning")  # (dash_table.DataTable warned on every table built)
def test_collectives_table_lists_every_instance_and_a_click_zooms_to_it(store: RunStore, hta: TimelineView) -> None:
    page = timeline.layout(store, "hta")
    section = find_component(page, "timeline-collectives")
    assert section is not None
    table = find_component(section, "timeline-collectives-table")
    rows = table.rowData
    assert len(rows) == len(hta.collectives.rows) == 10
    assert [r["id"] for r in rows] == [str(r["id"]) for r in collectives_view.table_rows(hta)]  # (ids are strings)
    # the same columns; the numeric ones sort as numbers, in the browser, a page of PAGE_SIZE at a time
    assert [(c["field"], c["headerName"], c["cellDataType"]) for c in table.columnDefs] == [
        (c, name, "number" if t == "numeric" else "text") for c, name, t in collectives_view.COLUMNS]
    assert table.defaultColDef["sortable"] and table.dashGridOptions["pagination"]
    assert table.dashGridOptions["paginationPageSize"] == collectives_view.PAGE_SIZE
    assert {r["straggler"] for r in rows} <= {0, 1}
    i = max(range(len(rows)), key=lambda j: rows[j]["skew_us"])
    cell = {"value": rows[i]["collective"], "colId": "collective", "rowIndex": 0, "rowId": rows[i]["id"], "timestamp": 1}
    want, _ = timeline.zoom_to_collective(store, _state(hta), cell)
    fig = timeline.update(store, _state(hta), want, None, None, None, None, None)[0]
    lo, hi = fig.layout.meta["window_ns"]
    c = hta.collectives.rows[int(rows[i]["id"])]
    start = c.start_ns - hta.t0_ns
    assert lo < start and start + c.skew_ns + c.dur_ns < hi and hi - lo < hta.span_ns
    skew = find_component(section, "timeline-rank-skew")
    assert "reference" in str(skew)


@pytest.mark.parametrize("cell", [{"rowId": "10"}, {"rowId": "-1"}, {"rowId": 0}, {"rowId": "0x1"}, {"rowId": True},
                                  {"row_id": 0}, "x", {}])
def test_a_cell_that_names_no_collective_is_a_message(store: RunStore, hta: TimelineView, cell: Any) -> None:
    want, status = timeline.zoom_to_collective(store, _state(hta), cell)
    assert want is timeline.no_update and "no such collective" in status.children


def test_the_table_keeps_the_largest_skews_when_there_are_too_many(hta: TimelineView) -> None:
    rows = collectives_view.table_rows(hta, limit=3)
    skews = sorted((c.skew_ns for c in hta.collectives.rows), reverse=True)[:3]
    assert sorted((round(s / 1e3, 1) for s in skews), reverse=True) == sorted(
        (r["skew_us"] for r in rows), reverse=True)
    assert [r["start_ms"] for r in rows] == sorted(r["start_ms"] for r in rows)


def test_a_cpu_job_draws_its_gloo_records_as_communication(store: RunStore) -> None:
    view = store.view("gloo")
    ev = view.timeline.events
    comm_rows = np.flatnonzero((ev["collective"] != "").to_numpy())
    cls = view.group % N_CLASSES
    drawn_comm = set(view.src[(cls == CLASS_INDEX["comm"]) & (view.src >= 0)].tolist())
    assert drawn_comm and drawn_comm <= set(comm_rows.tolist())
    page = timeline.layout(store, "gloo")
    table = find_component(page, "timeline-collectives-table")
    assert table is not None and len(table.rowData) == len(view.collectives.rows) > 0


# ----- runs and compare pages


def test_runs_page_lists_jobs_with_their_rank_count(store: RunStore) -> None:
    rows = {r["key"]: r for r in runs.table_rows(store)}
    assert rows["hta"]["ranks"] == rows["gloo"]["ranks"] == 2
    assert "job of 2 ranks" in rows["hta"]["devices_detail"]
    assert "2 ranks" in str(runs.render_table(list(rows.values()), None, []))


def test_compare_page_shows_two_jobs_with_per_rank_cards(store: RunStore) -> None:
    page = compare.layout(store, ["hta", "gloo"])
    text = str(page)
    assert "rank 0 · GPU 0" in text and "rank 1 · GPU 1" in text and "exposed comm" in text
    fig = page.children[3].figure  # the graph
    assert len(fig.layout.meta["runs"]) == 2
    ticks = list(fig.layout.yaxis.ticktext) + list(fig.layout.yaxis2.ticktext)
    assert not any("folded" in t for t in ticks)


def test_many_ranks_fold_into_few_rows(hta: TimelineView) -> None:
    """16 ranks (the HTA pair eight times): folding all but one keeps the figure small, and the merged blocks
    still bound what is sent (the level of detail works across many lanes)."""
    tl = hta.timeline
    big = prepare(_many_ranks(tl, 8))
    assert big.ranks == list(range(16))
    lanes = big.shown_lanes(None, None, list(range(1, 16)))
    fig = timeline_figure(big, lanes=lanes, width_px=1000)
    unfolded = len([r for r in big.rows if r.rank == 0 and not r.folded])
    assert fig.layout.meta["rows"] == unfolded + 15 * 3
    full = timeline_figure(big, width_px=1000)
    assert full.layout.meta["blocks"] < full.layout.meta["intervals"]


def _many_ranks(tl: Any, copies: int) -> Any:
    """The two-rank job ``copies`` times over, as ranks 0 .. 2·copies−1."""
    parts = []
    for c in range(copies):
        for r in (0, 1):
            ev = tl.events[tl.events["rank"] == r].copy()
            parts.append((ev, 2 * c + r))
    from tracer.timeline import Timeline

    timelines = [Timeline(ev.assign(rank=0), tl.meta) for ev, _ in parts]
    return concat(timelines, ranks=[rank for _, rank in parts])


def test_a_job_s_cards_end_with_its_communication_summed(hta: TimelineView) -> None:
    from tracer.analysis.comm import comm_total
    from tracer.dashboard.pages import common

    cards = common.device_cards(hta)
    assert len(cards) == len(hta.devices) + 1
    text = str(cards[-1])
    assert "job" in text and f"{len(hta.comm)} GPUs summed" in text and "exposed comm" in text
    total = comm_total(hta.comm)
    assert total.comm_ns == sum(c.comm_ns for c in hta.comm) > 0
    # every kernel, as the GPU cards count them (the comm table's "kernels" are the compute ones)
    assert f"{sum(d.kernels for d in hta.devices):,} kernels ({total.comm_kernels:,} communication)" in text
    assert sum(d.kernels for d in hta.devices) == total.kernels + total.comm_kernels


# ----- a job given as its rank traces (tracer dashboard --job)


def test_rank_traces_given_as_a_job_are_one_run(tmp_path: Path) -> None:
    import shutil

    import pandas as pd

    from tracer.job.load import load_job

    files = []
    for p in HTA_RANKS:
        shutil.copy(p, tmp_path / p.name)
        files.append(tmp_path / p.name)
    apart = RunStore(files, examples=False, runs_dir=None)  # (without --job: each rank a run of its own)
    assert len(apart.runs()) == 2 and apart.initial_run is None
    store = RunStore(examples=False, runs_dir=None, jobs=[files])
    (info,) = store.runs()
    assert store.initial_run == info.key and info.job_files == tuple(files) and info.path == tmp_path
    assert not info.is_run_dir and info.size == sum(f.stat().st_size for f in files)
    view = store.view(info.key)
    want = load_job(files, cache=False)
    pd.testing.assert_frame_equal(view.timeline.events, want.events, check_exact=True)
    assert runs.table_rows(store)[0]["ranks"] == 2
    assert view.collectives.rows and len(common_cards(view)) == len(view.devices) + 1


def common_cards(view: TimelineView) -> list[Any]:
    from tracer.dashboard.pages import common

    return common.device_cards(view)


def test_dashboard_job_needs_its_traces() -> None:
    from tests.conftest import cli_main

    proc = cli_main("dashboard", "--job")
    assert proc.returncode == 2
    assert proc.stderr == ("tracer: error: --job: give the job's rank traces, a folder of them or its run "
                           "directory\n")


def test_a_recorded_job_given_as_a_job_is_named_as_its_run(jobs: dict[str, Path]) -> None:
    from tracer.files.discover import job_traces

    store = RunStore(examples=False, runs_dir=None, jobs=[job_traces([jobs["hta"]])])
    (info,) = store.runs()
    assert info.path == jobs["hta"].resolve() and info.key == "job-hta" and info.name.startswith("hta (job of 2")
