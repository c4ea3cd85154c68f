"""Kineto / Chrome trace JSON (what ``torch.profiler`` writes) → canonical timeline.

Speed matters: a real training trace is 100 MB – 1 GB of JSON. Rather than building Python dicts for every
event (``json``/``orjson.loads``), msgspec decodes straight into small typed structs holding only the fields
tracer needs; unknown keys are skipped inside the C decoder. Columns are then pulled out with list
comprehensions and turned into numpy arrays once.
"""

from __future__ import annotations

import re
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd

from tracer.errors import TraceFormatError
from tracer.timeline import HOST_DEVICE, HOST_STREAM, Timeline, TraceMeta, build_events, validate

Num = Union[int, float]


class _Args(msgspec.Struct, omit_defaults=True):
    device: Union[int, None] = None
    stream: Union[int, None] = None
    correlation: Union[int, None] = None
    bytes: Union[int, None] = None
    name: Union[str, None] = None  # "M" metadata events carry their name here
    # tracer's own Chrome export draws some rows on another track and keeps their real pid/tid here
    tracer_pid: Union[int, None] = None
    tracer_tid: Union[int, None] = None


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    # pid/tid are ints in torch traces but strings in the profiler's own "Spans"/"Traces" rows
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Union[Num, None] = None
    dur: Union[Num, None] = None
    id: Union[int, str, None] = None
    args: Union[_Args, None] = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] = []
    baseTimeNanoseconds: Union[int, None] = None
    deviceProperties: list[dict[str, Any]] = []
    schemaVersion: Union[int, None] = None
    cuda_driver_version: Union[int, None] = None
    cuda_runtime_version: Union[int, None] = None
    distributedInfo: Union[dict[str, Any], None] = None


_DECODER = msgspec.json.Decoder(_Trace)
_EVENT_LIST_DECODER = msgspec.json.Decoder(list[_Event])

# Kineto category -> timeline kind. Anything not listed becomes "other" (kept, not dropped).
_KIND_BY_CAT: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "python_function": "cpu_op",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "user_annotation": "range",
    "gpu_user_annotation": "gpu_range",
    "cuda_sync": "sync",
}
# The profiler's own bookkeeping spans ("PyTorch Profiler (0)") are not part of the workload.
_SKIP_CATS = frozenset({"Trace"})

_COPY_KIND_RE = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD|AtoH|HtoA|AtoA)\b")
_COPY_KIND_MAP = {"DtoA": "DtoD", "AtoD": "DtoD", "AtoA": "DtoD", "AtoH": "DtoH", "HtoA": "HtoD"}


def copy_kind_from_name(name: str) -> str:
    """Direction of a Kineto memcpy from its name ("Memcpy DtoH (Device -> Pinned)" → "DtoH")."""
    m = _COPY_KIND_RE.search(name)
    if not m:
        return "Other"
    kind = m.group(1)
    return _COPY_KIND_MAP.get(kind, kind)


def _us_to_ns(values: np.ndarray) -> np.ndarray:
    """Float microseconds → integer ns without losing the last digit.

    ``round(ts * 1000)`` is wrong for absolute Kineto stamps (~5e12 µs): the product ~5e15 is past the range
    where doubles hold every integer exactly enough, so it can be off by one ns. Splitting off the whole
    microseconds first keeps the fraction exact.
    """
    whole = np.floor(values)
    frac_ns = np.rint((values - whole) * 1000.0)
    return whole.astype(np.int64) * 1000 + frac_ns.astype(np.int64)


def _as_int(value: Any, default: int = -1) -> int:
    return value if type(value) is int else default


def decode(data: bytes, source: str) -> _Trace:
    """Decode trace bytes into typed structs; a clear error for anything that is not a Kineto trace."""
    try:
        if data.lstrip()[:1] == b"[":  # the bare-array flavour of the Chrome trace format
            return _Trace(traceEvents=_EVENT_LIST_DECODER.decode(data))
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(source, f"not a Kineto/Chrome trace: {exc}") from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg.lower():
            raise TraceFormatError(source, "truncated JSON: the file ends mid-trace (was the profiler stopped?)") from None
        raise TraceFormatError(source, f"invalid JSON: {msg}") from None


def parse_kineto_bytes(data: bytes, source: str = "") -> Timeline:
    """Parse the bytes of a Kineto / Chrome trace JSON into a :class:`Timeline`."""
    trace = decode(data, source)
    events = trace.traceEvents
    if not events and trace.schemaVersion is None and trace.baseTimeNanoseconds is None:
        raise TraceFormatError(source, "JSON holds no 'traceEvents': not a Kineto/Chrome trace")

    meta = TraceMeta(format="kineto", source=source)
    # Flows: "s" at the launching runtime call, "f" at the GPU activity; both carry the correlation id.
    # Kernels carry args.correlation themselves, so flows only matter for traces that lack it.
    xs = [e for e in events if e.ph == "X" and e.ts is not None and e.cat not in _SKIP_CATS]
    for e in events:
        if e.ph == "M" and e.args is not None and e.args.name is not None:
            if e.name == "process_name" and type(e.pid) is int:
                meta.process_names[e.pid] = e.args.name
            elif e.name == "thread_name" and type(e.pid) is int:
                meta.thread_names[f"{e.pid}:{_as_int(e.tid)}"] = e.args.name

    n = len(xs)
    ts = np.fromiter((e.ts for e in xs), dtype=np.float64, count=n)
    dur = np.fromiter((e.dur if e.dur is not None else 0.0 for e in xs), dtype=np.float64, count=n)
    # Both ends are rounded as points in time (end = ts + dur), so that the union of back-to-back intervals
    # has no 1-ns seams; this is also how the reference figures in tests/data/FIXTURES.md were computed.
    start = _us_to_ns(ts)
    length = np.maximum(_us_to_ns(ts + np.maximum(dur, 0.0)) - start, 0)
    if trace.baseTimeNanoseconds:
        start = start + np.int64(trace.baseTimeNanoseconds)
    cats = [e.cat for e in xs]
    kinds = [_KIND_BY_CAT.get(c, "other") for c in cats]
    names = [e.name for e in xs]
    pids = np.fromiter((_as_int(e.pid) for e in xs), dtype=np.int64, count=n)
    tids = np.fromiter((_as_int(e.tid) for e in xs), dtype=np.int64, count=n)
    no_args = _Args()
    args = [e.args or no_args for e in xs]
    moved = [i for i, a in enumerate(args) if a.tracer_pid is not None or a.tracer_tid is not None]
    for i in moved:
        if args[i].tracer_pid is not None:
            pids[i] = args[i].tracer_pid
        if args[i].tracer_tid is not None:
            tids[i] = args[i].tracer_tid
    device_raw = [a.device for a in args]
    stream_raw = [a.stream for a in args]
    kind_arr = np.array(kinds, dtype=object)
    on_gpu = np.isin(kind_arr, ("kernel", "memcpy", "memset", "gpu_range"))
    # GPU activities live at pid=device, tid=stream in Kineto; args say the same more reliably.
    device = np.where(
        on_gpu,
        np.array([d if d is not None else -1 for d in device_raw], dtype=np.int64),
        HOST_DEVICE,
    )
    device = np.where(on_gpu & (device < 0), pids, device)
    stream = np.where(
        on_gpu,
        np.array([s if s is not None else -1 for s in stream_raw], dtype=np.int64),
        HOST_STREAM,
    )
    stream = np.where(on_gpu & (stream < 0), tids, stream)
    copy_kind = np.full(n, "", dtype=object)
    is_copy = kind_arr == "memcpy"
    for i in np.flatnonzero(is_copy):
        copy_kind[i] = copy_kind_from_name(names[i])
    nbytes = pd.array([a.bytes for a in args], dtype="Int64")
    correlation = pd.array([a.correlation for a in args], dtype="Int64")

    # Kineto files GPU rows under pid = device index; the schema's pid is the process that launched the work
    # (as nsys records it), found through the correlation id of the launching runtime/driver call.
    corr_arr = np.array([a.correlation if a.correlation is not None else -1 for a in args], dtype=np.int64)
    is_call = np.isin(kind_arr, ("runtime", "driver")) & (corr_arr >= 0)
    gpu_rows = on_gpu & (corr_arr >= 0)
    if is_call.any() and gpu_rows.any():
        owner = pd.Series(pids[is_call], index=corr_arr[is_call])
        owner = owner[~owner.index.duplicated()]
        launched_by = owner.reindex(corr_arr[gpu_rows]).to_numpy()
        pids = pids.copy()
        pids[gpu_rows] = np.where(np.isnan(launched_by), -1, launched_by).astype(np.int64)
    pids[on_gpu & ~gpu_rows] = -1
    ev = build_events(
        {
            "start_ns": start,
            "end_ns": start + length,
            "kind": pd.Categorical(kinds, categories=None),
            "copy_kind": copy_kind,
            "name": pd.Categorical(names),
            "device": device,
            "stream": stream,
            "pid": pids,
            "tid": tids,
            "bytes": nbytes,
            "correlation": correlation,
        }
    )

    for prop in trace.deviceProperties:
        if isinstance(prop, dict) and "id" in prop:
            meta.gpu_names[int(prop["id"])] = str(prop.get("name", ""))
    meta.extra = {
        k: v
        for k, v in {
            "base_time_ns": trace.baseTimeNanoseconds,
            "cuda_driver_version": trace.cuda_driver_version,
            "cuda_runtime_version": trace.cuda_runtime_version,
            "distributed_info": trace.distributedInfo,
        }.items()
        if v is not None
    }
    if trace.distributedInfo and isinstance(trace.distributedInfo.get("rank"), int):
        ev["rank"] = np.int16(trace.distributedInfo["rank"])
    return Timeline(validate(ev, source), meta)
