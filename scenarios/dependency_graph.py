"""dependency-graph: a DAG of tasks with real data dependencies across devices, run in parallel and serially.

For L lanes the graph is::

    load_i  (lane i)  : a_i = chain(x_i)                      x_i comes from pinned host memory
    mix_i   (lane i)  : m_i = chain(a_i + a_{(i+1) mod L})    needs load_i and its neighbour's load
    reduce  (lane 0)  : r   = sum_i m_i                       needs every mix

where chain is ``depth`` products with a fixed matrix. ``parallel`` puts each task on its lane and lets CUDA
events (threads: futures) enforce the edges, so independent tasks run at once and a task starts as soon as its
inputs are ready; a neighbour's result crosses devices as a peer-to-peer copy when there are several GPUs.
``serial`` runs the same tasks in topological order on lane 0 alone. The results must agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tracer.scenarios.registry import Param, Scenario, register
from tracer.scenarios.runtime import Context, Handle, Lane, rand, seeded, speedup_beyond


@dataclass(frozen=True)
class Task:
    name: str
    lane: int  # where it runs in the parallel variant
    fn: Callable[..., torch.Tensor]  # fn(lane, *values of deps)
    deps: tuple[str, ...]


def chain(a: torch.Tensor, w: torch.Tensor, depth: int) -> torch.Tensor:
    for _ in range(depth):
        a = torch.tanh(a @ w)
    return a


def build_graph(
    lanes: int, xs: list[torch.Tensor], w_on: Callable[[Lane, int], torch.Tensor], depth: int
) -> list[Task]:
    """Tasks in a topological order. ``w_on(lane, i)`` is lane i's matrix, held on ``lane``'s device."""

    def load(i: int) -> Callable[..., torch.Tensor]:
        return lambda lane: chain(xs[i].to(lane.device, non_blocking=True), w_on(lane, i), depth)

    def mix(i: int) -> Callable[..., torch.Tensor]:
        return lambda lane, a, b: chain(a + b, w_on(lane, i), depth)

    tasks = [Task(f"load{i}", i, load(i), ()) for i in range(lanes)]
    tasks += [Task(f"mix{i}", i, mix(i), (f"load{i}", f"load{(i + 1) % lanes}")) for i in range(lanes)]
    tasks.append(Task("reduce", 0, lambda lane, *ms: torch.stack(ms).sum(0), tuple(f"mix{i}" for i in range(lanes))))
    return tasks


def execute(ctx: Context, tasks: list[Task], lane_of: Callable[[Task], Lane]) -> Handle:
    """Submit every task to its lane; its dependencies are handles (events / futures). Returns the last one."""
    done: dict[str, Handle] = {}
    for t in tasks:
        lane = lane_of(t)
        done[t.name] = ctx.submit(lane, t.fn, lane, *(done[d] for d in t.deps), phase=t.name)
    return done[tasks[-1].name]


def run(ctx: Context, p: dict[str, Any]) -> None:
    size, depth = p["size"], p["depth"]
    L = len(ctx.lanes)
    gen = seeded(p["seed"])
    with ctx.phase("setup"):
        xs = [rand(gen, size, size, pin=ctx.on_gpu) for _ in range(L)]
        # entries around ±1/size keep tanh(a @ w) away from saturation
        ws_host = [rand(gen, size, size, scale=2.0 / size) - 1.0 / size for _ in range(L)]
        ws = {(lane.index, i): w.to(lane.device) for lane in ctx.lanes for i, w in enumerate(ws_host)}

    def ws_on(lane: Lane, i: int) -> torch.Tensor:
        return ws[(lane.index, i)]

    tasks = build_graph(L, xs, ws_on, depth)

    def lane_parallel(t: Task) -> Lane:
        return ctx.lanes[t.lane]

    def lane_serial(t: Task) -> Lane:
        return ctx.lanes[0]

    with ctx.phase("warmup"):
        for lane in ctx.lanes:
            ctx.submit(lane, chain, ws_on(lane, 0), ws_on(lane, 0), 1)
        ctx.sync()

    out: dict[str, torch.Tensor] = {}
    with ctx.profiled():
        if "serial" in ctx.variants:
            with ctx.timed("serial"):
                h = execute(ctx, tasks, lane_serial)
            out["serial"] = h.value()
        if "parallel" in ctx.variants:
            with ctx.timed("parallel"):
                h = execute(ctx, tasks, lane_parallel)
            out["parallel"] = h.value()

    with ctx.phase("check"):
        if "serial" not in out:
            out["serial"] = execute(ctx, tasks, lane_serial).value()
            ctx.sync()
        if "parallel" in out:
            ctx.check_close("parallel == serial", out["parallel"], out["serial"], rtol=1e-4, atol=1e-5)
        else:
            ctx.check_close("serial is finite", torch.isfinite(out["serial"]).all(), torch.tensor(True))
    if "serial" in ctx.times_s and "parallel" in ctx.times_s:
        # the graph is L tasks wide (the loads, then the mixes): at most L lanes work at once
        speedup = ctx.times_s["serial"] / ctx.times_s["parallel"]
        ctx.derive({"speedup (serial / parallel)": speedup}, unless=speedup_beyond(speedup, *ctx.max_speedup(L)))
    ctx.derived["tasks"] = float(len(tasks))


SCENARIO = register(
    Scenario(
        name="dependency-graph",
        description="a DAG of dependent tasks across devices/streams (events), parallel vs serial",
        variants=("serial", "parallel"),
        run=run,
        params=(
            Param("size", 128, 2048, "matrix side", minimum=1),
            Param("depth", 6, 20, "products in each task"),
        ),
        lanes=(2, 4),
        details=__doc__ or "",
    )
)
