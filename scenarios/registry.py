"""The scenario registry: names, one-line descriptions, parameters with CPU and GPU defaults, run functions.

A scenario module defines its run function and registers it with :func:`register`; :func:`run_scenario` is the
one way to run one (the recorder, ``python -m tracer.scenarios`` and the benchmark all go through it).
"""

from __future__ import annotations

import contextlib
import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from tracer.scenarios.hostload import HostLoadMeter
from tracer.scenarios.runtime import (
    Context,
    DevicePlan,
    ParamError,
    ScenarioError,
    ScenarioResult,
    resolve_devices,
    sanitize_derived,
    usable_cores,
)


@dataclass(frozen=True)
class Param:
    """One parameter: its type is the type of its CPU default (int, float, bool or str)."""

    name: str
    cpu: Any  # default on the CPU: small enough for a 2-core machine in a few seconds
    gpu: Any  # default on a GPU: the sizes of Dive into Deep Learning §13.3
    help: str
    choices: tuple[str, ...] = ()
    #: smallest accepted value of a number; 1 for counts and sizes that the scenario divides by or indexes with
    minimum: float = 0

    def default(self, on_gpu: bool) -> Any:
        return self.gpu if on_gpu else self.cpu

    def parse(self, text: Any) -> Any:
        """Convert ``text`` (a ``--param`` value, or an already-typed value) to this parameter's type."""
        kind = type(self.cpu)
        if not isinstance(text, str):
            value = text
        elif kind is bool:
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                value = True
            elif low in ("0", "false", "no", "off"):
                value = False
            else:
                raise ParamError(f"--param {self.name}={text}: expected true or false")
        else:
            try:
                value = kind(text.strip())
            except ValueError:
                raise ParamError(f"--param {self.name}={text}: expected {kind.__name__}") from None
        if self.choices and str(value) not in self.choices:
            raise ParamError(f"--param {self.name}={text}: choose one of {', '.join(self.choices)}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ParamError(f"--param {self.name}={text}: expected a finite number")
            if value < 0:
                raise ParamError(f"--param {self.name}={text}: must not be negative")
            if value < self.minimum:
                raise ParamError(f"--param {self.name}={text}: must be at least {self.minimum:g}")
        return value

    def describe(self) -> dict[str, Any]:
        d = {"name": self.name, "cpu": self.cpu, "gpu": self.gpu, "help": self.help, "type": type(self.cpu).__name__}
        if self.choices:
            d["choices"] = list(self.choices)
        return d


#: Run function: ``run(ctx, params)``; it fills ``ctx`` (times, checks, derived figures) and returns nothing.
RunFn = Callable[[Context, dict[str, Any]], None]


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str  # one line, shown by `tracer scenarios`
    variants: tuple[str, ...]
    run: RunFn
    params: tuple[Param, ...] = ()
    #: stand-in lanes when there are fewer real devices: (on the CPU, on one GPU)
    lanes: tuple[int, int] = (2, 2)
    details: str = ""  # a paragraph for docs and `tracer scenarios NAME`
    #: variants that need two or more GPUs (left out of "all" otherwise)
    multi_gpu_variants: tuple[str, ...] = field(default=())
    #: one process per rank (its ``ranks`` parameter): ``run`` is one rank's work, and the recorder starts the
    #: ranks with torchrun's environment (tracer/record/ranks.py) instead of calling :func:`run_scenario` itself
    multi_process: bool = False
    #: checks the parameters together before anything runs (ParamError), where one alone cannot tell
    check: Callable[[dict[str, Any]], None] | None = None

    def all_params(self) -> tuple[Param, ...]:
        common = (
            Param("variant", "all", "all", "run one variant only (default: all of them)", ("all", *self.variants)),
            Param(
                "lanes",
                self.lanes[0],
                self.lanes[1],
                "stand-in devices when there are fewer real ones: threads on the CPU, streams on one GPU "
                "(ignored with several GPUs: one lane per GPU)",
            ),
            Param("seed", 0, 0, "seed of the input data"),
        )
        return common + self.params

    def param(self, name: str) -> Param:
        for p in self.all_params():
            if p.name == name:
                return p
        raise ParamError(
            f"scenario {self.name} has no parameter {name!r}; it has "
            + ", ".join(p.name for p in self.all_params())
        )

    def resolve_params(self, overrides: Mapping[str, Any], on_gpu: bool) -> dict[str, Any]:
        values = {p.name: p.default(on_gpu) for p in self.all_params()}
        for key, text in overrides.items():
            values[key] = self.param(key).parse(text)
        if values["lanes"] < 1:
            raise ParamError("--param lanes must be at least 1")
        return values

    def selected_variants(self, variant: str, plan: DevicePlan) -> list[str]:
        if variant != "all":
            if variant in self.multi_gpu_variants and plan.mode != "multi-gpu":
                raise ParamError(
                    f"variant {variant} of {self.name} needs two or more GPUs; --device {plan.requested} "
                    f"gives {plan.mode} ({', '.join(plan.devices)})"
                )
            return [variant]
        return [v for v in self.variants if v not in self.multi_gpu_variants or plan.mode == "multi-gpu"]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "variants": list(self.variants),
            "params": [p.describe() for p in self.all_params()],
            "multi_process": self.multi_process,
        }


_REGISTRY: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    if scenario.name in _REGISTRY:
        raise ValueError(f"scenario {scenario.name} registered twice")
    _REGISTRY[scenario.name] = scenario
    return scenario


#: the order `tracer scenarios` lists them in (any other registered scenario after these)
ORDER = (
    "multi-device",
    "compute-copy",
    "mlp-data-parallel",
    "independent-ops",
    "small-ops",
    "cpu-gpu-copy",
    "dependency-graph",
    "ddp",
)


def all_scenarios() -> list[Scenario]:
    return [_REGISTRY[n] for n in ORDER if n in _REGISTRY] + [
        s for n, s in _REGISTRY.items() if n not in ORDER
    ]


def get(name: str) -> Scenario:
    key = name.strip().lower().replace("_", "-")
    if key not in _REGISTRY:
        close = difflib.get_close_matches(key, ORDER, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ScenarioError(
            f"no scenario called {name!r}; {hint}choose one of {', '.join(ORDER)} (`tracer scenarios` lists them)"
        )
    return _REGISTRY[key]


def parse_param_args(items: list[str] | None) -> dict[str, str]:
    """``["n=10", "cpu-share=0.1"]`` → ``{"n": "10", "cpu_share": "0.1"}`` (names take - or _)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ParamError(f"--param {item!r}: write it as NAME=VALUE, e.g. --param n=10")
        out[key.replace("-", "_")] = value
    return out


def gpu_names(plan: DevicePlan) -> dict[str, str]:
    if not plan.on_gpu:
        return {}
    return {d.split(":")[1]: torch.cuda.get_device_name(torch.device(d)) for d in plan.devices}


def prepare(name: str, device: str = "auto", params: Mapping[str, Any] | None = None) -> tuple[
    Scenario, DevicePlan, dict[str, Any], list[str]
]:
    """Check everything the user asked for before any work starts: scenario, device, parameters, variants."""
    scenario = get(name)
    plan = resolve_devices(device)
    values = scenario.resolve_params(params or {}, plan.on_gpu)
    if scenario.check is not None:
        scenario.check(values)
    variants = scenario.selected_variants(values["variant"], plan)
    return scenario, plan, values, variants


def run_scenario(
    name: str,
    device: str = "auto",
    params: Mapping[str, Any] | None = None,
    *,
    on_phase: Callable[[str], None] | None = None,
    profiler: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
) -> ScenarioResult:
    """Run scenario ``name``; ``profiler`` (if given) is entered around the scenario's profiled window."""
    scenario, plan, values, variants = prepare(name, device, params)
    torch.manual_seed(values["seed"])
    ctx = Context(scenario.name, plan, values, lanes=values["lanes"], on_phase=on_phase, profiler=profiler)
    ctx.variants = variants
    meter = HostLoadMeter(usable_cores())
    try:
        scenario.run(ctx, values)
        ctx.sync()
    finally:
        ctx.close()
    # (a rank's process counts the other ranks as "other processes": the load is said of one-process runs only)
    host_load = meter.stop() if not scenario.multi_process else None
    if host_load is not None and host_load.busy and plan.mode == "cpu-threads":
        ctx.caveat(f"the host was busy: other processes kept {host_load.others_cores:.1f} of {host_load.cores} "
                   "core(s) busy during the run, so its wall times, and every figure derived from them, say as much "
                   "about that load as about the scenario")
    if plan.mode == "cpu-threads" and not scenario.multi_process:  # a rank's lane is unused: the rank is the lane
        ctx.note(
            f"cpu-threads: each lane is a thread running torch with {ctx.intra_op_threads} intra-op thread, "
            f"on {usable_cores()} CPU core(s) shared with whatever else runs here; at most that many lanes "
            "compute at once, and a busy machine shows in every wall time"
        )
    if not ctx._window_used:
        raise RuntimeError(f"scenario {scenario.name} never opened its profiled window")
    derived = sanitize_derived(ctx.derived, ctx.notes)
    return ScenarioResult(
        scenario=scenario.name,
        variant=values["variant"],
        variants=variants,
        mode=plan.mode,
        devices=list(plan.devices),
        lanes=[lane.describe() for lane in ctx.lanes],
        params=values,
        times_s=ctx.times_s,
        unprofiled=ctx.unprofiled,
        samples_s={k: v for k, v in ctx.samples_s.items() if len(v) > 1},
        checks={k: c.to_dict() for k, c in ctx.checks.items()},
        derived=derived,
        notes=ctx.notes,
        caveats=ctx.caveats,
        host_load=host_load.to_dict() if host_load is not None else {},
        phases=ctx.phases,
        gpu_names=gpu_names(plan),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        profiled_window_s=ctx.profiled_window_s,
        intra_op_threads=ctx.intra_op_threads,
    )


__all__ = [
    "Param",
    "Scenario",
    "ScenarioError",
    "all_scenarios",
    "get",
    "parse_param_args",
    "prepare",
    "register",
    "run_scenario",
]
