"""The dashboard fits the window (issue 36, point 6), measured in a real headless Chromium at 1600×1000 and at
1280×800: the runs table within the window, every run's name on at most two lines, failed runs and host-only runs
told apart; range names never over one another on the CPU DDP job; findings cells within their column; the compare
page's bar charts' labels clear of the chart below and its legend clear of the titles.

Each test opens its own page at the viewport asked for, over the ``served`` app (tests/data, with the CPU runs of
``tests/data/cpu-runs``, and the bundled examples)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tracer.dashboard import ids

from .conftest import DATA
from .test_dashboard_browser import settle

pytestmark = pytest.mark.browser

VIEWPORTS = [(1600, 1000), (1280, 800)]
CPU_RUNS = DATA / "cpu-runs"
DDP = "ddp-gloo-2ranks-20261206-213039"
#: The longest names `tracer record` gives (compute-copy-non-blocking-streams-20261202-161723 is 49 characters)
RECORDED_NAME_CHARS = 52


@pytest.fixture(params=VIEWPORTS, ids=lambda v: f"{v[0]}x{v[1]}")
def sized(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A page of the viewport asked for, collecting its JS errors."""
    width, height = request.param
    context = browser.new_context(viewport={"width": width, "height": height})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.js_errors = errors
    yield pg
    context.close()


def _key(served: Any, path_name: str) -> str:
    return next(i.key for i in served.store.runs() if i.path.name == path_name)


def _overlapping(boxes: list[dict[str, float]], slack: float = 0.5) -> list[tuple[int, int]]:
    """The pairs of ``boxes`` (x, y, width, height) that overlap by more than ``slack`` pixels each way."""
    out = []
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            b = boxes[j]
            if (min(a["x"] + a["width"], b["x"] + b["width"]) - max(a["x"], b["x"]) > slack
                    and min(a["y"] + a["height"], b["y"] + b["height"]) - max(a["y"], b["y"]) > slack):
                out.append((i, j))
    return out


#: Every run name's link on the runs page: its height in lines, and whether its text is cut (clamped).
NAMES_JS = """() => [...document.querySelectorAll('table.runs a.run-link')].map(a => {
    const line = parseFloat(getComputedStyle(a).lineHeight);
    return {name: a.textContent, title: a.title, lines: Math.round(a.getBoundingClientRect().height / line),
            cut: a.scrollHeight > a.clientHeight + 1};
})"""


def test_the_runs_table_fits_the_window_and_marks_failed_and_host_runs(sized, served) -> None:
    page = sized
    page.goto(served.url + "/runs")
    page.wait_for_selector("table.runs tbody tr[data-run]")
    width = page.evaluate("() => window.innerWidth")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    table = page.locator("table.runs").bounding_box()
    assert table is not None and table["x"] >= 0 and table["x"] + table["width"] <= width
    names = page.evaluate(NAMES_JS)
    assert len(names) == len(served.store.runs())
    assert [n for n in names if n["lines"] > 2] == []  # each on one or two lines ...
    # ... whole where `tracer record` named it (scenario-variant-mode-date-time, up to ~50 characters); a longer
    # file name (HTA's 62-character ones) is cut at the second line and whole on hover
    assert [n for n in names if n["cut"] and len(n["name"]) <= RECORDED_NAME_CHARS] == []
    assert all(n["title"] == n["name"] for n in names)
    # a failed command's run is marked, from its meta.json's exit code
    failed = page.locator(f"tr[data-run='{_key(served, 'train-cpu-failed')}']")
    assert failed.locator(".badge-failed").inner_text() == "failed (exit 1)"
    assert page.locator(f"tr[data-run='{_key(served, 'train-cpu')}'] .badge-failed").count() == 0
    # a run without GPU work shows what it has across the GPU columns, not a dash in each
    host = page.locator(f"tr[data-run='{_key(served, DDP)}'] td.host-figures")
    assert host.inner_text().startswith("host only · busy r")
    assert page.js_errors == []


def test_range_names_of_the_cpu_ddp_job_never_cover_each_other(sized, served) -> None:
    page = sized
    page.goto(f"{served.url}/timeline?run={_key(served, DDP)}")
    settle(page)
    boxes = page.eval_on_selector_all(
        f"#{ids.TL_GRAPH} .scatterlayer .textpoint text",
        "ts => ts.map(t => { const r = t.getBoundingClientRect(); return {x: r.x, y: r.y, width: r.width, "
        "height: r.height, text: t.textContent}; })",
    )
    assert len(boxes) >= 6  # the steps, forward and backward are named ...
    assert _overlapping(boxes) == [], [(boxes[i]["text"], boxes[j]["text"]) for i, j in _overlapping(boxes)]
    # ... and nothing claims what a host-only job has not
    text = page.inner_text("main")
    for claim in ("compute ∩ copy", "GPU -1", "stream -1", "every copy overlapped", "Click a kernel or copy"):
        assert claim not in text
    assert "rank 0 · host" in text or "rank 1 · host" in text or "No findings" in text
    assert page.js_errors == []


#: Each cell of the findings grid: whether its text runs past the cell, sideways or below its row (AG Grid clips
#: a cell's value inside it: the value's own size is compared); and each cell of the kinds' table above it.
CELLS_JS = f"""() => {{
    const grid = [...document.querySelectorAll('#{ids.TL_FIND_TABLE} .ag-center-cols-container .ag-cell')].map(c => {{
        const value = c.querySelector('.ag-cell-value') || c;
        const row = c.closest('.ag-row').getBoundingClientRect();
        return {{col: c.getAttribute('col-id'), wide: value.scrollWidth > c.clientWidth + 1,
                 tall: value.scrollHeight > value.clientHeight + 1
                       || value.getBoundingClientRect().bottom > row.bottom + 1}};
    }});
    const kinds = [...document.querySelectorAll('#{ids.TL_FIND_GROUPS} td')].map(c => (
        {{col: 'kinds', wide: c.scrollWidth > c.clientWidth + 1, tall: false}}));
    const section = document.getElementById('{ids.TL_FIND_SECTION}');
    return [...grid, ...kinds, {{col: 'section', wide: section.scrollWidth > section.clientWidth + 1, tall: false}}];
}}"""


def test_findings_stay_in_their_cells_and_a_busy_run_s_path_starts_off(sized, served) -> None:
    page = sized
    # small-ops: its findings name kernels such as "void at::native::vectorized_elementwise_kernel<4, ...>(...)", 120
    # characters without a space, which ran over the next column
    small = next(i for i in served.store.runs() if i.meta.get("scenario") == "small-ops")
    page.goto(f"{served.url}/timeline?run={small.key}")
    settle(page)
    page.wait_for_selector(f"#{ids.TL_FIND_TABLE} .ag-center-cols-container .ag-cell")
    page.wait_for_timeout(300)  # (AG Grid sizes its auto-height rows after the first paint)
    cells = page.evaluate(CELLS_JS)
    assert cells and [c for c in cells if c["wide"] or c["tall"]] == []
    headers = page.eval_on_selector_all(f"#{ids.TL_FIND_TABLE} .ag-header-cell-text", "hs => hs.map(h => h.innerText)")
    assert "Fix" not in headers  # said once per kind, in the table above
    # the critical path of a busy run starts off, saying why, and is not drawn
    busy = next(i for i in served.store.runs() if i.meta.get("scenario") == "mlp-data-parallel")
    page.goto(f"{served.url}/timeline?run={busy.key}")
    settle(page)
    assert not page.is_checked(f"#{ids.TL_PATH} input")
    assert "busy run" in page.inner_text(f"#{ids.TL_PATH_NOTE}")
    drawn = page.evaluate(f"() => document.querySelector('#{ids.TL_GRAPH} .js-plotly-plot').data.map(t => t.name)")
    assert "critical path" not in drawn
    assert page.js_errors == []


#: The diff charts' parts as drawn: the first chart's x tick labels, the second chart's plot area, the titles
#: (annotations) and the legend.
CHART_JS = f"""() => {{
    const gd = document.querySelector('#{ids.DIFF_CHART} .js-plotly-plot');
    const box = e => {{ const r = e.getBoundingClientRect(); return {{x: r.x, y: r.y, width: r.width, height: r.height}}; }};
    return {{
        ticks: [...gd.querySelectorAll('.xaxislayer-above .xtick text, g.xtick text')]
            .filter(t => t.closest('g[class*="xaxislayer"]') && t.closest('.cartesianlayer > .subplot.xy')).map(box),
        second: box(gd.querySelector('.cartesianlayer > .subplot.x2y2 .bg, .draglayer .x2y2 .nsewdrag')),
        titles: [...gd.querySelectorAll('.annotation')].map(box),
        legend: box(gd.querySelector('.legend')),
    }};
}}"""


def test_the_compare_page_s_bar_charts_keep_their_labels_and_legend_clear(sized, served) -> None:
    page = sized
    page.goto(f"{served.url}/compare?a=copy_side_stream&b=copy_nonblocking_same_stream")
    page.wait_for_selector(f"#{ids.DIFF_CHART} .js-plotly-plot .xtick text")
    page.wait_for_timeout(300)
    parts: dict[str, Any] = page.evaluate(CHART_JS)
    assert parts["ticks"], "the first chart's tick labels"
    assert len(parts["titles"]) == 2
    second_title = max(parts["titles"], key=lambda b: b["y"])
    for tick in parts["ticks"]:  # above the second chart's title and its plot
        assert tick["y"] + tick["height"] <= second_title["y"] + 0.5, (tick, second_title)
        assert tick["y"] + tick["height"] <= parts["second"]["y"] + 0.5
    assert _overlapping([parts["legend"], *parts["titles"]]) == []  # the legend sits on no title
    assert page.js_errors == []
