"""Record launch-bound work eagerly and the same work as one CUDA graph, in one torch.profiler trace: the
"before" and "after" of the launch-bound finding's fix (tests/test_explain_findings.py, docs/explain.md).

    python3 record_graphs.py OUT_DIR [SIZE]        # writes OUT_DIR/graphs_kineto.json.gz (SIZE: 256)

Workload, twice per phase (the first is a warm-up the profiler does not see): 8 chains of 50 small steps
(x = relu(x @ w + b), SIZE x SIZE fp32), on one stream. Range "graphs/eager": the steps launched one by one
from Python; range "graphs/graph": the same steps captured once into a torch.cuda.CUDAGraph (outside the
profiled window) and replayed with one graph.replay(). Each phase ends with torch.cuda.synchronize().
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import torch

CHAINS, STEPS = 8, 50


def steps(xs: list[torch.Tensor], w: torch.Tensor, b: torch.Tensor) -> None:
    for i, x in enumerate(xs):
        for _ in range(STEPS):
            x = torch.relu(x @ w + b)
        xs[i] = x


def main() -> None:
    out = Path(sys.argv[1])
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    w = torch.randn(size, size, device=dev) / size ** 0.5
    b = torch.randn(size, device=dev)
    xs = [torch.randn(size, size, device=dev) for _ in range(CHAINS)]
    steps(xs, w, b)  # warm-up: cuBLAS handle, allocator, modules
    torch.cuda.synchronize()
    # capture on a side stream, as torch.cuda.graph does; static inputs are the chain heads
    static = [x.clone() for x in xs]
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        steps(list(static), w, b)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        outs = list(static)
        steps(outs, w, b)
    graph.replay()
    torch.cuda.synchronize()
    config = None
    try:
        config = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    except (AttributeError, TypeError):
        pass
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, experimental_config=config) as prof:
        with torch.profiler.record_function("graphs/eager"):
            steps(xs, w, b)
            torch.cuda.synchronize()
        with torch.profiler.record_function("graphs/graph"):
            graph.replay()
            torch.cuda.synchronize()
    raw = out / "graphs_kineto.json"
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as f, gzip.open(out / "graphs_kineto.json.gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    raw.unlink()
    print(torch.__version__, torch.cuda.get_device_name(0), "size", size)


if __name__ == "__main__":
    main()
