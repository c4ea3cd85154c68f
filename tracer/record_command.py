"""Run a user's command with tracer's start-up hook and collect what its Python processes recorded.

The parent's half of ``tracer record -- COMMAND`` (the child's half is tracer/capture.py): it puts
``tracer/_bootstrap`` first on the child's PYTHONPATH, points :data:`tracer.capture.ENV_DIR` at a fresh
directory, runs the command as it would run in a shell (same terminal, same environment otherwise), and reads
back the traces and the per-process status files. Ctrl-C goes to the child, as in a shell (both are in the
terminal's process group); tracer waits for it to end and keeps what was captured. SIGTERM sent to tracer is
passed on to the child.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tracer import capture
from tracer.errors import TracerError

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
        raise CommandNotFoundError("", "no command after '--' (e.g. tracer record -- python train.py)")
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
    # the hook's directory first; tracer's own location next, for a child Python that does not have tracer
    # installed the way this one does (a source checkout run with PYTHONPATH); the user's path after both
    parts = [str(BOOTSTRAP_DIR), str(BOOTSTRAP_DIR.parents[1])]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env[capture.ENV_DIR] = str(capture_dir)
    for key, value in ((capture.ENV_STEPS, steps), (capture.ENV_DELAY, delay_s), (capture.ENV_DURATION, duration_s)):
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


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
    interrupted = False
    try:
        child = subprocess.Popen([program, *argv[1:]], env=env)
    except OSError as exc:
        raise CommandNotFoundError(argv[0], exc.strerror or str(exc)) from None
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal sends Ctrl-C to the child too

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
    if code in (-signal.SIGINT, 128 + signal.SIGINT, 130):
        interrupted = True
    exit_code = 128 - code if code < 0 else code  # a child killed by signal N: 128 + N, as a shell says
    processes = [orjson.loads(p.read_bytes()) for p in sorted(capture_dir.glob("*.capture.json"))]
    for p in processes:
        if p.get("ended") in ("interrupted", "SIGTERM"):
            interrupted = True
    traces = sorted(capture_dir.glob("*.json.gz"))
    return CommandResult(list(argv), os.getcwd(), exit_code, wall, interrupted, traces, processes)
