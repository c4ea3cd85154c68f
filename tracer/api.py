"""Recording from inside a program: ``with tracer.profile() as run`` and ``tracer.handler()``.

For people who would rather not go through ``tracer record -- COMMAND``: a notebook, a script that profiles one
part of itself, code that already has a ``torch.profiler.profile(...)``. Both write the same run directory as the
CLI (trace.json.gz, timeline.parquet, meta.json, summary.json; tracer/rundir.py), atomically.

    import tracer
    with tracer.profile(out="runs") as run:      # torch.profiler over the block, every thread
        train(steps=20)                           # call run.step() per step for ProfilerStep#N ranges
    print(run.path)

    prof = torch.profiler.profile(..., on_trace_ready=tracer.handler(out="runs"))   # each trace: a run
"""

from __future__ import annotations

import datetime as _dt
import gzip
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
    from tracer.record_command import command_stem

    argv = [a for a in sys.argv if a]
    main = argv[0] if argv else ""
    if not main or main == "-c" or main.endswith(("ipykernel_launcher.py", "ipykernel/__main__.py")):
        return "python"  # a notebook or `python -c`: no script to name the run after
    return command_stem(argv)


def write_run(trace: Path, *, out: str | os.PathLike[str] = "runs", name: str | None = None,
              profiler: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """Make a run directory under ``out`` from one torch.profiler Chrome trace (plain or gzipped JSON, moved in);
    return its path and summary. Named ``name``, else ``<script>-<YYYYmmdd-HHMMSS>``; ``-2``, ``-3`` … when taken."""
    from tracer import rundir
    from tracer.io import temp_dir_beside, writing
    from tracer.record import _environment
    from tracer.record_command import finish_run

    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    wanted = Path(out) / (name or f"{_stem()}-{created.astimezone():%Y%m%d-%H%M%S}")
    tmp = temp_dir_beside(wanted)
    try:
        with writing(wanted):
            dest = tmp / rundir.TRACE
            with open(trace, "rb") as head:
                gzipped = head.read(2) == b"\x1f\x8b"
            if gzipped:
                shutil.move(str(trace), dest)
            else:
                with open(trace, "rb") as src, gzip.open(dest, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst)
                trace.unlink()
            env = _environment()
            rank = os.environ.get("RANK", "")
            meta = rundir.RunMeta(
                mode="api",
                torch_version=env["torch_version"],
                cuda_version=env["cuda_version"],
                backend="torch",
                backend_details={"profiler": "torch.profiler", "via": "tracer.api"},
                created=created.isoformat().replace("+00:00", "Z"),
                environment=env,
                command=list(sys.argv),
                cwd=os.getcwd(),
                profiler=dict(profiler or {}),
                processes=[{"pid": os.getpid(), "rank": int(rank) if rank.isdigit() else None}],
            )
            final, derived = finish_run(tmp, wanted, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, derived.summary


@contextmanager
def profile(out: str | os.PathLike[str] = "runs", name: str | None = None, steps: str | None = None) -> Iterator[Run]:
    """Record the block with torch.profiler (CPU, plus CUDA where present; every thread) and write a run
    directory under ``out`` when it ends — also when it raises (the exception goes on). ``steps``:
    ``"WAIT,WARMUP,ACTIVE"`` over :meth:`Run.step` calls (the last active cycle is kept)."""
    import tempfile

    from torch.profiler import ProfilerAction, schedule
    from torch.profiler import profile as torch_profile

    from tracer.capture import parse_steps
    from tracer.record import quiet_kineto, torch_profiler_settings

    run = Run(Path(out), name)
    settings = torch_profiler_settings(all_threads=True)
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
    cycle of a schedule) becomes a run directory under ``out``. The runs written are in ``.runs``."""
    import tempfile

    written: list[Path] = []

    def on_trace_ready(prof: Any) -> None:
        fd, raw = tempfile.mkstemp(prefix="tracer-handler-", suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(raw)
            cycle = f"{name}-{len(written) + 1}" if name and written else name
            path, _ = write_run(Path(raw), out=out, name=cycle, profiler={"via": "handler"})
            written.append(path)
        finally:
            Path(raw).unlink(missing_ok=True)

    on_trace_ready.runs = written  # type: ignore[attr-defined]  # (the handler carries the runs it wrote)
    return on_trace_ready
