"""A Kineto / Chrome trace JSON's events scanned into column arrays: the decode and the columns, with numpy and
msgspec alone (tracer.parsers.kineto builds the timeline from them).

Speed matters: a real training trace is 100 MB – 1 GB of JSON. Rather than building Python dicts for every
event (``json``/``orjson.loads``), msgspec decodes straight into small typed structs holding only the fields
tracer needs; unknown keys are skipped inside the C decoder. The events are decoded a few thousand at a time
and each chunk is turned into column arrays at once, while its structs are still in the CPU cache; only the
columns outlive the chunk, so memory stays near the size of the file (see ``_CHUNK_EVENTS``).

No pandas, and nothing of tracer.timeline but its words (tracer.vocabulary): a job's scan workers (tracer.job.scan's
early scans) import this module and scan their part of a file (:func:`scan_kineto_part`), forked before the job's
process imports pandas.
"""

from __future__ import annotations

import decimal
import mmap
import re
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeAlias, Union, cast

import msgspec
import numpy as np
import numpy.typing as npt

from tracer.errors import TraceFormatError
from tracer.files.nsys_enums import COPY_KIND_BY_WORD, mem_kinds_from_name
from tracer.parsers._column_store import ColumnStore, reorder
from tracer.vocabulary import (
    COLLECTIVES,
    COPY_KINDS,
    HOST_DEVICE,
    HOST_STREAM,
    HUGE_BYTES,
    KINDS,
    MAX_EVENT_BYTES,
    MEM_KINDS,
    NEGATIVE_BYTES,
    message_bytes,
    normalise_collective,
)


# gc=False: these structs hold only str/int/Raw/None and each other, so they can never be part of a
# reference cycle. Left tracked, the millions of them a large trace decodes into set off full collections
# over and over while decoding (on a 114 MB trace: 0.6 s to decode tracked, 0.2 s untracked).
class _Args(msgspec.Struct, gc=False):
    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    bytes: int | None = None
    name: str | None = None  # "M" metadata events carry their name here
    # tracer's own Chrome export draws some rows on another track and keeps their real pid/tid here
    tracer_pid: int | None = None
    tracer_tid: int | None = None
    rank: int | None = None  # tracer's Chrome export of a job: the row's rank (read where tracer_pid is)
    # A collective's metadata, as PyTorch writes it on record_param_comms and (newer Kineto) on the NCCL kernel
    collective: str | None = msgspec.field(default=None, name="Collective name")
    pg_name: str | int | None = msgspec.field(default=None, name="Process Group Name")
    pg_id: int | None = msgspec.field(default=None, name="Process Group ID")  # (before "Process Group Name")
    seq: int | None = msgspec.field(default=None, name="Seq")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None
    # Kineto's cuda_sync rows (torch.profiler with enable_cuda_sync_events): the stream whose cudaEventRecord a
    # wait or an event sync waits on, and that record's correlation id (-1: not said)
    wait_on_stream: int | None = None
    wait_on_event_corr: int | None = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")


#: ts / dur are kept as the bytes of their JSON number (msgspec.Raw) and turned into integer ns from that
#: decimal text a chunk at a time (:func:`_fixed_point`), never through a float: a float64 holds an epoch
#: microsecond stamp (1.7e15 µs) only to 0.25 µs.
_NO_RAW = msgspec.Raw(b"")
_ZERO_RAW = msgspec.Raw(b"0")


# The events told apart by "ph" inside the decoder (a tagged union): "X" complete events, "B"/"E" the two ends
# of a slice (paired later), "M" metadata with what names a process or thread, and every other phase of the
# Chrome trace format (flows, instants, counters, async ...) as an empty struct whose fields are skipped
# unread.
# A chunk this typed decode refuses (a phase not listed, an event without "ph", a field of another type:
# ROCm's "bytes": "2") is decoded again loosely (_Loose) and each of its events made firm by hand.
class _X(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    cat: str = ""
    name: str = ""
    # pid/tid are ints in torch traces but strings in the profiler's own "Spans"/"Traces" rows (and in
    # PyTorch 1.8's GPU rows: tid "stream 7")
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = _NO_RAW
    dur: msgspec.Raw = _NO_RAW
    args: _Args | None = None


class _B(msgspec.Struct, gc=False, tag_field="ph", tag="B"):
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = _NO_RAW
    args: _Args | None = None


class _E(msgspec.Struct, gc=False, tag_field="ph", tag="E"):
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = _NO_RAW


class _M(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    args: _Args | None = None


_OTHER_PHASES = "i I C b n e S T p F s t f P N O D R c ( )".split()
if TYPE_CHECKING:
    # (what mypy sees: the phases read, and the skipped ones, made at run time, as any Struct)
    _Tagged: TypeAlias = _X | _B | _E | _M | msgspec.Struct
else:
    _Tagged = Union[  # noqa: UP007 (a Union built from a tuple has no X | Y spelling)
        (_X, _B, _E, _M)
        + tuple(
            msgspec.defstruct(f"_Skip{i}", [], gc=False, tag_field="ph", tag=ph)
            for i, ph in enumerate(_OTHER_PHASES)
        )
    ]


class _Loose(msgspec.Struct, gc=False):
    """An event of any shape: what the typed decode refused is read from this by :func:`_firm`."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = _NO_RAW
    dur: msgspec.Raw = _NO_RAW
    args: Any = None


#: an entry of "traceEvents" that may not even be an object
_LooseItem = _Loose | None | bool | int | float | str | list[Any]


class TraceFields(msgspec.Struct):
    """A trace's top-level fields, and its events still as raw bytes."""

    # Only delimited here: each msgspec.Raw is a view of one event's bytes, decoded later a chunk at a time.
    # The top-level fields are read loosely (Any) and checked where the timeline is built: a field of an
    # unexpected type is ignored, not a reason to refuse the trace.
    traceEvents: list[msgspec.Raw] | msgspec.UnsetType = msgspec.UNSET
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None
    schemaVersion: Any = None
    cuda_driver_version: Any = None
    cuda_runtime_version: Any = None
    distributedInfo: Any = None
    #: tracer's own header in the Chrome traces it exports (its version; how its Python frames name lines)
    tracer: Any = None


class _TraceTail(msgspec.Struct):
    """The last events of a trace and the top-level fields after them (see :class:`_FastChunks`).

    UNSET tells a field the tail lacks from one it holds (which then wins, as the later key does in JSON).
    """

    traceEvents: list[_Tagged] = []
    baseTimeNanoseconds: Any = msgspec.UNSET
    deviceProperties: Any = msgspec.UNSET
    schemaVersion: Any = msgspec.UNSET
    cuda_driver_version: Any = msgspec.UNSET
    cuda_runtime_version: Any = msgspec.UNSET
    distributedInfo: Any = msgspec.UNSET
    tracer: Any = msgspec.UNSET


class _LooseTraceTail(_TraceTail):
    # (a looser element type on purpose: msgspec decodes each event as it is, for _firm to sort out)
    traceEvents: list[_LooseItem] = []  # type: ignore[assignment]


_DECODER = msgspec.json.Decoder(TraceFields)
_TAIL_DECODER = msgspec.json.Decoder(_TraceTail)
_LOOSE_TAIL_DECODER = msgspec.json.Decoder(_LooseTraceTail)
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_TAGGED_LIST_DECODER = msgspec.json.Decoder(list[_Tagged])
_LOOSE_LIST_DECODER = msgspec.json.Decoder(list[_LooseItem])

#: Bytes of JSON per chunk when the events array is split without a pre-scan (~2000 Kineto events).
_CHUNK_BYTES = 512 * 1024
_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_GAP_RE = re.compile(rb"\}\s*,\s*\{")

#: Events decoded and turned into columns per chunk: few enough that a chunk's structs (~0.5 KB each) are
#: still in the CPU cache for the dozen passes that read them. On a 114 MB trace, decoding every event first
#: and making columns after takes 0.48 s; chunks of 2000 take 0.19 s.
_CHUNK_EVENTS = 2000

# Kineto category -> timeline kind. Anything not listed becomes "other" (kept, not dropped). Looked up as
# written, then in lower case: PyTorch 1.8's Kineto wrote "Kernel", "Memcpy", "Memset", "Runtime", "Operator".
_KIND_BY_CAT: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "python_function": "python",  # (with_stack=True: the Python frames; never ops)
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "hip_runtime": "runtime",
    "cuda_driver": "driver",
    "driver": "driver",
    "hip_driver": "driver",
    "user_annotation": "range",
    "gpu_user_annotation": "gpu_range",
    "cuda_sync": "sync",
}
# The profiler's own bookkeeping spans ("PyTorch Profiler (0)") are not part of the workload.
_SKIP_CATS = frozenset({"Trace"})
#: Kinds whose rows sit on a GPU lane (device, stream) rather than on the host.
_GPU_LANE_KINDS = ("kernel", "memcpy", "memset", "gpu_range")


def _kind_of_cat(cat: str) -> int:
    """The KINDS index of a category, or -1 for one that is skipped."""
    if cat in _SKIP_CATS:
        return -1
    return KINDS.index(_KIND_BY_CAT.get(cat) or _KIND_BY_CAT.get(cat.lower(), "other"))


# CUDA's names ("Memcpy DtoH (Device -> Pinned)"; ROCm's Kineto writes the same) and, from older roctracer
# builds, HIP's ("CopyDeviceToHost").
_COPY_KIND_RE = re.compile(
    r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD|AtoH|HtoA|AtoA)\b|(Host|Device|Peer)To(Host|Device|Peer)"
)
_LONG_KIND = {"Host": "H", "Device": "D", "Peer": "P"}
_LEADING_SPACE = re.compile(rb"[ \t\r\n\x0b\x0c]*")


def copy_kind_from_name(name: str) -> str:
    """Direction of a Kineto memcpy from its name ("Memcpy DtoH (Device -> Pinned)" → "DtoH")."""
    m = _COPY_KIND_RE.search(name)
    if not m:
        return "Other"
    if m.group(1):
        return COPY_KIND_BY_WORD[m.group(1).upper()]  # (arrays count as device memory: "DtoA" → "DtoD")
    src, dst = _LONG_KIND[m.group(2)], _LONG_KIND[m.group(3)]
    if "P" in (src, dst):
        return "PtoP" if src == dst else "Other"
    return f"{src}to{dst}"


# ---------------------------------------------------------------------------------------------------------
# Exact times: decimal text of µs -> integer ns
#
# A chunk's numbers are joined into one buffer; for each, the 16 characters before its dot (or where its dot
# would be) and the 8 after are read as three little-endian uint64 words, the characters outside the number
# masked to '0', and each word's eight digits are checked and summed with a few multiplications (SWAR, as in
# simdjson's parse_eight_digits_unrolled). The result is the value as whole ns plus the rest in units of
# 1e-9 ns, exactly. Numbers this cannot hold (an exponent, more than 16 integer digits or 8 decimals, a
# string, null, anything not a number) are left to :func:`_decimal` one at a time.

_INT_DIGITS, _FRAC_DIGITS = 16, 8
#: a first and last "number" that the reads around the real ones can run into
_PAD_RAW = msgspec.Raw(b"0" * 24)
_RAW_LIST_ENCODER = msgspec.json.Encoder()
_ASCII0 = np.uint64(0x3030303030303030)
_HIGH = np.uint64(0xF0F0F0F0F0F0F0F0)
_SIX = np.uint64(0x0606060606060606)
_PAIR_MASK = np.uint64(0x000000FF000000FF)
_MUL1 = np.uint64(100 + (1000000 << 32))
_MUL2 = np.uint64(1 + (10000 << 32))
_U8, _U10, _U16, _U32 = (np.uint64(x) for x in (8, 10, 16, 32))
#: whole µs from which µs * 1000 (+ a duration) would leave int64's range
_MAX_WHOLE_US = 9_200_000_000_000_000
_MAX_NS = _MAX_WHOLE_US * 1000
#: the part of a value below 1 ns is kept in units of 1e-9 ns
_SUB_ONE = 1_000_000_000
_SUB_HALF = _SUB_ONE // 2


def _byte_masks() -> np.ndarray:
    full = (1 << 64) - 1
    lead = [(1 << (8 * c)) - 1 for c in range(_INT_DIGITS + 1)]  # the c bytes left of a number
    tail = [full ^ ((1 << (8 * c)) - 1) for c in range(_FRAC_DIGITS + 1)]  # the bytes after c decimals
    return np.array([m & full for m in lead] + [m >> 64 for m in lead] + tail, dtype=np.uint64)


#: [c]: first word's mask for c bytes left of the number, [17 + c]: the second word's, [34 + c]: decimals'
_MASKS = _byte_masks()


def _eight_digits(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eight ASCII digits per uint64 (the first in the lowest byte) → their value, and whether all are
    digits."""
    ok = ((w & _HIGH) == _ASCII0) & (((w + _SIX) & _HIGH) == _ASCII0)
    w = w - _ASCII0
    w = w * _U10 + (w >> _U8)
    return (((w & _PAIR_MASK) * _MUL1) + (((w >> _U16) & _PAIR_MASK) * _MUL2)) >> _U32, ok


def _fixed_point(raws: list[msgspec.Raw]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """µs numbers as JSON text → (floor of the value in ns, the rest in 1e-9 ns, read here?) exactly.

    ``raws`` starts and ends with ``_PAD_RAW`` (room for the reads before the first number and after the
    last); the arrays are for the numbers between. Rows with False in the third array were not read (see the
    comment above); their values are meaningless.
    """
    return _fixed_point_of(_RAW_LIST_ENCODER.encode(raws), len(raws) - 2)


def _fixed_point_of(joined: bytes, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_fixed_point` of the ``n`` numbers in ``joined``, their list as JSON text (with the pads)."""
    buf = np.frombuffer(joined, dtype=np.uint8)
    commas = np.flatnonzero(buf == 44)
    if len(commas) != n + 1:  # a comma inside a string: leave the lot to _decimal
        zero = np.zeros(n, dtype=np.int64)
        return zero, zero, np.zeros(n, dtype=bool)
    starts, ends = commas[:-1] + 1, commas[1:]
    dots = np.flatnonzero(buf == 46)
    if len(dots) == n and bool(((dots > starts) & (dots < ends)).all()):
        dot = dots  # one dot in each number, as Kineto writes them
    else:
        dot = ends.copy()  # where the dot is, or would be
        if len(dots):
            dot[np.searchsorted(commas, dots) - 1] = dots
    lead = dot - starts  # characters before the dot, a sign included
    decimals = ends - dot - 1
    neg = buf[starts] == 45
    ok = (lead <= _INT_DIGITS) & (decimals <= _FRAC_DIGITS) & (lead > neg)
    at = np.where(ok, dot, _INT_DIGITS)
    pad = np.where(ok, _INT_DIGITS - lead + neg, 0)
    # every byte offset of the buffer read as a little-endian uint64 (numpy reads unaligned views fine)
    words = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=joined, strides=(1,))
    w = words[np.concatenate((at - _INT_DIGITS, at - 8, at + 1))]
    m = _MASKS[np.concatenate((pad, pad + _INT_DIGITS + 1, np.where(ok, np.maximum(decimals, 0), 0) + 34))]
    value, digits = _eight_digits((w & ~m) | (_ASCII0 & m))
    ok &= digits[:n] & digits[n : 2 * n] & digits[2 * n :]
    value = value.astype(np.int64)
    whole = value[:n] * 100_000_000 + value[n : 2 * n]
    ok &= whole < _MAX_WHOLE_US
    ns, sub = np.divmod(value[2 * n :], 100_000)
    ns += np.where(ok, whole, 0) * 1000
    sub *= 10_000
    if neg.any():  # -(ns + sub) as a floor and a positive rest
        borrow = neg & (sub > 0)
        ns = np.where(neg, -ns - borrow, ns)
        sub = np.where(borrow, _SUB_ONE - sub, sub)
    return ns, sub, ok


# Kineto writes every ts and dur as "%.3f": whole digits, a dot, three decimals, which make whole ns with no
# rest below. When every number of a chunk is so (and below _MAX_WHOLE_US), :func:`_kineto_ns` reads them with
# a third of _fixed_point's work: no search for dots, no rest, no rounding; anything else leaves the chunk to
# _fixed_point. (Half of a parse's work on the numbers was the general path's, on numbers all alike.)
_DOT_BYTE = np.uint64(0xFF << 32)
_DOT_AT_4 = np.uint64(0x2E << 32)
_LOW_4, _HIGH_3 = np.uint64(0xFFFFFFFF), np.uint64(0xFFFFFF << 40)
_ASCII0_LOW = np.uint64(0x30)
#: [k]: the first k bytes of a word (those to read as '0')
_FIRST_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
#: where a number's three words start, counted back from the comma after it
_WORDS_BACK = np.array([[8], [16], [24]], dtype=np.intp)
#: a word's first (this - whole digits) bytes are not the number's (at least one in the first: the '0' put in)
_NOT_THE_NUMBER = np.array([[5], [12], [20]], dtype=np.intp)
_AT_LEAST = np.array([[1], [0], [0]], dtype=np.intp)


def _kineto_ns(joined: bytes, n: int) -> np.ndarray | None:
    """The ``n`` numbers of ``joined`` (as :func:`_fixed_point_of` takes them) in whole ns, exactly, if every
    one is 1-16 digits, a dot and three decimals, below :data:`_MAX_WHOLE_US`; else None.

    Three words per number, read up to the comma after it: "wxyz.abc" made "0wxyzabc" (the dot dropped, the
    seven digits below 10^7 ns), the eight digits before those, and the four before those; bytes before the
    number read as '0'."""
    buf = np.frombuffer(joined, dtype=np.uint8)
    commas = np.flatnonzero(buf == 44)
    if len(commas) != n + 1:
        return None
    ends = commas[1:]
    lead = ends - commas[:-1] - 5  # whole digits (anything else there fails the digit check)
    if not n or int(lead.min()) < 1 or int(lead.max()) > _INT_DIGITS:
        return None
    words = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=joined, strides=(1,))
    w = words[ends - _WORDS_BACK]  # (3, n): each number's three words, in one gather
    low = w[0]
    if not bool(((low & _DOT_BYTE) == _DOT_AT_4).all()):
        return None
    w[0] = ((low & _LOW_4) << _U8) | (low & _HIGH_3) | _ASCII0_LOW
    masks = _FIRST_BYTES[np.clip(_NOT_THE_NUMBER - lead, _AT_LEAST, 8)]
    value, digits = _eight_digits((w & ~masks) | (_ASCII0 & masks))
    if not bool(digits.all()):
        return None
    ns = value[0] + value[1] * np.uint64(10_000_000) + value[2] * np.uint64(10**15)  # (< 2**64)
    if int(ns.max()) >= _MAX_NS:
        return None
    out: np.ndarray = ns.astype(np.int64)
    return out


def _round_half_even(floor: npt.NDArray[np.int64], sub: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """floor + sub·1e-9 ns rounded to whole ns, halves to even."""
    up: npt.NDArray[np.bool_] = (sub > _SUB_HALF) | ((sub == _SUB_HALF) & (floor % 2 == 1))
    return floor + up


_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_NOT_A_NUMBER = object()
_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_EVEN, Emax=10**6, Emin=-(10**6))


def _decimal(raw: msgspec.Raw) -> Any:
    """One ts/dur the fast path left: a Decimal, None (missing or null) or _NOT_A_NUMBER.

    A string holding a plain number ("ts": "12.5") is read as that number, as Perfetto does.
    """
    text = bytes(raw)
    if not text or text == b"null":
        return None
    if text[:1] == b'"':
        text = msgspec.json.decode(text).strip().encode()
    s = text.decode("ascii", "replace")
    if not _NUMBER_RE.fullmatch(s):
        return _NOT_A_NUMBER
    value = decimal.Decimal(s)
    # below 1e-40 µs a value is 0 ns whichever way it is rounded; dropping it keeps the arithmetic exact
    return value if value.is_zero() or value.adjusted() > -40 else decimal.Decimal(0)


def _ns(value: decimal.Decimal) -> int:
    """µs → ns, rounded half to even."""
    scaled = _EXACT.multiply(value, 1000)
    return int(scaled.to_integral_value(rounding=decimal.ROUND_HALF_EVEN, context=_EXACT))


#: Reasons an event is skipped for a value outside what a trace can mean (see docs/formats.md).
_NEGATIVE_DUR = "dur negative"
_TOO_FAR = "ts beyond int64 ns"
_TOO_LONG = "ts + dur beyond int64 ns"  # (a ts that fits, a dur that takes the end past it)


def _event_times(xs: list[Any], skipped: Counter[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start_ns, end_ns, usable) of complete events: :func:`_times` of their ts and dur."""
    return _times([e.ts for e in xs], [e.dur for e in xs], skipped)


def _times(ts_raw: list[Any], dur_raw: list[Any], skipped: Counter[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start_ns, end_ns, usable) from the decimal text of each ts and dur.

    Both ends are rounded as points in time (end = ts + dur), so that the union of back-to-back intervals has
    no 1-ns seams; this is also how the reference figures in tests/data/FIXTURES.md were computed. A missing
    dur is 0. An event whose ts or dur is missing, not a number, negative (dur) or beyond what int64 ns can
    hold is not usable, and counted in ``skipped``.
    """
    n = len(ts_raw)
    joined = _RAW_LIST_ENCODER.encode([_PAD_RAW, *ts_raw, *dur_raw, _PAD_RAW])
    whole = _kineto_ns(joined, 2 * n)
    if whole is not None and not bool((whole[:n] >= _MAX_NS - whole[n:]).any()):
        return whole[:n], whole[:n] + whole[n:], np.ones(n, dtype=bool)  # (Kineto's own numbers: whole ns)
    ns, sub, ok = _fixed_point_of(joined, 2 * n)
    t_ns, t_sub, t_ok = ns[:n], sub[:n], ok[:n]
    d_ns, d_sub, d_ok = ns[n:], sub[n:], ok[n:]
    fast = t_ok & d_ok
    negative = fast & (d_ns < 0)
    too_far = fast & ~negative & ((t_ns >= _MAX_NS - d_ns) | (t_ns <= -_MAX_NS))
    if negative.any() or too_far.any():
        far_ts = too_far & ((t_ns >= _MAX_NS) | (t_ns <= -_MAX_NS))  # (else the end is: a dur of 1e20 µs)
        for reason, rows in ((_NEGATIVE_DUR, negative), (_TOO_FAR, far_ts), (_TOO_LONG, too_far & ~far_ts)):
            if rows.any():
                skipped[reason] += int(rows.sum())
        t_ns, d_ns = np.where(negative | too_far, 0, t_ns), np.where(negative | too_far, 0, d_ns)
    start = _round_half_even(t_ns, t_sub)
    sub = t_sub + d_sub
    carry = sub >= _SUB_ONE
    end = _round_half_even(t_ns + d_ns + carry, sub - carry * _SUB_ONE)
    usable = fast & ~negative & ~too_far
    for i in np.flatnonzero(~fast).tolist():
        ts, dur = _decimal(ts_raw[i]), _decimal(dur_raw[i])
        if ts is None or ts is _NOT_A_NUMBER:
            skipped["ts missing" if ts is None else "ts not a number"] += 1
            continue
        if dur is _NOT_A_NUMBER:
            skipped["dur not a number"] += 1
            continue
        dur = dur or decimal.Decimal(0)
        if dur < 0:
            skipped[_NEGATIVE_DUR] += 1
            continue
        if abs(ts) + dur >= _MAX_WHOLE_US:
            skipped[_TOO_FAR if abs(ts) >= _MAX_WHOLE_US else _TOO_LONG] += 1
            continue
        start[i], end[i] = _ns(ts), _ns(_EXACT.add(ts, dur))
        usable[i] = True
    return start, end, usable


# ---------------------------------------------------------------------------------------------------------
# Loose events: any field of any type, read where it can be read exactly, dropped where it cannot.

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_DIGITS_RE = re.compile(r"\s*[+-]?\d{1,19}\s*")


def to_int(value: Any) -> int | None:
    """An int within int64, a string of digits, or an integral float below 2**53 → int; anything else →
    None."""
    t = type(value)
    if t is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    if t is str:
        if not _DIGITS_RE.fullmatch(value):
            return None
        v = int(value)
        return v if _INT64_MIN <= v <= _INT64_MAX else None
    if t is float and value.is_integer() and abs(value) < 2.0**53:
        return int(value)
    return None


def _to_size(value: Any) -> int | None:
    """args.bytes read loosely: like :func:`to_int`, but a number beyond int64 stays a number (±2**64), so
    that it is skipped as an implausible size rather than quietly read as no size at all."""
    t = type(value)
    if t is int:
        return cast(int, value)
    if t is float and abs(value) >= 2.0**53:  # (nan is not, and stays missing)
        return int(max(min(value, 2.0**64), -(2.0**64)))
    if t is str and _LONG_DIGITS_RE.fullmatch(value):
        return -(2**64) if "-" in value else 2**64
    return to_int(value)


_LONG_DIGITS_RE = re.compile(r"\s*[+-]?\d{20,}\s*")


def _to_id(value: Any) -> int | str | None:
    """pid / tid: an int within int64 or a string, as the typed decode gives them."""
    if type(value) is str:
        return value
    return to_int(value)


def _firm_args(args: Any) -> _Args | None:
    if type(args) is not dict:
        return None
    name = args.get("name")
    return _Args(
        device=to_int(args.get("device")),
        stream=to_int(args.get("stream")),
        correlation=to_int(args.get("correlation")),
        bytes=_to_size(args.get("bytes")),
        name=name if type(name) is str else None,
        tracer_pid=to_int(args.get("tracer_pid")),
        tracer_tid=to_int(args.get("tracer_tid")),
        rank=to_int(args.get("rank")),
        collective=_str_or_none(args.get("Collective name")),
        pg_name=_str_or_none(args.get("Process Group Name")) or to_int(args.get("Process Group Name")),
        pg_id=to_int(args.get("Process Group ID")),
        seq=to_int(args.get("Seq")),
        group_size=to_int(args.get("Group size")),
        in_nelems=to_int(args.get("In msg nelems")),
        out_nelems=to_int(args.get("Out msg nelems")),
        dtype=_str_or_none(args.get("dtype")),
        wait_on_stream=to_int(args.get("wait_on_stream")),
        wait_on_event_corr=to_int(args.get("wait_on_cuda_event_record_corr_id")),
    )


def _str_or_none(value: Any) -> str | None:
    return value if type(value) is str else None


def _text(value: Any) -> str:
    return value if type(value) is str else ""


def _firm(items: list[Any], skipped: Counter[str]) -> list[Any]:
    """The X, B, E and M events among loosely decoded ``items``, as the typed structs."""
    out: list[Any] = []
    for e in items:
        if e.__class__ is not _Loose:
            skipped["not an event object"] += 1
            continue
        ph = e.ph
        if ph == "X":
            out.append(_X(cat=_text(e.cat), name=_text(e.name), pid=_to_id(e.pid), tid=_to_id(e.tid), ts=e.ts,
                          dur=e.dur, args=_firm_args(e.args)))
        elif ph == "B":
            out.append(_B(cat=_text(e.cat), name=_text(e.name), pid=_to_id(e.pid), tid=_to_id(e.tid), ts=e.ts,
                          args=_firm_args(e.args)))
        elif ph == "E":
            out.append(_E(pid=_to_id(e.pid), tid=_to_id(e.tid), ts=e.ts))
        elif ph == "M":
            out.append(_M(name=_text(e.name), pid=_to_id(e.pid), tid=_to_id(e.tid), args=_firm_args(e.args)))
        elif type(ph) is not str:
            skipped["no ph"] += 1
    return out


def _decode_events(buf: bytes, skipped: Counter[str]) -> list[Any]:
    """A JSON array of events → its typed events (flows, instants ... as empty structs); a loose decode of
    the same when the typed one refuses it. Raises msgspec.DecodeError for invalid JSON."""
    try:
        return _TAGGED_LIST_DECODER.decode(buf)
    except msgspec.ValidationError:
        return _firm(_LOOSE_LIST_DECODER.decode(buf), skipped)


# ---------------------------------------------------------------------------------------------------------


def _as_int(value: Any, default: int = -1) -> int:
    v = to_int(value)
    return default if v is None else v


def _int_column(values: list[Any]) -> np.ndarray:
    """pid/tid: ints (a string of digits read as one), or -1 where the trace has another string or nothing."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_as_int(v) for v in values], dtype=np.int64)


def _optional_int_column(values: list[Any]) -> np.ndarray:
    """Ints or None as float64 with nan for None (and for ints beyond int64), converted in C where it can."""
    if values.count(None) == len(values):  # (a chunk of CPU ops has no correlation id, no bytes: ~1 ns a row)
        return np.full(len(values), np.nan)
    try:
        out = np.array(values, dtype=np.float64)
    except OverflowError:  # an int beyond float64
        exact = [to_int(v) for v in values]
        out = np.array([np.nan if v is None else float(v) for v in exact], dtype=np.float64)
    if len(out) and np.nanmax(np.abs(out), initial=0.0) >= 2.0**63:
        out[np.abs(out) >= 2.0**63] = np.nan
    return out


def _nullable_int_column(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Ints or None as (int64 values, missing mask): via float64 in C, or exactly in Python past 2**53.

    An int beyond int64 (a correlation id of 2**64) is missing, not an error: these columns are only compared.
    """
    as_float = _optional_int_column(values)
    missing = np.isnan(as_float)
    as_float[missing] = 0.0
    if not len(as_float) or np.abs(as_float).max() < 2.0**53:
        return as_float.astype(np.int64), missing
    exact = [to_int(v) for v in values]
    missing = np.array([v is None for v in exact], dtype=bool)
    return np.array([0 if v is None else v for v in exact], dtype=np.int64), missing


def _bytes_column(values: list[Any]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """args.bytes → (int64 values, missing mask, {reason: rows to skip}).

    A size below 0 or above :data:`MAX_EVENT_BYTES` is not a size a copy can have (a field that wrapped, or a
    pointer): the event is skipped and counted rather than summed into totals that would then overflow or turn
    negative. Every size kept is below 2**53, so its float64 is exact.
    """
    if values.count(None) == len(values):
        return np.zeros(len(values), dtype=np.int64), np.ones(len(values), dtype=bool), {}
    try:
        as_float = np.array(values, dtype=np.float64)
    except (OverflowError, TypeError, ValueError):  # an int beyond float64: certainly too big
        as_float = np.array(
            [np.nan if v is None else float(min(max(v, -(2**1000)), 2**1000)) for v in values], dtype=np.float64
        )
    missing = np.isnan(as_float)
    bad = {
        NEGATIVE_BYTES: ~missing & (as_float < 0),
        HUGE_BYTES: ~missing & (as_float > MAX_EVENT_BYTES),
    }
    usable = ~missing & (as_float >= 0) & (as_float <= MAX_EVENT_BYTES)
    ints = np.where(usable, as_float, 0.0).astype(np.int64)
    return ints, missing, {k: v for k, v in bad.items() if v.any()}


_TRAILING_INT_RE = re.compile(r"(?:^|\D)(\d{1,9})\s*$")


def _lane_from_text(value: Any) -> int:
    """A device or stream from a string pid/tid ("stream 7" → 7, "GPU 1" → 1), else -1."""
    if type(value) is str:
        m = _TRAILING_INT_RE.search(value)
        if m:
            return int(m.group(1))
    return -1


class _Codes(dict[str, int]):
    """str -> code, numbering strings as they are first looked up (``codes[s]`` never raises)."""

    def __missing__(self, key: str) -> int:
        code = self[key] = len(self)
        return code


def decode(data: bytes, source: str) -> TraceFields:
    """Split trace bytes into top-level fields and raw events; a clear error for anything not a trace."""
    try:
        if _is_bare_array(data):  # the bare-array flavour of the Chrome trace format
            return TraceFields(traceEvents=_RAW_LIST_DECODER.decode(data))
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
    m = _LEADING_SPACE.match(data)  # (data.lstrip() would copy the whole trace)
    first = m.end() if m else 0  # (it always matches, maybe nothing)
    return data[first : first + 1] == b"["


_RARE = frozenset({_M, _B, _E})


def _split(events: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """A chunk's events → (complete "X", metadata "M", slice ends "B"/"E")."""
    rare = [e for e in events if e.__class__ in _RARE]  # (two passes over the chunk, not three)
    return (
        [e for e in events if e.__class__ is _X],
        [e for e in rare if e.__class__ is _M],
        [e for e in rare if e.__class__ is not _M],
    )


class _Unsure(Exception):
    """The fast split met something it cannot vouch for: parse the careful way."""


class _FastChunks:
    """The events of a trace, decoded in chunks cut at the gaps between events, without scanning it first.

    The cuts are guessed (a ``}`` , ``{`` gap may also sit inside an event's args), but every piece is
    decoded on its own: the top-level fields before the events (as ``{...,"traceEvents":[]}``), each chunk
    (as ``[...]``) and the last chunk together with the rest of the file (as ``{"traceEvents":[...``). Pieces
    that are all valid JSON can only come from cuts between top-level events, so their events are exactly the
    file's. A piece that is not valid JSON raises :class:`_Unsure`, and the caller starts over the careful way
    (a full pre-scan by msgspec, which also words the error). ``trace`` holds the top-level fields once
    iteration is over.

    ``span`` (from :func:`_part_spans`): only the events from byte ``lo`` (an event's ``{``) to ``hi`` (just
    past an event's ``}``; the end of the file for the last part), for one part of a split parse. The first
    part also decodes the head, the last the rest of the file: together the parts' pieces are again a cutting
    of the whole file at guessed gaps, each decoded on its own, so the argument above holds for them all. A
    part's own top-level fields are in ``head`` / ``tail`` (UNSET: not that part's, or not in the file).
    """

    def __init__(self, data: bytes, key: re.Match[bytes], skipped: Counter[str],
                 span: tuple[int, int, bool, bool] | None = None) -> None:
        self.data, self.key, self.skipped = data, key, skipped
        self.lo, self.hi, self.first, self.last = span or (key.end(), len(data), True, True)
        self.trace: TraceFields | None = None
        self.head: Any = None
        self.tail: Any = None
        self.count = 0

    def __iter__(self) -> Iterator[list[Any]]:
        data, view, hi = self.data, memoryview(self.data), self.hi
        kept = 0 if self.first else -(-self.lo // mmap.PAGESIZE) * mmap.PAGESIZE  # (whole pages of its own only)
        try:
            head = _DECODER.decode(data[: self.key.start()] + b'"traceEvents":[]}') if self.first else None
            pos = self.lo
            # (a gap searched for before hi only: a part's chunks end where the next part begins)
            while (gap := _EVENT_GAP_RE.search(data, pos + _CHUNK_BYTES, hi)) is not None:
                piece = b"".join((b"[", view[pos : gap.start() + 1], b"]"))
                pos = gap.end() - 1
                kept = _let_go(data, kept, pos)
                try:
                    events = _TAGGED_LIST_DECODER.decode(piece)
                except msgspec.ValidationError:
                    loose = _LOOSE_LIST_DECODER.decode(piece)
                    self.count += len(loose)
                    yield _firm(loose, self.skipped)
                    continue
                self.count += len(events)
                yield events
            if not self.last:
                events = _decode_events(b"".join((b"[", view[pos:hi], b"]")), self.skipped)
                self.count += len(events)
                tail = None
            else:
                rest = b"".join((b'{"traceEvents":[', view[pos:]))
                try:
                    tail = _TAIL_DECODER.decode(rest)
                    events = tail.traceEvents
                    self.count += len(events)
                except msgspec.ValidationError:
                    tail = _LOOSE_TAIL_DECODER.decode(rest)
                    self.count += len(tail.traceEvents)
                    events = _firm(tail.traceEvents, self.skipped)
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise _Unsure from None
        if (self.first and _top_level_keys(data, 0, self.key.start())) or (
            self.last and _top_level_keys(data, pos, len(data))
        ):
            raise _Unsure  # a second "traceEvents": the careful path refuses it
        self.head, self.tail = head, tail
        if head is not None and tail is not None:
            self.trace = _top_fields(head, tail)
        yield events


#: Linux's (and macOS') madvise: a mapped file's pages dropped from this process (None: not on this platform)
_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)


def _let_go(data: bytes | mmap.mmap, kept: int, upto: int) -> int:
    """The pages of a mapped file (an ``mmap`` passed as ``data``) from ``kept`` to ``upto`` dropped from this
    process's resident set, once the scan has copied them into its pieces: a scan of a mapped file then holds
    no more of it than the chunk it is at, not the whole file (the page cache keeps the pages, and a later read
    maps them in again). ``kept`` is a page boundary; returns the next one to let go from."""
    end = upto - upto % mmap.PAGESIZE
    if end > kept and _DONTNEED is not None and type(data) is mmap.mmap:
        data.madvise(_DONTNEED, kept, end - kept)
        return end
    return kept


def _top_fields(head: Any, tail: Any) -> TraceFields:
    """The top-level fields: the tail's where it has them (the later key wins, as in JSON), else the head's."""
    trace = TraceFields(traceEvents=[])
    for f in TraceFields.__struct_fields__[1:]:
        value = getattr(tail, f)
        setattr(trace, f, getattr(head, f) if value is msgspec.UNSET else value)
    return trace


#: What _Columns keeps of each row, and as what ("_na": the mask of a nullable column).
_DTYPES: dict[str, Any] = {
    "start": np.int64, "end": np.int64, "kind": np.int8, "name": np.int32, "pid": np.int64, "tid": np.int64,
    "device": np.int64, "stream": np.int64, "bytes": np.int64, "bytes_na": bool, "correlation": np.int64,
    "correlation_na": bool, "pid_given": bool, "collective": np.int8, "pg": np.int32, "seq": np.int64,
    "seq_na": bool, "group_size": np.int32, "rank": np.int64,
}
#: Bytes of trace per row that a store's first arrays are reserved for (Kineto's complete events take 300-450
#: bytes each, with flows and metadata around them; reserving costs nothing until rows are written).
_BYTES_PER_ROW = 160


class _Columns:
    """The timeline columns of a trace's "X" events, built a chunk at a time."""

    def __init__(self, rows: int = 0) -> None:
        self.cats, self.names = _Codes(), _Codes()
        self.pgs = _Codes()
        self.pgs[""]  # code 0: no process group
        self.kind_of_cat = np.zeros(0, dtype=np.int8)  # -1: a category that is skipped
        self.store = ColumnStore(_DTYPES, rows)  # (rows: a guess of how many there will be)
        self.syncs: list[tuple[int, str, int, int, int, int]] = []  # see tracer.parsers.kineto.cuda_sync_table

    def add(
        self, xs: list[Any], skipped: Counter[str], times: tuple[np.ndarray, np.ndarray] | None = None
    ) -> None:
        """Append the rows of one chunk's complete events: a list comprehension per field, made an array in C.

        ``times``: (start_ns, end_ns) already known (B/E pairs); else they come from each event's ts and dur.
        What cannot be used is counted in ``skipped``.
        """
        # (the codes looked up by map in C: ~40 ns a row against ~55 for a comprehension that indexes)
        cat = np.fromiter(map(self.cats.__getitem__, [e.cat for e in xs]), dtype=np.int32, count=len(xs))
        if len(self.kind_of_cat) != len(self.cats):
            self.kind_of_cat = np.array([_kind_of_cat(c) for c in self.cats], dtype=np.int8)
        kind = self.kind_of_cat[cat]
        known = kind >= 0
        if not known.all():
            xs = [xs[i] for i in np.flatnonzero(known).tolist()]
            kind = kind[known]
            if times is not None:
                times = (times[0][known], times[1][known])
        if times is None:
            start, end, usable = _event_times(xs, skipped)
            if not usable.all():
                xs = [xs[i] for i in np.flatnonzero(usable).tolist()]
                kind, start, end = kind[usable], start[usable], end[usable]
        else:
            start, end = times
        pid = _int_column([e.pid for e in xs])
        tid = _int_column([e.tid for e in xs])
        no_args = _Args()
        args = [e.args or no_args for e in xs]
        pid_given = np.zeros(len(xs), dtype=bool)  # the Chrome export kept the real pid in args
        row_rank = np.full(len(xs), -1, dtype=np.int64)  # -1: the trace's own rank (distributedInfo)
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
                    # tracer's export of a job gives every row its real pid and its rank: read the ranks only
                    # then (a plain Kineto trace pays nothing for them)
                    ranks = _optional_int_column([a.rank for a in args])
                    ok = ~np.isnan(ranks) & (ranks >= 0) & (ranks < 2**15)
                    row_rank[ok] = ranks[ok].astype(np.int64)
        # GPU activities live at pid=device, tid=stream in Kineto; args say the same more reliably. Only GPU
        # rows (a tenth, typically) have args.device/stream read.
        device = np.full(len(xs), HOST_DEVICE, dtype=np.int64)
        stream = np.full(len(xs), HOST_STREAM, dtype=np.int64)
        on_gpu = np.flatnonzero(_ON_GPU_LANE[kind])
        if len(on_gpu):
            gpu_args = [args[i] for i in on_gpu.tolist()]
            for out, values, fallback, attr in (
                (device, [a.device for a in gpu_args], pid, "pid"),
                (stream, [a.stream for a in gpu_args], tid, "tid"),
            ):
                given = np.nan_to_num(_optional_int_column(values), nan=-1).astype(np.int64)
                lane = np.where(given < 0, fallback[on_gpu], given)
                # no args, and a pid / tid that is text: PyTorch 1.8 wrote tid "stream 7"
                for j in np.flatnonzero(lane < 0).tolist():
                    lane[j] = _lane_from_text(getattr(xs[int(on_gpu[j])], attr))
                out[on_gpu] = lane
            # the schema's tid of a GPU row is its stream
            tid[on_gpu] = np.where(tid[on_gpu] < 0, stream[on_gpu], tid[on_gpu])
        n_bytes, bytes_na, bad_bytes = _bytes_column([a.bytes for a in args])
        correlation, correlation_na = _nullable_int_column([a.correlation for a in args])
        keep: npt.NDArray[np.bool_] | None = None
        if len(on_gpu):
            # GPU work with no device to put it on would silently vanish from every per-GPU figure: say so
            lost = on_gpu[device[on_gpu] < 0]
            if len(lost):
                skipped["GPU work without a device"] += len(lost)
                keep = np.ones(len(xs), dtype=bool)
                keep[lost] = False
        for reason, rows in bad_bytes.items():
            rows = rows if keep is None else rows & keep
            if rows.any():
                skipped[reason] += int(rows.sum())
                keep = ~rows if keep is None else keep & ~rows
        comm = self._comm(args, n_bytes, bytes_na)
        if keep is not None:
            xs = [xs[i] for i in np.flatnonzero(keep).tolist()]
            kind, start, end, pid, tid = kind[keep], start[keep], end[keep], pid[keep], tid[keep]
            device, stream, pid_given, row_rank = device[keep], stream[keep], pid_given[keep], row_rank[keep]
            n_bytes, bytes_na = n_bytes[keep], bytes_na[keep]
            correlation, correlation_na = correlation[keep], correlation_na[keep]
            comm = {k: v[keep] for k, v in comm.items()}
        self.store.append({
            **comm, "start": start, "end": end, "kind": kind,
            "name": np.fromiter(map(self.names.__getitem__, [e.name for e in xs]), dtype=np.int32, count=len(xs)),
            "pid": pid, "pid_given": pid_given, "rank": row_rank, "tid": tid, "device": device, "stream": stream,
            "bytes": n_bytes, "bytes_na": bytes_na, "correlation": correlation, "correlation_na": correlation_na,
        })
        for i in np.flatnonzero(kind == _SYNC).tolist():  # (a few per step: waits and syncs, not the kernels)
            self.syncs.append(_sync_entry(xs[i]))

    def _comm(self, args: list[_Args], n_bytes: np.ndarray, bytes_na: np.ndarray) -> dict[str, np.ndarray]:
        """The collective columns of a chunk's rows from their args (tracer.timeline.comm reads the names later);
        a collective's message size goes into ``bytes`` where the row has none (changed in place)."""
        n = len(args)
        out: dict[str, np.ndarray] = {
            "collective": np.zeros(n, dtype=np.int8),
            "pg": np.zeros(n, dtype=np.int32),
            "seq": np.zeros(n, dtype=np.int64),
            "seq_na": np.ones(n, dtype=bool),
            "group_size": np.zeros(n, dtype=np.int32),
        }
        named = [a.collective for a in args]
        rows = [] if named.count(None) == n else [i for i, c in enumerate(named) if c is not None]
        for i in rows:  # (a few per step: the collectives, not the kernels)
            a = args[i]
            out["collective"][i] = COLLECTIVES.index(normalise_collective(a.collective or "") or "other")
            pg = a.pg_name if a.pg_name is not None else a.pg_id
            out["pg"][i] = self.pgs[str(pg)] if pg is not None else 0
            if a.seq is not None and 0 <= a.seq < 2**63:  # (msgspec hands over uint64 too)
                out["seq"][i], out["seq_na"][i] = a.seq, False
            if a.group_size is not None and 0 < a.group_size < 2**31:
                out["group_size"][i] = a.group_size
            size = message_bytes(a.in_nelems, a.out_nelems, a.dtype)
            if bytes_na[i] and size is not None and 0 <= size <= MAX_EVENT_BYTES:
                n_bytes[i], bytes_na[i] = size, False
        return out

    def arrays(self, base_ns: int) -> tuple[dict[str, np.ndarray], list[str]]:
        """The canonical columns as arrays of codes and numbers, rows in time order, and the names their
        ``name`` codes index, sorted (the parts are consumed): tracer.parsers.kineto makes the frame's columns."""
        col = self.store.columns()
        self.store = ColumnStore(_DTYPES)
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
        on_gpu = _ON_GPU_LANE[col["kind"]]
        is_call = _IS_CALL[col["kind"]] & (corr >= 0)
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
        # Memory kinds of copies and memsets, from their names too (Kineto writes no args for them).
        col["src_mem"] = np.zeros(len(col["kind"]), dtype=np.int8)
        col["dst_mem"] = np.zeros(len(col["kind"]), dtype=np.int8)
        for kind in ("memcpy", "memset"):
            rows = col["kind"] == KINDS.index(kind)
            if not rows.any():
                continue
            src_of_name = np.zeros(len(names), dtype=np.int8)
            dst_of_name = np.zeros(len(names), dtype=np.int8)
            for code in np.unique(col["name"][rows]).tolist():
                src, dst = mem_kinds_from_name(names[code], kind)
                src_of_name[code], dst_of_name[code] = MEM_KINDS.index(src), MEM_KINDS.index(dst)
            col["src_mem"][rows] = src_of_name[col["name"][rows]]
            col["dst_mem"][rows] = dst_of_name[col["name"][rows]]
        # Rows in time order here, on plain arrays: build_events' own (stable) sort keeps them as they are.
        start, end = col["start"], col["end"]
        later = (start[1:] > start[:-1]) | ((start[1:] == start[:-1]) & (end[1:] >= end[:-1]))
        if not bool(later.all()):
            col = reorder(col, _time_order(start, end))
        return col, names


_SYNC = KINDS.index("sync")


def _time_order(start: np.ndarray, end: np.ndarray) -> npt.NDArray[np.intp]:
    """``np.lexsort((end, start))``: rows by start, then end, then as they come. Sorted by start alone first
    (a stable sort, which the runs of rows already in order make quick: a quarter of lexsort's time on a GB
    trace), and that order kept where no rows of one start come with their ends out of order (in ns, starts
    are rarely equal)."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    if bool(((s[1:] == s[:-1]) & (e[1:] < e[:-1])).any()):
        return np.lexsort((end, start))
    return order


def _sync_entry(e: Any) -> tuple[int, str, int, int, int, int]:
    """(correlation, name, device, stream, wait_on_stream, wait_on_event_corr) of a cuda_sync row; -1: not said."""
    a = e.args or _Args()

    def num(v: int | None) -> int:
        return v if v is not None and -1 <= v < 2**62 else -1

    return (num(a.correlation), str(e.name), num(a.device), num(a.stream), num(a.wait_on_stream),
            num(a.wait_on_event_corr))


# kind code -> is it on a GPU lane / a runtime or driver call (a table lookup: np.isin sorts, per chunk)
_ON_GPU_LANE = np.array([k in _GPU_LANE_KINDS for k in KINDS], dtype=bool)
_IS_CALL = np.array([k in ("runtime", "driver") for k in KINDS], dtype=bool)


def _point_times(evs: list[Any], skipped: Counter[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ts in ns, usable) of B/E events: points in time, read as :func:`_times` reads a start (dur 0)."""
    t, _, usable = _times([e.ts for e in evs], [_ZERO_RAW] * len(evs), skipped)
    return t, usable


def _pair_slices(bes: list[Any], skipped: Counter[str]) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """Chrome "B"/"E" events (file order) → the "B" events of complete slices, with their (start, end) ns.

    As in the Chrome trace format, the ends pair up per (pid, tid) as a stack, in time order (file order
    between equal times): an "E" closes the latest open "B" of its thread. An "E" with nothing open and a "B"
    never closed are counted in ``skipped``.
    """
    t, usable = _point_times(bes, skipped)
    threads: dict[tuple[Any, Any], list[int]] = {}
    for i in np.flatnonzero(usable).tolist():
        e = bes[i]
        threads.setdefault((e.pid, e.tid), []).append(i)
    begins: list[int] = []
    ends: list[int] = []
    for rows in threads.values():
        rows.sort(key=lambda i: (t[i], i))
        open_: list[int] = []
        for i in rows:
            if bes[i].__class__ is _B:
                open_.append(i)
            elif open_:
                begins.append(open_.pop())
                ends.append(i)
            else:
                skipped["E without B"] += 1
        if open_:
            skipped["B without E"] += len(open_)
    b, e = np.array(begins, dtype=np.int64), np.array(ends, dtype=np.int64)
    return [bes[i] for i in begins], t[b], np.maximum(t[e], t[b])


_BOM = b"\xef\xbb\xbf"
_EVENTS_NAME = b'"traceEvents"'
_KEY_COLON_RE = re.compile(rb"\s*:")


class _TopLevelRest(msgspec.Struct):
    traceEvents: Any = None


def _top_level_keys(data: bytes, lo: int, hi: int) -> int:
    """How many "traceEvents" keys of the top-level object start in data[lo:hi].

    JSON leaves a duplicated key to the reader; msgspec keeps the last, while the chunked decoder met the
    first: which events a trace held depended on its size. So two are refused, by both paths (the chunked one
    looks only where a second could hide from it: before its key and in its last piece, and leaves the rest to
    the careful path). A key text can only be an object key (a quote inside a string is escaped); it is a
    top-level key exactly when "{" followed by the rest of the file from there is valid JSON, which only a file
    holding the text more than once pays to check.
    """
    found = 0
    at = data.find(_EVENTS_NAME, lo, hi)
    while at >= 0:
        if _KEY_COLON_RE.match(data, at + len(_EVENTS_NAME)):
            try:
                _REST_DECODER.decode(b"{" + data[at:])
                found += 1
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass
        at = data.find(_EVENTS_NAME, at + 1, hi)
    return found


_REST_DECODER = msgspec.json.Decoder(_TopLevelRest)


def _careful_chunks(events: list[msgspec.Raw], skipped: Counter[str]) -> Iterator[list[Any]]:
    for offset in range(0, len(events), _CHUNK_EVENTS):
        yield _decode_events(b"[" + b",".join(events[offset : offset + _CHUNK_EVENTS]) + b"]", skipped)


class Scan:
    """What the events of a trace (or of a part of one) give before the timeline is built: the columns of its
    complete events, its slice ends (paired once every part is in: a slice may cross a cut) and the names its
    metadata events give processes and threads."""

    def __init__(self, rows: int = 0) -> None:
        self.cols = _Columns(rows)
        self.slice_ends: list[Any] = []
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[str, str] = {}

    def add(self, events: list[Any], skipped: Counter[str]) -> None:
        xs, ms, bes = _split(events)
        for e in ms:
            if e.args is not None and e.args.name is not None:
                if e.name == "process_name" and type(e.pid) is int:
                    self.process_names[e.pid] = e.args.name
                elif e.name == "thread_name" and type(e.pid) is int:
                    self.thread_names[f"{e.pid}:{_as_int(e.tid)}"] = e.args.name
        if xs:
            self.cols.add(xs, skipped)
        if bes:
            self.slice_ends += bes

    def pair_slices(self, skipped: Counter[str]) -> None:
        """The slice ends paired (once every part is in) and each complete slice added as a row."""
        if self.slice_ends:
            begins, start, end = _pair_slices(self.slice_ends, skipped)
            if begins:
                self.cols.add(begins, skipped, times=(start, end))


def scan_kineto_bytes(data: bytes, source: str = "") -> tuple[Scan, TraceFields, Counter[str]]:
    """The bytes of a whole Kineto / Chrome trace JSON scanned: its events' columns, its top-level fields, and
    what was skipped (reason → count); tracer.parsers.kineto builds the timeline from them. A file that is not
    such a trace is a one-line :class:`TraceFormatError`; JSON nested too deeply raises RecursionError (msgspec's
    way of refusing it: the caller words it)."""
    if data[:3] == _BOM:  # a UTF-8 byte-order mark (Windows editors write one): not part of the JSON
        data = data[3:]
    key = _EVENTS_KEY_RE.search(data)
    if key is not None:
        skipped: Counter[str] = Counter()
        try:
            return _scan(data, _FastChunks(data, key, skipped), source, skipped)
        except _Unsure:
            pass
    if _top_level_keys(data, 0, len(data)) > 1:
        raise TraceFormatError(
            source,
            "two 'traceEvents' arrays at the top level: which one is the trace is ambiguous (JSON readers "
            "disagree); keep one, or merge them into one array",
        )
    return _scan(data, None, source, Counter())


def _scan(data: bytes, fast: _FastChunks | None, source: str,
          skipped: Counter[str]) -> tuple[Scan, TraceFields, Counter[str]]:
    if fast is None:
        trace = decode(data, source)
        events = [] if isinstance(trace.traceEvents, msgspec.UnsetType) else trace.traceEvents
        has_events = trace.traceEvents is not msgspec.UNSET
        chunks: Iterator[list[Any]] = _careful_chunks(events, skipped)
    else:
        chunks, has_events = iter(fast), True
    # Flows ("s"/"f", cat ac2g) are not read: kernels carry args.correlation themselves.
    scan = Scan(len(data) // _BYTES_PER_ROW)
    for events in chunks:
        scan.add(events, skipped)
    if fast is not None:
        assert fast.trace is not None
        trace = fast.trace
    trace.traceEvents = []  # the raw views: not needed while the frame is built
    if not has_events and trace.schemaVersion is None and trace.baseTimeNanoseconds is None:
        if b'"rocprofiler-sdk-tool"' in data[:65536]:
            # rocprofv3's own JSON (agents, kernel_dispatch, memory_copy records) is a format of its own
            raise TraceFormatError(
                source,
                "rocprofv3's own JSON (rocprofiler-sdk-tool) is not a format tracer reads yet: profile the "
                "PyTorch program with torch.profiler on ROCm instead, whose Kineto trace tracer reads",
            )
        raise TraceFormatError(source, "JSON holds no 'traceEvents': not a Kineto/Chrome trace")
    return scan, trace, skipped


# ---------------------------------------------------------------------------------------------------------
# One trace parsed in parts (tracer.job.scan: a rank's file on several worker processes)
#
# Part k of K scans the events from the first gap found at or after byte k·len/K up to the next part's first
# event, into a KinetoPart (plain arrays, lists and dicts: pickled back from a worker); merge_parts joins the
# parts in file order, and tracer.parsers.kineto.merge_kineto_parts builds the timeline from them as a
# whole-file parse does. Exact by construction: every row's columns come from its own event alone, in file
# order; the code tables are remapped; what needs more than one event (B/E pairs, the first runtime call of a
# correlation id, the order of the rows) is done after the merge on everything at once. A part that cannot vouch
# for its pieces (a gap inside a string at its cut, invalid JSON, anything the careful path exists for) gives
# None, and the whole file is parsed the usual way: the same timeline or the same one-line error. (Which files
# are split, and into how many parts: tracer.job.scan.split_counts.)

class KinetoPart(msgspec.Struct):
    """What one part of a trace's events gave (see :func:`scan_kineto_part`): the columns of its complete
    events (one array each, codes into its own ``names`` / ``pgs``), its cuda_sync entries, slice ends and
    process/thread names, what it skipped, and the top-level fields it read (the first part the head's, the
    last the tail's; None elsewhere)."""

    columns: dict[str, Any]
    names: list[str]
    pgs: list[str]
    syncs: list[Any]
    slice_ends: list[Any]
    process_names: dict[int, str]
    thread_names: dict[str, str]
    skipped: dict[str, int]
    head: dict[str, Any] | None = None
    tail: dict[str, Any] | None = None


def _part_spans(data: bytes, key: re.Match[bytes], parts: int) -> list[tuple[int, int, bool, bool]]:
    """(lo, hi, first, last) of each part's events: part k starts at the first gap at or after byte k·len/K
    (fewer parts where two would start at the same gap, or none is found); the same cuts for every part."""
    starts, ends = [key.end()], []
    for k in range(1, parts):
        gap = _EVENT_GAP_RE.search(data, max(len(data) * k // parts, key.end()))
        if gap is None:
            break
        if gap.end() - 1 > starts[-1]:
            # (a part ends just past the "}" before the next part's "{": the gap's comma belongs to neither)
            starts.append(gap.end() - 1)
            ends.append(gap.start() + 1)
    ends.append(len(data))
    return [(lo, hi, k == 0, k == len(starts) - 1) for k, (lo, hi) in enumerate(zip(starts, ends, strict=True))]


def scan_kineto_part(data: bytes, part: int, parts: int) -> KinetoPart | None:
    """Part ``part`` of ``parts`` of a plain (not gzipped) trace's events, scanned; None where it cannot vouch
    for what it read (the whole file must then be parsed, :func:`scan_kineto_bytes`). A part past the last
    cut (a file with fewer gaps than parts) is empty."""
    key = _EVENTS_KEY_RE.search(data) if data[:3] != _BOM else None
    if key is None:
        return None
    spans = _part_spans(data, key, parts)
    if part >= len(spans):
        return KinetoPart({}, [], [""], [], [], {}, {}, {})
    skipped: Counter[str] = Counter()
    fast = _FastChunks(data, key, skipped, spans[part])
    scan = Scan((spans[part][1] - spans[part][0]) // _BYTES_PER_ROW)
    try:
        for events in fast:
            scan.add(events, skipped)
    except Exception:  # noqa: BLE001 - _Unsure, and whatever else: the whole-file parse says it, or parses it
        return None
    fields = TraceFields.__struct_fields__[1:]
    cols = scan.cols
    return KinetoPart(
        columns=cols.store.columns() if len(cols.store) else {},
        names=list(cols.names),
        pgs=list(cols.pgs),
        syncs=cols.syncs,
        slice_ends=scan.slice_ends,
        process_names=scan.process_names,
        thread_names=scan.thread_names,
        skipped=dict(skipped),
        head={f: getattr(fast.head, f) for f in fields} if fast.head is not None else None,
        tail={f: getattr(fast.tail, f) for f in fields if getattr(fast.tail, f) is not msgspec.UNSET}
        if fast.tail is not None else None,
    )


def merge_parts(parts: list[KinetoPart], consume: bool = False) -> tuple[Scan, TraceFields, Counter[str]]:
    """A trace's parts (:func:`scan_kineto_part`, in file order) as one scan: the same as
    :func:`scan_kineto_bytes` of the whole file. Each part's name and process-group codes are remapped into
    the first's tables (in file order, so that the groups keep the order a whole-file parse first meets them
    in), the columns joined, and the B/E slices paired across the cuts. ``consume``: each part's columns are
    let go (``part.columns`` emptied) once they are copied, so that the parts and the whole are not all held at
    once."""
    scan = Scan(sum(len(part.columns.get("start", ())) for part in parts))
    skipped: Counter[str] = Counter()
    cols = scan.cols
    head: dict[str, Any] = {}
    tail: dict[str, Any] = {}
    for part in parts:
        names = np.fromiter(map(cols.names.__getitem__, part.names), dtype=np.int32, count=len(part.names))
        pgs = np.fromiter(map(cols.pgs.__getitem__, part.pgs), dtype=np.int32, count=len(part.pgs))
        if part.columns:
            cols.store.append({k: names[v] if k == "name" else pgs[v] if k == "pg" else v
                               for k, v in part.columns.items()})
            if consume:
                part.columns = {}
        cols.syncs += part.syncs
        scan.slice_ends += part.slice_ends
        scan.process_names.update(part.process_names)
        scan.thread_names.update(part.thread_names)
        skipped.update(part.skipped)
        head = part.head if part.head is not None else head
        tail = part.tail if part.tail is not None else tail
    trace = TraceFields(traceEvents=[])
    for f in TraceFields.__struct_fields__[1:]:
        setattr(trace, f, tail[f] if f in tail else head.get(f))
    return scan, trace, skipped
