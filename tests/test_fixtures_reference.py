"""The per-device figures in tests/data/FIXTURES.md (recorded on an H200; reference figures computed with exact decimals) are reproduced exactly."""

import pytest

from tracer.analysis.lanes import lane_stats
from tracer.analysis.overlap import device_overlap
from tracer.parsers import load_trace

# file: (kernels, memcpys, compute_ns, copy_ns, overlap_ns, busy_ns) — copied from FIXTURES.md
REFERENCE = {
    "two_streams.json.gz": (100, 0, 253234011, 0, 0, 253234011),
    "copy_nonblocking_same_stream.json.gz": (50, 50, 130964108, 58004331, 0, 188968439),
    "copy_side_stream.json.gz": (50, 50, 130922833, 57973731, 56818860, 132077704),
    "nsys_compute_copy.sqlite.gz": (11, 10, 3461348, 2911400, 0, 6372748),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_figures(data_dir, name):
    tl = load_trace(data_dir / name, cache=False)
    (dev,) = device_overlap(tl.events)
    got = (dev.kernels, dev.memcpys, dev.compute_ns, dev.copy_ns, dev.overlap_ns, dev.busy_ns)
    assert dev.device == 0
    assert got == REFERENCE[name]


def test_two_streams_lanes(data_dir):
    lanes = lane_stats(load_trace(data_dir / "two_streams.json.gz", cache=False).events)
    assert lanes[["device", "stream", "kernels"]].values.tolist() == [[0, 13, 50], [0, 17, 50]]


def test_side_stream_copies_hide_behind_compute(data_dir):
    (dev,) = device_overlap(load_trace(data_dir / "copy_side_stream.json.gz", cache=False).events)
    assert dev.copy_hidden_frac > 0.97


def test_nsys_fixture_lanes_and_ranges(data_dir):
    tl = load_trace(data_dir / "nsys_compute_copy.sqlite.gz", cache=False)
    lanes = lane_stats(tl.events)
    assert lanes[["stream", "kernels", "memcpys"]].values.tolist() == [[7, 11, 0], [13, 0, 10]]
    ranges = tl.events[tl.events["kind"] == "range"]
    assert sorted(ranges["name"].astype(str)) == ["compute", "copy"]
    copies = tl.events[tl.events["kind"] == "memcpy"]
    assert set(copies["copy_kind"]) == {"DtoH"}
    assert set(copies["bytes"]) == {16_000_000}
    assert tl.meta.gpu_names == {0: "NVIDIA H200"}


def test_nvtx_range_projected_onto_its_kernels(data_dir):
    """nsys stats cuda_gpu_kern_sum gives 3,451,748 ns for the 10 sgemm kernels launched inside "compute"."""
    from tracer.analysis.ranges import range_summary

    rs = range_summary(load_trace(data_dir / "nsys_compute_copy.sqlite.gz", cache=False).events).set_index("name")
    assert rs.loc["compute", "kernels"] == 10
    assert rs.loc["compute", "gpu_busy_ns"] == 3_451_748
    assert rs.loc["copy", "memcpys"] == 10
    assert rs.loc["copy", "gpu_busy_ns"] == 2_911_400
