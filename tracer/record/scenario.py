"""Run a scenario under a profiler and write a run directory: trace, timeline, metadata, summary.

A run directory (``runs/<scenario>[-<variant>]-<mode>-<YYYYmmdd-HHMMSS>/``, laid out in :mod:`tracer.files.rundir`)
holds:

* ``trace.json.gz``    — torch.profiler's Chrome trace (``--backend torch``), or
  ``report.nsys-rep`` + ``report.sqlite[.gz]`` — Nsight Systems' report and its SQLite export (``--backend nsys``);
* ``meta.json``        — what ran (:class:`tracer.files.rundir.RunMeta`): scenario, variant, parameters, device mode
  and devices, GPU names, torch and CUDA versions, wall times per variant, the correctness checks, the backend,
  when (no host name);
* ``timeline.parquet`` — the parsed timeline (what ``tracer summary``/the dashboard read first);
* ``summary.json``     — ``tracer summary --json`` of the timeline.

The recorder writes the first two (the record) and then calls :func:`tracer.record.derive.derive`, which makes the
other two from them, as it does again for an old run (:func:`refresh_run`). The directory is written under a
temporary name beside its final one and renamed at the end, so Ctrl-C, a crashing or a failing scenario (a
correctness check that does not hold) leaves nothing half-written.

Data flows one way: this module runs ``scenarios`` and reads what they report; scenarios know nothing of it.
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

import tracer
from tracer.analysis.summary import Summary
from tracer.errors import ToolMissingError, UsageError
from tracer.files import rundir
from tracer.files.atomic import gzip_in_place, publish_dir, temp_dir_beside, writing
from tracer.files.rundir import (
    NSYS_REPORT,
    NSYS_SQLITE,
    RUN_SCHEMA_VERSION,
    SQLITE_GZIP_BYTES,
    RunMeta,
    describe_host_load,
)
from tracer.record.derive import derive
from tracer.record.nsys import NSYS_PROFILE_ARGS, export_nsys_sqlite, find_nsys, nsys_version
from tracer.record.profiler import environment, quiet_kineto, torch_profiler_settings
from tracer.record.ranks import record_job
from tracer.record.run import RecordedRun, ScenarioFailedError, run_name
from tracer.timeline import device_label

BACKENDS = ("torch", "nsys")
#: nsys captures between cudaProfilerStart/Stop, which only a GPU run calls (tests turn this off with a fake nsys)
NSYS_NEEDS_GPU = True



# --------------------------------------------------------------------------------------------------------------


def _prepare(scenario: str, device: str, params: dict[str, str]) -> tuple[Any, Any, dict[str, Any], list[str]]:
    """Check the scenario, device and parameters before anything runs; scenario errors become tracer errors."""
    # (torch: tracer.record.* imports it only where a recording starts)
    from tracer.scenarios import DeviceError, ScenarioError, prepare

    try:
        return prepare(scenario, device, params)
    except DeviceError as exc:  # its message names the --device value already
        raise ToolMissingError("", str(exc)) from None
    except ScenarioError as exc:
        raise UsageError("", str(exc)) from None


# --------------------------------------------------------------------------------------------------------------


def record(
    scenario: str,
    *,
    device: str = "auto",
    out: str | os.PathLike[str] = "runs",
    backend: str = "torch",
    params: dict[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> RecordedRun:
    """Run ``scenario`` under ``backend`` and write a run directory under ``out``; return it.

    Raises :class:`UsageError` for a bad scenario, parameter or backend, :class:`ToolMissingError` when the
    device or nsys is not there, :class:`ScenarioFailedError` when a correctness check fails.
    """
    params = dict(params or {})
    if backend not in BACKENDS:
        raise UsageError("--backend", f"unknown backend {backend!r}; choose torch or nsys")
    nsys = find_nsys() if backend == "nsys" else None
    spec, plan, values, _variants = _prepare(scenario, device, params)
    if backend == "nsys" and not plan.on_gpu and NSYS_NEEDS_GPU:
        raise UsageError("--backend nsys", "nsys traces CUDA and NVTX and needs a GPU; on the CPU use --backend torch")

    say = progress or (lambda _msg: None)
    if spec.multi_process:  # one process per rank (ddp): the ranks are started and recorded as a job
        return record_job(spec, plan, values, params, out=out, backend=backend, nsys=nsys, say=say)
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    wanted = Path(out) / run_name(spec.name, values["variant"], plan.mode, created.astimezone())
    stages: dict[str, float] = {}
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
    # (torch: tracer.record.* imports it only where a recording starts)
    from tracer.scenarios.runtime import sanitize_derived

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
    from torch.profiler import profile

    # (torch: tracer.record.* imports it only where a recording starts)
    from tracer.scenarios import run_scenario

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
    holder["prof"].export_chrome_trace(str(tmp / rundir.TRACE))
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
    # (torch: tracer.record.* imports it only where a recording starts)
    from tracer.scenarios import ScenarioError

    try:
        return run_scenario(name, device, params, on_phase=say, profiler=profiler)
    except ScenarioError as exc:
        raise UsageError("", str(exc)) from None
    except Exception as exc:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            raise ScenarioFailedError(
                f"scenario {name}", "ran out of GPU memory; make it smaller with --param (e.g. --param size=2000)"
            ) from None
        raise


# --------------------------------------------------------------------------------------------------------------
# Nsight Systems, in a child process


def _run_nsys(nsys: str, name: str, device: str, params: dict[str, str], tmp: Path, say: Callable[[str], None],
              stages: dict[str, float]) -> tuple[Any, dict[str, Any]]:
    # (torch: tracer.record.* imports it only where a recording starts)
    from tracer.scenarios import ScenarioResult

    result_file = tmp / "result.json"
    child = [sys.executable, "-m", "tracer.scenarios", "run", name, "--device", device, "--result", str(result_file),
             "--cuda-profiler-range", "--progress"]
    for k, v in params.items():
        child += ["--param", f"{k}={v}"]
    cmd = [nsys, *NSYS_PROFILE_ARGS, "-o", str(tmp / "report"), *child]
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
    details = {"profiler": "nsys", "nsys_version": nsys_version(nsys), "nsys_args": list(NSYS_PROFILE_ARGS)}
    return result, details


def _stream(cmd: list[str], env: dict[str, str], say: Callable[[str], None]) -> str:
    """Run ``cmd``, relaying the child's phase lines to ``say``; return the last output lines (for errors)."""
    lines: list[str] = []
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
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


def compact_run(run_dir: str | os.PathLike[str], *, max_report_bytes: int = 256 * 1024) -> dict[str, int]:
    """Shrink a finished run for shipping (the bundled examples): gzip ``report.sqlite``, and drop the
    ``.nsys-rep`` when it is larger than ``max_report_bytes`` (the SQLite export holds the same events).
    Updates meta.json's file list; returns it. Each file is replaced atomically."""
    path = Path(run_dir)
    meta = rundir.read_meta(path)
    sqlite = path / NSYS_SQLITE
    if sqlite.exists():
        gzip_in_place(sqlite)
    rep = path / NSYS_REPORT
    dropped = []
    if rep.exists() and rep.stat().st_size > max_report_bytes:
        rep.unlink()
        dropped.append(NSYS_REPORT)
    meta.files = rundir.file_sizes(path)
    if dropped:
        meta.dropped_files = sorted(set(meta.dropped_files) | set(dropped))
    rundir.write_meta(path, meta)
    return meta.files


def refresh_run(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Re-derive ``timeline.parquet`` and ``summary.json`` from the run's own trace with today's parsers
    (:func:`tracer.record.derive.derive`); return the new summary.

    The trace (or nsys export) is the record; the timeline and summary are derived data, and a parser fix
    should reach old runs too (the bundled examples are refreshed this way).
    """
    return derive(run_dir).summary


def plain_report(meta: dict[str, Any], summary: Mapping[str, Any], path: Any) -> str:
    """The run's report as plain text (``python -m tracer.record``'s); ``summary`` a
    :class:`~tracer.analysis.summary.Summary` or its JSON."""
    lines = [
        f"{meta['scenario']}  variant {meta['variant']}  {meta['mode']} ({', '.join(meta['devices'])})  "
        f"backend {meta['backend']}"
    ]
    if meta.get("gpu_names"):
        lines.append("GPUs: " + ", ".join(f"{k}: {v}" for k, v in meta["gpu_names"].items()))
    unprofiled = set(meta.get("unprofiled_times", []))
    samples = meta.get("wall_time_samples_s") or {}  # absent in runs recorded before repeats existed
    lines.append("wall time (ms):")
    for name, secs in meta["wall_times_s"].items():
        how = ["reference, not profiled"] if name in unprofiled else []
        if len(samples.get(name, ())) > 1:
            how.append(f"median of {len(samples[name])}")
        lines.append(f"  {name:32} {secs * 1e3:12.2f}{'   (' + '; '.join(how) + ')' if how else ''}")
    caveats = meta.get("caveats") or []
    lines += [f"caveat: {c}" for c in caveats]  # before any figure: what this machine cannot show
    if meta.get("derived"):
        lines.append("side notes, derived from the wall times (see the caveats):" if caveats else "derived:")
    for k, v in meta.get("derived", {}).items():
        lines.append(f"  {k:48} {v:10.3f}")
    typed = summary if isinstance(summary, Summary) else Summary.from_dict(summary)
    for d in typed.devices:
        hidden = "-" if d.copy_hidden_pct is None else f"{d.copy_hidden_pct:.1f}%"
        lines.append(
            f"GPU {device_label(d.key, typed.multi_rank)}: {d.kernels} kernels, {d.memcpys} copies; "
            f"compute {d.compute_ns / 1e6:.2f} ms, copy {d.copy_ns / 1e6:.2f} ms, overlap {d.overlap_ns / 1e6:.2f} ms "
            f"({hidden} of copy hidden)"
        )
    checks = meta.get("checks", {})
    lines.append(("checks passed: " if all(c["ok"] for c in checks.values()) else "CHECKS FAILED: ")
                 + "; ".join(f"{k} [{c['detail']}]" for k, c in checks.items()))
    lines += [f"note: {note}" for note in meta.get("notes", [])]  # what a figure means here, what was left out
    if meta.get("host_load"):
        lines.append(f"note: {describe_host_load(meta['host_load'])}")
    lines.append(f"run written to {path}")
    return "\n".join(lines)
