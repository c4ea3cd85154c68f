"""The dashboard on a large job, drawn from its stored dataset rank by rank (tracer/dashboard/job_view.py): each rank
laid out by the worker that parsed it (tracer/job/views.py), the job's rows and figures those of the job read whole,
its folded ranks drawn from their packs' levels of detail (tracer/analysis/lod.py), at most a few ranks read at a
time, and no trace, no partition and never the whole job read to open it. On HTA's two-rank NCCL pair and the gloo
pair, read as jobs too large to read whole (the threshold lowered)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracer.analysis.lod import levels, merge_blocks, merge_disjoint
from tracer.dashboard import job_view
from tracer.dashboard.data import RunStore
from tracer.dashboard.figures import launch_of, timeline_figure
from tracer.dashboard.job_view import JobView, open_job
from tracer.dashboard.model import CLASS_INDEX, N_CLASSES, TimelineView, prepare
from tracer.dashboard.pages import timeline
from tracer.job import partitions, rank_tasks, views
from tracer.job import read as jobread
from tracer.job import store as jobstore
from tracer.job.load import load_job, store_job

DATA = Path(__file__).parent / "data"
PAIRS = {
    "hta": [DATA / "external" / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)],
    "gloo": [DATA / "comm" / f"gloo_rank{r}.json.gz" for r in (0, 1)],
}


@pytest.fixture(params=sorted(PAIRS))
def job(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """A pair's rank traces in a folder of their own, read as a job too large to read whole."""
    monkeypatch.setattr(jobstore, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(jobstore, "LARGE_JOB_BYTES", 0)
    out = []
    for p in PAIRS[request.param]:
        shutil.copy(p, tmp_path / p.name)
        out.append(tmp_path / p.name)
    return out


def _whole(files: list[Path]) -> TimelineView:
    return prepare(load_job(files, cache=False))


def _refuse_reading(monkeypatch: pytest.MonkeyPatch, *, partitions_too: bool) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("read from the traces, a partition, or the job whole")

    monkeypatch.setattr(rank_tasks, "parse_group", refuse)
    monkeypatch.setattr(jobread, "job_timeline", refuse)
    if partitions_too:
        monkeypatch.setattr(partitions, "read_partition", refuse)


def test_a_large_job_s_first_open_lays_each_rank_out_beside_its_partition(job: list[Path]) -> None:
    whole = _whole(job)
    stored = store_job(job)
    assert stored is not None
    rows, devices = [], []
    for e in stored.entries:
        pack = views.read_pack(views.pack_file(stored.dataset, e.rank))
        assert pack is not None and pack.rank == e.rank
        rows += pack.rows
        devices += pack.devices
        # the folded lane's intervals: the whole job's view's, of that rank
        fold = [i for i, r in enumerate(whole.rows) if r.folded and r.rank == e.rank]
        on = np.isin(whole.group // N_CLASSES, fold)
        assert sorted((whole.start_ns[on] + whole.t0_ns).tolist()) == sorted(pack.fold.start_ns.tolist())
    assert rows == whole.rows
    assert devices == whole.devices


def test_opening_the_job_reads_only_its_packs(job: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _whole(job)
    assert store_job(job) is not None
    _refuse_reading(monkeypatch, partitions_too=True)
    store = RunStore([], jobs=[job], examples=False, runs_dir=None)
    key = store.initial_run
    assert key is not None
    page = timeline.layout(store, key, {"width": 1200, "height": 800})
    view = store.view(key)
    assert isinstance(view, JobView)
    assert (view.rows, view.lanes, view.t0_ns, view.span_ns) == (whole.rows, whole.lanes, whole.t0_ns, whole.span_ns)
    assert view.n_events == len(whole.timeline.events)
    assert view.devices == whole.devices and view.comm == whole.comm and view.launches == whole.launches
    text = json.dumps(page.to_plotly_json(), default=str)
    assert "every rank starts folded" in text
    fig = timeline_figure(view, width_px=1200, lanes=view.shown_lanes(None, None, view.default_folded))
    assert fig.layout.meta["rows"] == sum(r.folded for r in whole.rows)
    assert all(t.type == "heatmap" for t in fig.data)


def _share(view: TimelineView, rows: list[int], t0: int, t1: int, bins: int) -> dict[tuple[int, int], np.ndarray]:
    """Per (row, class) of the whole job's view, the busy share of each of ``bins`` columns (independent of the
    packs: from its sorted arrays)."""
    out = {}
    edges = np.linspace(t0, t1, bins + 1)
    for r in rows:
        for cls in range(N_CLASSES):
            m = view.group == r * N_CLASSES + cls
            if not m.any():
                continue
            s, e = view.start_ns[m], view.end_ns[m]
            cover = np.array(
                [np.clip(np.minimum(e, b) - np.maximum(s, a), 0, None).sum() for a, b in zip(edges[:-1], edges[1:])]
            )
            out[(r, cls)] = cover / np.diff(edges)
    return out


def test_folded_ranks_are_drawn_as_their_busy_share_per_column(job: list[Path]) -> None:
    whole = _whole(job)
    view = open_job(job)
    assert isinstance(view, JobView)
    fold_rows = [i for i, r in enumerate(view.rows) if r.folded]
    for t0, t1 in ((0, view.span_ns), (view.span_ns // 3, view.span_ns // 3 + view.span_ns // 50)):
        want = _share(whole, fold_rows, t0, t1, 200)
        got = {
            (r, cls): share[j] / 100
            for cls, rows, share in view.fold_grid(fold_rows, t0, t1, 200)
            for j, r in enumerate(rows)
        }
        assert set(got) == {k for k, v in want.items() if v.any()} | {k for k in got if not got[k].any()}
        for k, share in want.items():
            if k in got:  # (from a level at most a quarter of a column fine: busy spread evenly over its blocks)
                assert np.abs(got[k] - share).max() <= 0.26, k
                assert abs(got[k].mean() - share.mean()) <= 0.01, k


def _strip(fig: Any) -> dict[str, Any]:
    """A figure as JSON, less the events rows behind its points (a job read rank by rank numbers them by rank)."""
    d: dict[str, Any] = json.loads(fig.to_json())
    for t in d["data"]:
        t.pop("customdata", None)
    return d


def test_an_unfolded_rank_is_drawn_as_the_whole_job_draws_it(job: list[Path]) -> None:
    whole = _whole(job)
    view = open_job(job)
    assert isinstance(view, JobView)
    span = whole.span_ns
    for ranks in ([0], [1], [0, 1]):
        lanes = [k for r in ranks for k in whole.rank_lanes[r]]
        for window in (None, (0, span // 3), (span // 2, span // 2 + span // 100)):
            a = timeline_figure(whole, window, width_px=1200, lanes=lanes)
            b = timeline_figure(view, window, width_px=1200, lanes=lanes)
            assert _strip(b) == _strip(a), (ranks, window)
            assert b.layout.meta["blocks"] == a.layout.meta["blocks"]


def test_a_click_shows_the_launch_of_the_clicked_rank(job: list[Path]) -> None:
    whole = _whole(job)
    view = open_job(job)
    ev = whole.timeline.events
    kernels = np.flatnonzero((ev["kind"] == "kernel").to_numpy() & (whole.launch_src[np.arange(len(ev))] >= 0))
    if not kernels.size:
        pytest.skip("no kernel with its launch in this pair")
    for k in kernels[:: max(kernels.size // 5, 1)].tolist():
        row = ev.iloc[k]
        rank = int(row["rank"])
        i = [p.rank for p in view.packs].index(rank)  # type: ignore[attr-defined]
        local = view.rank_view(rank).timeline.events  # type: ignore[attr-defined]
        at = np.flatnonzero(
            (local["start_ns"] == row["start_ns"]).to_numpy()
            & (local["name"].astype(str) == str(row["name"])).to_numpy()
        )[0]
        src = int(view.event_offset[i]) + int(at)  # type: ignore[attr-defined]
        a, b = launch_of(whole, k), launch_of(view, src)
        assert a is not None and b is not None
        assert {x: a[x] for x in a if not x.endswith("_src")} == {x: b[x] for x in b if not x.endswith("_src")}
        assert view.row_of_src(src) == whole.row_of_src(k)


def test_at_most_a_few_ranks_are_unfolded_at_once(job: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_view, "MAX_UNFOLDED", 1)
    monkeypatch.setattr(timeline, "MAX_UNFOLDED", 1)
    store = RunStore([], jobs=[job], examples=False, runs_dir=None)
    key = store.initial_run
    assert key is not None
    view = store.view(key)
    state = {"run": key, "window": [0, view.span_ns], "highlight": None, "path": False}
    fig, _mini, status, _launch, _state = timeline.update(store, state, {"whole": 1}, None, None, None, [0, 1], [])
    assert "1 more rank asked unfolded drawn folded" in str(status)
    shown = {r.rank: r.folded for r in view.rows if r.label in fig.layout.yaxis.ticktext}
    assert shown == {0: False, 1: True}


def test_collectives_are_matched_from_each_partition_s_own_rows(job: list[Path]) -> None:
    whole = _whole(job)
    view = open_job(job)
    assert view.collectives.rows == whole.collectives.rows


def test_a_job_under_the_threshold_is_read_whole(job: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobstore, "LARGE_JOB_BYTES", sum(p.stat().st_size for p in job))
    view = open_job(job)
    assert not isinstance(view, JobView) and view.partial is None


def test_merged_levels_draw_what_every_interval_draws() -> None:
    rng = np.random.default_rng(39)
    groups: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for k in range(4):  # (disjoint per group: a union; gaps and widths over several scales)
        gaps = rng.choice([10, 300, 5_000, 80_000, 2_000_000], size=3_000)
        widths = rng.choice([5, 200, 3_000, 60_000, 900_000], size=3_000)
        s = np.cumsum(gaps + np.r_[0, widths[:-1]])
        groups.append(np.full(s.size, k * N_CLASSES + CLASS_INDEX["kernel"]))
        starts.append(s)
        ends.append(s + widths)
    g, s, e = (np.concatenate(x).astype(np.int64) for x in (groups, starts, ends))
    order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    lv = levels(s, e, g)
    assert lv and all(b.ns_per_px > a.ns_per_px for a, b in zip(lv, lv[1:]))
    lo, hi = int(s.min()), int(e.max())
    for width in (1200, 300):
        px = (hi - lo) / width
        raw = merge_blocks(s, e, g, lo, hi + 1, px)
        fine = [x for x in lv if x.ns_per_px <= px]
        src = fine[-1] if fine else None
        got = (
            merge_disjoint(s, e, g, np.ones(s.size, np.int64), e - s, lo, hi + 1, px)
            if src is None
            else merge_disjoint(src.start_ns, src.end_ns, src.group, src.count, src.busy_ns, lo, hi + 1, px)
        )
        for f in ("group", "start_ns", "end_ns", "count", "busy_ns"):
            assert np.array_equal(getattr(got, f), getattr(raw, f)), (width, f)
        assert got.n_in_window == raw.n_in_window
