"""Screenshot of a job's timeline page (one trace per rank): docs/images/job-run.png.

    .venv/bin/python scripts/screenshot_job_run.py                  # HTA's two-rank NCCL sample as a job
    .venv/bin/python scripts/screenshot_job_run.py --run runs/X     # an existing job run directory
    .venv/bin/python scripts/screenshot_job_run.py --fold 0         # rank 0 folded into one lane

Without --run, lays out tests/data/external/HTA_trace_filter_sampled_rank-{0,1}.json.gz as a job's run
directory (``traces/``, derived as ``tracer record`` leaves it) in a temporary folder; serves the dashboard from
a thread and photographs the whole page — rank filter, lanes grouped by rank, the collectives table — in Debian's
headless Chromium, after a click on the collectives table's row ``--row`` (the chart zooms to that collective).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from screenshot_cpu_run import DRAWN_JS, timeline_page  # noqa: E402 (after the sys.path lines)

from tracer.dashboard.headless import CHROMIUM  # noqa: E402

RANKS = [ROOT / "tests" / "data" / "external" / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]


def make_job(out: Path) -> Path:
    """HTA's two rank traces as a job's run directory under ``out``."""
    from tracer.files import rundir
    from tracer.files.rundir import RunMeta
    from tracer.record.derive import derive

    run = out / "hta-2-ranks"
    (run / rundir.TRACES_DIR).mkdir(parents=True)
    for rank, trace in enumerate(RANKS):
        shutil.copy(trace, run / rundir.TRACES_DIR / f"rank{rank}.json.gz")
    rundir.write_meta(run, RunMeta.from_dict({"command": ["torchrun", "--nproc-per-node", "2", "train.py"]}))
    derive(run)
    return run


def screenshot(run: Path, out: Path, *, width: int = 1500, row: int | None = 3, fold: list[int] = ()) -> None:
    from tracer.dashboard import ids

    graph = f"#{ids.TL_GRAPH} .js-plotly-plot"
    with timeline_page(run, width, 700) as page:
        for rank in fold:
            before = page.evaluate(f"() => document.querySelector('{graph}').layout.meta.rows")
            page.locator(f"#{ids.TL_FOLD} label", has_text=f"rank {rank}").click()
            page.wait_for_function(
                f"n => document.querySelector('{graph}').layout.meta.rows !== n", arg=before)
        if row is not None:
            window = page.evaluate(f"() => document.querySelector('{graph}').layout.meta.window_ns[1]")
            page.locator(f"#{ids.TL_COLL_TABLE} .ag-center-cols-container .ag-row").nth(row).locator(
                ".ag-cell").first.click()
            page.wait_for_function(
                f"w => document.querySelector('{graph}').layout.meta.window_ns[1] !== w", arg=window)
        page.wait_for_function(DRAWN_JS, arg=graph, polling="raf")
        page.evaluate("() => window.scrollTo(0, 0)")  # (the click scrolled: the sticky bar would follow)
        page.wait_for_timeout(400)  # the minimap's image paints a frame after it is attached
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, help="a job's run directory (default: HTA's two-rank sample as one)")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "docs" / "images" / "job-run.png")
    ap.add_argument("--row", type=int, default=3, help="the collectives table's row to click (-1: none)")
    ap.add_argument("--fold", type=int, action="append", default=[], help="a rank to fold (repeatable)")
    args = ap.parse_args()
    if not CHROMIUM.exists():
        print(f"screenshot_job_run: {CHROMIUM} not found (apt-get install chromium)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run or make_job(Path(tmp))
        screenshot(run, args.out, row=None if args.row < 0 else args.row, fold=args.fold)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
