"""Helpers shared by the benchmarks: run a measurement in a fresh child process and read its peak RSS.

Every measurement runs in its own interpreter so that its peak resident set is its own, not the high-water
mark of whatever ran before it in the same process. The peak comes from the kernel (``wait4``'s
``ru_maxrss`` for that one child), so nothing polls and nothing is missed between samples.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: ``ru_maxrss`` is KiB on Linux and bytes on macOS.
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024


@dataclass
class ChildResult:
    returncode: int
    peak_rss_bytes: int
    #: the last line the child printed on stdout, decoded as JSON (None if there was none or it was not JSON)
    report: dict[str, Any] | None
    stderr: str
    timed_out: bool = False


def run_child(
    argv: list[str], timeout_s: float | None = None, env: dict[str, str] | None = None
) -> ChildResult:
    """Run ``argv`` to completion; return its exit code, peak RSS and the JSON object it printed last."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env)
        killed = threading.Event()

        def _kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout_s, _kill) if timeout_s else None
        if timer:
            timer.start()
        try:
            assert proc.stdout is not None
            out = proc.stdout.read()
            proc.stdout.close()
            # wait4 rather than Popen.wait: it hands back this child's own rusage (peak RSS).
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        finally:
            if timer:
                timer.cancel()
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    report = None
    lines = out.decode(errors="replace").strip().splitlines()
    if lines:
        try:
            report = json.loads(lines[-1])
        except ValueError:
            report = None
    return ChildResult(proc.returncode, usage.ru_maxrss * _MAXRSS_UNIT, report, stderr, killed.is_set())


def current_rss_bytes() -> int:
    """This process's resident set now (Linux /proc; psutil elsewhere; 0 if neither is available)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except ImportError:
        return 0


def median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def best(fn: Callable[[], object], n: int = 3, clock: Callable[[], float] = time.perf_counter) -> float:
    """The fastest of ``n`` timed calls of ``fn``, in seconds of ``clock`` (wall time by default;
    ``time.process_time`` for CPU time), in this process: for steps that need no child."""
    out = float("inf")
    for _ in range(n):
        t = clock()
        fn()
        out = min(out, clock() - t)
    return out
