"""compute-copy: matrix products, then their results copied to the host — can the copies hide behind compute?

Variants (each timed as *run+copy*, next to *run* alone and *copy* alone, which are timed before the profiled
window so that the trace holds only the variant itself; so is a *run+copy-…-unprofiled* of each variant, which
the derived figures use: all their timings then run the same way, with no profiler):

* ``blocking``     — all products, then ``y.to("cpu")`` one by one (pageable memory): strictly serial;
* ``non-blocking`` — the same with ``non_blocking=True`` on the same stream: the host stops waiting, but the
  copies still queue behind the products on one stream, so the GPU never overlaps them;
* ``side-stream``  — each result is copied on a second stream into pinned memory as soon as it is ready (a CUDA
  event per product): copies run while the next products compute;
* ``peer``         — (two or more GPUs) each result copied GPU 0 → GPU 1 on a side stream as soon as it is
  ready: peer-to-peer (PtoP) copies overlapping compute.

On the CPU "the host" is another buffer and the side stream a second thread; ``non-blocking`` is the same as
``blocking`` there. A "copy" on the CPU is a memcpy done by a CPU thread on the same cores, with no copy engine to
hide it behind, so no "copy time hidden" is derived there; the ratio run+copy / (run + copy) remains, and says
only whether the two threads of ``side-stream`` ran at once.

The timings outside the profiled window are taken ``repeats`` times each and their median kept.
"""

from __future__ import annotations

from typing import Any

import torch

from tracer.scenarios.registry import Param, Scenario, register
from tracer.scenarios.runtime import Context, Lane, part_longer_than_whole, rand, seeded


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


#: the reference timing of each variant's copies alone
COPIES_OF = {
    "blocking": "copy-blocking",
    "non-blocking": "copy-non-blocking",
    "side-stream": "copy-pinned-side-stream",
    "peer": "copy-peer",
}


def derive_figures(ctx: Context, variants: list[str], on_gpu: bool) -> None:
    """Ratio run+copy / (run + copy) and, on a GPU, the share of copy time hidden, for each variant, from the
    unprofiled medians in ``ctx.times_s``; figures whose timings cannot be right are left out with a note."""
    run_s = ctx.times_s["run"]
    for v in variants:
        copy_name = COPIES_OF[v]
        copy_s = ctx.times_s[copy_name]
        both_name = f"run+copy-{v}-unprofiled"
        both = ctx.times_s[both_name]
        # run+copy does all the work of run and of copy: shorter than either (beyond noise) is no measurement
        impossible = part_longer_than_whole((both_name, both), {"run": run_s, copy_name: copy_s})
        figures = {f"{v}: ratio run+copy / (run + copy)": both / (run_s + copy_s)}
        if on_gpu and copy_s > 0:
            # An estimate from wall times; within the noise allowed above it may stray a little past 0 or 1.
            hidden = (run_s + copy_s - both) / copy_s
            figures[f"{v}: copy time hidden"] = min(1.0, max(0.0, hidden))
        ctx.derive(figures, unless=impossible)
    if not on_gpu:
        ctx.caveat("the CPU cannot show copies hiding behind compute: a copy here is a memcpy by a CPU thread on "
                   "the same cores as the products, with no copy engine to hide it behind; the ratio run+copy / "
                   "(run + copy) says only whether the copy thread ran beside the product thread (side-stream) or "
                   "after it")


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
        if side is not None:  # the copy lane's first copy (a new thread on the CPU) is not a timing either
            ctx.submit(side, copy_all, side, ys[:1], False)
            ctx.sync()
    if on_gpu and "non-blocking" in variants:
        # .to("cpu", non_blocking=True) copies into pinned memory from PyTorch's caching host allocator; the
        # first time, cudaHostAlloc of n results dominates. Fill that cache once so that the timings compare
        # copies, not allocations (blocking copies go to fresh pageable memory every time, as in d2l §13.3).
        with ctx.phase("warmup-pinned-cache"):
            ctx.submit(lane, copy_all, lane, ys, True).value()
            ctx.sync()
    del ys

    def copy_alone(v: str, ys: list[torch.Tensor]) -> None:
        """Time the copies of variant ``v`` alone, of products computed before."""
        with ctx.timed(COPIES_OF[v]):
            if v in ("blocking", "non-blocking"):
                ctx.submit(lane, copy_all, lane, ys, v == "non-blocking").value()
            else:
                assert side is not None
                dsts = hosts if v == "side-stream" else peers
                for y, dst in zip(ys, dsts):
                    ctx.submit(side, copy_into, y, dst)

    def run_and_copy(v: str, name: str) -> list[torch.Tensor]:
        """Time variant ``v`` (products and their copies) as ``name``; return where the copies went."""
        with ctx.timed(name):
            if v in ("blocking", "non-blocking"):
                h = ctx.submit(lane, run_then_copy, lane, x, n, v == "non-blocking")
            else:
                assert side is not None
                dsts = hosts if v == "side-stream" else peers
                for dst in dsts:
                    hy = ctx.submit(lane, one_product, lane, x)
                    ctx.submit(side, copy_into, hy, dst)
        return h.value() if v in ("blocking", "non-blocking") else dsts

    # Timings outside the profiled window, for the derived figures: run alone, each variant's copy alone, and
    # each variant's run+copy timed the same way (no profiler: the profiled pass below carries the profiler's
    # cost per operation, the references do not). Each is taken `repeats` times, interleaved, and the median
    # kept: one sample of a few milliseconds on a shared machine can be far off, and interleaving exposes all of
    # them alike to whatever else the machine is doing.
    for _ in range(p["repeats"]):
        ys = None  # free the last repeat's products first: n results' worth of memory at a time, not two
        with ctx.timed("run"):
            ys = ctx.submit(lane, products, lane, x, n).value()
        for v in variants:
            copy_alone(v, ys)
            run_and_copy(v, f"run+copy-{v}-unprofiled")
    assert ys is not None
    ref = fingerprints(ys)
    del ys
    ctx.sync()
    for t in hosts + peers:  # a copy that raced ahead of its product would leave zeros: the checks see it
        t.zero_()
    ctx.sync()

    results: dict[str, list[torch.Tensor]] = {}
    with ctx.profiled():
        for v in variants:
            results[v] = run_and_copy(v, f"run+copy-{v}")

    with ctx.phase("check"):
        for v, outs in results.items():
            ctx.check_close(f"{v}: copies == products", fingerprints(outs), ref, rtol=1e-9, atol=0.0)

    derive_figures(ctx, variants, on_gpu)
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
            Param("repeats", 5, 3, "times each timing outside the profiled window is taken; the median is kept",
                  minimum=1),
        ),
        lanes=(1, 1),
        details=__doc__ or "",
    )
)
