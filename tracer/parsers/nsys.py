"""Nsight Systems SQLite export (``nsys export --type sqlite``) → canonical timeline.

Tables a report lacks (no NVTX, no memsets ...) are simply absent from the export; each is read only if it
is there. Times are the export's own integer nanoseconds.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from tracer.errors import TraceFormatError
from tracer.timeline import HOST_DEVICE, HOST_STREAM, Timeline, TraceMeta, build_events, empty_events, validate

# CUPTI's CUpti_ActivityMemcpyKind (ENUM_CUDA_MEMCPY_OPER in the export): arrays count as device memory,
# unified-memory migrations as the direction they move data in.
COPY_KIND_BY_ID: dict[int, str] = {
    0: "Other",
    1: "HtoD",
    2: "DtoH",
    3: "HtoD",
    4: "DtoH",
    5: "DtoD",
    6: "DtoD",
    7: "DtoD",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD",
    12: "DtoH",
    13: "DtoD",
}
# CUpti_ActivityMemoryKind (ENUM_CUDA_MEM_KIND); the labels Kineto also uses in its memcpy names.
MEM_KIND_LABEL: dict[int, str] = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
NVTX_PUSHPOP, NVTX_STARTEND, NVTX_MARK = 59, 60, 34
EVENT_CLASS_DRIVER = 1

_REQUIRED_ANY = ("StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def split_global_id(gid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """nsys' serialized globalTid → (pid, tid): pid in bits 24–47, tid in bits 0–23."""
    gid = gid.astype(np.int64)
    return (gid >> 24) & 0xFFFFFF, gid & 0xFFFFFF


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _frame(con: sqlite3.Connection, sql: str) -> pd.DataFrame:
    return pd.read_sql_query(sql, con)


def parse_nsys_sqlite(path: str | Path, source: str | None = None) -> Timeline:
    """Parse an Nsight Systems SQLite export into a :class:`Timeline`."""
    source = str(source or path)
    try:
        con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        tables = _tables(con)
    except sqlite3.DatabaseError as exc:
        raise TraceFormatError(source, f"not a readable SQLite file: {exc}") from None
    try:
        if not any(t in tables for t in _REQUIRED_ANY):
            raise TraceFormatError(
                source, "SQLite file is not an Nsight Systems export (no StringIds, CUPTI or NVTX tables)"
            )
        return _parse(con, tables, source)
    except sqlite3.DatabaseError as exc:
        raise TraceFormatError(source, f"damaged Nsight Systems export: {exc}") from None
    except (TypeError, ValueError) as exc:
        # NULL or text where nsys always writes integers (a hand-made or damaged file): pandas/int() say so
        raise TraceFormatError(source, f"damaged Nsight Systems export: unexpected values ({exc})") from None
    finally:
        con.close()


def _parse(con: sqlite3.Connection, tables: set[str], source: str) -> Timeline:
    strings: dict[int, str] = {}
    if "StringIds" in tables:
        strings = dict(con.execute("SELECT id, value FROM StringIds").fetchall())

    def names(ids: pd.Series) -> list[str]:
        return [strings.get(int(i), f"<string {i}>") if pd.notna(i) else "" for i in ids]

    parts: list[dict[str, object]] = []

    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        cols = _columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        name_col = "demangledName" if "demangledName" in cols else "shortName"
        k = _frame(
            con,
            f"SELECT start, end, deviceId, streamId, correlationId, globalPid, {name_col} AS nameId "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL",
        )
        parts.append(_gpu_part(k, "kernel", names(k["nameId"])))

    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        m = _frame(
            con,
            "SELECT start, end, deviceId, streamId, correlationId, globalPid, bytes, copyKind, srcKind, dstKind "
            "FROM CUPTI_ACTIVITY_KIND_MEMCPY",
        )
        direction = [COPY_KIND_BY_ID.get(int(c), "Other") for c in m["copyKind"]]
        src = [MEM_KIND_LABEL.get(int(s), "Unknown") if pd.notna(s) else "Unknown" for s in m["srcKind"]]
        dst = [MEM_KIND_LABEL.get(int(s), "Unknown") if pd.notna(s) else "Unknown" for s in m["dstKind"]]
        # Named as Kineto names them, so the same copy reads the same whichever profiler saw it.
        label = [f"Memcpy {d} ({s} -> {t})" for d, s, t in zip(direction, src, dst)]
        part = _gpu_part(m, "memcpy", label)
        part["copy_kind"] = direction
        part["bytes"] = m["bytes"].astype("Int64").to_numpy()
        parts.append(part)

    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        cols = _columns(con, "CUPTI_ACTIVITY_KIND_MEMSET")
        kind_col = "memKind" if "memKind" in cols else "NULL"
        s = _frame(
            con,
            f"SELECT start, end, deviceId, streamId, correlationId, globalPid, bytes, {kind_col} AS memKind "
            "FROM CUPTI_ACTIVITY_KIND_MEMSET",
        )
        label = [f"Memset ({MEM_KIND_LABEL.get(int(x), 'Device') if pd.notna(x) else 'Device'})" for x in s["memKind"]]
        part = _gpu_part(s, "memset", label)
        part["bytes"] = s["bytes"].astype("Int64").to_numpy()
        parts.append(part)

    for table, kind in (("CUPTI_ACTIVITY_KIND_RUNTIME", "runtime"), ("CUPTI_ACTIVITY_KIND_DRIVER", "driver")):
        if table in tables:
            # nsys 2024+ stores driver API calls in the RUNTIME table too, told apart by eventClass
            # (ENUM_NSYS_EVENT_CLASS: 0 CUDA runtime, 1 CUDA driver).
            cls = "eventClass" if "eventClass" in _columns(con, table) else "NULL"
            r = _frame(con, f"SELECT start, end, globalTid, correlationId, nameId, {cls} AS eventClass FROM {table}")
            pid, tid = split_global_id(r["globalTid"].fillna(0).to_numpy())
            part = _host_part(r, kind, names(r["nameId"]), pid, tid, r["correlationId"])
            part["kind"] = np.where(r["eventClass"].to_numpy() == EVENT_CLASS_DRIVER, "driver", kind).tolist()
            parts.append(part)

    if "TRACER_EVENTS" in tables:
        # tracer's own table in files it exported: the timeline rows nsys has no table for (framework ops ...)
        t = _frame(
            con,
            "SELECT start, end, kind, copyKind, nameId, deviceId, streamId, pid, tid, rank, bytes, correlationId "
            "FROM TRACER_EVENTS",
        )
        parts.append(
            {
                "start_ns": t["start"].to_numpy(np.int64),
                "end_ns": t["end"].to_numpy(np.int64),
                "kind": t["kind"].tolist(),
                "copy_kind": t["copyKind"].fillna("").tolist(),
                "name": names(t["nameId"]),
                "device": t["deviceId"].to_numpy(np.int64),
                "stream": t["streamId"].to_numpy(np.int64),
                "pid": t["pid"].to_numpy(np.int64),
                "tid": t["tid"].to_numpy(np.int64),
                "rank": t["rank"].to_numpy(np.int64),
                "bytes": t["bytes"].astype("Int64").to_numpy(),
                "correlation": t["correlationId"].astype("Int64").to_numpy(),
            }
        )

    if "NVTX_EVENTS" in tables:
        n = _frame(
            con,
            "SELECT start, COALESCE(end, start) AS end, eventType, text, textId, globalTid FROM NVTX_EVENTS "
            f"WHERE eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}, {NVTX_MARK})",
        )
        label = [
            t if isinstance(t, str) else (strings.get(int(i), "") if pd.notna(i) else "")
            for t, i in zip(n["text"], n["textId"])
        ]
        pid, tid = split_global_id(n["globalTid"].fillna(0).to_numpy())
        parts.append(_host_part(n, "range", label, pid, tid, None))

    meta = TraceMeta(format="nsys", source=source)
    for table in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU"):
        # The device column is "id" in nsys 2023+ and "deviceId" in older exports (and in the CUDA table).
        cols = _columns(con, table) if table in tables else set()
        dev = next((c for c in ("id", "deviceId") if c in cols), None)
        if dev is None or "name" not in cols:
            continue
        for gid, gname in con.execute(f'SELECT "{dev}", name FROM "{table}"'):
            if gid is not None and gname and int(gid) not in meta.gpu_names:
                meta.gpu_names[int(gid)] = str(gname)
    if "ThreadNames" in tables:
        for name_id, gtid in con.execute("SELECT nameId, globalTid FROM ThreadNames"):
            p, t = split_global_id(np.array([gtid]))
            meta.thread_names[f"{int(p[0])}:{int(t[0])}"] = strings.get(int(name_id), "")
    if "PROCESSES" in tables:
        for gpid, pid_, pname in con.execute("SELECT globalPid, pid, name FROM PROCESSES"):
            meta.process_names[int(pid_)] = str(pname)
    if "TRACER_META" in tables:
        row = con.execute("SELECT value FROM TRACER_META WHERE name = 'timeline_meta'").fetchone()
        if row and row[0]:
            import orjson

            saved = TraceMeta.from_dict(orjson.loads(row[0]))
            # tracer wrote TARGET_INFO_GPU's names itself ("GPU 0" where it knew none): the saved ones are the truth
            meta.gpu_names = saved.gpu_names
            meta.process_names.update(saved.process_names)
            meta.thread_names.update(saved.thread_names)
            meta.extra["exported_from"] = saved.format
            meta.extra.update({k: v for k, v in saved.extra.items() if k not in meta.extra})
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        if row:
            meta.extra["session_start_utc_ns"] = int(row[0])
    if "META_DATA_EXPORT" in tables:
        row = con.execute("SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchone()
        if row:
            meta.extra["nsys_version"] = str(row[0])

    return Timeline(validate(_concat(parts), source), meta)


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
    }


def _concat(parts: list[dict[str, object]]) -> pd.DataFrame:
    if not parts:
        return empty_events()
    cols: dict[str, object] = {}
    for col in parts[0]:
        values = [p[col] for p in parts]
        if col == "bytes" or col == "correlation":
            cols[col] = pd.array(np.concatenate([np.asarray(v, dtype=object) for v in values]), dtype="Int64")
        elif col in ("kind", "copy_kind", "name"):
            cols[col] = [x for v in values for x in v]  # type: ignore[attr-defined]
        else:
            cols[col] = np.concatenate([np.asarray(v) for v in values])
    return build_events(cols)
