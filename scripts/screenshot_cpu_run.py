"""Screenshot of a CPU-only run's timeline page: docs/images/cpu-run.png.

    .venv/bin/python scripts/screenshot_cpu_run.py                 # records compute-copy on the CPU first
    .venv/bin/python scripts/screenshot_cpu_run.py --run runs/X    # an existing run directory or trace

Records with ``tracer record compute-copy --device cpu`` into a temporary folder unless --run is given, serves
the dashboard from a thread (waitress, like ``tracer dashboard``) and photographs the whole page in Debian's
headless Chromium (Playwright, /usr/bin/chromium).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracer.dashboard.headless import CHROMIUM, CHROMIUM_ARGS  # noqa: E402 (after the sys.path line)

#: The figure has drawn every trace it was given (same test as bench/dashboard.py's DRAWN_JS).
DRAWN_JS = """sel => { const gd = document.querySelector(sel);
  if (!gd || !gd._fullLayout || !gd.layout || !gd.layout.meta) return false;
  const n = gd.querySelectorAll('.scatterlayer .trace').length;
  return n === (gd.data || []).filter(t => t.type === undefined || t.type === 'scatter').length; }"""


def record_cpu_run(out_dir: Path) -> Path:
    """``tracer record compute-copy --device cpu`` into ``out_dir``; the run directory it wrote."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracer",
            "record",
            "compute-copy",
            "--device",
            "cpu",
            "-o",
            str(out_dir),
            "-q",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(proc.stdout.strip().splitlines()[-1])


@contextmanager
def timeline_page(run: Path, width: int, height: int) -> Iterator[Any]:
    """The dashboard serving ``run`` on a free port and headless Chromium on its timeline page, the figure drawn:
    the playwright page (scripts/screenshot_job_run.py uses it too)."""
    from playwright.sync_api import sync_playwright

    from tracer.cli.dashboard import make_server, server_url, stop_server
    from tracer.dashboard import ids
    from tracer.dashboard.app import create_app
    from tracer.dashboard.data import RunStore

    store = RunStore([run], examples=False, runs_dir=None)
    key = store.initial_run
    server = make_server(create_app(store=store).server, "127.0.0.1", 0)
    threading.Thread(target=server.run, daemon=True).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
            page.goto(f"{server_url(server)}timeline?run={key}")
            page.wait_for_function(DRAWN_JS, arg=f"#{ids.TL_GRAPH} .js-plotly-plot", polling="raf")
            yield page
            browser.close()
    finally:
        stop_server(server)


def screenshot(run: Path, out: Path, width: int = 1400) -> None:
    """The whole timeline page of ``run`` at ``width`` pixels into ``out`` (as tall as the page is)."""
    from tracer.dashboard import ids

    with timeline_page(run, width, 600) as page:
        page.wait_for_selector(
            f"#{ids.TL_MINIMAP} .hm image, #{ids.TL_MINIMAP} .heatmaplayer image", state="attached"
        )
        page.wait_for_timeout(300)  # the minimap's image paints a frame after it is attached
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB) of {run}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, help="run directory or trace (default: record one on the CPU now)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "cpu-run.png")
    args = ap.parse_args(argv)
    if args.run is not None:
        screenshot(args.run, args.out)
        return
    with tempfile.TemporaryDirectory(prefix="tracer-cpu-run-") as tmp:
        screenshot(record_cpu_run(Path(tmp)), args.out)


if __name__ == "__main__":
    main()
