"""SQL over timelines: DuckDB, embedded and in-process, over views of the canonical timeline.

``query(target, "SELECT ...")`` answers a question about one trace (or several) as a DataFrame; ``Session``
keeps the views open for many queries (``tracer sql``'s prompt). The views (see :data:`VIEWS` and
docs/sql.md):

- ``events``: every interval of the timeline, plus ``source`` (the file or run it came from) and ``dur_ns``;
- ``kernels``, ``copies`` (memcpys, with ``direction``, ``gb_per_s`` and ``src_mem`` / ``dst_mem``), ``memsets``,
  ``ranges`` (NVTX /
  record_function ranges on host threads), ``ops`` (framework operators), ``calls`` (CUDA runtime / driver
  calls), ``comm`` (NCCL / RCCL kernels and collectives' host records: ``collective``, ``pg``, ``seq``,
  ``group_size``; also columns of ``events``);
- ``lanes``: one row per (source, rank, device, stream) with its busy time
  (:func:`tracer.analysis.lanes.lane_stats`);
- ``range_gpu``: one row per range instance with the GPU work it launched, credited by the rule of
  :func:`tracer.analysis.ranges.range_launches` (the figures of ``tracer summary``);
- ``gpus``: the GPU names the traces give.

Read-only, by two locks. A run's ``timeline.parquet`` (or any tracer Parquet timeline) is scanned in place as
a pyarrow dataset, not copied, and so is a stored job's dataset (:class:`Partitions`: its ranks' Parquet files as
one source, never read into memory whole); other traces are parsed (``load_trace``, with its cache) and registered as
DataFrames. Then DuckDB is shut off from the file system (``enable_external_access = false``,
``lock_configuration = true``), so no statement can read or write a file, attach a database or load an
extension; and only statements that read (SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN of
those) are run at all. DuckDB's own ``read_parquet`` is not used for the in-place scan because it needs the
file in ``allowed_paths``, and DuckDB 2.0.1 lets an allowed path be written too: ``COPY (SELECT 1) TO
'<run>/timeline.parquet' (USE_TMP_FILE false)`` replaced a run's timeline with 4 bytes.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

# (the analyses behind the lanes and range_gpu views: every session registers both views, empty, as it opens, so a
# session imports these whether or not a query reads them)
from tracer.analysis.lanes import lane_stats
from tracer.analysis.ranges import INSTANCE_COLUMNS, range_instances, range_launches
from tracer.errors import InputNotFoundError, ToolMissingError, TracerError
from tracer.files.discover import expand
from tracer.files.formats import not_a_regular_file
from tracer.files.memory import available_bytes
from tracer.files.nsys_enums import mem_kinds_from_name
from tracer.files.storage import ADDED_COLUMNS
from tracer.parsers import PARQUET_MAGIC, RUN_TIMELINE, load_trace
from tracer.timeline import COLUMNS, MAX_EVENT_BYTES, SCHEMA_VERSION, TIME_LIMIT_NS, Timeline
from tracer.timeline.comm import collective_of_name
from tracer.vocabulary import PYTHON_FRAME_NAME

if TYPE_CHECKING:
    import pandas as pd


_T = TypeVar("_T")


class SqlError(TracerError):
    """A statement DuckDB refused (bad SQL, an unknown table) or that tracer refuses (one that would write)."""


#: The views every session has, in the order ``.tables`` lists them, with what one row is.
VIEWS: dict[str, str] = {
    "events": "every interval of the timeline (all kinds, host and GPU)",
    "kernels": "GPU kernels",
    "copies": "GPU memcpys, with direction, bytes, gb_per_s and the memory kinds they read and write",
    "memsets": "GPU memsets",
    "ranges": "NVTX / record_function ranges on host threads",
    "ops": "framework operators on host threads (cpu_op)",
    "calls": "CUDA runtime and driver API calls (correlation ties them to the GPU work they launched)",
    "frames": "Python frames on host threads (torch.profiler's with_stack=True): file, line and function of each",
    "comm": "communication: NCCL/RCCL kernels and the host records of collectives, with collective, pg, seq, "
    "group_size and bytes (the message size)",
    "lanes": "one per (source, rank, device, stream): work counts and busy time (union of its GPU work)",
    "range_gpu": "one per range instance: the GPU work it launched (tracer summary's rule), busy time and counts",
    "gpus": "one per GPU a trace names: its device index and name",
    "source_lines": "one per (rank, line of the user's code) with Python stacks: the GPU time of the work it launched, "
    "its share, critical-path, host-sync and exposed copy time (tracer lines)",
}

#: Statement types that only read. EXPLAIN is checked on what it explains (EXPLAIN ANALYZE runs it).
_READING = {"SELECT"}

#: What ``load_trace`` drops from every format (tracer.timeline.drop_impossible), said in SQL for timelines
#: read in place, so that ``events`` holds the same rows as the pandas timeline of the same run.
_POSSIBLE = (
    f"end_ns >= start_ns AND start_ns > {-TIME_LIMIT_NS} AND start_ns < {TIME_LIMIT_NS} "
    f"AND end_ns < {TIME_LIMIT_NS} AND (bytes IS NULL OR bytes BETWEEN 0 AND {MAX_EVENT_BYTES})"
)

_FIRST_WORD = re.compile(r"^(?:\s|--[^\n]*\n|/\*.*?\*/|\()*([A-Za-z]+)", re.DOTALL)
_MULTI_READING = {"SELECT", "WITH", "FROM", "PIVOT", "UNPIVOT"}
#: ``SHOW TABLES`` / ``SHOW ALL TABLES`` (DuckDB's listing of every relation), answered with the views alone
_SHOW_TABLES = re.compile(r"\s*SHOW\s+(?:ALL\s+)?TABLES\s*;?\s*", re.IGNORECASE)

_EXPLAIN = re.compile(
    r"^(?:\s|--[^\n]*\n|/\*.*?\*/)*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^()]*\)\s*)?(?P<rest>.*)$",
    re.IGNORECASE | re.DOTALL,
)


def _duckdb() -> Any:
    try:
        import duckdb
    except ModuleNotFoundError:
        raise ToolMissingError("duckdb", "tracer sql needs DuckDB: pip install 'duckdb>=1.0'") from None
    return duckdb


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _first_line(exc: BaseException) -> str:
    """DuckDB's message in one line: its first line, and a "Did you mean ...?" hint where it gives one."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    hint = [ln for ln in lines[1:] if ln.startswith("Did you mean")]
    return " ".join([lines[0], *hint[:1]])


@dataclass(frozen=True)
class Partitions:
    """A target made of several Parquet timelines read as one source named ``label``: a stored job's ranks
    (``tracer sql --job``: :mod:`tracer.job.store`'s partition files, one rank each, every one with its ``rank``
    column). They are scanned in place; the views computed by tracer's analysis (``lanes``, ``range_gpu``) read
    one file at a time, so the whole job is never in memory."""

    label: str
    files: tuple[Path, ...]


@dataclass
class _Source:
    """One trace in a session: its label (the ``source`` column) and either Parquet files read in place (one
    timeline, or a job's partitions) or a parsed timeline."""

    label: str
    path: Path | None = None
    parquet: Path | None = None  # a tracer Parquet timeline scanned in place
    timeline: Timeline | None = None
    gpu_names: dict[int, str] = field(default_factory=dict)
    cache: bool = True
    schema: int = SCHEMA_VERSION  # (the timeline schema of a Parquet file scanned in place)
    parts: tuple[Path, ...] = ()  # a stored job's partitions, scanned in place as one source

    def load(self) -> Timeline:
        """The pandas timeline (parsed or read once, on first need: lanes and range_gpu)."""
        if self.timeline is None:
            assert self.path is not None
            self.timeline = load_trace(self.path, cache=self.cache)
        return self.timeline

    def timelines(self) -> Iterator[Timeline]:
        """The source's timeline, or a job's one partition at a time (each read, used and let go)."""
        if not self.parts:
            yield self.load()
            return
        from tracer.files.storage import read_timeline_parquet

        for f in self.parts:
            yield read_timeline_parquet(f)


#: The communication columns of the events view (timeline schema 3).
_COMM_COLUMNS = ("collective::VARCHAR AS collective, pg::VARCHAR AS pg, seq::BIGINT AS seq, "
                 "group_size::INTEGER AS group_size")


def _parquet_in_place(p: Path) -> tuple[Path, dict[str, Any]] | None:
    """The tracer Parquet timeline to scan in place for target ``p`` (a run directory holding one, or the file),
    with tracer's metadata from its footer; None where the target must be parsed (another format, or a file
    load_trace should judge)."""
    f = p / RUN_TIMELINE if p.is_dir() else p
    if not_a_regular_file(f) is not None:
        return None  # (load_trace refuses it in one line; opening a pipe here would block)
    try:
        with open(f, "rb") as fh:
            if fh.read(4) != PARQUET_MAGIC:
                return None
        import orjson
        import pyarrow.parquet as pq

        schema = pq.read_schema(f)
        meta = orjson.loads((schema.metadata or {}).get(b"tracer", b"{}"))
    except Exception:  # noqa: BLE001 - anything odd: let load_trace read it and say what is wrong
        return None
    missing = [c for c in COLUMNS if c not in schema.names and c not in ADDED_COLUMNS]
    if missing or int(meta.get("schema_version", 0) or 0) > SCHEMA_VERSION:
        return None
    return f, meta


def _partitions_source(target: Partitions) -> _Source:
    """A stored job's partitions as one source: the GPU names every rank's footer gives, the oldest schema of
    them (they are written together: one)."""
    import orjson
    import pyarrow.parquet as pq

    if not target.files:
        raise SqlError(target.label, "a job with no rank stored")
    names: dict[int, str] = {}
    schema = SCHEMA_VERSION
    for f in target.files:
        try:
            meta = orjson.loads((pq.read_schema(f).metadata or {}).get(b"tracer", b"{}"))
        except Exception as exc:  # noqa: BLE001 - a damaged store: one line, as a damaged trace is
            raise SqlError(str(f), f"not a readable Parquet timeline: {exc}") from None
        names.update(_gpu_names_of(meta))
        schema = min(schema, int(meta.get("schema_version", 0) or 0))
    return _Source(target.label, Path(target.label), gpu_names=names, schema=schema, parts=tuple(target.files))


def _gpu_names_of(meta: dict[str, Any]) -> dict[int, str]:
    names = meta.get("gpu_names") or {}
    return {int(k): str(v) for k, v in names.items()}


def _expand(target: str | os.PathLike[str], on_skip: Callable[[Path, str], None] | None = None) -> list[Path]:
    """A target as the paths it stands for: a folder that is not a run directory is the runs and traces under it
    (``on_skip`` as for :func:`tracer.files.discover.expand`)."""
    p = Path(target)
    if not p.exists():
        raise InputNotFoundError(p, "no such file or directory")
    return expand([p], on_skip=on_skip)


class Session:
    """DuckDB views over one or more timelines; read-only. A context manager; :meth:`close` is safe twice.

    ``targets``: a path (run directory, Kineto JSON[.gz], nsys .sqlite[.gz] / .nsys-rep, Parquet timeline, a folder
    of them), a :class:`~tracer.timeline.Timeline`, or a list of these. ``cache`` / ``on_cache_write``: as for
    :func:`tracer.parsers.load_trace`; ``on_skip(path, why)``: told of what a folder holds named like a trace
    that cannot be one (:func:`tracer.files.discover.discover`).
    """

    def __init__(
        self,
        targets: Any,
        *,
        cache: bool = True,
        on_cache_write: Callable[[Path], None] | None = None,
        on_skip: Callable[[Path, str], None] | None = None,
        timeout_s: float | None = None,
        memory_limit: str | None = None,
    ) -> None:
        duckdb = _duckdb()
        #: A statement still running after this many seconds is interrupted (None: never).
        self.timeout_s = timeout_s or None
        #: DuckDB's memory limit (its own syntax: "4GB", "50%"); None: :func:`default_memory_limit`.
        self.memory_limit = memory_limit or default_memory_limit()
        self._deadline: float | None = None  # (time.monotonic) of the statement running
        self._expired = False
        if isinstance(targets, (str, os.PathLike, Timeline, Partitions)):
            targets = [targets]
        if not targets:
            raise SqlError("", "no target: give a run directory, a trace file or a timeline")
        self._sources: list[_Source] = []
        for t in targets:
            if isinstance(t, Timeline):
                label = t.meta.source or "timeline"
                self._sources.append(_Source(label, timeline=t, gpu_names=dict(t.meta.gpu_names)))
                continue
            if isinstance(t, Partitions):
                self._sources.append(_partitions_source(t))
                continue
            for p in _expand(t, on_skip):
                found = _parquet_in_place(p)
                if found is not None:
                    parquet, meta = found
                    self._sources.append(_Source(str(p), p, parquet, gpu_names=_gpu_names_of(meta), cache=cache,
                                                 schema=int(meta.get("schema_version", 0) or 0)))
                else:
                    tl = load_trace(p, cache=cache, on_cache_write=on_cache_write)
                    self._sources.append(_Source(str(p), p, timeline=tl, gpu_names=dict(tl.meta.gpu_names)))
        self._con = duckdb.connect(":memory:")
        self._frames: dict[str, Any] = {}  # lanes / range_gpu once computed (kept alive while registered)
        try:
            try:
                self._con.execute(f"SET memory_limit = {_literal(self.memory_limit)}")
            except duckdb.Error as exc:
                raise SqlError("--memory-limit", f"{self.memory_limit!r}: {_first_line(exc)}") from None
            # no spilling to disk: DuckDB's would write a .tmp folder into the current directory (a run's, say) and
            # fill the disk up to 90%; a query needing more than the limit is one line instead
            self._con.execute("SET temp_directory = ''")
            self._create_views()
            # After the views: from here on DuckDB reads only what is registered, and nothing can turn it back.
            self._con.execute("SET python_enable_replacements = false")
            self._con.execute("SET enable_external_access = false")
            self._con.execute("SET lock_configuration = true")
        except Exception:
            self._con.close()
            raise

    # -- setting up ------------------------------------------------------------------------------------------

    def _create_views(self) -> None:
        import pyarrow.dataset as ds

        con = self._con
        parts = []
        for i, s in enumerate(self._sources):
            name = f"_tracer_source_{i}"
            mem, joined = "src_mem::VARCHAR AS src_mem, dst_mem::VARCHAR AS dst_mem", name
            comm = _COMM_COLUMNS
            kind = "kind::VARCHAR"
            if s.parquet is not None or s.parts:
                # Scanned where it lies (projection and filters pushed down to the file), never copied.
                dataset = ds.dataset([str(f) for f in s.parts] if s.parts else str(s.parquet), format="parquet")
                con.register(name, dataset)
                where = f" WHERE {_POSSIBLE}"
                if "src_mem" not in dataset.schema.names:
                    mem, joined = self._mem_kinds_of_names(name)
                if "collective" not in dataset.schema.names:
                    comm = self._comm_of_names(name)
                if s.schema < 4:  # (Python frames were cpu_op rows: as tracer.files.storage reads them)
                    kind = (f"CASE WHEN kind::VARCHAR = 'cpu_op' AND regexp_matches(name::VARCHAR, "
                            f"{_literal(PYTHON_FRAME_NAME.pattern)}) THEN 'python' ELSE kind::VARCHAR END")
            else:
                assert s.timeline is not None
                con.register(name, s.timeline.events)
                where = ""
            parts.append(
                f"SELECT {_literal(s.label)} AS source, rank::SMALLINT AS rank, start_ns, end_ns, "
                f"end_ns - start_ns AS dur_ns, {kind} AS kind, copy_kind::VARCHAR AS copy_kind, "
                "name::VARCHAR AS name, device, stream, pid, tid, bytes::BIGINT AS bytes, "
                f"correlation::BIGINT AS correlation, {mem}, {comm} FROM {joined}{where}"
            )
        con.execute("CREATE VIEW events AS " + " UNION ALL ".join(parts))
        gpu = "FROM events WHERE device >= 0 AND kind = "
        con.execute(
            "CREATE VIEW kernels AS SELECT source, rank, device, stream, name, start_ns, end_ns, dur_ns, pid, tid, "
            f"correlation {gpu}'kernel'"
        )
        con.execute(
            "CREATE VIEW copies AS SELECT source, rank, device, stream, copy_kind AS direction, bytes, start_ns, "
            "end_ns, dur_ns, CASE WHEN dur_ns > 0 THEN bytes / dur_ns END AS gb_per_s, name, pid, tid, correlation, "
            f"src_mem, dst_mem {gpu}'memcpy'"
        )
        con.execute(
            "CREATE VIEW memsets AS SELECT source, rank, device, stream, bytes, start_ns, end_ns, dur_ns, name, pid, "
            f"tid, correlation, dst_mem {gpu}'memset'"
        )
        con.execute(
            "CREATE VIEW comm AS SELECT source, rank, kind, device, stream, collective, pg, seq, group_size, bytes, "
            "name, start_ns, end_ns, dur_ns, pid, tid, correlation FROM events WHERE collective <> ''"
        )
        host = "source, rank, name, start_ns, end_ns, dur_ns, pid, tid"
        con.execute(f"CREATE VIEW ranges AS SELECT {host} FROM events WHERE kind = 'range'")
        con.execute(f"CREATE VIEW ops AS SELECT {host} FROM events WHERE kind = 'cpu_op'")
        con.execute(
            "CREATE VIEW calls AS SELECT source, rank, kind, name, start_ns, end_ns, dur_ns, pid, tid, correlation "
            "FROM events WHERE kind IN ('runtime', 'driver')"
        )
        # FILE(LINE): FUNC; a built-in's or a module's frame has no file: its name is its function
        frame = _literal(r"^(.+)\((\d+)\): (.*)$")
        con.execute(
            f"CREATE VIEW frames AS SELECT source, rank, pid, tid, regexp_extract(name, {frame}, 1) AS file, "
            f"TRY_CAST(NULLIF(regexp_extract(name, {frame}, 2), '') AS BIGINT) AS line, "
            f"CASE WHEN regexp_matches(name, {frame}) THEN regexp_extract(name, {frame}, 3) ELSE name END AS function, "
            "name, start_ns, end_ns, dur_ns FROM events WHERE kind = 'python'"
        )
        import pandas as pd

        gpus = pd.DataFrame(
            [(s.label, d, n) for s in self._sources for d, n in sorted(s.gpu_names.items())],
            columns=["source", "device", "gpu_name"],
        ).astype({"source": str, "device": "int64", "gpu_name": str})
        con.register("_tracer_gpus", gpus)
        con.execute("CREATE VIEW gpus AS SELECT * FROM _tracer_gpus")
        # lanes and range_gpu need the pandas timeline and tracer's analysis: computed on a query's first
        # mention, empty (with their columns) until then so that DESCRIBE and .schema work.
        con.register("_tracer_lanes", _lanes_frame([]))
        con.execute("CREATE VIEW lanes AS SELECT * FROM _tracer_lanes")
        con.register("_tracer_range_gpu", _range_gpu_frame([]))
        con.execute("CREATE VIEW range_gpu AS SELECT * FROM _tracer_range_gpu")
        con.register("_tracer_source_lines", _source_lines_frame([]))
        con.execute("CREATE VIEW source_lines AS SELECT * FROM _tracer_source_lines")

    def _mem_kinds_of_names(self, name: str) -> tuple[str, str]:
        """(select list, from clause) giving src_mem / dst_mem for the Parquet timeline registered as ``name``,
        written before the timeline had them (schema 1): from the copies' and memsets' names, as
        tracer.files.storage fills them for pandas, through a small table of each distinct name's kinds."""
        import pandas as pd

        pairs = self._con.execute(
            f"SELECT DISTINCT kind::VARCHAR, name::VARCHAR FROM {name} WHERE kind::VARCHAR IN ('memcpy', 'memset')"
        ).fetchall()
        frame = pd.DataFrame(
            [(k, n, *mem_kinds_from_name(n, k)) for k, n in pairs], columns=["_k", "_n", "_src", "_dst"]
        ).astype(str)
        self._con.register(f"{name}_mem", frame)
        self._frames[f"{name}_mem"] = frame
        return (
            "coalesce(_src, '') AS src_mem, coalesce(_dst, '') AS dst_mem",
            f"{name} LEFT JOIN {name}_mem ON _k = kind::VARCHAR AND _n = name::VARCHAR",
        )

    def _comm_of_names(self, name: str) -> str:
        """The select list of the communication columns for the Parquet timeline registered as ``name``, written
        before the timeline had them (schema < 3): the collective from each distinct (kind, name), as
        tracer.files.storage fills it for pandas; no process group, sequence number or group size."""
        pairs = self._con.execute(
            f"SELECT DISTINCT kind::VARCHAR, name::VARCHAR FROM {name} "
            "WHERE kind::VARCHAR IN ('kernel', 'range', 'gpu_range', 'cpu_op')"
        ).fetchall()
        cases = [(k, n, collective_of_name(n, k)) for k, n in pairs]
        whens = " ".join(f"WHEN kind::VARCHAR = {_literal(k)} AND name::VARCHAR = {_literal(n)} THEN {_literal(c)}"
                         for k, n, c in cases if c)
        collective = f"CASE {whens} ELSE '' END" if whens else "''"
        return f"{collective} AS collective, '' AS pg, NULL::BIGINT AS seq, 0::INTEGER AS group_size"

    def _derive(self, sql: str) -> None:
        """Fill lanes / range_gpu if ``sql`` names them (a word match: a false hit only costs the computation)."""
        for view, build in (("lanes", _lanes_frame), ("range_gpu", _range_gpu_frame),
                            ("source_lines", _source_lines_frame)):
            if view in self._frames or not re.search(rf"\b{view}\b", sql, re.IGNORECASE):
                continue
            frame = build(self._sources)
            self._con.unregister(f"_tracer_{view}")
            self._con.register(f"_tracer_{view}", frame)
            self._frames[view] = frame

    # -- querying --------------------------------------------------------------------------------------------

    def statements(self, sql: str) -> list[str]:
        """``sql`` split into statements, each checked to only read; raises :class:`SqlError` otherwise."""
        duckdb = _duckdb()
        try:
            stmts = self._con.extract_statements(sql)
        except duckdb.Error as exc:
            raise SqlError("query", _first_line(exc)) from None
        out = []
        for st in stmts:
            _check_reads(self._con, st)
            out.append(st.query)
        if not out:
            raise SqlError("query", "no statement in it")
        return out

    def cursor(self, sql: str) -> Any:
        """Run one statement (checked to only read); the DuckDB result to fetch rows from."""
        duckdb = _duckdb()
        stmts = self.statements(sql)
        if len(stmts) != 1:
            raise SqlError("query", f"holds {len(stmts)} statements; run one at a time")
        statement = stmts[0]
        if _SHOW_TABLES.fullmatch(statement):
            # DuckDB would list tracer's own relations too (_tracer_source_0 ...): the documented views only
            statement = "SELECT name FROM (VALUES " + ", ".join(f"('{v}')" for v in sorted(VIEWS)) + ") AS t(name)"
        self._derive(statement)
        self._start_clock()
        try:
            return self._call(self._con.execute, statement)
        except (duckdb.Error, RuntimeError) as exc:
            self._stop_clock()
            raise self._said(exc) from None

    def query(self, sql: str) -> pd.DataFrame:
        """The result of one read-only statement as a DataFrame."""
        duckdb = _duckdb()
        cur = self.cursor(sql)
        try:
            return self._call(cur.df)
        except (duckdb.Error, RuntimeError) as exc:
            raise self._said(exc) from None
        finally:
            self._stop_clock()

    # -- bounds: a statement's time (timeout_s) and Ctrl-C -------------------------------------------------------

    def _start_clock(self) -> None:
        """The statement about to run may take ``timeout_s`` from now (fetching its rows included)."""
        self._expired = False
        self._deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s

    def _stop_clock(self) -> None:
        self._deadline = None

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` (a DuckDB call that may run long) in a worker thread, while this thread waits for it:
        waiting, it takes Ctrl-C at once and watches the clock, and either interrupts DuckDB
        (``Connection.interrupt``). Run here, DuckDB would look at Ctrl-C only between its tasks: 10-15 s late
        for a scan of one big table function, seen."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, raised there
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name="tracer-sql", daemon=True).start()
        try:
            while not done.wait(None if self._deadline is None else max(0.0, self._deadline - time.monotonic())):
                self._expired, self._deadline = True, None  # (the wait timed out: the deadline has passed)
                self._interrupt()
        except KeyboardInterrupt:
            self._interrupt()
            done.wait(10)  # DuckDB stops within a moment of an interrupt
            raise
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]

    def _interrupt(self) -> None:
        con = self._con
        if con is not None:
            con.interrupt()  # (DuckDB's way to stop a running query from another thread; idle: no effect)

    def _said(self, exc: BaseException) -> BaseException:
        """What a DuckDB error while running a statement is to tracer: the clock's interrupt a :class:`SqlError`
        that says the limit, Ctrl-C (which DuckDB turns into RuntimeError("Query interrupted")) a
        KeyboardInterrupt, the memory limit met a :class:`SqlError` that says it, others their first line."""
        duckdb = _duckdb()
        if isinstance(exc, duckdb.InterruptException) or (isinstance(exc, RuntimeError)
                                                          and "interrupted" in str(exc).lower()):
            if self._expired:
                return SqlError("query", f"took longer than {self.timeout_s:g} s: interrupted (--timeout sets the "
                                         "limit, 0 for none)")
            return KeyboardInterrupt()
        if isinstance(exc, RuntimeError):
            return exc  # (not DuckDB's: as it is)
        if isinstance(exc, duckdb.OutOfMemoryException):
            return SqlError("query", f"needs more memory than the limit of {self.memory_limit} (--memory-limit sets "
                                     f"it): {_first_line(exc)}")
        return SqlError("query", _first_line(exc))

    def rows(self, sql: str, batch: int = 10_000) -> tuple[list[str], list[str], Iterator[tuple[Any, ...]]]:
        """Column names, DuckDB type names and the rows (tuples of Python values, fetched ``batch`` at a time)."""
        duckdb = _duckdb()
        cur = self.cursor(sql)
        names = [d[0] for d in cur.description or []]
        types = [str(d[1]) for d in cur.description or []]

        def gen() -> Iterator[tuple[Any, ...]]:
            try:
                while True:
                    try:
                        chunk = self._call(cur.fetchmany, batch)
                    except (duckdb.Error, RuntimeError) as exc:
                        raise self._said(exc) from None
                    if not chunk:
                        return
                    yield from chunk
            finally:
                self._stop_clock()

        return names, types, gen()

    def tables(self) -> list[tuple[str, str]]:
        """(view, what one row is) for every view."""
        return list(VIEWS.items())

    def schema(self, view: str) -> list[tuple[str, str]]:
        """(column, DuckDB type) of ``view``."""
        if view not in VIEWS:
            raise SqlError(view, f"no such view; the views are {', '.join(VIEWS)}")
        return [(r[0], r[1]) for r in self._con.execute(f"DESCRIBE {view}").fetchall()]

    @property
    def sources(self) -> list[str]:
        return [s.label for s in self._sources]

    def close(self) -> None:
        con, self._con = getattr(self, "_con", None), None
        if con is not None:
            con.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_memory_limit() -> str:
    """DuckDB's memory limit unless told otherwise: half the memory available when the session opens (DuckDB's
    own default, 80% of all memory, counts neither what other programs use nor the parsed timelines that this
    process holds beside it); DuckDB's own where the available memory cannot be told."""
    free = available_bytes()
    return f"{max(64, free // 2 // 1_000_000)}MB" if free else "80%"


def _check_reads(con: Any, st: Any) -> None:
    """Refuse a parsed statement unless it only reads (EXPLAIN: what it explains must only read)."""
    kind = st.type.name
    if kind == "EXPLAIN":
        m = _EXPLAIN.match(st.query)
        inner = con.extract_statements(m.group("rest")) if m and m.group("rest").strip() else []
        if len(inner) == 1:
            return _check_reads(con, inner[0])
    elif kind in _READING:
        return
    first = _FIRST_WORD.match(st.query)
    what = first.group(1).upper() if first else kind
    if kind == "MULTI" and what in _MULTI_READING:
        # A PIVOT is several statements to DuckDB (it makes an ENUM type of the values in memory,
        # then selects).
        return
    # (a WITH that ends in a DELETE or an INSERT: its first word reads, the statement does not)
    said = f"{what} ... {kind}" if what in _MULTI_READING and kind not in (what, "MULTI") else what
    raise SqlError(
        "query",
        f"refused: tracer sql only reads, and {said} is not a reading statement; use SELECT, WITH, FROM, DESCRIBE, "
        "SHOW, SUMMARIZE, PIVOT or EXPLAIN",
    )


def _lanes_frame(sources: Sequence[_Source]) -> pd.DataFrame:
    """lanes: lane_stats (one row per rank, device and stream) per source."""
    import pandas as pd

    cols = {"source": str, "rank": "int16", "device": "int64", "stream": "int64", "kernels": "int64",
            "memcpys": "int64", "memsets": "int64", "busy_ns": "int64"}
    parts = []
    for s in sources:
        for t in s.timelines():
            lanes = lane_stats(t.events)
            if len(lanes):
                parts.append(lanes.assign(source=s.label))
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in cols.items()})
    return pd.concat(parts, ignore_index=True)[list(cols)].astype(cols)


def _range_gpu_frame(sources: Sequence[_Source]) -> pd.DataFrame:
    """range_gpu: one row per host range instance with the GPU work credited to it by range_launches."""
    import pandas as pd

    cols = {"source": str, "rank": "int16", "name": str, "start_ns": "int64", "end_ns": "int64", "dur_ns": "int64",
            "pid": "int64", "tid": "int64", "gpu_busy_ns": "int64", "gpu_window_ns": "int64", "kernels": "int64",
            "memcpys": "int64", "memsets": "int64"}
    parts = []
    for label, events in ((s.label, t.events) for s in sources for t in s.timelines()):
        for rank, ev in events.groupby("rank", sort=True):
            ranges = ev[ev["kind"] == "range"]
            if ranges.empty:
                continue
            out = pd.DataFrame({
                "source": label, "rank": rank, "name": ranges["name"].astype(str),
                "start_ns": ranges["start_ns"], "end_ns": ranges["end_ns"],
                "dur_ns": ranges["end_ns"] - ranges["start_ns"], "pid": ranges["pid"], "tid": ranges["tid"],
            })
            for c in INSTANCE_COLUMNS:
                out[c] = 0
            pairs = range_launches(ev)
            if not pairs.empty:
                inst = range_instances(ev, pairs)
                out.loc[inst.index, INSTANCE_COLUMNS] = inst.to_numpy()
            parts.append(out)
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in cols.items()})
    return pd.concat(parts, ignore_index=True)[list(cols)].astype(cols)


def _source_lines_frame(sources: Sequence[_Source]) -> pd.DataFrame:
    """source_lines: ``tracer lines``' table per source (the user's files read from the trace's folder and the run's
    working directory); no rows for a trace without Python stacks."""
    import pandas as pd

    # (the explain layer: only where a query names the view)
    from tracer.analysis.source_code import SourceFiles
    from tracer.explain import explain_lines
    from tracer.explain.lines import read_sources, source_folders

    cols = {"source": str, "rank": "int16", "file": str, "line": "int64", "function": str, "text": str,
            "exact": bool, "calls": "int64", "kernels": "int64", "copies": "int64", "gpu_ns": "int64",
            "comm_ns": "int64", "gpu_share": "float64", "path_ns": "int64", "sync_ns": "int64",
            "exposed_copy_ns": "int64"}
    parts = []
    for s in sources:
        if s.parts:
            raise SqlError("source_lines", f"{s.label}: not answered over a stored job's partitions (its critical "
                           "path crosses the ranks, which are read one at a time here): `tracer lines` gives it")
        t = s.load()
        where = s.path if s.path is not None else Path(t.meta.source or ".")
        table = explain_lines(t, read_sources(t, files=SourceFiles(source_folders(t, where)))).table
        table = table[(table["file"] != "").to_numpy()]
        if len(table):
            parts.append(table.assign(source=s.label))
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in cols.items()})
    return pd.concat(parts, ignore_index=True)[list(cols)].astype(cols)


def query(target: Any, sql: str, *, cache: bool = True) -> pd.DataFrame:
    """Run one read-only SQL statement over ``target``'s views (see :class:`Session`) and return a DataFrame.

    >>> query("tracer/examples/mlp-data-parallel-streams-20261202-162035", "SELECT count(*) AS n FROM kernels")
    """
    with Session(target, cache=cache) as session:
        return session.query(sql)
