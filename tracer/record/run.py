"""What a recording returns (:class:`RecordedRun`), how its run directory is named, and the error of a scenario
that ran but failed."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.errors import TracerError
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


def run_name(scenario: str, variant: str, mode: str, when: _dt.datetime) -> str:
    parts = [scenario] + ([variant] if variant and variant != "all" else []) + [mode, when.strftime("%Y%m%d-%H%M%S")]
    return "-".join(parts)
