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


def backward_on_an_autograd_thread() -> pd.DataFrame:
    """Thread 1 opens "step" 0-1000 and launches kernel a; thread 2 (autograd, no range of its own) launches b
    inside the step; thread 3 has its own range "loader" and launches c inside the step; thread 2 launches d
    after the step."""
    return build_events(
        {
            "start_ns": [0, 10, 100, 400, 410, 200, 300, 500, 1500, 2000, 2300, 2600],
            "end_ns": [1000, 20, 110, 600, 420, 300, 400, 600, 1510, 2100, 2400, 2700],
            "kind": ["range", "runtime", "runtime", "range", "runtime",
                     "kernel", "kernel", "kernel", "runtime", "kernel", "range", "runtime"],
            "name": ["step", "launch", "launch", "loader", "launch", "a", "b", "c", "launch", "d", "late", "x"],
            "device": [-1, -1, -1, -1, -1, 0, 0, 0, -1, 0, -1, -1],
            "stream": [-1, -1, -1, -1, -1, 7, 7, 7, -1, 7, -1, -1],
            "pid": [9] * 12,
            "tid": [1, 1, 2, 3, 3, 7, 7, 7, 2, 7, 1, 1],
            "correlation": pd.array([None, 1, 2, None, 3, 1, 2, 3, 4, 4, None, None], dtype="Int64"),
        }
    )


def test_backward_launches_from_a_thread_without_ranges_credit_the_open_range():
    ev = backward_on_an_autograd_thread()
    named = lambda pairs: {(str(ev.loc[r, "name"]), str(ev.loc[w, "name"])) for r, w in pairs.itertuples(index=False)}  # noqa: E731
    # own thread only: the step gets a; the loader (thread 3) gets c
    assert named(range_launches(ev, "thread")) == {("step", "a"), ("loader", "c")}
    # process rule: b (autograd thread, nothing open there) joins the step; c stays with its own thread's range;
    # d was launched after the step closed
    assert named(range_launches(ev, "process")) == {("step", "a"), ("step", "b"), ("loader", "c")}


def test_the_training_step_range_credits_its_backward_kernels(data_dir):
    from tracer.parsers import load_trace

    ev = load_trace(data_dir / "mlp_train_200.json.gz").events
    kernels = int((ev["kind"] == "kernel").sum())
    by_thread = range_summary(ev, "thread").set_index("name")
    by_process = range_summary(ev, "process").set_index("name")
    # every kernel of this 200-step loop runs inside a "step"; the main thread launches under half of them
    assert by_process.loc["step", "kernels"] == kernels == 3200
    assert by_thread.loc["step", "kernels"] < kernels / 2
    assert by_process.loc["step", "gpu_busy_ns"] > by_thread.loc["step", "gpu_busy_ns"]


def test_summary_names_the_rule_and_keeps_the_own_thread_figure(data_dir):
    from tracer.analysis.summary import summarize
    from tracer.parsers import load_trace

    out = summarize(load_trace(data_dir / "mlp_train_200.json.gz"))
    assert "autograd" in out["range_rule"]
    step = next(r for r in out["ranges"] if r["name"] == "step")
    assert step["kernels"] == 3200 and step["own_thread_kernels"] == 1400


def test_numbered_ranges_stay_together_in_the_order_of_their_numbers() -> None:
    from tracer.analysis.ranges import longest_first

    table = pd.DataFrame({"name": ["ProfilerStep#10", "ProfilerStep#2", "train", "ProfilerStep#1", "load"],
                          "host_ns": [5, 9, 20, 3, 1]})
    # the steps stand where their longest stands (9, after train's 20), #1 … #10 in order, not 10 before 2
    assert longest_first(table)["name"].tolist() == ["train", "ProfilerStep#1", "ProfilerStep#2",
                                                    "ProfilerStep#10", "load"]
