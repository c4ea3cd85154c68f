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
from tracer.timeline.meta import unexported_note


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
#: A backtrace's frames kept (the innermost), and a file's or function's name: what one crafted payload can cost.
MAX_FRAMES = 512
MAX_NAME = 4096
#: A domain of one process: nsys numbers NVTX domains per process (its own reports join on the globalTid's pid).
Domain = tuple[int, int]


def backtrace_domains(con: sqlite3.Connection, strings: dict[int, str], columns: set[str]) -> set[Domain]:
    """The (pid, NVTX domain id) of nsys' Python backtraces in this export, one per process that had them (none:
    no backtraces; ``columns``: NVTX_EVENTS's)."""
    if not {"domainId", "globalTid", "eventType"} <= columns:
        return set()
    text = '"text"' if "text" in columns else "NULL"
    text_id = '"textId"' if "textId" in columns else "NULL"
    rows = con.execute(f'SELECT "domainId", "globalTid", {text}, {text_id} FROM NVTX_EVENTS WHERE "eventType" = ? '
                       "AND typeof(\"domainId\") = 'integer' AND typeof(\"globalTid\") = 'integer'",
                       (NVTX_DOMAIN_CREATE,)).fetchall()
    return {(int(split_global_id(np.array([g]))[0][0]), d) for d, g, t, tid in rows
            if (t if isinstance(t, str) else strings.get(tid, "") if type(tid) is int else "") == BACKTRACE_DOMAIN}


def domain_filter(domains: set[Domain]) -> str:
    """An SQL condition over NVTX_EVENTS that holds for the rows of ``domains`` (``0`` for none)."""
    pairs = [f'((("globalTid" >> 24) & 16777215) = {p} AND "domainId" = {d})' for p, d in sorted(domains)]
    return "(" + " OR ".join(pairs) + ")" if pairs else "0"


@dataclass
class Backtraces:
    """What :func:`python_frames` found: the frames as rows (``start_ns``, ``end_ns``, ``pid``, ``tid``,
    ``names``; empty for none) and what a reader must be told (backtraces the export left out, marks matched
    to no call, frames cut)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    names: list[str]
    notes: list[str]


def python_frames(con: sqlite3.Connection, strings: dict[int, str], domains: set[Domain], columns: set[str],
                  calls: pd.DataFrame, records: pd.DataFrame) -> Backtraces:
    """The frames of the CUDA ``calls`` (``start``, ``end``, ``globalTid``, ``correlationId``) that nsys took a
    Python backtrace of: each mark of the backtrace ``domains`` starts where the call's backtrace record (of
    ``records``, on the same thread) starts, and the record carries the call's correlation id. ``columns``:
    NVTX_EVENTS's."""
    none = np.zeros(0, dtype=np.int64)
    if not domains or calls.empty:
        return Backtraces(none, none, none, none, [], [])
    payload = '"jsonText"' if "jsonText" in columns else "NULL"
    marks = pd.DataFrame(con.execute(
        f'SELECT "start", "globalTid", {payload} FROM NVTX_EVENTS WHERE "eventType" = {NVTX_MARK} AND '
        f"{domain_filter(domains)} AND typeof(\"start\") = 'integer' AND typeof(\"globalTid\") = 'integer'"
    ).fetchall(), columns=["start", "globalTid", "text"])
    notes = []
    bare = int((~marks["text"].map(lambda t: isinstance(t, str))).sum()) if len(marks) else 0
    if bare:
        notes.append(unexported_note(bare))
    marks = marks[marks["text"].map(lambda t: isinstance(t, str))] if bare else marks
    if marks.empty:
        return Backtraces(none, none, none, none, [], notes)
    # mark -> its record (thread, start) -> the call (thread, correlation id); rows missing a key match nothing
    keys = ["globalTid", "correlationId"]
    rec = records.dropna(subset=["globalTid", "start", "correlationId"]).astype({k: np.int64 for k in keys})
    rec = rec.drop_duplicates(["globalTid", "start"])[["globalTid", "start", "correlationId"]]
    pos = calls.dropna(subset=keys).astype({k: np.int64 for k in keys})
    pos = pos.assign(_pos=pos.index.to_numpy()).drop_duplicates(keys)[[*keys, "_pos"]]
    matched = (marks.astype({"start": np.int64, "globalTid": np.int64})
               .merge(rec, on=["globalTid", "start"], how="left")
               .merge(pos, on=keys, how="left"))
    unmatched = int(matched["_pos"].isna().sum())
    if unmatched:
        notes.append(f"{unmatched:,} Python backtraces matched no CUDA call of their thread and were left out")
    matched = matched.dropna(subset=["_pos"])
    frames_of = _FrameNames(strings)
    stacks = [frames_of(t) for t in matched["text"].tolist()]
    if frames_of.cut:
        notes.append(f"{frames_of.cut:,} Python backtraces deeper than {MAX_FRAMES} frames: their outermost frames "
                     "were left out")
    at = matched["_pos"].to_numpy(np.int64)
    call_start = calls["start"].to_numpy(np.int64)[at]
    gtid = calls["globalTid"].to_numpy(np.int64)[at]
    start_ns, end_ns, row_pos, names = frame_rows(call_start, calls["end"].to_numpy(np.int64)[at], gtid, stacks)
    pid, tid = split_global_id(gtid[row_pos])
    return Backtraces(start_ns, end_ns, pid, tid, names, notes)


class _FrameNames:
    """A backtrace payload's frames as row names, outermost first (() for a payload that is not one), each
    payload decoded once and each frame's name made once (many backtraces share frames: the strings are shared)."""

    def __init__(self, strings: dict[int, str]) -> None:
        self.strings = strings
        self.payloads: dict[str, tuple[str, ...]] = {}
        self.names: dict[tuple[int, int, int], str] = {}
        self.cut = 0

    def __call__(self, text: str) -> tuple[str, ...]:
        got = self.payloads.get(text)
        if got is None:
            got = self.payloads[text] = self._decode(text)
        return got

    def _decode(self, text: str) -> tuple[str, ...]:
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):  # (a payload nested past Python's limit is as broken as bad JSON)
            return ()
        body = doc.get(BACKTRACE_DOMAIN) if isinstance(doc, dict) else None
        frames = body.get("Frames") if isinstance(body, dict) else None
        if not isinstance(frames, list):
            return ()
        if len(frames) > MAX_FRAMES:
            self.cut += 1
            frames = frames[:MAX_FRAMES]  # (innermost first: the outermost go)
        out = []
        for f in frames:
            if not isinstance(f, dict):
                return ()
            file, line, func = f.get("File"), f.get("Line"), f.get("Function")
            if type(file) is not int or type(line) is not int or type(func) is not int:
                return ()
            key = (file, line, func)
            name = self.names.get(key)
            if name is None:
                # (nsys writes a function's name HTML-escaped: &lt;module&gt;)
                name = self.names[key] = frame_name(self.strings.get(file, "?")[:MAX_NAME], line,
                                                    html.unescape(self.strings.get(func, "?")[:MAX_NAME]))
            out.append(name)
        return tuple(reversed(out))
