"""How much of a GPU each kernel occupies, from the launch figures Kineto records (issue 10, the replay's
resource model).

Kineto gives every kernel its ``grid``, ``block``, ``registers per thread`` and ``shared memory``, and the trace
its ``deviceProperties`` (SM count, threads, registers and shared memory per SM). From them: how many blocks of
the kernel fit on one SM at once (the least of the thread, register, shared-memory and 32-block limits), how
many waves its grid takes over all SMs, and the kernel's *demand*: the share of the GPU's block slots it keeps
busy on average when it runs alone, ``waves / ceil(waves)``. A 512-block matmul on 132 one-block SMs takes 3.88
waves in 4: demand 0.97, so two of them beside each other finish in 0.97 of their summed time, not half of it.
(Kineto's ``est. achieved occupancy %`` is 0 in the bundled H200 traces; it is not used.)

The figures are read from the trace file by :mod:`tracer.parsers.demand` (Kineto's or an nsys export's, as
:class:`~tracer.parsers.demand.LaunchFigures`); this module only computes from what it is given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # (the types of what it is given; the reader itself is never imported here)
    from tracer.parsers.demand import Launches, LaunchFigures

#: CUDA's limit of resident blocks per SM (compute capability 5.0 to 9.0).
MAX_BLOCKS_PER_SM = 32


def _product(v: Any) -> int:
    if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
        return math.prod(max(1, x) for x in v)
    return 0


def kernel_demand(args: dict[str, Any], props: dict[str, Any]) -> float | None:
    """The demand (0, 1] of one kernel with Kineto ``args`` on a device with ``props``; None when a figure is
    missing."""
    blocks, threads = _product(args.get("grid")), _product(args.get("block"))
    sms = props.get("numSms")
    if not blocks or not threads or not isinstance(sms, int) or sms <= 0:
        return None
    warp = int(props.get("warpSize", 32)) or 32
    threads_r = -(-threads // warp) * warp  # registers and slots are given per warp
    fit = [MAX_BLOCKS_PER_SM, int(props.get("maxThreadsPerMultiprocessor", 2048)) // threads_r]
    regs = args.get("registers per thread")
    if isinstance(regs, int) and regs > 0:
        fit.append(int(props.get("regsPerMultiprocessor", 65536)) // (regs * threads_r))
    smem = args.get("shared memory")
    if isinstance(smem, int) and smem > 0:
        fit.append(int(props.get("sharedMemPerMultiprocessor", 1 << 30)) // smem)
    per_sm = max(1, min(fit))
    waves = blocks / (sms * per_sm)
    return min(1.0, waves / math.ceil(waves))


def demand_of(figures: Sequence[LaunchFigures]) -> tuple[dict[int, float], int | None]:
    """``{correlation: demand}`` for the kernels of one trace file, from its launch figures
    (:func:`tracer.parsers.demand.read_launch_figures`: Kineto's, then an nsys export's, where a run directory
    holds both), and the SM count of the first device: of the first figures that give a demand for any kernel;
    ``({}, None)`` where none does (not a Kineto or nsys file, or no launch figures in it)."""
    for f in figures:
        out: dict[int, float] = {}
        for dev, corr, args in f.kernels:
            d = kernel_demand(args, f.devices[dev])
            if d is not None:
                out[corr] = d
        if out:
            first = next(iter(f.devices.values()), None)
            sms = first.get("numSms") if first else None
            return out, sms if isinstance(sms, int) else None
    return {}, None


def overlap_demand(nodes: pd.DataFrame, min_concurrency: float = 1.2) -> dict[str, float]:
    """Each kernel name's demand as the trace shows it: where instances of the name ran beside other kernels of
    their device (average concurrency ``c`` of at least ``min_concurrency``) and others ran alone (their median
    time is the solo time), the sharing model's slowdown ``max(1, c * demand)`` solved for the demand: the
    median of slowdown / c, in (0, 1]. Names that never ran both ways are left out. ``nodes``: a graph's nodes
    (:func:`tracer.explain.build_graph`)."""
    k = nodes[(nodes["kind"].astype(str) == "kernel").to_numpy()]
    if k.empty:
        return {}
    start = k["start_ns"].to_numpy(np.int64)
    end = k["end_ns"].to_numpy(np.int64)
    conc = np.ones(len(k))
    dev = k["device"].to_numpy()
    for d in np.unique(dev):
        idx = np.flatnonzero(dev == d)
        t = np.concatenate([start[idx], end[idx]])
        step = np.concatenate([np.ones(len(idx)), -np.ones(len(idx))])
        order = np.argsort(t, kind="stable")
        t, step = t[order], step[order]
        running = np.cumsum(step)[:-1]
        area = np.concatenate([[0.0], np.cumsum(np.diff(t) * running)])
        a = area[np.searchsorted(t, end[idx])] - area[np.searchsorted(t, start[idx])]
        conc[idx] = a / np.maximum(1, end[idx] - start[idx])
    frame = pd.DataFrame({"name": k["name"].astype(str).to_numpy(), "dur": (end - start).astype(float),
                          "conc": conc})
    out: dict[str, float] = {}
    for name, grp in frame.groupby("name"):
        alone = grp[grp["conc"] < 1.05]
        shared = grp[grp["conc"] >= min_concurrency]
        if len(alone) < 3 or len(shared) < 3:
            continue
        slow = shared["dur"].to_numpy() / float(alone["dur"].median())
        out[str(name)] = float(np.clip(np.median(slow / shared["conc"].to_numpy()), 1e-3, 1.0))
    return out


def merge_demand(nodes: pd.DataFrame, slots: dict[int, float], by_name: dict[str, float]) -> dict[int, float]:
    """Each kernel's demand by correlation id: the larger of its block-slot share (``slots``, from
    :func:`demand_of`) and what overlaps showed for its name (``by_name``, from :func:`overlap_demand`
    of other traces of the same GPU), the slot share alone where the name was never seen sharing."""
    k = nodes[(nodes["kind"].astype(str) == "kernel").to_numpy() & nodes["correlation"].notna().to_numpy()]
    out = dict(slots)
    for name, corr in zip(k["name"].astype(str), k["correlation"].to_numpy()):
        seen = by_name.get(name)
        if seen is not None:
            c = int(corr)
            out[c] = max(out.get(c, 0.0), seen)
    return out


def job_demand(by_rank: Mapping[int, Sequence[LaunchFigures]]) -> dict[tuple[int, int], float]:
    """Kernel demand by (rank, correlation id) for a job, from each rank's launch figures
    (:func:`tracer.parsers.demand.read_job_launch_figures`), each rank's as :func:`demand_of` gives one trace's.
    Correlation ids repeat across ranks (each process counts its own), hence the rank in the key."""
    out: dict[tuple[int, int], float] = {}
    for rank, figures in by_rank.items():
        for corr, d in demand_of(figures)[0].items():
            out[(rank, corr)] = d
    return out


def launch_demand(launches: Launches) -> Mapping[Any, float]:
    """The kernels' demand of a timeline from what they were launched with (:data:`tracer.parsers.demand.
    Launches`): by correlation id for one trace (:func:`demand_of`), by (rank, correlation id) for a job
    (:func:`job_demand`)."""
    if isinstance(launches, dict):
        return job_demand(launches)
    return demand_of(launches)[0]


def demand_of_nodes(nodes: pd.DataFrame, demand: Mapping[Any, float] | None) -> np.ndarray:
    """Each node's kernel demand from ``demand`` keyed by correlation id (one trace) or by (rank, correlation
    id) (a job: :func:`job_demand`); NaN where unknown (no launch figures, or not a kernel)."""
    out = np.full(len(nodes), np.nan)
    if not demand:
        return out
    corr = nodes["correlation"].to_numpy(float)
    is_kernel = (nodes["kind"].astype(str) == "kernel").to_numpy() & ~np.isnan(corr)
    idx = np.flatnonzero(is_kernel)
    if isinstance(next(iter(demand)), tuple):
        rank = nodes["rank"].to_numpy(np.int64)
        out[idx] = [demand.get((int(rank[i]), int(corr[i])), np.nan) for i in idx.tolist()]
    else:
        out[idx] = [demand.get(int(c), np.nan) for c in corr[idx]]
    return out
