"""How gloo_rank0.json.gz / gloo_rank1.json.gz were recorded (torch 2.13.0+cpu, this project's own data): two
ranks of gloo on the CPU, three rounds of all_reduce, all_gather, broadcast and barrier under torch.profiler;
rank 1 sleeps 2 ms before each barrier, so it is the barrier's straggler. Run: python record_gloo.py OUTDIR."""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile


def main(rank: int, world: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x = torch.ones(1000)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        for _ in range(3):
            dist.all_reduce(x)
            dist.all_gather([torch.empty(1000) for _ in range(world)], x)
            dist.broadcast(x, 0)
            if rank == 1:
                time.sleep(0.002)
            dist.barrier()
    p.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    mp.spawn(main, args=(2, sys.argv[1]), nprocs=2)
