"""NVTX / record_function ranges projected onto the GPU work they launched (tracer/analysis/ranges.py)."""

from __future__ import annotations

import pandas as pd

from tracer.analysis.ranges import range_launches, range_summary
from tracer.timeline import build_events


def two_processes_same_correlation_ids() -> pd.DataFrame:
    """Processes 100 and 200 each run range "step" with one launch of correlation id 1 (CUPTI numbers each
    process from 1); process 100's kernel runs 1000-1100 on GPU 0, process 200's 2000-2300 on GPU 1."""
    return build_events(
        {
            "start_ns": [0, 10, 1000, 0, 10, 2000],
            "end_ns": [500, 20, 1100, 500, 20, 2300],
            "kind": ["range", "runtime", "kernel", "range", "runtime", "kernel"],
            "name": ["step", "cudaLaunchKernel", "k", "step", "cudaLaunchKernel", "k"],
            "device": [-1, -1, 0, -1, -1, 1],
            "stream": [-1, -1, 7, -1, -1, 7],
            "pid": [100, 100, 100, 200, 200, 200],
            "tid": [1, 1, 7, 1, 1, 7],
            "correlation": pd.array([None, 1, 1, None, 1, 1], dtype="Int64"),
        }
    )


def test_correlation_ids_shared_by_two_processes_are_not_crossed():
    # Joined on the correlation id alone, each "step" was credited with both processes' kernels: 4 kernels
    # and 800 ns of GPU time instead of 2 kernels and 400 ns.
    ev = two_processes_same_correlation_ids()
    pairs = range_launches(ev)
    launched = {int(ev.loc[r, "pid"]): int(ev.loc[w, "device"]) for r, w in pairs.itertuples(index=False)}
    assert len(pairs) == 2
    assert launched == {100: 0, 200: 1}
    rs = range_summary(ev).set_index("name")
    assert rs.loc["step", ["count", "kernels", "gpu_busy_ns", "gpu_window_ns"]].tolist() == [2, 2, 400, 400]


def test_a_launch_seen_twice_in_one_range_counts_its_work_once():
    # a runtime call and the driver call inside it carrying the same correlation id
    ev = build_events(
        {
            "start_ns": [0, 10, 12, 1000],
            "end_ns": [500, 20, 18, 1100],
            "kind": ["range", "runtime", "driver", "kernel"],
            "name": ["step", "cudaLaunchKernel", "cuLaunchKernel", "k"],
            "device": [-1, -1, -1, 0],
            "stream": [-1, -1, -1, 7],
            "pid": [100, 100, 100, 100],
            "tid": [1, 1, 1, 7],
            "correlation": pd.array([None, 5, 5, 5], dtype="Int64"),
        }
    )
    rs = range_summary(ev).set_index("name")
    assert rs.loc["step", ["kernels", "gpu_busy_ns"]].tolist() == [1, 100]
