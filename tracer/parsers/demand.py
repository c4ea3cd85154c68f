"""The kernels' launch figures, read from a trace's raw file: what :mod:`tracer.explain.occupancy` makes each
kernel's *demand* from (its share of the GPU's block slots, the replay's resource model, issue 10).

Kineto gives every kernel its ``grid``, ``block``, ``registers per thread`` and ``shared memory`` and the trace its
``deviceProperties``; an Nsight Systems export the same in ``CUPTI_ACTIVITY_KIND_KERNEL`` and ``TARGET_INFO_GPU``.
The :class:`tracer.timeline.Timeline` has no column for them (adding one would change the timeline schema and the
Parquet cache), so they are read here, from the file the timeline was read from, beside the timeline: a second,
narrow read of the file that keeps only these fields. The figures are returned as they are; the demand is
computed from them in :mod:`tracer.explain.occupancy`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import orjson

from tracer.errors import TracerError
from tracer.files.formats import FORMATS, GZIP_MAGIC, TraceFormat
from tracer.files.sqlite_bounds import open_bounded, schema_objects
from tracer.parsers import iter_inflated, unpacked_sqlite


@dataclass(frozen=True)
class LaunchFigures:
    """One trace file's kernel launch figures. ``devices``: each device's limits by device id, keyed as Kineto's
    ``deviceProperties`` (``numSms``, ``maxThreadsPerMultiprocessor``, ``warpSize``, ``regsPerMultiprocessor``,
    ``sharedMemPerMultiprocessor``); ``kernels``: (device id, correlation id, args) of each kernel run on one of
    those devices, ``args`` keyed as Kineto's kernel args (``grid``, ``block``, ``registers per thread``, ``shared
    memory``), each as the file gave it."""

    devices: dict[int, dict[str, Any]]
    kernels: list[tuple[int, int, dict[str, Any]]]


#: What a timeline's kernels were launched with: its file's figures (one trace: those of each format that reads
#: the file, Kineto's first, usually one), or each rank's by rank (a job).
Launches = tuple[LaunchFigures, ...] | dict[int, tuple[LaunchFigures, ...]]

_ARG_KEYS = ("grid", "block", "registers per thread", "shared memory")


class _KernelArgs(msgspec.Struct, gc=False):
    """The args the launch figures are read from; every other key is skipped unread."""

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


def _kernel_rows(raw: bytes) -> tuple[Any, list[tuple[Any, Any, dict[str, Any]]]] | None:
    """(deviceProperties, each kernel's (device, correlation, args)) of a Kineto JSON document; None when it is
    not one. A typed decode that reads only the fields used (a 100 MB trace in a fraction of a second, where a
    generic decode builds every event's args); a document it refuses (args that are not objects ...) is read
    whole."""
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
        return loose.get("deviceProperties"), [
            (a.get("device"), a.get("correlation"), {k: a.get(k) for k in _ARG_KEYS}) for a in rows]
    except msgspec.DecodeError:
        return None
    return doc.deviceProperties, [
        (a.device, a.correlation, dict(zip(_ARG_KEYS, (a.grid, a.block, a.registers, a.shared))))
        for e in doc.traceEvents if e.cat == "kernel" and (a := e.args) is not None
    ]


def _file_of(path: str | Path, fmt: TraceFormat) -> Path | None:
    """``path`` where it is a file named as ``fmt``'s, or ``fmt``'s file in a run directory (its ``run_files``, as
    the run's own reader finds it); None otherwise."""
    p = Path(path)
    if p.is_dir():
        p = next((p / n for n in fmt.run_files if (p / n).is_file()), p / fmt.run_files[0])
    return p if p.is_file() and fmt.named(p.name) else None


def _inflated(p: Path) -> bytes | None:
    """The file's bytes, inflated if gzipped (a bomb refused as the parsers refuse it); None if unreadable."""
    try:
        raw = p.read_bytes()
        return b"".join(iter_inflated(p, raw)) if raw[:2] == GZIP_MAGIC else raw
    except (OSError, TracerError):
        return None


def read_kineto_launch_figures(path: str | Path) -> LaunchFigures | None:
    """The launch figures of a Kineto JSON trace (``.json`` or ``.json.gz``; a run directory's
    ``trace.json.gz``): the devices of its ``deviceProperties`` with an integer id, the kernels on them with an
    integer correlation id (unique in the file: one process per Kineto file). None when the file is not a
    Kineto trace or cannot be read."""
    p = _file_of(path, FORMATS["kineto"])
    if p is None:
        return None
    raw = _inflated(p)
    found = _kernel_rows(raw) if raw is not None else None
    if found is None:
        return None
    props_list, rows = found
    devices = {int(d["id"]): d for d in (props_list if isinstance(props_list, list) else ())
               if isinstance(d, dict) and type(d.get("id")) is int}
    kernels = [(dev, corr, args) for dev, corr, args in rows
               if type(dev) is int and type(corr) is int and dev in devices]
    return LaunchFigures(devices, kernels)


def read_nsys_launch_figures(path: str | Path) -> LaunchFigures | None:
    """The same as :func:`read_kineto_launch_figures` for an Nsight Systems SQLite export (``.sqlite``,
    ``.sqlite.gz``, a run directory's ``report.sqlite[.gz]``): the kernels' grid, block, registers and shared
    memory from ``CUPTI_ACTIVITY_KIND_KERNEL``, the devices' limits from ``TARGET_INFO_GPU``."""
    p = _file_of(path, FORMATS["nsys-sqlite"])
    if p is None:
        return None
    try:
        with unpacked_sqlite(p) as db, open_bounded(db, p) as con:  # (bounded, as the parser's reads are)
            if not {"TARGET_INFO_GPU", "CUPTI_ACTIVITY_KIND_KERNEL"} <= schema_objects(con)[0]:
                return None  # (a view in their place: the parser refuses the file)
            gpus = con.execute("SELECT id, smCount, maxWarpsPerSm, threadsPerWarp, maxRegistersPerSm, "
                               "maxShmemPerSm FROM TARGET_INFO_GPU").fetchall()
            rows = con.execute("SELECT deviceId, correlationId, gridX, gridY, gridZ, blockX, blockY, blockZ, "
                               "registersPerThread, staticSharedMemory + dynamicSharedMemory "
                               "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    except (OSError, TracerError, sqlite3.Error):
        return None
    devices = {int(g[0]): {"numSms": int(g[1]), "maxThreadsPerMultiprocessor": int(g[2]) * int(g[3]),
                           "warpSize": int(g[3]), "regsPerMultiprocessor": int(g[4]),
                           "sharedMemPerMultiprocessor": int(g[5])}
               for g in gpus if all(type(v) is int for v in g)}  # (a NULL or REAL there: that GPU's limits unknown)
    kernels = [(dev, int(corr), {"grid": [gx, gy, gz], "block": [bx, by, bz], "registers per thread": regs,
                                 "shared memory": smem})
               for dev, corr, gx, gy, gz, bx, by, bz, regs, smem in rows if dev in devices and corr is not None]
    return LaunchFigures(devices, kernels)


def read_launch_figures(path: str | Path) -> tuple[LaunchFigures, ...]:
    """The launch figures of a Kineto JSON trace or an nsys SQLite export, or of a run directory holding one (both,
    Kineto's first, where it holds both); empty for anything else."""
    found = (read_kineto_launch_figures(path), read_nsys_launch_figures(path))
    return tuple(f for f in found if f is not None)


def read_job_launch_figures(ranks: Mapping[str, Any]) -> dict[int, tuple[LaunchFigures, ...]]:
    """Each rank's launch figures, by rank, for a job: each rank's trace file (``meta.extra["ranks"]`` of
    :func:`tracer.job.load.load_job`: rank → its ``source``) read as :func:`read_launch_figures` reads one."""
    out: dict[int, tuple[LaunchFigures, ...]] = {}
    for rank, info in ranks.items():
        source = info.get("source") if isinstance(info, dict) else None
        if not source or not str(rank).lstrip("-").isdigit():
            continue
        out[int(rank)] = read_launch_figures(source)
    return out


def read_launches(path: str | Path, extra: Mapping[str, Any]) -> Launches:
    """What the kernels of a timeline read from ``path`` were launched with: each rank's figures for a job of two
    ranks or more (its ``meta.extra`` names each rank's file), else ``path``'s."""
    ranks = extra.get("ranks")
    if isinstance(ranks, dict) and len(ranks) > 1:
        return read_job_launch_figures(ranks)
    return read_launch_figures(path)
