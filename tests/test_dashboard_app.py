"""The dashboard without a browser: layout of a real H200 trace, figures, the data layer and the callbacks,
called as plain functions (the browser tests in tests/browser/ drive the same app through Chromium)."""

import base64
import gzip
import logging
import subprocess
import sys
from pathlib import Path

import dash
import numpy as np
import plotly.graph_objects as go
import pytest

from tests.conftest import find_component, start_dashboard
from tracer.dashboard import ids
from tracer.dashboard.app import create_app, route, upload
from tracer.dashboard.data import RunInfo, RunStore, device_text, params_text, speedup_of, speedups
from tracer.dashboard.figures import compare_figure, launch_of, minimap_figure, timeline_figure
from tracer.dashboard.model import CLASS_INDEX, depth_subs, prepare
from tracer.dashboard.pages import common, compare, runs, timeline
from tracer.errors import TracerError, UsageError
from tracer.files.discover import discover
from tracer.parsers import load_trace
from tracer.timeline import Timeline

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


@pytest.fixture(scope="module")
def data_store():
    """A store over tests/data, for the tests that only read it: its runs' summaries are computed once."""
    return _store(DATA)


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
    assert total == side_view.devices[0].overlap_ns == 56818860


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
    # the arrow is a trace (clipped to the plot area), not an annotation drawn across the lane labels
    assert not any(a.showarrow for a in fig.layout.annotations)
    (arrow,) = [t for t in fig.data if t.name == "launch → work"]
    assert arrow.cliponaxis and arrow.hoverinfo == "skip"
    assert list(arrow.x) == [link["launch_end_ns"] / 1e6, link["work_start_ns"] / 1e6]
    assert len([s for s in fig.layout.shapes if s.line.color == "#000"]) == 2  # work and launch outlined
    assert launch_of(side_view, int(ev.index[ev["kind"] == "cpu_op"][0])) is None


def test_minimap_is_a_lane_by_column_busy_heatmap(side_view):
    fig = minimap_figure(side_view, (10_000_000, 20_000_000), bins=300)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (len(side_view.lanes), 300)
    assert 0 <= z.min() and z.max() <= 1
    stream7 = [k for k, _ in side_view.lanes].index("gpu0/s7")
    assert z[stream7].mean() > 0.9  # kernels back to back for the whole run
    assert len(fig.layout.shapes) == 1
    # fixed to the whole run: a drag selects a stretch (for the main chart) instead of zooming the strip
    assert fig.layout.xaxis.fixedrange and fig.layout.xaxis.range == (0, side_view.span_ns / 1e6)
    assert fig.layout.dragmode == "select" and fig.layout.selectdirection == "h"
    # short lane labels, one per lane, in the main chart's order
    assert list(fig.layout.yaxis.tickvals) == [label for _, label in side_view.lanes]
    assert list(fig.layout.yaxis.ticktext) == ["GPU0 overlap", "GPU0 s7", "GPU0 s21", "NVTX t424", "CPU t424"]


def test_range_names_are_drawn_on_bars_wide_enough_for_them(side_view):
    ev = side_view.timeline.events
    ranges = ev[ev["kind"] == "range"]
    r = ranges.loc[(ranges["end_ns"] - ranges["start_ns"]).idxmax()]
    lo, hi = int(r["start_ns"]) - side_view.t0_ns, int(r["end_ns"]) - side_view.t0_ns

    def names(window, width_px):
        fig = timeline_figure(side_view, window, width_px=width_px)
        return [list(t.text) for t in fig.data if t.name == "range names"]

    (drawn,) = names((lo, hi), 1200)  # the range fills the window: its whole name on it
    assert str(r["name"]) in drawn
    narrow = names((lo - 40 * (hi - lo), hi + 40 * (hi - lo)), 1200)  # ~15 px wide: no room, no name
    assert all(str(r["name"]) not in t for t in narrow)


def test_fit_label_cuts_names_to_the_bar():
    from tracer.dashboard.figures import LABEL_CHAR_PX, MIN_LABEL_PX, fit_label

    assert fit_label("multi-device/together", 400) == "multi-device/together"
    cut = fit_label("multi-device/together", 80)
    assert cut is not None and cut.endswith("…") and len(cut) * LABEL_CHAR_PX <= 80
    assert fit_label("multi-device/together", MIN_LABEL_PX - 1) is None


def test_overlap_band_is_hatched_and_unlike_the_copy_colours(side_view):
    from tracer.dashboard.model import CLASSES

    colours = {c.key: c.color for c in CLASSES}
    band = next(t for t in timeline_figure(side_view).data if t.name == "Compute ∩ copy")
    assert band.fillpattern.shape == "/"

    def lightness(hex_: str) -> float:  # relative luminance 0-255: survives any colour-vision deficiency
        r, g, b = (int(hex_[i : i + 2], 16) for i in (1, 3, 5))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    # the old orange band (#E69F00) was 50 from the vermilion DtoH copies beside it; now twice that and more
    assert abs(lightness(colours["overlap"]) - lightness(colours["DtoH"])) > 100
    for key in ("HtoD", "DtoD", "kernel"):
        assert abs(lightness(colours["overlap"]) - lightness(colours[key])) > 70, key
    assert colours["overlap"] != colours["range"]


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


@pytest.mark.slow
def test_single_path_opens_straight_on_its_timeline():
    store = _store(SIDE)
    assert store.initial_run == "copy_side_stream"
    page = route(store, "/", "", {"width": 1400})
    assert find_component(page, ids.TL_GRAPH) is not None


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
        # (the upload's bomb check inflates it first: it finds the end missing)
        (gzip.compress(b'{"traceEvents": [')[:-8], "truncated gzip file"),
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
    span = store.view("copy_side_stream").span_ns
    state = {"run": "copy_side_stream", "window": None, "highlight": None}
    want = {"relayout": {"xaxis.range[0]": 40.0, "xaxis.range[1]": 45.0}}
    fig, minimap, status, _, new_state = timeline.update(store, state, want, None, None, None)
    assert new_state["window"] == [40_000_000, 45_000_000]
    assert fig.layout.meta["window_ns"] == [40_000_000, 45_000_000]
    assert fig.layout.xaxis.range == (40.0, 45.0) and fig.layout.xaxis.autorange is False
    assert status.startswith("Window 40.000 – 45.000 ms (5.000 ms wide) · ")
    # a double-click (autorange) and Whole run both draw the whole run again
    for whole in ({"relayout": {"xaxis.autorange": True}}, {"whole": 1}):
        assert timeline.update(store, new_state, whole, None, None, None)[4]["window"] == [0, span]
    # a drag across the overview strip asks for its range, in ms
    assert timeline.update(store, state, {"range_ms": [10.0, 20.5]}, None, None, None)[4]["window"] == [
        10_000_000,
        20_500_000,
    ]
    # a relayout without an x range keeps the window drawn
    assert timeline.update(store, new_state, {"relayout": {"dragmode": "pan"}}, None, None, None)[4][
        "window"
    ] == [40_000_000, 45_000_000]


def test_timeline_callback_draws_everything_asked_whatever_changed_last():
    """Dash drops a callback's in-flight answer when an input changes again; the new request must still
    draw the click made before (the browser tests' lost-click flake)."""
    store = _store(SIDE)
    view = store.view("copy_side_stream")
    ev = view.timeline.events
    kernel = int(ev.index[ev["kind"] == "kernel"][10])
    state = {"run": "copy_side_stream", "window": None, "highlight": None}
    click = {"points": [{"customdata": kernel}]}
    want = {"relayout": {"xaxis.range[0]": 1.0, "xaxis.range[1]": 130.0}}
    fig, _, _, launch, new_state = timeline.update(store, state, want, None, click, None)
    assert {k: v for k, v in new_state.items() if k != "drawn"} == {
        "run": "copy_side_stream", "window": [1_000_000, 130_000_000], "highlight": kernel, "path": False, "line": None}
    assert set(new_state["drawn"]) == {"key", "blocks", "intervals"}  # (what was drawn: a patch can say it again)
    assert "correlation" in str(launch)
    assert any(t.name == "launch → work" for t in fig.data)
    # nothing asked yet (Dash's call when the page appears): the page stays as its layout drew it
    lanes = [k for k, _ in view.lanes]
    assert all(out is dash.no_update for out in timeline.update(store, state, None, lanes, None, None))
    # a click on something that launched nothing clears the highlight and says what to click
    cpu_op = int(ev.index[ev["kind"] == "cpu_op"][0])
    out = timeline.update(store, new_state, want, None, {"points": [{"customdata": cpu_op}]}, None)
    assert out[4]["highlight"] is None and "Click a kernel or copy" in str(out[3])


@pytest.mark.slow
def test_runs_table_filters_and_sorts(data_store):
    store = data_store
    rows = runs.table_rows(store)
    names = {r["name"] for r in rows}
    assert {"copy_side_stream", "two_streams", "nsys_compute_copy"} <= names
    side = next(r for r in rows if r["name"] == "copy_side_stream")
    assert side["hidden_pct_text"] == "98%"
    assert side["compute_ms_text"] == "130.9"
    only = [r["name"] for r in runs.filter_sort(rows, "side", None)]
    assert "copy_side_stream" in only and "two_streams" not in only
    # (by name, or by variant: tests/data/cpu-runs' compute-copy run recorded "all (blocking, ..., side-stream)")
    assert only == [r["name"] for r in rows if "side" in f"{r['name']} {r['variant']}".lower()]
    by_copy = runs.filter_sort(rows, "", {"col": "copy_ms", "desc": True})
    assert by_copy[0]["copy_ms"] == max(r["copy_ms"] or 0 for r in rows)


def test_compare_link_needs_two_runs_in_tick_order():
    assert runs.picked_runs(["b"], ["a", "b", "c"], [["a"], ["b"], []]) == ["b", "a"]
    assert runs.picked_runs(["x"], ["a"], [["a"]]) == ["x", "a"]  # x is hidden by the filter: kept
    href, cls, _ = runs.compare_link(["b", "a"])
    assert href == "/compare?a=b&b=a" and "disabled" not in cls
    assert "disabled" in runs.compare_link(["a"])[1]


@pytest.mark.slow
def test_every_page_renders(data_store):
    store = data_store
    assert find_component(route(store, "/runs", "", None), ids.RUNS_TABLE) is not None
    assert find_component(route(store, "/timeline", "?run=two_streams", None), ids.TL_GRAPH) is not None
    page = route(store, "/compare", "?a=copy_side_stream&b=copy_nonblocking_same_stream", None)
    assert find_component(page, ids.CMP_GRAPH) is not None
    assert "Cannot open" in str(route(store, "/timeline", "?run=nope", None))
    assert "No page here" in str(route(store, "/elsewhere", "", None))


def test_create_app_builds_a_dash_app():
    app = create_app([SIDE], examples=False, runs_dir=None)
    assert app.tracer_store.initial_run == "copy_side_stream"
    assert app.layout is not None


def test_summary_command_does_not_import_dash():
    code = "import sys, tracer.cli; assert 'dash' not in sys.modules and 'plotly' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ----- the command


@pytest.mark.slow
def test_dashboard_command_is_registered_and_documented():
    from tests.conftest import cli_main

    proc = cli_main("dashboard", "--help")
    assert proc.returncode == 0
    assert "--port" in proc.stdout and "--host" in proc.stdout


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "99999"], "tracer: error: --port: 99999 is not a TCP port; choose one from 1 to 65535"),
        (["--port", "0"], "tracer: error: --port: 0 is not a TCP port; choose one from 1 to 65535"),
        (
            ["--max-upload-mb", "0"],
            "tracer: error: --max-upload-mb: 0 would refuse every upload; give 1 or more",
        ),
        # (these two were waitress's ValueError traceback, "Invalid host/port specified.")
        (["--host", ""], "tracer: error: --host: is empty; give an address such as 127.0.0.1 (this machine) "
                         "or 0.0.0.0 (all)"),
        (["--host", "999.1.1.1", "--debug"], "tracer: error: --host: '999.1.1.1' is not an address to listen on ("),
    ],
)
def test_dashboard_command_rejects_a_bad_port_or_upload_limit_in_one_line(args, message):
    # --port 99999 used to end in Dash's AssertionError traceback after every run had been loaded
    from tests.conftest import cli_main

    proc = cli_main("dashboard", "--no-examples", *args, timeout=120)
    assert proc.returncode == 2
    if message.endswith("("):  # (the resolver's own reason follows: its words differ between C libraries)
        assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr
    else:
        assert proc.stderr == message + "\n"


# ----- what a newcomer needs to read a run


def _text(component) -> str:
    """All the text of a Dash component tree, children in order, runs of white space made one space."""

    def walk(c) -> str:
        if c is None:
            return ""
        if isinstance(c, (str, int, float)):
            return str(c)
        if isinstance(c, (list, tuple)):
            return " ".join(walk(x) for x in c)
        return walk(getattr(c, "children", None))

    return " ".join(walk(component).split())


def _examples(scenario: str) -> tuple[RunStore, list[RunInfo]]:
    store = RunStore([], examples=True, runs_dir=None)
    return store, [i for i in store.runs() if i.meta.get("scenario") == scenario]


def test_runs_that_differ_only_in_parameters_or_back_end_look_different():
    store, mlp = _examples("mlp-data-parallel")
    assert len(mlp) >= 3
    rows = [runs.run_row(i, store.summary(i.key)) for i in mlp]
    shown = {(r["variant_detail"], r["trace"], r["speedup_text"]) for r in rows}
    assert len(shown) == len(rows)  # no two rows read alike any more
    for info, r in zip(mlp, rows):
        share = info.meta["params"]["cpu_share"]
        assert f"cpu_share={share:g}" in r["variant_detail"]
        assert r["devices"] == "NVIDIA H200" and r["devices_detail"] == "streams · 2 lanes"
        assert r["trace"] == {"torch": "torch.profiler", "nsys": "Nsight Systems"}[info.meta["backend"]]
        assert r["speedup_detail"] == "single / parallel"
    # the filter finds a run by a parameter
    assert {r["name"] for r in runs.filter_sort(rows, "cpu_share=0.01", None)} == {
        i.name for i in mlp if i.meta["params"]["cpu_share"] == 0.01
    }
    table = runs.render_table(rows, None, [])
    assert "cpu_share=0.01" in _text(table) and "cpu_share=0 " in _text(table)


def test_run_heading_says_parameters_device_back_end_and_what_the_speedup_compares():
    store, multi = _examples("multi-device")
    small = next(i for i in multi if i.meta["params"]["n"] != 50)  # the 200 × 1000² run, not the README's
    view = store.view(small.key)
    text = _text(common.run_heading(small, view))
    n, size = small.meta["params"]["n"], small.meta["params"]["size"]
    assert f"Parameters: n={n} · size={size} · lanes=2 · seed=0" in text
    assert "Scenario: multi-device · variant all (alone, together)" in text
    assert "Device: NVIDIA H200 — mode streams: CUDA streams of one GPU stand in for devices, 2 lanes" in text
    value, label = speedups(small.meta)[0]
    assert label == "sum alone / together"
    assert f"Speedup: ×{value:.2f} (sum alone / together)" in text and common.SPEEDUP_SOURCE in text
    assert (
        f"Recorded with: {'torch.profiler' if small.meta['backend'] == 'torch' else 'Nsight Systems'}" in text
    )


def test_params_device_and_speedup_texts():
    meta = {
        "params": {"variant": "all", "lanes": 4, "seed": 0, "n": 12, "lr": 0.5, "copy_mb": 64.0},
        "mode": "cpu-threads",
        "devices": ["cpu"],
        "derived": {"speedup size 64 (one stream / streams)": 1.01, "ratio": 0.3, "speedup (a / b)": 2.0},
    }
    assert params_text(meta) == "n=12 · lr=0.5 · copy_mb=64 · lanes=4 · seed=0"
    assert device_text(meta) == ("CPU", "mode cpu-threads: CPU threads stand in for devices, 4 lanes")
    assert speedups(meta) == [(1.01, "size 64: one stream / streams"), (2.0, "a / b")]
    assert speedup_of(meta) == 1.01
    assert device_text({}, {"devices": {}, "gpu_names": {}})[0] == "CPU (no GPU activity in the trace)"
    assert device_text({"gpu_names": {"0": "A", "1": "A"}, "mode": "multi-gpu"})[0] == "2 × A"
    assert device_text({}) == ("", "")


def test_heading_and_status_count_the_same_bars(side_view):
    """The heading used to say "858 intervals" and the status "904 intervals merged ...": the status counts
    bars (drawn events plus the overlap band's pieces), so both now say bars and the heading says why."""
    store = _store(SIDE)
    info = store.get("copy_side_stream")
    view = store.view("copy_side_stream")
    ev = view.timeline.events
    pieces = int((view.src < 0).sum())
    drawn = int((view.src >= 0).sum())
    assert pieces > 0 and drawn + pieces == len(view.src)
    heading = _text(common.run_heading(info, view))
    assert (
        f"{len(ev):,} events in the trace → {len(view.src):,} bars on the chart: {drawn:,} events" in heading
    )
    assert f"+ {pieces:,} compute ∩ copy pieces" in heading
    if drawn < len(ev):
        assert f"{len(ev) - drawn:,} not drawn (" in heading
    status = timeline.status_text(timeline_figure(view, width_px=1000))
    assert f"{len(view.src):,} bars in this window merged into" in status
    assert "intervals" not in heading + status


def test_numbers_of_a_card_or_line_share_one_unit():
    from tracer.analysis.overlap import DeviceOverlap

    d = next(iter(prepare(load_trace(SAME, cache=False)).devices))
    assert d.overlap_ns == 0 and d.compute_ns > 1e6  # the card that said "0 ns" beside ms
    values = [c.children[0].children for c in common.device_card(d).children[1].children[:4]]
    assert all(v.endswith(" ms") for v in values), values
    assert values[2] == "0.0 ms"
    assert isinstance(d, DeviceOverlap)
    assert common.window_text(40_000_000, 45_000_000) == "40.000 – 45.000 ms (5.000 ms wide)"
    # zoomed to 400 ns: still ms, with the decimals the width needs
    assert common.window_text(40_000_000, 40_000_400) == "40.0000000 – 40.0004000 ms (0.0004000 ms wide)"
    assert compare.status_text(timeline_figure(prepare(load_trace(SAME, cache=False)), (0, 2_000_000))) == (
        "Window 0.000 – 2.000 ms (2.000 ms wide), the same scale for both runs"
    )
    assert common.card_format([0, 999_000]) == ((1e3, "µs"), 1)
    assert common.card_format([0, 999]) == ((1.0, "ns"), 1)
    assert common.card_format([0, 0]) == ((1e6, "ms"), 3)


def _cpu_only(trace: Path = SIDE) -> Timeline:
    """A real trace's host side alone, labelled as a cpu-threads run: what a CPU-only recording looks like."""
    t = load_trace(trace, cache=False)
    ev = t.events[t.events["device"] < 0].reset_index(drop=True)
    t.meta.gpu_names = {}
    t.meta.extra["run"] = {"scenario": "compute-copy", "mode": "cpu-threads", "devices": ["cpu"]}
    return Timeline(ev, t.meta)


def test_cpu_only_run_shows_its_host_threads_instead_of_gpu_cards():
    from tracer.analysis.summary import summarize

    timeline_ = _cpu_only(DATA / "mlp_train_200.json.gz")
    view = prepare(timeline_)
    assert not view.devices
    cards = common.device_cards(view)
    text = _text(cards)
    assert "No GPU work" not in text
    assert "This run has no GPU activity: it was recorded on the CPU (mode cpu-threads)" in text
    assert "Shown instead: each host thread's framework ops" in text
    threads = summarize(timeline_, ranges=False)["threads"]
    assert len(threads) >= 2 and len(cards) == 1 + len(threads)
    span = view.span_ns
    for card, t in zip(cards[1:], threads):  # the same figures as `tracer summary`, busiest first
        card_text = _text(card)
        assert f"thread {t['tid']}" in card_text
        unit, dec = common.card_format([t["busy_ns"], span])
        assert common.fmt_in(t["busy_ns"], unit, dec) in card_text
        assert f"{100 * t['busy_ns'] / span:.0f}% of the run's span" in card_text
        assert f"{t['ops']:,} framework ops" in card_text and f"{t['launches']:,} CUDA calls" in card_text
    # a bare trace without GPU work and without run metadata says so without claiming a recording mode
    timeline_.meta.extra.pop("run")
    assert "This trace has no GPU activity: it ran on the host only." in _text(
        common.device_cards(view)
    )


def test_host_lanes_name_their_nesting_depth():
    view = prepare(load_trace(DATA / "mlp_train_200.json.gz", cache=False))
    labels = [r.label for r in view.rows]
    assert "CPU · thread 424 (python3) · ops, depth 1" in labels
    assert "CPU · thread 424 (python3) · ops, depth 2" in labels
    assert "CPU · thread 424 (python3) · CUDA API calls" in labels
    assert not any(label.endswith((" ops 2", " ranges 2", "CUDA API")) for label in labels)
    assert depth_subs("ops", 1, False) == ["ops"]
    assert depth_subs("ops", 3, True) == ["ops, depth 1", "ops, depth 2", "ops, depth 3+"]
    assert depth_subs("ranges", 2, False) == ["ranges, depth 1", "ranges, depth 2"]
    assert depth_subs("ops", 0, False) == []


# ----- serving quietly


def _hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def _serve_once(server, path: str = "/x?y=1") -> bytes:
    import threading
    import urllib.request

    from tracer.cli.dashboard import server_url, stop_server

    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(server_url(server) + path.lstrip("/"), timeout=30) as resp:
            return resp.read()
    finally:
        stop_server(server)
        thread.join(10)
        assert not thread.is_alive()


def test_server_is_quiet_by_default_and_logs_requests_when_verbose(capfd):
    import io
    import logging

    from tracer.cli.dashboard import make_server

    quiet = make_server(_hello, "127.0.0.1", 0)
    assert int(quiet.effective_port) > 0
    assert logging.getLogger("waitress").getEffectiveLevel() == logging.ERROR
    assert _serve_once(quiet) == b"hello"
    out, err = capfd.readouterr()
    assert out == "" and err == ""

    log = io.StringIO()
    loud = make_server(_hello, "127.0.0.1", 0, verbose=True, log_to=log)
    assert _serve_once(loud) == b"hello"
    # the request's line; on a loaded machine waitress may add its own "Task queue depth" warning beside it
    lines = log.getvalue().splitlines()
    assert lines.count("GET /x?y=1 200") == 1
    assert all(ln == "GET /x?y=1 200" or ln.startswith("Task queue depth") for ln in lines), lines
    logger = logging.getLogger("waitress")
    for h in list(logger.handlers):  # leave logging as it was for the other tests
        logger.removeHandler(h)
    logger.setLevel(logging.NOTSET)


def test_stopping_a_server_waits_for_the_thread_that_just_answered(monkeypatch, caplog):
    """A request thread wakes the loop through waitress's trigger after it has answered; stopping the server
    must not close that trigger under it (CI saw "Exception when servicing ... EBADF" logged). The window is
    widened here so that the old order failed every time."""
    import time

    import waitress.channel

    from tracer.cli.dashboard import make_server

    service = waitress.channel.HTTPChannel.service

    def answer_then_wake_late(self: waitress.channel.HTTPChannel) -> None:
        wake = self.server.pull_trigger

        def late() -> None:
            time.sleep(0.05)
            wake()

        self.server.pull_trigger = late
        try:
            service(self)
        finally:
            self.server.pull_trigger = wake

    monkeypatch.setattr(waitress.channel.HTTPChannel, "service", answer_then_wake_late)
    with caplog.at_level(logging.ERROR, logger="waitress"):
        for _ in range(3):
            assert _serve_once(make_server(_hello, "127.0.0.1", 0)) == b"hello"
    assert [r.getMessage() for r in caplog.records if r.name.startswith("waitress")] == []


def test_server_on_a_port_in_use_is_a_one_line_error():
    import socket

    from tracer.cli.dashboard import make_server

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"127.0.0.1:{port}: cannot listen there"):
            make_server(_hello, "127.0.0.1", port)


@pytest.mark.slow
def test_debug_server_on_a_port_in_use_is_the_same_one_line(tmp_path):
    # --debug runs Flask's development server, which said a busy port in two lines of its own (exit 1)
    import socket

    from tests.conftest import run_cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_cli("dashboard", "--no-examples", "--debug", "--port", str(port), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"tracer: error: 127.0.0.1:{port}: cannot listen there (")
    assert proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.slow
def test_dashboard_command_prints_one_line_and_stops_cleanly_on_ctrl_c():
    """`tracer dashboard` says where it serves and nothing else — no development-server warning, no line per
    request — and Ctrl-C (SIGINT) ends it with exit code 0. Waits for the line, not for a fixed time."""
    import re
    import signal
    import urllib.request

    exe = str(Path(sys.executable).with_name("tracer"))
    proc, lines = start_dashboard([exe, "dashboard", str(SIDE), "--no-examples"])
    try:
        url = re.search(r"http://\S+", lines[-1]).group(0)
        assert lines[-1].rstrip().endswith("(Ctrl-C to stop)")
        for path in ("runs", "timeline?run=copy_side_stream", "_dash-layout"):
            with urllib.request.urlopen(url + path, timeout=60) as resp:
                assert resp.status == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert out == "" and err == ""  # nothing after the URL line: no request lines, no warning, no traceback
    assert lines == [f"loading {SIDE} ...\n", lines[-1]]


def test_a_command_run_shows_its_command_in_the_list_and_the_heading():
    store, _ = _examples("")
    (run,) = [i for i in store.runs() if i.name == "user-train-torch-20261203"]
    row = runs.run_row(run, store.summary(run.key))
    assert row["scenario"] == "python3 bench/user_train.py --steps 50 --workers 2"
    text = _text(common.run_heading(run, store.view(run.key)))
    assert "Command: python3 bench/user_train.py --steps 50 --workers 2 · exit 0" in text
    assert "Scenario:" not in text


@pytest.mark.slow
def test_a_port_taken_before_the_dashboard_binds_it_is_tried_again():
    """The tests' start_dashboard: a port that another process holds by the time the dashboard binds it is
    that dashboard's one-line error, and the next try takes another port."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        exe = str(Path(sys.executable).with_name("tracer"))
        proc, lines = start_dashboard([exe, "dashboard", "--no-examples"], first=port)
        try:
            assert "http://127.0.0.1:" in lines[-1] and f":{port}/" not in lines[-1]
        finally:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
def test_stopping_a_server_whose_trigger_is_closed_still_stops_it():
    """stop_server where the loop cannot be woken (its trigger closed: EBADF, seen once in a full run): the
    sockets are closed from here instead, and the loop ends with nothing left to serve. (The trigger is closed
    and the server stopped before its loop runs: closing them under a running loop's select() raises EBADF in
    the loop's thread, a traceback in every test run that lost the race.)"""
    import threading

    from tracer.cli.dashboard import make_server, stop_server

    server = make_server(_hello, "127.0.0.1", 0)
    listening = server.socket
    server.trigger.close()
    stop_server(server)
    assert server._map == {} and listening.fileno() == -1  # the listening socket closed, nothing left to serve
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
