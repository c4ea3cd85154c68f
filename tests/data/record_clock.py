"""Record ONE process under nsys and torch.profiler at once, to check that tracer's clocks line up (issue 12).

    nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none -o OUT/clock python3 record_clock.py OUT
    nsys export --type sqlite -o OUT/clock.sqlite OUT/clock.nsys-rep

The same range ("clock/mark", around a 50 ms sleep) is opened in NVTX and in record_function back to back, and
the Unix time just before it is printed (`mark_unix_ns`). After `align()`, nsys's NVTX range and Kineto's
record_function range must start within microseconds of each other and of the printed time.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import time
from pathlib import Path

import nvtx
import torch


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda:0")
    a = torch.randn(1024, 1024, device=dev)
    (a @ a).sum().item()  # warm-up
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(3):
            t = time.time_ns()
            with nvtx.annotate("clock/mark"), torch.profiler.record_function("clock/mark"):
                time.sleep(0.05)
            print(json.dumps({"mark_unix_ns": t}), flush=True)
            (a @ a).sum().item()
    raw = out / "clock_kineto.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(out / "clock_kineto.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


if __name__ == "__main__":
    main()
