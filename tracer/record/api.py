"""Recording from inside a program: ``with tracer.profile() as run`` and ``tracer.handler()``.

For people who would rather not go through ``tracer record -- COMMAND``: a notebook, a script that profiles one
part of itself, code that already has a ``torch.profiler.profile(...)``. Both write the same run directory as the
CLI (trace.json.gz, timeline.parquet, meta.json, summary.json; tracer/files/rundir.py), atomically.

    import tracer
    with tracer.profile(out="runs") as run:      # torch.profiler over the block, every thread
        train(steps=20)                           # call run.step() per step for ProfilerStep#N ranges
    print(run.path)

    prof = torch.profiler.profile(..., on_trace_ready=tracer.handler(out="runs"))   # each trace: a run
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.files import rundir
from tracer.files.atomic import gzip_copy, gzip_name, temp_dir_beside, writing
from tracer.record import gather as rank_gather
from tracer.record.capture import parse_steps
from tracer.record.profiler import environment, quiet_kineto, torch_profiler_settings
from tracer.record.run import command_stem


@dataclass
class Run:
    """A recording in progress, then done: ``path`` is the run directory once the block has ended."""

    out: Path
    name: str | None
    path: Path | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    _prof: Any = None

    def step(self) -> None:
        """Mark the end of one step (torch.profiler's ``step()``: a ``ProfilerStep#N`` range per step)."""
        if self._prof is not None:
            self._prof.step()


def _stem() -> str:
    argv = [a for a in sys.argv if a]
    main = argv[0] if argv else ""
    if not main or main == "-c" or main.endswith(("ipykernel_launcher.py", "ipykernel/__main__.py")):
        return "python"  # a notebook or `python -c`: no script to name the run after
    return command_stem(argv)


def _gzip_into(trace: Path, dest: Path, name: str | None = None) -> None:
    """Move a Chrome trace to ``dest`` gzipped (moved as it is when it is gzipped already); ``name``: the name
    its gzip header holds (default: ``dest``'s less ``.gz``)."""
    with open(trace, "rb") as head:
        gzipped = head.read(2) == b"\x1f\x8b"
    if gzipped:
        shutil.move(str(trace), dest)
    else:
        gzip_copy(trace, dest, name=name or gzip_name(dest))
        trace.unlink()


def _run_name(name: str | None, created: _dt.datetime) -> str:
    return name or f"{_stem()}-{created.astimezone():%Y%m%d-%H%M%S}"


def _publish(wanted: Path, fill: Callable[[Path], list[dict[str, Any]]], created: _dt.datetime,
             profiler: dict[str, Any] | None) -> tuple[Path, dict[str, Any]]:
    """Write a run under ``wanted`` (or ``wanted-2`` ...) atomically: ``fill(tmp)`` puts the trace(s) in place and
    returns the processes recorded; then meta.json, timeline and summary."""
    # (it derives the run's timeline and summary: pandas, imported once a recording ends, not with tracer.profile)
    from tracer.record.command import finish_run

    tmp = temp_dir_beside(wanted)
    try:
        with writing(wanted):
            processes = fill(tmp)
            env = environment()
            meta = rundir.RunMeta(
                mode="api",
                torch_version=env["torch_version"],
                cuda_version=env["cuda_version"],
                backend="torch",
                backend_details={"profiler": "torch.profiler", "via": "tracer.record.api"},
                created=created.isoformat().replace("+00:00", "Z"),
                environment=env,
                command=list(sys.argv),
                cwd=os.getcwd(),
                profiler=dict(profiler or {}),
                processes=processes,
            )
            final, derived = finish_run(tmp, wanted, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, derived.summary


def write_run(trace: Path, *, out: str | os.PathLike[str] = "runs", name: str | None = None,
              profiler: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """Make a run directory under ``out`` from one torch.profiler Chrome trace (plain or gzipped JSON, moved in);
    return its path and summary. Named ``name``, else ``<script>-<YYYYmmdd-HHMMSS>``; ``-2``, ``-3`` … when taken."""
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)

    def fill(tmp: Path) -> list[dict[str, Any]]:
        _gzip_into(trace, tmp / rundir.TRACE)
        rank = os.environ.get("RANK", "")
        return [{"pid": os.getpid(), "rank": int(rank) if rank.isdigit() else None}]

    return _publish(Path(out) / _run_name(name, created), fill, created, profiler)


def write_job_run(staging: Path, *, out: str | os.PathLike[str], name: str,
                  profiler: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """Make one run directory (``traces/``: a trace per rank) from a complete staging folder of
    :mod:`tracer.record.gather`, then remove the folder."""
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    taken = rank_gather.take(staging)

    def fill(tmp: Path) -> list[dict[str, Any]]:
        (tmp / rundir.TRACES_DIR).mkdir()
        for t in rank_gather.staged_traces(taken):
            os.replace(t, tmp / rundir.TRACES_DIR / t.name)
        return [dict(p) for p in rank_gather.staged_processes(taken)]

    try:
        result = _publish(Path(out) / name, fill, created, profiler)
    except BaseException:
        try:  # what is left of it stays where a rank that never arrived leaves its folder (tracer summary --job)
            os.rename(taken, staging)
        except OSError:
            pass
        raise
    shutil.rmtree(taken, ignore_errors=True)
    return result


@contextmanager
def profile(out: str | os.PathLike[str] = "runs", name: str | None = None, steps: str | None = None,
            stacks: bool | None = None) -> Iterator[Run]:
    """Record the block with torch.profiler (CPU, plus CUDA where present; every thread) and write a run
    directory under ``out`` when it ends — also when it raises (the exception goes on). ``steps``:
    ``"WAIT,WARMUP,ACTIVE"`` over :meth:`Run.step` calls (the last active cycle is kept). ``stacks``: record
    Python stacks (``with_stack=True``, for ``tracer lines``; default: ``$TRACER_STACKS``, else off)."""
    import tempfile

    from torch.profiler import ProfilerAction, schedule
    from torch.profiler import profile as torch_profile

    run = Run(Path(out), name)
    settings = torch_profiler_settings(all_threads=True, stacks=stacks)
    traces: list[Path] = []
    folder = Path(tempfile.mkdtemp(prefix="tracer-api-"))

    def keep(prof: Any) -> None:
        path = folder / f"cycle{len(traces)}.json"
        prof.export_chrome_trace(str(path))
        traces.append(path)

    if steps:
        wait, warmup, active, repeat = parse_steps(steps)
        settings["schedule"] = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat or 1)
    else:
        settings["schedule"] = lambda _step: ProfilerAction.RECORD  # every step, with ProfilerStep#N ranges
    settings["on_trace_ready"] = keep
    prof = torch_profile(**settings)
    run._prof = prof
    with quiet_kineto():
        prof.start()
    try:
        yield run
    finally:
        run._prof = None
        try:
            with quiet_kineto():
                prof.stop()
            if traces:
                run.path, run.summary = write_run(traces[-1], out=out, name=name, profiler={"steps": steps})
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def handler(out: str | os.PathLike[str] = "runs", name: str | None = None) -> Callable[[Any], None]:
    """An ``on_trace_ready`` for a ``torch.profiler.profile`` you already have: every trace it is handed (each
    cycle of a schedule) becomes a run directory under ``out``. The runs written are in ``.runs``.

    Under torchrun (``RANK`` and ``WORLD_SIZE`` > 1 in the environment) the ranks' traces of one cycle become ONE
    run, ``traces/`` holding a trace per rank, written by whichever rank finishes the set
    (:mod:`tracer.record.gather`); that rank's ``.runs`` lists it."""
    import tempfile

    written: list[Path] = []
    cycles = [0]
    info = rank_gather.rank_info()

    def on_trace_ready(prof: Any) -> None:
        cycles[0] += 1
        fd, raw = tempfile.mkstemp(prefix="tracer-handler-", suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(raw)
            cycle = f"{name}-{cycles[0]}" if name and cycles[0] > 1 else name
            if info is None:
                path, _ = write_run(Path(raw), out=out, name=cycle, profiler={"via": "handler"})
                written.append(path)
                return
            created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
            # gzipped straight into the staging folder, under a name no reader of it counts as a trace
            gz = rank_gather.staging_dir(Path(out), info, cycles[0]) / f".rank{info.rank}.json.gz.tmp"
            _gzip_into(Path(raw), gz, f"rank{info.rank}-pid{os.getpid()}.json")  # (as rank_gather names it)
            arrival = rank_gather.arrive(gz, Path(out), info, cycles[0], _run_name(cycle, created))
            if arrival.complete:
                path, _ = write_job_run(arrival.staging, out=out, name=arrival.name,
                                        profiler={"via": "handler", "world_size": info.world_size})
                written.append(path)
        finally:
            Path(raw).unlink(missing_ok=True)

    on_trace_ready.runs = written  # type: ignore[attr-defined]  # (the handler carries the runs it wrote)
    return on_trace_ready
