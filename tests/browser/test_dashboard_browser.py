"""The dashboard in a real headless Chromium: runs page, the H200 compute-copy side-stream timeline, zoom,
click-to-launch, and a bad upload that leaves the app running."""

from __future__ import annotations

import numpy as np

from dashboard import ids
from dashboard.data import bundled_examples_dir
from tracer.discover import discover
from dashboard.model import CLASS_INDEX, N_CLASSES

GRAPH_JS = f"document.querySelector('#{ids.TL_GRAPH} .js-plotly-plot')"


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


def open_timeline(page, served, key):
    page.goto(f"{served.url}/timeline?run={key}")
    page.wait_for_selector(f"#{ids.TL_GRAPH} .scatterlayer .trace")
    # dcc.Graph binds its event handlers after the first plot; a drag before that would go unheard
    page.wait_for_function(
        f"() => {{ const gd = {GRAPH_JS}; return !!(gd && gd._ev && gd._ev.listeners('plotly_relayout').length"
        " && gd._ev.listeners('plotly_click').length); }"
    )
    return page


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
    assert page.js_errors == []


def test_zoom_redraws_the_window_from_the_server(page, served):
    open_timeline(page, served, side_stream_key(served.store))
    before = page.inner_text(f"#{ids.TL_STATUS}")
    box = page.locator(f"#{ids.TL_GRAPH} .nsewdrag").first.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.30, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.36, y, steps=4)
    page.mouse.move(box["x"] + box["width"] * 0.42, y, steps=4)
    page.mouse.up()
    page.wait_for_function(f"s => document.getElementById('{ids.TL_STATUS}').innerText !== s", arg=before)
    window = page.evaluate(f"() => {GRAPH_JS}.layout.meta.window_ns")
    span = served.store.view(side_stream_key(served.store)).span_ns
    assert 0.08 * span < window[1] - window[0] < 0.2 * span
    assert page.evaluate(f"() => {GRAPH_JS}.layout.xaxis.range")[0] * 1e6 == window[0]
    # back to the whole run
    page.click(f"#{ids.TL_RESET}")
    page.wait_for_function(f"() => {GRAPH_JS}.layout.meta.window_ns[0] === 0")
    assert page.js_errors == []


def test_clicking_a_kernel_names_its_launch(page, served):
    key = side_stream_key(served.store)
    open_timeline(page, served, key)
    # click the middle of the first lane that holds kernels
    view = served.store.view(key)
    kernel_row = next(i for i, r in enumerate(view.rows) if r.lane_label in lane_labels_with(view, "kernel"))
    box = page.locator(f"#{ids.TL_GRAPH} .nsewdrag").first.bounding_box()
    y = box["y"] + box["height"] * (kernel_row + 0.5) / len(view.rows)
    page.mouse.click(box["x"] + box["width"] * 0.5, y)
    page.wait_for_function(
        f"() => document.getElementById('{ids.TL_LAUNCH}').innerText.includes('correlation')"
    )
    assert "cudaLaunch" in page.inner_text(f"#{ids.TL_LAUNCH}")


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
    # still serving: another page loads and works
    open_timeline(page, served, "two_streams")
    assert "GPU 0 · stream 13" in page.inner_text(f"#{ids.TL_GRAPH}")
