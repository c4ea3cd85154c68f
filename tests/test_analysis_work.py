import pandas as pd

from tracer.analysis.overlap import concurrent_devices_ns
from tracer.analysis.summary import summarize
from tracer.analysis.work import copy_summary, idle_gaps, kernel_summary
from tracer.timeline import Timeline, TraceMeta, build_events


def timeline() -> pd.DataFrame:
    return build_events(
        {
            "start_ns": [0, 100, 300, 50, 0],
            "end_ns": [100, 200, 400, 150, 1000],
            "kind": ["kernel", "kernel", "memcpy", "kernel", "cpu_op"],
            "copy_kind": ["", "", "DtoH", "", ""],
            "name": ["a", "b", "Memcpy DtoH", "a", "op"],
            "device": [0, 0, 0, 1, -1],
            "stream": [7, 7, 9, 7, -1],
            "bytes": pd.array([None, None, 1000, None, None], dtype="Int64"),
        }
    )


def test_kernel_summary():
    ks = kernel_summary(timeline()).set_index("name")
    assert ks.loc["a", "count"] == 2 and ks.loc["a", "total_ns"] == 200
    assert ks.loc["b", "total_ns"] == 100
    assert abs(ks["share"].sum() - 1) < 1e-9


def test_copy_summary_bandwidth():
    cs = copy_summary(timeline())
    assert cs[["device", "copy_kind", "count", "bytes", "total_ns"]].values.tolist() == [[0, "DtoH", 1, 1000, 100]]
    assert cs["gb_per_s"].iloc[0] == 10.0  # 1000 B in 100 ns


def test_idle_gaps():
    gaps = idle_gaps(timeline(), 0)
    assert gaps[["start_ns", "end_ns", "gap_ns"]].values.tolist() == [[200, 300, 100]]


def test_concurrency_of_two_gpus():
    # GPU 0 busy [0,200)+[300,400), GPU 1 busy [50,150): both at once for 100 ns
    assert concurrent_devices_ns(timeline()) == {1: 200, 2: 100}


def test_summary_has_every_gpu_and_no_host():
    s = summarize(Timeline(timeline(), TraceMeta(format="test")))
    assert set(s["devices"]) == {"0", "1"}
    assert s["devices"]["0"]["overlap_ns"] == 0
    assert s["span_ns"] == 1000


def test_host_thread_stats_counts_nested_ops_once():
    from tracer.analysis.lanes import host_thread_stats

    ev = build_events(
        {
            "start_ns": [0, 10, 50, 0, 5],
            "end_ns": [40, 20, 60, 30, 6],
            "kind": ["cpu_op", "cpu_op", "cpu_op", "cpu_op", "runtime"],
            "name": ["outer", "inner", "later", "other", "cudaLaunchKernel"],
            "pid": [1, 1, 1, 1, 1],
            "tid": [7, 7, 7, 8, 8],
        }
    )
    out = host_thread_stats(ev)
    assert out[["tid", "ops", "busy_ns", "launches"]].values.tolist() == [[7, 3, 50, 0], [8, 1, 30, 1]]


def test_summary_of_a_cpu_only_timeline_lists_threads():
    ev = build_events({"start_ns": [0], "end_ns": [10], "kind": ["cpu_op"], "name": ["aten::mm"], "pid": [1], "tid": [2]})
    s = summarize(Timeline(ev, TraceMeta(format="test", thread_names={"1:2": "worker"})))
    assert s["devices"] == {}
    assert s["threads"] == [{"pid": 1, "tid": 2, "ops": 1, "busy_ns": 10, "launches": 0, "name": "worker"}]


def test_concurrency_of_equals_a_sweep_by_hand_on_random_gpus() -> None:
    """concurrency_of (numpy sums by level) against a plain sweep over every elementary segment, on random busy
    sets with shared edges and empty intervals, exactly."""
    import numpy as np

    from tracer.analysis.overlap import concurrency_of

    rng = np.random.default_rng(7)
    for _ in range(200):
        parts = []
        for _g in range(int(rng.integers(1, 5))):
            n = int(rng.integers(0, 6))
            s = np.sort(rng.integers(0, 50, n)).astype(np.int64)
            e = s + rng.integers(0, 8, n)  # (0: an empty interval)
            parts.append((s, e))
        edges = sorted({int(x) for s, e in parts for x in (*s, *e)})
        want: dict[int, int] = {}
        for a, b in zip(edges, edges[1:]):
            level = sum(int(((s <= a) & (e >= b)).sum()) for s, e in parts)
            if level and b > a:
                want[level] = want.get(level, 0) + b - a
        assert concurrency_of(parts) == want


def test_concurrency_of_on_the_unix_clock_and_past_a_span_of_2_62_ns() -> None:
    """The sweep's one-key sort holds times as (t - first) * 2: on the Unix clock (~1.7e18 ns) it is exact, and a
    span past 2**62 ns (where that key would overflow int64) takes the two-key sort, with the same figures."""
    import numpy as np

    from tracer.analysis.overlap import concurrency_of

    base = 1_765_000_000_000_000_000
    parts = [(np.array([0, 300]) + base, np.array([200, 400]) + base), (np.array([50]) + base, np.array([150]) + base)]
    assert concurrency_of(parts) == {1: 200, 2: 100}
    far = [(np.array([-(2**62), 0]), np.array([-(2**62) + 10, 100])), (np.array([2**62 - 50]), np.array([2**62]))]
    assert concurrency_of(far) == {1: 160}
    assert concurrency_of([(np.array([], np.int64), np.array([], np.int64))]) == {}
