"""Python frames from Nsight Systems' backtraces (``nsys profile --python-backtrace=cuda``) as timeline rows.

nsys keeps, for a CUDA API call it traced with a Python backtrace, the frames of the calling thread at that
instant, each with its file, the line it was at and its function. tracer's source lines read Python frames as
nested ``python`` rows on their thread (what torch.profiler's ``with_stack=True`` gives:
:mod:`tracer.analysis.source`), so :func:`frame_rows` turns the backtraces into such rows: each thread's calls in
time order, a frame opened at the first call of a run of consecutive calls that share it (the same frames from
the outermost down to it) and closed at the last one's end. A frame is then named ``FILE(LINE): FUNC`` as
torch.profiler names one, but LINE is the line the call was made from, not the function's first line: the
timeline's ``meta.extra["frame_lines"]`` (:data:`tracer.timeline.meta.FRAME_LINES_CURRENT`) says so, and
:func:`tracer.analysis.source_code.sites` then takes it as the exact line instead of finding it in the source.

:func:`python_frames` reads them from an export for :mod:`tracer.parsers.nsys`: the backtrace records (nsys 2024+:
rows of the RUNTIME table of their own event class, repeating the call's thread and correlation id) or the call's
own ``callchainId``, and the chains' Python entries in CUDA_CALLCHAINS.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence

import numpy as np
import pandas as pd

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
    (frame names, outermost first). A call with an empty stack (no backtrace) ends the frames open on its thread,
    whose line is no longer known, unless it lies inside the call before it (a driver call inside a runtime call).

    Returns (start_ns, end_ns, call position of the thread's run: the row's thread is ``thread[pos]``, names),
    outer frames before the inner ones they hold (a frame and the frame it calls can share both ends when one
    call is all of the run: the row order then says which holds which, as :func:`np.lexsort` keeps it stable).
    """
    n = len(stacks)
    order = np.lexsort((start, thread))
    out_start: list[int] = []
    out_end: list[int] = []
    out_pos: list[int] = []
    out_name: list[str] = []
    # per open frame: its name, its row in the output (its end is filled in when it closes)
    open_names: list[str] = []
    open_rows: list[int] = []
    prev_thread: int | None = None
    prev_end = 0

    def close(depth: int, at: int) -> None:
        while len(open_rows) > depth:
            out_end[open_rows.pop()] = at
            open_names.pop()

    for i in order.tolist():
        t = int(thread[i])
        if t != prev_thread:
            close(0, prev_end)
            prev_thread, prev_end = t, 0
        stack = stacks[i]
        s, e = int(start[i]), int(end[i])
        if not stack:
            if s >= prev_end:
                close(0, prev_end)
            continue
        k = 0
        limit = min(len(stack), len(open_names))
        while k < limit and stack[k] == open_names[k]:
            k += 1
        close(k, prev_end)
        for name in stack[k:]:
            open_names.append(name)
            open_rows.append(len(out_start))
            out_start.append(s)
            out_end.append(e)
            out_pos.append(i)
            out_name.append(name)
        # (a call inside a longer one of the same thread, a driver call in a runtime call: a run ends at the later)
        prev_end = max(prev_end, e)
    close(0, prev_end)
    return (np.asarray(out_start, dtype=np.int64), np.asarray(out_end, dtype=np.int64),
            np.asarray(out_pos, dtype=np.int64) if n else np.zeros(0, dtype=np.int64), out_name)


# -- reading them from an export ---------------------------------------------------------------------------------

#: A Python frame as an export's CUDA_CALLCHAINS names it: the symbol ``FUNC`` and the module ``FILE:LINE``, or
#: the symbol ``FUNC (FILE:LINE)``.
_IN_MODULE = re.compile(r"^(?P<file>.+\.pyw?):(?P<line>\d+)$")
_IN_SYMBOL = re.compile(r"^(?P<func>.+?) \((?P<file>.+\.pyw?):(?P<line>\d+)\)$")


def python_frame(symbol: str, module: str) -> str | None:
    """The row name of a callchain entry that is a Python frame (:func:`frame_name`); None for a native frame."""
    m = _IN_MODULE.match(module)
    if m is not None:
        return frame_name(m["file"], int(m["line"]), symbol)
    m = _IN_SYMBOL.match(symbol)
    if m is not None:
        return frame_name(m["file"], int(m["line"]), m["func"])
    return None


def python_frames(con: sqlite3.Connection, tables: set[str], strings: dict[int, str], calls: list[pd.DataFrame],
                  backtraces: list[pd.DataFrame]) -> dict[str, object] | None:
    """The ``python`` rows (a part of :mod:`tracer.parsers.nsys`'s frame) of the CUDA ``calls`` that have a Python
    backtrace: their own ``callchainId``, or that of the backtrace record with their thread and correlation id
    (nsys 2024+). None where no call has one."""
    if "CUDA_CALLCHAINS" not in tables or not calls:
        return None
    frame = pd.concat(calls, ignore_index=True)
    chain = frame["callchainId"].astype("Float64")
    if backtraces:
        records = pd.concat(backtraces, ignore_index=True).dropna(subset=["callchainId"])
        by_call = pd.Series(records["callchainId"].to_numpy(np.float64),
                            index=pd.MultiIndex.from_frame(records[["globalTid", "correlationId"]].astype("Float64")))
        by_call = by_call[~by_call.index.duplicated()]
        key = pd.MultiIndex.from_frame(frame[["globalTid", "correlationId"]].astype("Float64"))
        chain = chain.fillna(pd.Series(by_call.reindex(key).to_numpy(), index=chain.index).astype("Float64"))
    has = chain.notna().to_numpy()
    if not has.any():
        return None
    stacks = _read_stacks(con, strings, sorted({int(c) for c in chain[has].tolist()}))
    call_stacks = [stacks.get(int(c), ()) if c is not pd.NA else () for c in chain.tolist()]
    if not any(call_stacks):
        return None
    gtid = frame["globalTid"].fillna(0).to_numpy(np.int64)
    # (every call, those without a backtrace too: a frame's line is known only at its own calls)
    start, end, pos, names = frame_rows(frame["start"].to_numpy(np.int64), frame["end"].to_numpy(np.int64), gtid,
                                        call_stacks)
    pid, tid = split_global_id(gtid[pos])
    n = len(names)
    return {
        "start_ns": start, "end_ns": end, "kind": ["python"] * n, "copy_kind": [""] * n, "name": names,
        "device": np.full(n, HOST_DEVICE), "stream": np.full(n, HOST_STREAM), "pid": pid, "tid": tid,
        "rank": np.zeros(n, dtype=np.int64), "bytes": pd.array([pd.NA] * n, dtype="Int64"),
        "correlation": pd.array([pd.NA] * n, dtype="Int64"), "src_mem": [""] * n, "dst_mem": [""] * n,
    }


def _read_stacks(con: sqlite3.Connection, strings: dict[int, str], ids: list[int]) -> dict[int, tuple[str, ...]]:
    """Each callchain's Python frames, outermost first (CUDA_CALLCHAINS lists the innermost at stackDepth 0)."""
    out: dict[int, list[tuple[int, str]]] = {}
    for lo in range(0, len(ids), 500):
        batch = ids[lo:lo + 500]
        cur = con.execute(f'SELECT "id", "stackDepth", "symbol", "module" FROM CUDA_CALLCHAINS WHERE "id" IN '
                          f'({",".join("?" * len(batch))})', batch)
        for cid, depth, symbol, module in cur:
            if type(cid) is not int or type(depth) is not int:
                continue
            name = python_frame(strings.get(symbol, "") if type(symbol) is int else "",
                                strings.get(module, "") if type(module) is int else "")
            if name is not None:
                out.setdefault(cid, []).append((depth, name))
    return {cid: tuple(name for _, name in sorted(frames, reverse=True)) for cid, frames in out.items()}
