"""The summary as typed results and one registry of analyses (issue 12): the JSON is made from the registry, read
back into the same types, and an analysis added by registering it shows in the JSON and the text."""

from __future__ import annotations

import gc
import json
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tracer.analysis import registry
from tracer.analysis.overlap import DeviceOverlap, device_overlap
from tracer.analysis.registry import Analysis, Column, Line, Table
from tracer.analysis.results import CopyStat, HostThread, LaneStat, Ranges
from tracer.analysis.summary import Summary, analyze, summarize
from tracer.errors import UsageError
from tracer.parsers import load_trace
from tracer.timeline import DeviceKey, Timeline, TraceMeta, build_events

DATA = Path(__file__).parent / "data"
TRACES = sorted(p.name for p in DATA.glob("*.json.gz")) + sorted(p.name for p in DATA.glob("*.sqlite.gz"))


@pytest.fixture(scope="module")
def pair() -> Timeline:
    return load_trace(DATA / "pair_kineto.json.gz", cache=False)


def _text(summary: object, width: int = 120) -> str:
    from rich.console import Console

    from tracer.cli.summary import render_summary

    console = Console(width=width, record=True)
    for r in render_summary(summary, width=width):
        console.print(r)
    return console.export_text()


@pytest.mark.slow
@pytest.mark.parametrize("name", TRACES)
def test_typed_results_round_trip_through_the_json(name: str) -> None:
    t = load_trace(DATA / name, cache=False)
    s = analyze(t)
    doc = s.to_dict()
    raw = orjson.dumps(doc)
    back = Summary.from_dict(json.loads(raw))
    assert orjson.dumps(back.to_dict()) == raw  # same keys, same order, same values
    assert back.devices == s.devices  # a one-rank trace of rank 0: the types themselves come back
    assert back.lanes == s.lanes and back.threads == s.threads and back.copies == s.copies
    assert back.ranges == s.ranges and back.idle == s.idle and back.concurrency == s.concurrency
    assert _text(back) == _text(s)


def test_the_json_keys_are_the_registry_s_in_its_order(pair: Timeline) -> None:
    pair.meta.extra["run"] = {"scenario": "pair"}
    try:
        doc = summarize(pair)
    finally:
        pair.meta.extra.pop("run")
    keys = [k for a in registry.analyses() for k in a.json_keys]
    # the communication analyses write nothing for a trace without communication (this one)
    assert list(doc) == [k for k in keys if k not in ("comm", "comm_total", "collectives", "collective_ranks")]
    assert keys[-5:] == ["comm", "comm_total", "collectives", "collective_ranks", "launches"]
    assert "launches" in doc  # (this trace's kernels were launched by calls in it)
    assert keys[:4] == ["format", "source", "devices", "lanes"]  # the shape docs promise


def test_copy_hidden_is_on_the_typed_per_gpu_result(pair: Timeline) -> None:
    (d,) = analyze(pair).devices
    assert isinstance(d, DeviceOverlap) and d.key == DeviceKey(0, 0)
    assert d.copy_hidden_frac == d.overlap_ns / d.copy_ns
    assert d.exposed_copy_ns == d.copy_ns - d.overlap_ns
    assert d.copy_hidden_pct == 100.0 * d.overlap_ns / d.copy_ns
    no_copy = DeviceOverlap(0, 10, 0, 0, 10, 1, 0, 0)
    assert no_copy.copy_hidden_frac is None and no_copy.copy_hidden_pct is None and no_copy.exposed_copy_ns == 0
    # an exact half is kept exact in percent: 23 of 40 ns is 57.5%, not 57.49999…
    assert f"{DeviceOverlap(0, 40, 40, 23, 40, 1, 1, 0).copy_hidden_pct:.0f}" == "58"


def test_the_summary_is_a_mapping_of_its_json_computing_only_what_is_asked(pair: Timeline) -> None:
    s = Summary.of(pair)
    assert s["devices"] == {"0": device_overlap(pair.events)[0].as_dict()}
    assert s.has("devices") and not s.has("ranges") and not s.has("lanes")
    assert s.get("gpu_names") == {str(k): v for k, v in pair.meta.gpu_names.items()}
    assert s.get("no such key") is None and "run" not in s
    assert dict(s) == summarize(pair) and s == summarize(pair)


def test_ranges_are_computed_when_first_asked_for(pair: Timeline) -> None:
    s = analyze(pair)
    assert s.has("devices") and not s.has("ranges")
    assert isinstance(s.ranges, Ranges) and s.has("ranges")
    assert summarize(pair, ranges=False) == s.to_dict(skip=("ranges",))
    assert "ranges" not in summarize(pair, ranges=False)


@pytest.mark.slow
def test_a_summary_that_does_not_keep_its_timeline() -> None:
    t = load_trace(DATA / "pair_kineto.json.gz", cache=False)
    s = analyze(t, keep_timeline=False)
    assert s.ranges is not None  # while the caller holds the timeline, the lazy part is there
    s = analyze(t, keep_timeline=False)
    devices = s.devices
    del t
    gc.collect()
    assert s.devices == devices  # what was computed stays
    with pytest.raises(UsageError, match="was not computed, and the timeline it needs is gone"):
        s.part("ranges")


def test_rows_are_typed(pair: Timeline) -> None:
    s = analyze(pair)
    assert all(isinstance(x, LaneStat) for x in s.lanes) and all(isinstance(x, CopyStat) for x in s.copies)
    assert all(isinstance(x, HostThread) for x in s.threads)
    assert s.format == "kineto" and s.span.span_ns == s["span_ns"] and s.events == len(pair.events)


# ---------------------------------------------------------------------------------------------------- registering


@dataclass(frozen=True)
class Longest:
    name: str
    dur_ns: int


def _longest(t: Timeline) -> Longest | None:
    k = t.events[t.events["kind"] == "kernel"]
    if k.empty:
        return None
    dur = k["end_ns"] - k["start_ns"]
    row = dur.idxmax()
    return Longest(str(k.loc[row, "name"]), int(dur[row]))


@pytest.fixture
def longest_kernel():
    analysis = registry.register(Analysis(
        "longest_kernel", "The single longest kernel", _longest,
        to_json=lambda r, s: {"longest_kernel": None if r is None else {"name": r.name, "dur_ns": r.dur_ns}},
        from_json=lambda d: Longest(**d["longest_kernel"]) if d.get("longest_kernel") else None,
        json_keys=("longest_kernel",),
        blocks=lambda r, s, o: [] if r is None else [
            Line.of(f"Longest kernel: {r.dur_ns:,} ns"),
            Table("Longest", (Column("kernel", justify="left"), Column("ns")), ((r.name, f"{r.dur_ns:,}"),)),
        ],
        text_order=95,
    ))
    yield analysis
    registry.unregister(analysis.name)


def test_a_registered_analysis_is_in_the_json_the_text_and_the_cli(longest_kernel, pair: Timeline) -> None:
    s = analyze(pair)
    doc = s.to_dict()
    assert list(doc)[-1] == "longest_kernel"  # added after the others: nothing of the shape moves
    k = pair.events[pair.events["kind"] == "kernel"]
    assert doc["longest_kernel"]["dur_ns"] == int((k["end_ns"] - k["start_ns"]).max())
    assert s.part("longest_kernel") == Summary.from_dict(doc).part("longest_kernel")
    assert s["longest_kernel"] == doc["longest_kernel"]
    text = _text(s)
    assert f"Longest kernel: {doc['longest_kernel']['dur_ns']:,} ns" in text
    assert text.index("NVTX / record_function ranges") < text.index("Longest kernel")  # text_order 95


def test_registering_twice_is_refused(longest_kernel) -> None:
    with pytest.raises(ValueError, match="registered already"):
        registry.register(longest_kernel)
    with pytest.raises(ValueError, match=r"JSON keys \['devices'\] of 'other' belong to \['devices'\]"):
        registry.register(Analysis("other", "", lambda t: None, lambda r, s: {}, lambda d: None, ("devices",)))
    with pytest.raises(KeyError, match="no analysis named 'nope'"):
        registry.get("nope")


def test_text_of_a_json_summary_without_every_key() -> None:
    # what older summary.json files, and hand-made dicts, hold: missing keys read as empty
    doc = {"format": "kineto", "source": "run", "span_ns": 1, "devices": {}, "lanes": []}
    text = _text(doc)
    assert "run  [kineto]  span 0.000 ms, 0 intervals" in text and "No GPU work in this trace." in text


def test_cpu_only_summary_says_so_and_lists_threads() -> None:
    ev = build_events({"start_ns": [0, 0], "end_ns": [10, 5], "kind": ["cpu_op", "cpu_op"], "name": ["a", "b"],
                       "pid": [1, 1], "tid": [2, 3]})
    s = analyze(Timeline(ev, TraceMeta(format="test", thread_names={"1:2": "main"})))
    assert s.devices == [] and [t.name for t in s.threads] == ["main", ""]
    text = _text(s)
    assert "No GPU work in this trace (CPU-only run?): per host thread below." in text
    assert "Host threads: framework ops" in text and "main" in text
