"""small-ops: many small kernels — one stream vs several streams of one device; where parallelism pays.

``chains`` independent chains of ``length`` small products each, for every matrix side in ``sizes``: all on one
stream (``one-stream``), or chain *i* on lane *i* mod lanes (``streams``). With tiny matrices the time goes to
launching kernels from one CPU thread, so more streams change nothing (the fixture measured 55.2 vs 53.7 ms on
an H200); with larger ones each kernel leaves part of the GPU free and streams let others fill it.
"""

from __future__ import annotations

from typing import Any

import torch

from tracer.scenarios.registry import Param, ParamError, Scenario, register
from tracer.scenarios.runtime import Context, Lane, rand, seeded, speedup_beyond


def chain(lane: Lane, a: torch.Tensor, w: torch.Tensor, length: int) -> torch.Tensor:
    for _ in range(length):
        a = a @ w
    return a


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in str(text).replace(";", ",").split(",") if s.strip()]
    except ValueError:
        raise ParamError(f"--param sizes={text}: expected matrix sides separated by commas, e.g. 64,1024") from None
    if not sizes or min(sizes) < 1:
        raise ParamError(f"--param sizes={text}: expected positive matrix sides, e.g. 64,1024")
    return sizes


def run(ctx: Context, p: dict[str, Any]) -> None:
    chains, length = p["chains"], p["length"]
    sizes = parse_sizes(p["sizes"])
    gen = seeded(p["seed"])
    data: dict[int, dict[int, list[tuple[torch.Tensor, torch.Tensor]]]] = {}
    with ctx.phase("setup"):
        for size in sizes:
            host = [(rand(gen, size, size), rand(gen, size, size, scale=2.0 / size)) for _ in range(chains)]
            data[size] = {lane.index: [(a.to(lane.device), w.to(lane.device)) for a, w in host] for lane in ctx.lanes}
    with ctx.phase("warmup"):
        for size in sizes:
            for lane in ctx.lanes:
                a, w = data[size][lane.index][0]
                ctx.submit(lane, chain, lane, a, w, 2)
        ctx.sync()

    out: dict[str, list[torch.Tensor]] = {}
    with ctx.profiled():
        for size in sizes:
            if "one-stream" in ctx.variants:
                lane = ctx.lanes[0]
                with ctx.timed(f"one-stream-{size}"):
                    hs = [ctx.submit(lane, chain, lane, a, w, length) for a, w in data[size][lane.index]]
                out[f"one-stream-{size}"] = [h.value() for h in hs]
            if "streams" in ctx.variants:
                with ctx.timed(f"streams-{size}"):
                    hs = []
                    for i in range(chains):
                        lane = ctx.lanes[i % len(ctx.lanes)]
                        a, w = data[size][lane.index][i]
                        hs.append(ctx.submit(lane, chain, lane, a, w, length))
                out[f"streams-{size}"] = [h.value() for h in hs]

    with ctx.phase("check"):
        for size in sizes:
            key = f"one-stream-{size}"
            if key not in out:
                lane = ctx.lanes[0]
                out[key] = [ctx.submit(lane, chain, lane, a, w, length).value() for a, w in data[size][lane.index]]
                ctx.sync()
            if f"streams-{size}" in out:
                ctx.check_close(f"streams == one stream (size {size})", out[f"streams-{size}"], out[key],
                                rtol=1e-5, atol=1e-6)
            else:
                ctx.check_close(f"one stream is finite (size {size})", [torch.isfinite(t).all() for t in out[key]],
                                [torch.tensor(True)] * chains)
    for size in sizes:
        one_s, many_s = ctx.times_s.get(f"one-stream-{size}"), ctx.times_s.get(f"streams-{size}")
        if one_s and many_s:
            ctx.derive({f"speedup size {size} (one stream / streams)": one_s / many_s},
                       unless=speedup_beyond(one_s / many_s, *ctx.max_speedup(chains)))
            ctx.derived[f"us per product size {size}, one stream"] = one_s / (chains * length) * 1e6


SCENARIO = register(
    Scenario(
        name="small-ops",
        description="many small kernels: one stream vs several streams of one device, for small and larger sizes",
        variants=("one-stream", "streams"),
        run=run,
        params=(
            Param("chains", 4, 8, "independent chains of products", minimum=1),
            Param("length", 40, 100, "products in each chain", minimum=1),
            Param("sizes", "16,96", "64,1024", "matrix sides to try, comma-separated"),
        ),
        lanes=(2, 8),
        details=__doc__ or "",
    )
)
