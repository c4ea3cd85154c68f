"""Record a real Nsight Systems report of two processes, the ranks of one job, for "an nsys report of several
processes is read as the ranks of one job" (tests/test_nsys_ranks.py).

    nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none -o OUT_DIR/nsys_two_ranks \
        python3 record_nsys_ranks.py                       # then nsys export --type sqlite, gzip -9

Workload: two processes (torch.multiprocessing.spawn, which nsys follows) join a gloo process group and each
runs, on its GPU (``cuda:rank % device_count``: both on one GPU where there is one), 6 steps of a matmul inside
the NVTX range "ranks/compute" — rank 1's matrix is 3× rank 0's rows, so rank 1 is the straggler — then an
all-reduce of a CUDA tensor (gloo copies it through the host) inside "ranks/allreduce", and a
synchronisation.
"""

from __future__ import annotations

import os

import nvtx
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS = 6


def rank_main(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    a = torch.randn(2048 * (1 + 2 * rank), 2048, device=device)
    b = torch.randn(2048, 2048, device=device)
    for _ in range(STEPS):
        with nvtx.annotate("ranks/compute"):
            c = a @ b
        with nvtx.annotate("ranks/allreduce"):
            x = c.sum(dim=0)
            dist.all_reduce(x)
        torch.cuda.synchronize(device)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(rank_main, args=(2,), nprocs=2)
