"""Where a job's first open spends its wall time: a timeline of one ``summarize_job`` in this process.

Prints, in ms since this interpreter started (``time.time()`` against the process's start time from
``/proc/self/stat``): when the main process's imports were done, when the job was handed to the workers, each
worker task's start and end (which process, which rank, which kind: ``parse`` a whole rank, ``scan`` one part
of a split rank, ``merge`` its parts) with the rank's phases, and when the combined summary was back. The
tasks are timed by wrapping the task functions (:mod:`tracer.job.rank_tasks`, :mod:`tracer.job.scan`) before the
workers fork, so it measures the local-process path only (``--whole`` parses every rank whole, as
``bench/multirank.py``'s tracer-whole).

    python bench/multirank.py --tools tracer --scale 100        # writes the job once
    python bench/job_phases.py /tmp/tracer-bench/job-mlp_train_200_x9-r8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from multirank import drop_stored, parse_every_rank_whole


def process_start() -> float:
    """This process's start, Unix seconds (Linux: field 22 of /proc/self/stat, in clock ticks since boot)."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


T0 = process_start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job", type=Path, help="a folder of rank traces")
    ap.add_argument("--whole", action="store_true", help="never split a rank's file into parts")
    ap.add_argument("--json", type=Path, help="also write the events here")
    args = ap.parse_args(argv)
    if not args.job.is_dir():
        ap.error(f"{args.job}: not a folder of rank traces")
    drop_stored(args.job)  # (a first open: nothing stored)

    from tracer._blas import quiet_blas

    quiet_blas()
    import tracer.job.rank_tasks as rank_tasks
    import tracer.job.scan as scan
    import tracer.job.workers as workers
    from tracer.files.discover import expand
    from tracer.job.load import summarize_job

    if args.whole:
        parse_every_rank_whole()
    log = Path(tempfile.mkdtemp(prefix="tracer-phases-"))

    def timed(fn: Any, kind: str) -> Any:
        def wrapper(*a: Any) -> Any:
            t = time.time()
            out = fn(*a)
            row = {"kind": kind, "pid": os.getpid(), "start_ms": (t - T0) * 1e3, "end_ms": (time.time() - T0) * 1e3,
                   "what": str(a[0]) if kind != "scan" else f"{Path(a[0]).stem} part {a[1]}/{a[2]}",
                   "phases": {k: round(v * 1e3) for k, v in getattr(out, "phases", {}).items()}}
            with open(log / f"{os.getpid()}.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            return out
        wrapper.__qualname__ = fn.__qualname__  # (pickled by name: the worker finds this wrapper there)
        wrapper.__module__ = fn.__module__
        return wrapper

    rank_tasks.parse_group = timed(rank_tasks.parse_group, "parse")
    scan.scan_part = timed(scan.scan_part, "scan")
    rank_tasks.merge_group = timed(rank_tasks.merge_group, "merge")
    marks: list[tuple[float, str]] = []  # this process's own steps of an early-scanned job

    def marked(fn: Any, what: str) -> Any:
        def wrapper(*a: Any) -> Any:
            out = fn(*a)
            marks.append(((time.time() - T0) * 1e3, what))
            return out
        return wrapper

    workers.import_worker_modules = marked(workers.import_worker_modules, "main: the merges' modules imported")
    scan.EarlyScans.results = marked(scan.EarlyScans.results,  # type: ignore[method-assign]
                                     "main: every scan back, the scanning pool shut down")
    imported = (time.time() - T0) * 1e3
    paths = expand([args.job])
    handed = (time.time() - T0) * 1e3
    summary, _ = summarize_job(paths)
    back = (time.time() - T0) * 1e3
    summary.to_dict()
    done = (time.time() - T0) * 1e3
    rows = sorted((json.loads(line) for f in log.glob("*.jsonl") for line in f.read_text().splitlines()),
                  key=lambda r: r["start_ms"])
    shutil.rmtree(log, ignore_errors=True)
    pids = {p: i for i, p in enumerate(sorted({r["pid"] for r in rows}, key=lambda p: min(
        r["start_ms"] for r in rows if r["pid"] == p)))}
    print(f"{os.cpu_count()} cores; ms since the interpreter started")
    print(f"{imported:7.0f}  imports done")
    print(f"{handed:7.0f}  job handed to summarize_job")
    for t, what in marks:
        print(f"{t:7.0f}  {what}")
    for r in rows:
        print(f"{r['start_ms']:7.0f} – {r['end_ms']:7.0f}  worker {pids[r['pid']]:2d}  {r['kind']:5s}  "
              f"{r['what']:22s} {r['phases']}")
    print(f"{back:7.0f}  summary combined")
    print(f"{done:7.0f}  summary as JSON")
    if args.json:
        args.json.write_text(json.dumps({"imported_ms": imported, "back_ms": back, "done_ms": done, "tasks": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
