"""Nsight Systems SQLite export (``nsys export --type sqlite``) → canonical timeline; the readers of both Nsight
Systems formats (:func:`read_nsys_sqlite`, :func:`read_nsys_rep`: a ``.nsys-rep`` through ``nsys export``).

Tables a report lacks (no NVTX, no memsets ...) are simply absent from the export; each is read only if it
is there. Times are the export's own integer nanoseconds.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracer.errors import ToolMissingError, TraceFormatError
from tracer.files.nsys_enums import (
    COPY_KIND_BY_OPER,
    EVENT_CLASS_BACKTRACE,
    EVENT_CLASS_DRIVER,
    MEM_KIND_LABEL,
    NVTX_MARK,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    mem_of_id,
)
from tracer.files.sqlite_bounds import open_bounded, schema_objects
from tracer.parsers import unpacked_sqlite
from tracer.parsers.nsys_stacks import backtrace_domains, domain_filter, python_frames, split_global_id
from tracer.timeline import (
    CLOCK_NSYS_SESSION,
    COPY_KINDS,
    HOST_DEVICE,
    HOST_STREAM,
    KINDS,
    MAX_EVENT_BYTES,
    MEM_KINDS,
    TIME_LIMIT_NS,
    CudaSyncTable,
    StreamFlagTable,
    Timeline,
    TraceMeta,
    build_events,
    empty_events,
    validate,
)
from tracer.timeline.comm import mark_by_name
from tracer.timeline.meta import FRAME_LINES_CURRENT
from tracer.vocabulary import GPU_WORK_KINDS

#: A quoted column name inside an SQL expression of :func:`_read_rows`'s spec.
_COLUMN_RE = re.compile(r'"([^"]+)"')

_REQUIRED_ANY = ("StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


#: Every table the parser reads. A file where one of them is not a plain table (a view, a virtual table, computed
#: columns: nsys writes none) is refused: reading it would run a query of the file's choosing, which may never end.
READ_TABLES = frozenset({
    "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER", "TRACER_EVENTS",
    "NVTX_EVENTS", "TRACER_META", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "TARGET_INFO_CUDA_STREAM", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU", "ThreadNames", "PROCESSES",
    "TARGET_INFO_SESSION_START_TIME", "META_DATA_EXPORT",
})


def _tables(con: sqlite3.Connection) -> set[str]:
    """The file's plain tables: only these are read (other views, such as a tool's added ones, are ignored)."""
    plain, other = schema_objects(con)
    shadowed = sorted(name for name in other if name in READ_TABLES)
    if shadowed:
        name = shadowed[0]
        raise TraceFormatError("", f"refused: {name} is {other[name]}, not a table as nsys writes it (reading "
                                   "it would run a query of the file's own, which may never end)")
    return plain


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _first_line(exc: BaseException) -> str:
    """An SQLite message in one line: "malformed database schema" quotes the whole CREATE statement after it."""
    lines = str(exc).strip().splitlines()
    return lines[0].rstrip(" -:") if lines else type(exc).__name__


def _text(value: object) -> str:
    """A text field as str: a BLOB where nsys writes TEXT is decoded with replacement characters."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _int(value: object) -> int | None:
    """An SQLite INTEGER as int; REAL, TEXT, BLOB and NULL as None."""
    return value if type(value) is int else None


def parse_nsys_sqlite(path: str | Path, source: str | None = None) -> Timeline:
    """Parse an Nsight Systems SQLite export into a :class:`Timeline`.

    Rows whose times, device or stream are not integers (REAL, TEXT, BLOB, NULL), whose times lie beyond
    ±2**62 ns, or that end before they start are left out and counted in ``meta.extra["skipped"]`` (reason →
    count), as the Kineto parser does; a column that no row of its table can use, a missing table column
    or a damaged file is a :class:`TraceFormatError`.
    """
    source = str(source or path)
    try:
        # every read bounded in time and interruptible (Ctrl-C), nothing but plain tables read: see sqlite_bounds
        with open_bounded(path, source) as con:
            return _parse_open(con, source)
    except sqlite3.Error as exc:  # opening it (what reading it raises, _parse_open says)
        raise TraceFormatError(source, f"not a readable SQLite file: {_first_line(exc)}") from None


def _parse_open(con: sqlite3.Connection, source: str) -> Timeline:
    """:func:`parse_nsys_sqlite` of an open file: SQLite's and pandas' errors said in one line."""
    try:
        # TEXT that is not UTF-8 (a damaged page) reads with replacement characters instead of failing the file
        con.text_factory = lambda b: b.decode("utf-8", "replace")
        try:
            tables = _tables(con)
        except sqlite3.Error as exc:
            raise TraceFormatError(source, f"not a readable SQLite file: {_first_line(exc)}") from None
        if not any(t in tables for t in _REQUIRED_ANY):
            raise TraceFormatError(
                source, "SQLite file is not an Nsight Systems export (no StringIds, CUPTI or NVTX tables)"
            )
        return _parse(con, tables, source)
    except TraceFormatError as exc:
        if exc.subject:
            raise
        raise TraceFormatError(source, exc.problem) from None  # raised where the file is not known
    except (sqlite3.Error, pd.errors.DatabaseError) as exc:
        # pandas wraps SQLite's error as "Execution failed on sql '...': <reason>"; the reason is what matters
        cause = exc.__cause__ if isinstance(exc, pd.errors.DatabaseError) and exc.__cause__ else exc
        raise TraceFormatError(source, f"damaged Nsight Systems export: {_first_line(cause)}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        # a value no check below foresaw (a hand-made or damaged file): pandas/int() say which
        raise TraceFormatError(
            source, f"damaged Nsight Systems export: unexpected values ({_first_line(exc)})"
        ) from None


#: What each column of an event table must hold (see :func:`_read_rows`).
TIME, NEED, SIZE, OPT, ANY = "time", "need", "size", "opt", "any"
#: Times beyond this many ns (about 146 years) are damage, and their sums could overflow int64 downstream.
_MAX_ABS_NS = TIME_LIMIT_NS
#: An id (OPT) beyond this is damage (nsys' are 32-bit, its global thread ids 48-bit), read as missing.
_MAX_ID = 2**53
#: A copy or memset beyond 256 TiB is damage (and a few such would overflow a sum of bytes).
_MAX_BYTES = MAX_EVENT_BYTES


def _read_rows(
    con: sqlite3.Connection,
    table: str,
    label: str,
    spec: dict[str, tuple[str, str]],
    skipped: Counter[str],
    *,
    where: str = "1",
    missing_ok: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Read ``table``'s usable rows as a frame with one column per key of ``spec``.

    ``spec`` maps an output column to (SQL expression over the table's columns, role): TIME an integer within
    ±2**62 ns; NEED an integer (a device, a stream); SIZE an integer in 0..2**48 or NULL (bytes); OPT an integer
    within ±2**53, anything else read as NULL (ids that only label a row); ANY whatever is stored. A row failing a TIME,
    NEED or SIZE check, or whose ``end`` is before its ``start``, is left out and counted in ``skipped`` under
    "<label> <column> not an integer" (and so on); a column that fails for every row is an error. The checks
    run inside SQLite, so the columns pandas sees hold integers only and keep all 64 bits.
    """
    have = _columns(con, table)
    for name in {c for expr, _ in spec.values() for c in _COLUMN_RE.findall(expr)}:
        if name not in have and name not in missing_ok:
            raise TraceFormatError("", f"damaged Nsight Systems export: table {table} has no column {name}")
    exprs = {
        out: ("NULL" if any(c not in have for c in _COLUMN_RE.findall(expr)) else expr, role)
        for out, (expr, role) in spec.items()
    }
    checks: list[tuple[str, str, str]] = []  # (output column, SQL that holds for a usable value, reason)
    for out, (expr, role) in exprs.items():
        if role in (TIME, NEED):
            ok = f"typeof({expr}) = 'integer'"
            if role == TIME:
                ok += f" AND {expr} BETWEEN {-_MAX_ABS_NS} AND {_MAX_ABS_NS}"
            checks.append((out, ok, f"{label} {out} not an integer" + (" in range" if role == TIME else "")))
        elif role == SIZE:
            ok = f"typeof({expr}) = 'null' OR (typeof({expr}) = 'integer' AND {expr} BETWEEN 0 AND {_MAX_BYTES})"
            checks.append((out, ok, f"{label} {out} not an integer in range"))
    if "start" in exprs and "end" in exprs:
        checks.append(("end", f"{exprs['end'][0]} >= {exprs['start'][0]}", f"{label} end before start"))
    counts = [f"SUM(CASE WHEN {ok} THEN 0 ELSE 1 END)" for _, ok, _ in checks]
    firsts = [
        "SUM(CASE WHEN " + " AND ".join([f"({c[1]})" for c in checks[:i]] + [f"NOT ({ok})"]) + " THEN 1 ELSE 0 END)"
        for i, (_, ok, _) in enumerate(checks)
    ]
    row = con.execute(f'SELECT COUNT(*), {", ".join(counts + firsts) or "0"} FROM "{table}" WHERE {where}').fetchone()
    total, bad, first = row[0], row[1 : 1 + len(checks)], row[1 + len(checks) :]
    for (out, _, reason), n in zip(checks, bad):
        if total and n == total and not reason.endswith("before start"):  # the column itself is unusable
            raise TraceFormatError(
                "", f"damaged Nsight Systems export: unexpected values in {table}.{out}: none of its "
                f"{total:,} rows holds a usable integer"
            )
    for (_, _, reason), n in zip(checks, first):
        if n:
            skipped[reason] += int(n)
    select = [
        # (an id within ±2**53: pandas reads a column with a NULL as floats, exact only that far; past it,
        # 2**63 - 1 cast back printed numpy's RuntimeWarning and failed the file)
        f"CASE WHEN typeof({expr}) = 'integer' AND {expr} BETWEEN {-_MAX_ID} AND {_MAX_ID} THEN {expr} END "
        f'AS "{out}"' if role == OPT else f'{expr} AS "{out}"'
        for out, (expr, role) in exprs.items()
    ]
    usable = " AND ".join([f"({ok})" for _, ok, _ in checks] or ["1"])
    cur = con.execute(f'SELECT {", ".join(select)} FROM "{table}" WHERE ({where}) AND {usable}')
    return pd.DataFrame.from_records(cur.fetchall(), columns=list(exprs))


def _gpu_spec(*extra: tuple[str, str, str]) -> dict[str, tuple[str, str]]:
    spec = {
        "start": ('"start"', TIME),
        "end": ('"end"', TIME),
        "deviceId": ('"deviceId"', NEED),
        "streamId": ('"streamId"', NEED),
        "correlationId": ('"correlationId"', OPT),
        "globalPid": ('"globalPid"', OPT),
    }
    spec.update({out: (expr, role) for out, expr, role in extra})
    return spec


def _parse(con: sqlite3.Connection, tables: set[str], source: str) -> Timeline:
    strings: dict[int, str] = {}
    if "StringIds" in tables and {"id", "value"} <= _columns(con, "StringIds"):
        for sid, value in con.execute("SELECT id, value FROM StringIds"):
            if type(sid) is int:
                strings[sid] = _text(value)

    def names(ids: pd.Series) -> list[str]:
        return [strings.get(int(i), f"<string {int(i)}>") if pd.notna(i) else "" for i in ids]

    parts: list[dict[str, object]] = []
    skipped: Counter[str] = Counter()
    notes: list[str] = []  # what a reader of the figures must know about this file (meta.extra["notes"])

    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        cols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        name_col = "demangledName" if "demangledName" in cols else "shortName"
        k = _read_rows(con, "CUPTI_ACTIVITY_KIND_KERNEL", "kernel", _gpu_spec(("nameId", f'"{name_col}"', OPT)),
                       skipped)
        parts.append(_gpu_part(k, "kernel", names(k["nameId"])))

    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
        # nsys's default --cuda-graph-trace=graph: a graph replay is one row here, not one row per kernel. Its
        # interval is GPU compute (the graph's nodes are kernels, at times memcpys/memsets nsys does not show
        # apart), so it counts as one kernel-kind interval named after the graph; the note says so.
        g = _read_rows(con, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "graph",
                       _gpu_spec(("graphId", '"graphId"', OPT)), skipped)
        parts.append(_gpu_part(g, "kernel", [
            f"CUDA graph {int(i)} (whole replay)" if pd.notna(i) else "CUDA graph (whole replay)"
            for i in g["graphId"]
        ]))
        if len(g):
            notes.append(
                f"{len(g):,} CUDA graph replay{'s' if len(g) != 1 else ''} traced as whole graphs (nsys "
                "--cuda-graph-trace=graph): each counts as one kernel; record with --cuda-graph-trace=node "
                "for a row per kernel"
            )

    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        m = _read_rows(
            con, "CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy",
            _gpu_spec(("bytes", '"bytes"', SIZE), ("copyKind", '"copyKind"', OPT), ("srcKind", '"srcKind"', OPT),
                      ("dstKind", '"dstKind"', OPT)),
            skipped,
        )
        direction = [COPY_KIND_BY_OPER.get(int(c), "Other") if pd.notna(c) else "Other" for c in m["copyKind"]]
        src = [MEM_KIND_LABEL.get(int(s), "Unknown") if pd.notna(s) else "Unknown" for s in m["srcKind"]]
        dst = [MEM_KIND_LABEL.get(int(s), "Unknown") if pd.notna(s) else "Unknown" for s in m["dstKind"]]
        # Named as Kineto names them, so the same copy reads the same whichever profiler saw it.
        label = [f"Memcpy {d} ({s} -> {t})" for d, s, t in zip(direction, src, dst)]
        part = _gpu_part(m, "memcpy", label)
        part["copy_kind"] = direction
        part["src_mem"] = [mem_of_id(x) for x in m["srcKind"]]
        part["dst_mem"] = [mem_of_id(x) for x in m["dstKind"]]
        part["bytes"] = m["bytes"].astype("Int64").to_numpy()
        parts.append(part)

    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        s = _read_rows(
            con, "CUPTI_ACTIVITY_KIND_MEMSET", "memset",
            _gpu_spec(("bytes", '"bytes"', SIZE), ("memKind", '"memKind"', OPT)),
            skipped, missing_ok=("memKind",),
        )
        # (an export without memKind, or with a kind nsys has no label for, has been named "Memset (Device)"
        # since before the columns: the name stays, dst_mem says what the file says)
        label = [f"Memset ({MEM_KIND_LABEL.get(int(x), 'Device') if pd.notna(x) else 'Device'})" for x in s["memKind"]]
        part = _gpu_part(s, "memset", label)
        part["dst_mem"] = [mem_of_id(x) for x in s["memKind"]]
        part["bytes"] = s["bytes"].astype("Int64").to_numpy()
        parts.append(part)

    calls: list[pd.DataFrame] = []  # the CUDA calls as read, for their Python backtraces
    backtraces: list[pd.DataFrame] = []  # backtrace records (a call repeated to carry its backtrace), not calls
    for table, kind in (("CUPTI_ACTIVITY_KIND_RUNTIME", "runtime"), ("CUPTI_ACTIVITY_KIND_DRIVER", "driver")):
        if table in tables:
            # nsys 2024+ stores driver API calls in the RUNTIME table too, told apart by eventClass
            # (ENUM_NSYS_EVENT_CLASS: 0 CUDA runtime, 1 CUDA driver).
            r = _read_rows(
                con, table, kind,
                {"start": ('"start"', TIME), "end": ('"end"', TIME), "globalTid": ('"globalTid"', OPT),
                 "correlationId": ('"correlationId"', OPT), "nameId": ('"nameId"', OPT),
                 "eventClass": ('"eventClass"', OPT)},
                skipped, missing_ok=("eventClass",),
            )
            backtrace = (r["eventClass"] == EVENT_CLASS_BACKTRACE).to_numpy()
            if backtrace.any():
                backtraces.append(r[backtrace])
                r = r[~backtrace].reset_index(drop=True)
            calls.append(r)
            pid, tid = split_global_id(r["globalTid"].fillna(0).to_numpy())
            part = _host_part(r, kind, names(r["nameId"]), pid, tid, r["correlationId"])
            part["kind"] = np.where(r["eventClass"].to_numpy() == EVENT_CLASS_DRIVER, "driver", kind).tolist()
            parts.append(part)

    # nsys' Python backtraces: NVTX marks of their own domain (not ranges), matched to the calls
    nvtx_columns = _columns(con, "NVTX_EVENTS") if "NVTX_EVENTS" in tables else set()
    domains = backtrace_domains(con, strings, nvtx_columns)
    all_calls = pd.concat(calls, ignore_index=True) if calls else pd.DataFrame()
    stacks = python_frames(con, strings, domains, nvtx_columns, all_calls,
                           pd.concat(backtraces, ignore_index=True) if backtraces else all_calls.iloc[:0])
    if stacks.names:
        parts.append(_host_part(pd.DataFrame({"start": stacks.start_ns, "end": stacks.end_ns}), "python",
                                stacks.names, stacks.pid, stacks.tid, None))
    notes += stacks.notes

    if "TRACER_EVENTS" in tables:
        # tracer's own table in files it exported: the timeline rows nsys has no table for (framework ops ...)
        t = _read_rows(
            con, "TRACER_EVENTS", "tracer event",
            {"start": ('"start"', TIME), "end": ('"end"', TIME), "kind": ('"kind"', ANY),
             "copyKind": ('"copyKind"', ANY), "nameId": ('"nameId"', OPT), "deviceId": ('"deviceId"', NEED),
             "streamId": ('"streamId"', NEED), "pid": ('"pid"', NEED), "tid": ('"tid"', NEED),
             "rank": ('"rank"', NEED), "bytes": ('"bytes"', SIZE), "correlationId": ('"correlationId"', OPT),
             "srcMem": ('"srcMem"', ANY), "dstMem": ('"dstMem"', ANY)},
            skipped, missing_ok=("srcMem", "dstMem"),  # (tracer before timeline schema 2 wrote no memory kinds)
        )
        kinds = t["kind"].map(_text)
        copy_kinds = t["copyKind"].map(_text)
        known = kinds.isin(KINDS) & copy_kinds.isin(COPY_KINDS)
        if not known.all():
            skipped["tracer event kind unknown"] += int((~known).sum())
            t, kinds, copy_kinds = t[known], kinds[known], copy_kinds[known]
        # a memory kind tracer does not know (a hand-edited file) is "other", as from any trace
        mems = {c: [m if m in MEM_KINDS else "other" for m in t[c].map(_text)] for c in ("srcMem", "dstMem")}
        parts.append(
            {
                "start_ns": t["start"].to_numpy(np.int64),
                "end_ns": t["end"].to_numpy(np.int64),
                "kind": kinds.tolist(),
                "copy_kind": copy_kinds.tolist(),
                "name": names(t["nameId"]),
                "device": t["deviceId"].to_numpy(np.int64),
                "stream": t["streamId"].to_numpy(np.int64),
                "pid": t["pid"].to_numpy(np.int64),
                "tid": t["tid"].to_numpy(np.int64),
                "rank": t["rank"].to_numpy(np.int64),
                "bytes": t["bytes"].astype("Int64").to_numpy(),
                "correlation": t["correlationId"].astype("Int64").to_numpy(),
                "src_mem": mems["srcMem"],
                "dst_mem": mems["dstMem"],
                "from_tracer_events": True,  # (its own pid and rank: _restore_ranks leaves it)
            }
        )

    if "NVTX_EVENTS" in tables:
        # a mark has no end: it is an instant at its start
        n = _read_rows(
            con, "NVTX_EVENTS", "NVTX range",
            {"start": ('"start"', TIME), "end": ('COALESCE("end", "start")', TIME), "text": ('"text"', ANY),
             "textId": ('"textId"', OPT), "globalTid": ('"globalTid"', OPT)},
            skipped, where=f'"eventType" IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}, {NVTX_MARK})' + (
                f' AND NOT COALESCE({domain_filter(domains)}, 0)' if domains else ""),
        )
        label = [
            _text(t) if isinstance(t, (str, bytes)) else (strings.get(int(i), "") if pd.notna(i) else "")
            for t, i in zip(n["text"], n["textId"])
        ]
        pid, tid = split_global_id(n["globalTid"].fillna(0).to_numpy())
        parts.append(_host_part(n, "range", label, pid, tid, None))

    meta = TraceMeta(format="nsys", source=source)
    _read_meta(con, tables, strings, meta)
    if stacks.names:
        meta.extra["frame_lines"] = FRAME_LINES_CURRENT
    nsys_rows = [part for part in parts if part.get("from_tracer_events") is None]
    if not _restore_ranks(con, tables, nsys_rows) and not _own_rank(meta, nsys_rows):
        _process_ranks(nsys_rows, notes)
    for part in parts:
        part.pop("from_tracer_events", None)
    sync = _cuda_sync(con, tables)
    if sync is not None:
        meta.extra["cuda_sync"] = sync
    flags = _stream_flags(con, tables)
    if flags is not None:
        meta.extra["stream_flags"] = flags
    meta.extra["skipped"] = dict(sorted(skipped.items())) or None
    if notes:
        meta.extra["notes"] = notes
    # NCCL kernels stay kernels; their collective is read from their names (nsys writes no collective args)
    return Timeline(validate(mark_by_name(_concat(parts)), source), meta)


def _restore_ranks(con: sqlite3.Connection, tables: set[str], parts: list[dict[str, object]]) -> bool:
    """In tracer's export of a job, each rank's processes: TRACER_META's ``process_ranks`` ([export pid, rank,
    the trace's pid] each, :mod:`tracer.exporters.nsys_sqlite`) puts every row of ``parts`` back on its rank and
    pid; returns whether the file has that table. A file without it (every nsys export) is left as it is; a
    damaged value is ignored."""
    if "TRACER_META" not in tables:
        return False
    got = con.execute("SELECT value FROM TRACER_META WHERE name = 'process_ranks'").fetchall()
    if not got:
        return False
    import orjson

    try:
        table = orjson.loads(_text(got[0][0]))
        pids = np.array([int(x[0]) for x in table], dtype=np.int64)
        ranks = np.array([int(x[1]) for x in table], dtype=np.int64)
        own = np.array([int(x[2]) for x in table], dtype=np.int64)
    except (ValueError, TypeError, IndexError, orjson.JSONDecodeError):
        return False
    if not pids.size:
        return False
    _move_by_pid(parts, pids, ranks, own)
    return True


def _move_by_pid(parts: list[dict[str, object]], pids: np.ndarray, ranks: np.ndarray,
                 new_pids: np.ndarray | None = None) -> None:
    """Every row of ``parts`` whose pid is ``pids[i]`` put on rank ``ranks[i]`` (and, given ``new_pids``, its pid
    made ``new_pids[i]``); rows of other pids left as they are."""
    order = np.argsort(pids)
    pids, ranks = pids[order], ranks[order]
    new_pids = new_pids[order] if new_pids is not None else None
    for part in parts:
        pid = np.asarray(part["pid"], dtype=np.int64)
        at = np.clip(np.searchsorted(pids, pid), 0, pids.size - 1)
        hit = pids[at] == pid
        if hit.any():
            rank = np.asarray(part["rank"], dtype=np.int64).copy()
            rank[hit] = ranks[at[hit]]
            part["rank"] = rank
            if new_pids is not None:
                moved = pid.copy()
                moved[hit] = new_pids[at[hit]]
                part["pid"] = moved


def _own_rank(meta: TraceMeta, parts: list[dict[str, object]]) -> bool:
    """In tracer's export of one rank's trace (a Kineto trace with ``distributedInfo``, kept in TRACER_META's
    timeline metadata): that rank on every row of ``parts``, as the trace itself gave it (they read 0); returns
    whether it had one."""
    info = meta.extra.get("distributed_info")
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < 2**15:
        for part in parts:
            part["rank"] = np.full(len(np.asarray(part["rank"])), rank, dtype=np.int64)
        return True
    return False


def _process_ranks(parts: list[dict[str, object]], notes: list[str]) -> None:
    """A report of several processes that each ran GPU work (``nsys profile`` of torchrun, of mp.spawn, of a
    launcher) holds the ranks of one job: each such process becomes a rank, numbered by the lowest GPU it used,
    then by pid (torchrun gives local rank r the GPU r), and every row of it (its GPU work, its CUDA calls, its
    NVTX ranges) moves to that rank, so that its GPUs and streams are its own (two processes' stream 7 on one
    GPU are two lanes) and the job's figures are per rank. Processes without GPU work (the launcher) stay on
    rank 0. Said in ``notes``. One process with GPU work: nothing changes."""
    first_gpu: dict[int, int] = {}
    for part in parts:
        kinds = part["kind"]
        if not (isinstance(kinds, list) and kinds and kinds[0] in GPU_WORK_KINDS):
            continue
        for pid, device in zip(np.asarray(part["pid"]).tolist(), np.asarray(part["device"]).tolist()):
            if device >= 0 and pid > 0:
                first_gpu[pid] = min(device, first_gpu.get(pid, device))
    if len(first_gpu) < 2:
        return
    order = sorted(first_gpu, key=lambda p: (first_gpu[p], p))
    _move_by_pid(parts, np.array(order, dtype=np.int64), np.arange(len(order), dtype=np.int64))
    notes.append(f"{len(order)} processes ran GPU work: read as the ranks of one job ("
                 + ", ".join(f"rank {r} = pid {p}" for r, p in enumerate(order))
                 + "; numbered by the first GPU each used, then pid)")


#: CUPTI's synchronisation types (ENUM_CUPTI_SYNC_TYPE) as Kineto names its cuda_sync rows
_SYNC_NAMES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
_SYNC_TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
_EVENT_TABLE = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"


def _id(column: str) -> str:
    """SQL for ``column`` as an id: an integer within ±2**53, else NULL. pandas reads a column with a NULL as
    floats, and a REAL 1e300 (or an integer past 2**63 as a float) cast back to int64 printed numpy's
    "RuntimeWarning: invalid value encountered in cast" and gave a garbage id; within 2**53 the float is exact."""
    c = f'"{column}"'
    return f"CASE WHEN typeof({c}) = 'integer' AND {c} BETWEEN {-_MAX_ID} AND {_MAX_ID} THEN {c} END"


def _cuda_sync(con: sqlite3.Connection, tables: set[str]) -> CudaSyncTable | None:
    """The synchronisation records as Kineto's cuda_sync rows say them (``meta.extra["cuda_sync"]``, columns
    :data:`tracer.vocabulary.CUDA_SYNC_FIELDS`): each sync's correlation id, type, device and stream, and for
    an event sync or a stream wait the stream and correlation id of the cudaEventRecord it waits on — the record
    with the same ``eventSyncId`` (nsys >= 2023), else the last record of the same ``eventId`` before the sync.
    None when the export has no such table or it cannot be read as one (a damaged file loses only this)."""
    if _SYNC_TABLE not in tables:
        return None
    try:
        have = _columns(con, _SYNC_TABLE)
        if not {"correlationId", "syncType", "deviceId", "streamId", "eventId"} <= have:
            return None
        link = _id("eventSyncId") if "eventSyncId" in have else "NULL"
        s = pd.read_sql_query(
            f'SELECT {_id("correlationId")} AS c, {_id("syncType")} AS t, {_id("deviceId")} AS d, '
            f'{_id("streamId")} AS s, {_id("eventId")} AS e, {link} AS l FROM "{_SYNC_TABLE}"', con)
        ev = pd.DataFrame({"c": [], "e": [], "s": [], "l": []})
        if _EVENT_TABLE in tables and {"correlationId", "eventId", "streamId"} <= _columns(con, _EVENT_TABLE):
            elink = _id("eventSyncId") if "eventSyncId" in _columns(con, _EVENT_TABLE) else "NULL"
            ev = pd.read_sql_query(f'SELECT {_id("correlationId")} AS c, {_id("eventId")} AS e, '
                                   f'{_id("streamId")} AS s, {elink} AS l FROM "{_EVENT_TABLE}"', con)
    except (sqlite3.Error, pd.errors.DatabaseError):
        return None
    s = s.apply(pd.to_numeric, errors="coerce")
    ev = ev.apply(pd.to_numeric, errors="coerce")
    s = s[s["c"].notna() & s["t"].notna()].reset_index(drop=True)
    if s.empty:
        return None
    wait_stream = np.full(len(s), -1, np.int64)
    wait_corr = np.full(len(s), -1, np.int64)
    ev = ev[ev["c"].notna() & ev["e"].notna() & ev["s"].notna()]
    waits = s["t"].isin([1, 2]).to_numpy() & s["e"].notna().to_numpy()
    if waits.any() and len(ev):
        by_link = ev[ev["l"].notna()].drop_duplicates("l", keep="last").set_index("l")
        linked = waits & s["l"].isin(by_link.index).to_numpy()
        if linked.any():
            hit = by_link.loc[s.loc[linked, "l"]]
            wait_stream[linked], wait_corr[linked] = hit["s"].to_numpy(np.int64), hit["c"].to_numpy(np.int64)
        rest = np.flatnonzero(waits & ~linked)
        if len(rest):
            left = pd.DataFrame({"i": rest, "c": s.loc[rest, "c"].to_numpy(np.int64),
                                 "e": s.loc[rest, "e"].to_numpy(np.int64)}).sort_values("c")
            right = pd.DataFrame({"rc": ev["c"].to_numpy(np.int64), "e": ev["e"].to_numpy(np.int64),
                                  "rs": ev["s"].to_numpy(np.int64)}).sort_values("rc")
            m = pd.merge_asof(left, right, left_on="c", right_on="rc", by="e", direction="backward",
                              allow_exact_matches=False)
            m = m[m["rc"].notna()]
            wait_stream[m["i"].to_numpy()] = m["rs"].to_numpy(np.int64)
            wait_corr[m["i"].to_numpy()] = m["rc"].to_numpy(np.int64)
    kind = s["t"].astype(np.int64)
    # the stream that waits: a stream wait's or a stream sync's own; the host for the others (Kineto writes -1)
    own = kind.isin([2, 3]).to_numpy()
    return {
        "correlation": s["c"].astype(np.int64).tolist(),
        "name": [_SYNC_NAMES.get(int(k), "Unknown") for k in kind],
        "device": s["d"].fillna(-1).astype(np.int64).tolist(),
        "stream": np.where(own, s["s"].fillna(-1).astype(np.int64), -1).tolist(),
        "wait_stream": wait_stream.tolist(),
        "wait_correlation": wait_corr.tolist(),
    }


#: CUPTI's stream kinds (ENUM_CUPTI_STREAM_TYPE: CUPTI_ACTIVITY_STREAM_CREATE_FLAG_*) as tracer names them
STREAM_FLAGS = {0: "unknown", 1: "blocking", 2: "non-blocking", 3: "null"}


def _stream_flags(con: sqlite3.Connection, tables: set[str]) -> StreamFlagTable | None:
    """Each CUDA stream's kind from ``TARGET_INFO_CUDA_STREAM`` (``meta.extra["stream_flags"]``: columns
    ``pid``, ``stream``, ``flag``: "null" (the NULL stream), "blocking" (created without
    cudaStreamNonBlocking: it synchronises with the legacy default stream), "non-blocking", "unknown"). None
    when the export has no such table or it cannot be read (a damaged table loses only this)."""
    table = "TARGET_INFO_CUDA_STREAM"
    if table not in tables or not {"streamId", "processId", "flag"} <= _columns(con, table):
        return None
    try:
        rows = con.execute(f'SELECT "processId", "streamId", "flag" FROM "{table}"').fetchall()
    except sqlite3.Error:
        return None
    ok = [(int(p), int(s), STREAM_FLAGS.get(int(f), "unknown")) for p, s, f in rows
          if isinstance(p, int) and isinstance(s, int) and isinstance(f, int)]
    if not ok:
        return None
    return {"pid": [r[0] for r in ok], "stream": [r[1] for r in ok], "flag": [r[2] for r in ok]}


def _read_meta(con: sqlite3.Connection, tables: set[str], strings: dict[int, str], meta: TraceMeta) -> None:
    """GPU, process and thread names and the export's provenance: labels only, so a table or column that is
    missing or a value of the wrong type leaves that label out rather than failing the file."""

    def rows(table: str, *cols: str, where: str = "1") -> list[tuple[object, ...]]:
        if table not in tables or not set(cols) <= _columns(con, table):
            return []
        return con.execute(f'SELECT {", ".join(f"{c!r}".replace(chr(39), chr(34)) for c in cols)} '
                           f'FROM "{table}" WHERE {where}').fetchall()

    for table in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU"):
        # The device column is "id" in nsys 2023+ and "deviceId" in older exports (and in the CUDA table).
        cols = _columns(con, table) if table in tables else set()
        dev = next((c for c in ("id", "deviceId") if c in cols), None)
        if dev is None:
            continue
        for gid, gname in rows(table, dev, "name"):
            if (g := _int(gid)) is not None and gname and g not in meta.gpu_names:
                meta.gpu_names[g] = _text(gname)
    for name_id, gtid in rows("ThreadNames", "nameId", "globalTid"):
        if (n := _int(name_id)) is not None and _int(gtid) is not None:
            p, t = split_global_id(np.array([gtid]))
            meta.thread_names[f"{int(p[0])}:{int(t[0])}"] = strings.get(n, "")
    for pid_, pname in rows("PROCESSES", "pid", "name"):
        if (pid := _int(pid_)) is not None:
            meta.process_names[pid] = _text(pname)
    for (value,) in rows("TRACER_META", "value", where="name = 'timeline_meta'")[:1]:
        import orjson

        try:
            saved = TraceMeta.from_dict(orjson.loads(_text(value)))
        except (ValueError, TypeError, KeyError, AttributeError):
            meta.extra["ignored"] = {"TRACER_META": "not tracer's timeline metadata (damaged)"}
            continue
        # tracer wrote TARGET_INFO_GPU's names itself ("GPU 0" where it knew none): the saved ones are the truth
        meta.gpu_names = saved.gpu_names
        meta.process_names.update(saved.process_names)
        meta.thread_names.update(saved.thread_names)
        meta.extra["exported_from"] = saved.format
        # the saved keys this meta lacks, after its own (one tracer does not know: as it was saved)
        meta.add_extra({k: v for k, v in saved.extra_dict().items() if k not in meta.extra and k not in meta.other})
    for (utc_,) in rows("TARGET_INFO_SESSION_START_TIME", "utcEpochNs")[:1]:
        if (utc := _int(utc_)) is not None:
            meta.extra["session_start_utc_ns"] = utc
            # the export's times count from the session's start, whose Unix time this is (align() adds it)
            meta.clock, meta.clock_offset_ns = CLOCK_NSYS_SESSION, utc
    for (version,) in rows("META_DATA_EXPORT", "value", where="name = 'EXPORT_PRODUCT_VERSION'")[:1]:
        if version is not None:
            meta.extra["nsys_version"] = _text(version)


def _gpu_part(df: pd.DataFrame, kind: str, label: list[str]) -> dict[str, object]:
    """Columns of GPU activity rows: pid from the launching process's globalPid, tid = the stream."""
    pid, _ = split_global_id(df["globalPid"].fillna(0).to_numpy())
    return {
        "start_ns": df["start"].to_numpy(np.int64),
        "end_ns": df["end"].to_numpy(np.int64),
        "kind": [kind] * len(df),
        "copy_kind": [""] * len(df),
        "name": label,
        "device": df["deviceId"].to_numpy(np.int64),
        "stream": df["streamId"].to_numpy(np.int64),
        "pid": pid,
        "tid": df["streamId"].to_numpy(np.int64),
        "rank": np.zeros(len(df), dtype=np.int64),
        "bytes": pd.array([pd.NA] * len(df), dtype="Int64"),
        "correlation": df["correlationId"].astype("Int64").to_numpy(),
        "src_mem": [""] * len(df),
        "dst_mem": [""] * len(df),
    }


def _host_part(
    df: pd.DataFrame, kind: str, label: list[str], pid: np.ndarray, tid: np.ndarray, corr: pd.Series | None
) -> dict[str, object]:
    n = len(df)
    return {
        "start_ns": df["start"].to_numpy(np.int64),
        "end_ns": df["end"].to_numpy(np.int64),
        "kind": [kind] * n,
        "copy_kind": [""] * n,
        "name": label,
        "device": np.full(n, HOST_DEVICE),
        "stream": np.full(n, HOST_STREAM),
        "pid": pid,
        "tid": tid,
        "rank": np.zeros(n, dtype=np.int64),
        "bytes": pd.array([pd.NA] * n, dtype="Int64"),
        "correlation": corr.astype("Int64").to_numpy() if corr is not None else pd.array([pd.NA] * n, dtype="Int64"),
        "src_mem": [""] * n,
        "dst_mem": [""] * n,
    }


def _concat(parts: list[dict[str, object]]) -> pd.DataFrame:
    if not parts:
        return empty_events()
    cols: dict[str, object] = {}
    for col in parts[0]:
        values = [p[col] for p in parts]
        if col == "bytes" or col == "correlation":
            cols[col] = pd.array(np.concatenate([np.asarray(v, dtype=object) for v in values]), dtype="Int64")
        elif col in ("kind", "copy_kind", "name", "src_mem", "dst_mem"):
            # (each part's text columns are lists of str; the parts are typed loosely, as object)
            cols[col] = [x for v in values for x in v]  # type: ignore[attr-defined]
        else:
            cols[col] = np.concatenate([np.asarray(v) for v in values])
    return build_events(cols)


def read_nsys_sqlite(p: Path, **_: Any) -> Timeline:
    """An Nsight Systems SQLite export (gzipped or not)."""
    with unpacked_sqlite(p) as db:
        return parse_nsys_sqlite(db) if db == p else parse_nsys_sqlite(db, source=str(p))


def read_nsys_rep(p: Path, **_: Any) -> Timeline:
    """An Nsight Systems report, through ``nsys export --type sqlite`` (nsys must be on PATH)."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise ToolMissingError(
            p,
            "a .nsys-rep needs Nsight Systems to read; nsys is not on PATH. Export it where nsys is installed "
            f"with `nsys export --type sqlite -o {p.with_suffix('.sqlite').name} {p.name}` and open the .sqlite",
        )
    with tempfile.TemporaryDirectory(prefix="tracer-") as tmp:
        out = Path(tmp) / "export.sqlite"
        proc = subprocess.run(
            [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out), str(p)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not out.exists():
            last = (proc.stderr or proc.stdout).strip().splitlines()
            raise TraceFormatError(p, f"nsys export failed: {last[-1] if last else f'exit {proc.returncode}'}")
        return parse_nsys_sqlite(out, source=str(p))
