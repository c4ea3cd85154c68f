"""Benchmark: a whole multi-rank job parsed and summarised — tracer on Dask against HTA's ``TraceAnalysis``.

The job: ``--ranks`` copies of a synthetic scale-up of a real Kineto rank trace (``bench/synth.py``: the H200
training trace ``mlp_train_200`` replicated until each rank is ~``--scale`` MB of plain JSON), each given its
own ``"distributedInfo": {"rank": R, ...}`` (what torch.profiler writes on a distributed run, and what HTA reads
a rank from), in one folder. Every measurement runs in a fresh child process (``bench/_common.run_child``):

    tracer          ``tracer summary --job --json DIR``, the command itself (``tracer.cli.main``, then its exit:
                    ``tracer.cli.leave``; ``summarize_job``: each rank parsed and analysed on a Dask local process,
                    the default, and the results combined), first open: no stored dataset, so it parses and
                    writes one ("read s": the command's run, JSON included, from its arguments to its output)
    tracer-whole    the same first open with every rank's file parsed whole (``tracer.job.scan.MIN_PART_BYTES``
                    set past any file: where cores outnumber ranks, what the split into parts saves)
    tracer-late     the same first open without early scans (``tracer.job.scan.start_early_scans`` off: the
                    parts scanned on the pool forked after the main process's imports, as before they existed)
    tracer-reload   the same again: each rank read back from its partition and analysed on a worker
    tracer-cluster  the same first open on a 2-worker ``distributed.LocalCluster`` (separate processes) that this
                    bench starts beforehand (its start-up is reported, not counted: a cluster user's is running)
    hta             ``TraceAnalysis(trace_dir=DIR)`` (its own process pool, one process per rank up to the cores)
                    then ``get_gpu_kernel_breakdown``, ``get_comm_comp_overlap`` and ``get_temporal_breakdown`` (no
                    plots; HTA 0.5's temporal breakdown fails an assertion on these traces, whose kernels overlap
                    across streams: its time still counts, the failure is reported)

Wall time: the child's whole life (interpreter start and imports included, the same for both tools: what a user
waits for). CPU time: user + system of the child and every worker process (on a shared machine, where other
work takes cores away at random, the steadier comparison). Peak memory per process: the child's own peak RSS
(``main GB``) and the largest peak of any worker process (``worker GB``: the children it waited for, from
``getrusage(RUSAGE_CHILDREN)``; the cluster's workers from each worker's own ``getrusage``).

    python bench/multirank.py --scale 5                 # develop: 8 small ranks (one copy of the source each)
    python bench/multirank.py                           # 8 × ~100 MB, the issue's bench (HTA takes minutes)
    python bench/multirank.py --tools tracer,hta --repeat 3   # medians of 3 interleaved runs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import median, run_child
from synth import DEFAULT_DIR, DEFAULT_SOURCE, scaled_trace

HTA_PYTHON = Path(os.environ.get("TRACER_HTA_PYTHON", "/work/hta-venv/bin/python"))
TARGET_VS_HTA = 15.0
TOOLS = ("tracer", "tracer-whole", "tracer-late", "tracer-reload", "tracer-cluster", "hta")


# --- the job ------------------------------------------------------------------------------------------------


def make_job(ranks: int, scale_mb: float, source: Path = DEFAULT_SOURCE, root: Path = DEFAULT_DIR) -> Path:
    """A folder of ``ranks`` rank traces, each the ×N scale-up of ``source`` nearest ``scale_mb`` MB with its own
    distributedInfo; reused while its files are there."""
    one = scaled_trace(1, source, root)
    factor = max(1, round(scale_mb * 1e6 / one.stat().st_size))
    scaled = scaled_trace(factor, source, root)
    job = root / f"job-{scaled.stem}-r{ranks}"
    files = [job / f"rank-{r}.json" for r in range(ranks)]
    if all(f.exists() for f in files):
        return job
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir(parents=True)
    data = scaled.read_bytes()
    at = data.index(b"{") + 1
    for r, f in enumerate(files):
        info = b'\n  "distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d},' % (r, ranks)
        tmp = f.with_name(f.name + ".tmp")
        with open(tmp, "wb") as out:
            out.write(data[:at])
            out.write(info)
            out.write(data[at:])
        os.replace(tmp, f)
    return job


def job_bytes(job: Path) -> int:
    return sum(f.stat().st_size for f in job.glob("rank-*.json"))


def drop_stored(job: Path) -> None:
    """Remove the job's stored dataset (and any single-file caches), so that the next open parses."""
    for p in job.iterdir():
        if p.name.startswith(".tracer-job-"):
            shutil.rmtree(p, ignore_errors=True)
        elif p.name.endswith(".tracer.parquet"):
            p.unlink()


# --- child side ---------------------------------------------------------------------------------------------


def parse_every_rank_whole() -> None:
    """No rank's file split into parts from here on, in this process and the workers it forks."""
    import tracer.job.scan

    tracer.job.scan.MIN_PART_BYTES = 1 << 62  # (no file is that large)



def _peaks() -> dict[str, int]:
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"main_rss": me.ru_maxrss * 1024, "worker_rss": kids.ru_maxrss * 1024,
            "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}


def child_tracer(job: Path, scheduler: str | None, whole: bool = False, late: bool = False) -> dict[str, Any]:
    """``tracer summary --job --json DIR`` run as the command runs it (``tracer.cli.main``, its JSON caught here),
    and this child's report; the caller then leaves as the command does (``tracer.cli.leave``). ``late``: no
    early scans."""
    import io

    if whole:
        parse_every_rank_whole()
    if late:
        import tracer.job.scan

        tracer.job.scan.start_early_scans = lambda groups: None  # type: ignore[assignment]  # (off)
    from tracer import cli

    argv = ["summary", "--job", "--json", str(job)] + (["--scheduler", scheduler] if scheduler else [])
    stored = any(p.name.startswith(".tracer-job-") for p in job.iterdir())
    raw = io.BytesIO()
    out, real = io.TextIOWrapper(raw), sys.stdout
    t0 = time.perf_counter()
    sys.stdout = out
    try:
        code = cli.main(argv)
        out.flush()
    finally:
        sys.stdout = real
    t1 = time.perf_counter()
    if code != 0:
        raise SystemExit(f"tracer summary exited {code}")
    doc = json.loads(raw.getvalue())
    return {"rows": doc["events"], "parse_s": t1 - t0, "analyse_s": 0.0, "gpus": len(doc["devices"]),
            "stored": stored, **_peaks()}


HTA_CHILD = r"""
import json, logging, resource, sys, time, warnings
logging.disable(logging.WARNING)  # HTA logs its progress at WARNING
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
kb = a.get_gpu_kernel_breakdown(visualize=False)
ov = a.get_comm_comp_overlap(visualize=False)
try:
    a.get_temporal_breakdown(visualize=False)
    temporal = "ok"
except AssertionError:  # (HTA 0.5's idle_time_per_rank asserts on kernels that overlap across streams)
    temporal = "AssertionError"
t2 = time.perf_counter()
rows = sum(len(df) for df in a.t.traces.values())
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rows": rows, "parse_s": t1 - t0, "analyse_s": t2 - t1, "gpus": len(ov),
                  "temporal_breakdown": temporal, "main_rss": me.ru_maxrss * 1024, "worker_rss": kids.ru_maxrss * 1024,
                  "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}))
"""


# --- parent side --------------------------------------------------------------------------------------------


def measure(tool: str, job: Path, timeout_s: float, scheduler: str | None = None) -> dict[str, Any]:
    if tool == "hta":
        argv = [str(HTA_PYTHON), "-c", HTA_CHILD, str(job)]
    else:
        argv = [sys.executable, __file__, "--child", str(job)] + (["--scheduler", scheduler] if scheduler else [])
        argv += ["--whole"] if tool == "tracer-whole" else ["--late"] if tool == "tracer-late" else []
    t0 = time.perf_counter()
    res = run_child(argv, timeout_s)
    wall = time.perf_counter() - t0
    if res.returncode != 0 or res.report is None:
        why = "timed out" if res.timed_out else (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{tool} failed (exit {res.returncode}): {why}")
    return {"tool": tool, "wall_s": wall, **res.report}


def with_cluster(job: Path, timeout_s: float, workers: int = 2) -> dict[str, Any]:
    """The first open on a ``workers``-process LocalCluster started here; each worker's own peak RSS."""
    import logging
    import resource

    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        started = time.perf_counter() - t0
        drop_stored(job)
        row = measure("tracer-cluster", job, timeout_s, scheduler=cluster.scheduler_address)
        usage = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF))
    row["worker_rss"] = max(u.ru_maxrss * 1024 for u in usage.values())
    # (the workers' whole CPU time, start-up and idle heartbeats included: an upper bound of the job's share)
    row["cpu_s"] += sum(u.ru_utime + u.ru_stime for u in usage.values())
    row["cluster_start_s"] = started
    return row


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One tool's repetitions as one row: the median of each time, the largest of each peak."""
    row = dict(runs[0])
    for k in ("wall_s", "parse_s", "analyse_s", "cpu_s"):
        row[k] = median([r[k] for r in runs])
    for k in ("main_rss", "worker_rss"):
        row[k] = max(r[k] for r in runs)
    row["repeat"] = len(runs)
    row["walls"] = [round(r["wall_s"], 2) for r in runs]
    return row


def format_table(rows: list[dict[str, Any]], job_mb: float, ranks: int) -> str:
    hta = next((r for r in rows if r["tool"] == "hta"), None)
    lines = ["| tool | job | wall s | read s | analyse s | CPU s | vs HTA: wall | CPU | main GB | worker GB | rows |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        speed = f"{hta['wall_s'] / r['wall_s']:.1f}×" if hta and r is not hta else ""
        cpu = f"{hta['cpu_s'] / r['cpu_s']:.1f}×" if hta and r is not hta else ""
        lines.append(f"| {r['tool']} | {ranks} × {job_mb / ranks:,.0f} MB | {r['wall_s']:.2f} | {r['parse_s']:.2f} | "
                     f"{r['analyse_s']:.2f} | {r['cpu_s']:.1f} | {speed} | {cpu} | {r['main_rss'] / 1e9:.2f} | "
                     f"{r['worker_rss'] / 1e9:.2f} | {r['rows']:,} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--scheduler", help=argparse.SUPPRESS)
    ap.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--late", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ranks", type=int, default=8, help="ranks in the job (default 8)")
    ap.add_argument("--scale", type=float, default=100.0, help="MB of JSON per rank (default 100)")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real rank trace to scale up")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="where the job is written")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"which of {', '.join(TOOLS)}")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each tool, interleaved (medians reported)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per measurement")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child_tracer(args.child, args.scheduler, args.whole, args.late)))
        from tracer.cli import leave

        leave(0)  # (as the command ends: without the interpreter's teardown)
    tools = [t for t in args.tools.split(",") if t]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        ap.error(f"unknown tools {unknown}")
    job = make_job(args.ranks, args.scale, args.source, args.dir)
    total = job_bytes(job)
    print(f"job: {job} ({args.ranks} ranks, {total / 1e6:,.0f} MB); {os.cpu_count()} cores", file=sys.stderr)
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in tools}
    for rep in range(args.repeat):  # interleaved, repetition by repetition: load from others hits all tools alike
        for tool in tools:
            if tool in ("tracer", "tracer-whole", "tracer-late"):
                drop_stored(job)
                row = measure(tool, job, args.timeout)
            elif tool == "tracer-reload":
                if not any(p.name.startswith(".tracer-job-") for p in job.iterdir()):
                    measure("tracer", job, args.timeout)  # (a first open, to store the job)
                row = measure(tool, job, args.timeout)
            elif tool == "tracer-cluster":
                row = with_cluster(job, args.timeout)
            else:
                row = measure(tool, job, args.timeout)
            runs[tool].append(row)
            print(f"{tool} #{rep + 1}: {row['wall_s']:.2f} s wall, {row['cpu_s']:.1f} s CPU, {row['rows']:,} rows",
                  file=sys.stderr)
    rows = [summarise(rs) for rs in runs.values()]
    print(format_table(rows, total / 1e6, args.ranks))
    hta = next((r for r in rows if r["tool"] == "hta"), None)
    first = next((r for r in rows if r["tool"] == "tracer"), None)
    if hta and first:
        ratio = hta["wall_s"] / first["wall_s"]
        verdict = "met" if ratio >= TARGET_VS_HTA else "NOT met"
        print(f"\ntarget ≥ {TARGET_VS_HTA:g}× faster than HTA (first open, local processes): {verdict}: {ratio:.1f}×")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
