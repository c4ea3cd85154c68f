"""The timeline package's shared keys, launch join, concat and clocks (issue 12)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracer.errors import UsageError
from tracer.parsers import load_trace
from tracer.timeline import (
    CLOCK_NSYS_SESSION,
    CLOCK_UNIX,
    DeviceKey,
    LaneKey,
    Timeline,
    TraceMeta,
    align,
    build_events,
    concat,
    device_label,
    lane_title,
    launch_links,
    validate,
)
from tracer.timeline.keys import pack

DATA = Path(__file__).parent / "data"


def _tiny(rank: int = 0, name: str = "k") -> Timeline:
    ev = build_events(
        {
            "start_ns": [0, 10, 20],
            "end_ns": [5, 30, 25],
            "kind": ["runtime", "kernel", "memcpy"],
            "name": ["cudaLaunchKernel", name, "Memcpy DtoH"],
            "copy_kind": ["", "", "DtoH"],
            "device": [-1, 0, 0],
            "stream": [-1, 7, 7],
            "pid": [100, 100, 100],
            "tid": [1, 7, 7],
            "rank": [rank] * 3,
            "correlation": pd.array([5, 5, pd.NA], dtype="Int64"),
        }
    )
    return Timeline(ev, TraceMeta(format="kineto", clock=CLOCK_UNIX, clock_offset_ns=0))


def test_labels_name_the_rank_only_in_a_job() -> None:
    assert device_label(DeviceKey(3, 0), multi_rank=False) == "0"
    assert device_label(DeviceKey(1, 0), multi_rank=True) == "1/0"
    assert lane_title(LaneKey(1, 0, 7), multi_rank=True) == "rank 1 · GPU 0 · stream 7"
    assert lane_title(LaneKey(0, 2, 7), multi_rank=False) == "GPU 2 · stream 7"


def test_pack_keeps_keys_apart_and_in_order() -> None:
    rank = np.array([0, 0, 1, 1, 0])
    dev = np.array([-1, 0, 0, 0, 0])
    stream = np.array([-1, 7, 7, 8, 7])
    code = pack(rank, dev, stream)
    assert code[1] == code[4] and len(set(code.tolist())) == 4
    keys = list(zip(rank, dev, stream))
    assert sorted(range(5), key=lambda i: code[i]) == sorted(range(5), key=lambda i: keys[i])
    with pytest.raises(ValueError):
        pack(np.array([2**40]), dev[:1], stream[:1])


def test_links_join_on_rank_pid_and_correlation() -> None:
    job = concat([_tiny(), _tiny()], ranks=[0, 1])
    links = launch_links(job.events)
    ev = job.events
    # each kernel is linked to its own rank's call, not the other rank's (same pid, same correlation id)
    assert len(links) == 2
    for w, c in zip(links["work_row"], links["call_row"]):
        assert ev.at[w, "kind"] == "kernel" and ev.at[c, "kind"] == "runtime"
        assert ev.at[w, "rank"] == ev.at[c, "rank"]
    assert launch_links(job.events) is links  # computed once per frame


def test_links_on_a_real_trace_match_the_hand_join() -> None:
    t = load_trace(DATA / "pair_kineto.json.gz", cache=False)
    ev = t.events
    links = t.links()
    work = ev.loc[links["work_row"]]
    calls = ev.loc[links["call_row"]]
    assert (work["correlation"].to_numpy() == calls["correlation"].to_numpy()).all()
    assert (work["pid"].to_numpy() == calls["pid"].to_numpy()).all()
    launched = ev[ev["kind"].isin(["kernel", "memcpy", "memset"]) & ev["correlation"].notna()]
    assert set(launched.index) <= set(links["work_row"])


def test_concat_merges_names_ranks_and_offsets() -> None:
    a, b = _tiny(name="gemm"), _tiny(name="relu")
    job = concat([a, b], ranks=[0, 1], offsets=[0, 1000])
    validate(job.events)
    assert isinstance(job.events["name"].dtype, pd.CategoricalDtype)
    assert set(job.events["name"].astype(str)) == {"cudaLaunchKernel", "gemm", "relu", "Memcpy DtoH"}
    assert job.events.groupby("rank")["start_ns"].min().to_dict() == {0: 0, 1: 1000}
    assert job.multi_rank and not a.multi_rank
    assert len(job.meta.extra["parts"]) == 2
    with pytest.raises(UsageError):
        concat([a], offsets=[2**62])


def test_align_puts_nsys_on_the_unix_clock() -> None:
    k = load_trace(DATA / "pair_kineto.json.gz", cache=False)
    n = load_trace(DATA / "pair.sqlite.gz", cache=False)
    assert (k.meta.clock, k.meta.clock_offset_ns) == (CLOCK_UNIX, 0)
    assert n.meta.clock == CLOCK_NSYS_SESSION and n.meta.clock_offset_ns == n.meta.extra["session_start_utc_ns"]
    assert align(k) is k
    na = align(n)
    assert na.meta.clock == CLOCK_UNIX
    shift = na.events["start_ns"] - n.events["start_ns"]
    assert (shift == n.meta.clock_offset_ns).all()
    # the two recordings of record_pair.py ran one after the other, seconds apart: on one clock they are
    # seconds apart, not 1.8e18 ns as their own clocks say
    gap = int(na.events["start_ns"].min()) - int(k.events["start_ns"].min())
    assert 0 < gap < 60 * 10**9


def test_align_refuses_an_unknown_clock() -> None:
    t = _tiny()
    t.meta.clock, t.meta.clock_offset_ns = "", None
    with pytest.raises(UsageError, match="no known offset"):
        align(t)


def test_meta_round_trips_its_clock() -> None:
    meta = TraceMeta(format="nsys", clock=CLOCK_NSYS_SESSION, clock_offset_ns=123)
    back = TraceMeta.from_dict(meta.to_dict())
    assert (back.clock, back.clock_offset_ns) == (CLOCK_NSYS_SESSION, 123)
    old = TraceMeta.from_dict({"format": "kineto"})  # written before clocks were stored
    assert (old.clock, old.clock_offset_ns) == ("", None)


#: Unix times printed by tests/data/record_clock.py just before each "clock/mark" range (H200, 2026-12-03).
CLOCK_MARKS = [1796308992085221877, 1796308992136396981, 1796308992187276180]


def test_one_process_under_nsys_and_kineto_lines_up_after_align() -> None:
    """One process recorded by nsys and torch.profiler at once (NVIDIA H200): after align(), the same range
    starts within a millisecond in both, NVTX's first (it is opened first), both just after the Unix time the
    process printed."""
    k = align(load_trace(DATA / "clock_kineto.json.gz", cache=False))
    n = align(load_trace(DATA / "clock.sqlite.gz", cache=False))
    starts = []
    for t in (k, n):
        ev = t.events
        marks = ev[(ev["kind"] == "range") & (ev["name"].astype(str) == "clock/mark")]
        starts.append(marks["start_ns"].to_numpy())
    kineto, nsys = starts
    assert len(kineto) == len(nsys) == 3
    assert ((nsys <= kineto) & (kineto - nsys < 1_000_000)).all()
    for s in starts:
        assert ((s >= CLOCK_MARKS) & (s - CLOCK_MARKS < 1_000_000)).all()


def test_a_frame_whose_row_labels_repeat_is_numbered_afresh_and_analyses_as_the_same_rows() -> None:
    # launch links, ranges and the explain graph find rows by label: repeated labels made launch_pairs raise
    # ("Reindexing only valid with uniquely valued Index objects")
    from tracer.analysis.summary import summarize

    t = load_trace(DATA / "copy_side_stream.json.gz", cache=False)
    repeated = t.events.copy()
    repeated.index = [7] * len(repeated)
    made = Timeline(repeated, t.meta)
    assert made.events.index.is_unique and made.events.index.equals(pd.RangeIndex(len(repeated)))
    assert summarize(made) == summarize(t)
    made.events = repeated  # (and on a later assignment)
    assert made.events.index.is_unique
    kept = t.events.set_axis(range(100, 100 + len(t.events)))  # unique labels are kept as they are
    assert Timeline(kept, t.meta).events.index[0] == 100
