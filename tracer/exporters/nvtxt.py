"""Nsight Systems' NVTX text format (.nvtxt), which its ImportNvtxt tool turns into a report or merges into one.

    ImportNvtxt --cmd create -n trace.nvtxt -o trace.nsys-rep
    ImportNvtxt --cmd merge -i recorded.nsys-rep -n trace.nvtxt -o merged.nsys-rep

Every interval of the timeline becomes one start/end range on the thread of its track (the same tracks as
the Chrome export, on the lanes of :mod:`tracer.timeline.layout`: "GPU 0 · stream 7 · kernels", a host thread, its
NVTX ranges ...; each led by its rank in a timeline of several ranks). Start/end ranges rather than
push/pop, because lanes may hold intervals that overlap without nesting, which push/pop cannot express.

What is used of the format, and only that (as NVIDIA documents it and as published writers use it):
``SetFileDisplayName, <name>``; an event declaration ``@RangeStartEnd, Start, End, ThreadId, Message`` followed
by the variables it takes implicitly (``ProcessId``, ``CategoryId``, ``Color``, ``TimeBase``); then one line per
range, ``RangeStartEnd, <start>, <end>, <thread id>, "<message>"``. ``TimeBase = Manual``: times are absolute
nanoseconds, the timeline's own. Lines starting with ``#`` are comments.

The published format has no instruction to name a thread, so each lane's thread id and name are listed in the
header comments; host lanes keep the OS thread id (so that merging into a report of the same run puts the
ranges on the real threads), other lanes get ids from 16,000,000 up (above Linux' largest thread id,
within nsys' 24-bit thread ids). A message is a double-quoted string with no escape syntax: double quotes in
names become single quotes, line breaks spaces.

ImportNvtxt itself was not available to test this exporter; see docs/exports.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tracer.exporters import ExportResult, ProgressFn, tracer_version
from tracer.exporters._lanes import layout
from tracer.timeline import Timeline

SYNTHETIC_TID_BASE = 16_000_000
CHUNK = 100_000


def clean_message(text: str) -> str:
    """A name as an NVTXT message body: no double quotes, no line breaks."""
    return text.replace('"', "'").replace("\r", " ").replace("\n", " ")


def write(timeline: Timeline, dest: Path, *, final: Path, progress: ProgressFn | None = None) -> ExportResult:
    """Write ``timeline`` to ``dest`` in NVTXT."""
    ev = timeline.events.reset_index(drop=True)
    result = ExportResult(format="nvtxt", path=final)
    track_of_row, tracks = layout(ev, timeline.meta)
    host_pids = ev.loc[ev["device"] < 0, "pid"]
    host_pids = host_pids[host_pids >= 0]
    process_id = int(host_pids.mode().iat[0]) if len(host_pids) else 0
    # thread id per track: a host thread's main track keeps its OS tid (the first rank's, where several ranks
    # have a thread of that id), the rest count up from the base
    track_tid = np.zeros(len(tracks), dtype=np.int64)
    used: set[int] = set()
    next_tid = SYNTHETIC_TID_BASE
    for tr in sorted(tracks, key=lambda x: (x.on_gpu, x.sub, x.group != "", x.index)):
        main = not tr.on_gpu and tr.group == "" and tr.sub == 0
        if main and 0 < tr.tid < SYNTHETIC_TID_BASE and tr.tid not in used:
            track_tid[tr.index] = tr.tid
        else:
            track_tid[tr.index] = next_tid
            next_tid += 1
        used.add(int(track_tid[tr.index]))
    ranks = sorted(set(ev["rank"].astype(int).tolist()))
    if len(ranks) > 1:
        result.notes.append(
            f"{len(ranks)} ranks are written under one ProcessId: each thread's name in the header says its rank"
        )
    other_pids = sorted(set(host_pids.astype(int).tolist()) - {process_id})
    if other_pids:
        result.notes.append(
            f"ranges of processes {', '.join(map(str, other_pids[:5]))} are written under process {process_id}: "
            "one NVTXT file carries one ProcessId here"
        )

    source = Path(timeline.meta.source).name or "timeline"
    head = [
        f"# NVTXT written by tracer {tracer_version()} from {source} ({timeline.meta.format})",
        "# One thread per lane of the timeline; ThreadId = lane:",
        *(f"#   {int(track_tid[tr.index])} = {tr.label}" for tr in tracks),
        f"SetFileDisplayName, {clean_message('tracer: ' + source).replace(',', ' ')}",
        "@RangeStartEnd, Start, End, ThreadId, Message",
        f"ProcessId = {process_id}",
        "CategoryId = 1",
        "Color = Blue",
        "TimeBase = Manual",
    ]
    starts = ev["start_ns"].to_numpy(np.int64)
    ends = ev["end_ns"].to_numpy(np.int64)
    cleaned = np.array([clean_message(str(c)) for c in ev["name"].cat.categories], dtype=object)
    names = cleaned[ev["name"].cat.codes.to_numpy()] if len(ev) else cleaned[:0]
    tids = track_tid[track_of_row] if len(ev) else np.zeros(0, dtype=np.int64)
    order = np.lexsort((-ends, starts))
    with open(dest, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(head) + "\n")
        for lo in range(0, len(order), CHUNK):
            idx = order[lo : lo + CHUNK]
            f.write(
                "".join(
                    f'RangeStartEnd, {s}, {e}, {t}, "{n}"\n'
                    for s, e, t, n in zip(starts[idx].tolist(), ends[idx].tolist(), tids[idx].tolist(), names[idx])
                )
            )
            if progress:
                progress("nvtxt: ranges", min(lo + CHUNK, len(order)), len(order))
    result.counts = {"ranges": int(len(ev)), "threads": len(tracks)}
    return result
