"""A job's rank traces read as one timeline (tracer/job/load.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracer.errors import UsageError
from tracer.job.load import load_job
from tracer.job.ranks import assign_ranks, group_parts, rank_in_name
from tracer.parsers import load_trace
from tracer.timeline import Timeline

EXTERNAL = Path(__file__).parent / "data" / "external"
HTA_RANKS = [EXTERNAL / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (1, 0)]


def test_rank_in_a_file_name() -> None:
    assert rank_in_name("trace_rank-3.json.gz") == 3
    assert rank_in_name("rank12-pid4242.json.gz") == 12
    assert rank_in_name("RANK_0.pt.trace.json") == 0
    assert rank_in_name("frank3.json") is None
    assert rank_in_name("rank1-rank2.json") is None  # two different ranks: no answer
    assert rank_in_name("worker0.pt.trace.json.gz") is None
    assert rank_in_name("rank40000.json") is None  # beyond the timeline's int16 rank


def test_hta_ranks_read_as_one_job() -> None:
    job = load_job(HTA_RANKS)  # given out of order
    single = {r: load_trace(p, cache=False) for r, p in ((1, HTA_RANKS[0]), (0, HTA_RANKS[1]))}
    ev = job.events
    assert sorted(ev["rank"].unique().tolist()) == [0, 1] and job.multi_rank
    for rank, t in single.items():
        part = ev[ev["rank"] == rank]
        assert len(part) == len(t.events)
        # Kineto traces of one job are on the Unix clock already: nothing moves
        assert part["start_ns"].min() == t.events["start_ns"].min()
        assert int((part["end_ns"] - part["start_ns"]).sum()) == int((t.events["end_ns"] - t.events["start_ns"]).sum())
    assert job.meta.extra["ranks"]["0"]["rank_from"] == "distributedInfo"
    assert job.meta.extra["ranks"]["1"]["source"].endswith("rank-1.json.gz")


def test_two_traces_of_one_rank_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "copy_of_rank-1.json.gz"
    other.write_bytes(HTA_RANKS[0].read_bytes())
    with pytest.raises(UsageError, match="one trace per rank"):
        load_job([HTA_RANKS[0], other])


def test_ranks_from_names_then_order(tmp_path: Path) -> None:
    t = load_trace(HTA_RANKS[1], cache=False)
    bare = Timeline(t.events, type(t.meta)(format="kineto"))  # no distributedInfo
    ranks = assign_ranks([Path("a/rank5-pid1.json.gz"), Path("b/trace.json.gz")], [bare, bare])
    assert [(r.rank, r.rank_from) for r in ranks] == [(5, "file name"), (1, "order")]


def test_a_trace_on_an_unknown_clock_cannot_join_a_job() -> None:
    t = load_trace(HTA_RANKS[1], cache=False)
    unknown = Timeline(t.events, type(t.meta)(format="kineto"))
    loads = {HTA_RANKS[0]: unknown, HTA_RANKS[1]: t}
    with pytest.raises(UsageError, match="no known offset"):
        load_job(HTA_RANKS, load=loads.__getitem__)


def test_the_parts_of_one_process_are_one_rank(tmp_path: Path) -> None:
    names = ["rank0-pid7.json.gz", "rank0-pid7-part2.json.gz", "rank1-pid8.json.gz", "pid9-part3.json.gz",
             "pid9.json.gz"]
    groups = [[p.name for p in g] for g in group_parts([tmp_path / n for n in names])]
    assert groups == [["rank0-pid7.json.gz", "rank0-pid7-part2.json.gz"], ["rank1-pid8.json.gz"],
                      ["pid9.json.gz", "pid9-part3.json.gz"]]
    t = load_trace(HTA_RANKS[1], cache=False)
    loads = {tmp_path / "rank0-pid7.json.gz": t, tmp_path / "rank0-pid7-part2.json.gz": t}
    job = load_job(list(loads), load=loads.__getitem__)
    assert job.events["rank"].unique().tolist() == [0] and len(job.events) == 2 * len(t.events)


def test_an_empty_part_joins_a_job() -> None:
    from tracer.timeline import TraceMeta, concat, empty_events

    t = load_trace(HTA_RANKS[1], cache=False)
    empty = Timeline(empty_events(), TraceMeta(format="kineto"))
    job = concat([empty, t], ranks=[3, 4])
    assert job.events["rank"].unique().tolist() == [4] and len(job.events) == len(t.events)
    assert len(job.meta.extra["parts"]) == 2


def test_summary_reads_rank_files_as_one_job(capsys: pytest.CaptureFixture) -> None:
    import orjson

    from tracer.cli import main

    assert main(["summary", "--json", "--no-cache", "--job", *map(str, HTA_RANKS)]) == 0
    (doc,) = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(doc["devices"]) == ["0/0", "1/1"]
    for rank, path in ((1, HTA_RANKS[0]), (0, HTA_RANKS[1])):
        assert main(["summary", "--json", "--no-cache", str(path)]) == 0
        single = orjson.loads(capsys.readouterr().out)
        ((dev, figures),) = single["devices"].items()
        assert doc["devices"][f"{rank}/{dev}"] == figures  # each rank's GPU keeps its own figures exactly
