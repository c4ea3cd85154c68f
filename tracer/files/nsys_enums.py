"""Nsight Systems' (and CUPTI's) enums as tracer reads them: each defined once, here.

The nsys parser (tracer/parsers/nsys.py) reads these ids from an export, the nsys-sqlite exporter
(tracer/exporters/nsys_sqlite.py) writes them, and the Kineto parser reads the same memory-kind labels in
Kineto's names: Kineto names a copy from CUPTI's record with CUPTI's labels ("Memcpy DtoH (Device -> Pinned)",
libkineto's ``memcpyName`` and ``memoryKindString``), the labels nsys' ENUM_CUDA_MEM_KIND holds.

The ids, symbols and labels of the two memory enums are Nsight Systems' own (export schema 3.20.3);
tracer/exporters/_nsys_schema.py writes these rows into its ENUM tables, and a test compares them with a real
export. The event class and NVTX event type ids are the rows of ENUM_NSYS_EVENT_CLASS / ENUM_NSYS_EVENT_TYPE
there (a test checks each by its symbol).
"""

from __future__ import annotations

import re
from typing import Final

from tracer.vocabulary import MEM_KINDS

#: ENUM_CUDA_MEMCPY_OPER (CUpti_ActivityMemcpyKind, and nsys' unified-memory kinds 11-13): id, symbol, label, and
#: the timeline's direction (``copy_kind``). Arrays count as device memory, unified-memory migrations as the
#: direction they move data in; which side is an array is in ``src_mem`` / ``dst_mem``.
MEMCPY_OPER: Final[tuple[tuple[int, str, str, str], ...]] = (
    (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown", "Other"),
    (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device", "HtoD"),
    (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host", "DtoH"),
    (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array", "HtoD"),
    (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host", "DtoH"),
    (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array", "DtoD"),
    (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device", "DtoD"),
    (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array", "DtoD"),
    (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device", "DtoD"),
    (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host", "HtoH"),
    (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer", "PtoP"),
    (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device", "HtoD"),
    (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host", "DtoH"),
    (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device", "DtoD"),
)

#: ENUM_CUDA_MEM_KIND (CUpti_ActivityMemoryKind): id, symbol, label (Kineto's word too), and the timeline's
#: ``src_mem`` / ``dst_mem`` value ("" for Unknown: the trace does not say).
MEM_KIND: Final[tuple[tuple[int, str, str, str], ...]] = (
    (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable", "pageable"),
    (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned", "pinned"),
    (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device", "device"),
    (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array", "array"),
    (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed", "managed"),
    (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static", "device_static"),
    (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static", "managed_static"),
    (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown", ""),
)
MEM_KIND_UNKNOWN: Final = 7

#: ENUM_NSYS_EVENT_CLASS: nsys 2024+ keeps CUDA runtime and driver calls in one table, told apart by this
EVENT_CLASS_RUNTIME: Final = 0  # TRACE_PROCESS_EVENT_CUDA_RUNTIME
EVENT_CLASS_DRIVER: Final = 1  # TRACE_PROCESS_EVENT_CUDA_DRIVER
#: a backtrace record (``--cudabacktrace``, ``--python-backtrace=cuda``): a row of the RUNTIME table that repeats
#: a call's thread, interval and correlation id to carry its callchainId; not a call of its own
EVENT_CLASS_BACKTRACE: Final = 67  # TRACE_PROCESS_EVENT_CUDABACKTRACE
#: ENUM_NSYS_EVENT_TYPE of NVTX_EVENTS rows
NVTX_MARK: Final = 34  # NvtxMark
NVTX_PUSHPOP: Final = 59  # NvtxPushPopRange
NVTX_STARTEND: Final = 60  # NvtxStartEndRange

# --- derived lookups (nothing below says anything the tables above do not) ---

#: ENUM_CUDA_MEMCPY_OPER id -> copy direction
COPY_KIND_BY_OPER: Final[dict[int, str]] = {i: direction for i, _s, _l, direction in MEMCPY_OPER}
#: ENUM_CUDA_MEM_KIND id -> label ("Pinned"), as Kineto writes it in names
MEM_KIND_LABEL: Final[dict[int, str]] = {i: label for i, _s, label, _m in MEM_KIND}
#: ENUM_CUDA_MEM_KIND id -> src_mem / dst_mem value
MEM_BY_ID: Final[dict[int, str]] = {i: mem for i, _s, _l, mem in MEM_KIND}
#: src_mem / dst_mem value -> ENUM_CUDA_MEM_KIND id; "", "host" (pageable or pinned, not said) and "other" are
#: Unknown to nsys
MEM_KIND_ID: Final[dict[str, int]] = {
    **{mem: MEM_KIND_UNKNOWN for mem in MEM_KINDS},
    **{mem: i for i, _s, _l, mem in MEM_KIND if mem},
}
#: a memory-kind word in a Kineto name -> src_mem / dst_mem value: CUPTI's labels, libkineto's "<unknown>" for a
#: kind it has no word for, and ROCm's "Host"
MEM_BY_LABEL: Final[dict[str, str]] = {
    **{label: mem for _i, _s, label, mem in MEM_KIND},
    "<unknown>": "",
    "Host": "host",
}


def mem_of_id(value: object) -> str:
    """An ENUM_CUDA_MEM_KIND id as read from an export → src_mem / dst_mem value; NULL (None, or pandas' NaN /
    NA) is ""."""
    try:
        return MEM_BY_ID.get(int(value), "other")  # type: ignore[call-overload]  # (int() refusing: caught)
    except (TypeError, ValueError):
        return ""


def memcpy_oper(copy_kind: str, src_mem: str, dst_mem: str) -> int:
    """The ENUM_CUDA_MEMCPY_OPER id of a copy: its direction, with a device side that is an array made "A"
    (HtoD into an array is CUDA_MEMCPY_KIND_HTOA); Other and "" are CUDA_MEMCPY_KIND_UNKNOWN."""
    if copy_kind not in _DIRECTIONS:
        return _OPER_BY_TOKEN["UNKNOWN"]
    src, dst = copy_kind[0], copy_kind[-1]
    if src == "D" and src_mem == "array":
        src = "A"
    if dst == "D" and dst_mem == "array":
        dst = "A"
    return _OPER_BY_TOKEN[f"{src}TO{dst}"]


#: "HTOA" -> 3 ...: the symbols' tails, which are CUPTI's (and Kineto's) direction words in upper case
_OPER_BY_TOKEN: Final[dict[str, int]] = {
    symbol.removeprefix("CUDA_MEMCPY_KIND_"): i for i, symbol, _l, _d in MEMCPY_OPER
}
_DIRECTIONS: Final = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP")
#: a direction word of a Kineto name, upper case ("DTOA") -> copy direction ("DtoD")
COPY_KIND_BY_WORD: Final[dict[str, str]] = {
    symbol.removeprefix("CUDA_MEMCPY_KIND_"): direction
    for _i, symbol, _l, direction in MEMCPY_OPER
    if "TO" in symbol and "UVM" not in symbol
}


# --- the same kinds in Kineto's names ---

# "Memcpy DtoH (Device -> Pinned)" (CUDA and ROCm builds alike), "Memset (Device)"; older roctracer builds name
# copies "CopyDeviceToHost" (HIP's words, no kind of host memory).
_PAIR_RE = re.compile(r"\(([^()]*?) -> ([^()]*?)\)")
_ONE_RE = re.compile(r"\(([^()]*?)\)")
_HIP_RE = re.compile(r"\bCopy(Host|Device|Peer)To(Host|Device|Peer)\b")
_HIP_MEM = {"Host": "host", "Device": "device", "Peer": "device"}


def _mem_of_label(label: str) -> str:
    return MEM_BY_LABEL.get(label.strip(), "other")


def mem_kinds_from_name(name: str, kind: str) -> tuple[str, str]:
    """(src_mem, dst_mem) of a memcpy or memset from its Kineto name; ("", "") where the name does not say.

    "Memcpy DtoH (Device -> Pinned)" → ("device", "pinned"); "Memset (Device)" → ("", "device");
    "CopyDeviceToHost" → ("device", "host").
    """
    if kind == "memcpy":
        m = _PAIR_RE.search(name)
        if m:
            return _mem_of_label(m.group(1)), _mem_of_label(m.group(2))
        h = _HIP_RE.search(name)
        if h:
            return _HIP_MEM[h.group(1)], _HIP_MEM[h.group(2)]
    elif kind == "memset":
        m = _ONE_RE.search(name)
        if m:
            return "", _mem_of_label(m.group(1))
    return "", ""
