"""A small CPU training loop recorded with torch.profiler(with_stack=True): tests/data/stacks_cpu.json.gz.

Run from tests/data (the trace names this file as given): python stacks_cpu.py
"""
import gzip
import os

import torch
from torch.profiler import ProfilerActivity, profile


def step(model, x, opt):
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    y = x * 2.0
    for _ in range(4):
        y = y * 1.5 + 1
    return loss.item()


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 32)
    step(model, x, opt)  # (warm-up, not recorded)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(2):
            step(model, x, opt)
    prof.export_chrome_trace("stacks_cpu.json")
    with open("stacks_cpu.json", "rb") as f, gzip.open("stacks_cpu.json.gz", "wb", compresslevel=9) as g:
        g.write(f.read())
    os.remove("stacks_cpu.json")


main()
