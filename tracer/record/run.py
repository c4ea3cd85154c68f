"""What a recording returns (:class:`RecordedRun`), how its run directory is named (a scenario's, a command's
stem), and the error of a scenario that ran but failed."""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.errors import TracerError
from tracer.files.atomic import sweep_stale_temps
from tracer.files.rundir import RunMeta


class ScenarioFailedError(TracerError):
    """The scenario ran but did not compute what it should (a correctness check failed), or crashed."""


@dataclass
class RecordedRun:
    """A finished run directory and what was written into it."""

    path: Path
    run_meta: RunMeta
    summary: dict[str, Any]
    #: seconds spent in each stage: workload (the scenario, profiled), export, parse, write
    stages_s: dict[str, float] = field(default_factory=dict)

    @property
    def meta(self) -> dict[str, Any]:
        """meta.json as written."""
        return self.run_meta.to_dict()


def sweep_left_behind(out: str | os.PathLike[str]) -> list[Path]:
    """Before a recording into ``out``: remove the hidden temporary run folders that recordings killed there
    left (SIGKILL, the out-of-memory killer: nothing ran to remove them), saying so in one line on stderr;
    a recording still running keeps its own (:func:`tracer.files.atomic.sweep_stale_temps`)."""
    gone = sweep_stale_temps(out)
    if gone:
        names = ", ".join(p.name for p in gone[:3]) + (f" and {len(gone) - 3} more" if len(gone) > 3 else "")
        print(f"tracer: note: removed {len(gone)} temporary folder(s) in {out} left by a recording that was killed: "
              f"{names}", file=sys.stderr)
    return gone


def run_name(scenario: str, variant: str, mode: str, when: _dt.datetime) -> str:
    parts = [scenario] + ([variant] if variant and variant != "all" else []) + [mode, when.strftime("%Y%m%d-%H%M%S")]
    return "-".join(parts)


def command_stem(argv: Sequence[str]) -> str:
    """A run name's stem for a command: the script (``train`` for ``python train.py``, ``torchrun ... train.py``),
    the module (``python -m pkg.mod`` -> ``pkg.mod``), else the program's name."""
    args = list(argv)
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            return _clean(args[i + 1])
        if a.endswith(".py"):
            return _clean(Path(a).stem)
    return _clean(Path(args[0]).name) if args else "command"


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:60] or "command"
