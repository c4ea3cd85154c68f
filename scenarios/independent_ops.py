"""independent-ops: eight independent chains of work — does PyTorch run them concurrently by itself?

No: eager PyTorch issues every operation to the current stream in program order, so eight operations that
share no data still run one after another (``serial``). Only when they are put on different streams or devices
(``spread``: operation *i* on lane *i* mod lanes) can the GPU run them at once — and then only as far as one of
them leaves part of the GPU free. The timeline is the evidence: one stream with eight blocks in a row, or
several streams whose kernels overlap.
"""

from __future__ import annotations

from typing import Any

import torch

from tracer.scenarios.registry import Param, Scenario, register
from tracer.scenarios.runtime import Context, Lane, rand, seeded, speedup_beyond


def chain(lane: Lane, a: torch.Tensor, w: torch.Tensor, depth: int) -> torch.Tensor:
    """``depth`` products ``a @ w``, each needing the last: one operation of this scenario."""
    a = a.to(lane.device, non_blocking=True)
    w = w.to(lane.device, non_blocking=True)
    for _ in range(depth):
        a = a @ w
    return a


def run(ctx: Context, p: dict[str, Any]) -> None:
    ops, size, depth = p["ops"], p["size"], p["depth"]
    gen = seeded(p["seed"])
    with ctx.phase("setup"):
        # w has entries around 1/size, so a stays near 0.5 however deep the chain
        inputs = [(rand(gen, size, size), rand(gen, size, size, scale=2.0 / size)) for _ in range(ops)]
        placed = {
            lane.index: [(a.to(lane.device), w.to(lane.device)) for a, w in inputs] for lane in ctx.lanes
        }
    with ctx.phase("warmup"):
        for lane in ctx.lanes:
            a, w = placed[lane.index][0]
            ctx.submit(lane, chain, lane, a, w, 1)
        ctx.sync()

    out: dict[str, list[torch.Tensor]] = {}
    with ctx.profiled():
        if "serial" in ctx.variants:
            lane = ctx.lanes[0]
            with ctx.timed("serial"):
                hs = [
                    ctx.submit(lane, chain, lane, a, w, depth, phase=f"op{i}")
                    for i, (a, w) in enumerate(placed[lane.index])
                ]
            out["serial"] = [h.value() for h in hs]
        if "spread" in ctx.variants:
            with ctx.timed("spread"):
                hs = []
                for i in range(ops):
                    lane = ctx.lanes[i % len(ctx.lanes)]
                    a, w = placed[lane.index][i]
                    hs.append(ctx.submit(lane, chain, lane, a, w, depth, phase=f"op{i}"))
            out["spread"] = [h.value() for h in hs]

    with ctx.phase("check"):
        if "serial" not in out:
            lane = ctx.lanes[0]
            out["serial"] = [ctx.submit(lane, chain, lane, a, w, depth).value() for a, w in placed[lane.index]]
            ctx.sync()
        if "spread" in out:
            ctx.check_close("spread == serial", out["spread"], out["serial"], rtol=1e-5, atol=1e-6)
        else:
            ctx.check_close("serial is finite", [torch.isfinite(t).all() for t in out["serial"]],
                            [torch.tensor(True)] * ops)
    if "serial" in ctx.times_s and "spread" in ctx.times_s:
        speedup = ctx.times_s["serial"] / ctx.times_s["spread"]
        ctx.derive({"speedup (serial / spread)": speedup}, unless=speedup_beyond(speedup, *ctx.max_speedup(ops)))
        ctx.derived["lanes used"] = float(min(ops, len(ctx.lanes)))


SCENARIO = register(
    Scenario(
        name="independent-ops",
        description="eight independent ops: serial on one stream vs spread over streams/devices",
        variants=("serial", "spread"),
        run=run,
        params=(
            Param("ops", 8, 8, "independent operations", minimum=1),
            Param("size", 128, 1024, "matrix side: small enough that one op leaves part of a GPU free", minimum=1),
            Param("depth", 10, 20, "dependent products in each operation"),
        ),
        lanes=(2, 8),
        details=__doc__ or "",
    )
)
