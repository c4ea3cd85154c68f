"""A job's first open with its ranks split into parts, as on a many-core host, on any machine: wall time and the
main process's own CPU time.

``tracer.job.scan`` splits a rank's file only where the cores outnumber the ranks; ``--cores N`` makes it believe
it has N (``tracer.job.scheduling.cores``), so that a 2-core machine runs the split path too (with N workers sharing
its cores: the main process's CPU time, where the scanned parts used to queue, is the figure to compare). Each
run is a fresh child process; the job is opened with ``cache=False`` (nothing stored, nothing read back).
Interleave two versions of tracer by running the script from each tree with ``PYTHONPATH`` set to it:

    python bench/split_job.py /tmp/tracer-bench/job-mlp_train_200_x9-r8 --ranks 2 --cores 4 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median, run_child


def child(job: Path, ranks: int, cores: int) -> dict[str, float]:
    import tracer.job.scheduling as scheduling
    from tracer.job.scan import split_counts

    scheduling.cores = lambda: cores  # (the point of the bench)
    from tracer.job.load import summarize_job

    paths = sorted(job.glob("rank-*.json"))[:ranks]
    t0 = time.perf_counter()
    summarize_job(paths, cache=False)
    wall = time.perf_counter() - t0
    me = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_s": wall, "main_cpu_s": me.ru_utime + me.ru_stime, "parts": split_counts(
        [[str(p)] for p in paths])[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job", type=Path, help="a folder of rank-N.json files (bench/multirank.py writes one)")
    ap.add_argument("--ranks", type=int, default=2, help="open only the first RANKS ranks (default 2)")
    ap.add_argument("--cores", type=int, default=4, help="the cores tracer is told it has (default 4)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.job.is_dir():
        ap.error(f"{args.job}: not a folder of rank traces")
    if args.child:
        print(json.dumps(child(args.job, args.ranks, args.cores)))
        return 0
    rows = []
    for i in range(args.repeat):
        res = run_child([sys.executable, __file__, "--child", str(args.job), "--ranks", str(args.ranks),
                         "--cores", str(args.cores)], 600)
        if res.returncode != 0 or res.report is None:
            print(f"run {i + 1} failed: {res.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return 1
        rows.append(res.report)
        print(f"run {i + 1}: {res.report['wall_s']:.2f} s wall, main process {res.report['main_cpu_s']:.2f} s CPU, "
              f"{res.report['parts']} parts a rank")
    print(f"median: {median([r['wall_s'] for r in rows]):.2f} s wall, "
          f"{median([r['main_cpu_s'] for r in rows]):.2f} s main CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
