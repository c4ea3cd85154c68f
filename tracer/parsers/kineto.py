"""Kineto / Chrome trace JSON (what ``torch.profiler`` writes) → canonical timeline.

Speed matters: a real training trace is 100 MB – 1 GB of JSON. Rather than building Python dicts for every
event (``json``/``orjson.loads``), msgspec decodes straight into small typed structs holding only the fields
tracer needs; unknown keys are skipped inside the C decoder. The events are decoded a few thousand at a time
and each chunk is turned into column arrays at once, while its structs are still in the CPU cache; only the
columns outlive the chunk, so memory stays near the size of the file (see ``_CHUNK_EVENTS``).
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Union

import msgspec
import numpy as np
import pandas as pd

from tracer.errors import TraceFormatError
from tracer.timeline import (
    COLUMNS,
    COPY_KINDS,
    HOST_DEVICE,
    HOST_STREAM,
    KINDS,
    Timeline,
    TraceMeta,
    build_events,
    validate,
)


# gc=False: these structs hold only str/int/float/None and each other, so they can never be part of a
# reference cycle. Left tracked, the millions of them a large trace decodes into set off full collections
# over and over while decoding (on a 114 MB trace: 0.6 s to decode tracked, 0.2 s untracked).
class _Args(msgspec.Struct, gc=False):
    device: Union[int, None] = None
    stream: Union[int, None] = None
    correlation: Union[int, None] = None
    bytes: Union[int, None] = None
    name: Union[str, None] = None  # "M" metadata events carry their name here
    # tracer's own Chrome export draws some rows on another track and keeps their real pid/tid here
    tracer_pid: Union[int, None] = None
    tracer_tid: Union[int, None] = None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    # pid/tid are ints in torch traces but strings in the profiler's own "Spans"/"Traces" rows
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Union[float, None] = None  # msgspec decodes JSON integers into float fields too
    dur: Union[float, None] = None
    args: Union[_Args, None] = None


# The same events told apart by "ph" inside the decoder (a tagged union): "X" complete events with the fields
# above, "M" metadata with what names a process or thread, and every other phase of the Chrome trace format
# (flows, instants, counters, async ...) as an empty struct whose fields are skipped unread. A chunk with a
# phase not listed, or an event without "ph", is decoded again as plain _Event.
class _X(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    cat: str = ""
    name: str = ""
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Union[float, None] = None
    dur: Union[float, None] = None
    args: Union[_Args, None] = None


class _M(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    name: str = ""
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    args: Union[_Args, None] = None


_OTHER_PHASES = "B E i I C b n e S T p F s t f P N O D R c ( )".split()
_Tagged = Union[
    (_X, _M)
    + tuple(
        msgspec.defstruct(f"_Skip{i}", [], gc=False, tag_field="ph", tag=ph)
        for i, ph in enumerate(_OTHER_PHASES)
    )
]


class _Trace(msgspec.Struct):
    # Only delimited here: each msgspec.Raw is a view of one event's bytes, decoded later a chunk at a time.
    traceEvents: list[msgspec.Raw] = []
    baseTimeNanoseconds: Union[int, None] = None
    deviceProperties: list[dict[str, Any]] = []
    schemaVersion: Union[int, None] = None
    cuda_driver_version: Union[int, None] = None
    cuda_runtime_version: Union[int, None] = None
    distributedInfo: Union[dict[str, Any], None] = None


class _TraceTail(msgspec.Struct):
    """The last events of a trace and the top-level fields after them (see :class:`_FastChunks`).

    UNSET tells a field the tail lacks from one it holds (which then wins, as the later key does in JSON).
    """

    traceEvents: list[_Tagged] = []
    baseTimeNanoseconds: Union[int, None, msgspec.UnsetType] = msgspec.UNSET
    deviceProperties: Union[list[dict[str, Any]], msgspec.UnsetType] = msgspec.UNSET
    schemaVersion: Union[int, None, msgspec.UnsetType] = msgspec.UNSET
    cuda_driver_version: Union[int, None, msgspec.UnsetType] = msgspec.UNSET
    cuda_runtime_version: Union[int, None, msgspec.UnsetType] = msgspec.UNSET
    distributedInfo: Union[dict[str, Any], None, msgspec.UnsetType] = msgspec.UNSET


_DECODER = msgspec.json.Decoder(_Trace)
_TAIL_DECODER = msgspec.json.Decoder(_TraceTail)
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_TAGGED_LIST_DECODER = msgspec.json.Decoder(list[_Tagged])
_EVENT_LIST_DECODER = msgspec.json.Decoder(list[_Event])

#: Bytes of JSON per chunk when the events array is split without a pre-scan (~2000 Kineto events).
_CHUNK_BYTES = 512 * 1024
_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_GAP_RE = re.compile(rb"\}\s*,\s*\{")

#: Events decoded and turned into columns per chunk: few enough that a chunk's structs (~0.5 KB each) are
#: still in the CPU cache for the dozen passes that read them. On a 114 MB trace, decoding every event first
#: and making columns after takes 0.48 s; chunks of 2000 take 0.19 s.
_CHUNK_EVENTS = 2000

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
#: Kinds whose rows sit on a GPU lane (device, stream) rather than on the host.
_GPU_LANE_KINDS = ("kernel", "memcpy", "memset", "gpu_range")

_COPY_KIND_RE = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD|AtoH|HtoA|AtoA)\b")
_COPY_KIND_MAP = {"DtoA": "DtoD", "AtoD": "DtoD", "AtoA": "DtoD", "AtoH": "DtoH", "HtoA": "HtoD"}
_LEADING_SPACE = re.compile(rb"[ \t\r\n\x0b\x0c]*")
_CHUNK_PATH_RE = re.compile(r"`\$\[(\d+)\]")


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


def _int_column(values: list[Any]) -> np.ndarray:
    """pid/tid: ints, or -1 where the trace has a string or nothing."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_as_int(v) for v in values], dtype=np.int64)


def _optional_int_column(values: list[Any]) -> np.ndarray:
    """Ints or None as float64 with nan for None, converted in C (exact below 2**53)."""
    return np.array(values, dtype=np.float64)


def _nullable_int_column(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Ints or None as (int64 values, missing mask): via float64 in C, or exactly in Python past 2**53."""
    as_float = _optional_int_column(values)
    missing = np.isnan(as_float)
    as_float[missing] = 0.0
    if not len(as_float) or np.abs(as_float).max() < 2.0**53:
        return as_float.astype(np.int64), missing
    return np.array([0 if v is None else v for v in values], dtype=np.int64), missing


class _Codes(dict):
    """str -> code, numbering strings as they are first looked up (``codes[s]`` never raises)."""

    def __missing__(self, key: str) -> int:
        code = self[key] = len(self)
        return code


def decode(data: bytes, source: str) -> _Trace:
    """Split trace bytes into top-level fields and raw events; a clear error for anything not a trace."""
    try:
        if _is_bare_array(data):  # the bare-array flavour of the Chrome trace format
            return _Trace(traceEvents=_RAW_LIST_DECODER.decode(data))
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(source, f"not a Kineto/Chrome trace: {exc}") from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg.lower():
            raise TraceFormatError(
                source, "truncated JSON: the file ends mid-trace (was the profiler stopped?)"
            ) from None
        raise TraceFormatError(source, f"invalid JSON: {msg}") from None


def _is_bare_array(data: bytes) -> bool:
    first = _LEADING_SPACE.match(data).end()  # (data.lstrip() would copy the whole trace)
    return data[first : first + 1] == b"["


def _decode_chunk(
    raws: list[msgspec.Raw], offset: int, prefix: str, source: str
) -> tuple[list[Any], list[Any]]:
    """The complete ("X") and the metadata ("M") events among ``raws``, decoded."""
    buf = b"[" + b",".join(raws) + b"]"
    try:
        events = _TAGGED_LIST_DECODER.decode(buf)
        return [e for e in events if e.__class__ is _X], [e for e in events if e.__class__ is _M]
    except msgspec.ValidationError:
        pass  # a phase _Tagged does not list, or an event without "ph"
    try:
        events = _EVENT_LIST_DECODER.decode(buf)
        return [e for e in events if e.ph == "X"], [e for e in events if e.ph == "M"]
    except msgspec.ValidationError as exc:
        # Name the event by its index in the whole trace, not in the chunk.
        msg = _CHUNK_PATH_RE.sub(lambda m: f"`{prefix}[{int(m.group(1)) + offset}]", str(exc))
        raise TraceFormatError(source, f"not a Kineto/Chrome trace: {msg}") from None


class _Unsure(Exception):
    """The fast split met something it cannot vouch for: parse the careful way."""


class _FastChunks:
    """The events of a trace, decoded in chunks cut at the gaps between events, without scanning it first.

    The cuts are guessed (a ``}`` , ``{`` gap may also sit inside an event's args), but every piece is
    decoded on its own: the top-level fields before the events (as ``{...,"traceEvents":[]}``), each chunk
    (as ``[...]``) and the last chunk together with the rest of the file (as ``{"traceEvents":[...``). Pieces
    that are all valid JSON can only come from cuts between top-level events, so their events are exactly the
    file's. A piece that fails raises :class:`_Unsure`, and the caller starts over the careful way (a full
    pre-scan by msgspec, which also words the error). ``trace`` holds the top-level fields once iteration is
    over.
    """

    def __init__(self, data: bytes, key: re.Match[bytes]) -> None:
        self.data, self.key = data, key
        self.trace: _Trace | None = None
        self.count = 0

    def __iter__(self) -> Iterator[tuple[list[Any], list[Any]]]:
        data, view = self.data, memoryview(self.data)
        try:
            head = _DECODER.decode(data[: self.key.start()] + b'"traceEvents":[]}')
            pos = self.key.end()
            while (gap := _EVENT_GAP_RE.search(data, pos + _CHUNK_BYTES)) is not None:
                events = _TAGGED_LIST_DECODER.decode(b"".join((b"[", view[pos : gap.start() + 1], b"]")))
                pos = gap.end() - 1
                self.count += len(events)
                yield [e for e in events if e.__class__ is _X], [e for e in events if e.__class__ is _M]
            tail = _TAIL_DECODER.decode(b"".join((b'{"traceEvents":[', view[pos:])))
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise _Unsure from None
        events = tail.traceEvents
        self.count += len(events)
        self.trace = _Trace(traceEvents=[])
        for f in _Trace.__struct_fields__[1:]:
            value = getattr(tail, f)
            setattr(self.trace, f, getattr(head, f) if value is msgspec.UNSET else value)
        yield [e for e in events if e.__class__ is _X], [e for e in events if e.__class__ is _M]


#: What _Columns keeps per chunk ("_na": the mask of a nullable column).
_PARTS = ("start", "end", "kind", "name", "pid", "tid", "device", "stream")
_PARTS += ("bytes", "bytes_na", "correlation", "correlation_na", "pid_given")


class _Columns:
    """The timeline columns of a trace's "X" events, built a chunk at a time."""

    def __init__(self) -> None:
        self.cats, self.names = _Codes(), _Codes()
        self.kind_of_cat = np.zeros(0, dtype=np.int8)  # -1: a category that is skipped
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in _PARTS}

    def add(self, xs: list[Any]) -> None:
        """Append the rows of one chunk's "X" events: a list comprehension per field, made an array in C."""
        ts = np.array([e.ts for e in xs], dtype=np.float64)  # None -> nan
        cat = np.array([self.cats[e.cat] for e in xs], dtype=np.int32)
        if len(self.kind_of_cat) != len(self.cats):
            self.kind_of_cat = np.array(
                [-1 if c in _SKIP_CATS else KINDS.index(_KIND_BY_CAT.get(c, "other")) for c in self.cats],
                dtype=np.int8,
            )
        kind = self.kind_of_cat[cat]
        keep = (kind >= 0) & ~np.isnan(ts)
        if not keep.all():
            xs = [xs[i] for i in np.flatnonzero(keep).tolist()]
            ts, kind = ts[keep], kind[keep]
        dur = np.array([e.dur for e in xs], dtype=np.float64)
        dur[np.isnan(dur)] = 0.0
        too_far = np.abs(ts) + np.maximum(dur, 0.0) >= _MAX_US
        if too_far.any():
            i = int(np.flatnonzero(too_far)[0])
            raise TraceFormatError(
                "", f"event {xs[i].name!r}: ts {ts[i]:g} µs + dur {dur[i]:g} µs is beyond what int64 ns can hold"
            )
        # Both ends are rounded as points in time (end = ts + dur), so that the union of back-to-back
        # intervals has no 1-ns seams; this is also how the reference figures in tests/data/FIXTURES.md
        # were computed.
        start = _us_to_ns(ts)
        end = np.maximum(_us_to_ns(ts + np.maximum(dur, 0.0)), start)
        pid = _int_column([e.pid for e in xs])
        tid = _int_column([e.tid for e in xs])
        no_args = _Args()
        args = [e.args or no_args for e in xs]
        pid_given = np.zeros(len(xs), dtype=bool)  # the Chrome export kept the real pid in args
        for column, values, mark in (
            (pid, [a.tracer_pid for a in args], pid_given),
            (tid, [a.tracer_tid for a in args], None),
        ):
            if values.count(None) != len(values):
                moved = _optional_int_column(values)
                given = ~np.isnan(moved)
                column[given] = moved[given]
                if mark is not None:
                    mark |= given
        # GPU activities live at pid=device, tid=stream in Kineto; args say the same more reliably. Only GPU
        # rows (a tenth, typically) have args.device/stream read.
        device = np.full(len(xs), HOST_DEVICE, dtype=np.int64)
        stream = np.full(len(xs), HOST_STREAM, dtype=np.int64)
        on_gpu = np.flatnonzero(np.isin(kind, _GPU_LANE_CODES))
        if len(on_gpu):
            gpu_args = [args[i] for i in on_gpu.tolist()]
            for out, values, fallback in (
                (device, [a.device for a in gpu_args], pid),
                (stream, [a.stream for a in gpu_args], tid),
            ):
                given = np.nan_to_num(_optional_int_column(values), nan=-1).astype(np.int64)
                out[on_gpu] = np.where(given < 0, fallback[on_gpu], given)
        p = self.parts
        p["start"].append(start)
        p["end"].append(end)
        p["kind"].append(kind)
        p["name"].append(np.array([self.names[e.name] for e in xs], dtype=np.int32))
        p["pid"].append(pid)
        p["pid_given"].append(pid_given)
        p["tid"].append(tid)
        p["device"].append(device)
        p["stream"].append(stream)
        for key, values in (
            ("bytes", [a.bytes for a in args]),
            ("correlation", [a.correlation for a in args]),
        ):
            ints, missing = _nullable_int_column(values)
            p[key].append(ints)
            p[f"{key}_na"].append(missing)

    def columns(self, base_ns: int) -> dict[str, Any]:
        """The canonical columns, rows in time order (the parts are consumed)."""
        empty = {"kind": np.int8, "name": np.int32, "bytes_na": bool, "correlation_na": bool, "pid_given": bool}
        col = {
            k: np.concatenate(v) if v else np.zeros(0, dtype=empty.get(k, np.int64))
            for k, v in self.parts.items()
        }
        self.parts.clear()
        if base_ns:
            if len(col["end"]) and int(col["end"].max()) > np.iinfo(np.int64).max - base_ns:
                raise TraceFormatError("", f"baseTimeNanoseconds {base_ns} + ts is beyond what int64 ns can hold")
            col["start"] += base_ns
            col["end"] += base_ns
        # Name categories sorted, as pd.Categorical(names) has them.
        names = list(self.names)
        by_name = sorted(range(len(names)), key=names.__getitem__)
        rank = np.empty(len(names), dtype=np.int32)
        rank[by_name] = np.arange(len(names), dtype=np.int32)
        names = [names[i] for i in by_name]
        col["name"] = rank[col["name"]] if len(names) else col["name"]
        # Kineto files GPU rows under pid = device index; the schema's pid is the process that launched the
        # work (as nsys records it), found through the correlation id of the launching runtime/driver call.
        pid, corr = col["pid"], np.where(col["correlation_na"], -1, col["correlation"])
        on_gpu = np.isin(col["kind"], _GPU_LANE_CODES)
        is_call = np.isin(col["kind"], _CALL_CODES) & (corr >= 0)
        given = col["pid_given"]
        gpu_rows = on_gpu & (corr >= 0) & ~given
        if is_call.any() and gpu_rows.any():
            # the first call (in file order) of each correlation id
            call_corr, first = np.unique(corr[is_call], return_index=True)
            call_pid = pid[is_call][first]
            at = np.minimum(np.searchsorted(call_corr, corr[gpu_rows]), len(call_corr) - 1)
            pid[gpu_rows] = np.where(call_corr[at] == corr[gpu_rows], call_pid[at], -1)
        pid[on_gpu & ~gpu_rows & ~given] = -1
        # Direction of a copy, decided once per distinct memcpy name.
        is_copy = col["kind"] == KINDS.index("memcpy")
        copy_of_name = np.zeros(max(len(names), 1), dtype=np.int8)
        for code in np.unique(col["name"][is_copy]).tolist():
            copy_of_name[code] = COPY_KINDS.index(copy_kind_from_name(names[code]))
        col["copy"] = np.where(is_copy, copy_of_name[col["name"]], 0).astype(np.int8)
        # Rows in time order here, on plain arrays: build_events' own (stable) sort keeps them as they are.
        order = np.lexsort((col["end"], col["start"]))
        col = {k: v[order] for k, v in col.items()}
        return {
            "start_ns": col["start"],
            "end_ns": col["end"],
            "kind": pd.Categorical.from_codes(col["kind"], dtype=COLUMNS["kind"]),
            "copy_kind": pd.Categorical.from_codes(col["copy"], dtype=COLUMNS["copy_kind"]),
            "name": pd.Categorical.from_codes(col["name"], categories=pd.Index(names)),
            "device": col["device"],
            "stream": col["stream"],
            "pid": col["pid"],
            "tid": col["tid"],
            "bytes": pd.arrays.IntegerArray(col["bytes"], col["bytes_na"]),
            "correlation": pd.arrays.IntegerArray(col["correlation"], col["correlation_na"]),
        }


#: the most µs that int64 nanoseconds can hold (with room for the rounding)
_MAX_US = 9.2e15

_GPU_LANE_CODES = np.array([KINDS.index(k) for k in _GPU_LANE_KINDS], dtype=np.int8)
_CALL_CODES = np.array([KINDS.index("runtime"), KINDS.index("driver")], dtype=np.int8)


def parse_kineto_bytes(data: bytes, source: str = "") -> Timeline:
    """Parse the bytes of a Kineto / Chrome trace JSON into a :class:`Timeline`."""
    key = _EVENTS_KEY_RE.search(data)
    if key is not None:
        try:
            return _parse(data, _FastChunks(data, key), source)
        except _Unsure:
            pass
    return _parse(data, None, source)


def _careful_chunks(trace: _Trace, prefix: str, source: str) -> Iterator[tuple[list[Any], list[Any]]]:
    events = trace.traceEvents
    for offset in range(0, len(events), _CHUNK_EVENTS):
        yield _decode_chunk(events[offset : offset + _CHUNK_EVENTS], offset, prefix, source)


def _parse(data: bytes, fast: _FastChunks | None, source: str) -> Timeline:
    if fast is None:
        trace = decode(data, source)
        count = len(trace.traceEvents)
        chunks: Iterator[tuple[list[Any], list[Any]]] = _careful_chunks(
            trace, "$" if _is_bare_array(data) else "$.traceEvents", source
        )
    else:
        chunks = iter(fast)
    meta = TraceMeta(format="kineto", source=source)
    # Flows ("s"/"f", cat ac2g) are not read: kernels carry args.correlation themselves.
    cols = _Columns()
    for xs, ms in chunks:
        for e in ms:
            if e.args is not None and e.args.name is not None:
                if e.name == "process_name" and type(e.pid) is int:
                    meta.process_names[e.pid] = e.args.name
                elif e.name == "thread_name" and type(e.pid) is int:
                    meta.thread_names[f"{e.pid}:{_as_int(e.tid)}"] = e.args.name
        if xs:
            cols.add(xs)
    if fast is not None:
        assert fast.trace is not None
        trace, count = fast.trace, fast.count
    trace.traceEvents = []  # the raw views: not needed while the frame is built
    if not count and trace.schemaVersion is None and trace.baseTimeNanoseconds is None:
        raise TraceFormatError(source, "JSON holds no 'traceEvents': not a Kineto/Chrome trace")
    ev = build_events(cols.columns(trace.baseTimeNanoseconds or 0))

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
