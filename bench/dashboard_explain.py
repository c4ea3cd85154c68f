"""What the timeline page's findings panel and critical path overlay cost: per trace, explain once (graph, path,
findings: what the page caches per run), then the whole-run figure at 1,200 px without and with the path.

    PYTHONPATH=. python bench/dashboard_explain.py

Best of three for each figure; explain is timed once (the page computes it once per run). docs/dashboard.md
quotes it.
"""

from __future__ import annotations

import time
from pathlib import Path

from _common import best

from tracer.dashboard.explain_view import compute
from tracer.dashboard.figures import timeline_figure
from tracer.dashboard.model import prepare
from tracer.parsers import load_trace

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
TRACES = [
    "copy_nonblocking_same_stream.json.gz",
    "mlp_train_200.json.gz",
    "external/kineto_resnet50_num_workers_0_worker0.pt.trace.json.gz",
]


def main() -> int:
    print(f"{'trace':<44} {'events':>7} {'explain s':>9} {'findings':>8} {'pieces':>7} {'fig s':>6} "
          f"{'fig+path s':>10} {'path blocks':>11}")
    for name in TRACES:
        view = prepare(load_trace(DATA / name, cache=False))
        t = time.perf_counter()
        result = compute(view)
        took = time.perf_counter() - t
        plain = best(lambda v=view: timeline_figure(v, width_px=1200))
        with_path = best(lambda v=view, p=result.path: timeline_figure(v, width_px=1200, path=p))
        blocks = timeline_figure(view, width_px=1200, path=result.path).layout.meta["path_blocks"]
        print(f"{Path(name).name[:44]:<44} {len(view.timeline.events):>7,} {took:>9.3f} {len(result.findings):>8,} "
              f"{len(result.path):>7,} {plain:>6.3f} {with_path:>10.3f} {blocks:>11,}")
        if result.reason:
            print(f"  (explain cannot run: {result.reason})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
