"""How much of a GPU each kernel occupies, from the launch figures Kineto records (issue 10, the replay's
resource model).

Kineto gives every kernel its ``grid``, ``block``, ``registers per thread`` and ``shared memory``, and the trace
its ``deviceProperties`` (SM count, threads, registers and shared memory per SM). From them: how many blocks of
the kernel fit on one SM at once (the least of the thread, register, shared-memory and 32-block limits), how
many waves its grid takes over all SMs, and the kernel's *demand*: the share of the GPU's block slots it keeps
busy on average when it runs alone, ``waves / ceil(waves)``. A 512-block matmul on 132 one-block SMs takes 3.88
waves in 4: demand 0.97, so two of them beside each other finish in 0.97 of their summed time, not half of it.
(Kineto's ``est. achieved occupancy %`` is 0 in the bundled H200 traces; it is not used.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import pandas as pd

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


class _KernelArgs(msgspec.Struct, gc=False):
    """The args a kernel's demand is made from; every other key is skipped unread."""

    device: Any = None
    correlation: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared: Any = msgspec.field(default=None, name="shared memory")


class _Event(msgspec.Struct, gc=False):
    cat: Any = None
    args: _KernelArgs | None = None


class _Doc(msgspec.Struct, gc=False):
    deviceProperties: Any = None
    traceEvents: list[_Event] = []


_DOC = msgspec.json.Decoder(_Doc)


def _kernel_rows(raw: bytes) -> tuple[Any, list[dict[str, Any]]] | None:
    """(deviceProperties, each kernel's args as a dict) of a Kineto JSON document; None when it is not one.
    A typed decode that reads only the fields used (a 100 MB trace in a fraction of a second, where a generic
    decode builds every event's args); a document it refuses (args that are not objects ...) is read whole."""
    keys = ("device", "correlation", "grid", "block", "registers per thread", "shared memory")
    try:
        doc = _DOC.decode(raw)
    except msgspec.ValidationError:
        try:
            loose = orjson.loads(raw)
        except ValueError:
            return None
        if not isinstance(loose, dict):
            return None
        events = loose.get("traceEvents")
        rows = [a for e in (events if isinstance(events, list) else ())
                if isinstance(e, dict) and e.get("cat") == "kernel" and isinstance(a := e.get("args"), dict)]
        return loose.get("deviceProperties"), [{k: a.get(k) for k in keys} for a in rows]
    except msgspec.DecodeError:
        return None
    return doc.deviceProperties, [
        dict(zip(keys, (a.device, a.correlation, a.grid, a.block, a.registers, a.shared)))
        for e in doc.traceEvents if e.cat == "kernel" and (a := e.args) is not None
    ]


def _inflated(p: Path) -> bytes | None:
    """The file's bytes, inflated if gzipped (a bomb refused as the parsers refuse it); None if unreadable."""
    from tracer.errors import TracerError
    from tracer.files.formats import GZIP_MAGIC
    from tracer.parsers import iter_inflated

    try:
        raw = p.read_bytes()
        return b"".join(iter_inflated(p, raw)) if raw[:2] == GZIP_MAGIC else raw
    except (OSError, TracerError):
        return None


def read_kineto_demand(path: str | Path) -> tuple[dict[int, float], int | None]:
    """``{correlation: demand}`` for the kernels of a Kineto JSON trace (``.json`` or ``.json.gz``; a run
    directory's ``trace.json.gz``) and the SM count of its first device; ``({}, None)`` when the file is not a
    Kineto trace or lacks the figures."""
    p = Path(path)
    if p.is_dir():
        p = p / "trace.json.gz"
    if not p.is_file() or not (p.name.endswith(".json") or p.name.endswith(".json.gz")):
        return {}, None
    raw = _inflated(p)
    found = _kernel_rows(raw) if raw is not None else None
    if found is None:
        return {}, None
    props_list, kernels = found
    props = {int(d["id"]): d for d in (props_list if isinstance(props_list, list) else ())
             if isinstance(d, dict) and type(d.get("id")) is int}
    out: dict[int, float] = {}
    for a in kernels:
        dev, corr = a["device"], a["correlation"]
        if type(dev) is not int or type(corr) is not int or dev not in props:
            continue
        d = kernel_demand(a, props[dev])
        if d is not None:
            out[corr] = d  # (one process per Kineto file: correlation ids are unique in it)
    first = next(iter(props.values()), None)
    sms = first.get("numSms") if first else None
    return out, sms if isinstance(sms, int) else None


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
    :func:`read_kineto_demand`) and what overlaps showed for its name (``by_name``, from :func:`overlap_demand`
    of other traces of the same GPU), the slot share alone where the name was never seen sharing."""
    k = nodes[(nodes["kind"].astype(str) == "kernel").to_numpy() & nodes["correlation"].notna().to_numpy()]
    out = dict(slots)
    for name, corr in zip(k["name"].astype(str), k["correlation"].to_numpy()):
        seen = by_name.get(name)
        if seen is not None:
            c = int(corr)
            out[c] = max(out.get(c, 0.0), seen)
    return out


def read_nsys_demand(path: str | Path) -> tuple[dict[int, float], int | None]:
    """The same as :func:`read_kineto_demand` for an Nsight Systems SQLite export (``.sqlite``, ``.sqlite.gz``,
    a run directory's ``report.sqlite[.gz]``): the kernels' grid, block, registers and shared memory from
    ``CUPTI_ACTIVITY_KIND_KERNEL``, the device's limits from ``TARGET_INFO_GPU``."""
    import sqlite3
    import tempfile

    p = Path(path)
    if p.is_dir():
        p = next((p / n for n in ("report.sqlite", "report.sqlite.gz") if (p / n).is_file()), p / "report.sqlite")
    if not p.is_file() or not (p.name.endswith(".sqlite") or p.name.endswith(".sqlite.gz")):
        return {}, None
    with tempfile.TemporaryDirectory() as tmp:
        db = p
        if p.name.endswith(".gz"):
            db = Path(tmp) / "report.sqlite"
            inflated = _inflated(p)
            if inflated is None:
                return {}, None
            db.write_bytes(inflated)
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                gpus = con.execute("SELECT id, smCount, maxWarpsPerSm, threadsPerWarp, maxRegistersPerSm, "
                                   "maxShmemPerSm FROM TARGET_INFO_GPU").fetchall()
                rows = con.execute("SELECT deviceId, correlationId, gridX, gridY, gridZ, blockX, blockY, blockZ, "
                                   "registersPerThread, staticSharedMemory + dynamicSharedMemory "
                                   "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
            finally:
                con.close()
        except sqlite3.Error:
            return {}, None
    props = {int(g[0]): {"numSms": int(g[1]), "maxThreadsPerMultiprocessor": int(g[2]) * int(g[3]),
                         "warpSize": int(g[3]), "regsPerMultiprocessor": int(g[4]),
                         "sharedMemPerMultiprocessor": int(g[5])} for g in gpus}
    out: dict[int, float] = {}
    for dev, corr, gx, gy, gz, bx, by, bz, regs, smem in rows:
        if dev not in props or corr is None:
            continue
        d = kernel_demand({"grid": [gx, gy, gz], "block": [bx, by, bz], "registers per thread": regs,
                           "shared memory": smem}, props[dev])
        if d is not None:
            out[int(corr)] = d
    first = next(iter(props.values()), None)
    return out, (first["numSms"] if first else None)


def read_job_demand(ranks: dict[str, Any]) -> dict[tuple[int, int], float]:
    """Kernel demand by (rank, correlation id) for a job: each rank's trace file (``meta.extra["ranks"]`` of
    :func:`tracer.job.load.load_job`: rank → its ``source``) read as :func:`read_demand` reads one. Correlation ids
    repeat across ranks (each process counts its own), hence the rank in the key."""
    out: dict[tuple[int, int], float] = {}
    for rank, info in ranks.items():
        source = info.get("source") if isinstance(info, dict) else None
        if not source or not str(rank).lstrip("-").isdigit():
            continue
        for corr, d in read_demand(source)[0].items():
            out[(int(rank), corr)] = d
    return out


def demand_of_nodes(nodes: pd.DataFrame, demand: Mapping[Any, float] | None) -> np.ndarray:
    """Each node's kernel demand from ``demand`` keyed by correlation id (one trace) or by (rank, correlation
    id) (a job: :func:`read_job_demand`); NaN where unknown (no launch figures, or not a kernel)."""
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


def read_demand(path: str | Path) -> tuple[dict[int, float], int | None]:
    """Kernel demand by correlation id from a Kineto JSON trace or an nsys SQLite export (or a run directory
    holding one); ``({}, None)`` for anything else."""
    found = read_kineto_demand(path)
    return found if found[0] else read_nsys_demand(path)
