"""Record the same small workload twice on a GPU: under torch.profiler (Kineto JSON) and, run again with
`--no-profiler` under `nsys profile -t cuda,nvtx`, as an Nsight Systems report. The pair is test data for
"both parsers see the same kernels and copies per stream" (tests/test_kineto_nsys_pair.py).

    python3 record_pair.py OUT_DIR                      # writes OUT_DIR/pair_kineto.json.gz
    nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi -o OUT_DIR/pair \
        python3 record_pair.py OUT_DIR --no-profiler    # then nsys export --type sqlite

Workload: 20 matmuls (1024x1024) on the default stream inside NVTX range "pair/compute", each result copied
device-to-host on a side stream into pinned memory inside "pair/copy" (event waits), a memset, and a
host-to-device copy.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import sys
from pathlib import Path

import nvtx
import torch


@contextlib.contextmanager
def phase(name: str):
    with nvtx.annotate(name), torch.profiler.record_function(name):
        yield


def workload() -> None:
    dev = torch.device("cuda:0")
    side = torch.cuda.Stream()
    a = torch.randn(1024, 1024, device=dev)
    host = [torch.empty(1024, 1024, pin_memory=True) for _ in range(20)]
    results = []
    events = []
    with phase("pair/compute"):
        for _ in range(20):
            results.append(a @ a)
            ev = torch.cuda.Event()
            ev.record()
            events.append(ev)
    with phase("pair/copy"):
        with torch.cuda.stream(side):
            for r, h, ev in zip(results, host, events):
                side.wait_event(ev)
                h.copy_(r, non_blocking=True)
    with phase("pair/memset"):
        z = torch.zeros(1 << 20, device=dev)  # a memset (or fill kernel)
        z.copy_(torch.ones(1 << 20))  # HtoD from pageable memory
    torch.cuda.synchronize()


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    workload()  # warm-up: cuBLAS handles, allocator, streams
    torch.cuda.synchronize()
    if "--no-profiler" in sys.argv:
        # nsys records only between these calls (--capture-range=cudaProfilerApi), so the warm-up stays out,
        # as it does for torch.profiler below
        torch.cuda.profiler.start()
        workload()
        torch.cuda.profiler.stop()
        return
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        workload()
    raw = out / "pair_kineto.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(out / "pair_kineto.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


if __name__ == "__main__":
    main()
