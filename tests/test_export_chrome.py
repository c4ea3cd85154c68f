"""Chrome/Perfetto JSON export: the track layout Perfetto needs, exact times, flows, and round trips through
tracer's Kineto parser.

Perfetto itself is not available here (its trace processor is a download); the checks below state the rules it
applies to JSON traces (slices on one track must nest; ts/dur are µs, turned into ns by rounding µs × 1000) and
verify the file against them.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tracer.analysis.summary import summarize
from tracer.exporters import export_timeline
from tracer.exporters.chrome import SYNTHETIC_TID_BASE
from tracer.parsers import load_trace
from tracer.parsers.kineto import parse_kineto_bytes
from tracer.timeline import Timeline, TraceMeta, build_events

DATA = Path(__file__).parent / "data"
TRACES = [
    "copy_side_stream.json.gz",
    "mlp_train_200.json.gz",
    "two_streams.json.gz",
    "copy_nonblocking_same_stream.json.gz",
    "nsys_compute_copy.sqlite.gz",
]


def _export(timeline: Timeline, tmp_path: Path, name: str = "t.json") -> dict[str, Any]:
    out = export_timeline(timeline, tmp_path / name).path
    raw = out.read_bytes()
    return json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)


def _rows(events: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    df = events[cols].copy()
    for c in ("kind", "copy_kind", "name"):
        if c in df:
            df[c] = df[c].astype(str)
    for c in ("bytes", "correlation"):
        if c in df:
            df[c] = df[c].astype("float64")
    return df.sort_values(cols, kind="stable").reset_index(drop=True)


def _with_overrides(doc: dict[str, Any]) -> pd.DataFrame:
    """The X events with the pid/tid of the timeline row they came from (args.tracer_pid/tid where moved)."""
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    return pd.DataFrame({
        "pid": [e["args"].get("tracer_pid", e["pid"]) for e in xs],
        "tid": [e["args"].get("tracer_tid", e["tid"]) for e in xs],
        "ts": [e["ts"] for e in xs],
        "name": [e["name"] for e in xs],
    })


def _perfetto_ns(us: float) -> int:
    """What Perfetto's JSON importer makes of a µs double (json_trace_tokenizer: llround(v * 1000))."""
    return int(round(us * 1000.0))


def _perfetto_track_violations(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Slices that would not nest on their (pid, tid) track: what Perfetto refuses to import."""
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            s = _perfetto_ns(e["ts"])
            tracks[(e["pid"], e["tid"])].append((s, s + _perfetto_ns(e["dur"])))
    bad = []
    for key, spans in tracks.items():
        stack: list[int] = []
        for s, end in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            if stack and end > stack[-1]:
                bad.append((key, s, end, stack[-1]))
            stack.append(end)
    return bad


@pytest.mark.slow
@pytest.mark.parametrize("name", TRACES)
def test_round_trip_through_tracers_parser(tmp_path: Path, name: str) -> None:
    """Same rows: counts, times to the ns, kinds, names, devices, streams, copies, bytes, correlations; pid/tid
    as drawn, or (for rows drawn on another track) as recorded in args.tracer_pid/tid."""
    timeline = load_trace(DATA / name, cache=False)
    doc = _export(timeline, tmp_path)
    back = parse_kineto_bytes(json.dumps(doc).encode(), "t.json")
    cols = ["start_ns", "end_ns", "kind", "copy_kind", "name", "device", "stream", "rank", "bytes", "correlation"]
    pd.testing.assert_frame_equal(_rows(back.events, cols), _rows(timeline.events, cols))
    # pid/tid: what the file records for each row equals the timeline's
    recorded = _with_overrides(doc)
    want = timeline.events.assign(name=timeline.events["name"].astype(str))
    assert sorted(zip(recorded["pid"], recorded["tid"], recorded["name"])) == sorted(
        zip(want["pid"].tolist(), want["tid"].tolist(), want["name"])
    )
    assert back.meta.gpu_names == timeline.meta.gpu_names


@pytest.mark.slow
@pytest.mark.parametrize("name", TRACES)
def test_gpu_summary_survives(tmp_path: Path, name: str) -> None:
    timeline = load_trace(DATA / name, cache=False)
    back = parse_kineto_bytes(json.dumps(_export(timeline, tmp_path)).encode(), "t.json")
    a, b = summarize(timeline), summarize(back)
    for key in ("devices", "lanes", "span_ns", "gpu_span_ns", "concurrent_gpus_ns", "events", "idle", "top_kernels",
                "copies"):
        assert b.get(key) == a.get(key), key


@pytest.mark.slow
@pytest.mark.parametrize("name", TRACES)
def test_whole_timeline_and_summary_survive(tmp_path: Path, name: str) -> None:
    timeline = load_trace(DATA / name, cache=False)
    back = parse_kineto_bytes(json.dumps(_export(timeline, tmp_path)).encode(), "t.json")
    cols = list(timeline.events.columns)
    pd.testing.assert_frame_equal(_rows(back.events, cols), _rows(timeline.events, cols))
    a, b = summarize(timeline), summarize(back)
    for s in (a, b):
        s.pop("format"), s.pop("source")
    assert b == a


@pytest.mark.slow
@pytest.mark.parametrize("name", TRACES)
def test_every_track_nests_as_perfetto_needs(tmp_path: Path, name: str) -> None:
    doc = _export(load_trace(DATA / name, cache=False), tmp_path)
    assert _perfetto_track_violations(doc) == []


def test_overlapping_work_on_one_stream_goes_to_sub_tracks(tmp_path: Path) -> None:
    """A projected range straddling two kernels, and two copies that overlap without nesting (as a profiler can
    report them): nothing may be dropped, so they move to further tracks of the same stream."""
    ev = build_events({
        "start_ns": [1000, 3000, 2500, 10_000, 10_500],
        "end_ns": [2000, 4000, 3500, 11_000, 11_500],
        "kind": ["kernel", "kernel", "gpu_range", "memcpy", "memcpy"],
        "name": ["k1", "k2", "step", "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pinned)"],
        "copy_kind": ["", "", "", "DtoH", "DtoH"],
        "device": [0] * 5, "stream": [7] * 5, "pid": [0] * 5, "tid": [7] * 5,
    })
    result = export_timeline(Timeline(ev, TraceMeta(format="test")), tmp_path / "t.json")
    doc = json.loads(result.path.read_bytes())
    assert _perfetto_track_violations(doc) == []
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert sorted(names.values()) == [
        "GPU 0 · stream 7 · copies", "GPU 0 · stream 7 · copies · 2", "GPU 0 · stream 7 · kernels",
        "GPU 0 · stream 7 · ranges",
    ]
    assert any("split into sub-tracks" in n for n in result.notes)
    assert len([e for e in doc["traceEvents"] if e["ph"] == "X"]) == 5


def test_layout_one_process_per_gpu_and_named_threads(tmp_path: Path) -> None:
    doc = _export(load_trace(DATA / "copy_side_stream.json.gz", cache=False), tmp_path)
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    # Kineto's own "Activity Buffer Request" row has pid -1, which Perfetto cannot show: it gets a process of its own
    assert procs == {424: "python3", 0: "GPU 0 · NVIDIA H200", 0x7E000000 - 1: "no process (pid -1 in the trace)"}
    assert threads[(0, 7)] == "GPU 0 · stream 7 · kernels"
    assert threads[(0, 21)] == "GPU 0 · stream 21 · copies"
    assert threads[(424, 424)] == "thread 424 (python3)"
    ranges = [k for k, v in threads.items() if v == "thread 424 (python3) · ranges"]
    assert len(ranges) == 1 and ranges[0][1] >= SYNTHETIC_TID_BASE
    # no tid 0 (Perfetto reads it as "unset" and substitutes the pid)
    assert all(tid != 0 for _, tid in threads)


@pytest.mark.slow
def test_times_are_exact_to_the_nanosecond(tmp_path: Path) -> None:
    timeline = load_trace(DATA / "mlp_train_200.json.gz", cache=False)
    doc = _export(timeline, tmp_path)
    assert "displayTimeUnit" not in doc  # older Perfetto read "ns" there as the unit of ts itself
    base = doc["baseTimeNanoseconds"]
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    got = sorted((base + _perfetto_ns(e["ts"]), base + _perfetto_ns(e["ts"]) + _perfetto_ns(e["dur"])) for e in xs)
    want = sorted(zip(timeline.events["start_ns"].tolist(), timeline.events["end_ns"].tolist()))
    assert got == want


def test_times_stay_exact_far_from_the_base(tmp_path: Path) -> None:
    """Odd nanoseconds an hour into a trace on an epoch clock still come back exactly."""
    t0 = 1_790_857_026_123_456_789
    starts = np.array([t0, t0 + 3_600_000_000_001, t0 + 3_600_000_000_999, t0 + 7_200_123_456_789], dtype=np.int64)
    ev = build_events({"start_ns": starts, "end_ns": starts + np.array([1, 999, 1001, 123_456_789]),
                       "kind": ["cpu_op"] * 4, "name": ["a", "b", "c", "d"], "pid": [1] * 4, "tid": [1] * 4})
    timeline = Timeline(ev, TraceMeta(format="test"))
    doc = _export(timeline, tmp_path)
    back = parse_kineto_bytes(json.dumps(doc).encode(), "t.json")
    assert back.events["start_ns"].tolist() == starts.tolist()
    assert back.events["end_ns"].tolist() == ev["end_ns"].tolist()
    base = doc["baseTimeNanoseconds"]
    assert sorted(base + _perfetto_ns(e["ts"]) for e in doc["traceEvents"] if e["ph"] == "X") == starts.tolist()


def test_flows_join_each_launch_to_its_gpu_work(tmp_path: Path) -> None:
    timeline = load_trace(DATA / "copy_side_stream.json.gz", cache=False)
    doc = _export(timeline, tmp_path)
    ev = doc["traceEvents"]
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    finishes = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert set(starts) == set(finishes) and len(starts) == 100  # 50 kernels + 50 copies
    xs = [e for e in ev if e["ph"] == "X"]
    by_track_ts = {(e["pid"], e["tid"], e["ts"]): e for e in xs}
    for fid, s in starts.items():
        launch = by_track_ts[(s["pid"], s["tid"], s["ts"])]  # the flow starts on its launch's slice
        work = by_track_ts[(finishes[fid]["pid"], finishes[fid]["tid"], finishes[fid]["ts"])]
        assert finishes[fid]["bp"] == "e"
        assert launch["cat"] == "cuda_runtime" and work["cat"] in ("kernel", "gpu_memcpy")
        assert launch["args"]["correlation"] == work["args"]["correlation"]


def test_gzip_and_nsys_origin(tmp_path: Path) -> None:
    """A timeline parsed from nsys: GPU rows keep their process in args.tracer_pid, drawn under the GPU."""
    timeline = load_trace(DATA / "nsys_compute_copy.sqlite.gz", cache=False)
    doc = _export(timeline, tmp_path, "t.json.gz")
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == 11
    assert {(e["pid"], e["args"]["tracer_pid"]) for e in kernels} == {(0, 709)}
    copies = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    assert {e["tid"] for e in copies} == {13}


def test_rank_goes_to_distributed_info(tmp_path: Path) -> None:
    ev = build_events({"start_ns": [0], "end_ns": [5], "kind": ["cpu_op"], "name": ["a"], "pid": [1], "tid": [1],
                       "rank": [3]})
    doc = _export(Timeline(ev, TraceMeta(format="test")), tmp_path)
    assert doc["distributedInfo"] == {"rank": 3}
    assert parse_kineto_bytes(json.dumps(doc).encode()).events["rank"].tolist() == [3]
