"""Dashboard rendering benchmark: first render and zoom of synthetic Kineto traces in headless Chromium.

For 10k, 100k and 1M intervals (a compute-copy pattern: CPU ops launching kernels on one stream and DtoH
copies on another, every launch a CUDA runtime call), it

1. writes the Kineto JSON trace, parses it (``load_trace``) and lays it out (``prepare``), timing both,
2. serves the dashboard over the three traces plus a bare Dash page holding an empty ``dcc.Graph``,
3. in one Chromium session, a fresh browser context (cold cache) per page load, times
   - the empty figure's page: navigation start → the empty plot drawn,
   - the timeline page of each trace: navigation start → the lanes drawn,
   - zooms (``Plotly.relayout`` of the x range, as a drag does): relayout → the server's blocks drawn,
4. prints a Markdown table (and ``--json`` writes the raw numbers).

Goals: first render ≤ empty + 1 s at 1M intervals; zoom ≤ 0.5 s.

    .venv/bin/python bench/dashboard.py                 # 10k, 100k, 1M; ~2 minutes on 2 cores
    .venv/bin/python bench/dashboard.py --sizes 10000 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracer.dashboard.headless import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

VIEWPORT = {"width": 1600, "height": 1000}
#: zoom windows as (centre, width) fractions of the run
ZOOMS = ((0.5, 0.1), (0.3, 0.01), (0.7, 0.001))


def write_kineto(n_intervals: int, path: Path, seed: int = 0) -> dict[str, int]:
    """A Kineto trace of about ``n_intervals`` intervals: per step a cpu_op, its cudaLaunchKernel and the
    kernel (stream 7); every third step also a cudaMemcpyAsync and its DtoH copy (stream 21).

    Launches come at random (exponential) intervals a little longer than the kernels take, so the GPU idles
    now and then at every time scale: the timeline has structure (gaps) at every zoom level, the hard case
    for merging, rather than one solid bar."""
    rng = np.random.default_rng(seed)
    steps = int(n_intervals / (3 + 2 / 3))
    base_us = 5_000_000_000.0
    host = base_us + np.cumsum(1.0 + rng.exponential(13.0, steps))  # µs
    k_dur = rng.lognormal(np.log(10.0), 0.6, steps)
    gpu = np.empty(steps)
    t = host[0] + 5
    for i in range(steps):  # GPU queue: a kernel starts once launched and once the previous one has ended
        t = max(t + 0.8, host[i] + 5.0)
        gpu[i] = t
        t += k_dur[i]
    ev: list[dict] = []
    corr = 1
    for i in range(steps):
        h = float(host[i])
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1000, "tid": 1000, "ts": h, "dur": 4.0}
        )
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1000,
                "tid": 1000,
                "ts": h + 0.5,
                "dur": 3.0,
                "args": {"correlation": corr},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"gemm_kernel_{i % 7}",
                "pid": 0,
                "tid": 7,
                "ts": float(gpu[i]),
                "dur": float(k_dur[i]),
                "args": {"device": 0, "stream": 7, "correlation": corr},
            }
        )
        corr += 1
        if i % 3 == 2:
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaMemcpyAsync",
                    "pid": 1000,
                    "tid": 1000,
                    "ts": h + 3.6,
                    "dur": 0.3,
                    "args": {"correlation": corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "gpu_memcpy",
                    "name": "Memcpy DtoH (Device -> Pinned)",
                    "pid": 0,
                    "tid": 21,
                    "ts": float(gpu[i] + k_dur[i] + 0.5),
                    "dur": 25.0,
                    "args": {"device": 0, "stream": 21, "correlation": corr, "bytes": 1 << 20},
                }
            )
            corr += 1
    meta = [{"name": "thread_name", "ph": "M", "pid": 1000, "tid": 1000, "args": {"name": "python3"}}]
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}],
        "traceEvents": meta + ev,
    }
    path.write_bytes(orjson.dumps(doc))
    return {"intervals": len(ev), "bytes": path.stat().st_size}


def _serve(app) -> tuple[str, object]:
    import logging

    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}", server


def _empty_app():
    import plotly.graph_objects as go
    from dash import Dash, dcc

    app = Dash(__name__, update_title=None)
    app.layout = dcc.Graph(id="g", figure=go.Figure(layout=dict(meta={"ready": 1})))
    return app


# A figure is drawn when its DOM traces match its data and the meta the server set is there.
DRAWN_JS = """([sel, want]) => {
  const gd = document.querySelector(sel);
  if (!gd || !gd._fullLayout || !gd.layout || !gd.layout.meta) return false;
  const w = gd.layout.meta.window_ns;  // ms floats round-trip to ns within a few ns
  if (want !== null && !(w && Math.abs(w[0] - want[0]) < 10 && Math.abs(w[1] - want[1]) < 10)) return false;
  const n = gd.querySelectorAll('.scatterlayer .trace').length;
  return n === (gd.data || []).filter(t => t.type === undefined || t.type === 'scatter').length;
}"""


# dcc.Graph binds its relayout handler only after the first plot: zooming earlier would go unheard.
LISTENING_JS = """sel => { const gd = document.querySelector(sel);
  return !!(gd && gd._ev && gd._ev.listeners('plotly_relayout').length); }"""


def _time_load(browser, url: str, sel: str) -> float:
    ctx = browser.new_context(viewport=VIEWPORT)
    page = ctx.new_page()
    page.set_default_timeout(600_000)
    page.goto(url, wait_until="commit")
    page.wait_for_function(DRAWN_JS, arg=[sel, None], polling="raf")
    elapsed = page.evaluate("() => performance.now()") / 1000
    ctx.close()
    return elapsed


def _time_zooms(browser, url: str, sel: str, span_ns: int) -> list[tuple[float, int]]:
    """Seconds from each relayout to its redraw, and the blocks drawn."""
    ctx = browser.new_context(viewport=VIEWPORT)
    page = ctx.new_page()
    page.set_default_timeout(600_000)
    page.goto(url)
    page.wait_for_function(DRAWN_JS, arg=[sel, None], polling="raf")
    page.wait_for_function(LISTENING_JS, arg=sel)
    out = []
    for centre, width in ZOOMS:
        lo = int(span_ns * (centre - width / 2))
        hi = int(span_ns * (centre + width / 2))
        t0 = page.evaluate(
            "([sel, lo, hi]) => { const gd = document.querySelector(sel); const t = performance.now();"
            " Plotly.relayout(gd, {'xaxis.range[0]': lo / 1e6, 'xaxis.range[1]': hi / 1e6}); return t; }",
            [sel, lo, hi],
        )
        try:
            page.wait_for_function(DRAWN_JS, arg=[sel, [lo, hi]], polling="raf", timeout=60_000)
        except Exception:
            print(
                "zoom never drawn:",
                [lo, hi],
                page.evaluate(f"() => document.querySelector('{sel}').layout.meta"),
                page.inner_text("#timeline-status"),
                file=sys.stderr,
            )
            raise
        elapsed = (page.evaluate("() => performance.now()") - t0) / 1000
        out.append((elapsed, page.evaluate(f"() => document.querySelector('{sel}').layout.meta.blocks")))
    ctx.close()
    return out


# Both graphs drawn, their handlers bound, no resize or Dash callback pending: the page at rest.
SETTLED_JS = """([main, strip]) => [main, strip].every(sel => {
    const gd = document.querySelector(sel);
    return !!(gd && gd.data && gd.data.length && gd._ev && gd._ev.listeners('plotly_relayout').length
        && !gd.classList.contains('dash-graph--pending'));
}) && !document.querySelector('[data-dash-is-loading="true"]')"""

# Page coordinates of the hover point on row ``row`` nearest ``frac`` of the window (so the mouse lands on a
# bar, not between two).
HOVER_POINT_JS = """([sel, row, frac]) => {
    const gd = document.querySelector(sel);
    const t = gd._fullData.find(t => t.name === 'hover');
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const target = xa.range[0] + frac * (xa.range[1] - xa.range[0]);
    let best = -1;
    for (let k = 0; k < t.x.length; k++) {
        const d = Math.abs(t.x[k] - target);
        if (t.y[k] === row && (best < 0 || d < Math.abs(t.x[best] - target))) best = k;
    }
    const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
    return {x: box.left + xa.l2p(t.x[best]), y: box.top + ya.l2p(t.y[best])};
}"""


def _default_screenshot_run() -> Path:
    for meta in sorted((ROOT / "tracer" / "examples").glob("compute-copy-side-stream-*/meta.json")):
        m = json.loads(meta.read_text())
        if m.get("backend") == "torch" and m.get("gpu_names"):
            return meta.parent
    return ROOT / "tests" / "data" / "copy_side_stream.json.gz"


def screenshot(run: Path, out: Path) -> None:
    """The timeline page of ``run`` with the mouse on a copy (its hover shows size and bandwidth)."""
    from playwright.sync_api import sync_playwright

    from tracer.dashboard import ids
    from tracer.dashboard.app import create_app
    from tracer.dashboard.data import RunStore
    from tracer.dashboard.model import CLASS_INDEX, N_CLASSES

    store = RunStore([run], examples=False, runs_dir=None)
    key = store.initial_run
    view = store.view(key)
    url, server = _serve(create_app(store=store))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 670}, device_scale_factor=1)
        page.goto(f"{url}/timeline?run={key}")
        sel = f"#{ids.TL_GRAPH} .js-plotly-plot"
        page.wait_for_function(DRAWN_JS, arg=[sel, None], polling="raf")
        page.wait_for_function(SETTLED_JS, arg=[sel, f"#{ids.TL_MINIMAP} .js-plotly-plot"])
        # hover a copy of the first lane with copies, found in the drawn figure (a hover point)
        copy_rows = sorted(
            {
                int(g) // N_CLASSES
                for g in np.unique(view.group)
                if int(g) % N_CLASSES in (CLASS_INDEX["DtoH"], CLASS_INDEX["HtoD"], CLASS_INDEX["DtoD"])
            }
        )
        if copy_rows:
            at = page.evaluate(HOVER_POINT_JS, [sel, copy_rows[0], 0.15])  # clear of the range name
            page.mouse.move(at["x"], at["y"])
            page.wait_for_selector(".hoverlayer .hovertext")
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)  # the page as tall as its content: the strip too
        browser.close()
    server.shutdown()
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3, help="page loads per measurement (median reported)")
    ap.add_argument(
        "--dir",
        type=Path,
        default=Path(os.environ.get("TRACER_BENCH_DIR", tempfile.gettempdir())) / "tracer-bench",
    )
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    ap.add_argument(
        "--screenshot",
        type=Path,
        metavar="PNG",
        help="instead: screenshot the timeline page of --run (the README's docs/images/timeline.png)",
    )
    ap.add_argument(
        "--run",
        type=Path,
        default=_default_screenshot_run(),
        help="trace or run directory for --screenshot (default: the bundled H200 compute-copy "
        "side-stream run recorded with torch.profiler)",
    )
    args = ap.parse_args(argv)
    if args.screenshot:
        screenshot(args.run, args.screenshot)
        return

    from playwright.sync_api import sync_playwright

    from tracer.dashboard import ids
    from tracer.dashboard.app import create_app
    from tracer.dashboard.data import RunStore
    from tracer.dashboard.figures import timeline_figure
    from tracer.dashboard.pages.common import plot_width

    args.dir.mkdir(parents=True, exist_ok=True)
    paths, prep = [], {}
    for n in args.sizes:
        p = args.dir / f"dashboard_synth_{n}.json"
        if not p.exists():
            t = time.perf_counter()
            info = write_kineto(n, p)
            print(
                f"wrote {p} ({info['intervals']:,} intervals, {info['bytes'] / 1e6:.0f} MB) in "
                f"{time.perf_counter() - t:.1f} s",
                file=sys.stderr,
            )
        paths.append(p)
    store = RunStore(paths, examples=False, runs_dir=None)
    from tracer.dashboard.model import prepare
    from tracer.parsers import load_trace

    # warm up imports and plotly's validators so the first size is not charged for them
    timeline_figure(
        prepare(load_trace(ROOT / "tests" / "data" / "copy_side_stream.json.gz", cache=False))
    ).to_json()
    keys = {}
    for n, p in zip(args.sizes, paths):
        key = next(i.key for i in store.runs() if i.path == p)
        keys[n] = key
        t = time.perf_counter()
        tl = load_trace(p, cache=False)
        parse_s = time.perf_counter() - t
        t = time.perf_counter()
        view = prepare(tl)
        prepare_s = time.perf_counter() - t
        store._views[key] = view  # warm the app's cache with this very view (the bench owns the store)
        width = plot_width(VIEWPORT)
        t = time.perf_counter()
        fig = timeline_figure(view, width_px=width)
        payload = fig.to_json()
        figure_s = time.perf_counter() - t
        prep[n] = {
            "intervals": len(tl.events),
            "parse_s": parse_s,
            "prepare_s": prepare_s,
            "server_figure_s": figure_s,
            "blocks": fig.layout.meta["blocks"],
            "payload_kb": len(payload) / 1e3,
            "span_ns": view.span_ns,
        }
        print(
            f"{n:>9,}: parse {parse_s:.2f} s, layout {prepare_s:.2f} s, whole-run figure {figure_s * 1e3:.0f} ms "
            f"({fig.layout.meta['blocks']:,} blocks, {len(payload) / 1e3:.0f} kB)",
            file=sys.stderr,
        )

    app_url, app_server = _serve(create_app(store=store))
    empty_url, empty_server = _serve(_empty_app())
    results = {"empty_s": [], "sizes": {}}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # one throw-away load so that both servers and the browser are warm (Python imports, JIT)
        _time_load(browser, empty_url, "#g .js-plotly-plot")
        sel = f"#{ids.TL_GRAPH} .js-plotly-plot"
        for _ in range(args.repeat):
            results["empty_s"].append(_time_load(browser, empty_url, "#g .js-plotly-plot"))
            for n in args.sizes:
                r = results["sizes"].setdefault(n, {"first_s": [], "zoom_s": []})
                r["first_s"].append(_time_load(browser, f"{app_url}/timeline?run={keys[n]}", sel))
        for n in args.sizes:
            results["sizes"][n]["zoom_s"] = _time_zooms(
                browser, f"{app_url}/timeline?run={keys[n]}", sel, prep[n]["span_ns"]
            )
        browser.close()
    app_server.shutdown()
    empty_server.shutdown()

    empty = statistics.median(results["empty_s"])
    print(
        f"\nChromium {CHROMIUM}, viewport {VIEWPORT['width']}×{VIEWPORT['height']}, "
        f"median of {args.repeat} cold loads; "
        f"empty figure's page: {empty:.2f} s\n"
    )
    print(
        "| intervals | parse + layout (server, once) | whole-run figure (server) | blocks drawn | first render | "
        "− empty | zoom to 10% / 1% / 0.1% of the run (blocks) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in args.sizes:
        r, p = results["sizes"][n], prep[n]
        first = statistics.median(r["first_s"])
        zooms = " / ".join(f"{z:.2f} s ({b:,})" for z, b in r["zoom_s"])
        print(
            f"| {p['intervals']:,} | {p['parse_s']:.1f} + {p['prepare_s']:.2f} s | "
            f"{p['server_figure_s'] * 1e3:.0f} ms, "
            f"{p['payload_kb']:.0f} kB | {p['blocks']:,} | {first:.2f} s | {first - empty:+.2f} s | {zooms} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"prep": prep, **results}, indent=1))


if __name__ == "__main__":
    main()
