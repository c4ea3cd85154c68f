"""Every analysis keys its figures by rank (issue 12): two one-GPU traces marked rank 0 and 1 are two GPUs, each
with exactly the figures of the trace alone; ranges credit only their own rank's work."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import cli_main
from tracer.analysis import intervals as iv
from tracer.analysis.diff import diff_timelines
from tracer.analysis.lanes import host_thread_stats, lane_stats
from tracer.analysis.overlap import all_device_sets, concurrent_devices_ns, device_overlap, device_sets
from tracer.analysis.ranges import range_launches
from tracer.analysis.summary import Summary, analyze, summarize
from tracer.analysis.work import copy_summary, idle_gaps
from tracer.parsers import load_trace
from tracer.timeline import DeviceKey, Timeline, concat

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module", params=["pair_kineto.json.gz", "two_streams.json.gz", "mlp_train_200.json.gz"])
def pair(request: pytest.FixtureRequest) -> tuple[Timeline, Timeline]:
    """A real one-GPU trace, and it twice as ranks 0 and 1 of one job."""
    one = load_trace(DATA / request.param, cache=False)
    return one, concat([one, one], ranks=[0, 1])


def test_two_ranks_are_two_gpus_each_with_the_figures_of_the_trace_alone(pair):
    one, job = pair
    (alone,) = device_overlap(one.events)
    both = device_overlap(job.events)
    assert [d.key for d in both] == [DeviceKey(0, alone.device), DeviceKey(1, alone.device)]
    assert both == [replace(alone, rank=0), replace(alone, rank=1)]
    assert both[1].copy_hidden_frac == alone.copy_hidden_frac and both[1].exposed_copy_ns == alone.exposed_copy_ns
    sets = device_sets(job.events, DeviceKey(1, alone.device))
    assert {k: v[0].tolist() for k, v in sets.items()} == {
        k: v[0].tolist() for k, v in device_sets(one.events, alone.device).items()
    }


def test_the_one_pass_sets_of_every_gpu_equal_each_gpu_filtered_alone(pair):
    _, job = pair
    found = all_device_sets(job.events)
    assert sorted(found) == [d.key for d in device_overlap(job.events)]
    for key, got in found.items():
        alone = device_sets(job.events, key)
        for name, (s, e) in alone.items():
            assert got.sets[name][0].tolist() == s.tolist() and got.sets[name][1].tolist() == e.tolist(), name
        rows = job.events[(job.events["rank"] == key.rank) & (job.events["device"] == key.device)]
        comm = rows[(rows["kind"] == "kernel") & (rows["collective"] != "")]
        want = iv.union(comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy())
        assert [a.tolist() for a in got.sets["comm"]] == [a.tolist() for a in want]
        assert (got.kernels, got.memcpys, got.memsets) == tuple(
            int((rows["kind"] == k).sum()) for k in ("kernel", "memcpy", "memset"))


def test_the_summary_json_names_each_gpu_rank_slash_device(pair):
    one, job = pair
    s1, sj = summarize(one), summarize(job)
    dev = next(iter(s1["devices"]))
    assert list(sj["devices"]) == [f"0/{dev}", f"1/{dev}"]
    assert sj["devices"][f"0/{dev}"] == sj["devices"][f"1/{dev}"] == s1["devices"][dev]
    assert sj["idle"] == {f"{r}/{dev}": s1["idle"][dev] for r in (0, 1)}
    # lanes, copies and threads: each row of the trace, once per rank, with its rank (threads busiest first)
    for key in ("lanes", "copies", "threads"):
        got = sorted(sj[key], key=lambda row: row["rank"]) if key == "threads" else sj[key]
        assert got == [{"rank": r, **row} for r in (0, 1) for row in s1[key]], key
    assert sj["span_ns"] == s1["span_ns"] and sj["gpu_span_ns"] == s1["gpu_span_ns"]
    assert sj["events"] == 2 * s1["events"]
    assert [(k["name"], k["count"], k["total_ns"]) for k in sj["top_kernels"]] == [
        (k["name"], 2 * k["count"], 2 * k["total_ns"]) for k in s1["top_kernels"]
    ]


def test_lane_and_thread_tables_carry_the_rank(pair):
    one, job = pair
    lanes = lane_stats(job.events)
    assert list(lanes.columns[:3]) == ["rank", "device", "stream"]
    alone = lane_stats(one.events)
    for r in (0, 1):
        assert lanes[lanes["rank"] == r].drop(columns="rank").reset_index(drop=True).equals(
            alone.drop(columns="rank").reset_index(drop=True))
    threads = host_thread_stats(job.events)
    assert sorted(threads["rank"].tolist()) == sorted([0, 1] * len(host_thread_stats(one.events)))
    copies = copy_summary(job.events)
    assert copies["rank"].tolist() == sorted([0, 1] * len(copy_summary(one.events)))


def test_concurrency_counts_two_gpus(pair):
    one, job = pair
    (busy,) = [d.busy_ns for d in device_overlap(one.events)]
    assert concurrent_devices_ns(one.events) == {1: busy}
    # the same work at the same times on two ranks' GPUs: two GPUs busy at once, all the time either is
    assert concurrent_devices_ns(job.events) == {2: busy}
    assert analyze(job).concurrency.together_ns(2) == busy


def test_ranges_count_per_rank(pair):
    one, job = pair
    r1 = {r.name: r for r in analyze(one).ranges.rows}
    rj = {r.name: r for r in analyze(job).ranges.rows}
    assert r1 and set(rj) == set(r1)
    for name, alone in r1.items():
        got = rj[name]
        # twice the instances, each credited with what it was alone: a range on rank 1 gets only rank 1's work
        # (joined on pid and correlation alone, each instance would take both ranks' kernels: 4x, not 2x)
        assert (got.count, got.host_ns, got.gpu_busy_ns, got.gpu_window_ns) == (
            2 * alone.count, 2 * alone.host_ns, 2 * alone.gpu_busy_ns, 2 * alone.gpu_window_ns)
        assert (got.kernels, got.memcpys, got.memsets) == (2 * alone.kernels, 2 * alone.memcpys, 2 * alone.memsets)
        assert (got.own_thread_kernels, got.own_thread_gpu_busy_ns) == (
            2 * alone.own_thread_kernels, 2 * alone.own_thread_gpu_busy_ns)
    pairs = range_launches(job.events)
    ev = job.events
    assert (ev.loc[pairs["range_row"], "rank"].to_numpy() == ev.loc[pairs["work_row"], "rank"].to_numpy()).all()


def test_a_bare_device_index_is_refused_where_it_names_two_gpus(pair):
    one, job = pair
    dev = device_overlap(one.events)[0].device
    assert len(idle_gaps(one.events, dev)) == len(idle_gaps(job.events, DeviceKey(1, dev)))
    with pytest.raises(ValueError, match="of which rank"):
        idle_gaps(job.events, dev)
    with pytest.raises(ValueError, match="pass a DeviceKey"):
        device_sets(job.events, dev)


def test_a_one_rank_trace_of_rank_1_reads_as_before():
    one = load_trace(DATA / "pair_kineto.json.gz", cache=False)
    (r1,) = [concat([one], ranks=[1])]
    assert summarize(r1) == summarize(one)  # labels name the rank only where there are several
    assert not analyze(r1).multi_rank


@pytest.mark.slow
def test_the_job_summary_round_trips_and_renders(pair):
    _, job = pair
    s = analyze(job)
    d = s.to_dict()
    back = Summary.from_dict(json.loads(json.dumps(d)))
    assert back.multi_rank and back.to_dict() == d
    assert back.devices == s.devices and back.lanes == s.lanes and back.copies == s.copies
    from rich.console import Console

    from tracer.cli.summary import render_summary

    console = Console(width=120, record=True)
    for r in render_summary(s, width=120):
        console.print(r)
    text = console.export_text()
    assert " 0/0 " in text and " 1/0 " in text


@pytest.mark.slow
def test_diff_of_two_jobs_pairs_gpus_by_rank_and_device(pair):
    one, job = pair
    d = diff_timelines(job, job)
    assert d.multi_rank and [(x.rank, x.device) for x in d.devices] == [(0, 0), (1, 0)]
    assert all(x.a == x.b for x in d.devices)
    doc = d.as_dict()
    assert [(x["rank"], x["device"]) for x in doc["devices"]] == [(0, 0), (1, 0)]
    # one rank against the job: rank 1's GPU is in B only
    half = diff_timelines(one, job)
    assert [(x.rank, x.device, x.a.kernels, x.b.kernels) for x in half.devices] == [
        (0, 0, x.b.kernels, x.b.kernels) for x in half.devices[:1]] + [(1, 0, 0, half.devices[1].b.kernels)]
    assert any(line.where.startswith("rank 1 · GPU 0") for line in half.account)


def test_diff_of_two_one_rank_traces_pairs_by_index_whatever_their_ranks():
    one = load_trace(DATA / "pair_kineto.json.gz", cache=False)
    d = diff_timelines(one, concat([one], ranks=[1]))
    assert not d.multi_rank and not d.notes
    assert [x.device for x in d.devices] == [0] and d.devices[0].a == d.devices[0].b
    assert "rank" not in d.as_dict()["devices"][0]


@pytest.mark.slow
def test_tracer_summary_of_a_job_timeline(tmp_path: Path):
    from tracer.files.storage import write_timeline_parquet

    one = load_trace(DATA / "pair_kineto.json.gz", cache=False)
    path = tmp_path / "job.parquet"
    write_timeline_parquet(concat([one, one], ranks=[0, 1]), path)
    proc = cli_main("summary", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc["devices"]) == ["0/0", "1/0"]
    assert {row["rank"] for row in doc["lanes"]} == {0, 1}


def test_the_one_pass_comm_sets_give_the_comm_analysis_figures_on_a_real_nccl_job():
    from tests.job_runs import HTA_RANKS
    from tracer.analysis.comm import device_comm
    from tracer.job.load import load_job

    job = load_job(HTA_RANKS, cache=False)
    found = all_device_sets(job.events)
    figures = device_comm(job.events)
    assert figures
    for d in figures:
        sets = found[d.key].sets
        assert iv.total(sets["comm"]) == d.comm_ns > 0
        assert iv.total(iv.intersect(sets["compute"], sets["comm"])) == d.overlap_ns
