"""One large plain Kineto trace scanned on several cores: its parts
(:func:`tracer.parsers.kineto_scan.scan_kineto_part`, the scan a job's ranks are split with) on processes forked
for this parse, part 0 in this one, merged here
(:func:`tracer.parsers.kineto_scan.merge_parts`): the same timeline as one process's scan, in less wall time (the
scan is most of a parse, and each part's is independent of the others').

When (:func:`processes_for`): a file mapped, not read (its pages are shared with the children, not copied), of at
least :data:`PART_MIN_BYTES` per part; more than one core for this process; a process that runs one thread (a
fork copies the locks of other threads as they are: a Dash server's, a progress spinner's) and is not itself a
multiprocessing worker (a job's workers parse ranks side by side already). ``TRACER_PARSE_PROCESSES`` caps the
processes (1: one, as before). A part that cannot vouch for what it read, or a child that fails, gives None for
its part; the caller then parses the whole file in this process, which gives the same timeline or says why not.

Each child sends its part back through a pipe as pickle protocol 5, the arrays' bytes out of band, so that they
arrive in buffers the arrays are made on, not copied again; a child ends with ``os._exit`` (nothing of this
process's clean-up runs twice).
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import struct
import sys
import threading
import time
from typing import Any, cast

from tracer.parsers.kineto_scan import KinetoPart, scan_kineto_part

#: A part is at least this large: below, a fork and a merge cost more than the part's scan saves.
PART_MIN_BYTES = 24 * 1024 * 1024
#: At most this many processes for one file (the merge, on one core, grows with the parts).
MAX_PROCESSES = 16
#: The environment variable that caps the processes (1: the whole file in this process).
PROCESSES_ENV = "TRACER_PARSE_PROCESSES"
_COUNT = struct.Struct("<Q")


def processes_for(size: int) -> int:
    """How many processes to scan a mapped plain trace of ``size`` bytes on (1: this one alone)."""
    cap = MAX_PROCESSES
    raw = os.environ.get(PROCESSES_ENV, "").strip()
    if raw:
        try:
            cap = max(1, min(int(raw), MAX_PROCESSES))
        except ValueError:
            pass
    n = min(cap, _cores(), size // PART_MIN_BYTES)
    return n if n > 1 and _may_fork() else 1


def _may_fork() -> bool:
    """Whether this process may fork a scan: it can, it runs one thread, and it is no multiprocessing worker."""
    return hasattr(os, "fork") and threading.active_count() == 1 and not _in_a_worker()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        return os.cpu_count() or 1


def _in_a_worker() -> bool:
    mp = sys.modules.get("multiprocessing")
    return mp is not None and mp.parent_process() is not None


def scan_forked(data: mmap.mmap, parts: int) -> list[KinetoPart | None]:
    """Every part of ``parts`` of the mapped trace ``data`` scanned: part 0 here, the others each on a process
    forked now; None for a part that could not vouch for what it read, or whose process failed (a list of one
    None where a process could not be started: the caller parses the whole file)."""
    children: list[tuple[int, int]] = []  # (pid, the read end of its pipe)
    try:
        for part in range(1, parts):
            try:
                r, w = os.pipe()
            except OSError:  # (no file descriptors left: the whole file here)
                return [None]
            try:
                pid = os.fork()
            except OSError:  # (no memory or processes left for one more)
                os.close(r)
                os.close(w)
                return [None]
            if pid == 0:  # pragma: no cover - the child (its coverage is not collected)
                os.close(r)
                _child(data, part, parts, w)
            os.close(w)
            children.append((pid, r))
        got = [scan_kineto_part(cast(bytes, data), 0, parts)]
        for _, r in children:
            got.append(_receive(r))
        return got
    finally:
        for _, r in children:
            os.close(r)  # (a child still writing gets a broken pipe and ends)
        for pid, _ in children:
            _reap(pid)


def _child(data: mmap.mmap, part: int, parts: int, w: int) -> None:  # pragma: no cover - runs in the child
    code = 1
    try:
        buffers: list[pickle.PickleBuffer] = []
        scanned = scan_kineto_part(cast(bytes, data), part, parts)
        head = pickle.dumps(scanned, protocol=5, buffer_callback=buffers.append)
        pieces = [memoryview(head), *(b.raw() for b in buffers)]
        _write(w, _COUNT.pack(len(pieces)) + struct.pack(f"<{len(pieces)}Q", *(p.nbytes for p in pieces)))
        for piece in pieces:
            _write(w, piece)
        code = 0
    except BaseException:  # noqa: BLE001 - whatever it is (a broken pipe, Ctrl-C), the parent sees no part
        pass
    finally:
        os._exit(code)


def _write(fd: int, data: Any) -> None:
    view = memoryview(data).cast("B")
    while len(view):
        view = view[os.write(fd, view) :]


def _receive(r: int) -> KinetoPart | None:
    """A child's part, as :func:`_child` sent it; None where it sent nothing whole."""
    try:
        (count,) = _COUNT.unpack(_read(r, _COUNT.size))
        sizes = struct.unpack(f"<{count}Q", _read(r, 8 * count))
        pieces = [_read(r, size) for size in sizes]
        part = pickle.loads(pieces[0], buffers=pieces[1:])
    except (EOFError, OSError, struct.error, pickle.UnpicklingError):
        return None
    return part if isinstance(part, KinetoPart) else None


def _read(fd: int, size: int) -> bytearray:
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if not n:
            raise EOFError
        got += n
    return buf


def _reap(pid: int) -> None:
    """Wait for a child to end: at once, having sent its part (or, its pipe closed, on writing the rest of it);
    one still scanning (this process stopped early: an error, Ctrl-C) is ended first."""
    try:
        for _ in range(100):  # (up to 0.1 s for one that has sent its part to reach its exit)
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
            time.sleep(0.001)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ChildProcessError, ProcessLookupError):
        pass
