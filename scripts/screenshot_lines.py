"""Screenshot of the timeline page's source lines: docs/images/lines.png.

    .venv/bin/python scripts/screenshot_lines.py

The hand-made GPU training loop with Python stacks and planted slow-downs (tests/stack_traces.py, 4 steps) served
as ``tracer dashboard`` serves it, in Debian's headless Chromium: a click on the ``train.py:7`` row of the "by source
line" table outlines the line's intervals (its pageable copies, their cudaMemcpyAsync calls and the aten::to ops
around them), then a click on the first copy names its line and the frames above it under the chart.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
from screenshot_cpu_run import timeline_page  # noqa: E402 (after the sys.path lines)
from stack_traces import write_planted  # noqa: E402

#: Page coordinates of the hover point (what a click lands on) of events row ``src``, from the drawn figure.
POINT_JS = """([sel, src]) => {
    const gd = document.querySelector(sel);
    const t = gd._fullData.find(t => t.name === 'hover');
    const k = t.customdata.indexOf(src);
    const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
    const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
    return {x: box.left + xa.l2p(t.x[k]), y: box.top + ya.l2p(t.y[k])};
}"""


def screenshot(out: Path, width: int = 1400) -> None:
    from tracer.dashboard import ids
    from tracer.parsers import load_trace

    with tempfile.TemporaryDirectory(prefix="tracer-lines-") as tmp:
        trace = write_planted(Path(tmp))
        ev = load_trace(trace, cache=False).events
        copy = int(ev.index.get_indexer(ev.index[(ev["kind"] == "memcpy").to_numpy()])[0])
        graph = f"#{ids.TL_GRAPH} .js-plotly-plot"
        with timeline_page(trace, width, 900) as page:
            row = page.locator(f"#{ids.TL_LINES_TABLE} .ag-center-cols-container .ag-row[row-id='1'] .ag-cell")
            # the page's first callbacks done (a click before Dash has bound the grid's is not heard)
            page.wait_for_function(f"""() => {{ const gd = document.querySelector('{graph}');
                return gd && gd._ev && gd._ev.listeners('plotly_click').length
                    && !document.querySelector('[data-dash-is-loading="true"]'); }}""")
            page.wait_for_timeout(500)
            row.first.click()
            page.wait_for_function(f"""() => {{ const gd = document.querySelector('{graph}');
                const t = gd._fullData[gd._fullData.length - 1];
                return (t.x || []).some(v => v !== null && !Number.isNaN(v)); }}""")
            page.evaluate("() => window.scrollTo(0, 0)")
            at = page.evaluate(POINT_JS, [graph, copy])
            page.mouse.move(at["x"], at["y"])
            page.wait_for_function(f"src => (document.querySelector('{graph}')._hoverdata || [])"
                                   ".some(p => p.customdata === src)", arg=copy)
            page.mouse.click(at["x"], at["y"])
            page.wait_for_selector(f"#{ids.TL_FRAME}")
            page.mouse.move(0, 0)  # (no hover label over the chart)
            page.wait_for_timeout(300)
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=True)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "lines.png")
    screenshot(ap.parse_args(argv).out)


if __name__ == "__main__":
    main()
