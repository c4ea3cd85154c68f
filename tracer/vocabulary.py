"""The timeline's words and limits — its kinds, copy directions, memory kinds, collectives, clocks, the host's
lane, the bounds of a possible row — and how a collective's name and message size are read, without pandas.

``tracer.timeline`` holds them as its own (import them from there); they live here, at the package's root
rather than in ``tracer/timeline/`` (whose ``__init__`` imports pandas), so that what needs only
them (a job's scan workers, :mod:`tracer.parsers.kineto_scan`) starts without importing pandas: on a
many-core host a job's first open forks its scan workers before the main process imports pandas
(:mod:`tracer.job.scan`, "early scans").
"""

from __future__ import annotations

import re

#: 2: the copy memory kinds (src_mem, dst_mem). 3: communication (collective, pg, seq, group_size). 4: the
#: ``python`` kind (Python frames, which schema 3 filed as cpu_op). Files of older schemas still load: the added
#: columns are filled from the rows' names, and cpu_op rows named like a Python frame become ``python``
#: (tracer.files.storage).
SCHEMA_VERSION = 4

#: What an interval is. GPU work: kernel, memcpy, memset. Host: cpu_op (framework operators), runtime
#: (CUDA runtime API), driver (CUDA driver API), range (NVTX / record_function / user annotation on a host
#: thread), sync (CUDA synchronisation activity). gpu_range: an annotation projected onto a GPU stream by the
#: profiler itself (Kineto's gpu_user_annotation). python: a Python function's frame on a host thread
#: (torch.profiler's ``with_stack=True``: Kineto's python_function rows, named ``FILE(LINE): FUNC``): never an op,
#: host busy time or a node of the critical path; :mod:`tracer.analysis.source` reads the user's lines from them.
#: other: anything a trace holds that tracer does not model.
KINDS: tuple[str, ...] = (
    "kernel",
    "memcpy",
    "memset",
    "cpu_op",
    "runtime",
    "driver",
    "range",
    "gpu_range",
    "sync",
    "python",
    "other",
)
GPU_WORK_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset")

#: Direction of a copy; "" for rows that are not copies. PtoP is peer-to-peer between two GPUs.
COPY_KINDS: tuple[str, ...] = ("", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Other")

#: The memory a copy reads (``src_mem``) and writes (``dst_mem``), and a memset writes (``dst_mem``): CUPTI's
#: CUpti_ActivityMemoryKind, as Nsight Systems' ENUM_CUDA_MEM_KIND and Kineto's names ("Memcpy DtoH (Device ->
#: Pinned)") spell it, in lower case (:mod:`tracer.files.nsys_enums` maps each spelling). "host": host memory of a
#: kind the trace does not say (ROCm's Kineto writes "Host"). "other": a kind tracer does not know. "": not a
#: copy or memset, or the trace does not say (CUPTI's "Unknown").
MEM_KINDS: tuple[str, ...] = (
    "",
    "pageable",
    "pinned",
    "device",
    "array",
    "managed",
    "device_static",
    "managed_static",
    "host",
    "other",
)

#: The collective a row is part of ("" for rows that are not communication): NCCL / RCCL kernels, and the host
#: records of a collective (``record_param_comms``, ``nccl:*`` / ``gloo:*`` ranges). Read from the trace's
#: collective metadata first, the row's name second (:mod:`tracer.timeline.comm`). "other": communication
#: whose collective the trace does not say (NCCL >= 2.19's ``ncclDevKernel_Generic``, a bare
#: ``record_param_comms``) or one tracer does not name.
COLLECTIVES: tuple[str, ...] = (
    "",
    "allreduce",
    "allgather",
    "reducescatter",
    "broadcast",
    "reduce",
    "alltoall",
    "sendrecv",
    "send",
    "recv",
    "barrier",
    "gather",
    "scatter",
    "other",
)

#: What a timeline's times count from (``TraceMeta.clock``). "unix": ns since 1970-01-01 UTC (Kineto with
#: ``baseTimeNanoseconds`` or epoch stamps). "nsys-session": ns since the nsys session began, whose Unix time is
#: ``clock_offset_ns``. "": unknown (a Kineto trace of relative stamps and no base time).
CLOCK_UNIX = "unix"
CLOCK_NSYS_SESSION = "nsys-session"

HOST_DEVICE = -1
HOST_STREAM = -1

#: A Python frame's name as torch.profiler writes it: ``FILE(LINE): FUNC`` (FILE relative to the sys.path entry it
#: was found under, or as the script was given; LINE the function's first line, or the line it was at when the
#: profiler started), ``<built-in method item of Tensor object at 0x…>``, ``<built-in function print>``, or a
#: module's frame ``nn.Module: Linear_0``. Schema-3 files filed them as cpu_op; no operator is named so.
PYTHON_FRAME_NAME = re.compile(r"^(?:.+\(\d+\): |<built-in |nn\.Module: )")

#: Every start and end of a kept row lies strictly within ±TIME_LIMIT_NS (±146 years around the trace's clock zero:
#: epoch nanoseconds today are 1.8e18, a quarter of it). Beyond it a time is a corrupt field, and keeping
#: every time inside it keeps every difference of two (a span, a duration) inside int64.
TIME_LIMIT_NS = 2**62
#: No one copy or memset moves more than this (256 TiB); a larger size is a corrupt field.
MAX_EVENT_BYTES = 2**48

#: Why :func:`drop_impossible` leaves a row out (the words of the skipped report, as the parsers' own).
END_BEFORE_START = "end before start"
TIME_OUT_OF_RANGE = "time beyond ±2**62 ns"
NEGATIVE_BYTES = "bytes negative"
HUGE_BYTES = "bytes over 256 TiB"

#: The columns of ``meta.extra["cuda_sync"]``, what a trace's synchronisation records say (both parsers write it:
#: Kineto's cuda_sync rows, nsys' CUPTI tables): one entry per record, in file order.
CUDA_SYNC_FIELDS: tuple[str, ...] = ("correlation", "name", "device", "stream", "wait_stream", "wait_correlation")

#: Normalised collective words (lower case, no "_") → the collective, tried as prefixes in this order (the
#: longer first: "reducescatter" before "reduce", "allgather" before "gather", "sendrecv" before "send").
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("allreduce", "allreduce"),
    ("allgather", "allgather"),
    ("reducescatter", "reducescatter"),
    ("alltoall", "alltoall"),
    ("broadcast", "broadcast"),
    ("bcast", "broadcast"),
    ("sendrecv", "sendrecv"),
    ("send", "send"),
    ("recv", "recv"),
    ("reduce", "reduce"),
    ("barrier", "barrier"),
    ("gather", "gather"),
    ("scatter", "scatter"),
)
#: Bytes per element of the dtypes Kineto writes in "dtype" (c10's ScalarType names).
DTYPE_BYTES: dict[str, int] = {
    "double": 8, "float": 4, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "long": 8, "int": 4, "short": 2, "char": 1, "byte": 1, "bool": 1, "complexfloat": 8,
    "complexdouble": 16, "complexhalf": 4, "uint16": 2, "uint32": 4, "uint64": 8, "int8": 1, "uint8": 1,
}


def normalise_collective(text: str) -> str:
    """A collective's name as a trace writes it ("allreduce", "all_reduce", "_allgather_base",
    "reduce_scatter_tensor_coalesced", "AllReduce") → one of :data:`~tracer.timeline.COLLECTIVES` ("other" for
    a name tracer does not know; "" for an empty one)."""
    word = re.sub(r"[^a-z]", "", text.lower())
    if not word:
        return ""
    for prefix, collective in _PREFIXES:
        if word.startswith(prefix):
            return collective
    return "other"


def message_bytes(in_nelems: int | None, out_nelems: int | None, dtype: str | None) -> int | None:
    """A collective's message size as NCCL-tests counts it: the larger of its input and output element counts
    (allreduce: the buffer; allgather: the gathered output; reducescatter: the full input) times the element
    size; None where the trace does not give both a count and a known dtype."""
    counts = [c for c in (in_nelems, out_nelems) if c is not None and c >= 0]
    size = DTYPE_BYTES.get((dtype or "").lower().replace("c10::", "").replace("torch.", ""))
    if not counts or size is None:
        return None
    return max(counts) * size
