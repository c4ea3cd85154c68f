"""A scenario recorded, once :func:`tracer.record.scenario.record` knows its backend: the scenario checked, run
under the profiler — torch.profiler in this process, or nsys over a child process — and its record (the trace,
meta.json) written and derived into a run directory under a temporary name, renamed at the end. A multi-process
scenario's ranks are started as a job (:func:`record_job`: each rank a process of its own, tracer.record.ranks).

This module imports the scenarios package (tracer.scenarios), so torch, at its top: tracer.record.scenario, which
``tracer record --help`` and ``tracer record -- COMMAND`` import, imports it where a recording starts.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import torch
from torch.profiler import profile

import tracer
from tracer import scenarios
from tracer.errors import ToolMissingError, TracerError, UsageError
from tracer.files import rundir
from tracer.files.atomic import gzip_in_place, publish_dir, temp_dir_beside, writing
from tracer.files.rundir import NSYS_REPORT, NSYS_SQLITE, RUN_SCHEMA_VERSION, SQLITE_GZIP_BYTES, RunMeta
from tracer.job.oscalls import ends_with_parent
from tracer.record import ranks
from tracer.record.command import check_written, finish_run
from tracer.record.derive import derive
from tracer.record.nsys import NSYS_COMMAND_ARGS, NSYS_PROFILE_ARGS, export_nsys_sqlite, nsys_version, with_stacks
from tracer.record.profiler import environment, export_trace, quiet_kineto, stacks_on, torch_profiler_settings
from tracer.record.ranks import JOB, RESULT, RankOutcome, RanksFailedError, launch, rank_devices, with_tracer_on_path
from tracer.record.run import RecordedRun, ScenarioFailedError, run_name, sweep_left_behind
from tracer.scenarios import DeviceError, ScenarioError, ScenarioResult, parse_param_args, run_scenario
from tracer.scenarios.runtime import sanitize_derived

#: nsys captures between cudaProfilerStart/Stop, which only a GPU run calls (tests turn this off with a fake nsys)
NSYS_NEEDS_GPU = True


def record_scenario(scenario: str, *, device: str, out: str | os.PathLike[str], backend: str,
                    params: dict[str, str], say: Callable[[str], None], nsys: str | None) -> RecordedRun:
    """:func:`tracer.record.scenario.record` once its backend is known (``nsys``: the tool, for that backend):
    the scenario checked, run and written into its run directory."""
    spec, plan, values, _variants = _prepare(scenario, device, params)
    if backend == "nsys" and not plan.on_gpu and NSYS_NEEDS_GPU:
        raise UsageError("--backend nsys", "nsys traces CUDA and NVTX and needs a GPU; on the CPU use --backend torch")

    if spec.multi_process:  # one process per rank (ddp): the ranks are started and recorded as a job
        return record_job(spec, plan, values, params, out=out, backend=backend, nsys=nsys, say=say)
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    wanted = Path(out) / run_name(spec.name, values["variant"], plan.mode, created.astimezone())
    stages: dict[str, float] = {}
    sweep_left_behind(wanted.parent)
    tmp = temp_dir_beside(wanted)
    try:
        # A failed write anywhere below (a full disk) is one line naming the run; the scenario itself writes
        # nothing, and nsys failing to start is reported by _stream as a missing tool.
        with writing(wanted):
            meta, summary = _record_into(tmp, spec.name, device, params, plan.on_gpu, backend, nsys, created, say,
                                         stages)
            # The name is decided only now, atomically: a run started in the same second by another process
            # gets "-2" instead of failing with ENOTEMPTY after all its work (issue 14).
            final = publish_dir(tmp, wanted)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return RecordedRun(final, meta, summary, stages)


def parse_params(items: list[str]) -> dict[str, str]:
    """``--param NAME=VALUE`` arguments read as the scenarios read them; a malformed one is a :class:`UsageError`."""
    try:
        return parse_param_args(items)
    except ScenarioError as exc:
        raise UsageError("", str(exc)) from None


def _prepare(scenario: str, device: str, params: dict[str, str]) -> tuple[Any, Any, dict[str, Any], list[str]]:
    """Check the scenario, device and parameters before anything runs; scenario errors become tracer errors."""
    try:
        return scenarios.prepare(scenario, device, params)
    except DeviceError as exc:  # its message names the --device value already
        raise ToolMissingError("", str(exc)) from None
    except ScenarioError as exc:
        raise UsageError("", str(exc)) from None


def _record_into(tmp: Path, name: str, device: str, params: dict[str, str], on_gpu: bool, backend: str,
                 nsys: str | None, created: _dt.datetime, say: Callable[[str], None],
                 stages: dict[str, float]) -> tuple[RunMeta, dict[str, Any]]:
    """Run the scenario and write the whole run into the directory ``tmp``: the trace and meta.json (the
    record), then what :func:`tracer.record.derive.derive` makes of them; return the meta and the summary."""
    if backend == "torch":
        result, backend_meta = _run_torch(name, device, params, on_gpu, tmp, say, stages)
    else:
        assert nsys is not None
        result, backend_meta = _run_nsys(nsys, name, device, params, tmp, say, stages)
    if not result.ok:
        raise ScenarioFailedError(f"scenario {name}", "correctness check failed: " + "; ".join(result.failed_checks()))
    sqlite = tmp / NSYS_SQLITE
    if backend == "nsys" and sqlite.stat().st_size > SQLITE_GZIP_BYTES:
        t0 = time.perf_counter()
        gzip_in_place(sqlite)  # stored as it will be read, by derive now and by any later refresh alike
        stages["export"] = stages.get("export", 0.0) + time.perf_counter() - t0
    meta = _meta(result, backend, backend_meta, created)
    meta.files = rundir.file_sizes(tmp)
    meta.stages_s = dict(stages)
    rundir.write_meta(tmp, meta)
    say("parsing the trace")
    derived = derive(tmp, stages=stages)
    return derived.meta, derived.summary


def _meta(result: Any, backend: str, backend_meta: dict[str, Any], created: _dt.datetime) -> RunMeta:
    env = environment()
    notes = list(result.notes)
    return RunMeta(
        schema_version=RUN_SCHEMA_VERSION,
        kind=rundir.RUN_KIND,
        scenario=result.scenario,
        variant=result.variant,
        variants=result.variants,
        params=result.params,
        mode=result.mode,
        devices=result.devices,
        lanes=result.lanes,
        gpu_names=result.gpu_names,
        # the child's torch when nsys ran the scenario in another process
        torch_version=result.torch_version or env["torch_version"],
        cuda_version=result.cuda_version,
        wall_times_s=result.times_s,
        unprofiled_times=result.unprofiled,
        # every sample of a time taken more than once (wall_times_s holds their median)
        wall_time_samples_s=result.samples_s,
        profiled_window_s=result.profiled_window_s,
        intra_op_threads=result.intra_op_threads,
        checks=result.checks,
        # the scenario guarded them already; again here for a result read back from the nsys child's JSON
        derived=sanitize_derived(result.derived, notes),
        notes=notes,
        caveats=list(result.caveats),
        host_load=dict(result.host_load),
        phases=result.phases,
        backend=backend,
        backend_details=backend_meta,
        created=created.isoformat().replace("+00:00", "Z"),
        environment=env,
    )


# --------------------------------------------------------------------------------------------------------------
# torch.profiler, in this process


def _run_torch(name: str, device: str, params: dict[str, str], on_gpu: bool, tmp: Path, say: Callable[[str], None],
               stages: dict[str, float]) -> tuple[Any, dict[str, Any]]:
    # (on_gpu from record()'s own check of the scenario: preparing it again here resolved the devices twice)
    settings = torch_profiler_settings(all_threads=not on_gpu)
    holder: dict[str, Any] = {}

    @contextlib.contextmanager
    def profiler() -> Iterator[None]:
        say("profiling")
        prof: Any = profile(**settings)  # (torch leaves its __enter__ and __exit__ untyped)
        holder["prof"] = prof
        t0 = time.perf_counter()
        with quiet_kineto():  # start and stop print USDT marker lines (torch 2.13, CPU build)
            prof.__enter__()
        try:
            yield
        finally:
            with quiet_kineto():
                prof.__exit__(*sys.exc_info())
        stages["profiled"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    result = _run_scenario(run_scenario, name, device, params, say, profiler)
    stages["workload"] = time.perf_counter() - t0
    say("exporting the trace")
    t0 = time.perf_counter()
    export_trace(holder["prof"], tmp / rundir.TRACE)  # (a failed write raised: "File too large", not "empty")
    stages["export"] = time.perf_counter() - t0
    details = {
        "profiler": "torch.profiler",
        "activities": [str(a).rsplit(".", 1)[-1] for a in settings["activities"]],
        "profile_all_threads": "experimental_config" in settings,
        "acc_events": settings.get("acc_events", False),
    }
    return result, details


def _run_scenario(run_scenario: Callable[..., Any], name: str, device: str, params: dict[str, str],
                  say: Callable[[str], None], profiler: Callable[[], Any]) -> Any:
    try:
        return run_scenario(name, device, params, on_phase=say, profiler=profiler)
    except ScenarioError as exc:
        raise UsageError("", str(exc)) from None
    except Exception as exc:
        if isinstance(exc, torch.OutOfMemoryError):
            raise ScenarioFailedError(
                f"scenario {name}", "ran out of GPU memory; make it smaller with --param (e.g. --param size=2000)"
            ) from None
        raise


# --------------------------------------------------------------------------------------------------------------
# Nsight Systems, in a child process


def _run_nsys(nsys: str, name: str, device: str, params: dict[str, str], tmp: Path, say: Callable[[str], None],
              stages: dict[str, float]) -> tuple[Any, dict[str, Any]]:
    result_file = tmp / "result.json"
    child = [sys.executable, "-m", "tracer.scenarios", "run", name, "--device", device, "--result", str(result_file),
             "--cuda-profiler-range", "--progress"]
    for k, v in params.items():
        child += ["--param", f"{k}={v}"]
    args = with_stacks(NSYS_PROFILE_ARGS, nsys, stacks_on())
    cmd = [nsys, *args, "-o", str(tmp / "report"), *child]
    env = dict(os.environ)
    # the child must import the same tracer (and so tracer.scenarios) as this process: the folder above it
    root = str(Path(tracer.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    say("starting nsys")
    t0 = time.perf_counter()
    tail = _stream(cmd, env, say)
    stages["workload"] = time.perf_counter() - t0
    rep = tmp / NSYS_REPORT
    if not result_file.exists():
        raise ScenarioFailedError(f"scenario {name} under nsys", f"the child process failed: {tail}")
    result = ScenarioResult.from_dict(orjson.loads(result_file.read_bytes()))
    result_file.unlink()
    if not result.ok:
        return result, {}
    if not rep.exists():
        raise ScenarioFailedError(f"scenario {name} under nsys", f"nsys wrote no report: {tail}")
    say("exporting the report to SQLite")
    t0 = time.perf_counter()
    failed = export_nsys_sqlite(nsys, rep, tmp / NSYS_SQLITE)
    stages["export"] = time.perf_counter() - t0
    if failed:
        raise ScenarioFailedError(f"{rep.name}", failed)
    details = {"profiler": "nsys", "nsys_version": nsys_version(nsys), "nsys_args": args}
    return result, details


def _stream(cmd: list[str], env: dict[str, str], say: Callable[[str], None]) -> str:
    """Run ``cmd``, relaying the child's phase lines to ``say``; return the last output lines (for errors)."""
    lines: list[str] = []
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                preexec_fn=ends_with_parent())  # (nsys ends with a killed tracer)
    except OSError as exc:  # not an output problem: the tool itself does not start
        raise ToolMissingError(cmd[0], f"cannot run: {exc.strerror or exc}") from None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("[scenarios] "):
                say(line[len("[scenarios] "):])
            else:
                lines.append(line)
                del lines[:-20]
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        lines.append(f"(exit {proc.returncode})")
    return " | ".join(line for line in lines[-4:] if line.strip())


# --------------------------------------------------------------------------------------------------------------
# a multi-process scenario: its ranks, each a process of its own (tracer.record.ranks), recorded as one job


def record_job(spec: Any, plan: Any, values: dict[str, Any], params: dict[str, str], *, out: str | os.PathLike[str],
               backend: str, nsys: str | None, say: Callable[[str], None]) -> RecordedRun:
    """Record the multi-process scenario ``spec`` (checked already: ``plan``, ``values``) and write its run
    under ``out``; return the :class:`tracer.record.run.RecordedRun`. Raises :class:`RanksFailedError` (after
    writing the run) when a rank failed or hung, ScenarioFailedError (writing nothing) when no rank saved a
    trace or a correctness check failed."""
    world = int(values["ranks"])
    gpus = torch.cuda.device_count() if plan.on_gpu else 0
    dist_backend, devices, note = rank_devices(world, plan.on_gpu, gpus)
    if plan.on_gpu and dist_backend == "gloo":  # the ranks run on the CPU: its defaults, as the ranks take them
        values = spec.resolve_params(params, on_gpu=False)
        world = int(values["ranks"])
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    wanted = Path(out) / run_name(spec.name, values["variant"], f"{dist_backend}-{world}ranks", created.astimezone())
    stages: dict[str, float] = {}
    sweep_left_behind(wanted.parent)
    tmp = temp_dir_beside(wanted)
    work = tmp / ".capture"
    try:
        with writing(wanted):
            say(f"starting {world} ranks ({dist_backend})")
            if nsys is None:
                # (the ranks' own module's: a test puts another command there)
                commands = [ranks.rank_command(spec.name, work, d, params, "torch") for d in devices]
                outcomes, wall = launch(commands, devices, work, timeout_s=float(values["timeout"]))
                details: dict[str, Any] = {"profiler": "torch.profiler",
                                           "bootstrap": "tracer.record.capture (windowed)"}
            else:
                outcomes, wall, details = _launch_under_nsys(nsys, spec.name, devices, params, tmp, work,
                                                             float(values["timeout"]))
            stages["workload"] = wall
            results = _results(work, world)
            traces = sorted(work.glob("rank*.json.gz"))
            failed = [o for o in sorted(outcomes, key=lambda o: o.ended_s) if o.failed]
            recorded = traces or (tmp / rundir.NSYS_REPORT).exists()
            # a rank that could not write its trace (a full disk): the fault, in one line, and no run
            check_written([orjson.loads(p.read_bytes()) for p in sorted(work.glob("*.capture.json"))], tmp,
                          recorded=bool(recorded))
            if not recorded or (not results and not failed):
                raise ScenarioFailedError(f"scenario {spec.name}", "no rank saved a trace: "
                                          + "; ".join(o.describe() for o in failed or outcomes))
            bad = [f"rank {r}: {k}: {c['detail']}" for r, res in results.items() for k, c in res["checks"].items()
                   if not c["ok"]]
            if bad and not failed:
                raise ScenarioFailedError(f"scenario {spec.name}", "correctness check failed: " + "; ".join(bad))
            if traces:
                (tmp / rundir.TRACES_DIR).mkdir()
                for t in traces:
                    os.replace(t, tmp / rundir.TRACES_DIR / t.name)
            meta = _job_meta(spec, values, results, outcomes, work, devices, dist_backend, note, backend, details,
                         created, wall)
            meta.stages_s = stages
            shutil.rmtree(work, ignore_errors=True)
            say("parsing the traces")
            final, derived = finish_run(tmp, wanted, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if failed:
        kept = sorted(int(p["rank"]) for p in meta.processes if p.get("files"))
        raise RanksFailedError(
            f"scenario {spec.name}",
            "; ".join(o.describe() for o in failed)
            + f". The run keeps the traces of rank(s) {', '.join(map(str, kept)) or 'none'}: {final}",
        )
    return RecordedRun(final, derived.meta, derived.summary, stages)


def _results(work: Path, world: int) -> dict[int, dict[str, Any]]:
    out = {}
    for rank in range(world):
        p = work / RESULT.format(rank=rank)
        if p.exists():
            out[rank] = orjson.loads(p.read_bytes())
    return out


def _job_meta(spec: Any, values: dict[str, Any], results: dict[int, dict[str, Any]], outcomes: list[RankOutcome],
          work: Path, devices: list[str], dist_backend: str, note: str | None, backend: str,
          details: dict[str, Any], created: _dt.datetime, wall: float) -> RunMeta:
    """meta.json of the job: the scenario's fields from the lowest rank that finished, the job's from all."""
    first = results[min(results)] if results else {}
    status = {int(s["rank"]): s for s in (orjson.loads(p.read_bytes()) for p in sorted(work.glob("*.capture.json")))
              if s.get("rank") is not None}
    processes = []
    for o in outcomes:
        # no status file: the rank was killed before it could write one, or (under nsys) recorded nothing itself
        ended = "timeout" if o.timed_out else "torn down" if o.torn_down else "exit"
        entry = dict(status.get(o.rank) or {"pid": o.pid, "rank": o.rank, "world_size": len(outcomes),
                                            "ended": ended, "files": []})
        entry.update(exit_code=o.exit_code, last_line=o.last_line, timed_out=o.timed_out, torn_down=o.torn_down,
                     device=o.device)
        processes.append(entry)
    checks: dict[str, dict[str, Any]] = {}
    for name, c in first.get("checks", {}).items():
        on = [r for r, res in results.items() if name in res["checks"]]
        ok = all(results[r]["checks"][name]["ok"] for r in on)
        checks[name] = {"ok": ok, "detail": f"{c['detail']} (rank {min(results)}; held on rank(s) "
                                             f"{', '.join(map(str, on))})" if ok else c["detail"]}
    notes = [*first.get("notes", []), *([note] if note else [])]
    failed = [o for o in outcomes if o.failed]
    notes += [o.describe() for o in failed]
    env = environment()
    exit_code = min(failed, key=lambda o: o.ended_s).exit_code if failed else 0
    return rundir.RunMeta(
        scenario=spec.name,
        variant=values["variant"],
        variants=first.get("variants", list(spec.variants)),
        params=first.get("params", values),
        mode="processes",
        devices=devices,
        lanes=[{"index": r, "label": f"rank{r}", "device": d, "rank": r} for r, d in enumerate(devices)],
        gpu_names={k: v for res in results.values() for k, v in res.get("gpu_names", {}).items()},
        torch_version=env["torch_version"],
        cuda_version=env["cuda_version"],
        wall_times_s={**first.get("times_s", {}), "job": round(wall, 6)},
        unprofiled_times=[*first.get("unprofiled", []), "job"],
        wall_time_samples_s=first.get("samples_s", {}),
        profiled_window_s=first.get("profiled_window_s"),
        intra_op_threads=first.get("intra_op_threads"),
        checks=checks,
        derived=first.get("derived", {}),
        notes=notes,
        caveats=first.get("caveats", []),
        phases=first.get("phases", []),
        backend=backend,
        backend_details={**details, "distributed_backend": dist_backend, "world_size": len(outcomes)},
        created=created.isoformat().replace("+00:00", "Z"),
        environment=env,
        exit_code=exit_code,
        processes=processes,
        # under nsys one report holds every rank: no rank has a trace of its own to miss
        missing_ranks=[] if backend == "nsys" else sorted(o.rank for o in outcomes
                                                          if not (status.get(o.rank) or {}).get("files")),
    )


def _launch_under_nsys(nsys: str, name: str, devices: list[str], params: Mapping[str, str], tmp: Path, work: Path,
                       timeout_s: float) -> tuple[list[RankOutcome], float, dict[str, Any]]:
    """``nsys profile`` of the launcher (``python -m tracer.record.ranks job``): one report of every rank, which
    nsys follows as the launcher's children. UNTESTED on a GPU (no GPU where it was written)."""
    job = [sys.executable, "-m", "tracer.record.ranks", "job", name, "--devices", ",".join(devices), "--out",
           str(work), "--timeout", f"{timeout_s:g}"]
    for k, v in params.items():
        job += ["--param", f"{k}={v}"]
    args = with_stacks(NSYS_COMMAND_ARGS, nsys, stacks_on())
    cmd = [nsys, *args, "-o", str(tmp / "report"), *job]
    env = with_tracer_on_path(dict(os.environ))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env)
    wall = time.perf_counter() - t0
    job_file = work / JOB
    if not job_file.exists():
        raise TracerError(f"scenario {name} under nsys", f"the launcher wrote no {JOB} (nsys exited with "
                                                         f"{proc.returncode})")
    outcomes = [RankOutcome(**o) for o in orjson.loads(job_file.read_bytes())]
    report = tmp / rundir.NSYS_REPORT
    if report.exists():
        sqlite = tmp / rundir.NSYS_SQLITE
        failed = export_nsys_sqlite(nsys, report, sqlite)
        if failed:
            raise TracerError(report.name, failed)
        if sqlite.stat().st_size > rundir.SQLITE_GZIP_BYTES:
            gzip_in_place(sqlite)
    details = {"profiler": "nsys", "nsys_version": nsys_version(nsys), "nsys_args": args}
    return outcomes, wall, details
