"""Where ``tracer summary --job``'s first open spends its wall time: the command itself, step by step.

``bench/job_phases.py`` times ``summarize_job`` inside a harness; this runs the real command (``tracer.cli.main``
then ``tracer.cli.leave``, as the ``tracer`` script does) in a fresh child process per run, with marks at its
steps, in ms since the child's process started (``/proc/self/stat``): the CLI imported, the early scans started
(``tracer.job.scan.start_early_scans``), the first and the last scan's start and end (on the workers), every scan
back in the command's process, the merges' first start and last end, ``summarize_job`` back, ``main`` back — and
the child's wall time as its parent saw it (its exit included). Each row: the median over ``--repeat`` runs.

    python bench/multirank.py --tools tracer --scale 100        # writes the job once
    python bench/cli_phases.py /tmp/tracer-bench/job-mlp_train_200_x9-r8 --repeat 5

``--solo`` first times one part's scan and one rank's merge in this process with nothing else running (best of
3): against the marks, what running 16 scans at once costs each of them on the host.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from job_phases import process_start
from multirank import drop_stored

#: the marks, in the order they are printed
MARKS = (
    "tracer.cli imported",
    "early scans started",
    "first scan started",
    "last scan started",
    "first scan ended",
    "last scan ended",
    "every scan back",
    "first merge started",
    "last merge ended",
    "first parse started",
    "last parse ended",
    "summarize_job back",
    "main back",
)


def child(log: Path, argv: list[str]) -> None:
    """The command, marked: each mark a line ``{"mark": ..., "ms": ...}`` appended to ``log`` (by any process)."""
    t0 = process_start()

    def mark(what: str) -> None:
        with open(log, "a") as f:
            f.write(json.dumps({"mark": what, "ms": (time.time() - t0) * 1e3}) + "\n")

    import tracer.cli as cli

    mark("tracer.cli imported")
    import tracer.job.load as job
    import tracer.job.rank_tasks as rank_tasks
    import tracer.job.scan as scan
    import tracer.job.scheduling as scheduling

    def around(owner: Any, name: str, before: str | None, after: str | None) -> None:
        fn = getattr(owner, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            if before:
                mark(before)
            out = fn(*a, **k)
            if after and out is not None:
                mark(after)
            return out

        wrapper.__qualname__ = fn.__qualname__  # (pickled by name: a worker forked from here finds the wrapper)
        wrapper.__module__ = fn.__module__
        setattr(owner, name, wrapper)

    around(scan, "start_early_scans", None, "early scans started")
    around(scan, "scan_part", "scan started", "scan ended")
    around(scan.EarlyScans, "results", None, "every scan back")
    around(rank_tasks, "merge_group", "merge started", "merge ended")
    around(rank_tasks, "parse_group", "parse started", "parse ended")
    if os.environ.get("BENCH_CORES"):  # (develop only: the split path on a machine with fewer cores)
        scheduling.cores = lambda: int(os.environ["BENCH_CORES"])
    around(job, "summarize_job", None, "summarize_job back")
    with open(os.devnull, "w") as sink:
        sys.stdout = sink
        rc = cli.main(argv)
        mark("main back")
        sys.stdout = sys.__stdout__
    cli.leave(rc)


def solo(job: Path) -> None:
    """One part's scan (of 2) and the rank's merge of both parts, alone in this process: best of 3, ms."""
    import tracer.job.rank_tasks as rank_tasks
    import tracer.job.scan as scan
    import tracer.job.workers as workers

    path = str(sorted(p for p in job.iterdir() if p.suffix == ".json")[0])
    best = {}
    for k in (1, 2):
        best[f"part 1 of {k} scanned"] = min(_timed(lambda k=k: scan.scan_part(path, 0, k)) for _ in range(3))
    workers.import_worker_modules()
    import tracer.analysis.ranked  # noqa: F401 - (imported before the workers fork, in the command)

    scans = [scan.scan_part(path, j, 2) for j in range(2)]
    task = rank_tasks.Task(with_keys=True, align=True, analyze=True, side_thread=True)
    runs = [rank_tasks.merge_group(0, [path], task, scans) for _ in range(3)]
    fastest = min(runs, key=lambda r: r.seconds)
    best["rank merged from its 2 parts"] = fastest.seconds * 1e3
    print(f"alone, best of 3 ({Path(path).name}):")
    for what, ms in best.items():
        print(f"{ms:8.0f}  {what}")
    print("          (the merge's steps: " + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in fastest.phases.items()) + ")")


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def one_run(job: Path, extra: list[str]) -> dict[str, float]:
    """One first open of ``job`` in a fresh child: its marks (first/last of the workers' ones) and wall ms."""
    drop_stored(job)
    with tempfile.TemporaryDirectory(prefix="tracer-cli-phases-") as tmp:
        log = Path(tmp) / "marks.jsonl"
        t = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--child", str(log), "--", "summary", "--job", *extra, str(job)],
                       check=True, stderr=subprocess.DEVNULL)
        wall = (time.perf_counter() - t) * 1e3
        rows = [json.loads(line) for line in log.read_text().splitlines()]
    out: dict[str, float] = {"wall (seen by the parent)": wall}
    for r in rows:
        what, ms = r["mark"], r["ms"]
        if what.split()[0] in ("scan", "merge", "parse"):
            kind, edge = what.split()
            first, last = f"first {kind} {edge}", f"last {kind} {edge}"
            out[first] = min(out.get(first, ms), ms)
            out[last] = max(out.get(last, ms), ms)
        else:
            out.setdefault(what, ms)
    return out


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--child"]:
        child(Path(args[1]), args[3:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job", type=Path, help="a folder of rank traces")
    ap.add_argument("--repeat", type=int, default=3, help="runs (each row: their median)")
    ap.add_argument("--option", action="append", default=[], help="an option for `tracer summary --job`")
    ap.add_argument("--solo", action="store_true", help="first time one scan and one merge alone")
    a = ap.parse_args(args)
    if not a.job.is_dir():
        ap.error(f"{a.job}: not a folder of rank traces")
    if a.solo:
        solo(a.job)
    runs = [one_run(a.job, a.option) for _ in range(a.repeat)]
    print(f"{os.cpu_count()} cores; `tracer summary --job {' '.join(a.option)}` first open, {a.repeat} runs; "
          "ms since the command's process started (median; min – max)")
    for what in (*MARKS, "wall (seen by the parent)"):
        got = [r[what] for r in runs if what in r]
        if got:
            print(f"{statistics.median(got):8.0f}  ({min(got):6.0f} – {max(got):6.0f})  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
