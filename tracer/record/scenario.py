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

This module is the recorder's front door, imported without torch (``tracer record --help`` and ``tracer record --
COMMAND`` import it): :func:`record` checks the backend, then imports the recording's own side,
:mod:`tracer.record.scenario_run`, which runs the scenarios (torch). Data flows one way: the recorder runs
``scenarios`` and reads what they report; scenarios know nothing of it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tracer.analysis.summary import Summary
from tracer.errors import UsageError
from tracer.files import rundir
from tracer.files.atomic import gzip_in_place
from tracer.files.rundir import NSYS_REPORT, NSYS_SQLITE, describe_host_load
from tracer.record.derive import derive
from tracer.record.nsys import find_nsys
from tracer.record.run import RecordedRun
from tracer.timeline import device_label

BACKENDS = ("torch", "nsys")


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
    say = progress or (lambda _msg: None)
    # (the recording's own side: the scenarios, so torch, seconds; imported here, where a recording starts)
    from tracer.record import scenario_run

    return scenario_run.record_scenario(scenario, device=device, out=out, backend=backend, params=params, say=say,
                                        nsys=nsys)


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
