"""The dashboard on a job of many ranks: layout (``prepare``) and one figure of the whole run, every rank
unfolded and all but one folded, on HTA's two-rank NCCL sample repeated as N ranks.

    .venv/bin/python bench/dashboard_job.py --ranks 2 16 64
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracer.dashboard.figures import timeline_figure  # noqa: E402
from tracer.dashboard.model import prepare  # noqa: E402
from tracer.job.load import load_job  # noqa: E402
from tracer.timeline import Timeline, concat  # noqa: E402

PAIR = [ROOT / "tests" / "data" / "external" / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]


def job_of(n: int) -> Timeline:
    pair = load_job(PAIR)
    parts = [Timeline(pair.events[pair.events["rank"] == r % 2].assign(rank=0), pair.meta) for r in range(n)]
    return concat(parts, ranks=list(range(n)))


def best(f, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 16, 64])
    args = ap.parse_args()
    print("| ranks | events | rows | prepare s | figure s | blocks | rows, all but rank 0 folded "
          "| figure s, folded | blocks |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.ranks:
        tl = job_of(n)
        t_prep, view = best(lambda tl=tl: prepare(tl), 1)
        t_all, fig = best(lambda view=view: timeline_figure(view, width_px=1200))
        folded = view.shown_lanes(None, None, list(range(1, n)))
        t_fold, ffig = best(lambda view=view, folded=folded: timeline_figure(view, width_px=1200, lanes=folded))
        m, fm = fig.layout.meta, ffig.layout.meta
        print(f"| {n} | {len(tl.events):,} | {m['rows']:,} | {t_prep:.2f} | {t_all:.2f} | {m['blocks']:,} | "
              f"{fm['rows']:,} | {t_fold:.2f} | {fm['blocks']:,} |")

if __name__ == "__main__":
    main()
