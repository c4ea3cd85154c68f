"""What Python stacks (torch.profiler's ``with_stack=True``, `tracer record --stacks`) cost a training step on
the CPU, beside torch.profiler with tracer's settings alone (issue 37, part 5).

    PYTHONPATH=. python bench/stacks_overhead.py [--rounds 15] [--block-steps 20] [--threads 1] [--device cuda]

Three workloads, each in one process: ``mlp`` (a 3-layer MLP, batch 128, hidden 512: a step of a few matmuls,
the profiler's per-call cost small beside them), ``small-ops`` (a Python loop of 200 tiny tensor ops a step: the
profiler's per-op cost is most of it, but the ops are Python operators, not Python calls: few frames) and
``modules`` (64 tiny modules, forward and backward: every module call is several Python frames). Each round runs
one block of ``--block-steps`` steps under each setting, in a shuffled order, each profiled block in a profiler
session of its own (started, warmed up for 3 steps, timed, stopped untimed): settings ``none`` (no profiler),
``profiler`` (torch.profiler as `tracer record` starts it: tracer.record.profiler.torch_profiler_settings, every
thread) and ``stacks`` (the same with with_stack=True). Interleaving the settings round by round keeps a loaded
machine's drift out of their difference.

Prints a table (median ms a step, its quartiles and the fastest block; the stacks' cost beside the profiler
alone, as the median of the rounds' ratios and as the ratio of the fastest blocks). ``--device cuda`` runs the
same workloads on the GPU, each block timed until its last kernel ends (the launch queue can hide part of the
host's extra cost), and adds ``big-mlp`` (width 4096, batch 4096: a step that keeps the GPU busy, as most
training steps do).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable

SETTINGS = ("none", "profiler", "stacks")
WORKLOADS = ("mlp", "small-ops", "modules")
#: on a GPU, also a step that keeps the GPU busy (what most training steps are): the host's extra cost may hide
GPU_WORKLOADS = ("big-mlp",)


def _workload(name: str, device: str) -> Callable[[], None]:
    import torch

    torch.manual_seed(0)
    if name in ("mlp", "big-mlp"):
        width, batch = (512, 128) if name == "mlp" else (4096, 4096)
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                    torch.nn.ReLU(), torch.nn.Linear(width, 10)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(batch, width, device=device)
        y = torch.randint(0, 10, (batch,), device=device)

        def step() -> None:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        return step
    if name == "modules":
        layers: list[torch.nn.Module] = []
        for _ in range(32):
            layers += [torch.nn.Linear(16, 16), torch.nn.ReLU()]
        net = torch.nn.Sequential(*layers).to(device)
        inp = torch.randn(4, 16, device=device)

        def modules() -> None:
            net(inp).sum().backward()
            net.zero_grad()
        return modules
    v = torch.randn(64, device=device)

    def small() -> None:
        out = v
        for _ in range(200):
            out = out * 1.0001 + 0.0001
        float(out.sum())
    return small


def measure(workload: str, rounds: int, block_steps: int, threads: int, device: str = "cpu"
            ) -> dict[str, list[float]]:
    """Per setting, each round's step time (s); on a GPU a block's time runs until its last kernel ends."""
    import torch
    from torch.profiler import profile

    from tracer.record.profiler import quiet_kineto, torch_profiler_settings

    torch.set_num_threads(threads)
    step = _workload(workload, device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(block_steps):  # (warm-up, unprofiled)
        step()
    sync()
    out: dict[str, list[float]] = {s: [] for s in SETTINGS}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(SETTINGS)
        rng.shuffle(order)
        for setting in order:
            prof = None
            if setting != "none":
                prof = profile(**torch_profiler_settings(all_threads=True, stacks=setting == "stacks"))
                with quiet_kineto():
                    prof.start()
                for _ in range(3):
                    step()
            sync()
            t = time.perf_counter()
            for _ in range(block_steps):
                step()
            sync()
            out[setting].append((time.perf_counter() - t) / block_steps)
            if prof is not None:
                with quiet_kineto():
                    prof.stop()
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block-steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (adds big-mlp: a step that keeps the GPU busy)")
    args = ap.parse_args(argv)
    workloads = WORKLOADS + (GPU_WORKLOADS if args.device.startswith("cuda") else ())
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("stacks_overhead: --device cuda needs a GPU, and torch sees none", file=sys.stderr)
            return 2
        print(f"device: {torch.cuda.get_device_name(0)}")
    print(f"{'workload':<10} {'setting':<9} {'ms/step':>8} {'q1-q3 ms':>15} {'best ms':>8} {'vs profiler':>12} "
          f"{'best vs best':>12}")
    for workload in workloads:
        got = measure(workload, args.rounds, args.block_steps, args.threads, args.device)
        ratios = [s / p for s, p in zip(got["stacks"], got["profiler"], strict=True)]
        for setting in SETTINGS:
            ts = sorted(got[setting])
            q1, q3 = ts[len(ts) // 4], ts[(3 * len(ts)) // 4]
            rel = {"none": "", "profiler": "(base)",
                   "stacks": f"{100 * (statistics.median(ratios) - 1):+.1f}%"}[setting]
            fastest = {"none": "", "profiler": "(base)",
                       "stacks": f"{100 * (min(got['stacks']) / min(got['profiler']) - 1):+.1f}%"}[setting]
            print(f"{workload:<10} {setting:<9} {1e3 * statistics.median(ts):>8.3f} "
                  f"{f'{1e3 * q1:.3f}-{1e3 * q3:.3f}':>15} {1e3 * ts[0]:>8.3f} {rel:>12} {fastest:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
