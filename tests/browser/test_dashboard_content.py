"""What the pages say, in a real headless Chromium: a CPU-only run's page (its sentence, host-thread cards and
lane names as the y axis draws them) and the runs list's parameters and tooltips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracer.dashboard import ids

from .conftest import DATA, Served, _need_chromium

pytestmark = pytest.mark.browser

GRAPH = f"#{ids.TL_GRAPH} .js-plotly-plot"


@pytest.fixture(scope="module")
def cpu_served(tmp_path_factory):
    """The app over one CPU-only run directory: the host side of a real trace (mlp_train_200, with nested ops
    on two threads), stored with a meta.json that says mode cpu-threads, as `tracer record --device cpu` does."""
    _need_chromium()
    from tracer.dashboard.app import create_app
    from tracer.dashboard.data import RunStore
    from tracer.files.storage import write_timeline_parquet
    from tracer.parsers import load_trace
    from tracer.timeline import Timeline

    t = load_trace(DATA / "mlp_train_200.json.gz", cache=False)
    t.meta.gpu_names = {}
    run = Path(tmp_path_factory.mktemp("runs")) / "mlp-cpu-threads"
    run.mkdir()
    write_timeline_parquet(
        Timeline(t.events[t.events["device"] < 0].reset_index(drop=True), t.meta), run / "timeline.parquet"
    )
    meta = {
        "scenario": "mlp-data-parallel",
        "variant": "parallel",
        "params": {"variant": "parallel", "lanes": 2, "seed": 0, "steps": 3, "cpu_share": 0.25},
        "mode": "cpu-threads",
        "devices": ["cpu"],
        "gpu_names": {},
        "backend": "torch",
    }
    (run / "meta.json").write_text(json.dumps(meta))
    store = RunStore([run], examples=False, runs_dir=None)
    server = Served(create_app(store=store))
    yield server
    server.close()


def test_cpu_only_run_says_so_and_shows_its_threads(page, cpu_served):
    key = cpu_served.store.initial_run
    view = cpu_served.store.view(key)
    page.goto(f"{cpu_served.url}/timeline?run={key}")
    page.wait_for_selector(f"{GRAPH} .scatterlayer .trace")
    cards = page.inner_text(f"#{ids.TL_CARDS}")
    assert "No GPU work" not in cards
    assert "This run has no GPU activity: it was recorded on the CPU (mode cpu-threads)" in cards
    threads = {r.lane_label for r in view.rows if r.lane.startswith("cpu/")}
    assert len(threads) >= 2
    assert page.locator(f"#{ids.TL_CARDS} .host-card").count() == len(threads)  # one card per thread
    assert cards.count("of the run's span") == len(threads)
    heading = page.inner_text(".heading")
    assert "cpu_share=0.25" in heading and "Device: CPU — mode cpu-threads" in heading
    # the y axis shows the lane names whole: nesting depth spelled out, nothing cut by the margin
    ticks = page.eval_on_selector_all(f"#{ids.TL_GRAPH} .ytick text", "ts => ts.map(t => t.textContent)")
    assert ticks == [r.label for r in view.rows]
    assert any(t.endswith("· ops, depth 2") for t in ticks) and any(
        t.endswith("CUDA API calls") for t in ticks
    )
    box = page.locator(f"#{ids.TL_GRAPH} .ytick text").first.bounding_box()
    assert box is not None and box["x"] >= 0  # the longest labels are not pushed off the left edge
    assert page.js_errors == []


def test_runs_list_shows_parameters_and_explains_its_columns(page, served):
    page.goto(served.url + "/runs")
    page.wait_for_selector("table.runs tbody tr")
    mlp = [i for i in served.store.runs() if i.meta.get("scenario") == "mlp-data-parallel"]
    if not mlp:
        pytest.skip("the bundled mlp-data-parallel runs are not installed")
    for info in mlp:
        row = page.inner_text(f"table.runs tr[data-run='{info.key}']")
        params = info.meta["params"]
        if "cpu_share" in params:
            assert f"cpu_share={params['cpu_share']:g}" in row
        # a run of both parts shows the speedup's pair; a run of one variant (tests/data/h200-sizes) names it
        assert ("single / parallel" if params.get("variant", "all") == "all" else f"\n{params['variant']}\n") in row
    title = page.get_attribute("table.runs th:has(button:text-is('Speedup'))", "title")
    assert title and "wall times the scenario measured itself" in title
    assert page.js_errors == []
