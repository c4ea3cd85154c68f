"""A user-style training script (not a scenario): a small MLP classifier with AMP, a DataLoader with worker
processes, an optimizer, a few hundred steps. Used by bench/record_command.py (what `tracer record -- CMD`
costs) and recorded on the GPU machine as a bundled example of a user's run.

    python bench/user_train.py [--steps 300] [--workers 2] [--self-profile]

Prints one JSON line: step times (s) of every step, measured with the device synchronised, and the device.
``--self-profile`` wraps the loop in torch.profiler itself (same settings tracer uses, a step per optimizer
step): the baseline that tells tracer's own cost from torch.profiler's.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    """The model (512→1024→1024→10, GELU), AdamW and the AMP scaler on ``dev``, and one training step with its
    record_function ranges (bench/capture_overhead.py times the same step)."""

    def __init__(self, dev: torch.device) -> None:
        self.dev = dev
        self.amp_dtype = torch.float16 if dev.type == "cuda" else torch.bfloat16
        self.model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
                                         torch.nn.GELU(), torch.nn.Linear(1024, 10)).to(dev)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.scaler = torch.amp.GradScaler(dev.type, enabled=dev.type == "cuda")

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward, backward and optimizer step on one batch already on the device; the loss."""
        with torch.profiler.record_function("train/forward"), torch.autocast(self.dev.type, dtype=self.amp_dtype):
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        with torch.profiler.record_function("train/backward"):
            self.opt.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
        with torch.profiler.record_function("train/optimizer"):
            self.scaler.step(self.opt)
            self.scaler.update()
        return loss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--self-profile", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    n = args.batch * 64
    data = TensorDataset(torch.randn(n, 512), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        pin_memory=dev.type == "cuda", persistent_workers=args.workers > 0, drop_last=True)
    trainer = Trainer(dev)
    prof = None
    if args.self_profile:
        from tracer.record.profiler import torch_profiler_settings

        settings = torch_profiler_settings(all_threads=True)
        settings["schedule"] = lambda _step: torch.profiler.ProfilerAction.RECORD
        prof = torch.profiler.profile(**settings)
        prof.start()
    times: list[float] = []
    step = 0
    while step < args.steps:
        for x, y in loader:
            t0 = time.perf_counter()
            with torch.profiler.record_function("train/copy"):
                x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            loss = trainer.step(x, y)
            if prof is not None:
                prof.step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            step += 1
            if step >= args.steps:
                break
    if prof is not None:
        prof.stop()
    print(json.dumps({"device": str(dev), "steps": len(times), "step_s": times, "loss": float(loss.detach())}))


if __name__ == "__main__":
    main()
