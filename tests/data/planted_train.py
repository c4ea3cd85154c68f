"""A GPU training loop with planted slow-downs on known lines (issue 37's "done when"), recorded on the GPU machine:

    python3 -m tracer record --stacks --out runs -- python3 planted_train.py

Run from tests/data, so the trace names this file as ``planted_train.py``. Each slow-down sits on its own line;
tests/test_lines.py checks that the PLANTED table below names the lines that hold them (keep it in step).
"""

import torch

STEPS = 12
# line → what is planted there (tests/test_lines.py checks each line holds its call)
PLANTED = {
    28: "unneeded torch.cuda.synchronize()",
    29: "copy from pageable memory",
    31: "Python loop of tiny ops",
    33: "large .cpu() on the compute stream",
    34: "per-step .item()",
}


def step(model, opt, x, host_batch):
    out = model(x)
    loss = out.float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    batch = host_batch.to("cuda")
    for _ in range(40):
        batch = batch * 1.0001
    big = torch.relu(out)
    host_copy = big.cpu()
    value = loss.item()
    return value, host_copy.shape, batch


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4096, 4096, device=dev)
    host_batch = torch.randn(4096, 2048)  # 32 MB, pageable: not pinned on purpose
    for _ in range(3):  # warm-up
        step(model, opt, x, host_batch)
    torch.cuda.synchronize()
    for _ in range(STEPS):
        step(model, opt, x, host_batch)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
