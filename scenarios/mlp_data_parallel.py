"""mlp-data-parallel: a two-layer MLP trained with each minibatch split over the CPU and every device.

Per step: the parameters are broadcast from device 0 to every other participant; each computes forward and
backward on its share of the minibatch (copied from pinned host memory); the gradients are gathered on device 0
and summed (each share's loss is divided by the *whole* batch size, so the sum is the full-batch mean); device 0
updates the parameters (plain SGD). The ``single`` variant trains the same model on device 0 alone with whole
minibatches; the losses and the final parameters must match.

With two or more GPUs the broadcast and gather are peer-to-peer copies. With one GPU, streams stand in for
devices and share the parameters' memory (nothing to copy). The CPU takes ``cpu_share`` of each minibatch on
the main thread while the GPUs run — and, being far slower, usually sets the pace: ``--param cpu_share=0``
leaves it out.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from tracer.scenarios.registry import Param, Scenario, register
from tracer.scenarios.runtime import Check, Context, Handle, Lane, ParamError, seeded, speedup_beyond


def init_params(gen: torch.Generator, inputs: int, hidden: int, classes: int) -> list[torch.Tensor]:
    return [
        torch.randn(inputs, hidden, generator=gen) / math.sqrt(inputs),
        torch.zeros(hidden),
        torch.randn(hidden, classes, generator=gen) / math.sqrt(hidden),
        torch.zeros(classes),
    ]


def forward_backward(
    lane: Lane, params: list[torch.Tensor], X: torch.Tensor, y: torch.Tensor, total: int
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Loss (summed over the share, divided by the whole batch) and its gradients, on ``lane``'s device."""
    X = X.to(lane.device, non_blocking=True)
    y = y.to(lane.device, non_blocking=True)
    ps = [p.detach().requires_grad_(True) for p in params]
    hidden = torch.relu(X @ ps[0] + ps[1])
    loss = F.cross_entropy(hidden @ ps[2] + ps[3], y, reduction="sum") / total
    grads = torch.autograd.grad(loss, ps)
    return loss.detach(), [g.detach() for g in grads]


def gather(*parts: tuple[torch.Tensor, list[torch.Tensor]]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Sum the participants' losses and gradients (already moved to this lane's device)."""
    loss = torch.stack([p[0] for p in parts]).sum()
    grads = [torch.stack(gs).sum(0) for gs in zip(*(p[1] for p in parts))]
    return loss, grads


def update(
    params: list[torch.Tensor], gathered: tuple[torch.Tensor, list[torch.Tensor]], lr: float
) -> list[torch.Tensor]:
    with torch.no_grad():
        for p, g in zip(params, gathered[1]):
            p.sub_(g, alpha=lr)
    return params


def identity(value: Any) -> Any:
    return value


def run(ctx: Context, p: dict[str, Any]) -> None:
    steps, batch = p["steps"], p["batch"]
    lr = p["lr"]
    lane0 = ctx.lanes[0]
    gen = seeded(p["seed"])
    with ctx.phase("setup"):
        init = init_params(gen, p["inputs"], p["hidden"], p["classes"])
        X = torch.randn(steps, batch, p["inputs"], generator=gen)
        # labels from a fixed linear teacher: a task the MLP can learn, so the loss falls instead of wandering
        teacher = torch.randn(p["inputs"], p["classes"], generator=gen)
        Y = (X @ teacher).argmax(-1)
        if ctx.on_gpu:  # pinned, so that the per-step scatter can copy asynchronously
            X, Y = X.pin_memory(), Y.pin_memory()
        cpu_rows = int(round(batch * p["cpu_share"])) if ctx.on_gpu else 0
        if p["cpu_share"] and not ctx.on_gpu:
            ctx.note("cpu_share is ignored on the CPU: the threads are the CPU already")
        cpu_rows = min(cpu_rows, batch - len(ctx.lanes))
        participants: list[Lane] = list(ctx.lanes) + ([ctx.host] if cpu_rows > 0 else [])
        bounds = torch.tensor_split(torch.arange(batch - cpu_rows), len(ctx.lanes))
        shards = [(int(b[0]), int(b[-1]) + 1) if len(b) else (0, 0) for b in bounds]
        if cpu_rows:
            shards.append((batch - cpu_rows, batch))
        rows = [hi - lo for lo, hi in shards]
        if min(rows) < 1:
            raise ParamError(
                f"--param batch={batch} is too small to give each of {len(participants)} participants a row"
            )

    def train_parallel() -> list[torch.Tensor]:
        master = [t.to(lane0.device, copy=True) for t in init]  # a copy even on the CPU: trained in place
        master_h = ctx.submit(lane0, identity, master)
        losses = []
        for s in range(steps):
            # Broadcast to everyone first, then forward/backward everywhere: the CPU's copy of the parameters
            # must not queue behind device 0's forward/backward, or the CPU would start only when it ends.
            params = [
                master_h if lane is lane0 else ctx.submit(lane, identity, master_h, phase="broadcast")
                for lane in participants
            ]
            parts: list[Handle] = [
                ctx.submit(lane, forward_backward, lane, params_h, X[s, lo:hi], Y[s, lo:hi], batch,
                           phase="forward-backward")
                for lane, params_h, (lo, hi) in zip(participants, params, shards)
            ]
            gathered = ctx.submit(lane0, gather, *parts, phase="gather")
            master_h = ctx.submit(lane0, update, master, gathered, lr, phase="update")
            losses.append(gathered)
        ctx.sync()
        return [torch.stack([g.value()[0].cpu() for g in losses]), *[t.cpu() for t in master]]

    def train_single() -> list[torch.Tensor]:
        master = [t.to(lane0.device, copy=True) for t in init]  # a copy even on the CPU: trained in place
        master_h = ctx.submit(lane0, identity, master)
        losses = []
        for s in range(steps):
            part = ctx.submit(lane0, forward_backward, lane0, master_h, X[s], Y[s], batch, phase="forward-backward")
            master_h = ctx.submit(lane0, update, master, part, lr, phase="update")
            losses.append(part)
        ctx.sync()
        return [torch.stack([h.value()[0].cpu() for h in losses]), *[t.cpu() for t in master]]

    with ctx.phase("warmup"):
        for lane, (lo, hi) in zip(participants, shards):
            ctx.submit(lane, forward_backward, lane, [t.to(lane.device) for t in init], X[0, lo:hi], Y[0, lo:hi], batch)
        ctx.sync()

    results: dict[str, list[torch.Tensor]] = {}
    with ctx.profiled():
        if "single" in ctx.variants:
            with ctx.timed("single"):
                results["single"] = train_single()
        if "parallel" in ctx.variants:
            with ctx.timed("parallel"):
                results["parallel"] = train_parallel()

    with ctx.phase("check"):
        if "single" not in results:
            results["single"] = train_single()
        if "parallel" in results:
            got, want = results["parallel"], results["single"]
            ctx.check_close("parallel loss == single-device loss", got[0], want[0], rtol=1e-4, atol=1e-6)
            ctx.check_close("parallel parameters == single-device parameters", got[1:], want[1:], rtol=1e-3, atol=1e-5)
        # Diverging training amplifies every rounding difference, and then no two runs agree: catch it by name.
        loss = results["single"][0]
        ok = bool(torch.isfinite(loss).all()) and float(loss.max()) <= 1.1 * float(loss[0])
        ctx.checks["single-device loss finite, not diverging"] = Check(
            ok, f"loss {float(loss[0]):.4f} -> {float(loss[-1]):.4f} (max {float(loss.max()):.4f}); "
            + ("" if ok else "lower --param lr")
        )

    ctx.derived["batch rows per participant"] = float(rows[0])
    if cpu_rows:
        ctx.derived["cpu rows per batch"] = float(cpu_rows)
    if "single" in ctx.times_s and "parallel" in ctx.times_s:
        # each step's batch is split over the participants: at most that many work at once
        speedup = ctx.times_s["single"] / ctx.times_s["parallel"]
        ctx.derive({"speedup (single / parallel)": speedup},
                   unless=speedup_beyond(speedup, *ctx.max_speedup(len(participants))))


SCENARIO = register(
    Scenario(
        name="mlp-data-parallel",
        description="a 2-layer MLP trained data-parallel over the CPU and every device; loss must match one device",
        variants=("single", "parallel"),
        run=run,
        params=(
            Param("steps", 8, 20, "SGD steps (one minibatch each)", minimum=1),
            Param("batch", 256, 4096, "minibatch rows, split over the participants"),
            Param("inputs", 64, 1024, "input features", minimum=1),
            Param("hidden", 128, 4096, "hidden units", minimum=1),
            Param("classes", 10, 10, "output classes", minimum=1),
            Param("lr", 0.1, 0.01, "learning rate (0.1 diverges at the GPU sizes)"),
            Param("cpu_share", 0.0, 0.01, "share of each minibatch computed on the CPU (GPU modes only)"),
        ),
        lanes=(2, 2),
        details=__doc__ or "",
    )
)
