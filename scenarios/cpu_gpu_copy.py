"""cpu-gpu-copy: CPU compute, GPU compute and host↔device copies, one after another and then all at once.

Three independent pieces of work: products on every device (``n`` of side ``size`` per device), products on
the CPU on the main thread (``cpu_n`` of side ``cpu_size``), and copies on a side stream of every device
(``copies`` buffers of ``copy_mb`` MB from pinned host memory to the device and back). ``serial`` times each
alone, synchronising in between; ``together`` launches the device work and the copies, computes on the CPU
while they run, then waits. The ratio together / (sum of the three) says how much ran at once: the copy
engines, the GPU's multiprocessors and the CPU cores are separate resources.

On the CPU the devices are threads, and "copies" are memory copies on another thread: there all three pieces
compete for the same cores and memory bandwidth.
"""

from __future__ import annotations

from typing import Any

import torch

from tracer.scenarios.registry import Param, Scenario, register
from tracer.scenarios.runtime import (
    Context,
    Lane,
    part_longer_than_whole,
    rand,
    seeded,
    speedup_beyond,
    usable_cores,
)


def products(lane: Lane, x: torch.Tensor, n: int) -> torch.Tensor:
    y = x
    for _ in range(n):
        y = x.mm(x)
    return y


def round_trip(lane: Lane, hosts: list[torch.Tensor], devs: list[torch.Tensor], backs: list[torch.Tensor]) -> None:
    """Host → device into ``devs``, then device → host into ``backs`` (pinned: both are asynchronous)."""
    for h, d in zip(hosts, devs):
        d.copy_(h, non_blocking=True)
    for d, b in zip(devs, backs):
        b.copy_(d, non_blocking=True)


def run(ctx: Context, p: dict[str, Any]) -> None:
    gen = seeded(p["seed"])
    pin = ctx.on_gpu
    elems = max(1, int(p["copy_mb"] * 1024 * 1024 // 4))
    with ctx.phase("setup"):
        xs = [rand(gen, p["size"], p["size"], device=lane.device) for lane in ctx.lanes]
        xc = rand(gen, p["cpu_size"], p["cpu_size"])
        sides = [ctx.side_lane(lane, "copy") for lane in ctx.lanes]
        hosts = [[rand(gen, elems, pin=pin) for _ in range(p["copies"])] for _ in ctx.lanes]
        devs = [[torch.empty(elems, device=lane.device) for _ in range(p["copies"])] for lane in ctx.lanes]
        backs = [[torch.empty(elems, pin_memory=pin) for _ in range(p["copies"])] for _ in ctx.lanes]

    def device_work() -> list[Any]:
        return [ctx.submit(lane, products, lane, x, p["n"], phase="device-compute") for lane, x in zip(ctx.lanes, xs)]

    def copy_work() -> None:
        for side, h, d, b in zip(sides, hosts, devs, backs):
            ctx.submit(side, round_trip, side, h, d, b, phase="copies")

    def cpu_work() -> Any:
        return ctx.submit(ctx.host, products, ctx.host, xc, p["cpu_n"], phase="cpu-compute")

    with ctx.phase("warmup"):
        for lane, x in zip(ctx.lanes, xs):
            ctx.submit(lane, products, lane, x, 1)
        ctx.submit(ctx.host, products, ctx.host, xc, 1)
        # one round trip too: the copy lanes' first work (new threads on the CPU) and the first writes into the
        # freshly allocated buffers (page faults: about half of serial-copies on the CPU before this) stay untimed
        copy_work()
        ctx.sync()
        for bs in backs:  # the checks must see what the timed copies wrote, not what this one did
            for b in bs:
                b.zero_()

    got: dict[str, list[torch.Tensor]] = {}

    def collect(hd: list[Any], hc: Any) -> list[torch.Tensor]:
        return [h.value() for h in hd] + [hc.value()] + [b.clone() for bs in backs for b in bs]

    with ctx.profiled():
        if "serial" in ctx.variants:
            with ctx.timed("serial-device"):
                hd = device_work()
            with ctx.timed("serial-copies"):
                copy_work()
            with ctx.timed("serial-cpu"):
                hc = cpu_work()
            got["serial"] = collect(hd, hc)
        if "together" in ctx.variants:
            for bs in backs:
                for b in bs:
                    b.zero_()
            with ctx.timed("together"):
                hd = device_work()  # launched, running
                copy_work()  # launched on the side streams, running
                hc = cpu_work()  # the main thread computes meanwhile
            got["together"] = collect(hd, hc)

    with ctx.phase("check"):
        want = [x.mm(x) for x in xs] + [xc.mm(xc)] + [h for hs in hosts for h in hs]
        for v, values in got.items():
            ctx.check_close(f"{v}: products and round-tripped buffers", values, want, rtol=1e-5, atol=1e-5)
    parts = ("serial-device", "serial-copies", "serial-cpu")
    if all(k in ctx.times_s for k in parts) and "together" in ctx.times_s:
        total = sum(ctx.times_s[k] for k in parts)
        together = ctx.times_s["together"]
        ctx.derived["sum of serial parts (s)"] = total
        # together does all three pieces, so it cannot be shorter than any one of them alone (beyond noise); on
        # the CPU, where each piece is one thread's work, it cannot gain more than the cores allow either (which
        # the first check does not rule out: up to 3.3 on 2 cores)
        cores = usable_cores()
        ctx.derive(
            {"ratio together / sum": together / total, "speedup (sum / together)": total / together},
            unless=part_longer_than_whole(("together", together), {k: ctx.times_s[k] for k in parts})
            or (speedup_beyond(total / together, float(cores), f"{cores} CPU cores (one thread per piece)")
                if ctx.mode == "cpu-threads" else None),
        )


SCENARIO = register(
    Scenario(
        name="cpu-gpu-copy",
        description="CPU compute, GPU compute and host<->device copies, serially and all at once",
        variants=("serial", "together"),
        run=run,
        params=(
            Param("n", 6, 50, "products per device"),
            Param("size", 192, 4000, "device matrix side", minimum=1),
            Param("cpu_n", 6, 10, "products on the CPU (main thread)"),
            Param("cpu_size", 192, 1000, "CPU matrix side", minimum=1),
            Param("copies", 4, 8, "buffers copied to each device and back"),
            Param("copy_mb", 4.0, 64.0, "size of one buffer, MB"),
        ),
        lanes=(1, 1),
        details=__doc__ or "",
    )
)
