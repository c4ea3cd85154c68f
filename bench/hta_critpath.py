"""HTA's critical path on the bundled traces, for tracer's tests to compare with (run once; tests do not need HTA).

Runs Holistic Trace Analysis' ``critical_path_analysis`` in HTA's own environment (HTA is not a dependency of
tracer) and prints, per trace and window, the path's total length (the sum of its edges' weights, µs, as HTA
counts it), the window HTA used and its ``summary()`` breakdown by bound type:

    /work/hta-venv/bin/python bench/hta_critpath.py

The windows are the ones HTA's own tests use (tests/test_critical_path_analysis.py): AlexNet's second
``[param|pytorch.model.alex_net|0|0|0|measure|forward]`` annotation (instance_id=1), and the multi-stream event
sync trace whole (annotation "").
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "tests" / "data" / "external"
CASES = [
    ("HTA_critpath_alexnet_benchmark_result_2869224_1695835535_trace.json.gz",
     "[param|pytorch.model.alex_net|0|0|0|measure|forward]", 1),
    ("HTA_critpath_alexnet_benchmark_result_2869224_1695835535_trace.json.gz", "", None),
    ("HTA_cuda_event_sync_multi_stream_event_sync_trace.json.gz", "", None),
]


def _pandas3_shim() -> None:
    """HTA 0.5.0 calls ``DataFrame.drop(axis=1, columns=...)``, which pandas 3 refuses; drop the redundant axis."""
    import pandas as pd

    drop = pd.DataFrame.drop

    def lenient(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "columns" in kwargs or "index" in kwargs:
            kwargs.pop("axis", None)
        return drop(self, *args, **kwargs)

    pd.DataFrame.drop = lenient


def main() -> int:
    _pandas3_shim()
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")  # (HTA 0.5 under pandas 3: copy-on-write and inplace notices by the dozen)
    for name, annotation, instance in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            with gzip.open(HERE / name, "rb") as src, open(os.path.join(tmp, "trace.json"), "wb") as dst:
                shutil.copyfileobj(src, dst)
            analyzer = TraceAnalysis(trace_dir=tmp)
            cp, ok = analyzer.critical_path_analysis(rank=0, annotation=annotation, instance_id=instance)
            edges = cp.get_critical_path_breakdown()
            total_us = float(edges.duration.sum())
            first = cp.node_list[cp.critical_path_nodes[0]]
            last = cp.node_list[cp.critical_path_nodes[-1]]
            print(f"{name} annotation={annotation!r} instance={instance} ok={ok}")
            print(f"  path: {len(cp.critical_path_nodes)} nodes, {len(edges)} edges, total {total_us:.1f} us, "
                  f"from ts {first.ts} to {last.ts} (span {last.ts - first.ts} us)")
            by = edges.groupby("bound_by").duration.sum()
            for bound, us in by.items():
                print(f"  {bound or '(dependency)':30s} {us:12.1f} us  {100 * us / total_us:5.1f}%")
            by_type = edges.groupby("type").duration.sum()
            for t, us in by_type.items():
                print(f"  edge type {t:28s} {us:12.1f} us")
            top = edges.sort_values("duration", ascending=False).head(8)
            for r in top.itertuples():
                print(f"    {r.duration:10.1f} us  {r.type:22s} {r.s_name} (stream {r.stream})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
