"""What the timeline page's source lines cost (issue 37, part 5): on the hand-made GPU training loop with Python
stacks (tests/stack_traces.py) grown to STEPS steps, the user's frames read once per run, explain with the lines
table from its graph and path (what the page caches per run), the lines table and each line's intervals alone, and
per click on a line: the whole-run figure at 1,200 px with the outline of the line with the most intervals, and the
outline trace alone (the patch the page sends when only the line changed).

    PYTHONPATH=.:tests python bench/dashboard_lines.py [STEPS ...]

Best of three for each figure and for the outline; the per-run steps are timed once. docs/dashboard.md quotes it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import best

from tracer.dashboard import explain_view, lines_view
from tracer.dashboard.figures import outline_trace, rows_shown, timeline_figure
from tracer.dashboard.model import prepare
from tracer.parsers import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from stack_traces import write_planted  # noqa: E402  (tests/stack_traces.py)


def once(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    got = fn()
    return time.perf_counter() - t, got


def measure(steps: int) -> str:
    """One row of the table for the loop grown to ``steps`` steps."""
    from tracer.explain import explain

    with tempfile.TemporaryDirectory() as d:
        path = write_planted(Path(d), steps=steps)
        t = load_trace(path, cache=False)
        view = prepare(t)
        view.source = path
        t_src, got_sources = once(lambda: lines_view.sources_of(view))
        t_exp, result = once(lambda: explain_view.compute(view))
        assert isinstance(result, explain_view.Explained) and result.reason is None
        sources = lines_view.sources_of(view)
        e = explain(t, fix_replays=False, sources=sources)  # (the same graph and path, to time the lines alone)
        lines = result.lines
        t_lines = best(lambda: lines_view.compute(view, sources, e.graph, e.path))
        t_members = best(lambda: lines_view.member_positions(view, sources, lines.table))
        sizes = np.diff(lines.bounds)
        big = int(np.argmax(sizes))
        members = lines.members(big)
        window = (0, max(view.span_ns, 1))
        t_fig = best(lambda: timeline_figure(view, width_px=1200, outline=members[:0]))
        t_fig_outline = best(lambda: timeline_figure(view, width_px=1200, outline=members))
        rows = rows_shown(view, None)
        t_outline = best(lambda: outline_trace(view, rows, members, window, 1200))
    return (f"{steps:>6,} {len(t.events):>8,} {t_src:>9.3f} {t_exp:>15.3f} {t_lines:>7.3f} {t_members:>9.3f} "
            f"{int(sizes[big]):>12,} {t_fig:>6.3f} {t_fig_outline:>13.3f} {t_outline:>9.3f}")


def main(argv: list[str]) -> int:
    print(f"{'steps':>6} {'events':>8} {'sources s':>9} {'explain+lines s':>15} {'lines s':>7} {'members s':>9} "
          f"{'biggest line':>12} {'fig s':>6} {'fig+outline s':>13} {'outline s':>9}")
    for steps in [int(a) for a in argv] or [100, 1000]:
        print(measure(steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
