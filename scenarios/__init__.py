"""Scenarios: small, parameterised PyTorch workloads that show (or fail to show) parallelism.

Each is a named function made of phases (an NVTX range and a ``record_function`` of the same name,
``<scenario>/<phase>``) that checks its own result and reports wall times per variant. They import only torch,
nvtx and the standard library; ``tracer record`` runs them under a profiler. ``python -m tracer.scenarios list`` and
``tracer scenarios`` describe them; docs/scenarios.md explains what each one teaches.
"""

from tracer.scenarios.registry import Param, Scenario, all_scenarios, get, parse_param_args, prepare, run_scenario
from tracer.scenarios.runtime import (
    Context,
    DeviceError,
    DevicePlan,
    ParamError,
    ScenarioError,
    ScenarioResult,
    resolve_devices,
)

__all__ = [
    "Context",
    "DeviceError",
    "DevicePlan",
    "Param",
    "ParamError",
    "Scenario",
    "ScenarioError",
    "ScenarioResult",
    "all_scenarios",
    "get",
    "parse_param_args",
    "prepare",
    "resolve_devices",
    "run_scenario",
]

# Every scenario of the package, imported (so registered: tracer.scenarios.registry.register) with the package,
# before anything can look one up. They import torch, as the registry does already.
from tracer.scenarios import (  # noqa: E402, F401, I001
    compute_copy,
    cpu_gpu_copy,
    ddp,
    dependency_graph,
    independent_ops,
    mlp_data_parallel,
    multi_device,
    small_ops,
)
