"""compute-copy: matrix products, then their results copied to the host — can the copies hide behind compute?

Variants (each timed as *run+copy*, next to *run* alone and *copy* alone, which are timed before the profiled
window so that the trace holds only the variant itself):

* ``blocking``     — all products, then ``y.to("cpu")`` one by one (pageable memory): strictly serial;
* ``non-blocking`` — the same with ``non_blocking=True`` on the same stream: the host stops waiting, but the
  copies still queue behind the products on one stream, so the GPU never overlaps them;
* ``side-stream``  — each result is copied on a second stream into pinned memory as soon as it is ready (a CUDA
  event per product): copies run while the next products compute;
* ``peer``         — (two or more GPUs) each result copied GPU 0 → GPU 1 on a side stream as soon as it is
  ready: peer-to-peer (PtoP) copies overlapping compute.

On the CPU "the host" is another buffer and the side stream a second thread; ``non-blocking`` is the same as
``blocking`` there.
"""

from __future__ import annotations

from typing import Any

import torch

from scenarios.registry import Param, Scenario, register
from scenarios.runtime import Context, Lane, rand, seeded


def products(lane: Lane, x: torch.Tensor, n: int) -> list[torch.Tensor]:
    return [x.mm(x) for _ in range(n)]


def to_host(y: torch.Tensor, non_blocking: bool) -> torch.Tensor:
    if y.device.type == "cpu":  # .to("cpu") would return y itself: copy for real
        return torch.empty_like(y).copy_(y)
    return y.to("cpu", non_blocking=non_blocking)


def copy_all(lane: Lane, ys: list[torch.Tensor], non_blocking: bool) -> list[torch.Tensor]:
    return [to_host(y, non_blocking) for y in ys]


def run_then_copy(lane: Lane, x: torch.Tensor, n: int, non_blocking: bool) -> list[torch.Tensor]:
    return copy_all(lane, products(lane, x, n), non_blocking)


def one_product(lane: Lane, x: torch.Tensor) -> torch.Tensor:
    return x.mm(x)


def copy_into(y: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    # On a GPU lane this is launched on the side stream, which has waited for the product's event.
    return dst.copy_(y, non_blocking=True)


def fingerprints(ts: list[torch.Tensor]) -> torch.Tensor:
    """One float64 sum per tensor: compares 50 × 64 MB of results without holding them twice."""
    return torch.stack([t.detach().sum(dtype=torch.float64).cpu() for t in ts])


def run(ctx: Context, p: dict[str, Any]) -> None:
    n, size = p["n"], p["size"]
    lane = ctx.lanes[0]
    variants = ctx.variants
    on_gpu = lane.is_cuda
    gen = seeded(p["seed"])
    with ctx.phase("setup"):
        x = rand(gen, size, size, device=lane.device)
        side = ctx.side_lane(lane, "copy") if {"side-stream", "peer"} & set(variants) else None
        hosts: list[torch.Tensor] = []
        if "side-stream" in variants:
            # Pinned (page-locked) host memory: only such copies can run asynchronously to the host and
            # overlap kernels. Allocated here, not timed: cudaHostAlloc of gigabytes takes a while.
            hosts = [torch.empty(size, size, pin_memory=on_gpu) for _ in range(n)]
        peers: list[torch.Tensor] = []
        peer_lane = ctx.lanes[1] if len(ctx.lanes) > 1 else None
        if "peer" in variants and peer_lane is not None:
            peers = [torch.empty(size, size, device=peer_lane.device) for _ in range(n)]

    with ctx.phase("warmup"):
        # all n products, so that the allocators hold n results' worth of memory before anything is timed
        ys = ctx.submit(lane, products, lane, x, n).value()
        ctx.submit(lane, copy_all, lane, ys, False)
        ctx.submit(lane, copy_all, lane, ys, True)
        ctx.sync()
        del ys

    # Reference timings, outside the profiled window: run alone, and each variant's copy alone.
    with ctx.timed("run"):
        ys = ctx.submit(lane, products, lane, x, n).value()
    ref = fingerprints(ys)
    if on_gpu and "non-blocking" in variants:
        # .to("cpu", non_blocking=True) copies into pinned memory from PyTorch's caching host allocator; the
        # first time, cudaHostAlloc of n results dominates. Fill that cache once so that the timings compare
        # copies, not allocations (blocking copies go to fresh pageable memory every time, as in the book).
        with ctx.phase("warmup-pinned-cache"):
            ctx.submit(lane, copy_all, lane, ys, True).value()
            ctx.sync()
    copies_of = {
        "blocking": "copy-blocking",
        "non-blocking": "copy-non-blocking",
        "side-stream": "copy-pinned-side-stream",
        "peer": "copy-peer",
    }
    for v in variants:
        with ctx.timed(copies_of[v]):
            if v in ("blocking", "non-blocking"):
                out = ctx.submit(lane, copy_all, lane, ys, v == "non-blocking").value()
            else:
                assert side is not None
                dsts = hosts if v == "side-stream" else peers
                for y, dst in zip(ys, dsts):
                    ctx.submit(side, copy_into, y, dst)
        if v in ("blocking", "non-blocking"):
            del out
    del ys
    ctx.sync()
    for t in hosts + peers:  # a copy that raced ahead of its product would leave zeros: the checks see it
        t.zero_()
    ctx.sync()

    results: dict[str, list[torch.Tensor]] = {}
    with ctx.profiled():
        for v in variants:
            with ctx.timed(f"run+copy-{v}"):
                if v in ("blocking", "non-blocking"):
                    h = ctx.submit(lane, run_then_copy, lane, x, n, v == "non-blocking")
                else:
                    assert side is not None
                    dsts = hosts if v == "side-stream" else peers
                    for dst in dsts:
                        hy = ctx.submit(lane, one_product, lane, x)
                        ctx.submit(side, copy_into, hy, dst)
            results[v] = h.value() if v in ("blocking", "non-blocking") else dsts

    with ctx.phase("check"):
        for v, outs in results.items():
            ctx.check_close(f"{v}: copies == products", fingerprints(outs), ref, rtol=1e-9, atol=0.0)

    run_s = ctx.times_s["run"]
    for v in variants:
        copy_s = ctx.times_s[copies_of[v]]
        both = ctx.times_s[f"run+copy-{v}"]
        ctx.derived[f"{v}: ratio run+copy / (run + copy)"] = both / (run_s + copy_s)
        # an estimate from wall times, clamped: with millisecond timings noise can push it past 0 or 1
        hidden = (run_s + copy_s - both) / copy_s if copy_s else 0.0
        ctx.derived[f"{v}: copy time hidden"] = min(1.0, max(0.0, hidden))
    if not on_gpu and "non-blocking" in variants:
        ctx.note("on the CPU non_blocking changes nothing: host-to-host copies are always synchronous")
    if on_gpu and "side-stream" in variants:
        ctx.note("side-stream copies go to pinned memory; blocking and non-blocking ones to pageable memory")


SCENARIO = register(
    Scenario(
        name="compute-copy",
        description="matmuls then copies to the host: blocking, non_blocking, side stream + pinned (+ peer)",
        variants=("blocking", "non-blocking", "side-stream", "peer"),
        multi_gpu_variants=("peer",),
        run=run,
        params=(
            Param("n", 12, 50, "matrix products (each result is copied)", minimum=1),
            Param("size", 256, 4000, "matrix side (fp32); one result is size² × 4 bytes", minimum=1),
        ),
        lanes=(1, 1),
        details=__doc__ or "",
    )
)
