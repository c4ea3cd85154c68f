"""The dashboard without a browser: layout of a real H200 trace, figures, the data layer and the callbacks,
called as plain functions (the browser tests in tests/browser/ drive the same app through Chromium)."""

import base64
import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from dashboard import ids
from dashboard.app import create_app, route, upload
from dashboard.data import RunStore, speedup_of
from tracer.discover import discover
from dashboard.figures import compare_figure, launch_of, minimap_figure, timeline_figure
from dashboard.model import CLASS_INDEX, prepare
from dashboard.pages import runs, timeline
from tracer.errors import TracerError, UsageError
from tracer.parsers import load_trace

DATA = Path(__file__).parent / "data"
SIDE = DATA / "copy_side_stream.json.gz"
SAME = DATA / "copy_nonblocking_same_stream.json.gz"


@pytest.fixture(scope="module")
def side_view():
    return prepare(load_trace(SIDE, cache=False))


def _store(*paths, **kw):
    kw.setdefault("examples", False)
    kw.setdefault("runs_dir", None)
    return RunStore(list(paths), **kw)


# ----- layout of a real trace


def test_side_stream_lanes_are_grouped_by_device_with_an_overlap_band(side_view):
    labels = [r.label for r in side_view.rows]
    assert labels[:3] == ["GPU 0 · compute ∩ copy", "GPU 0 · stream 7", "GPU 0 · stream 21"]
    assert any(label.startswith("CPU · thread 424") for label in labels)
    assert any(label.startswith("NVTX · thread 424") for label in labels)


def test_compute_and_copies_of_one_stream_get_separate_sub_rows():
    view = prepare(load_trace(SAME, cache=False))
    labels = [r.label for r in view.rows]
    assert "GPU 0 · stream 7 · kernels" in labels and "GPU 0 · stream 7 · copies" in labels


def test_overlap_band_holds_the_overlap_of_the_summary(side_view):
    band = side_view.group == CLASS_INDEX["overlap"]  # row 0, overlap class
    total = int((side_view.end_ns[band] - side_view.start_ns[band]).sum())
    assert total == side_view.devices[0].overlap_ns == 56818859


def test_every_gpu_interval_is_drawn_once(side_view):
    ev = side_view.timeline.events
    gpu = ev[ev["kind"].isin(["kernel", "memcpy", "memset"])]
    drawn = set(side_view.src[side_view.src >= 0].tolist())
    assert set(gpu.index.tolist()) <= drawn
    assert len(side_view.src[side_view.src >= 0]) == len(drawn)


# ----- figures


def test_timeline_figure_whole_run_merges_and_says_so(side_view):
    fig = timeline_figure(side_view, width_px=1000)
    assert isinstance(fig, go.Figure)
    meta = fig.layout.meta
    assert meta["intervals"] == len(side_view.start_ns)
    assert 0 < meta["blocks"] < meta["intervals"]
    names = {t.name for t in fig.data}
    assert {"Kernel", "Copy DtoH", "Compute ∩ copy", "hover"} <= names
    assert list(fig.layout.yaxis.ticktext[:3]) == [
        "GPU 0 · compute ∩ copy",
        "GPU 0 · stream 7",
        "GPU 0 · stream 21",
    ]


def test_zoomed_in_every_interval_is_its_own_block_with_details(side_view):
    fig = timeline_figure(side_view, (40_000_000, 45_000_000), width_px=1000)
    meta = fig.layout.meta
    assert meta["window_ns"] == [40_000_000, 45_000_000]
    hover = next(t for t in fig.data if t.name == "hover")
    texts = set(hover.text)
    assert any("sm80_xmma_gemm" in t and "duration" in t for t in texts)
    assert any("Memcpy DtoH" in t and "GB/s" in t for t in texts)


def test_hover_text_is_per_block_not_per_interval():
    """A million sub-pixel intervals must not become a million hover strings."""
    view = prepare(load_trace(DATA / "mlp_train_200.json.gz", cache=False))
    fig = timeline_figure(view, width_px=800)
    hover = next(t for t in fig.data if t.name == "hover")
    assert fig.layout.meta["blocks"] < len(view.start_ns) / 5
    assert len(hover.text) < 800 * len(view.rows) / 4


def test_lane_filter_keeps_only_those_lanes(side_view):
    fig = timeline_figure(side_view, lanes=["gpu0/s21"])
    assert list(fig.layout.yaxis.ticktext) == ["GPU 0 · stream 21"]
    assert {t.name for t in fig.data} == {"Copy DtoH", "hover"}
    empty = timeline_figure(side_view, lanes=[])
    assert empty.layout.meta["rows"] == 0


def test_clicking_a_kernel_links_it_to_its_launch(side_view):
    ev = side_view.timeline.events
    kernel = int(ev.index[(ev["kind"] == "kernel")][10])
    link = launch_of(side_view, kernel)
    assert link is not None
    assert link["launch_name"].startswith("cudaLaunchKernel")
    assert link["correlation"] == int(ev.loc[kernel, "correlation"])
    fig = timeline_figure(side_view, highlight=kernel)
    assert len(fig.layout.annotations) == 1 and fig.layout.annotations[0].showarrow
    assert launch_of(side_view, int(ev.index[ev["kind"] == "cpu_op"][0])) is None


def test_minimap_is_a_lane_by_column_busy_heatmap(side_view):
    fig = minimap_figure(side_view, (10_000_000, 20_000_000), bins=300)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (len(side_view.lanes), 300)
    assert 0 <= z.min() and z.max() <= 1
    stream7 = [k for k, _ in side_view.lanes].index("gpu0/s7")
    assert z[stream7].mean() > 0.9  # kernels back to back for the whole run
    assert len(fig.layout.shapes) == 1


def test_compare_figure_stacks_two_runs_on_one_axis(side_view):
    other = prepare(load_trace(SAME, cache=False))
    fig = compare_figure([side_view, other], ["side", "same"], width_px=900)
    assert fig.layout.xaxis2.matches == "x"
    assert len(fig.layout.meta["runs"]) == 2
    assert fig.layout.meta["window_ns"][1] == max(side_view.span_ns, other.span_ns)


def test_figures_from_a_timeline_directly():
    fig = timeline_figure(load_trace(DATA / "nsys_compute_copy.sqlite.gz", cache=False))
    assert "GPU 0 · stream 13" in list(fig.layout.yaxis.ticktext)


# ----- data layer


def test_discover_finds_traces_and_run_dirs_but_not_caches(tmp_path):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "trace.json.gz").write_bytes(SIDE.read_bytes())
    (run / "meta.json").write_text('{"scenario": "compute-copy", "variant": "side-stream", "speedup": 1.5}')
    (tmp_path / "t.json.gz").write_bytes(SIDE.read_bytes())
    (tmp_path / ".t.json.gz.tracer.parquet").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    assert discover(tmp_path) == [run, tmp_path / "t.json.gz"]
    store = _store(tmp_path)
    keys = sorted(i.key for i in store.runs())
    assert keys == ["r1", "t"]
    assert store.get("r1").meta["scenario"] == "compute-copy"
    assert speedup_of(store.get("r1").meta) == 1.5
    assert store.initial_run is None


def test_single_path_opens_straight_on_its_timeline():
    store = _store(SIDE)
    assert store.initial_run == "copy_side_stream"
    page = route(store, "/", "", {"width": 1400})
    assert _find(page, ids.TL_GRAPH) is not None


def test_views_are_cached_per_run_and_evicted():
    store = _store(DATA, cache_size=1)
    a = store.view("copy_side_stream")
    assert store.view("copy_side_stream") is a
    store.view("two_streams")
    assert store.view("copy_side_stream") is not a


def test_unknown_run_is_a_tracer_error():
    with pytest.raises(TracerError, match="no such run"):
        _store().get("nope")


def test_speedup_from_derived_figures():
    assert speedup_of({"derived": {"speedup (alone / together)": 1.9}}) == 1.9
    assert speedup_of({"derived": {"ratio": 0.5}}) is None


# ----- uploads


def _data_url(raw: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


def test_upload_of_a_trace_registers_it_and_navigates_to_it(tmp_path):
    store = _store(upload_dir=tmp_path)
    banner, path, search = upload(store, _data_url(SIDE.read_bytes()), "side.json.gz")
    assert path == "/timeline" and search == "?run=upload-side"
    assert store.get("upload-side").origin == "upload"
    assert "955 intervals" in str(banner)


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"this is not a trace", "unrecognised content"),
        (gzip.compress(b'{"traceEvents": [')[:-8], "damaged gzip file"),
        (b"", "empty file"),
    ],
    ids=["not-a-trace", "cut-gzip", "empty"],
)
def test_bad_upload_is_reported_in_the_page(tmp_path, raw, message):
    store = _store(upload_dir=tmp_path)
    banner, path, search = upload(store, _data_url(raw), "bad.json.gz")
    text = str(banner)
    assert "Could not open the upload" in text and message in text
    assert path is search  # dash.no_update: the page stays where it is
    assert store.runs() == []


def test_upload_over_the_limit_is_refused(tmp_path):
    store = _store(upload_dir=tmp_path, max_upload_bytes=1000)
    with pytest.raises(UsageError, match="over the upload limit"):
        store.add_upload("big.json", _data_url(b"{" + b" " * 2000 + b"}"))


# ----- callbacks as plain functions


def test_zoom_callback_narrows_the_window_and_redraws():
    store = _store(SIDE)
    state = {"run": "copy_side_stream", "window": None, "highlight": None}
    relayout = {"xaxis.range[0]": 40.0, "xaxis.range[1]": 45.0}
    fig, _minimap, status, _, new_state = timeline.update(
        store, state, ids.TL_GRAPH, relayout, None, None, None, None
    )
    assert new_state["window"] == [40_000_000, 45_000_000]
    assert fig.layout.meta["window_ns"] == [40_000_000, 45_000_000]
    assert status.startswith("40.000 – 45.000 ms")
    back = timeline.update(store, new_state, ids.TL_GRAPH, {"xaxis.autorange": True}, None, None, None, None)
    assert back[4]["window"] == [0, store.view("copy_side_stream").span_ns]
    # relayout events without an x range (autosize, dragmode) change nothing
    assert (
        timeline.update(store, new_state, ids.TL_GRAPH, {"autosize": True}, None, None, None, None)[0]
        is not fig
    )


def test_runs_table_filters_and_sorts():
    store = _store(DATA)
    rows = runs.table_rows(store)
    names = {r["name"] for r in rows}
    assert {"copy_side_stream", "two_streams", "nsys_compute_copy"} <= names
    side = next(r for r in rows if r["name"] == "copy_side_stream")
    assert side["hidden_pct_text"] == "98%"
    assert side["compute_ms_text"] == "130.9"
    only = runs.filter_sort(rows, "side", None)
    assert [r["name"] for r in only] == ["copy_side_stream"]
    by_copy = runs.filter_sort(rows, "", {"col": "copy_ms", "desc": True})
    assert by_copy[0]["copy_ms"] == max(r["copy_ms"] or 0 for r in rows)


def test_compare_link_needs_two_runs_in_tick_order():
    assert runs.picked_runs(["b"], ["a", "b", "c"], [["a"], ["b"], []]) == ["b", "a"]
    assert runs.picked_runs(["x"], ["a"], [["a"]]) == ["x", "a"]  # x is hidden by the filter: kept
    href, cls, _ = runs.compare_link(["b", "a"])
    assert href == "/compare?a=b&b=a" and "disabled" not in cls
    assert "disabled" in runs.compare_link(["a"])[1]


def test_every_page_renders():
    store = _store(DATA)
    assert _find(route(store, "/runs", "", None), ids.RUNS_TABLE) is not None
    assert _find(route(store, "/timeline", "?run=two_streams", None), ids.TL_GRAPH) is not None
    page = route(store, "/compare", "?a=copy_side_stream&b=copy_nonblocking_same_stream", None)
    assert _find(page, ids.CMP_GRAPH) is not None
    assert "Cannot open" in str(route(store, "/timeline", "?run=nope", None))
    assert "No page here" in str(route(store, "/elsewhere", "", None))


def test_create_app_builds_a_dash_app():
    app = create_app([SIDE], examples=False, runs_dir=None)
    assert app.tracer_store.initial_run == "copy_side_stream"
    assert app.layout is not None


def test_summary_command_does_not_import_dash():
    code = "import sys, tracer.cli; assert 'dash' not in sys.modules and 'plotly' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _find(component, target_id):
    """The component with id ``target_id`` inside a Dash layout tree, or None."""
    if getattr(component, "id", None) == target_id:
        return component
    children = getattr(component, "children", None)
    if children is None:
        return None
    for child in children if isinstance(children, (list, tuple)) else [children]:
        found = _find(child, target_id)
        if found is not None:
            return found
    return None


# ----- the command


def test_dashboard_command_is_registered_and_documented():
    from tests.conftest import run_cli

    proc = run_cli("dashboard", "--help")
    assert proc.returncode == 0
    assert "--port" in proc.stdout and "--host" in proc.stdout


@pytest.mark.parametrize("module", [False, True])
def test_dashboard_command_rejects_a_bad_trace_before_serving(tmp_path, module):
    from tests.conftest import run_cli

    bad = tmp_path / "bad.json"
    bad.write_text("not a trace")
    proc = run_cli("dashboard", str(bad), "--port", "1", module=module, timeout=120)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"tracer: error: {bad}: unrecognised content: expected a Kineto/Chrome JSON trace, an nsys SQLite export, a .nsys-rep or Parquet"
    )
    missing = run_cli("dashboard", str(tmp_path / "nope.json"), module=module, timeout=120)
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "99999"], "tracer: error: --port: 99999 is not a TCP port; choose one from 1 to 65535"),
        (["--port", "0"], "tracer: error: --port: 0 is not a TCP port; choose one from 1 to 65535"),
        (["--max-upload-mb", "0"], "tracer: error: --max-upload-mb: 0 would refuse every upload; give 1 or more"),
    ],
)
def test_dashboard_command_rejects_a_bad_port_or_upload_limit_in_one_line(args, message):
    # --port 99999 used to end in Dash's AssertionError traceback after every run had been loaded
    from tests.conftest import run_cli

    proc = run_cli("dashboard", "--no-examples", *args, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == message + "\n"
