"""The summary's own analyses of the whole timeline (:data:`BUILTIN`, registered by :mod:`tracer.analysis.catalog`).

Each is a compute function (timeline -> typed result, :mod:`tracer.analysis.results`), its JSON (what
``tracer summary --json`` has always written: a one-rank summary is unchanged, a job's names the rank) and its
text blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.lanes import busiest_first, lane_stats, thread_rows
from tracer.analysis.overlap import (
    DeviceOverlap,
    busy_sets,
    concurrency_of,
    device_overlap,
    gpu_work,
    kind_mask,
)
from tracer.analysis.ranges import RULE_TEXT, launch_pairs, longest_first, range_summary
from tracer.analysis.registry import Analysis, Block, Column, Line, Table, TextOptions, stack_parts
from tracer.analysis.results import (
    Concurrency,
    CopyStat,
    DeviceIdle,
    HostThread,
    KernelStat,
    LaneStat,
    Ranges,
    RangeStat,
    Span,
    TraceInfo,
)
from tracer.analysis.text import ms, parse_device_label, pct, pct_text
from tracer.analysis.work import add_kernel_totals, copy_summary, kernel_totals, kernels_by_total
from tracer.timeline import DEVICE_COLUMNS, GPU_WORK_KINDS, DeviceKey, device_label
from tracer.timeline.keys import key_codes

if TYPE_CHECKING:
    from tracer.analysis.summary import Summary
    from tracer.timeline import Timeline


def _int_keys(d: Mapping[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in d.items()}


def _frames(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-rank tables stacked in rank order (empty ones left out: they add no rows)."""
    rows = [p for p in parts if len(p)]
    return pd.concat(rows, ignore_index=True) if len(rows) > 1 else (rows or parts)[0].reset_index(drop=True)


def _gpu_label(key: DeviceKey, summary: Summary) -> str:
    return device_label(key, summary.multi_rank)


# ---------------------------------------------------------------------------------------------------- trace


def _trace(t: Timeline) -> TraceInfo:
    return TraceInfo(t.meta.format, t.meta.source)


def _trace_blocks(r: TraceInfo, s: Summary, _o: TextOptions) -> list[Block]:
    span = s.span
    return [Line((
        (r.source, "bold"),
        (f"  [{r.format}]  span {ms(span.span_ns)} ms", ""),
        (f", GPU work over {ms(span.gpu_span_ns)} ms" if span.gpu_span_ns else "", ""),
        (f", {s.events:,} intervals", ""),
    ))]


TRACE = Analysis(
    "trace", "What the trace is: its format and file", _trace,
    to_json=lambda r, s: {"format": r.format, "source": r.source},
    from_json=lambda d: TraceInfo(str(d.get("format", "")), str(d.get("source", ""))),
    json_keys=("format", "source"), blocks=_trace_blocks, text_order=10,
    combine=lambda _parts, job: _trace(job),
)


# ---------------------------------------------------------------------------------------------------- per GPU


def _devices_blocks(r: list[DeviceOverlap], s: Summary, _o: TextOptions) -> list[Block]:
    if not r:
        where = " (CPU-only run?): per host thread below." if s.threads else "."
        return [Line.of(f"No GPU work in this trace{where}", "yellow")]
    gpus = ", ".join(f"GPU {k} = {v}" for k, v in s.gpu_names.items())
    cols = ("GPU", "kernels", "copies", "compute", "copy", "overlap", "hidden", "busy")
    rows = tuple(
        (_gpu_label(d.key, s), f"{d.kernels:,}", f"{d.memcpys:,}", ms(d.compute_ns), ms(d.copy_ns), ms(d.overlap_ns),
         pct_text(d.copy_hidden_pct), ms(d.busy_ns))
        for d in r
    )
    # (kernels counts every kernel: where some are communication, the comm table below splits the count)
    title = "Per GPU (ms): compute = kernels (not comm), copy = memcpys, overlap = copy hidden behind compute"
    if s.part("comm"):
        title += "; kernels: all, comm included"
    return [Table(title, tuple(Column(c, no_wrap=True) for c in cols), rows, gpus or None)]


def _devices_from_json(d: Mapping[str, Any]) -> list[DeviceOverlap]:
    out = []
    for label, v in (d.get("devices") or {}).items():
        key = parse_device_label(label)
        out.append(DeviceOverlap(device=key.device, rank=key.rank, **{k: int(v.get(k, 0)) for k in (
            "compute_ns", "copy_ns", "overlap_ns", "busy_ns", "kernels", "memcpys", "memsets")}))
    return out


DEVICES = Analysis(
    "devices", "Per GPU: compute, copy, their overlap (copy hidden), busy", lambda t: device_overlap(t.events),
    to_json=lambda r, s: {"devices": {_gpu_label(d.key, s): d.as_dict() for d in r}},
    from_json=_devices_from_json, json_keys=("devices",), blocks=_devices_blocks, text_order=30,
    per_rank=lambda t: device_overlap(t.events), combine=stack_parts,
)


def _lanes(t: Timeline) -> list[LaneStat]:
    return [LaneStat(*(int(v) for v in row)) for row in lane_stats(t.events).itertuples(index=False)]


def _lanes_blocks(r: list[LaneStat], s: Summary, _o: TextOptions) -> list[Block]:
    if not s.devices:
        return []
    cols = ("GPU", "stream", "kernels", "memcpys", "memsets", "busy ms")
    rows = tuple((_gpu_label(lane.key.device_key, s), str(lane.stream), f"{lane.kernels:,}", f"{lane.memcpys:,}",
                  f"{lane.memsets:,}", ms(lane.busy_ns)) for lane in r)
    return [Table("Per stream", tuple(Column(c) for c in cols), rows)]


LANES = Analysis(
    "lanes", "Per stream of each GPU: work counts and busy time", _lanes,
    to_json=lambda r, s: {"lanes": [lane.as_dict(s.multi_rank) for lane in r]},
    from_json=lambda d: [LaneStat.from_dict(row) for row in d.get("lanes") or []],
    json_keys=("lanes",), blocks=_lanes_blocks, text_order=40,
    per_rank=_lanes, combine=stack_parts,
)

Bounds = tuple[tuple[int, int] | None, tuple[int, int] | None]


def _bounds(t: Timeline) -> Bounds:
    """(first start, last end) of every interval and of the GPU work; None where there is none."""
    def of(ev: pd.DataFrame) -> tuple[int, int] | None:
        return None if ev.empty else (int(ev["start_ns"].min()), int(ev["end_ns"].max()))

    return of(t.events), of(gpu_work(t.events))


def _span_of(parts: list[Bounds], _job: Timeline | None = None) -> Span:
    def length(bounds: list[tuple[int, int] | None]) -> int:
        have = [b for b in bounds if b is not None]
        return max(e for _, e in have) - min(s for s, _ in have) if have else 0

    return Span(length([p[0] for p in parts]), length([p[1] for p in parts]))


SPAN = Analysis(
    "span", "How long the trace and its GPU work last", lambda t: _span_of([_bounds(t)]),
    to_json=lambda r, s: {"span_ns": r.span_ns, "gpu_span_ns": r.gpu_span_ns},
    from_json=lambda d: Span(int(d.get("span_ns", 0)), int(d.get("gpu_span_ns", 0))),
    json_keys=("span_ns", "gpu_span_ns"), per_rank=_bounds, combine=_span_of,
)

GPU_NAMES = Analysis(
    "gpu_names", "The GPUs' names, by index", lambda t: dict(sorted(t.meta.gpu_names.items())),
    to_json=lambda r, s: {"gpu_names": {str(k): v for k, v in r.items()}},
    from_json=lambda d: {k: str(v) for k, v in _int_keys(d.get("gpu_names") or {}).items()},
    json_keys=("gpu_names",), combine=lambda _parts, job: dict(sorted(job.meta.gpu_names.items())),
)


def _concurrency_blocks(r: Concurrency, s: Summary, _o: TextOptions) -> list[Block]:
    if len(s.devices) > 1 and r.ns_by_gpus:
        together = r.together_ns(2)
        return [Line.of(f"Two or more GPUs busy at once for {ms(together)} ms "
                        f"({pct(together, r.any_ns())} of the time any GPU was busy).")]
    return []


CONCURRENCY = Analysis(
    "concurrency", "How long k GPUs were busy at once", lambda t: Concurrency(concurrency_of(busy_sets(t.events))),
    to_json=lambda r, s: {"concurrent_gpus_ns": {str(k): v for k, v in r.ns_by_gpus.items()}},
    from_json=lambda d: Concurrency({k: int(v) for k, v in _int_keys(d.get("concurrent_gpus_ns") or {}).items()}),
    json_keys=("concurrent_gpus_ns",), blocks=_concurrency_blocks, text_order=70,
    per_rank=lambda t: busy_sets(t.events),
    combine=lambda parts, _job: Concurrency(concurrency_of([gpu for part in parts for gpu in part])),
)

EVENTS = Analysis(
    "events", "How many intervals the timeline holds", lambda t: int(len(t.events)),
    to_json=lambda r, s: {"events": r}, from_json=lambda d: int(d.get("events", 0)), json_keys=("events",),
    per_rank=lambda t: int(len(t.events)), combine=lambda parts, _job: sum(parts),
)


# ---------------------------------------------------------------------------------------------------- host threads

#: Host threads listed in the text before "N more threads in --json".
MAX_THREADS = 8


def _threads(t: Timeline) -> list[HostThread]:
    return _threads_of([thread_rows(t.events)], t)


def _threads_of(parts: list[pd.DataFrame], job: Timeline) -> list[HostThread]:
    names = job.meta.thread_names
    return [
        HostThread(int(rank), int(pid), int(tid), int(ops), int(busy), int(launches), names.get(f"{pid}:{tid}", ""))
        for rank, pid, tid, ops, busy, launches in busiest_first(_frames(parts)).itertuples(index=False)
    ]


def _threads_blocks(r: list[HostThread], s: Summary, _o: TextOptions) -> list[Block]:
    if not r or (s.devices and len(r) <= 1):
        return []
    span = s.span.span_ns
    # (a host-only trace has no CUDA calls to count: no column that speaks of a GPU it does not have)
    calls = bool(s.devices) or any(t.launches for t in r)
    cols: tuple[str, ...] = ("pid", "tid", "thread", "ops", "busy ms", "of span", *(("CUDA calls",) if calls else ()))
    rows: list[tuple[str, ...]] = [
        (str(t.pid), str(t.tid), t.name, f"{t.ops:,}", ms(t.busy_ns), pct(t.busy_ns, span),
         *((f"{t.launches:,}",) if calls else ()))
        for t in r[:MAX_THREADS]]
    if s.multi_rank:
        cols = ("rank", *cols)
        rows = [(str(t.rank), *row) for t, row in zip(r, rows)]
    caption = f"{len(r) - MAX_THREADS} more threads in --json" if len(r) > MAX_THREADS else None
    # thread names get the width the figures leave, cut with an ellipsis beyond it
    return [Table("Host threads: framework ops (nested ops counted once)",
                  tuple(Column(c, justify="left", fit=True, cut=True) if c == "thread" else Column(c) for c in cols),
                  tuple(rows), caption)]


THREADS = Analysis(
    "threads", "Per host thread: framework ops, their busy time, CUDA calls", _threads,
    to_json=lambda r, s: {"threads": [t.as_dict(s.multi_rank) for t in r]},
    from_json=lambda d: [HostThread.from_dict(row) for row in d.get("threads") or []],
    json_keys=("threads",), blocks=_threads_blocks, text_order=80,
    per_rank=lambda t: thread_rows(t.events), combine=_threads_of,
)


# ---------------------------------------------------------------------------------------------------- the run

#: What of a run directory's meta.json the summary repeats.
RUN_KEYS = ("scenario", "variant", "mode", "backend", "devices", "wall_times_s", "derived", "command", "exit_code")


def _run(t: Timeline) -> dict[str, Any] | None:
    run = t.meta.extra.get("run")
    if isinstance(run, dict) and run:
        return {k: run[k] for k in RUN_KEYS if k in run}
    return None


def _run_blocks(r: dict[str, Any] | None, s: Summary, _o: TextOptions) -> list[Block]:
    if not r:
        return []
    command = r.get("command")
    if isinstance(command, list) and command and not r.get("scenario"):
        from pathlib import PurePath

        text = " ".join([PurePath(str(command[0])).name, *map(str, command[1:])])
        return [Line.of(f"run: command {text} · exit {r.get('exit_code', '?')} · backend {r.get('backend', '?')}",
                        "dim")]
    return [Line.of(f"run: {r.get('scenario', '?')} · variant {r.get('variant', 'all')} · {r.get('mode', '?')} · "
                    f"backend {r.get('backend', '?')}", "dim")]


RUN = Analysis(
    "run", "The run directory's scenario, variant, mode, wall times", _run,
    to_json=lambda r, s: {"run": r} if r is not None else {},
    from_json=lambda d: d.get("run") if isinstance(d.get("run"), dict) else None,
    json_keys=("run",), blocks=_run_blocks, text_order=20,
    combine=lambda _parts, job: _run(job),
)


# ---------------------------------------------------------------------------------------------------- idle


def _idle(t: Timeline) -> list[DeviceIdle]:
    """Per GPU, (rank, device) ascending: its idle gaps (:func:`~tracer.analysis.work.idle_gaps`) counted,
    summed and the longest; the GPU work picked out once (numpy on the columns used), not once per GPU."""
    ev = t.events
    work = np.flatnonzero(kind_mask(ev["kind"], GPU_WORK_KINDS) & (ev["device"].to_numpy() >= 0))
    if not work.size:
        return []
    keys = [ev[c].to_numpy() for c in DEVICE_COLUMNS]
    code, _ = key_codes(*keys, rows=work)
    starts, ends = ev["start_ns"].to_numpy()[work], ev["end_ns"].to_numpy()[work]
    out = []
    for c in np.unique(code):
        on_gpu = code == c
        s, e = iv.union(starts[on_gpu], ends[on_gpu])
        gaps = s[1:] - e[:-1]  # (a union's stretches do not touch: every gap is at least 1 ns)
        row = work[np.argmax(on_gpu)]
        out.append(DeviceIdle(int(keys[0][row]), int(keys[1][row]), int(gaps.size), int(gaps.sum()),
                              int(gaps.max()) if gaps.size else 0))
    return out


def _idle_from_json(d: Mapping[str, Any]) -> list[DeviceIdle]:
    out = []
    for label, v in (d.get("idle") or {}).items():
        key = parse_device_label(label)
        out.append(DeviceIdle(key.rank, key.device, int(v.get("idle_gaps", 0)), int(v.get("idle_ns", 0)),
                              int(v.get("longest_gap_ns", 0))))
    return out


IDLE = Analysis(
    "idle", "Per GPU: gaps between its first and last work where it did nothing", _idle,
    to_json=lambda r, s: {"idle": {_gpu_label(i.key, s): i.as_dict() for i in r}} if r else {},
    from_json=_idle_from_json, json_keys=("idle",), per_rank=_idle, combine=stack_parts,
)


# ---------------------------------------------------------------------------------------------------- kernels, copies

#: Kernel names kept in the summary, and shown in the text.
TOP_KERNELS, TOP_KERNELS_SHOWN = 10, 5


def _top_kernels(t: Timeline) -> list[KernelStat]:
    return _top_kernels_of([kernel_totals(t.events)])


def _top_kernels_of(parts: list[pd.DataFrame], _job: Timeline | None = None) -> list[KernelStat]:
    return [KernelStat(str(r["name"]), int(r["count"]), int(r["total_ns"]), int(r["mean_ns"]))
            for r in kernels_by_total(add_kernel_totals(parts), top=TOP_KERNELS).to_dict("records")]


def _top_kernels_blocks(r: list[KernelStat], s: Summary, _o: TextOptions) -> list[Block]:
    if not s.devices or not r:
        return []
    cols = ("kernel", "count", "total ms", "mean µs")
    rows = tuple((k.name if len(k.name) <= 50 else k.name[:49] + "…", f"{k.count:,}", ms(k.total_ns),
                  f"{k.mean_ns / 1e3:,.1f}") for k in r[:TOP_KERNELS_SHOWN])
    return [Table("Top kernels by total time",
                  tuple(Column(c, justify="left" if c == "kernel" else "right") for c in cols), rows)]


TOP_KERNELS_ANALYSIS = Analysis(
    "top_kernels", "The kernels that took longest in total", _top_kernels,
    to_json=lambda r, s: {"top_kernels": [k.as_dict() for k in r]},
    from_json=lambda d: [KernelStat.from_dict(row) for row in d.get("top_kernels") or []],
    json_keys=("top_kernels",), blocks=_top_kernels_blocks, text_order=60,
    per_rank=lambda t: kernel_totals(t.events), combine=_top_kernels_of,
)


def _copies(t: Timeline) -> list[CopyStat]:
    return [
        CopyStat(int(r["rank"]), int(r["device"]), str(r["copy_kind"]), int(r["count"]), int(r["bytes"]),
                 int(r["total_ns"]), round(float(r["gb_per_s"]), 3))
        for r in copy_summary(t.events).to_dict("records")
    ]


def _copies_blocks(r: list[CopyStat], s: Summary, _o: TextOptions) -> list[Block]:
    if not s.devices or not r:
        return []
    cols = ("GPU", "direction", "count", "MB", "copy ms", "GB/s")
    rows = tuple((_gpu_label(DeviceKey(c.rank, c.device), s), c.copy_kind, f"{c.count:,}", f"{c.bytes / 1e6:,.1f}",
                  ms(c.total_ns), f"{c.gb_per_s:.1f}") for c in r)
    return [Table("Copies by direction", tuple(Column(c) for c in cols), rows)]


COPIES = Analysis(
    "copies", "Per GPU and copy direction: count, bytes, time, bandwidth", _copies,
    to_json=lambda r, s: {"copies": [c.as_dict(s.multi_rank) for c in r]},
    from_json=lambda d: [CopyStat.from_dict(row) for row in d.get("copies") or []],
    json_keys=("copies",), blocks=_copies_blocks, text_order=50,
    per_rank=_copies, combine=stack_parts,
)


# ---------------------------------------------------------------------------------------------------- ranges


def _ranges(t: Timeline) -> Ranges:
    return _ranges_of([_range_rows(t)])


def _range_rows(t: Timeline) -> pd.DataFrame:
    """One row per range name: :func:`range_summary`'s figures and the own-thread ones (sums: a job's ranks
    compute them apart and :func:`_ranges_of` adds them up)."""
    ev = t.events
    # Both rules from one matching: the strict figure (own thread only) rides along, so a user can see what the
    # autograd rule added.
    return range_summary(ev, pairs=launch_pairs(ev), own_thread=True)


def _ranges_of(parts: list[pd.DataFrame], _job: Timeline | None = None) -> Ranges:
    rs = _frames(parts)
    if len([p for p in parts if len(p)]) > 1:
        rs = longest_first(rs.groupby("name", sort=False).sum().reset_index())
        iv.checked_sum(rs["host_ns"], "range time (ns)")
    rows = tuple(RangeStat(str(row[0]), *(int(v) for v in row[1:])) for row in rs.itertuples(index=False))
    return Ranges(RULE_TEXT["process"], rows)


def _ranges_from_json(d: Mapping[str, Any]) -> Ranges | None:
    if "ranges" not in d and "range_rule" not in d:
        return None
    return Ranges(str(d.get("range_rule", "")), tuple(RangeStat.from_dict(row) for row in d.get("ranges") or []))


def _ranges_blocks(r: Ranges | None, s: Summary, o: TextOptions) -> list[Block]:
    if r is None or not r.rows:
        return []
    if not s.devices and not any(x.kernels or x.memcpys for x in r.rows):
        # a host-only trace: its ranges launched no GPU work, and the table says nothing of a GPU
        cols: tuple[str, ...] = ("range", "count", "host ms")
        rows: tuple[tuple[str, ...], ...] = tuple((x.name, f"{x.count:,}", ms(x.host_ns))
                                                  for x in r.rows[:o.max_ranges])
        title, caption = "NVTX / record_function ranges", []
    else:
        cols = ("range", "count", "host ms", "GPU busy ms", "kernels", "memcpys")
        rows = tuple((x.name, f"{x.count:,}", ms(x.host_ns), ms(x.gpu_busy_ns), f"{x.kernels:,}", f"{x.memcpys:,}")
                     for x in r.rows[:o.max_ranges])
        title, caption = "NVTX / record_function ranges → the GPU work they launched", \
            [r.rule + "; own-thread figures in --json"] if r.rule else []
    if len(r.rows) > o.max_ranges:
        caption.append(f"{len(r.rows) - o.max_ranges} more ranges in --json")
    # Range names share long prefixes without spaces ("mlp-data-parallel/forward-backward"): the name column is
    # broken after a separator to fit what the numbers leave, instead of letting the table cut names mid-word.
    columns = tuple(Column(c, justify="left" if c == "range" else "right", no_wrap=True, fit=c == "range")
                    for c in cols)
    return [Table(title, columns, rows, "\n".join(caption) or None)]


RANGES = Analysis(
    "ranges", "Per NVTX / record_function range: the GPU work it launched", _ranges,
    to_json=lambda r, s: {"range_rule": r.rule, "ranges": [x.as_dict() for x in r.rows]} if r is not None else {},
    from_json=_ranges_from_json, json_keys=("range_rule", "ranges"), blocks=_ranges_blocks, text_order=90,
    lazy=True, per_rank=_range_rows, combine=_ranges_of,
)


#: in the order of the summary's JSON keys (tracer.analysis.catalog)
BUILTIN = (TRACE, DEVICES, LANES, SPAN, GPU_NAMES, CONCURRENCY, EVENTS, THREADS, RUN, IDLE, TOP_KERNELS_ANALYSIS,
           COPIES, RANGES)
