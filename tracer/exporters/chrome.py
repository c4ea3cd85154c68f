"""Chrome trace JSON for Perfetto (ui.perfetto.dev) and chrome://tracing, from any timeline.

Layout (the lanes of :mod:`tracer.timeline.layout`, tracks of :mod:`tracer.exporters._lanes`): one process per host
process and one per GPU ("GPU 0 · NVIDIA H200"); on a GPU one thread per stream and kind of work ("GPU 0 ·
stream 7 · kernels", "· copies", "· memsets", "· ranges"); on the host one thread per OS thread plus one for
its NVTX / record_function ranges ("thread 424 (python3) · ranges"). In a timeline of several ranks each
rank's processes and GPUs are processes of their own, named "rank 1 · python3", "rank 1 · GPU 0 · NVIDIA
H200", and every track begins with its rank. A viewer stacks the slices of one thread by nesting, and
Perfetto drops a slice that overlaps another without nesting; so intervals that overlap that way move to a
further sub-track ("· 2") instead of being lost (``tracer.timeline.layout.sub_tracks``). Flow arrows ("ac2g", as
Kineto writes them) join each CUDA API call to the GPU work it launched (the timeline's launch join: same
rank, process and correlation id).

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
from tracer.exporters._lanes import Track, layout
from tracer.files.atomic import gzip_name, gzip_writer
from tracer.timeline import GPU_WORK_KINDS, KINDS, DeviceKey, Timeline, device_title, launch_links
from tracer.timeline.layout import rank_prefix

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
    "python": "python_function",
    "other": "other",
}
_GPU_ARGS_KINDS = frozenset((*GPU_WORK_KINDS, "gpu_range"))
#: Tracks that are not an OS thread or a CUDA stream get thread ids from here up (uint32, clear of real tids).
SYNTHETIC_TID_BASE = 0x7F000000
#: GPU processes use the device index as pid (as Kineto does) unless a host process already has that pid.
SYNTHETIC_GPU_PID_BASE = 0x7E000000
#: A host process whose pid another rank already shows gets a display pid from here up.
SYNTHETIC_HOST_PID_BASE = 0x7D000000
CHUNK = 50_000


def _track_ids(
    tracks: list[Track], host_pids: set[int]
) -> tuple[dict[DeviceKey, int], dict[tuple[int, int], int], np.ndarray, np.ndarray]:
    """Display pid and tid per track; and the pid shown for each GPU (rank, device) and process (rank, pid).

    A host process keeps its own pid and a GPU its index (as Kineto does) unless that is taken: by a host
    process, or by the same pid or index of another rank (a job's ranks are separate processes with GPUs of
    their own, which often have the same numbers).
    """
    taken: dict[int, int] = {}  # display pid -> the rank that has it
    host_pid: dict[tuple[int, int], int] = {}
    spare_host = SYNTHETIC_HOST_PID_BASE
    for ln in sorted((t.lane for t in tracks if not t.on_gpu), key=lambda ln: (ln.rank, ln.pid)):
        if (ln.rank, ln.pid) in host_pid:
            continue
        pid = ln.pid if ln.pid >= 0 else SYNTHETIC_GPU_PID_BASE - 1  # host rows without a process
        if taken.get(pid, ln.rank) != ln.rank:
            while spare_host in taken:
                spare_host += 1
            pid = spare_host
        host_pid[(ln.rank, ln.pid)] = pid
        taken[pid] = ln.rank
    gpu_pid: dict[DeviceKey, int] = {}
    spare_gpu = SYNTHETIC_GPU_PID_BASE + 0x8000
    for key in sorted({t.lane.device_key for t in tracks if t.lane.device_key is not None}):
        d = key.device
        pid = d if d not in host_pids and d >= 0 else SYNTHETIC_GPU_PID_BASE + d
        if pid in taken:
            pid = SYNTHETIC_GPU_PID_BASE + d
        while pid in taken:
            pid = spare_gpu
            spare_gpu += 1
        gpu_pid[key] = pid
        taken[pid] = key.rank
    pids = np.zeros(len(tracks), dtype=np.int64)
    tids = np.zeros(len(tracks), dtype=np.int64)
    used: set[tuple[int, int]] = set()
    next_tid = SYNTHETIC_TID_BASE
    # A stream keeps its own id on its first track (kernels, else copies ...), a thread on its main track.
    preferred = sorted(
        range(len(tracks)),
        key=lambda i: (tracks[i].sub, tracks[i].group != "" if not tracks[i].on_gpu else 0, tracks[i].index),
    )
    for i in preferred:
        tr = tracks[i]
        gpu = tr.lane.device_key
        pid = gpu_pid[gpu] if gpu is not None else host_pid[(tr.rank, tr.pid)]
        own = tr.stream if tr.on_gpu else tr.tid
        # tid 0 is "unset" to Perfetto (it substitutes the pid), negative ids do not fit its uint32
        if own > 0 and (pid, own) not in used:
            tid = own
        else:
            tid = next_tid
            next_tid += 1
        used.add((pid, tid))
        pids[i], tids[i] = pid, tid
    return gpu_pid, host_pid, pids, tids


def _metadata(
    timeline: Timeline,
    tracks: list[Track],
    gpu_pid: dict[DeviceKey, int],
    host_pid: dict[tuple[int, int], int],
    pids: np.ndarray,
    tids: np.ndarray,
    multi_rank: bool,
) -> list[dict[str, Any]]:
    meta = timeline.meta
    out: list[dict[str, Any]] = []
    # display pid -> (rank, the trace's pid); where a rank's processes share a display pid, the last names it
    host = {pid: key for key, pid in host_pid.items()}
    for position, pid in enumerate(sorted(host, key=lambda p: (host[p][0], p))):
        rank, own = host[pid]
        name = meta.process_names.get(own) or (
            f"process {own}" if own >= 0 else f"no process (pid {own} in the trace)"
        )
        name = rank_prefix(rank, multi_rank) + name
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        out.append(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": position}}
        )
    for position, (key, pid) in enumerate(sorted(gpu_pid.items())):
        gpu = meta.gpu_names.get(key.device)
        title = device_title(key, multi_rank)
        name = title + (f" · {gpu}" if gpu else "")
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        out.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": title}})
        # one rank: by GPU index, as always; several: in (rank, device) order
        index = {"sort_index": 1_000_000 + (position if multi_rank else key.device)}
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": index})
    for tr, pid, tid in zip(tracks, pids.tolist(), tids.tolist()):
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tr.label}})
        out.append(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tr.index}}
        )
    return out


def _flows(
    events: pd.DataFrame, ts_us: np.ndarray, row_pid: np.ndarray, row_tid: np.ndarray
) -> list[dict[str, Any]]:
    """ac2g flow pairs: each CUDA API call → each piece of GPU work it launched (kernels, copies, memsets; not
    the profiler's projected ranges), through the timeline's one launch join
    (:func:`tracer.timeline.launch_links`: same rank, process and correlation id)."""
    links = launch_links(events)
    if links.empty:
        return []
    work = events.index.get_indexer(links["work_row"].to_numpy())
    call = events.index.get_indexer(links["call_row"].to_numpy())
    is_work = np.isin(events["kind"].cat.codes.to_numpy(), [KINDS.index(k) for k in GPU_WORK_KINDS])
    keep = is_work[work]
    work, call = work[keep], call[keep]
    order = np.argsort(work, kind="stable")
    out: list[dict[str, Any]] = []
    for flow_id, (c, w) in enumerate(zip(call[order].tolist(), work[order].tolist()), start=1):
        out.append({"ph": "s", "id": flow_id, "pid": int(row_pid[c]), "tid": int(row_tid[c]),
                    "ts": float(ts_us[c]), "cat": "ac2g", "name": "ac2g"})
        out.append({"ph": "f", "id": flow_id, "pid": int(row_pid[w]), "tid": int(row_tid[w]),
                    "ts": float(ts_us[w]), "cat": "ac2g", "name": "ac2g", "bp": "e"})
    return out


def build(
    timeline: Timeline, *, progress: ProgressFn | None = None
) -> tuple[dict[str, Any], list[bytes], ExportResult]:
    """The trace's header dict and its events as JSON fragments (one per chunk, comma-joined inside)."""
    ev = timeline.events.reset_index(drop=True)
    result = ExportResult(format="chrome", path=Path())
    track_of_row, tracks = layout(ev, timeline.meta)
    host_pids = set(ev.loc[ev["device"] < 0, "pid"].astype(int).tolist())
    gpu_pid, host_pid, track_pid, track_tid = _track_ids(tracks, host_pids)
    row_pid = track_pid[track_of_row] if len(ev) else np.zeros(0, np.int64)
    row_tid = track_tid[track_of_row] if len(ev) else np.zeros(0, np.int64)

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
            if moved_pid[i] or not single_rank:  # a job: every row's real pid, and its rank below, read back
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
    flows = _flows(timeline.events, ts_us, row_pid, row_tid)  # (the frame whose launch join is cached)
    meta_events = _metadata(timeline, tracks, gpu_pid, host_pid, track_pid, track_tid, not single_rank)
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
    if timeline.meta.extra.get("frame_lines") is not None:  # (read back by the Kineto parser: how to read the frames)
        header["tracer"]["frame_lines"] = timeline.meta.extra["frame_lines"]
    if single_rank and len(ranks) and int(ranks[0]) != 0:
        header["distributedInfo"] = {"rank": int(ranks[0])}
    if not single_rank:
        result.notes.append(
            "rows of several distributed ranks share one file: each row's rank is in args.rank (Kineto's "
            "distributedInfo holds one rank per file)"
        )
    split = sorted({tr.label.rsplit(" · ", 1)[0] for tr in tracks if tr.sub})
    if split:
        result.notes.append(
            f"{len(split)} row(s) had intervals that overlap without nesting and were split into sub-tracks "
            f"so that no slice is dropped: {', '.join(split[:5])}{' …' if len(split) > 5 else ''}"
        )
    counts = pd.Series(kinds).value_counts()
    result.counts = {f"{k} events": int(v) for k, v in counts.items()}
    result.counts["flows"] = len(flows) // 2
    result.counts["tracks"] = len(tracks)
    return header, chunks, result


def write(timeline: Timeline, dest: Path, *, final: Path, progress: ProgressFn | None = None) -> ExportResult:
    """Write ``timeline`` as Chrome trace JSON to ``dest``; gzip it when ``final`` ends in ``.gz``."""
    header, chunks, result = build(timeline, progress=progress)
    head = orjson.dumps(header)[:-1] + b',"traceEvents":['
    zipped = final.name.lower().endswith(".gz")
    with gzip_writer(dest, name=gzip_name(final)) if zipped else open(dest, "wb") as raw:
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
