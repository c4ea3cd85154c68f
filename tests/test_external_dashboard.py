"""The dashboard opens every trace others ship (tests/data/external): layout, figure and minimap, no browser."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracer.dashboard.figures import full_window, minimap_figure, timeline_figure
from tracer.dashboard.model import prepare
from tracer.parsers import load_trace

EXTERNAL = Path(__file__).parent / "data" / "external"
TRACES = sorted(p for p in EXTERNAL.glob("*.gz"))


@pytest.mark.parametrize("path", TRACES, ids=[p.name.split(".")[0][:40] for p in TRACES])
def test_the_dashboard_draws_each_external_trace(path: Path) -> None:
    timeline = load_trace(path, cache=False)
    view = prepare(timeline)
    fig = timeline_figure(view, full_window(view), width_px=1200)
    meta = fig.layout.meta
    assert meta["intervals"] > 0 and meta["blocks"] > 0
    gpu_rows = [r for r in view.rows if r.lane.startswith("gpu")]
    has_gpu_work = timeline.events["kind"].isin(("kernel", "memcpy", "memset")).any()
    assert bool(gpu_rows) == bool(has_gpu_work)
    assert minimap_figure(view, full_window(view)).data
