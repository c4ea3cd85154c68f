"""ddp: the two-layer MLP of mlp-data-parallel trained data-parallel by DistributedDataParallel, one process per rank.

Every rank holds the whole model and takes ``batch / ranks`` rows of each minibatch; DistributedDataParallel
averages the gradients over the ranks with all-reduce collectives during the backward pass (in buckets, overlapped
with the rest of the backward), and every rank then takes the same SGD step. With equal shards the average of the
ranks' mean losses is the full batch's mean loss, so the trained parameters must match one process trained on
whole minibatches (checked on every rank, outside the profiled window).

``skew`` makes the shards uneven, to record a job with a straggler: rank 0 takes ``(1 + skew) × batch / ranks``
rows of each minibatch (rounded) and the other ranks share the rest evenly. DDP still averages the gradients over
the ranks, so each rank's mean loss is weighted by ``ranks × its rows / batch`` before the backward: the average of
the weighted gradients is the full batch's mean gradient again, and the trained parameters must still match one
process on whole minibatches (the same check). ``skew=0`` (the default) is the equal split, the weight exactly 1
and not applied.

Backends: NCCL when each rank has a GPU of its own (``cuda:<LOCAL_RANK>``), else gloo on the CPU. This module is
one rank's work; ``tracer record ddp -p ranks=N`` starts the N rank processes with torchrun's environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: tracer/record/ranks.py) and each profiles itself. ``fail``
makes one rank fail on purpose, to see how a job with a dead rank is recorded: ``-p fail=1`` raises on rank 1 in
the middle of training, ``-p fail=1:hang`` stops it there until the job's ``timeout``.
"""

from __future__ import annotations

import copy
import datetime
import os
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tracer.scenarios.registry import Param, Scenario, register
from tracer.scenarios.runtime import Context, ParamError, ScenarioError, seeded

#: torchrun's environment, which a rank needs to join its job.
RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def parse_fail(text: str) -> tuple[int, str] | None:
    """``"none"`` -> None; ``"1"`` / ``"1:raise"`` -> (1, "raise"); ``"1:hang"`` -> (1, "hang")."""
    text = text.strip().lower()
    if text in ("", "none"):
        return None
    rank, _, how = text.partition(":")
    how = how or "raise"
    if not rank.isdigit() or how not in ("raise", "hang"):
        raise ParamError(f"--param fail={text}: write RANK or RANK:raise or RANK:hang (or none)")
    return int(rank), how


def check_params(p: dict[str, Any]) -> None:
    """What the parameters must satisfy together: checked by the recorder before any rank starts."""
    if p["batch"] % p["ranks"]:
        raise ParamError(f"--param batch={p['batch']}: must divide evenly over the {p['ranks']} ranks (equal shards)")
    fail = parse_fail(p["fail"])
    if p["skew"] < 0:
        raise ParamError(f"--param skew={p['skew']}: must be 0 (equal shards) or more")
    rows = shard_rows(p["batch"], p["ranks"], p["skew"])
    if min(rows) < 1:
        raise ParamError(f"--param skew={p['skew']}: rank 0 would take {rows[0]} of each minibatch's {p['batch']} "
                         f"rows, leaving {p['batch'] - rows[0]} for the other {p['ranks'] - 1} rank(s): every rank "
                         "needs at least one (lower skew, or raise batch)")
    if fail is not None and fail[0] >= p["ranks"]:
        raise ParamError(f"--param fail={p['fail']}: there is no rank {fail[0]} among {p['ranks']} ranks")


def shard_rows(batch: int, ranks: int, skew: float) -> list[int]:
    """Each rank's rows of a minibatch: rank 0 ``round((1 + skew) × batch / ranks)`` (at most ``batch``), the other
    ranks the rest, as evenly as it divides (the first ones one more)."""
    if ranks == 1:
        return [batch]
    first = min(batch, round((1 + skew) * batch / ranks))
    q, r = divmod(batch - first, ranks - 1)
    return [first, *(q + (1 if k < r else 0) for k in range(ranks - 1))]


def make_model(gen: torch.Generator, inputs: int, hidden: int, classes: int) -> torch.nn.Module:
    """The MLP, its weights drawn from ``gen`` (every rank draws the same ones)."""
    model = torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, classes))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) / p.shape[-1] ** 0.5)
    return model


def rank_environment() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; ScenarioError when it is not there."""
    missing = [k for k in RANK_ENV if not os.environ.get(k)]
    if missing:
        raise ScenarioError(
            f"ddp runs one process per rank and this one lacks {', '.join(missing)}: start it with "
            "`tracer record ddp -p ranks=N` (or torchrun)"
        )
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))


def run(ctx: Context, p: dict[str, Any]) -> None:
    rank, world, _local = rank_environment()
    if world != p["ranks"]:
        raise ParamError(f"--param ranks={p['ranks']} but the job has WORLD_SIZE={world}")
    steps, batch = p["steps"], p["batch"]
    fail = parse_fail(p["fail"])
    device = torch.device(ctx.plan.devices[0])
    backend = "nccl" if device.type == "cuda" else "gloo"
    shards = shard_rows(batch, world, p["skew"])
    rows = shards[rank]
    offset = sum(shards[:rank])
    # the weight that makes DDP's average of the ranks' gradients the full batch's mean gradient (1 for equal shards)
    weight = world * rows / batch
    gen = seeded(p["seed"])
    with ctx.phase("init"):
        if device.type == "cuda":
            torch.cuda.set_device(device)
        # a collective that waits longer than the job may run is a hang: it fails instead, and the rank saves
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=p["timeout"]))
    try:
        with ctx.phase("setup"):
            init = make_model(gen, p["inputs"], p["hidden"], p["classes"])
            X = torch.randn(steps, batch, p["inputs"], generator=gen)
            teacher = torch.randn(p["inputs"], p["classes"], generator=gen)  # a task the MLP can learn
            Y = (X @ teacher).argmax(-1)
            model = copy.deepcopy(init).to(device)
            ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda"
                                                            else None)
            opt = torch.optim.SGD(ddp.parameters(), lr=p["lr"])
            mine = slice(offset, offset + rows)
            Xs, Ys = X[:, mine].to(device), Y[:, mine].to(device)

        with ctx.phase("warmup"):  # the first backward builds DDP's buckets; no step, so nothing changes
            F.cross_entropy(ddp(Xs[0]), Ys[0]).backward()
            opt.zero_grad(set_to_none=True)
            ctx.sync()

        losses = []
        with ctx.profiled(), ctx.timed("train"):
            for s in range(steps):
                if fail is not None and fail[0] == rank and s == steps // 2:
                    if fail[1] == "hang":
                        ctx.note(f"rank {rank} hangs on purpose (--param fail={p['fail']})")
                        time.sleep(10 * p["timeout"])
                    raise RuntimeError(f"rank {rank} fails on purpose at step {s} (--param fail={p['fail']})")
                with ctx.phase("forward"):
                    loss = F.cross_entropy(ddp(Xs[s]), Ys[s])
                with ctx.phase("backward"):  # DDP's all-reduce of each gradient bucket runs in here
                    (loss * weight if p["skew"] else loss).backward()
                with ctx.phase("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                losses.append(loss.detach())
            ctx.sync()

        with ctx.phase("check"):
            check(ctx, p, init, X, Y, model, torch.stack(losses), world)
        # every rank done with its collectives before any tears its connections down: gloo may abort a rank
        # whose peer closed a pair it still used ("terminate called without an active exception", exit 134:
        # seen once in CI-like runs of the test suite)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    ctx.note(f"{backend}: {world} ranks, one process each; rank {rank} on {device}")
    ctx.derived["ranks"] = float(world)
    ctx.derived["batch rows per rank"] = float(rows)
    if p["skew"]:
        ctx.note(f"uneven shards (skew={p['skew']:g}): rows per rank {shards}; each rank's loss weighted by "
                 "ranks × rows / batch")


def check(ctx: Context, p: dict[str, Any], init: torch.nn.Module, X: torch.Tensor, Y: torch.Tensor,
          trained: torch.nn.Module, losses: torch.Tensor, world: int) -> None:
    """The DDP model against one process trained on whole minibatches; the ranks' parameters against rank 0's."""
    device = next(trained.parameters()).device  # on the rank's GPU: at the GPU sizes the CPU would take minutes
    single = init.to(device)  # trained in place: it is not used again
    opt = torch.optim.SGD(single.parameters(), lr=p["lr"])
    for s in range(p["steps"]):
        F.cross_entropy(single(X[s].to(device)), Y[s].to(device)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    got = [t.detach().cpu() for t in trained.parameters()]
    ctx.check_close("ddp parameters == one process on whole minibatches", got,
                    [t.detach().cpu() for t in single.parameters()], rtol=1e-4, atol=1e-5)
    flat = torch.cat([t.flatten() for t in trained.parameters()]).detach()
    first = flat.clone()
    dist.broadcast(first, src=0)
    ctx.check_close(f"parameters equal on all {world} ranks", flat.cpu(), first.cpu(), rtol=0, atol=0)
    ctx.derived["final loss (this rank's shard)"] = float(losses[-1])


SCENARIO = register(
    Scenario(
        name="ddp",
        description="the 2-layer MLP trained by DistributedDataParallel, one process per rank (NCCL or gloo)",
        variants=("ddp",),
        run=run,
        params=(
            Param("ranks", 2, 2, "rank processes (NCCL when each has a GPU of its own, else gloo on the CPU)",
                  minimum=1),
            Param("steps", 8, 20, "SGD steps (one minibatch each)", minimum=1),
            Param("batch", 256, 4096, "minibatch rows, split evenly over the ranks (unless skew)", minimum=1),
            Param("inputs", 64, 1024, "input features", minimum=1),
            Param("hidden", 128, 4096, "hidden units", minimum=1),
            Param("classes", 10, 10, "output classes", minimum=1),
            Param("lr", 0.1, 0.01, "learning rate"),
            Param("timeout", 120.0, 300.0, "seconds the job may run; a rank still running then is a hang",
                  minimum=1),
            Param("skew", 0.0, 0.0, "uneven shards: rank 0 takes (1 + skew) × its equal share of each minibatch, "
                  "the others the rest (0: equal shards)"),
            Param("fail", "none", "none", "make a rank fail on purpose: RANK (raises mid-training) or RANK:hang"),
        ),
        lanes=(1, 1),
        details=__doc__ or "",
        multi_process=True,
        check=check_params,
    )
)
