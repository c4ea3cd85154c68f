"""CUDA / HIP graph replays: the kernels one ``cudaGraphLaunch`` / ``hipGraphLaunch`` runs are credited to it.

A graph replay is one host call and many kernels; Kineto gives every kernel of the replay the launch call's
correlation id. The trace here is TraceLens's vLLM decode step on an MI300 (one ``hipGraphLaunch`` that runs
421 kernels, beside a few eager launches), so the counts below are checked against the raw JSON.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from tracer.analysis.ranges import range_launches, range_summary
from tracer.dashboard.figures import launch_of
from tracer.dashboard.model import prepare
from tracer.parsers import load_trace

TRACE = Path(__file__).parent / "data" / "external" / "TraceLens_vllm_decode_full_graph_execution.json.gz"


@pytest.fixture(scope="module")
def raw() -> list[dict]:
    with gzip.open(TRACE, "rt") as f:
        return json.load(f)["traceEvents"]


@pytest.fixture(scope="module")
def timeline():
    return load_trace(TRACE, cache=False)


def _graph_corr(raw: list[dict]) -> int:
    (launch,) = [e for e in raw if e.get("name") == "hipGraphLaunch"]
    return int(launch["args"]["correlation"])


def test_every_kernel_of_the_replay_is_credited_to_the_graph_launch(raw, timeline):
    corr = _graph_corr(raw)
    expected = sum(1 for e in raw if e.get("cat") == "kernel" and e["args"].get("correlation") == corr)
    assert expected > 100  # the fixture is what this test is about: one launch, many kernels

    view = prepare(timeline)
    ev = timeline.events
    kernels = ev.index[(ev["kind"] == "kernel") & (ev["correlation"] == corr)]
    assert len(kernels) == expected
    launched_by = Counter(launch_of(view, int(k))["launch_name"] for k in kernels)
    assert launched_by == {"hipGraphLaunch": expected}


def test_a_range_around_the_graph_launch_gets_the_replayed_kernels(raw, timeline):
    corr = _graph_corr(raw)
    ev = timeline.events
    pairs = range_launches(ev)
    graph_kernels = set(ev.index[(ev["kind"] == "kernel") & (ev["correlation"] == corr)])
    (launch_row,) = ev.index[ev["name"] == "hipGraphLaunch"]
    enclosing = ev[(ev["kind"] == "range") & (ev["start_ns"] <= ev.at[launch_row, "start_ns"])
                   & (ev["end_ns"] >= ev.at[launch_row, "end_ns"])]
    assert len(enclosing) >= 1
    credited = set(pairs.loc[pairs["range_row"].isin(enclosing.index), "work_row"])
    assert graph_kernels <= credited

    # and the range's kernel count is the replay plus the eager launches inside it, counted from the raw file
    name = enclosing.iloc[0]["name"]
    (r,) = [e for e in raw if e.get("name") == name and e.get("cat") == "user_annotation"]
    inside = {e["args"]["correlation"] for e in raw
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
              and e["pid"] == r["pid"] and r["ts"] <= e["ts"] <= r["ts"] + r["dur"]}
    raw_kernels = sum(1 for e in raw if e.get("cat") == "kernel" and e["args"].get("correlation") in inside)
    assert raw_kernels > len(graph_kernels)  # eager launches too
    assert int(range_summary(ev).set_index("name").at[name, "kernels"]) == raw_kernels



# ----- the H200 recordings of tests/data/record_graph.py (3 replays of a 24-kernel graph, 24 eager kernels)

H200 = Path(__file__).parent / "data"
GRAPH_TRACES = ["graph_kineto.json.gz", "graph_node.sqlite.gz"]


def _kernels_per_range(path: Path) -> dict[str, int]:
    table = range_summary(load_trace(path, cache=False).events)
    return {str(k): int(v) for k, v in zip(table["name"], table["kernels"])}


@pytest.mark.parametrize("name", GRAPH_TRACES)
def test_graph_replays_are_credited_to_the_range_that_launched_them(name):
    assert _kernels_per_range(H200 / name) == {"graph/replay": 72, "graph/eager": 24, "graph/copy": 0}


@pytest.mark.parametrize("name", GRAPH_TRACES)
def test_each_replayed_kernel_names_a_graph_launch(name):
    timeline = load_trace(H200 / name, cache=False)
    view = prepare(timeline)
    ev = timeline.events
    launches = Counter(launch_of(view, int(i))["launch_name"].split("_v")[0] for i in ev.index[ev["kind"] == "kernel"])
    assert launches["cudaGraphLaunch"] == 72
    assert sum(launches.values()) == 96


def test_whole_graph_tracing_counts_each_replay_as_one_interval_and_says_so():
    # nsys's default (--cuda-graph-trace=graph) has no kernel rows for a replay: one GRAPH_TRACE row each
    timeline = load_trace(H200 / "graph_whole.sqlite.gz", cache=False)
    ev = timeline.events
    graphs = ev[(ev["kind"] == "kernel") & ev["name"].str.startswith("CUDA graph")]
    # the three rows of CUPTI_ACTIVITY_KIND_GRAPH_TRACE (FIXTURES.md), exactly
    assert sorted((graphs["end_ns"] - graphs["start_ns"]).tolist()) == [115_039, 115_072, 115_360]
    assert _kernels_per_range(H200 / "graph_whole.sqlite.gz") == {"graph/replay": 3, "graph/eager": 24, "graph/copy": 0}
    assert any("3 CUDA graph replays traced as whole graphs" in n for n in timeline.meta.extra["notes"])


def test_summary_says_that_replays_were_traced_whole(capsys):
    from tracer.cli import main

    assert main(["summary", str(H200 / "graph_whole.sqlite.gz"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert "3 CUDA graph replays traced as whole graphs" in err
    assert json.loads(out)["meta"]["notes"] == [err.strip().split(": ", 3)[3]]
