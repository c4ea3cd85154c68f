"""SQLite in Nsight Systems' export schema, so that `nsys stats` runs on a trace nsys never recorded.

The tables, columns and ENUM rows are Nsight Systems' own (copied into ``_nsys_schema`` from a real
``nsys export --type sqlite``); the rows are the timeline's:

| timeline kind | table | notes |
| --- | --- | --- |
| kernel | CUPTI_ACTIVITY_KIND_KERNEL | demangledName = the name; shortName = its base name; grid, block, ... = 0 |
| memcpy | CUPTI_ACTIVITY_KIND_MEMCPY | copyKind from the direction; srcKind/dstKind from src_mem/dst_mem |
| memset | CUPTI_ACTIVITY_KIND_MEMSET | memKind from dst_mem; the value set is unknown, written as 0 |
| runtime, driver | CUPTI_ACTIVITY_KIND_RUNTIME | eventClass 0 (runtime) or 1 (driver), as nsys 2025 stores both |
| range | NVTX_EVENTS | push/pop (59) where a thread's ranges nest, start/end (60) where they do not |
| cpu_op, gpu_range, sync, python, other | TRACER_EVENTS | tracer's own table (nsys has none for ops or Python frames) |

Grid, block, registers and shared memory are not in the timeline; they are written as 0.
nsys ignores TRACER_EVENTS.

GPU rows carry the process that launched them (``globalPid``), found through the correlation id, as nsys
records it (Kineto files the device index there instead). Process and thread ids are packed into nsys'
serialized global ids: ``globalTid = hwId << 56 | vmId << 48 | pid << 24 | tid`` (hwId 0, vmId 1, as on the
machine that recorded the fixture). Times are the timeline's integer nanoseconds, unchanged.

TRACER_META holds the timeline's metadata as JSON (GPU, process and thread names, the source format), so
that nothing of the timeline is lost in the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pandas as pd

from tracer.exporters import ExportResult, ProgressFn, tracer_version
from tracer.exporters._nsys_schema import ENUM_TABLES, SCHEMA_META_ROWS, TABLE_DDL
from tracer.files.atomic import gzip_copy, gzip_name
from tracer.files.nsys_enums import (
    EVENT_CLASS_DRIVER,
    EVENT_CLASS_RUNTIME,
    MEM_KIND_ID,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    memcpy_oper,
)
from tracer.timeline import GPU_WORK_KINDS, Timeline, launch_links
from tracer.timeline.layout import sub_tracks

#: ids must fit nsys' serialized global id: 24 bits each for pid and tid
ID_LIMIT = 1 << 24
VM_ID = 1
GLOBAL_BASE = VM_ID << 48
EVENT_CLASS = {"runtime": EVENT_CLASS_RUNTIME, "driver": EVENT_CLASS_DRIVER}
CONTEXT_ID = 1
NATIVE_KINDS = frozenset(("kernel", "memcpy", "memset", "runtime", "driver", "range"))

TRACER_EVENTS_DDL = """CREATE TABLE TRACER_EVENTS (
    -- Timeline rows Nsight Systems has no table for (framework ops, projected ranges ...); tracer's schema.

    start                       INTEGER   NOT NULL,                    -- Start (ns), the timeline's clock.
    end                         INTEGER   NOT NULL,                    -- End (ns).
    kind                        TEXT      NOT NULL,                    -- tracer's kind: cpu_op, python, other ...
    copyKind                    TEXT      NOT NULL,                    -- HtoD, DtoH ... or empty.
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id)
    deviceId                    INTEGER   NOT NULL,                    -- GPU index, -1 on the host.
    streamId                    INTEGER   NOT NULL,                    -- CUDA stream, -1 on the host.
    pid                         INTEGER   NOT NULL,                    -- Process ID.
    tid                         INTEGER   NOT NULL,                    -- Thread ID.
    rank                        INTEGER   NOT NULL,                    -- Distributed rank.
    bytes                       INTEGER,                               -- Bytes, where the row has a size.
    correlationId               INTEGER,                               -- Correlation ID, where it has one.
    srcMem                      TEXT      NOT NULL,                    -- Memory read: pageable, pinned ... or empty.
    dstMem                      TEXT      NOT NULL                     -- Memory written, or empty.
)"""
TRACER_META_DDL = """CREATE TABLE TRACER_META (
    -- What tracer knows of the trace beside its rows.

    name                        TEXT      NOT NULL,                    -- Key.
    value                       TEXT                                   -- Value (JSON where structured).
)"""


def short_kernel_name(name: str) -> str:
    """The base name of a demangled kernel name, as nsys' shortName column holds it.

    "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)" → "Kernel2". Template
    arguments, parameters and namespaces go; "<unnamed>" namespaces count as namespaces.
    """
    depth = 0
    head: list[str] = []
    for ch in name:
        if ch in "<([":
            prefix = "".join(head)
            if depth == 0 and not (ch == "<" and prefix.endswith("::")):
                if prefix.strip():
                    break
            depth += 1
            continue
        if ch in ">)]":
            depth = max(depth - 1, 0)
            continue
        if depth == 0:
            head.append(ch)
    base = "".join(head).strip().split("::")[-1].split(" ")[-1]
    return base or name


def global_ids(pid: np.ndarray, tid: np.ndarray | None = None) -> np.ndarray:
    """nsys' serialized globalTid (or globalPid when ``tid`` is None) for integer pid/tid arrays."""
    gid = GLOBAL_BASE | (pid.astype(np.int64) << 24)
    if tid is not None:
        gid = gid | tid.astype(np.int64)
    return gid


class _Strings:
    """StringIds: each distinct string once, ids from 1."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, value: str) -> int:
        got = self.ids.get(value)
        if got is None:
            got = self.ids[value] = len(self.ids) + 1
        return got

    def many(self, values: pd.Series, transform: Callable[[str], str] | None = None) -> np.ndarray:
        """Ids of a column's values (``transform``-ed first), computing each distinct value once."""
        cat = values if isinstance(values.dtype, pd.CategoricalDtype) else values.astype("category")
        cat = cat.cat.remove_unused_categories()
        lookup = np.array(
            [self.id(transform(str(v)) if transform else str(v)) for v in cat.cat.categories], dtype=np.int64
        )
        codes = cat.cat.codes.to_numpy()
        return lookup[codes] if len(codes) else np.zeros(0, dtype=np.int64)


def _fit_ids(ev: pd.DataFrame, used: np.ndarray, notes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """pid/tid arrays whose values fit 24 bits in the ``used`` rows (those packed into nsys' global ids); ids
    outside that range are renumbered to unused ones, and a note says so."""
    pid = ev["pid"].to_numpy(np.int64).copy()
    tid = ev["tid"].to_numpy(np.int64).copy()
    for arr, what in ((pid, "process"), (tid, "thread")):
        bad = used & ((arr < 0) | (arr >= ID_LIMIT))
        if not bad.any():
            continue
        taken = set(arr[used].tolist())
        spare = (x for x in range(ID_LIMIT - 1, 0, -1) if x not in taken)
        mapping = {int(u): next(spare) for u in np.unique(arr[bad])}
        arr[bad] = [mapping[int(x)] for x in arr[bad]]
        notes.append(
            f"{len(mapping)} {what} id(s) outside nsys' 24-bit range were renumbered: "
            + ", ".join(f"{k}→{v}" for k, v in list(mapping.items())[:5])
        )
    return pid, tid


def _rank_pids(ev: pd.DataFrame, pid: np.ndarray, used: np.ndarray, notes: list[str]) -> dict[int, tuple[int, int]]:
    """Give each rank of a job its own processes: a pid that several ranks use (ranks in containers, on other
    hosts) is kept by the lowest rank and renumbered (in place, in ``pid``) to an unused id for the others —
    nsys files GPU work under its process, so ranks sharing a pid and a GPU index would become one. Returns
    export pid -> (rank, the trace's pid) for the processes of a job of several ranks; {} for one rank."""
    rank = ev["rank"].to_numpy(np.int64)
    if not rank.size or not bool((rank != rank[0]).any()):
        return {}
    pairs = sorted(set(zip(rank[used].tolist(), pid[used].tolist())))
    owner: dict[int, int] = {}  # pid -> the rank that keeps it
    for r, p_ in pairs:
        owner.setdefault(p_, r)
    taken = set(owner)
    spare = (x for x in range(ID_LIMIT - 1, 0, -1) if x not in taken)
    out: dict[int, tuple[int, int]] = {}
    moved = []
    for r, p_ in pairs:
        new = p_ if owner[p_] == r else next(spare)
        out[new] = (r, p_)
        if new != p_:
            pid[used & (rank == r) & (pid == p_)] = new
            moved.append(f"rank {r} pid {p_}→{new}")
    if moved:
        notes.append(f"{len(moved)} process id(s) shared by several ranks were renumbered, so that each rank is its "
                     "own process: " + ", ".join(moved[:5]))
    return out


def _owner_pids(ev: pd.DataFrame, pid: npt.NDArray[np.int64], gpu_rows: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """For GPU rows, the process that launched them: the pid of the API call that the timeline's launch join
    (:func:`tracer.timeline.launch_links`: same rank, process and correlation id) gives it.

    Every parser already files GPU work under its launching process, so a linked row keeps its pid; a row with
    no call in the trace (its launch fell outside the capture) goes to the one process that calls CUDA, where
    there is only one.
    """
    owner: npt.NDArray[np.int64] = pid[gpu_rows].copy()
    if gpu_rows.size == 0:
        return owner
    kind = ev["kind"].astype(str).to_numpy()
    host_pids = np.unique(pid[np.isin(kind, ("runtime", "driver"))])  # the processes that call CUDA
    links = launch_links(ev)
    work = ev.index.get_indexer(links["work_row"].to_numpy())
    call = ev.index.get_indexer(links["call_row"].to_numpy())
    at = np.searchsorted(gpu_rows, work)  # gpu_rows is ascending; links of gpu_range rows are not among them
    hit = (at < gpu_rows.size) & (gpu_rows[np.minimum(at, gpu_rows.size - 1)] == work)
    owner[at[hit]] = pid[call[hit]]
    unmatched = np.ones(owner.size, dtype=bool)
    unmatched[at[hit]] = False
    if host_pids.size == 1:
        owner[unmatched & ~np.isin(owner, host_pids)] = host_pids[0]
    return owner


def _process_name(names: dict[int, str], pid: int, rank_of_pid: dict[int, tuple[int, int]]) -> str:
    """A process's name in PROCESSES: the trace's, led by its rank in a job ("rank 1 · python3")."""
    if pid not in rank_of_pid:
        return names.get(pid, "")
    rank, own = rank_of_pid[pid]
    return f"rank {rank} · " + (names.get(own) or f"process {own}")


def _executemany(con: sqlite3.Connection, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    cols = ", ".join(f'"{c}"' for c in columns)
    marks = ", ".join("?" * len(columns))
    con.executemany(f'INSERT INTO "{table}" ({cols}) VALUES ({marks})', rows)


def _none(values: np.ndarray | pd.Series) -> list[Any]:
    """A column as Python values with NA as None (SQL NULL)."""
    column: list[Any] = pd.Series(values).astype(object).where(pd.notna(values), None).tolist()
    return column


def write(timeline: Timeline, dest: Path, *, final: Path, progress: ProgressFn | None = None) -> ExportResult:
    """Write ``timeline`` to ``dest`` as an Nsight Systems SQLite export; gzip it when ``final`` ends in ``.gz``
    (as tracer reads ``.sqlite.gz``, and as the tests' nsys data is kept; ``nsys stats`` needs it gunzipped)."""
    if not final.name.lower().endswith(".gz"):
        return _write(timeline, dest, final=final, progress=progress)
    plain = dest.with_name(dest.name + ".sqlite")  # (beside the temporary file, removed whatever happens)
    try:
        result = _write(timeline, plain, final=final, progress=progress)
        gzip_copy(plain, dest, name=gzip_name(final))
    finally:
        plain.unlink(missing_ok=True)
    return result


def _write(timeline: Timeline, dest: Path, *, final: Path, progress: ProgressFn | None = None) -> ExportResult:
    result = ExportResult(format="nsys-sqlite", path=final)
    ev = timeline.events.reset_index(drop=True)
    meta = timeline.meta
    kind = ev["kind"].astype(str).to_numpy()
    packed = np.isin(kind, ("runtime", "driver", "range")) | (
        np.isin(kind, list(GPU_WORK_KINDS)) & (ev["device"].to_numpy() >= 0)
    )
    pid, tid = _fit_ids(ev, packed, result.notes)
    rank_of_pid = _rank_pids(ev, pid, packed, result.notes)
    strings = _Strings()
    total = len(ev)
    done = 0

    def step(stage: str, rows: int) -> None:
        nonlocal done
        done += rows
        if progress:
            progress(f"nsys-sqlite: {stage}", done, total)

    con = sqlite3.connect(dest)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("BEGIN")
        created: set[str] = set()

        def create(table: str) -> None:
            if table not in created:
                con.execute(TABLE_DDL[table])
                created.add(table)

        for table, (ddl, enum_rows) in ENUM_TABLES.items():
            con.execute(ddl)
            _executemany(con, table, ["id", "name", "label"], list(enum_rows))

        gpu_mask = np.isin(kind, list(GPU_WORK_KINDS)) & (ev["device"].to_numpy() >= 0)
        gpu_rows = np.flatnonzero(gpu_mask)
        owner = np.empty(len(ev), dtype=np.int64)
        owner[gpu_rows] = _owner_pids(ev, pid, gpu_rows)

        # --- GPU work ---
        for k, table in (("kernel", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                         ("memset", "CUPTI_ACTIVITY_KIND_MEMSET")):
            rows = np.flatnonzero(gpu_mask & (kind == k))
            if rows.size == 0:
                continue
            create(table)
            sub = ev.iloc[rows]
            start = sub["start_ns"].tolist()
            end = sub["end_ns"].tolist()
            dev = sub["device"].astype(int).tolist()
            stream = sub["stream"].astype(int).tolist()
            corr = _none(sub["correlation"])
            gpid = global_ids(owner[rows]).tolist()
            if k == "kernel":
                demangled = strings.many(sub["name"]).tolist()
                short = strings.many(sub["name"], short_kernel_name).tolist()
                z = [0] * rows.size
                _executemany(
                    con, table,
                    ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                     "demangledName", "shortName", "registersPerThread", "gridX", "gridY", "gridZ", "blockX",
                     "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread",
                     "localMemoryTotal", "gridId"],
                    list(zip(start, end, dev, [CONTEXT_ID] * rows.size, stream, corr, gpid, demangled, short,
                             z, z, z, z, z, z, z, z, z, z, z, range(1, rows.size + 1))),
                )
                result.counts["kernels"] = int(rows.size)
            elif k == "memcpy":
                src_mem, dst_mem = sub["src_mem"].astype(str).tolist(), sub["dst_mem"].astype(str).tolist()
                direction = [
                    memcpy_oper(c, s, d) for c, s, d in zip(sub["copy_kind"].astype(str), src_mem, dst_mem)
                ]
                src = [MEM_KIND_ID[m] for m in src_mem]
                dst = [MEM_KIND_ID[m] for m in dst_mem]
                nbytes = [int(b) if pd.notna(b) else 0 for b in sub["bytes"]]
                _executemany(
                    con, table,
                    ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes",
                     "copyKind", "srcKind", "dstKind", "copyCount"],
                    list(zip(start, end, dev, [CONTEXT_ID] * rows.size, stream, corr, gpid, nbytes, direction,
                             src, dst, [1] * rows.size)),
                )
                result.counts["memcpys"] = int(rows.size)
            else:
                mem = [MEM_KIND_ID[m] for m in sub["dst_mem"].astype(str)]
                nbytes = [int(b) if pd.notna(b) else 0 for b in sub["bytes"]]
                _executemany(
                    con, table,
                    ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "value",
                     "bytes", "memKind"],
                    list(zip(start, end, dev, [CONTEXT_ID] * rows.size, stream, corr, gpid, [0] * rows.size,
                             nbytes, mem)),
                )
                result.counts["memsets"] = int(rows.size)
            step(table, rows.size)

        # --- CUDA API calls ---
        api = np.flatnonzero(np.isin(kind, ("runtime", "driver")))
        if api.size:
            create("CUPTI_ACTIVITY_KIND_RUNTIME")
            sub = ev.iloc[api]
            _executemany(
                con, "CUPTI_ACTIVITY_KIND_RUNTIME",
                ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"],
                list(zip(sub["start_ns"].tolist(), sub["end_ns"].tolist(), [EVENT_CLASS[k] for k in kind[api]],
                         global_ids(pid[api], tid[api]).tolist(), _none(sub["correlation"]),
                         strings.many(sub["name"]).tolist(), [0] * api.size)),
            )
            result.counts["runtime calls"] = int((kind[api] == "runtime").sum())
            result.counts["driver calls"] = int((kind[api] == "driver").sum())
            step("CUPTI_ACTIVITY_KIND_RUNTIME", api.size)

        # --- NVTX ranges: push/pop where a thread's ranges nest, start/end where they do not ---
        rng = np.flatnonzero(kind == "range")
        if rng.size:
            create("NVTX_EVENTS")
            sub = ev.iloc[rng]
            gtid = global_ids(pid[rng], tid[rng])
            event_type = np.full(rng.size, NVTX_PUSHPOP, dtype=np.int64)
            starts, ends = sub["start_ns"].to_numpy(np.int64), sub["end_ns"].to_numpy(np.int64)
            for g in np.unique(gtid):
                rows = np.flatnonzero(gtid == g)
                event_type[rows[sub_tracks(starts[rows], ends[rows]) > 0]] = NVTX_STARTEND
            start_end = event_type == NVTX_STARTEND
            range_id = np.where(start_end, np.cumsum(start_end), 0)
            _executemany(
                con, "NVTX_EVENTS",
                ["start", "end", "eventType", "rangeId", "text", "globalTid", "endGlobalTid", "domainId"],
                list(zip(starts.tolist(), ends.tolist(), event_type.tolist(),
                         [int(r) if s else None for r, s in zip(range_id, start_end)],
                         sub["name"].astype(str).tolist(), gtid.tolist(),
                         [int(g) if s else None for g, s in zip(gtid, start_end)], [0] * rng.size)),
            )
            result.counts["NVTX push/pop ranges"] = int((~start_end).sum())
            if start_end.any():
                result.counts["NVTX start/end ranges"] = int(start_end.sum())
                result.notes.append(
                    f"{int(start_end.sum())} range(s) overlap other ranges of their thread without nesting; "
                    "they are NVTX start/end ranges, the rest push/pop"
                )
            step("NVTX_EVENTS", rng.size)

        # --- everything nsys has no table for ---
        other = np.flatnonzero(~np.isin(kind, list(NATIVE_KINDS)) | (np.isin(kind, list(GPU_WORK_KINDS)) & ~gpu_mask))
        if other.size:
            con.execute(TRACER_EVENTS_DDL)
            sub = ev.iloc[other]
            _executemany(
                con, "TRACER_EVENTS",
                ["start", "end", "kind", "copyKind", "nameId", "deviceId", "streamId", "pid", "tid", "rank", "bytes",
                 "correlationId", "srcMem", "dstMem"],
                list(zip(sub["start_ns"].tolist(), sub["end_ns"].tolist(), kind[other].tolist(),
                         sub["copy_kind"].astype(str).tolist(), strings.many(sub["name"]).tolist(),
                         sub["device"].astype(int).tolist(), sub["stream"].astype(int).tolist(),
                         sub["pid"].astype(int).tolist(), sub["tid"].astype(int).tolist(),
                         sub["rank"].astype(int).tolist(), _none(sub["bytes"]), _none(sub["correlation"]),
                         sub["src_mem"].astype(str).tolist(), sub["dst_mem"].astype(str).tolist())),
            )
            by_kind = pd.Series(kind[other]).value_counts()
            result.counts.update({f"{k} (TRACER_EVENTS)": int(v) for k, v in by_kind.items()})
            step("TRACER_EVENTS", other.size)

        # --- who is who ---
        host = packed & (ev["device"].to_numpy() < 0)
        host_pids = sorted(set(pid[host].tolist()) | set(owner[gpu_rows].tolist()))
        create("PROCESSES")
        _executemany(
            con, "PROCESSES", ["globalPid", "pid", "name"],
            [(int(global_ids(np.array([p]))[0]), p, _process_name(meta.process_names, p, rank_of_pid))
             for p in host_pids],
        )
        create("ThreadNames")
        threads = sorted(set(zip(pid[host].tolist(), tid[host].tolist())))
        named = []
        for p, t in threads:
            name = meta.thread_names.get(f"{rank_of_pid.get(p, (0, p))[1]}:{t}", "")
            if name:
                named.append((strings.id(name), None, int(global_ids(np.array([p]), np.array([t]))[0])))
        _executemany(con, "ThreadNames", ["nameId", "priority", "globalTid"], named)
        create("TARGET_INFO_GPU")
        _executemany(
            con, "TARGET_INFO_GPU", ["vmId", "id", "name", "cuDevice"],
            [(GLOBAL_BASE, d, meta.gpu_names.get(d, f"GPU {d}"), d) for d in timeline.gpu_devices],
        )

        # --- the session ---
        starts_all = ev["start_ns"].to_numpy(np.int64)
        t0 = int(starts_all.min()) if len(ev) else 0
        t1 = int(ev["end_ns"].max()) if len(ev) else 0
        create("ANALYSIS_DETAILS")
        con.execute(
            "INSERT INTO ANALYSIS_DETAILS (globalVid, duration, startTime, stopTime) VALUES (?, ?, ?, ?)",
            (GLOBAL_BASE, t1 - t0, t0, t1),
        )
        create("TARGET_INFO_SESSION_START_TIME")
        utc_ns = meta.extra.get("session_start_utc_ns")
        if utc_ns is None and t0 > 10**18:  # Kineto's clock is the Unix epoch in ns
            utc_ns = t0
        if utc_ns is not None:
            when = datetime.fromtimestamp(int(utc_ns) / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
            con.execute(
                "INSERT INTO TARGET_INFO_SESSION_START_TIME (utcEpochNs, utcTime, localTime) VALUES (?, ?, ?)",
                (int(utc_ns), when, when),
            )
        create("META_DATA_EXPORT")
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        _executemany(
            con, "META_DATA_EXPORT", ["name", "value"],
            [("EXPORT_PRODUCT_NAME", "tracer"), ("EXPORT_PRODUCT_VERSION", tracer_version()),
             *SCHEMA_META_ROWS, ("EXPORT_TIME_UTC", now), ("EXPORT_PARAM_INPUT_FILE", Path(meta.source).name),
             ("EXPORT_PARAM_OUTPUT_FILE", final.name), ("EXPORT_PARAM_TIME_NORMALIZE", "false")],
        )
        con.execute(TRACER_META_DDL)
        _executemany(
            con, "TRACER_META", ["name", "value"],
            [
                ("tracer_version", tracer_version()),
                ("timeline_meta", orjson.dumps(meta.to_dict(), default=str).decode()),
                # a job's processes: [pid here, rank, the trace's pid], read back by tracer.parsers.nsys
                *([("process_ranks", orjson.dumps([[k, r, o] for k, (r, o) in sorted(rank_of_pid.items())]).decode())]
                  if rank_of_pid else []),
            ],
        )

        create("StringIds")
        _executemany(con, "StringIds", ["id", "value"], [(i, s) for s, i in strings.ids.items()])
        con.execute("COMMIT")
    finally:
        con.close()
    return result
