"""Chrome trace JSON for Perfetto (ui.perfetto.dev) and chrome://tracing, from any timeline.

Layout: one process per host process and one per GPU ("GPU 0 · NVIDIA H200"); on a GPU one thread per stream
and kind of work ("GPU 0 · stream 7 · kernels", "· copies", "· memsets", "· ranges"); on the host one thread per
OS thread plus one for its NVTX / record_function ranges ("python3 (thread 424) · ranges"). A viewer stacks the
slices of one thread by nesting, and Perfetto drops a slice that overlaps another without nesting; so intervals
that overlap that way move to a further sub-track ("· 2") instead of being lost (see ``_nesting``). Flow arrows
("ac2g", as Kineto writes them) join each CUDA API call to the GPU work it launched (same correlation id).

Times are exact to the nanosecond: ``ts``/``dur`` are microseconds relative to ``baseTimeNanoseconds`` (the
trace's first nanosecond), so the values stay small enough that a double holds every nanosecond and both
Perfetto (which rounds µs × 1000) and tracer's own Kineto parser get the integer back. ``displayTimeUnit`` is
deliberately absent: older Perfetto versions read ``"ns"`` there as the unit of ``ts`` itself, which would
squeeze the trace a thousandfold; newer ones ignore it.

The file is also a Kineto trace to tracer: its parser reads it back to the same timeline (kinds through
``cat``, device/stream/correlation/bytes through ``args`` as Kineto writes them). Where a row is drawn on a
track other than its own thread or stream, ``args.tracer_pid`` / ``args.tracer_tid`` keep its timeline pid/tid.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from tracer.exporters import ExportResult, ProgressFn, tracer_version
from tracer.exporters._lanes import Lane, layout
from tracer.timeline import GPU_WORK_KINDS, Timeline

#: timeline kind -> Kineto category (the inverse of tracer's Kineto parser)
CAT_BY_KIND: dict[str, str] = {
    "kernel": "kernel",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "cpu_op": "cpu_op",
    "runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "range": "user_annotation",
    "gpu_range": "gpu_user_annotation",
    "sync": "cuda_sync",
    "other": "other",
}
_GPU_ARGS_KINDS = frozenset((*GPU_WORK_KINDS, "gpu_range"))
#: Tracks that are not an OS thread or a CUDA stream get thread ids from here up (uint32, clear of real tids).
SYNTHETIC_TID_BASE = 0x7F000000
#: GPU processes use the device index as pid (as Kineto does) unless a host process already has that pid.
SYNTHETIC_GPU_PID_BASE = 0x7E000000
CHUNK = 50_000


def _track_ids(lanes: list[Lane], host_pids: set[int]) -> tuple[dict[int, int], np.ndarray, np.ndarray]:
    """Display pid and tid per lane; and the pid shown for each GPU."""
    devices = sorted({ln.device for ln in lanes if ln.on_gpu})
    gpu_pid = {
        d: (d if d not in host_pids and d >= 0 else SYNTHETIC_GPU_PID_BASE + d) for d in devices
    }
    pids = np.zeros(len(lanes), dtype=np.int64)
    tids = np.zeros(len(lanes), dtype=np.int64)
    used: set[tuple[int, int]] = set()
    next_tid = SYNTHETIC_TID_BASE
    # A stream keeps its own id on its first row (kernels, else copies ...), a thread on its main row.
    preferred = sorted(
        range(len(lanes)),
        key=lambda i: (lanes[i].sub, lanes[i].group != "" if not lanes[i].on_gpu else 0, lanes[i].index),
    )
    for i in preferred:
        ln = lanes[i]
        pid = gpu_pid[ln.device] if ln.on_gpu else ln.pid
        if pid < 0:
            pid = SYNTHETIC_GPU_PID_BASE - 1  # host rows without a process
        own = ln.stream if ln.on_gpu else ln.tid
        # tid 0 is "unset" to Perfetto (it substitutes the pid), negative ids do not fit its uint32
        if own > 0 and (pid, own) not in used:
            tid = own
        else:
            tid = next_tid
            next_tid += 1
        used.add((pid, tid))
        pids[i], tids[i] = pid, tid
    return gpu_pid, pids, tids


def _metadata(timeline: Timeline, lanes: list[Lane], gpu_pid: dict[int, int], pids, tids) -> list[dict[str, Any]]:
    meta = timeline.meta
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    host = {int(p): ln.pid for ln, p in zip(lanes, pids) if not ln.on_gpu}  # display pid -> the trace's pid
    for rank, pid in enumerate(sorted(host)):
        own = host[pid]
        name = meta.process_names.get(own) or (f"process {own}" if own >= 0 else f"no process (pid {own} in the trace)")
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": rank}})
        seen.add(pid)
    for d, pid in sorted(gpu_pid.items()):
        gpu = meta.gpu_names.get(d)
        name = f"GPU {d}" + (f" · {gpu}" if gpu else "")
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        out.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": f"GPU {d}"}})
        out.append(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": 1_000_000 + d}}
        )
    for ln, pid, tid in zip(lanes, pids.tolist(), tids.tolist()):
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": ln.label}})
        out.append(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": ln.index}}
        )
    return out


def _flows(ev: pd.DataFrame, ts_us: np.ndarray, row_pid: np.ndarray, row_tid: np.ndarray) -> list[dict[str, Any]]:
    """ac2g flow pairs: each CUDA API call → each piece of GPU work with its correlation id."""
    kind = ev["kind"].astype(str)
    corr = ev["correlation"]
    calls = ev.index[kind.isin(("runtime", "driver")).to_numpy() & corr.notna().to_numpy()]
    work = ev.index[kind.isin(GPU_WORK_KINDS).to_numpy() & corr.notna().to_numpy() & (ev["device"] >= 0).to_numpy()]
    if len(calls) == 0 or len(work) == 0:
        return []
    c = pd.DataFrame(
        {"call": calls, "rank": ev["rank"].to_numpy()[calls], "corr": corr.to_numpy()[calls].astype(np.int64),
         "call_pid": ev["pid"].to_numpy()[calls]}
    )
    w = pd.DataFrame(
        {"work": work, "rank": ev["rank"].to_numpy()[work], "corr": corr.to_numpy()[work].astype(np.int64),
         "work_pid": ev["pid"].to_numpy()[work]}
    )
    pairs = w.merge(c, on=["rank", "corr"])
    # Correlation ids are per process: where several processes reuse one, keep the call of the work's own
    # process (nsys-parsed rows carry it); Kineto puts the device index there, so otherwise take the first.
    pairs["same_pid"] = pairs["work_pid"] == pairs["call_pid"]
    pairs = pairs.sort_values(["work", "same_pid", "call"], ascending=[True, False, True])
    pairs = pairs.drop_duplicates("work", keep="first")
    out: list[dict[str, Any]] = []
    for flow_id, (call, wrk) in enumerate(zip(pairs["call"].tolist(), pairs["work"].tolist()), start=1):
        out.append({"ph": "s", "id": flow_id, "pid": int(row_pid[call]), "tid": int(row_tid[call]),
                    "ts": float(ts_us[call]), "cat": "ac2g", "name": "ac2g"})
        out.append({"ph": "f", "id": flow_id, "pid": int(row_pid[wrk]), "tid": int(row_tid[wrk]),
                    "ts": float(ts_us[wrk]), "cat": "ac2g", "name": "ac2g", "bp": "e"})
    return out


def build(timeline: Timeline, *, progress: ProgressFn | None = None) -> tuple[dict[str, Any], list[bytes], ExportResult]:
    """The trace's header dict and its events as JSON fragments (one per chunk, comma-joined inside)."""
    ev = timeline.events.reset_index(drop=True)
    result = ExportResult(format="chrome", path=Path())
    lane_of_row, lanes = layout(ev, timeline.meta)
    host_pids = set(ev.loc[ev["device"] < 0, "pid"].astype(int).tolist())
    gpu_pid, lane_pid, lane_tid = _track_ids(lanes, host_pids)
    row_pid = lane_pid[lane_of_row] if len(ev) else np.zeros(0, np.int64)
    row_tid = lane_tid[lane_of_row] if len(ev) else np.zeros(0, np.int64)

    starts = ev["start_ns"].to_numpy(np.int64)
    ends = ev["end_ns"].to_numpy(np.int64)
    base = int(starts.min() // 1000 * 1000) if len(ev) else 0
    # Exact: a correctly rounded division of an integer below 2**53 by 1000 (see the module docstring).
    ts_us = (starts - base) / 1000.0
    dur_us = (ends - starts) / 1000.0

    kinds = ev["kind"].astype(str).to_numpy()
    names = ev["name"].astype(str).to_numpy()
    cats = pd.Series(kinds).map(CAT_BY_KIND).fillna("other").to_numpy()
    device = ev["device"].to_numpy(np.int64)
    stream = ev["stream"].to_numpy(np.int64)
    tl_pid = ev["pid"].to_numpy(np.int64)
    tl_tid = ev["tid"].to_numpy(np.int64)
    corr = ev["correlation"].to_numpy(dtype=object, na_value=None)
    nbytes = ev["bytes"].to_numpy(dtype=object, na_value=None)
    ranks = ev["rank"].to_numpy(np.int64)
    single_rank = len(set(ranks.tolist())) <= 1
    gpu_args = np.isin(kinds, list(_GPU_ARGS_KINDS)) & (device >= 0)
    moved_pid = row_pid != tl_pid
    moved_tid = row_tid != tl_tid

    order = np.lexsort((-ends, starts))  # parents before children at equal start
    chunks: list[bytes] = []
    for lo in range(0, len(order), CHUNK):
        idx = order[lo : lo + CHUNK]
        batch: list[dict[str, Any]] = []
        for i in idx.tolist():
            args: dict[str, Any] = {}
            if gpu_args[i]:
                args["device"] = int(device[i])
                args["stream"] = int(stream[i])
            if corr[i] is not None:
                args["correlation"] = int(corr[i])
            if nbytes[i] is not None:
                args["bytes"] = int(nbytes[i])
            if moved_pid[i]:
                args["tracer_pid"] = int(tl_pid[i])
            if moved_tid[i]:
                args["tracer_tid"] = int(tl_tid[i])
            if not single_rank:
                args["rank"] = int(ranks[i])
            batch.append(
                {"ph": "X", "cat": cats[i], "name": names[i], "pid": int(row_pid[i]), "tid": int(row_tid[i]),
                 "ts": float(ts_us[i]), "dur": float(dur_us[i]), "args": args}
            )
        chunks.append(orjson.dumps(batch)[1:-1])
        if progress:
            progress("chrome: events", min(lo + CHUNK, len(order)), len(order))
    flows = _flows(ev, ts_us, row_pid, row_tid)
    meta_events = _metadata(timeline, lanes, gpu_pid, lane_pid, lane_tid)
    for extra in (flows, meta_events):
        if extra:
            chunks.append(orjson.dumps(extra)[1:-1])

    header: dict[str, Any] = {
        "schemaVersion": 1,
        "traceName": timeline.meta.source,
        "baseTimeNanoseconds": base,
        "deviceProperties": [{"id": d, "name": n} for d, n in sorted(timeline.meta.gpu_names.items())],
        "tracer": {"version": tracer_version(), "source_format": timeline.meta.format},
    }
    if single_rank and len(ranks) and int(ranks[0]) != 0:
        header["distributedInfo"] = {"rank": int(ranks[0])}
    if not single_rank:
        result.notes.append(
            "rows of several distributed ranks share one file: each row's rank is in args.rank (Kineto's "
            "distributedInfo holds one rank per file)"
        )
    split = sorted({ln.label.rsplit(" · ", 1)[0] for ln in lanes if ln.sub})
    if split:
        result.notes.append(
            f"{len(split)} row(s) had intervals that overlap without nesting and were split into sub-tracks "
            f"so that no slice is dropped: {', '.join(split[:5])}{' …' if len(split) > 5 else ''}"
        )
    counts = pd.Series(kinds).value_counts()
    result.counts = {f"{k} events": int(v) for k, v in counts.items()}
    result.counts["flows"] = len(flows) // 2
    result.counts["tracks"] = len(lanes)
    return header, chunks, result


def write(timeline: Timeline, dest: Path, *, final: Path, progress: ProgressFn | None = None) -> ExportResult:
    """Write ``timeline`` as Chrome trace JSON to ``dest``; gzip it when ``final`` ends in ``.gz``."""
    header, chunks, result = build(timeline, progress=progress)
    head = orjson.dumps(header)[:-1] + b',"traceEvents":['
    opener = (lambda p: gzip.open(p, "wb", compresslevel=6)) if final.name.lower().endswith(".gz") else (
        lambda p: open(p, "wb")
    )
    with opener(dest) as raw:
        f = io.BufferedWriter(raw, buffer_size=1 << 20) if isinstance(raw, gzip.GzipFile) else raw
        f.write(head)
        first = True
        for chunk in chunks:
            if not chunk:
                continue
            if not first:
                f.write(b",")
            f.write(chunk)
            first = False
        f.write(b"]}\n")
        f.flush()
    result.path = final
    return result
