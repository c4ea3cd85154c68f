"""The source lines on the timeline page in a real headless Chromium (issue 37, part 5): a click on a line of the
"by source line" table outlines its intervals on the chart (a patch of the outline trace alone) and marks the row, a
click on a kernel names its line and the chain above it, a second click on the line clears the outline. On the
hand-made GPU training loop with Python stacks (tests/stack_traces.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stack_traces import write_planted  # tests/stack_traces.py

from tracer.dashboard import ids

from .conftest import Served, _need_chromium
from .test_dashboard_browser import GRAPH_JS, click_kernel, settle

pytestmark = pytest.mark.browser

#: The outline trace's points as drawn (``_fullData``: the arrays decoded), and the figure's trace count.
OUTLINE_JS = f"""() => {{
    const gd = {GRAPH_JS};
    const t = gd._fullData[gd._fullData.length - 1];
    const points = (t.x || []).filter(v => v !== null && v !== undefined && !Number.isNaN(v)).length;
    const drawn = gd.querySelectorAll('.scatterlayer .trace').length;  // (the empty outline too: a gap point)
    return {{name: t.name, points: points, traces: gd.data.length, drawn: drawn}};
}}"""


@pytest.fixture(scope="module")
def lines_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    _need_chromium()
    from tracer.dashboard.app import create_app
    from tracer.dashboard.data import RunStore

    path = write_planted(tmp_path_factory.mktemp("planted"))
    server = Served(create_app(store=RunStore([path], examples=False, runs_dir=None)))
    yield server
    server.close()


def test_a_click_on_a_line_outlines_its_intervals_and_a_kernel_click_names_its_line(page, lines_served):
    key = lines_served.store.runs()[0].key
    view = lines_served.store.view(key)
    page.goto(f"{lines_served.url}/timeline?run={key}")
    settle(page)
    before = page.evaluate(OUTLINE_JS)
    assert before["name"] == "source line" and before["points"] == 0  # (drawn empty: there for a patch)
    assert before["drawn"] == before["traces"]  # (every trace has its group: scripts count them to know it drew)
    rows = page.locator(f"#{ids.TL_LINES_TABLE} .ag-center-cols-container .ag-row")
    assert rows.count() == 5
    loop = page.locator(f"#{ids.TL_LINES_TABLE} .ag-center-cols-container .ag-row[row-id='2']")
    assert "train.py:9" in loop.inner_text() and "out = out * 1.01" in loop.inner_text()
    loop.locator(".ag-cell").first.click()
    page.wait_for_function(f"() => ({OUTLINE_JS})().points > 0")
    settle(page)
    after = page.evaluate(OUTLINE_JS)
    assert after["traces"] == before["traces"]  # (the outline replaced in place: no trace added or lost)
    status = page.inner_text(f"#{ids.TL_STATUS}")
    assert "outlined train.py:9:" in status and "of its intervals in this window" in status
    page.wait_for_function(f"() => document.querySelector(\"#{ids.TL_LINES_TABLE} .ag-row[row-id='2']\")"
                           ".classList.contains('ag-row-selected')")
    # a kernel's click: its launch and the line of the user's code behind it, innermost first (the chart scrolled
    # back into view: the table's click left the page scrolled down to it)
    page.evaluate("() => window.scrollTo(0, 0)")
    click_kernel(page, view)
    page.wait_for_function(f"() => !!document.getElementById('{ids.TL_FRAME}')")
    frame = page.inner_text(f"#{ids.TL_FRAME}")
    assert frame.startswith("From your code: train.py:") and "← train.py:15 main() ← train.py:18 <module>()" in frame
    settle(page)
    assert page.evaluate(OUTLINE_JS)["points"] > 0  # (the redraw for the click keeps the outline)
    # the same line again: no outline, no row marked
    loop.locator(".ag-cell").first.click()
    page.wait_for_function(f"() => ({OUTLINE_JS})().points === 0")
    page.wait_for_function(f"() => !document.querySelector('#{ids.TL_LINES_TABLE} .ag-row-selected')")
    assert "outlined" not in page.inner_text(f"#{ids.TL_STATUS}")
    assert page.js_errors == []
