"""Python frames from Nsight Systems' backtraces (``nsys profile --python-backtrace=cuda``) as timeline rows.

nsys keeps, for a CUDA API call it traced with a Python backtrace, the frames of the calling thread at that
instant, each with its file, the line it was at and its function. tracer's source lines read Python frames as
nested ``python`` rows on their thread (what torch.profiler's ``with_stack=True`` gives:
:mod:`tracer.analysis.source`), so :func:`frame_rows` turns the backtraces into such rows: each thread's calls in
time order, a frame opened at the first call of a run of consecutive calls that share it (the same frames from
the outermost down to it) and held until the thread's next backtraced call that does not. A frame is then named
``FILE(LINE): FUNC`` as torch.profiler names one, but LINE is the line the call was made from, not the
function's first line: the timeline's ``meta.extra["frame_lines"]`` (:data:`tracer.timeline.meta.FRAME_LINES_CURRENT`)
says so, and :func:`tracer.analysis.source_code.sites` then takes it as the exact line instead of finding it in
the source.

:func:`python_frames` reads them from an export for :mod:`tracer.parsers.nsys`: nsys (2025.3) writes each
backtrace as an NVTX mark of its own domain, at the start of the call's backtrace record (a row of the RUNTIME
table of its own event class that repeats the call's thread and correlation id), the frames in the mark's
payload.
"""

from __future__ import annotations

import html
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracer.files.nsys_enums import NVTX_MARK
from tracer.timeline import HOST_DEVICE, HOST_STREAM


def split_global_id(gid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """nsys' serialized globalTid → (pid, tid): pid in bits 24–47, tid in bits 0–23."""
    gid = gid.astype(np.int64)
    return (gid >> 24) & 0xFFFFFF, gid & 0xFFFFFF


def frame_name(file: str, line: int, function: str) -> str:
    """A frame's row name, as torch.profiler writes one: ``FILE(LINE): FUNC``."""
    return f"{file}({line}): {function}"


def frame_rows(
    start: np.ndarray, end: np.ndarray, thread: np.ndarray, stacks: Sequence[tuple[str, ...]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The frame rows of calls ``start``/``end`` (ns) on ``thread`` (any integer key), each with its stack
    (frame names, outermost first; empty: the call has no backtrace, and belongs to the frames open around it).

    A frame opens at the first call of a run of backtraced calls that share it and stays open until the next
    backtraced call of its thread that does not (the line it names was where its thread stood until then: a
    ``loss.backward()`` whose kernels other threads launch holds its line while they run), the last ones until the
    thread's last backtraced call ends. Returns (start_ns, end_ns, position of the call that opened the row: its
    thread is ``thread[pos]``, names), outer frames before the inner ones they hold (a frame and the one it calls
    can share both ends: the row order then says which holds which, as :func:`np.lexsort` keeps it stable).
    """
    order = np.lexsort((start, thread))
    out_start: list[int] = []
    out_end: list[int] = []
    out_pos: list[int] = []
    out_name: list[str] = []
    # per open frame: its name, its row in the output (its end is filled in when it closes)
    open_names: list[str] = []
    open_rows: list[int] = []
    prev_thread: int | None = None
    last_end = 0

    def close(depth: int, at: int) -> None:
        while len(open_rows) > depth:
            out_end[open_rows.pop()] = at
            open_names.pop()

    for i in order.tolist():
        stack = stacks[i]
        if not stack:
            continue
        t = int(thread[i])
        if t != prev_thread:
            close(0, last_end)
            prev_thread, last_end = t, 0
        s, e = int(start[i]), int(end[i])
        k = 0
        limit = min(len(stack), len(open_names))
        while k < limit and stack[k] == open_names[k]:
            k += 1
        close(k, s)
        for name in stack[k:]:
            open_names.append(name)
            open_rows.append(len(out_start))
            out_start.append(s)
            out_end.append(e)
            out_pos.append(i)
            out_name.append(name)
        last_end = max(last_end, e)
    close(0, last_end)
    return (np.asarray(out_start, dtype=np.int64), np.asarray(out_end, dtype=np.int64),
            np.asarray(out_pos, dtype=np.int64), out_name)


# -- reading them from an export ---------------------------------------------------------------------------------

#: The NVTX domain nsys writes a Python backtrace into: one mark per backtraced CUDA call, its extended payload
#: (exported as JSON with ``nsys export --include-json=true``) holding the frames, innermost first, as string ids
#: of the function and file and the line: ``{"Python Backtrace on CUDA": {"Frames": [{"Function": 50, "File": 51,
#: "Line": 1370}, ...]}}`` (nsys 2025.3).
BACKTRACE_DOMAIN = "Python Backtrace on CUDA"
NVTX_DOMAIN_CREATE = 75  # ENUM_NSYS_EVENT_TYPE NvtxDomainCreate


def backtrace_domains(con: sqlite3.Connection, strings: dict[int, str]) -> list[int]:
    """The NVTX domain ids of nsys' Python backtraces in this export (none: no backtraces)."""
    rows = con.execute('SELECT "domainId", "text", "textId" FROM NVTX_EVENTS WHERE "eventType" = ?',
                       (NVTX_DOMAIN_CREATE,)).fetchall()
    return [d for d, text, tid in rows if type(d) is int and
            (text if isinstance(text, str) else strings.get(tid, "") if type(tid) is int else "") == BACKTRACE_DOMAIN]


@dataclass
class Backtraces:
    """What :func:`python_frames` found: the ``python`` rows (a part of :mod:`tracer.parsers.nsys`'s frame,
    None for none) and what a reader must be told (backtraces the export left out, marks matched to no call)."""

    part: dict[str, object] | None
    notes: list[str]


def python_frames(con: sqlite3.Connection, strings: dict[int, str], domains: list[int], calls: list[pd.DataFrame],
                  records: list[pd.DataFrame]) -> Backtraces:
    """The ``python`` rows of the CUDA ``calls`` that nsys took a Python backtrace of: each mark of the backtrace
    ``domains`` starts where the call's backtrace record (``records``, of the same thread) starts, and the record
    carries the call's correlation id."""
    if not domains or not calls:
        return Backtraces(None, [])
    marks = con.execute(f'SELECT "start", "globalTid", "jsonText" FROM NVTX_EVENTS WHERE "eventType" = {NVTX_MARK} '
                        f'AND "domainId" IN ({",".join(str(d) for d in domains)})').fetchall()
    if not marks:
        return Backtraces(None, [])
    payloads = [m for m in marks if isinstance(m[2], str)]
    notes = []
    if len(payloads) < len(marks):
        notes.append(f"{len(marks) - len(payloads):,} Python backtraces are in the report but not in this export "
                     "(exported without their payloads): `nsys export --type sqlite --include-json=true` keeps them")
    frame = pd.concat(calls, ignore_index=True)
    rec = pd.concat(records, ignore_index=True) if records else frame.iloc[:0]
    # mark (thread, start) -> the record's correlation id -> the call
    corr_at = {(int(g), int(s)): int(c) for g, s, c in
               zip(rec["globalTid"].fillna(-1), rec["start"], rec["correlationId"].fillna(-1), strict=True)}
    call_at = {(int(g), int(c)): i for i, (g, c) in
               enumerate(zip(frame["globalTid"].fillna(-1), frame["correlationId"].fillna(-1), strict=True))}
    call_stacks: list[tuple[str, ...]] = [()] * len(frame)
    cache: dict[str, tuple[str, ...]] = {}
    unmatched = 0
    for start, gtid, text in payloads:
        i = call_at.get((int(gtid), corr_at.get((int(gtid), int(start)), -1))) if type(gtid) is int else None
        if i is None:
            unmatched += 1
            continue
        stack = cache.get(text)
        if stack is None:
            stack = cache[text] = _frames_of(text, strings)
        call_stacks[i] = stack
    if unmatched:
        notes.append(f"{unmatched:,} Python backtraces matched no CUDA call of their thread and were left out")
    if not any(call_stacks):
        return Backtraces(None, notes)
    gtid_all = frame["globalTid"].fillna(0).to_numpy(np.int64)
    start_ns, end_ns, pos, names = frame_rows(frame["start"].to_numpy(np.int64), frame["end"].to_numpy(np.int64),
                                              gtid_all, call_stacks)
    pid, tid = split_global_id(gtid_all[pos])
    n = len(names)
    part: dict[str, object] = {
        "start_ns": start_ns, "end_ns": end_ns, "kind": ["python"] * n, "copy_kind": [""] * n, "name": names,
        "device": np.full(n, HOST_DEVICE), "stream": np.full(n, HOST_STREAM), "pid": pid, "tid": tid,
        "rank": np.zeros(n, dtype=np.int64), "bytes": pd.array([pd.NA] * n, dtype="Int64"),
        "correlation": pd.array([pd.NA] * n, dtype="Int64"), "src_mem": [""] * n, "dst_mem": [""] * n,
    }
    return Backtraces(part, notes)


def _frames_of(text: str, strings: dict[int, str]) -> tuple[str, ...]:
    """A backtrace payload's frames as row names, outermost first; () for a payload that is not one."""
    try:
        doc = json.loads(text)
    except ValueError:
        return ()
    frames = doc.get(BACKTRACE_DOMAIN, {}).get("Frames") if isinstance(doc, dict) else None
    out = []
    for f in frames if isinstance(frames, list) else ():
        if not isinstance(f, dict):
            return ()
        func, file, line = f.get("Function"), f.get("File"), f.get("Line")
        if type(func) is not int or type(file) is not int or type(line) is not int:
            return ()
        # (nsys writes a function's name HTML-escaped: &lt;module&gt;)
        out.append(frame_name(strings.get(file, "?"), line, html.unescape(strings.get(func, "?"))))
    return tuple(reversed(out))
