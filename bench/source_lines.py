"""How long the source attribution of issue 37 takes on a large trace recorded with stacks: every host call's
user frame (``tracer.analysis.source.attribute``) and its line read from the source
(``tracer.analysis.source_code.sites``).

    PYTHONPATH=. python bench/source_lines.py [STEPS]

A synthetic timeline like torch.profiler's with ``with_stack=True``: STEPS (default 16,400) runs of a user
function ``step`` on the main thread, each making 10 calls (6 through 10 library frames to an operator, 4 straight
to an operator; each operator with a CUDA launch): 1,000,401 frames and 344,400 calls at 16,400 steps, with an
autograd thread of frameless operators (one a step) that borrow the main thread's frames. Best of 3;
docs/lines.md quotes the output.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tracer.analysis.source import attribute
from tracer.analysis.source_code import SourceFiles, sites
from tracer.timeline import Timeline, TraceMeta, build_events

SCRIPT = """import torch


def step(model, x, opt):
    out = model(x)
    loss = out.sum()
    loss.backward()
    opt.step()
    for _ in range(3):
        x = x * 2
    x = torch.nn.functional.relu(x) + 1
    return loss.item()


def main():
    for _ in range(10):
        step(None, None, None)
"""
CALLS = ["nn.Module: Model_0", "<built-in method sum of Tensor object at 0x1>", "torch/_tensor.py(570): backward",
         "torch/optim/optimizer.py(473): wrapper", "aten::mul", "aten::mul", "aten::mul",
         "torch/nn/functional.py(10): relu", "aten::add", "<built-in method item of Tensor object at 0x1>"]


def synth(steps: int, depth: int = 10) -> Timeline:
    """The synthetic timeline (module docstring)."""
    k = len(CALLS)
    w = k * 100 + 100  # one step: 100 ns per call and a margin
    t0 = np.arange(steps, dtype=np.int64) * w
    rows: dict[str, list[np.ndarray]] = {c: [] for c in ("start_ns", "end_ns", "kind", "name", "tid")}

    def add(start: np.ndarray, end: np.ndarray, kind: str, name: str, tid: int) -> None:
        rows["start_ns"].append(start)
        rows["end_ns"].append(end)
        rows["kind"].append(np.full(start.size, kind, dtype=object))
        rows["name"].append(np.full(start.size, name, dtype=object))
        rows["tid"].append(np.full(start.size, tid, dtype=np.int64))

    add(np.array([0]), np.array([steps * w + 10]), "python", "train.py(15): main", 1)
    add(t0 + 1, t0 + w - 1, "python", "train.py(4): step", 1)
    for i, name in enumerate(CALLS):
        s, e = t0 + 10 + 100 * i, t0 + 10 + 100 * i + 90
        if name.startswith("aten::"):
            add(s, e, "cpu_op", name, 1)
            add(s + 5, e - 5, "runtime", "cudaLaunchKernel", 1)
            continue
        add(s, e, "python", name, 1)
        for d in range(1, depth):
            add(s + d, e - d, "python", f"torch/lib{d}.py({d}): f{d}", 1)
        add(s + depth, e - depth, "cpu_op", "aten::linear", 1)
        add(s + depth + 5, e - depth - 5, "runtime", "cudaLaunchKernel", 1)
    add(t0 + 250, t0 + 270, "cpu_op", "aten::mm", 2)  # (the autograd thread, in loss.backward(): borrows)
    cols = {c: np.concatenate(v) for c, v in rows.items()}
    cols["kind"] = cols["kind"].tolist()
    cols["name"] = cols["name"].tolist()
    cols["pid"] = np.ones(cols["start_ns"].size, dtype=np.int64)
    return Timeline(build_events(cols), TraceMeta(format="kineto", source="synthetic"))


def best(fn, n: int = 3) -> tuple[float, object]:
    out, times = None, []
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main(argv: list[str]) -> int:
    steps = int(argv[0]) if argv else 16_400
    t = time.perf_counter()
    tl = synth(steps)
    built = time.perf_counter() - t
    ev = tl.events
    frames = int((ev["kind"] == "python").sum())
    calls = int(ev["kind"].isin(["cpu_op", "runtime"]).sum())
    with tempfile.TemporaryDirectory() as d:
        Path(d, "train.py").write_text(SCRIPT)
        t_attr, a = best(lambda: attribute(ev))
        t_sites, s = best(lambda: sites(a, ev, SourceFiles([Path(d)])))  # type: ignore[arg-type]
    lines = s.calls.groupby(["line", "text"]).size()  # type: ignore[attr-defined]
    print(f"{'steps':>8} {'frames':>10} {'calls':>9} {'attributed':>10} {'borrowed':>9} {'attribute s':>11} "
          f"{'lines s':>8} {'build s':>8}")
    print(f"{steps:>8,} {frames:>10,} {calls:>9,} {len(a.calls):>10,} {int(a.calls['borrowed'].sum()):>9,} "  # type: ignore[attr-defined]
          f"{t_attr:>11.3f} {t_sites:>8.3f} {built:>8.2f}")
    print()
    for (line, text), n in lines.items():
        print(f"  train.py:{line:<3} {n:>9,}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
