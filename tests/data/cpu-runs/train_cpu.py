"""A tiny CPU training script for `tracer record -- python train_cpu.py [--fail]` (tests/data/cpu-runs/README.md):
six SGD steps of a 2-layer MLP; with --fail it stops after two steps with exit code 1, as a crashing script does."""

import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
fail = "--fail" in sys.argv
for _ in range(2 if fail else 6):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
if fail:
    sys.exit(1)
