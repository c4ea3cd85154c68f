"""multi-device: the same matrix products on every device, first each device alone, then all at once.

The first experiment of Dive into Deep Learning §13.3 "Automatic Parallelism": 50 products of a 4000×4000 matrix
with itself on GPU 1, then on GPU 2, then on both without synchronising in between. With two real GPUs the
together time is close to one alone time (speedup ≈ 2); with one GPU and streams standing in, big products fill
the GPU and run one after another (together ≈ sum); on CPU threads they share the same cores.
"""

from __future__ import annotations

from typing import Any

import torch

from tracer.scenarios.registry import Param, Scenario, register
from tracer.scenarios.runtime import Context, Lane, part_longer_than_whole, rand, seeded, speedup_beyond


def products(lane: Lane, x: torch.Tensor, n: int) -> torch.Tensor:
    """``n`` independent products ``x @ x`` (d2l's ``run``); the last one is returned."""
    y = x
    for _ in range(n):
        y = x.mm(x)
    return y


def run(ctx: Context, p: dict[str, Any]) -> None:
    gen = seeded(p["seed"])
    n, size = p["n"], p["size"]
    with ctx.phase("setup"):
        xs = [rand(gen, size, size, device=lane.device) for lane in ctx.lanes]
    with ctx.phase("warmup"):
        for lane, x in zip(ctx.lanes, xs):
            ctx.submit(lane, products, lane, x, min(n, 2))
        ctx.sync()

    alone: dict[int, torch.Tensor] = {}
    together: list[torch.Tensor] = []
    with ctx.profiled():
        if "alone" in ctx.variants:
            for lane, x in zip(ctx.lanes, xs):
                with ctx.timed(f"alone-{lane.index}"):
                    h = ctx.submit(lane, products, lane, x, n)
                alone[lane.index] = h.value()
        if "together" in ctx.variants:
            with ctx.timed("together"):
                hs = [ctx.submit(lane, products, lane, x, n) for lane, x in zip(ctx.lanes, xs)]
            together = [h.value() for h in hs]

    with ctx.phase("check"):
        if not alone:  # a serial reference, outside the profiled window and untimed
            for lane, x in zip(ctx.lanes, xs):
                alone[lane.index] = ctx.submit(lane, products, lane, x, 1).value()
            ctx.sync()
        want = [alone[lane.index] for lane in ctx.lanes]
        if together:
            ctx.check_close("together == alone", together, want)
        else:
            ctx.check_close("alone == x @ x", want, [x.mm(x) for x in xs])

    names = [f"alone-{lane.index}" for lane in ctx.lanes]
    if all(k in ctx.times_s for k in names) and "together" in ctx.times_s:
        total = sum(ctx.times_s[k] for k in names)
        together_s = ctx.times_s["together"]
        ctx.derived["sum of alone times (s)"] = total
        # together does every lane's work, so it cannot be shorter than any lane alone (beyond noise); nor can it
        # gain more than the lanes (on the CPU: the cores) allow, which that alone does not rule out (3 lanes on 2
        # cores: up to 3.3)
        ctx.derive(
            {"speedup (sum alone / together)": total / together_s, "ratio together / sum": together_s / total},
            unless=part_longer_than_whole(("together", together_s), {k: ctx.times_s[k] for k in names})
            or speedup_beyond(total / together_s, *ctx.max_speedup(len(names))),
        )


SCENARIO = register(
    Scenario(
        name="multi-device",
        description="the same matmuls on each device alone, then on all at once; speedup = sum alone / together",
        variants=("alone", "together"),
        run=run,
        params=(
            Param("n", 12, 50, "matrix products per device", minimum=1),
            Param("size", 256, 4000, "matrix side (fp32)", minimum=1),
        ),
        lanes=(2, 2),
        details=__doc__ or "",
    )
)
