"""A GPU training loop's Kineto trace with Python stacks, made by hand (tests need no GPU): ``train.py``'s steps with
planted slow-downs on known lines, as torch.profiler(with_stack=True) records them (issue 37).

Per step (times in µs from the step's start):

- line 5 ``out = model(x)``: a 2 ms GEMM (``nn.Module: Model_0`` → ``aten::linear`` → ``cudaLaunchKernel``);
- line 6 ``torch.cuda.synchronize()``: ``cudaDeviceSynchronize`` waits for the GEMM; the host then takes 80 µs
  before the next launch: a ``host_sync`` gap;
- line 7 ``batch = host_batch.to("cuda")``: a 1 ms copy from pageable memory (``pageable``);
- line 9 ``out = out * 1.01`` in a loop (line 8): 20 tiny kernels launched 70 µs apart (``launch_bound`` gaps);
- line 10 ``return out.sum().item()``: a sum kernel and a 2 µs copy to pageable memory, then
  ``cudaStreamSynchronize``; the next step starts 150 µs later (``host_sync``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

SCRIPT = '''import torch


def step(model, x, host_batch):
    out = model(x)
    torch.cuda.synchronize()
    batch = host_batch.to("cuda")
    for _ in range(20):
        out = out * 1.01
    return out.sum().item()


def main(model, x, host_batch):
    for _ in range(STEPS):
        step(model, x, host_batch)


main(None, None, None)
'''
PID = TID = 4242
STREAM = 7
#: The planted lines and the finding kind each must give.
PLANTED = {5: None, 6: "host_sync", 7: "pageable", 9: "launch_bound", 10: "host_sync"}


class _Trace:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 0

    def host(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur,
                            "args": args})

    def frame(self, name: str, ts: float, dur: float) -> None:
        self.host("python_function", name, ts, dur)

    def launch(self, name: str, ts: float, dur: float) -> int:
        self.corr += 1
        self.host("cuda_runtime", name, ts, dur, correlation=self.corr)
        return self.corr

    def gpu(self, cat: str, name: str, ts: float, dur: float, corr: int, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": STREAM, "ts": ts, "dur": dur,
                            "args": {"device": 0, "stream": STREAM, "correlation": corr, **args}})


def _step(t: _Trace, t0: float) -> float:
    """One step from ``t0`` (µs); returns its end."""
    # line 5: the GEMM
    t.frame("nn.Module: Model_0", t0 + 1, 30)
    t.host("cpu_op", "aten::linear", t0 + 2, 27)
    c = t.launch("cudaLaunchKernel", t0 + 5, 6)
    t.gpu("kernel", "gemm_kernel", t0 + 12, 2000, c)
    # line 6: torch.cuda.synchronize() waits for it
    t.frame("torch/cuda/__init__.py(1020): synchronize", t0 + 40, 1980)
    t.frame("<built-in function _cuda_synchronize>", t0 + 42, 1975)
    t.launch("cudaDeviceSynchronize", t0 + 44, 1970)  # (returns at 2014: 2 µs after the GEMM)
    # line 7: a pageable copy, 80 µs after the sync returned
    t.frame("<built-in method to of Tensor object at 0x7f00>", t0 + 2090, 1040)
    t.host("cpu_op", "aten::to", t0 + 2091, 1038)
    t.host("cpu_op", "aten::_to_copy", t0 + 2092, 1036)
    t.host("cpu_op", "aten::copy_", t0 + 2093, 1034)
    c = t.launch("cudaMemcpyAsync", t0 + 2094, 1030)
    t.gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", t0 + 2100, 1000, c, bytes=64 << 20)
    # line 9: 20 tiny kernels, 70 µs apart
    at = t0 + 3140
    for _ in range(20):
        t.host("cpu_op", "aten::mul", at, 50)
        c = t.launch("cudaLaunchKernel", at + 20, 8)
        t.gpu("kernel", "elementwise_mul", at + 30, 5, c)
        at += 70
    # line 10: out.sum().item()
    t.frame("<built-in method sum of Tensor object at 0x7f01>", at, 40)
    t.host("cpu_op", "aten::sum", at + 1, 38)
    c = t.launch("cudaLaunchKernel", at + 10, 8)
    t.gpu("kernel", "reduce_kernel", at + 20, 10, c)
    at += 50
    t.frame("<built-in method item of Tensor object at 0x7f01>", at, 60)
    t.host("cpu_op", "aten::item", at + 1, 58)
    t.host("cpu_op", "aten::_local_scalar_dense", at + 2, 56)
    c = t.launch("cudaMemcpyAsync", at + 5, 20)
    t.gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", at + 10, 2, c, bytes=4)
    t.launch("cudaStreamSynchronize", at + 30, 25)
    return at + 60


def write_planted(folder: Path, steps: int = 4, with_stack: bool = True) -> Path:
    """``train.py`` and its trace ``trace.json`` in ``folder``; the trace's path. Without ``with_stack``: the same
    trace without its Python frames."""
    (folder / "train.py").write_text(SCRIPT.replace("STEPS", str(steps)))
    t = _Trace()
    t0 = 100.0
    starts = []
    for _ in range(steps):
        starts.append(t0)
        end = _step(t, t0)
        t.frame("train.py(4): step", t0, end - t0 + 1)
        t0 = end + 150
    t.frame("train.py(13): main", 50, t0 - 60)
    t.frame("train.py(18): <module>", 40, t0 - 40)
    events = t.events if with_stack else [e for e in t.events if e["cat"] != "python_function"]
    out = folder / "trace.json"
    out.write_bytes(orjson.dumps({"traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000}))
    return out
