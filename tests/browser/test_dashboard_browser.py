"""The dashboard in a real headless Chromium: runs page, the H200 compute-copy side-stream timeline, zoom,
double-click, the overview strip, click-to-launch, range names, uploads.

Every test waits for the state it checks — the figure's data drawn, Dash's callbacks done, the server's answer
in the figure — never for time, so a loaded machine only makes them slower.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tracer.dashboard import ids
from tracer.dashboard.data import bundled_examples_dir
from tracer.dashboard.figures import short_lane_label
from tracer.dashboard.model import CLASS_INDEX, N_CLASSES
from tracer.files.discover import discover

from .conftest import DATA

pytestmark = pytest.mark.browser

GRAPH_JS = f"document.querySelector('#{ids.TL_GRAPH} .js-plotly-plot')"
MINIMAP_JS = f"document.querySelector('#{ids.TL_MINIMAP} .js-plotly-plot')"

#: Both graphs drawn with their data, their event handlers bound (dcc.Graph binds them after the first plot:
#: a drag or click before that goes unheard), no resize pending and no Dash callback in flight.
SETTLED_JS = f"""() => {{
    const graphs = [{GRAPH_JS}, {MINIMAP_JS}];
    const ready = gd => !!(gd && gd.data && gd.data.length && gd._fullLayout && gd._ev
        && gd._ev.listeners('plotly_relayout').length && gd._ev.listeners('plotly_click').length
        && !gd.classList.contains('dash-graph--pending'));
    return graphs.every(ready) && !document.querySelector('[data-dash-is-loading="true"]');
}}"""

#: Page coordinates of the hover point (the clickable points) on row ``y`` nearest to ``x`` (a fraction of
#: the window), read from the drawn figure itself, so a click lands on a bar and not between two.
POINT_JS = f"""([row, frac]) => {{
    const gd = {GRAPH_JS};
    // _fullData: the arrays decoded (gd.data keeps the typed arrays base64-encoded as sent)
    const t = gd._fullData.find(t => t.name === 'hover');
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const target = xa.range[0] + frac * (xa.range[1] - xa.range[0]);
    let best = -1;
    for (let k = 0; k < t.x.length; k++) {{
        const d = Math.abs(t.x[k] - target);
        if (t.y[k] === row && (best < 0 || d < Math.abs(t.x[best] - target))) best = k;
    }}
    const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
    return {{x: box.left + xa.l2p(t.x[best]), y: box.top + ya.l2p(t.y[best]), src: t.customdata[best]}};
}}"""


def side_stream_key(store) -> str:
    """The bundled H200 compute-copy side-stream run; tests/data/copy_side_stream.json.gz until it lands."""
    candidates = []
    for info in store.runs():
        m = info.meta
        if info.origin == "example" and m.get("scenario") == "compute-copy" and m.get("gpu_names"):
            variant = str(m.get("variant", ""))
            candidates.append((0 if "side" in variant else 1 if variant == "all" else 2, info.key))
    candidates = [c for c in candidates if c[0] < 2]
    return min(candidates)[1] if candidates else "copy_side_stream"


def lane_labels_with(view, cls: str) -> set[str]:
    rows = {int(g) // N_CLASSES for g in np.unique(view.group) if int(g) % N_CLASSES == CLASS_INDEX[cls]}
    return {view.rows[r].lane_label for r in rows}


def settle(page) -> None:
    page.wait_for_function(SETTLED_JS)


def window_ns(page) -> list[int]:
    return page.evaluate(f"() => {GRAPH_JS}.layout.meta.window_ns")


def open_timeline(page, served, key):
    page.goto(f"{served.url}/timeline?run={key}")
    settle(page)
    return page


def drag(page, box, frac0: float, frac1: float) -> None:
    """A horizontal mouse drag across ``box`` from ``frac0`` to ``frac1`` of its width, at mid height."""
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * frac0, y)
    page.mouse.down()
    mid = (frac0 + frac1) / 2
    page.mouse.move(box["x"] + box["width"] * mid, y, steps=4)
    page.mouse.move(box["x"] + box["width"] * frac1, y, steps=4)
    page.mouse.up()


def zoom(page, frac0: float, frac1: float) -> list[int]:
    """Drag-zoom the main chart and wait for the server's redraw of the new window."""
    before = window_ns(page)
    drag(page, page.locator(f"#{ids.TL_GRAPH} .nsewdrag").first.bounding_box(), frac0, frac1)
    page.wait_for_function(f"w => {GRAPH_JS}.layout.meta.window_ns[0] !== w[0]", arg=before)
    settle(page)
    return window_ns(page)


def click_kernel(page, view, frac: float = 0.5) -> int:
    """Click the kernel bar nearest ``frac`` of the window on the first kernel row; its events row."""
    row = next(i for i, r in enumerate(view.rows) if r.lane_label in lane_labels_with(view, "kernel"))
    at = page.evaluate(POINT_JS, [row, frac])
    # Plotly clicks what its hover last found, and it hovers asynchronously: move there first and wait for
    # the hover to be on that point, or the click goes to wherever the mouse was before.
    page.mouse.move(at["x"], at["y"])
    page.wait_for_function(
        f"src => ({GRAPH_JS}._hoverdata || []).some(p => p.customdata === src)", arg=at["src"]
    )
    page.mouse.click(at["x"], at["y"])
    return int(at["src"])


def wait_for_launch(page) -> str:
    """The click's callback done: the launch named under the chart and its arrow drawn."""
    page.wait_for_function(
        f"() => document.getElementById('{ids.TL_LAUNCH}').innerText.includes('correlation')"
        f" && {GRAPH_JS}.data.some(t => t.name === 'launch → work')"
    )
    return page.inner_text(f"#{ids.TL_LAUNCH}")


def test_runs_page_lists_the_bundled_runs_and_the_given_traces(page, served):
    page.goto(served.url + "/runs")
    page.wait_for_selector("table.runs tbody tr")
    listed = set(
        page.eval_on_selector_all("table.runs tbody tr[data-run]", "rows => rows.map(r => r.dataset.run)")
    )
    bundled = [i.key for i in served.store.runs() if i.origin == "example"]
    assert len(bundled) == len(discover(bundled_examples_dir()))  # every bundled run found ...
    assert set(bundled) <= listed  # ... and listed
    assert {"copy_side_stream", "two_streams", "nsys_compute_copy"} <= listed
    # filtering is server-side and narrows the table
    page.fill(f"#{ids.RUNS_FILTER}", "two_streams")
    page.wait_for_function("() => document.querySelectorAll('table.runs tbody tr[data-run]').length === 1")
    assert page.js_errors == []


def test_side_stream_run_shows_compute_and_copy_lanes_and_the_overlap_band(page, served):
    key = side_stream_key(served.store)
    view = served.store.view(key)
    compute_lanes = lane_labels_with(view, "kernel")
    copy_lanes = lane_labels_with(view, "DtoH") | lane_labels_with(view, "HtoD")
    assert compute_lanes and copy_lanes and compute_lanes != copy_lanes  # separate streams
    open_timeline(page, served, key)
    ticks = page.eval_on_selector_all(f"#{ids.TL_GRAPH} .ytick text", "ts => ts.map(t => t.textContent)")
    for label in compute_lanes | copy_lanes:
        assert any(t.startswith(label) for t in ticks), (label, ticks)
    assert "GPU 0 · compute ∩ copy" in ticks
    # the overlap band is drawn: its trace has a non-empty path
    band = page.evaluate(
        f"() => {{ const gd = {GRAPH_JS}; const i = gd.data.findIndex(t => t.name === 'Compute ∩ copy');"
        " return i < 0 ? 0 : gd.querySelectorAll('.scatterlayer .trace')[i].querySelector('path.js-fill')"
        ".getAttribute('d').length; }"
    )
    assert band > 100
    cards = page.inner_text(f"#{ids.TL_CARDS}")
    assert "of copy time hidden" in cards and "GPU 0" in cards
    # the overview strip names its lanes (short), in the main chart's order
    strip = page.eval_on_selector_all(f"#{ids.TL_MINIMAP} .ytick text", "ts => ts.map(t => t.textContent)")
    assert strip == [short_lane_label(label) for _, label in view.lanes]
    assert page.js_errors == []


def test_zoom_redraws_the_window_from_the_server_and_double_click_restores_the_whole_run(page, served):
    key = side_stream_key(served.store)
    span = served.store.view(key).span_ns
    open_timeline(page, served, key)
    window = zoom(page, 0.30, 0.42)
    assert 0.08 * span < window[1] - window[0] < 0.2 * span
    assert page.evaluate(f"() => {GRAPH_JS}.layout.xaxis.range")[0] * 1e6 == window[0]
    assert page.inner_text(f"#{ids.TL_STATUS}").startswith(f"Window {window[0] / 1e6:.3f}")
    # double-click: the whole run, redrawn by the server
    box = page.locator(f"#{ids.TL_GRAPH} .nsewdrag").first.bounding_box()
    page.mouse.dblclick(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function(f"() => {GRAPH_JS}.layout.meta.window_ns[0] === 0")
    settle(page)
    assert window_ns(page) == [0, span]
    lo, hi = page.evaluate(f"() => {GRAPH_JS}._fullLayout.xaxis.range")
    assert lo == 0 and abs(hi * 1e6 - span) < 1  # the axis shows it too
    # zoom again, then Whole run
    zoom(page, 0.5, 0.6)
    page.click(f"#{ids.TL_RESET}")
    page.wait_for_function(f"() => {GRAPH_JS}.layout.meta.window_ns[0] === 0")
    assert page.js_errors == []


def test_a_drag_on_the_overview_strip_moves_the_main_chart_there(page, served):
    key = side_stream_key(served.store)
    span = served.store.view(key).span_ns
    open_timeline(page, served, key)
    strip = page.locator(f"#{ids.TL_MINIMAP} .nsewdrag").first.bounding_box()
    drag(page, strip, 0.20, 0.40)
    page.wait_for_function(f"() => {GRAPH_JS}.layout.meta.window_ns[0] > 0")
    settle(page)
    lo, hi = window_ns(page)
    assert 0.17 * span < lo < 0.23 * span and 0.37 * span < hi < 0.43 * span
    # the strip itself still shows the whole run, outlines the window and has let go of its selection box
    mini = page.evaluate(
        f"() => {{ const gd = {MINIMAP_JS}; return {{range: gd._fullLayout.xaxis.range,"
        " shapes: (gd.layout.shapes || []).map(s => [s.x0, s.x1]),"
        " selections: (gd.layout.selections || []).length}; }"
    )
    assert mini["range"][0] == 0 and abs(mini["range"][1] * 1e6 - span) < 1
    assert mini["shapes"] == [[lo / 1e6, hi / 1e6]] and mini["selections"] == 0
    # Whole run: the main chart goes back, the strip stays as it was and drops the outline
    page.click(f"#{ids.TL_RESET}")
    page.wait_for_function(f"() => {GRAPH_JS}.layout.meta.window_ns[0] === 0")
    settle(page)
    mini = page.evaluate(
        f"() => [{MINIMAP_JS}._fullLayout.xaxis.range, ({MINIMAP_JS}.layout.shapes || []).length]"
    )
    assert mini[0][0] == 0 and abs(mini[0][1] * 1e6 - span) < 1 and mini[1] == 0
    assert page.js_errors == []


def test_clicking_a_kernel_names_its_launch_and_the_arrow_stays_in_the_plot(page, served):
    key = side_stream_key(served.store)
    view = served.store.view(key)
    open_timeline(page, served, key)
    src = click_kernel(page, view)
    assert "cudaLaunch" in wait_for_launch(page)
    # zoomed in on the kernel alone, its launch is outside the window: the arrow is a trace, clipped to the
    # plot area, never an annotation arrow drawn across the lane labels
    ev = view.timeline.events
    start = int(ev.loc[src, "start_ns"]) - view.t0_ns
    end = int(ev.loc[src, "end_ns"]) - view.t0_ns
    page.evaluate(
        f"([a, b]) => Plotly.relayout({GRAPH_JS}, {{'xaxis.range[0]': a, 'xaxis.range[1]': b}})",
        [start / 1e6, end / 1e6],
    )
    page.wait_for_function(f"a => {GRAPH_JS}.layout.meta.window_ns[0] === a", arg=start)
    settle(page)
    assert page.evaluate(f"() => {GRAPH_JS}.data.some(t => t.name === 'launch → work')")
    assert page.locator(f"#{ids.TL_GRAPH} .annotation-arrow-g").count() == 0
    assert page.js_errors == []


def test_the_critical_path_toggles_and_a_finding_click_zooms_to_it(page, served):
    """The same-stream run: its critical path drawn over the lanes (on by default for a small trace), the
    toggle taking it off, and a click on the findings table's first row zooming the chart to that finding."""
    from tracer.dashboard import explain_view

    key = "copy_nonblocking_same_stream"
    view = served.store.view(key)
    open_timeline(page, served, key)
    has_path = f"() => {GRAPH_JS}.data.some(t => t.name === 'critical path')"
    assert page.evaluate(has_path)
    page.locator(f"#{ids.TL_PATH} input").click()
    page.wait_for_function(f"() => !({has_path})()")
    settle(page)
    rows = page.locator(f"#{ids.TL_FIND_TABLE} .ag-center-cols-container .ag-row")
    assert rows.count() == explain_view.PAGE_SIZE
    assert rows.nth(0).get_attribute("row-id") == "0"
    before = window_ns(page)
    rows.nth(0).locator(".ag-cell").first.click()
    page.wait_for_function(f"w => {GRAPH_JS}.layout.meta.window_ns[0] !== w[0]", arg=before)
    settle(page)
    result = explain_view.explained(view)
    lo, hi = explain_view.finding_window(view, result, 0)
    assert abs(window_ns(page)[0] - lo) < 1000 and abs(window_ns(page)[1] - hi) < 1000
    assert not page.evaluate(has_path)  # (the toggle's off stays off through the zoom)
    assert page.js_errors == []


def test_no_event_is_lost_while_the_server_is_busy(page, served, monkeypatch):
    """The flake's cause, made certain with a slow server: Dash drops a callback's in-flight answer when one
    of its inputs changes again. dcc.Graph's resize after its first plot sends relayoutData {autosize: true};
    when that reached the page's callback while a click's answer was on its way, the launch never showed."""
    from tracer.dashboard.pages import timeline

    answer = timeline.update

    def slowly(*args, **kwargs):
        time.sleep(1.0)
        return answer(*args, **kwargs)

    monkeypatch.setattr(timeline, "update", slowly)
    busy = f'#{ids.TL_GRAPH}[data-dash-is-loading="true"], #{ids.TL_GRAPH} [data-dash-is-loading="true"]'
    key = side_stream_key(served.store)
    view = served.store.view(key)
    open_timeline(page, served, key)
    # a click, then (its answer in flight) the relayout a resize sends
    click_kernel(page, view)
    page.wait_for_selector(busy, state="attached")
    page.evaluate(f"() => Plotly.relayout({GRAPH_JS}, {{autosize: true}})")
    first = wait_for_launch(page)
    assert "cudaLaunch" in first
    settle(page)
    # a click on another kernel, then (its answer in flight) a zoom: both end up drawn
    click_kernel(page, view, 0.25)
    page.wait_for_selector(busy, state="attached")
    page.evaluate(f"() => Plotly.relayout({GRAPH_JS}, {{'xaxis.range[0]': 20, 'xaxis.range[1]': 60}})")
    page.wait_for_function(
        f"first => {GRAPH_JS}.layout.meta.window_ns[0] === 20000000 && !document.querySelector('{busy}')"
        f" && document.getElementById('{ids.TL_LAUNCH}').innerText.includes('correlation')"
        f" && document.getElementById('{ids.TL_LAUNCH}').innerText !== first",
        arg=first,
    )
    assert window_ns(page) == [20_000_000, 60_000_000]


def test_range_names_are_drawn_on_their_bars(page, served):
    runs = [i for i in served.store.runs() if i.meta.get("scenario") == "multi-device"]
    key = runs[0].key if runs else "copy_side_stream"
    view = served.store.view(key)
    ev = view.timeline.events
    names = set(ev.loc[ev["kind"] == "range", "name"].astype(str))
    open_timeline(page, served, key)
    drawn = page.eval_on_selector_all(
        f"#{ids.TL_GRAPH} .scatterlayer .textpoint text", "ts => ts.map(t => t.textContent)"
    )
    assert drawn
    for text in drawn:  # each a range's name, whole or cut to its bar
        assert text in names or (text.endswith("…") and any(n.startswith(text[:-1]) for n in names)), text
    if runs:  # the three phases of the multi-device run, each named on its bar
        assert {"multi-device/alone-0", "multi-device/alone-1", "multi-device/together"} <= set(drawn)
    assert page.js_errors == []


def test_an_uploaded_trace_gets_its_own_address(page, served):
    page.goto(served.url + "/runs")
    page.wait_for_selector("table.runs")
    raw = (DATA / "two_streams.json.gz").read_bytes()
    page.set_input_files(
        f"#{ids.UPLOAD} input[type=file]",
        files=[{"name": "shared.json.gz", "mimeType": "application/gzip", "buffer": raw}],
    )
    page.wait_for_url("**/timeline?run=*")
    settle(page)
    key = page.url.split("run=", 1)[1]
    assert served.store.get(key).origin == "upload"
    assert page.inner_text(".heading h2") == "shared.json.gz"
    # the address is a link: reloading it shows the same run
    page.reload()
    settle(page)
    assert page.url.endswith(f"/timeline?run={key}")
    assert page.inner_text(".heading h2") == "shared.json.gz"
    assert "GPU 0 · stream 13" in page.inner_text(f"#{ids.TL_GRAPH}")
    assert page.js_errors == []


def test_bad_upload_shows_an_error_and_the_app_keeps_running(page, served):
    page.goto(served.url + "/runs")
    page.wait_for_selector("table.runs")
    page.set_input_files(
        f"#{ids.UPLOAD} input[type=file]",
        files=[
            {"name": "broken.json", "mimeType": "application/json", "buffer": b'{"traceEvents": [ {"ph": '}
        ],
    )
    page.wait_for_selector("#upload-error")
    message = page.inner_text("#upload-error")
    assert "Could not open the upload" in message and "broken.json" in message
    assert page.url.endswith("/runs")
    # still serving: another page loads and works
    open_timeline(page, served, "two_streams")
    assert "GPU 0 · stream 13" in page.inner_text(f"#{ids.TL_GRAPH}")

