"""Recording from inside a program: tracer.profile() and tracer.handler() (tracer/api.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tracer
from tracer.rundir import read_meta
from tracer.storage import read_timeline_parquet


def _train(run: tracer.api.Run | None, steps: int) -> None:
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        with torch.profiler.record_function("api/step"):
            loss = model(torch.randn(4, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if run is not None:
            run.step()


def _ranges(path: Path) -> dict[str, int]:
    ev = read_timeline_parquet(path / "timeline.parquet").events
    return ev.loc[ev["kind"] == "range", "name"].astype(str).value_counts().to_dict()


def test_profile_writes_a_run_with_its_steps(tmp_path: Path) -> None:
    with tracer.profile(out=tmp_path / "runs", name="mine") as run:
        _train(run, 3)
    assert run.path == tmp_path / "runs" / "mine"
    assert sorted(p.name for p in run.path.iterdir()) == ["meta.json", "summary.json", "timeline.parquet",
                                                           "trace.json.gz"]
    counts = _ranges(run.path)
    assert counts["api/step"] == 3 and {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"} <= set(counts)
    meta = read_meta(run.path)
    assert meta.mode == "api" and meta.backend == "torch" and run.summary["events"] > 0


def test_profile_keeps_the_run_when_the_block_raises(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError):
        with tracer.profile(out=tmp_path / "runs") as run:
            _train(run, 2)
            1 / 0  # noqa: B018
    assert run.path is not None and _ranges(run.path)["api/step"] == 2
    assert not [p for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")]  # no temporary left


def test_handler_makes_a_run_of_each_cycle(tmp_path: Path) -> None:
    on_ready = tracer.handler(out=tmp_path / "runs", name="cyc")
    sched = torch.profiler.schedule(wait=0, warmup=0, active=2, repeat=2)
    with torch.profiler.profile(schedule=sched, on_trace_ready=on_ready) as prof:
        for _ in range(4):
            _train(None, 1)
            prof.step()
    assert [p.name for p in on_ready.runs] == ["cyc", "cyc-2"]
    for run in on_ready.runs:
        assert _ranges(run)["api/step"] == 2


def test_import_tracer_stays_light() -> None:
    code = "import sys, tracer; print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
