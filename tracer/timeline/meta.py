"""What a trace says about itself beside its names: :class:`TraceExtra`, the keys of ``TraceMeta.extra``, each typed.

Every key tracer writes or reads is declared here, so that mypy checks each access (``meta.extra["ranks"]``,
``meta.extra.get("skipped")``) and a misspelt key is an error. ``extra`` is a plain dict at run time, in the
order its keys were set: stored (a Parquet file's footer, an nsys export's TRACER_META) it is written as it is,
byte for byte what the untyped dict gave. What a stored ``extra`` holds that tracer does not know (another
tool's key, a later version's), or holds with another type than the one declared here (a damaged file), is not
lost: :meth:`tracer.timeline.TraceMeta.add_extra` keeps it in ``TraceMeta.other``, and ``to_dict`` writes it back
in its place.

docs/design.md ("The timeline") has the table of the keys: who writes each, who reads it, whether it is stored.
"""

from __future__ import annotations

from typing import Any, TypedDict


class RankSource(TypedDict):
    """Where a job's rank came from (``TraceExtra.ranks``)."""

    #: the trace file (a path, or ``traces/<file>`` inside a run directory)
    source: str
    #: why it is that rank: "distributedInfo", "file name" or "order" (:class:`tracer.job.ranks.RankTrace`)
    rank_from: str


class CudaSyncTable(TypedDict):
    """Kineto's cuda_sync rows, one entry per row in file order, as columns (``TraceExtra.cuda_sync``; the names
    are :data:`tracer.vocabulary.CUDA_SYNC_FIELDS`, in that order): the sync's correlation id (its runtime
    call's), its name ("Stream Wait Event", "Event Sync", "Stream Sync", "Context Sync"), device, the stream
    that waits (-1: the host), and the stream and correlation id of the cudaEventRecord waited on (-1: none)."""

    correlation: list[int]
    name: list[str]
    device: list[int]
    stream: list[int]
    wait_stream: list[int]
    wait_correlation: list[int]


class StreamFlagTable(TypedDict):
    """Each CUDA stream's kind from an nsys export (``TraceExtra.stream_flags``), as columns: the process, the
    stream and its flag ("null", "blocking", "non-blocking", "unknown")."""

    pid: list[int]
    stream: list[int]
    flag: list[str]


#: ``TraceExtra["frame_lines"]`` of a timeline whose Python frames name the line each was at.
FRAME_LINES_CURRENT = "current"

#: How :func:`unexported_note` ends: what tells that note from the others in ``TraceExtra["notes"]``
_UNEXPORTED_END = "exported without their payloads): `nsys export --type sqlite --include-json=true` keeps them"


def unexported_note(count: int) -> str:
    """The note of an nsys export that left out ``count`` Python backtraces' frames (exported without JSON)."""
    return f"{count:,} Python backtraces are in the report but not in this export ({_UNEXPORTED_END}"


def is_unexported_note(note: str) -> bool:
    """Whether a timeline's note is :func:`unexported_note`'s (the notes outlive the parse: caches, exports)."""
    return note.endswith(_UNEXPORTED_END)


class TraceExtra(TypedDict, total=False):
    """The keys of ``TraceMeta.extra``: each optional, each with its type. Grouped by who writes them; the
    order of a dict is the order its keys were set, not this one."""

    # --- what the trace says (the Kineto parser; values the trace gives are kept as it wrote them)
    #: Kineto's baseTimeNanoseconds, where given and not 0 (the rows' times already include it)
    base_time_ns: int
    #: Kineto's cuda_driver_version / cuda_runtime_version, as the trace wrote them (ints from Kineto)
    cuda_driver_version: object
    cuda_runtime_version: object
    #: Kineto's distributedInfo as the trace wrote it (from Kineto an object: backend, rank, world_size ...;
    #: its int ``rank`` is the trace's rank)
    distributed_info: object
    #: events left out, reason -> count (the parsers and ``load_trace``'s last check; None: the nsys parser's
    #: "none", where the Kineto parser leaves the key out)
    skipped: dict[str, int] | None
    #: top-level fields ignored, field -> why
    ignored: dict[str, str]
    #: rows kept whose times no run can have made (``load_trace``'s check, :mod:`tracer.timeline.plausible`)
    implausible: dict[str, int]
    #: what Kineto's cuda_sync rows (or nsys' synchronisation records) wait on
    cuda_sync: CudaSyncTable

    # --- what the trace says (the nsys parser)
    #: each CUDA stream's kind (TARGET_INFO_CUDA_STREAM)
    stream_flags: StreamFlagTable
    #: what a reader of the figures must know about this file (CUDA graphs traced whole, processes as ranks)
    notes: list[str]
    #: the format of the timeline tracer exported to this file (its TRACER_META)
    exported_from: str
    #: the session's start in Unix ns (TARGET_INFO_SESSION_START_TIME); also ``TraceMeta.clock_offset_ns``
    session_start_utc_ns: int
    #: the nsys that exported the file (META_DATA_EXPORT)
    nsys_version: str
    #: "current" where the timeline's ``python`` rows name the line each frame was at (nsys' Python backtraces,
    #: :data:`FRAME_LINES_CURRENT`); absent where they name the function's first line (torch.profiler's stacks)
    frame_lines: str

    # --- how it was read (tracer.parsers, tracer.files.storage, tracer.job)
    #: a stored timeline's own ``source``: the trace it was first parsed from
    parsed_from: str
    #: what the timeline was read from: "parquet" (a stored timeline), a job's dataset folder
    stored_as: str
    #: a run directory's meta.json, as read (a JSON object when tracer wrote it): ``tracer.files.rundir``
    run: object
    #: the run directory, and the file of it the timeline was read from
    run_dir: str
    run_file: str

    # --- a job, or any timelines put together (tracer.timeline.combine, tracer.job)
    #: each part's meta (``TraceMeta.to_dict``), in part order (a job's: rank order)
    parts: list[dict[str, Any]]
    #: rank (as a string) -> the file it came from and why it is that rank
    ranks: dict[str, RankSource]
    #: files left out of the job (--skip-bad-ranks) -> why
    skipped_ranks: dict[str, str]
    #: rank (as a string) -> ns its clock was moved by (--clock-fix; the ranks moved only)
    clock_fix_ns: dict[str, int]

    # --- a stored timeline's top-level keys beside TraceMeta's own, copied here when it is read
    #: a trace's Parquet cache: what it must match to be served (``tracer.parsers.cache_key``); dropped on reading
    cache_key: dict[str, Any]
    #: an exported Parquet timeline: "tracer <version>"
    exported_by: str
    #: a job dataset's partition written before its manifest held the ranks; dropped on reading
    job_rank: int
    #: TraceMeta's own clock and clock_offset_ns, which the copy takes too (it predates them): kept, so that a
    #: stored timeline written again keeps its bytes
    clock: str
    clock_offset_ns: int | None


_TYPES: dict[str, Any] = {}


def extra_types() -> dict[str, Any]:
    """:class:`TraceExtra`'s key -> type."""
    if not _TYPES:
        from typing import get_type_hints

        _TYPES.update(get_type_hints(TraceExtra))
    return _TYPES


def fits_extra(key: str, value: Any) -> bool:
    """Whether ``value`` may be ``TraceExtra[key]``: tracer knows the key and the value has its type (checked
    whole: a table's every entry)."""
    hint = extra_types().get(key)
    if hint is None:
        return False
    if hint is object:
        return True
    import msgspec

    try:
        msgspec.convert(value, hint)  # (only checked: the value kept is the one given, its dicts' order and all)
    except msgspec.ValidationError:
        return False
    return True
