"""Record a CUDA-graph workload on a GPU: under torch.profiler (Kineto JSON, with ``cuda_sync`` events where the
installed torch has them) and, run again with ``--no-profiler``, under ``nsys profile`` (test data for
tests/test_cuda_graphs.py: the kernels one ``cudaGraphLaunch`` runs are credited to it).

    python3 record_graph.py OUT_DIR                   # writes OUT_DIR/graph_kineto.json.gz
    nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi \
        --cuda-graph-trace=node -o OUT_DIR/graph python3 record_graph.py OUT_DIR --no-profiler

Workload: a graph of 8 matmuls (512x512) and a ReLU each, captured once, replayed 3 times inside NVTX range
"graph/replay"; then the same work run eagerly inside "graph/eager"; a device-to-host copy of the result.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import sys
from pathlib import Path

import nvtx
import torch

STEPS = 8
REPLAYS = 3


@contextlib.contextmanager
def phase(name: str):
    with nvtx.annotate(name), torch.profiler.record_function(name):
        yield


def body(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    for _ in range(STEPS):
        x = torch.relu(x @ w)
    return x


def build() -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, torch.Tensor]:
    dev = torch.device("cuda:0")
    x = torch.randn(512, 512, device=dev)
    w = torch.randn(512, 512, device=dev) / 23.0
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # capture needs warm-up on a side stream (cuBLAS workspaces)
        for _ in range(3):
            body(x, w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = body(x, w)
    torch.cuda.synchronize()
    return graph, x, w, out


def workload(graph: torch.cuda.CUDAGraph, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    with phase("graph/replay"):
        for _ in range(REPLAYS):
            graph.replay()
    with phase("graph/eager"):
        eager = body(x, w)
    with phase("graph/copy"):
        host = out.to("cpu")
    torch.cuda.synchronize()
    assert torch.allclose(host, eager.cpu(), rtol=1e-3, atol=1e-3), "graph replay and eager run disagree"


def _profiler_kwargs() -> dict:
    """torch.profiler arguments, with cuda_sync events switched on where this torch has the option."""
    kw: dict = {"activities": [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]}
    try:
        kw["experimental_config"] = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    except (AttributeError, TypeError):
        pass
    return kw


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    parts = build()
    workload(*parts)  # warm-up
    if "--no-profiler" in sys.argv:
        torch.cuda.profiler.start()
        workload(*parts)
        torch.cuda.profiler.stop()
        return
    with torch.profiler.profile(**_profiler_kwargs()) as prof:
        workload(*parts)
    raw = out / "graph_kineto.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(out / "graph_kineto.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


if __name__ == "__main__":
    main()
