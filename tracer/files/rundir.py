"""A run directory, defined once: its files and its typed ``meta.json`` (:class:`RunMeta`).

``tracer record`` writes a run directory (``runs/<scenario>[-<variant>]-<mode>-<YYYYmmdd-HHMMSS>/``)::

    trace.json.gz | report.sqlite[.gz] (+ report.nsys-rep)   the record: what the profiler wrote
    meta.json                                                the record: what ran (RunMeta)
    timeline.parquet                                         derived: the parsed timeline
    summary.json                                             derived: ``tracer summary --json`` of it

The trace and meta.json are the record; :func:`tracer.record.derive.derive` makes the timeline and the summary
from them, so a parser fix reaches old runs by deriving them again (``tracer.record.scenario.refresh_run``). The
names a run's trace may have come from the format table (:data:`tracer.files.formats.FORMATS`, ``run_files``).
docs/rundir.md has the fields of meta.json and why.

Importing this module imports neither pandas nor the parsers.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

import orjson

from tracer.errors import InputNotFoundError, TraceFormatError, UsageError
from tracer.files.atomic import write_bytes_atomic
from tracer.files.formats import FORMATS, not_a_regular_file

if TYPE_CHECKING:
    pass

META = "meta.json"
SUMMARY = "summary.json"
#: the parsed timeline (the Parquet format's name in a run directory)
TIMELINE = FORMATS["parquet"].run_files[0]
#: the torch back end's trace
TRACE = FORMATS["kineto"].run_files[0]
#: the nsys back end's report and its SQLite export (stored gzipped when large: :data:`SQLITE_GZIP_BYTES`)
NSYS_REPORT = FORMATS["nsys-rep"].run_files[0]
NSYS_SQLITE = "report.sqlite"
#: An SQLite export larger than this is stored gzipped (``report.sqlite.gz``); tracer reads both.
SQLITE_GZIP_BYTES = 8 * 1024 * 1024
#: Names a run's trace may have, in the order :func:`find_trace` prefers them (every format's ``run_files``
#: but the timeline's own).
TRACE_CANDIDATES: tuple[str, ...] = tuple(
    n for f in FORMATS.values() for n in f.run_files if n != TIMELINE
)
#: Version of meta.json's layout; readers take missing keys with a default.
RUN_SCHEMA_VERSION = 1
#: meta.json's ``kind``.
RUN_KIND = "tracer-run"

assert NSYS_SQLITE in FORMATS["nsys-sqlite"].run_files


#: A job's run (``tracer record -- torchrun ...``) holds one trace per rank here, ``rank<R>-pid<P>.json.gz``, in
#: place of ``trace.json.gz``; the timeline derived from them is the job's (tracer/job/load.py).
TRACES_DIR = "traces"


def is_run_dir(p: Path) -> bool:
    """A directory holding a run's metadata, timeline or trace under their standard names."""
    return p.is_dir() and any((p / n).exists() for n in (META, TIMELINE, *TRACE_CANDIDATES))


def find_trace(run_dir: str | os.PathLike[str]) -> Path | None:
    """The run's trace (the record :func:`tracer.record.derive.derive` reads), or None."""
    path = Path(run_dir)
    return next((path / n for n in TRACE_CANDIDATES if (path / n).exists()), None)


def find_rank_traces(run_dir: str | os.PathLike[str]) -> list[Path]:
    """A job's rank traces (:data:`TRACES_DIR`), sorted by name; empty for a one-trace run."""
    folder = Path(run_dir) / TRACES_DIR
    return sorted(folder.glob("*.json.gz")) if folder.is_dir() else []


def timeline_source(run_dir: str | os.PathLike[str]) -> Path | None:
    """The file a run is read from: its stored timeline, else its trace; None when it holds neither."""
    path = Path(run_dir)
    return next((path / n for n in (TIMELINE, *TRACE_CANDIDATES) if (path / n).exists()), None)


def file_sizes(run_dir: str | os.PathLike[str]) -> dict[str, int]:
    """The run's files and their sizes in bytes (meta.json itself left out): meta.json's ``files``."""
    path = Path(run_dir)
    sizes = {p.name: p.stat().st_size for p in sorted(path.iterdir()) if p.is_file() and p.name != META}
    sizes.update({f"{TRACES_DIR}/{p.name}": p.stat().st_size for p in find_rank_traces(path)})
    return sizes


# --------------------------------------------------------------------------------------------------------------
# meta.json


def _optional() -> dict[str, Any]:
    return {"optional": True}


@dataclass
class RunMeta:
    """meta.json: what ran. The recorder writes every field but the optional ones; a reader takes any
    meta.json (:meth:`from_dict`): missing fields get their default, fields of the wrong type too (the value
    read is kept in :attr:`extra`), unknown keys are kept in :attr:`extra`, and :meth:`to_dict` writes all of
    it back in the order it was read."""

    #: version of this layout (:data:`RUN_SCHEMA_VERSION`)
    schema_version: int = RUN_SCHEMA_VERSION
    #: always "tracer-run"
    kind: str = RUN_KIND
    #: the scenario's name (``tracer scenarios`` lists them)
    scenario: str = ""
    #: the variant asked for: one variant's name, or "all"
    variant: str = ""
    #: the variants that ran, in order
    variants: list[str] = field(default_factory=list)
    #: every parameter's value, the defaults included (variant, lanes and seed too)
    params: dict[str, Any] = field(default_factory=dict)
    #: how lanes stand in for devices: "multi-gpu", "streams" or "cpu-threads"; "processes" for a scenario of
    #: one process per rank (ddp: a lane is a rank, ``backend_details.distributed_backend`` says gloo or nccl)
    mode: str = ""
    #: the devices used: ["cuda:0", "cuda:1"], ["cpu"]
    devices: list[str] = field(default_factory=list)
    #: one description per lane (index, label, device, stream ...)
    lanes: list[dict[str, Any]] = field(default_factory=list)
    #: GPU index (a string, as JSON keys are) -> GPU name
    gpu_names: dict[str, str] = field(default_factory=dict)
    #: torch that ran the scenario (the child's, under nsys)
    torch_version: str = ""
    #: CUDA torch was built with; None on a CPU build
    cuda_version: str | None = None
    #: wall time per timed part, s (the median where it was timed more than once)
    wall_times_s: dict[str, float] = field(default_factory=dict)
    #: names in wall_times_s timed outside the profiled window (reference timings, not in the trace)
    unprofiled_times: list[str] = field(default_factory=list)
    #: every sample of a part timed more than once, s (absent in runs recorded before repeats existed)
    wall_time_samples_s: dict[str, list[float]] = field(default_factory=dict)
    #: how long the profiler ran, s
    profiled_window_s: float | None = None
    #: torch's intra-op threads in every thread of the run (cpu-threads: 1); None: torch's default
    intra_op_threads: int | None = None
    #: correctness check name -> {"ok": bool, "detail": str}
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: figures the scenario derived from its wall times ("speedup (serial / parallel)": 1.66 ...)
    derived: dict[str, float] = field(default_factory=dict)
    #: what a figure means here, what was left out, one sentence each
    notes: list[str] = field(default_factory=list)
    #: what this machine cannot show (no copy engine on the CPU, a busy host), said before any figure, which is
    #: then a side note; written only when there are some
    caveats: list[str] = field(default_factory=list, metadata=_optional())
    #: other processes' load while the scenario ran: cores, others_busy_cores, loadavg_1min; written only when known
    host_load: dict[str, float] = field(default_factory=dict, metadata=_optional())
    #: the phases (ranges) the scenario opened, "<scenario>/<phase>"
    phases: list[str] = field(default_factory=list)
    #: "torch" (torch.profiler) or "nsys" (Nsight Systems)
    backend: str = ""
    #: the back end's settings (activities, nsys version and arguments ...)
    backend_details: dict[str, Any] = field(default_factory=dict)
    #: when the run started, UTC, ISO 8601 to the second: "2026-12-02T16:13:50Z"
    created: str = ""
    #: tracer, Python, platform, torch and CUDA versions, CPU count, torch threads (no host name)
    environment: dict[str, Any] = field(default_factory=dict)
    #: the run's files (meta.json left out) -> size in bytes; :func:`tracer.record.derive.derive` keeps it current
    files: dict[str, int] = field(default_factory=dict)
    #: seconds per stage of the recording: workload, profiled, export, parse, write
    stages_s: dict[str, float] = field(default_factory=dict)
    #: files removed to ship the run (``tracer.record.scenario.compact_run``); written only when there are some
    dropped_files: list[str] = field(default_factory=list, metadata=_optional())
    #: one speedup, for a meta.json written by another tool (the recorder's speedups are in ``derived``);
    #: written only when set
    speedup: float | None = field(default=None, metadata=_optional())
    #: ``tracer record -- COMMAND``: the command (argv), where it ran, its exit code (128 + N for signal N),
    #: whether it was interrupted (Ctrl-C, SIGTERM), each recorded process's status (pid, rank, how it ended,
    #: its trace files: tracer/record/capture.py) and the profiler settings; written only for such runs
    command: list[str] = field(default_factory=list, metadata=_optional())
    cwd: str = field(default="", metadata=_optional())
    exit_code: int | None = field(default=None, metadata=_optional())
    interrupted: bool = field(default=False, metadata=_optional())
    processes: list[dict[str, Any]] = field(default_factory=list, metadata=_optional())
    profiler: dict[str, Any] = field(default_factory=dict, metadata=_optional())
    #: ranks a job's launcher started that left no trace (a rank that died); written only when there are some
    missing_ranks: list[int] = field(default_factory=list, metadata=_optional())
    #: keys no field holds, and values of the wrong type for their field, as read
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    #: keys in the order read; fields that were missing or of the wrong type (written back only once set)
    _keys: tuple[str, ...] = field(default=(), repr=False, compare=False)
    _absent: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Any) -> RunMeta:
        """A RunMeta from meta.json's object, whatever wrote it; anything but an object is an empty one."""
        if not isinstance(data, Mapping):
            return cls()
        import msgspec

        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        absent: set[str] = set()
        for name, hint in _field_types().items():
            if name not in data:
                absent.add(name)
                continue
            try:
                values[name] = msgspec.convert(data[name], hint)
            except msgspec.ValidationError:
                extra[name] = data[name]
                absent.add(name)
        extra.update({str(k): v for k, v in data.items() if k not in values and k not in extra})
        return cls(**values, extra=extra, _keys=tuple(map(str, data)), _absent=frozenset(absent))

    def to_dict(self) -> dict[str, Any]:
        """meta.json's object: the keys read, in their order, then fields set since (a new RunMeta: every field
        but the optional ones left at their default), then other extra keys."""
        hints = _field_types()
        defaults = _defaults()
        out: dict[str, Any] = {}

        def put(key: str) -> None:
            if key in out:
                return
            if key in hints:
                value = getattr(self, key)
                unset = value == defaults[key]
                if unset and (key in self._absent or _is_optional(key)):
                    if key in self.extra:  # read with the wrong type: written back as it was
                        out[key] = self.extra[key]
                    return
                out[key] = value
            elif key in self.extra:
                out[key] = self.extra[key]

        for key in (*self._keys, *hints, *self.extra):
            put(key)
        return out

    @property
    def lane_count(self) -> int | None:
        """How many lanes the run had (its lanes, else its ``lanes`` parameter); None when neither says."""
        if self.lanes:
            return len(self.lanes)
        n = self.params.get("lanes")
        return n if isinstance(n, int) and not isinstance(n, bool) else None


def describe_host_load(load: Mapping[str, float]) -> str:
    """meta.json's ``host_load`` in one sentence: how busy other processes kept the machine during the run."""
    cores = int(load.get("cores", 0)) or "?"
    if "others_busy_cores" in load:
        return f"host load during the run: other processes kept {load['others_busy_cores']:.1f} of {cores} core(s) busy"
    if "loadavg_1min" in load:
        return f"host load during the run: 1-minute load average {load['loadavg_1min']:.1f} on {cores} core(s)"
    return f"host load during the run: not known on this platform ({cores} core(s))"


_TYPES: dict[str, Any] = {}
_DEFAULTS: dict[str, Any] = {}
_OPTIONAL: set[str] = set()


def _field_types() -> dict[str, Any]:
    """Field name -> type, for the fields meta.json holds (not the bookkeeping ones)."""
    if not _TYPES:
        hints = get_type_hints(RunMeta)
        for f in dataclasses.fields(RunMeta):
            if f.name not in ("extra", "_keys", "_absent"):
                _TYPES[f.name] = hints[f.name]
                _DEFAULTS[f.name] = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                if f.metadata.get("optional"):
                    _OPTIONAL.add(f.name)
    return _TYPES


def _defaults() -> dict[str, Any]:
    _field_types()
    return _DEFAULTS


def _is_optional(name: str) -> bool:
    _field_types()
    return name in _OPTIONAL


def as_run_meta(meta: RunMeta | Mapping[str, Any] | None) -> RunMeta:
    """``meta`` as a RunMeta: as it is, or read from meta.json's object (None: an empty one)."""
    return meta if isinstance(meta, RunMeta) else RunMeta.from_dict(meta or {})


def load_meta_json(run_dir: str | os.PathLike[str]) -> Any:
    """meta.json's content as JSON (``{}`` when there is none); invalid JSON is a :class:`TraceFormatError`."""
    p = Path(run_dir) / META
    if not p.exists():
        return {}
    special = not_a_regular_file(p)
    if special is not None:  # (a pipe's read would block until a writer comes)
        raise InputNotFoundError(p, f"not a regular file but {special}")
    try:
        return orjson.loads(p.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(p, f"invalid JSON: {exc}") from None


def read_meta(run_dir: str | os.PathLike[str]) -> RunMeta:
    """The run's meta.json; a directory without one is not a run (:class:`UsageError`)."""
    path = Path(run_dir)
    if not (path / META).is_file():
        raise UsageError(path, "not a run directory written by tracer record (no meta.json)")
    return RunMeta.from_dict(load_meta_json(path))


def write_meta(run_dir: str | os.PathLike[str], meta: RunMeta) -> None:
    """Write meta.json atomically."""
    write_bytes_atomic(Path(run_dir) / META, dumps(meta.to_dict()))


def dumps(obj: Any) -> bytes:
    """JSON as the run's files hold it (indented by two)."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2)


__all__ = [
    "META",
    "NSYS_REPORT",
    "NSYS_SQLITE",
    "RUN_SCHEMA_VERSION",
    "SUMMARY",
    "TIMELINE",
    "TRACE",
    "TRACE_CANDIDATES",
    "TRACES_DIR",
    "RunMeta",
    "as_run_meta",
    "file_sizes",
    "find_rank_traces",
    "find_trace",
    "is_run_dir",
    "read_meta",
    "timeline_source",
    "write_meta",
]
