"""How long tracer.explain takes: the dependency graph and the critical path of a few bundled traces.

    PYTHONPATH=. python bench/explain_speed.py

Prints, per trace: timeline rows, graph nodes and edges, the best of three runs of ``build_graph`` and of
``critical_path`` (the whole trace), and the path's pieces. docs/explain.md quotes it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tracer.explain import build_graph, critical_path
from tracer.parsers import load_trace

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
TRACES = [
    "external/HTA_critpath_alexnet_benchmark_result_2869224_1695835535_trace.json.gz",
    "mlp_train_200.json.gz",
    "external/TraceLens_mi300_resnet_act_checkpoint.json.gz",
    "external/kineto_resnet50_num_workers_0_worker0.pt.trace.json.gz",
]


def main() -> int:
    print(f"{'trace':<58} {'rows':>7} {'nodes':>7} {'edges':>7} {'graph s':>8} {'path s':>7} {'pieces':>7}")
    for name in TRACES:
        t = load_trace(DATA / name, cache=False)
        best_graph = best_path = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            g = build_graph(t)
            t1 = time.perf_counter()
            path = critical_path(g)
            t2 = time.perf_counter()
            best_graph, best_path = min(best_graph, t1 - t0), min(best_path, t2 - t1)
        print(f"{Path(name).name[:58]:<58} {len(t.events):>7,} {len(g.nodes):>7,} {len(g.edges):>7,} "
              f"{best_graph:>8.3f} {best_path:>7.3f} {len(path.pieces):>7,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
