"""Run a user's command with tracer's start-up hook and collect what its Python processes recorded.

The parent's half of ``tracer record -- COMMAND`` (the child's half is tracer/record/capture.py): it puts
``tracer/record/_bootstrap`` first on the child's PYTHONPATH, points :data:`tracer.record.capture.ENV_DIR` at a fresh
directory, runs the command as it would run in a shell (same terminal, same environment otherwise), and reads
back the traces and the per-process status files. Ctrl-C goes to the child, as in a shell (both are in the
terminal's process group); tracer waits for it to end and keeps what was captured. SIGTERM sent to tracer is
passed on to the child.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tracer.errors import TracerError, UsageError
from tracer.files import rundir
from tracer.files.atomic import gzip_in_place, no_room, publish_dir, temp_dir_beside, writing
from tracer.job.oscalls import ends_with_parent
from tracer.record import capture
from tracer.record.derive import Derived, derive
from tracer.record.nsys import NSYS_COMMAND_ARGS, export_nsys_sqlite, find_nsys, nsys_version, with_stacks
from tracer.record.profiler import environment, stacks_on
from tracer.record.run import command_stem, sweep_left_behind

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "_bootstrap"


class CommandNotFoundError(TracerError):
    """The command to record does not exist or cannot be run (exit 127, as a shell says)."""

    exit_code = 127


@dataclass
class CommandResult:
    """What one recorded command left: its exit code, wall time and every process's traces and status."""

    argv: list[str]
    cwd: str
    exit_code: int
    wall_s: float
    interrupted: bool
    traces: list[Path] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)


def resolve(argv: Sequence[str]) -> str:
    """The program ``argv[0]`` names, as the shell would find it; CommandNotFoundError if none."""
    if not argv:
        raise UsageError("", "no command after '--' (e.g. tracer record -- python train.py)")
    prog = argv[0]
    found = shutil.which(prog)
    if found is None:
        what = "is not an executable file" if os.path.sep in prog and os.path.exists(prog) else "command not found"
        raise CommandNotFoundError(prog, what)
    return found


def child_environment(capture_dir: Path, *, steps: str | None = None, delay_s: float | None = None,
                      duration_s: float | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the recorded command: the caller's, plus the start-up hook and its settings."""
    env = dict(os.environ if base is None else base)
    # Only the hook's own folder goes first. Where tracer lives is passed on beside it, and the hook adds it at
    # the END of sys.path only if the child cannot import tracer otherwise: put first, it would shadow the user's
    # own packages (a torch source tree on PYTHONPATH) with whatever sits beside tracer (site-packages)
    parts = [str(BOOTSTRAP_DIR)]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env[capture.ENV_HOME] = str(BOOTSTRAP_DIR.parents[1])
    env[capture.ENV_DIR] = str(capture_dir)
    for key, value in ((capture.ENV_STEPS, steps), (capture.ENV_DELAY, delay_s), (capture.ENV_DURATION, duration_s)):
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def _child_started() -> None:
    """Nothing: a test's hook, to send a signal at the moment the child is there and Ctrl-C not yet ignored
    (tests/test_faults.py)."""


def spawn(cmd: list[str], env: dict[str, str] | None) -> tuple[subprocess.Popen[bytes], Any, bool]:
    """Start ``cmd`` as a shell would run it in the foreground, Ctrl-C left to it: return the child, the SIGINT
    handler tracer had (now one that only notes a Ctrl-C, :data:`_ctrl_c_seen`; the caller puts it back) and
    whether a Ctrl-C came while the child was being started (it is sent on to the child).

    Ctrl-C reaches every process of the terminal's group at once. Around the fork it was lost: the child not yet
    there, or still running tracer's own handler until its exec, and tracer dropping the one it had pending when
    it set SIG_IGN (the command then ran on to its end and its run was published). Here SIGINT is blocked from
    before the fork until tracer's noting handler is in force: one that came meanwhile is forwarded; the child,
    before its exec, takes the disposition tracer was started with and unblocks it (one that came after the fork
    ends it then, as it would end a program just started). On Linux the child also ends with tracer
    (:func:`tracer.job.oscalls.ends_with_parent`)."""
    hold = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    own = signal.SIG_IGN if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else signal.SIG_DFL
    with_parent = ends_with_parent()

    def child_start() -> None:  # (in the child, between fork and exec)
        if with_parent is not None:
            with_parent()
        if hold:
            signal.signal(signal.SIGINT, own)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    # The terminal sends Ctrl-C to the child too: from now on tracer only notes it (it then says "interrupted"
    # even where the child died of it otherwise, SIGABRT from torch's C++), and waits for the child. (The note
    # also catches one that another thread of tracer's took, where the main thread's mask does not reach.)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN if own is signal.SIG_IGN else _note_ctrl_c)
    seen = len(_ctrl_c_seen)
    if hold:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        child = subprocess.Popen(cmd, env=env, preexec_fn=child_start)
        _child_started()
        pending = hold and signal.SIGINT in signal.sigpending()
    except BaseException:
        signal.signal(signal.SIGINT, previous)
        raise
    finally:
        if hold:  # (one pending now goes to _note_ctrl_c, or to the handler put back where Popen failed)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if pending or len(_ctrl_c_seen) > seen:
        child.send_signal(signal.SIGINT)
        return child, previous, True
    return child, previous, False


#: Ctrl-Cs tracer saw while its command ran (:func:`_note_ctrl_c`)
_ctrl_c_seen: list[float] = []


def _note_ctrl_c(_signum: int, _frame: Any) -> None:
    _ctrl_c_seen.append(time.monotonic())


def run_command(argv: Sequence[str], capture_dir: Path, *, steps: str | None = None, delay_s: float | None = None,
                duration_s: float | None = None) -> CommandResult:
    """Run ``argv`` with the start-up hook writing into ``capture_dir`` (created; should be empty) and collect
    the result. The command's exit code is returned, never raised: a failing script still made a trace."""
    program = resolve(argv)
    if steps is not None:
        try:
            capture.parse_steps(steps)
        except ValueError as exc:
            raise TracerError("--steps", str(exc)) from None
    capture_dir.mkdir(parents=True, exist_ok=True)
    env = child_environment(capture_dir, steps=steps, delay_s=delay_s, duration_s=duration_s)
    t0 = time.perf_counter()
    seen = len(_ctrl_c_seen)
    try:
        child, previous_int, interrupted = spawn([program, *argv[1:]], env)
    except OSError as exc:
        raise CommandNotFoundError(argv[0], exc.strerror or str(exc)) from None

    def forward(signum: int, _frame: Any) -> None:
        nonlocal interrupted
        interrupted = True
        child.send_signal(signum)

    previous_term = signal.signal(signal.SIGTERM, forward)
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
    wall = time.perf_counter() - t0
    if code in (-signal.SIGINT, 128 + signal.SIGINT, 130) or len(_ctrl_c_seen) > seen:
        interrupted = True
    exit_code = 128 - code if code < 0 else code  # a child killed by signal N: 128 + N, as a shell says
    processes = [orjson.loads(p.read_bytes()) for p in sorted(capture_dir.glob("*.capture.json"))]
    for p in processes:
        # Ctrl-C reached a process; a SIGTERM alone is a launcher tearing a job down (a rank died), not the user
        if p.get("ended") == "interrupted":
            interrupted = True
    traces = sorted(capture_dir.glob("*.json.gz"))
    return CommandResult(list(argv), os.getcwd(), exit_code, wall, interrupted, traces, processes)


# --------------------------------------------------------------------------------------------------------------
# the run


@dataclass
class RecordedCommand:
    """A finished ``tracer record -- COMMAND``: where its run is and what the command returned."""

    path: Path
    meta: Any  # tracer.files.rundir.RunMeta
    summary: dict[str, Any]
    exit_code: int



def _run_under_nsys(nsys: str, argv: Sequence[str], tmp: Path, delay_s: float | None,
                    duration_s: float | None) -> tuple[CommandResult, dict[str, Any]]:
    """``nsys profile ... COMMAND``, then ``nsys export --type sqlite``; nsys returns the program's exit code."""
    window = [
        *(["--delay", f"{delay_s:g}"] if delay_s else []),
        *(["--duration", f"{duration_s:g}"] if duration_s else []),
    ]
    args = with_stacks([*NSYS_COMMAND_ARGS, *window], nsys, stacks_on())
    cmd = [nsys, *args, "-o", str(tmp / "report"), *argv]
    t0 = time.perf_counter()
    child, previous_int, _ = spawn(cmd, None)
    previous_term = signal.signal(signal.SIGTERM, lambda signum, _frame: child.send_signal(signum))
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
    wall = time.perf_counter() - t0
    exit_code = 128 - code if code < 0 else code
    report = tmp / rundir.NSYS_REPORT
    sqlite = tmp / rundir.NSYS_SQLITE
    traces: list[Path] = []
    if report.exists():
        failed = export_nsys_sqlite(nsys, report, sqlite)
        if failed:
            raise TracerError(report.name, failed)
        if sqlite.stat().st_size > rundir.SQLITE_GZIP_BYTES:
            sqlite = gzip_in_place(sqlite)
        traces = [sqlite]
    details = {"profiler": "nsys", "nsys_version": nsys_version(nsys), "nsys_args": args}
    return CommandResult(list(argv), os.getcwd(), exit_code, wall, exit_code == 130, traces, []), details


def record_command(
    argv: Sequence[str],
    *,
    out: str | os.PathLike[str] = "runs",
    name: str | None = None,
    steps: str | None = None,
    delay_s: float | None = None,
    duration_s: float | None = None,
    backend: str = "torch",
) -> RecordedCommand:
    """Run ``argv`` with every Python process it starts recorded by torch.profiler, and write one run directory
    under ``out`` (``<script>-<YYYYmmdd-HHMMSS>``, or ``name``): ``trace.json.gz`` for one process, ``traces/``
    with one trace per rank for a job. The run is written whatever the command's exit code (it is in meta.json
    and returned); a command that recorded nothing writes nothing and is an error carrying its exit code."""
    import datetime as _dt

    resolve(argv)  # a missing command: exit 127 before anything is written
    nsys = None
    if backend == "nsys":
        nsys = find_nsys()
        if steps is not None:
            raise UsageError("--steps", "is torch.profiler's schedule; with --backend nsys use --delay/--duration")
    elif backend != "torch":
        raise UsageError("--backend", f"unknown backend {backend!r}; choose torch or nsys")
    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    wanted = Path(out) / (name or f"{command_stem(argv)}-{created.astimezone():%Y%m%d-%H%M%S}")
    sweep_left_behind(wanted.parent)
    tmp = temp_dir_beside(wanted)
    try:
        with writing(wanted):
            details: dict[str, Any] = {"profiler": "torch.profiler",
                                       "bootstrap": "sitecustomize (tracer/record/_bootstrap)"}
            if nsys is not None:
                result, details = _run_under_nsys(nsys, argv, tmp, delay_s, duration_s)
            else:
                result = run_command(argv, tmp / ".capture", steps=steps, delay_s=delay_s, duration_s=duration_s)
            check_written(result.processes, tmp, recorded=bool(result.traces))
            if not result.traces:
                if result.interrupted:  # Ctrl-C before anything was saved: "interrupted", not an error
                    raise KeyboardInterrupt
                code = result.exit_code or 1
                raise _NothingRecorded(" ".join(argv), f"exited with {result.exit_code} and recorded nothing (no "
                                       "Python process of it imported torch, or it ended before)", code)
            ranked = [p for p in result.processes if p.get("rank") is not None]
            if nsys is not None:
                pass  # report.nsys-rep and report.sqlite are where a run keeps them already
            elif len(result.traces) == 1 and not ranked:
                os.replace(result.traces[0], tmp / rundir.TRACE)
            else:
                (tmp / rundir.TRACES_DIR).mkdir()
                for t in result.traces:
                    os.replace(t, tmp / rundir.TRACES_DIR / t.name)
            world = max((p.get("world_size") or 0 for p in result.processes), default=0)
            seen = {p["rank"] for p in ranked}
            env = environment()
            meta = rundir.RunMeta(
                scenario="",
                variant="",
                mode="command",
                torch_version=env["torch_version"],
                cuda_version=env["cuda_version"],
                wall_times_s={"command": round(result.wall_s, 6)},
                backend=backend,
                backend_details=details,
                created=created.isoformat().replace("+00:00", "Z"),
                environment=env,
                command=list(argv),
                cwd=result.cwd,
                exit_code=result.exit_code,
                interrupted=result.interrupted,
                processes=result.processes,
                profiler={"steps": steps, "delay_s": delay_s, "duration_s": duration_s},
                missing_ranks=sorted(set(range(world)) - seen) if ranked else [],
                notes=[n for p in result.processes for n in p.get("notes", [])],
            )
            shutil.rmtree(tmp / ".capture", ignore_errors=True)
            final, derived = finish_run(tmp, wanted, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return RecordedCommand(final, derived.meta, derived.summary, result.exit_code)


def finish_run(tmp: Path, wanted: Path, meta: Any) -> tuple[Path, Derived]:
    """Complete a run written in ``tmp`` (its trace in place): meta.json, then the timeline and summary
    (:func:`tracer.record.derive.derive`), then the rename to ``wanted`` (or ``wanted-2`` …); return the final path and
    what derive made. The caller removes ``tmp`` if this raises."""
    rundir.write_meta(tmp, meta)
    derived = derive(tmp)
    return publish_dir(tmp, wanted), derived


def check_written(processes: Sequence[dict[str, Any]], where: Path, *, recorded: bool) -> None:
    """Raise the write fault that kept a process from saving its trace (its status says "No space left on
    device", "File too large"), or ENOSPC where nothing was ``recorded`` and ``where`` has no room left (a
    process that could not even write its status): a run missing a trace for want of room is not written, and
    the fault is the one line said, not "recorded nothing"."""
    for p in processes:
        if p.get("write_error"):
            reason = f"{p['write_error']} writing the trace of pid {p.get('pid')}"
            raise OSError(p.get("write_errno") or errno.EIO, reason)
    if not recorded:
        full = no_room(where)
        if full is not None:
            raise full


class _NothingRecorded(TracerError):
    def __init__(self, subject: str, problem: str, code: int) -> None:
        super().__init__(subject, problem)
        self.exit_code = code
