"""The same workload recorded on an H200 under torch.profiler and under nsys (tests/data/record_pair.py):
both parsers must see the same GPU work per stream, and tracer's figures must match `nsys stats`."""

from __future__ import annotations

import pandas as pd
import pytest

from tracer.analysis.ranges import range_summary
from tracer.analysis.work import kernel_summary
from tracer.parsers import load_trace


@pytest.fixture(scope="module")
def pair(request):
    from tests.conftest import DATA

    return load_trace(DATA / "pair_kineto.json.gz", cache=False), load_trace(DATA / "pair.sqlite.gz", cache=False)


def work_counts(events: pd.DataFrame) -> dict[tuple[int, int, str, str], int]:
    work = events[events["kind"].isin(["kernel", "memcpy", "memset"])]
    grouped = work.groupby(["device", "stream", "kind", "copy_kind"], observed=True).size()
    return {(int(d), int(s), str(k), str(c)): int(n) for (d, s, k, c), n in grouped.items()}


def test_same_kernels_and_copies_per_stream(pair):
    kineto, nsys = pair
    assert kineto.meta.format == "kineto" and nsys.meta.format == "nsys"
    counts = work_counts(kineto.events)
    assert counts == work_counts(nsys.events)
    assert counts == {(0, 7, "kernel", ""): 22, (0, 7, "memcpy", "HtoD"): 1, (0, 17, "memcpy", "DtoH"): 20}


def test_same_kernel_names(pair):
    """cuBLAS' C-style names are identical; templated ATen kernels differ only in demangler style
    (Kineto: `(anonymous namespace)`, nsys: `<unnamed>`), so those are compared by count."""
    kineto, nsys = pair
    k = kernel_summary(kineto.events).set_index("name")["count"].to_dict()
    n = kernel_summary(nsys.events).set_index("name")["count"].to_dict()
    assert sorted(k.values()) == sorted(n.values())
    plain = {name for name in k if not name.startswith("void ")}
    assert plain and plain == {name for name in n if not name.startswith("void ")}
    assert all(k[name] == n[name] for name in plain)


def test_same_ranges(pair):
    names = {"pair/compute", "pair/copy", "pair/memset"}
    for tl in pair:
        rs = range_summary(tl.events).set_index("name")
        assert names <= set(rs.index)
        assert rs.loc["pair/compute", "kernels"] == 20
        assert rs.loc["pair/copy", "memcpys"] == 20


def test_nsys_figures_match_nsys_stats(pair):
    """From tests/data/pair_nsys_stats.csv.txt (nsys stats 2025.3.1 on the same export)."""
    _, nsys = pair
    ks = kernel_summary(nsys.events).set_index("name")
    sgemm = [n for n in ks.index if "gemm" in n]
    assert len(sgemm) == 1
    assert ks.loc[sgemm[0], "count"] == 20
    assert ks.loc[sgemm[0], "total_ns"] == 1_114_561  # cuda_gpu_kern_sum "Total Time (ns)"
    ev = nsys.events
    dtoh = ev[(ev["kind"] == "memcpy") & (ev["copy_kind"] == "DtoH")]
    assert int((dtoh["end_ns"] - dtoh["start_ns"]).sum()) == 1_562_529  # cuda_gpu_mem_time_sum
    rs = range_summary(ev).set_index("name")
    assert rs.loc["pair/compute", "host_ns"] == 1_255_606  # nvtx_sum
