"""Nsight Systems as tracer runs it: the ``nsys profile`` command line, finding ``nsys``, its SQLite export and
its version."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from tracer.errors import ToolMissingError

#: The nsys command line (``-o`` and the program are added): CUDA + NVTX, no CPU sampling or context switches,
#: capture only between cudaProfilerStart/Stop, which the scenario's profiled window calls.
NSYS_PROFILE_ARGS = (
    "profile",
    "-t",
    "cuda,nvtx",
    "--sample=none",
    "--cpuctxsw=none",
    "--capture-range=cudaProfilerApi",
    "--capture-range-end=stop",
    "--force-overwrite=true",
)
#: ``nsys profile`` for a command (``tracer record -- COMMAND``) and a job's launcher: CUDA + NVTX of every process
#: the command starts, no CPU sampling or context switches; the whole run (a command has no
#: cudaProfilerStart/Stop to bound it, unlike the scenarios).
NSYS_COMMAND_ARGS = ("profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true")


#: Nsight Systems' Python backtrace of every CUDA API call (nsys 2023.2 and later), what ``tracer record --stacks
#: --backend nsys`` adds where the installed nsys has it: the frames tracer's source lines read (parsers/nsys_stacks).
#: nsys takes one only where the call's own backtrace is taken, which needs CPU sampling on (its help says so;
#: without either, 2025.3 recorded none and said nothing).
PYTHON_BACKTRACE_ARGS = ("--python-backtrace=cuda", "--cudabacktrace=all", "--sample=process-tree")


@lru_cache(maxsize=16)
def _has_option(nsys: str, command: str, option: str) -> bool:
    """Whether ``nsys COMMAND --help`` names ``option`` (what this nsys can do; False where it cannot run)."""
    try:
        proc = subprocess.run([nsys, command, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in proc.stdout + proc.stderr


def has_python_backtrace(nsys: str) -> bool:
    """Whether ``nsys profile`` has ``--python-backtrace``."""
    return _has_option(nsys, "profile", "--python-backtrace")


def with_stacks(args: Sequence[str], nsys: str, stacks: bool) -> list[str]:
    """``nsys profile`` options ``args`` with Python stacks recorded where ``stacks`` asks for them (CPU sampling
    then replaces ``--sample=none``); where the installed nsys has no Python backtraces, ``args`` as they are, and
    one line on stderr says the run will have no source lines."""
    if not stacks:
        return list(args)
    if has_python_backtrace(nsys):
        return [a for a in args if not a.startswith("--sample=")] + list(PYTHON_BACKTRACE_ARGS)
    print(f"tracer: {nsys_version(nsys) or 'this nsys'} has no --python-backtrace: recording without Python "
          "stacks (no source lines; a newer Nsight Systems, or --backend torch --stacks, has them)", file=sys.stderr)
    return list(args)


def find_nsys() -> str:
    """The ``nsys`` on PATH; :class:`ToolMissingError` (one line saying what to do) when there is none."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise ToolMissingError(
            "--backend nsys",
            "nsys (Nsight Systems) is not on PATH; install it or add its directory to PATH, or use --backend torch",
        )
    return nsys


def export_nsys_sqlite(nsys: str, report: Path, sqlite: Path) -> str | None:
    """``nsys export --type sqlite`` of ``report`` into ``sqlite`` (NVTX payloads as JSON where this nsys can: the
    Python backtraces); None when it worked, else why not (the tool's last line), for the caller's own error."""
    # (without --include-json, nsys 2024+ leaves NVTX payloads such as the Python backtraces out of the export)
    payloads = ["--include-json", "true"] if _has_option(nsys, "export", "--include-json") else []
    proc = subprocess.run(
        [nsys, "export", "--type", "sqlite", *payloads, "--force-overwrite", "true", "-o", str(sqlite), str(report)],
        capture_output=True, text=True,
    )
    if proc.returncode != 0 or not sqlite.exists():
        last = (proc.stderr or proc.stdout).strip().splitlines()
        return f"nsys export failed: {last[-1] if last else proc.returncode}"
    return None


def nsys_version(nsys: str) -> str:
    """What ``nsys --version`` says, for meta.json."""
    return subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip()
