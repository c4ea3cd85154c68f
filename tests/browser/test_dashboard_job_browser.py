"""A job's run in a real headless Chromium: the runs page says its rank count, the timeline opens with both
ranks, the rank filter keeps one, and the collectives table is there — a click on a row zooms the chart to
that collective, also a second click on the same row, also once the table is sorted by a header."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracer.dashboard import collectives_view, ids

from .conftest import Served, _need_chromium
from .test_dashboard_browser import GRAPH_JS, settle, window_ns

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ (job_runs), as pytest has it for tests/
from job_runs import HTA_RANKS, make_job_run  # noqa: E402

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def job_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    _need_chromium()
    from tracer.dashboard.app import create_app
    from tracer.dashboard.data import RunStore

    root = tmp_path_factory.mktemp("jobs")
    make_job_run(root / "hta-job", HTA_RANKS)
    store = RunStore([root], examples=False, runs_dir=None, upload_dir=tmp_path_factory.mktemp("uploads"))
    server = Served(create_app(store=store))
    yield server
    server.close()


#: The collectives table's rows as shown, top to bottom: the cells of one column (``"id"``: the rows' ids).
SHOWN_JS = f"""col => [...document.querySelectorAll('#{ids.TL_COLL_TABLE} .ag-center-cols-container .ag-row')]
    .sort((a, b) => Number(a.getAttribute('row-index')) - Number(b.getAttribute('row-index')))
    .map(r => col === 'id' ? r.getAttribute('row-id') : r.querySelector(`[col-id="${{col}}"]`).innerText)"""


def _labels(page) -> list[str]:
    return page.evaluate(f"() => {GRAPH_JS}.layout.yaxis.ticktext")


def test_a_job_filtered_to_one_rank_with_its_collectives_table(page, job_served) -> None:
    page.goto(job_served.url + "/runs")
    page.wait_for_selector("table.runs tbody tr[data-run='hta-job']")
    assert "2 ranks" in page.inner_text("tr[data-run='hta-job']")
    page.click("tr[data-run='hta-job'] a.run-link")
    page.wait_for_url("**/timeline?run=hta-job")
    settle(page)
    labels = _labels(page)
    assert any(x.startswith("rank 0 ·") for x in labels) and any(x.startswith("rank 1 ·") for x in labels)
    assert "Communication (collectives)" in page.evaluate(f"() => {GRAPH_JS}.data.map(t => t.name)")

    # the rank filter: untick rank 0
    page.locator(f"#{ids.TL_RANKS} label", has_text="rank 0").click()
    page.wait_for_function(f"() => {GRAPH_JS}.layout.yaxis.ticktext.every(t => t.startsWith('rank 1 ·'))")
    settle(page)

    # the collectives table: ten instances, a click on one zooms the chart to it
    table = page.locator(f"#{ids.TL_COLL_TABLE}")
    table.scroll_into_view_if_needed()
    assert "Straggler" in table.inner_text()
    rows = table.locator(".ag-center-cols-container .ag-row")
    assert rows.count() == 10
    before = window_ns(page)
    rows.nth(3).locator(".ag-cell").first.click()
    page.wait_for_function(f"w => {GRAPH_JS}.layout.meta.window_ns[0] !== w[0]", arg=before)
    lo, hi = window_ns(page)
    assert 0 < hi - lo < before[1] - before[0]
    assert all(x.startswith("rank 1 ·") for x in _labels(page))  # the zoom kept the filter

    # back to the whole run, then the same row again: it zooms again (each click is a new cellClicked)
    zoomed = (lo, hi)
    page.click(f"#{ids.TL_RESET}")
    page.wait_for_function(f"w => {GRAPH_JS}.layout.meta.window_ns[1] - {GRAPH_JS}.layout.meta.window_ns[0]"
                           " > w[1] - w[0]", arg=zoomed)
    rows.nth(3).locator(".ag-cell").first.click()
    page.wait_for_function(f"w => {GRAPH_JS}.layout.meta.window_ns[0] === w[0]", arg=zoomed)
    assert tuple(window_ns(page)) == zoomed

    # sorted by a header, in the browser and as numbers; a click on the top row then zooms to its collective
    view = job_served.store.view("hta-job")
    skews = [r["skew_us"] for r in collectives_view.table_rows(view)]
    table.locator(".ag-header-cell", has_text="Skew µs").click()
    page.wait_for_function(f"want => JSON.stringify(({SHOWN_JS})('skew_us').map(Number)) === JSON.stringify(want)",
                           arg=sorted(skews))  # (as text, 109290 would come before 1292)
    top = page.evaluate(SHOWN_JS, "id")[0]
    assert int(top) == min(range(len(view.collectives.rows)), key=lambda i: view.collectives.rows[i].skew_ns)
    before = window_ns(page)
    table.locator(f".ag-center-cols-container .ag-row[row-id='{top}'] .ag-cell").first.click()
    page.wait_for_function(f"w => {GRAPH_JS}.layout.meta.window_ns[0] !== w[0]", arg=before)
    lo, hi = view.collective_window(int(top))
    assert abs(window_ns(page)[0] - lo) < 1000 and abs(window_ns(page)[1] - hi) < 1000
    assert not page.js_errors
