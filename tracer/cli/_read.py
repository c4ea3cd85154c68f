"""How `tracer explain` and `tracer lines` read what they are given: one trace or run directory, or a job's ranks
(with the clock fix). Its own module: the clock fix imports pandas, which the commands that start a job's scan
workers (``tracer summary --job``, through :mod:`tracer.cli._job`) must not import first."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from tracer.cli._job import job_progress, say_fixes, say_job_cached, say_skipped
from tracer.cli._report import say_cached, say_skipped_file
from tracer.errors import TracerError
from tracer.files.discover import is_run_dir, job_label, job_traces
from tracer.job.clocks import fix_clocks
from tracer.parsers import load_trace

#: A large job's window is read with the rows within this long of it (at least: the window's own width when it is
#: wider): the work its first intervals waited for and the work after it that ends its last idle gaps, so that
#: the path and the findings at its edges are those of the job read whole.
WINDOW_MARGIN_NS = 50_000_000


def _traces(paths: list[Path], given: dict[str, Any]) -> list[Path]:
    """What ``paths`` stand for: one trace or run directory, or a job's rank traces."""
    found = job_traces(paths, on_skip=say_skipped_file) if len(paths) > 1 or paths[0].is_dir() else list(paths)
    if len(paths) == 1 and is_run_dir(paths[0]) and not (given and len(found) > 1):
        found = list(paths)  # (a run directory, of one trace or of a job: it holds its timeline already)
    return found


def read_large_job_window(paths: list[Path], *, window: str | None, no_cache: bool, clock_fix: bool,
                          job: dict[str, Any]) -> tuple[Path, Any, int] | None:
    """For a job too large to read whole (its traces hold more than :data:`tracer.job.store.LARGE_JOB_BYTES`): the
    rows of its stored dataset that bear on ``window`` (``--window``; the job is parsed and stored first where it
    is not), as one timeline, with the path that names the job and the job's first interval's start (where the
    window counts from); :class:`TracerError` where no window is given (or ``--clock-fix``, which needs the whole
    job). None where the job is read whole as :func:`read_timeline` reads it: one trace, a run directory, a job
    small enough, ``--no-cache``, ``--skip-bad-ranks``, a folder where the dataset cannot be written."""
    given = {option: value for option, value in job.items() if value not in (None, False)}
    found = _traces(paths, given)
    if len(found) < 2 or no_cache or given.get("skip_bad_ranks"):
        return None
    from tracer.job import store as jobstore  # (the job's front door: no pandas)
    from tracer.job.load import read_job_window, store_job

    total = jobstore.total_bytes([[f] for f in found])
    if total <= jobstore.LARGE_JOB_BYTES:
        return None
    label = job_label(found)
    if window is None or clock_fix:
        raise TracerError(str(label), f"a job of {total / 1e9:,.1f} GB of traces is explained a window at a time "
                          f"(it would not fit in memory whole): give --window START:END (ms from its first "
                          "interval)" + (", without --clock-fix" if clock_fix else ""))
    from tracer.explain.explanation import parse_window

    lo, hi = parse_window(window, 0)
    stored = store_job(found, scheduler=given.get("scheduler"), ranks=given.get("ranks"),
                       on_rank=job_progress(found, Console(stderr=True)), on_cache_write=say_job_cached)
    if stored is None:
        return None
    margin = max(WINDOW_MARGIN_NS, hi - lo if lo is not None and hi is not None else 0)
    timeline, origin = read_job_window(found, stored, (lo, hi), margin)
    return label, timeline, origin


def read_timeline(paths: list[Path], *, no_cache: bool, clock_fix: bool, job: dict[str, Any]) -> tuple[Path, Any]:
    """The timeline to explain and the path that names it: one trace or run directory as it is; several traces,
    or a folder of traces that is not a run directory, as one job (:func:`tracer.job.load.load_job`, the ranks on
    the Unix clock, moved by the collectives' fix with ``clock_fix``); ``job``: ``load_job``'s ``scheduler``,
    ``skip_bad_ranks`` and ``ranks``, where given (a job's run directory is then read from its rank traces)."""
    given = {option: value for option, value in job.items() if value not in (None, False)}
    found = _traces(paths, given)
    if len(found) == 1 and given:
        option = {"scheduler": "--scheduler", "skip_bad_ranks": "--skip-bad-ranks", "ranks": "--ranks"}
        raise TracerError(option[next(iter(given))], "applies to a job: give its rank traces, a folder of them or "
                          "its run directory")
    if len(found) == 1:
        label, timeline = found[0], load_trace(found[0], cache=not no_cache, on_cache_write=say_cached)
    else:
        from tracer.job.load import load_job  # (the job's reader, 20-40 ms that one trace need not pay)

        label = job_label(found)
        timeline = load_job(found, cache=not no_cache, on_rank=job_progress(found, Console(stderr=True)),
                            on_cache_write=say_job_cached, on_skip=say_skipped, **given)
    if clock_fix:
        if timeline.events["rank"].nunique() >= 2:
            fixed = fix_clocks(timeline)
            say_fixes(fixed.fixes)
            timeline = fixed.timeline
        elif len(found) > 1:  # (a job, of which --ranks kept one: no other clock to set it by)
            print("tracer: note: --clock-fix: one rank read (--ranks): no clock to move", file=sys.stderr)
        else:
            raise TracerError("--clock-fix", "applies to a job: give its rank traces, a folder of them or its run "
                              "directory")
    return label, timeline
