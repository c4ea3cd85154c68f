"""The bundled H200 runs (tracer/examples) tell the story the scenarios are about, read through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracer
from tests.conftest import cli_main
from tracer.parsers import load_trace

EXAMPLES = Path(tracer.__file__).parent / "examples"
RUNS = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())


def meta(run: Path) -> dict:
    return json.loads((run / "meta.json").read_text())


def runs_of(scenario: str, variant: str) -> list[Path]:
    return [r for r in RUNS if meta(r)["scenario"] == scenario and meta(r).get("variant") == variant]


def summary_json(run: Path) -> dict:
    proc = cli_main("summary", "--json", str(run))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_scenario_is_bundled_with_both_back_ends():
    seen = {(meta(r)["scenario"], meta(r)["backend"]) for r in RUNS if meta(r)["mode"] != "command"}
    scenarios = {s for s, _ in seen}
    assert len(scenarios) == 7
    assert all((s, "nsys") in seen and (s, "torch") in seen for s in scenarios)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "nsys"])
def test_side_stream_copies_hide_behind_compute(backend):
    (run,) = [r for r in runs_of("compute-copy", "side-stream") if meta(r)["backend"] == backend]
    dev = summary_json(run)["devices"]["0"]
    assert dev["memcpys"] == 50 and dev["kernels"] == 50
    assert dev["overlap_ns"] >= 0.8 * dev["copy_ns"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "nsys"])
@pytest.mark.parametrize("variant", ["non-blocking", "blocking"])
def test_same_stream_copies_wait_for_compute(backend, variant):
    (run,) = [r for r in runs_of("compute-copy", variant) if meta(r)["backend"] == backend]
    out = summary_json(run)
    assert out["devices"]["0"]["overlap_ns"] == 0
    assert out["devices"]["0"]["memcpys"] == 50


def lane_counts(run: Path) -> dict[tuple[int, int], tuple[int, int]]:
    ev = load_trace(run, cache=False).events
    work = ev[ev["kind"].isin(["kernel", "memcpy"])]
    counts = work.groupby(["device", "stream", "kind"], observed=True).size().unstack(fill_value=0)
    return {(int(d), int(s)): (int(r.get("kernel", 0)), int(r.get("memcpy", 0))) for (d, s), r in counts.iterrows()}


@pytest.mark.slow
def test_torch_and_nsys_twins_see_the_same_work_per_stream():
    pairs = 0
    for torch_run in (r for r in RUNS if meta(r)["backend"] == "torch"):
        m = meta(torch_run)
        twins = [r for r in RUNS if meta(r)["backend"] == "nsys" and meta(r)["scenario"] == m["scenario"]
                 and meta(r).get("variant") == m.get("variant") and meta(r).get("params") == m.get("params")]
        for twin in twins:
            assert lane_counts(torch_run) == lane_counts(twin), (torch_run.name, twin.name)
            pairs += 1
    assert pairs == 10  # nine scenario pairs and the user script's (tracer record -- python bench/user_train.py)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "nsys"])
def test_the_user_script_run_is_a_command_run(backend):
    (run,) = [r for r in RUNS if meta(r)["mode"] == "command" and meta(r)["backend"] == backend]
    m = meta(run)
    assert m["command"][1:] == ["bench/user_train.py", "--steps", "50", "--workers", "2"] and m["exit_code"] == 0
    assert m["gpu_names"] == {"0": "NVIDIA H200"}
    dev = summary_json(run)["devices"]["0"]
    # every copy (the batches' HtoD, AMP's scaler checks) queues on the compute stream: none hides
    assert (dev["kernels"], dev["memcpys"]) == (2664, 257) and dev["overlap_ns"] == 0
