"""The views on one lane layout: two one-GPU traces marked rank 0 and rank 1 get separate lanes in the
dashboard and in the Chrome and NVTXT exports, each launch joins its own rank's call, and every view names a
lane alike."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tracer.dashboard.figures import launch_of, minimap_figure, short_lane_label, timeline_figure
from tracer.dashboard.model import CLASS_INDEX, N_CLASSES, prepare
from tracer.exporters import export_timeline
from tracer.exporters._lanes import layout as export_layout
from tracer.parsers import load_trace
from tracer.parsers.kineto import parse_kineto_bytes
from tracer.timeline import Timeline, concat
from tracer.timeline.layout import lay_out

DATA = Path(__file__).parent / "data"
SIDE = DATA / "copy_side_stream.json.gz"


@pytest.fixture(scope="module")
def one() -> Timeline:
    return load_trace(SIDE, cache=False)


@pytest.fixture(scope="module")
def job(one: Timeline) -> Timeline:
    return concat([one, one], ranks=[0, 1])


# ----- dashboard


def test_dashboard_gives_each_rank_its_own_lanes(one: Timeline, job: Timeline) -> None:
    single, view = prepare(one), prepare(job)
    labels = [label for _, label in view.lanes]
    for rank in (0, 1):
        assert [label for label in labels if label.startswith(f"rank {rank} · ")] == [
            f"rank {rank} · {label}" for _, label in single.lanes
        ]
    assert "rank 0 · GPU 0 · stream 7" in labels and "rank 1 · GPU 0 · stream 7" in labels
    assert "rank 1 · GPU 0 · compute ∩ copy" in labels and "rank 1 · NVTX · thread 424 (python3)" in labels
    keys = [k for k, _ in view.lanes]
    assert len(set(keys)) == len(keys) and "r1/gpu0/s7" in keys
    assert len([r for r in view.rows if not r.folded]) == 2 * len(single.rows)  # (+ each rank's folded lane)


def test_dashboard_rows_of_a_rank_hold_that_ranks_intervals(one: Timeline, job: Timeline) -> None:
    single, view = prepare(one), prepare(job)
    ranks = job.events["rank"].to_numpy()
    row_of_label = {r.label: i for i, r in enumerate(single.rows)}
    for i, row in enumerate(view.rows):
        mine = (view.group // N_CLASSES) == i
        src = view.src[mine]
        assert (ranks[src[src >= 0]] == row.rank).all()
        if row.folded:  # a rank's folded lane (tests/test_dashboard_job.py checks its unions)
            continue
        # the same bars as the one-rank view's row (both ranks are the same trace), the overlap band included
        twin = (single.group // N_CLASSES) == row_of_label[row.label.removeprefix(f"rank {row.rank} · ")]
        assert np.array_equal(view.start_ns[mine], single.start_ns[twin])
        assert np.array_equal(view.end_ns[mine], single.end_ns[twin])
        assert np.array_equal(view.group[mine] % N_CLASSES, single.group[twin] % N_CLASSES)
    # rank by rank: each rank's GPUs first, then its host threads
    shown = [r for r in view.rows if not r.folded]
    assert [r.rank for r in shown] == sorted(r.rank for r in shown)
    for rank in (0, 1):
        on_gpu = [r.device >= 0 for r in shown if r.rank == rank]
        assert on_gpu == sorted(on_gpu, reverse=True)
    assert (view.group % N_CLASSES == CLASS_INDEX["overlap"]).sum() == 2 * (
        single.group % N_CLASSES == CLASS_INDEX["overlap"]
    ).sum()


def test_each_ranks_overlap_band_is_its_own(one: Timeline) -> None:
    """Rank 1 recorded 1.2345 ms later: its band is its own compute ∩ copy, not the union over both ranks."""
    shift = 1_234_500
    single, view = prepare(one), prepare(concat([one, one], ranks=[0, 1], offsets=[0, shift]))
    band = [i for i, r in enumerate(view.rows) if r.sub == "compute ∩ copy"]
    assert [view.rows[i].label for i in band] == [
        "rank 0 · GPU 0 · compute ∩ copy", "rank 1 · GPU 0 · compute ∩ copy"
    ]
    want = single.group == CLASS_INDEX["overlap"]
    for rank, row in enumerate(band):
        got = view.group == row * N_CLASSES + CLASS_INDEX["overlap"]
        assert np.array_equal(view.start_ns[got], single.start_ns[want] + rank * shift)
        assert np.array_equal(view.end_ns[got], single.end_ns[want] + rank * shift)


def test_a_click_joins_the_launch_of_its_own_rank(job: Timeline) -> None:
    view = prepare(job)
    ev = job.events
    ranks = ev["rank"].to_numpy()
    kernels = np.flatnonzero((ev["kind"] == "kernel").to_numpy())
    for src in (kernels[ranks[kernels] == 0][0], kernels[ranks[kernels] == 1][0]):
        link = launch_of(view, int(src))
        assert link is not None
        assert ranks[link["launch_src"]] == ranks[src]  # by correlation alone, rank 1 got rank 0's call
        assert ev["correlation"].iat[link["launch_src"]] == ev["correlation"].iat[src]


def test_figures_name_the_rank(job: Timeline) -> None:
    view = prepare(job)
    fig = timeline_figure(view)
    assert "rank 1 · GPU 0 · stream 7" in fig.layout.yaxis.ticktext
    hovers = [t for tr in fig.data if tr.name == "hover" for t in tr.text]
    assert any("rank 1 · GPU 0 · stream 7" in h for h in hovers)
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert len(lines) >= 3  # between rank 0's GPU, rank 1's GPU and the host lanes of each rank
    assert short_lane_label("rank 1 · GPU 0 · stream 7") == "r1 GPU0 s7"
    assert short_lane_label("rank 12 · NVTX · thread 424 (python3)") == "r12 NVTX t424"
    assert "r1 GPU0 s7" in minimap_figure(view).layout.yaxis.ticktext


def test_one_rank_reads_as_before(one: Timeline) -> None:
    relabelled = prepare(concat([one], ranks=[5]))
    assert relabelled.lanes == prepare(one).lanes
    assert not relabelled.multi_rank


# ----- exports


def test_chrome_gives_each_rank_its_processes(job: Timeline, tmp_path: Path) -> None:
    doc = json.loads(export_timeline(job, tmp_path / "t.json").path.read_bytes())
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    by_name = {v: k for k, v in procs.items()}
    assert len(by_name) == len(procs) == 6  # per rank: python3, its GPU, the row without a process
    gpus = ["rank 0 · GPU 0 · NVIDIA H200", "rank 1 · GPU 0 · NVIDIA H200"]
    assert {"rank 0 · python3", "rank 1 · python3", *gpus} <= set(by_name)
    assert by_name["rank 0 · python3"] == 424 and by_name["rank 0 · GPU 0 · NVIDIA H200"] == 0
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads[(by_name["rank 1 · GPU 0 · NVIDIA H200"], 7)] == "rank 1 · GPU 0 · stream 7 · kernels"
    assert threads[(by_name["rank 1 · python3"], 424)] == "rank 1 · thread 424 (python3)"
    sort = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert sort[by_name["rank 0 · GPU 0 · NVIDIA H200"]] < sort[by_name["rank 1 · GPU 0 · NVIDIA H200"]]
    assert sort[by_name["rank 0 · python3"]] < sort[by_name["rank 1 · python3"]]
    # each flow stays within its rank: its launch on that rank's host, its work on that rank's GPU
    xs = {(e["pid"], e["tid"], e["ts"]): e for e in doc["traceEvents"] if e["ph"] == "X"}
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert len(starts) == 200
    for fid, s in starts.items():
        f = ends[fid]
        call, work = xs[(s["pid"], s["tid"], s["ts"])], xs[(f["pid"], f["tid"], f["ts"])]
        assert call["args"]["rank"] == work["args"]["rank"]
        assert procs[s["pid"]].startswith(f"rank {call['args']['rank']} · ")
        assert procs[ends[fid]["pid"]].startswith(f"rank {call['args']['rank']} · ")
    # and tracer reads it back to the same rows, each with its pid (args.rank is not read back yet: a Kineto
    # file holds one rank, in distributedInfo)
    back = parse_kineto_bytes(json.dumps(doc).encode(), "t.json").events
    cols = ["start_ns", "end_ns", "device", "stream", "pid", "tid"]
    def rows(ev):
        return sorted(map(tuple, ev[cols].to_numpy().tolist()))

    assert rows(back) == rows(job.events)


def test_nvtxt_gives_each_rank_its_threads(job: Timeline, tmp_path: Path) -> None:
    result = export_timeline(job, tmp_path / "t.nvtxt")
    assert any("2 ranks are written under one ProcessId" in n for n in result.notes)
    text = result.path.read_text()
    lanes = dict((v, int(k)) for k, v in re.findall(r"^#   (\d+) = (.*)$", text, flags=re.M))
    assert "rank 0 · GPU 0 · stream 7 · kernels" in lanes and "rank 1 · GPU 0 · stream 7 · kernels" in lanes
    assert lanes["rank 0 · thread 424 (python3)"] == 424  # the first rank's thread keeps its id
    assert len(set(lanes.values())) == len(lanes)
    on = re.findall(r'^RangeStartEnd, \d+, \d+, (\d+), ', text, flags=re.M)
    assert on.count(str(lanes["rank 1 · GPU 0 · stream 7 · kernels"])) == 50


def test_export_tracks_and_dashboard_lanes_share_titles() -> None:
    """One layout: every GPU stream and host thread the dashboard draws is an export's lane, named alike."""
    for name in ("copy_side_stream.json.gz", "nsys_compute_copy.sqlite.gz", "mlp_train_200.json.gz"):
        t = load_trace(DATA / name, cache=False)
        _, tracks = export_layout(t.events, t.meta)
        exported = {tr.lane.title for tr in tracks}
        view = prepare(t)
        drawn = {re.sub(r"^(NVTX|CPU) · ", "", label) for key, label in view.lanes if "/overlap" not in key}
        assert drawn and drawn <= exported, name
        assert drawn <= {ln.title for ln in lay_out(t.events, t.meta).lanes}
    # an nsys trace's thread reads as the Kineto trace's of the same process: "thread TID (NAME)"
    nsys = load_trace(DATA / "nsys_compute_copy.sqlite.gz", cache=False)
    assert "thread 709 (python3)" in {tr.label for tr in export_layout(nsys.events, nsys.meta)[1]}
