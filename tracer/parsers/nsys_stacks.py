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

Pure numpy and Python: no table names here (:mod:`tracer.parsers.nsys` reads them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def frame_name(file: str, line: int, function: str) -> str:
    """A frame's row name, as torch.profiler writes one: ``FILE(LINE): FUNC``."""
    return f"{file}({line}): {function}"


def frame_rows(
    start: np.ndarray, end: np.ndarray, thread: np.ndarray, stacks: Sequence[tuple[str, ...]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The frame rows of calls ``start``/``end`` (ns) on ``thread`` (any integer key), each with its stack
    (frame names, outermost first; give only calls that have a backtrace).

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
        k = 0
        limit = min(len(stack), len(open_names))
        while k < limit and stack[k] == open_names[k]:
            k += 1
        close(k, prev_end)
        s, e = int(start[i]), int(end[i])
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
