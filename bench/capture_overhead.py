"""What `tracer record -- COMMAND` adds to a training step beyond torch.profiler itself, measured inside ONE
process so that the run-to-run spread of separate processes (±10% on a 3 ms GPU step) does not drown it.

    python bench/capture_overhead.py [--blocks 40] [--block-steps 25] [--batch 256] [--json F]

The capture that `tracer record` starts in a user's process (tracer.record.capture: torch.profiler with tracer's
settings, every thread, a schedule that records every step) runs once for the whole bench. Blocks of training
steps then alternate between two ways of stepping that same profiler:

* ``tracer``:  the optimizer-step hook tracer registers (torch.optim's global post-hook → Capture.step: a lock,
  the time-window checks, ``prof.step()``), exactly as under `tracer record`;
* ``direct``:  the hook taken out, and the loop calling ``prof.step()`` itself, as a script that runs its own
  torch.profiler does.

Everything else (profiler, buffers, model, clocks) is shared, so the paired difference of neighbouring blocks is
tracer's own per-step cost. Before the capture starts, the same number of unprofiled blocks gives the step the
costs are stated against. A micro-benchmark times Capture.step alone over a profiler that does nothing.

Prints a table; the issue's bar is 2% of a step.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # user_train: the model and step timed


def _train_step_fn(batch: int) -> tuple[Callable[[], None], Any]:
    """bench/user_train.py's model and step (AMP, AdamW), on batches already on the device (no DataLoader:
    its workers add noise that is not tracer's)."""
    import torch
    from user_train import Trainer

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    trainer = Trainer(dev)
    xs = [torch.randn(batch, 512, device=dev) for _ in range(8)]
    ys = [torch.randint(0, 10, (batch,), device=dev) for _ in range(8)]
    i = [0]

    def step() -> None:
        trainer.step(xs[i[0] % 8], ys[i[0] % 8])
        i[0] += 1

    return step, dev


def _block(step: Callable[[], None], n: int, sync: Callable[[], None], after: Callable[[], None] | None) -> float:
    """Median seconds per step over ``n`` steps, each timed with the device synchronised."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        if after is not None:
            after()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _micro(calls: int) -> tuple[float, float]:
    """µs per call of Capture.step over a profiler whose step() does nothing, and of that step() alone."""
    from tracer.record.capture import Capture

    class _Nothing:
        def step(self) -> None:
            pass

    cap = Capture(Path(tempfile.gettempdir()))
    cap.prof = _Nothing()
    stub = _Nothing()
    best_cap = best_stub = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            cap.step()
        best_cap = min(best_cap, (time.perf_counter() - t0) / calls)
        t0 = time.perf_counter()
        for _ in range(calls):
            stub.step()
        best_stub = min(best_stub, (time.perf_counter() - t0) / calls)
    return best_cap * 1e6, best_stub * 1e6


def _bootstrap_ci(diffs: list[float], rounds: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(rounds))
    return meds[int(0.025 * rounds)], meds[int(0.975 * rounds)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=40, help="block pairs (tracer, direct) (default 40)")
    ap.add_argument("--block-steps", type=int, default=25, help="steps per block (default 25)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch
    from torch.optim import optimizer as optim_mod

    from tracer.record import capture

    step, dev = _train_step_fn(args.batch)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(30):  # warm-up: kernels chosen, allocator filled
        step()
    sync()
    plain = [_block(step, args.block_steps, sync, None) for _ in range(args.blocks)]

    with tempfile.TemporaryDirectory() as tmp:
        os.environ[capture.ENV_DIR] = tmp
        capture._start(Path(tmp))  # what the start-up hook does at torch's import under `tracer record`
        cap = capture.current()
        assert cap is not None and cap.prof is not None
        hooks = optim_mod._global_optimizer_post_hooks
        (hook_id,) = [k for k, h in hooks.items() if getattr(h, "__module__", "") == "tracer.record.capture"]
        ours = hooks[hook_id]

        def direct_step() -> None:
            cap.prof.step()

        for _ in range(30):
            step()
        sync()
        pairs: list[tuple[float, float]] = []
        for b in range(args.blocks):
            got: dict[str, float] = {}
            # alternate which goes first, so that drift within a pair favours neither
            for mode in (("tracer", "direct") if b % 2 == 0 else ("direct", "tracer")):
                if mode == "direct":
                    hooks.pop(hook_id)
                    got[mode] = _block(step, args.block_steps, sync, direct_step)
                    hooks[hook_id] = ours
                else:
                    got[mode] = _block(step, args.block_steps, sync, None)
            pairs.append((got["tracer"], got["direct"]))
        steps_seen = cap.steps
        cap.finish()  # saves the trace, as at exit (not timed: once per process)
        saved = sorted(p.name for p in Path(tmp).iterdir())
    micro_cap, micro_stub = _micro(200_000)

    base = statistics.median(plain)
    med_t = statistics.median(p[0] for p in pairs)
    med_d = statistics.median(p[1] for p in pairs)
    diffs = [t - d for t, d in pairs]
    own = statistics.median(diffs)
    lo, hi = _bootstrap_ci(diffs)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"
    print(f"device: {name}; torch {torch.__version__}; {args.blocks} block pairs x {args.block_steps} steps, "
          f"batch {args.batch}; tracer's hook ran {steps_seen} optimizer steps; saved {len(saved)} file(s)")
    print(f"{'mode':34s} {'median step ms':>15s} {'vs unprofiled':>14s}")
    print(f"{'unprofiled':34s} {base * 1e3:15.3f} {'—':>14s}")
    print(f"{'torch.profiler, stepped directly':34s} {med_d * 1e3:15.3f} {100 * (med_d / base - 1):+13.1f}%")
    print(f"{'torch.profiler, stepped by tracer':34s} {med_t * 1e3:15.3f} {100 * (med_t / base - 1):+13.1f}%")
    print(f"tracer's own cost per step (median of paired block differences): {own * 1e6:+.1f} µs = "
          f"{100 * own / base:+.2f}% of an unprofiled step (95% CI {100 * lo / base:+.2f}% to "
          f"{100 * hi / base:+.2f}%)")
    print(f"micro: Capture.step over a do-nothing profiler {micro_cap:.2f} µs per call, the do-nothing step() "
          f"alone {micro_stub:.2f} µs: {micro_cap - micro_stub:.2f} µs of tracer's own per optimizer step "
          f"= {100 * (micro_cap - micro_stub) * 1e-6 / base:.3f}% of this step")
    if args.json:
        args.json.write_text(json.dumps({
            "device": name, "unprofiled_s": base, "direct_s": med_d, "tracer_s": med_t, "own_s": own,
            "own_ci_s": [lo, hi], "pairs": pairs, "micro_us": [micro_cap, micro_stub],
        }, indent=2))


if __name__ == "__main__":
    main()
