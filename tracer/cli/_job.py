"""What ``--job`` commands say while they read a job: per-rank progress, the dataset written, ranks left out;
the ``--ranks`` list they take, and what ``--clock-fix`` did."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from tracer.cli._report import say_cached, say_skipped_file
from tracer.errors import TracerError, UsageError
from tracer.files.discover import is_run_dir, job_label, job_traces
from tracer.job.clocks import fix_clocks
from tracer.parsers import load_trace

#: Per-rank progress is printed for jobs at least this large (as a big trace's spinner is), on a terminal.
PROGRESS_MIN_BYTES = 20_000_000

_RANKS = re.compile(r"^\d{1,5}(-\d{1,5})?$")


def parse_ranks(text: str) -> list[int]:
    """``"0,2,4-7"`` -> [0, 2, 4, 5, 6, 7]; anything else is one :class:`UsageError` line."""
    out: list[int] = []
    for item in (i.strip() for i in text.split(",")):
        if not _RANKS.match(item):
            raise UsageError("--ranks", f"{text!r} is not a list of ranks (such as 0,2,4-7)")
        lo, _, hi = item.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first or last >= 2**15:
            raise UsageError("--ranks", f"{item!r} is not a range of ranks (0 to 32767, low-high)")
        out.extend(r for r in range(first, last + 1) if r not in out)
    return out


def job_progress(traces: Sequence[Path], console: Any, *, force: bool = False) -> Callable[[Any], None] | None:
    """``load_job``'s ``on_rank`` for a command: one line per rank parsed on stderr (``console``), for a job of
    at least :data:`PROGRESS_MIN_BYTES` on a terminal (or ``force``); None otherwise."""
    sizes: dict[Path, int] = {}
    for p in traces:
        try:
            sizes[Path(p)] = Path(p).stat().st_size
        except OSError:
            sizes[Path(p)] = 0
    if not force and (sum(sizes.values()) < PROGRESS_MIN_BYTES or not console.is_terminal):
        return None

    def on_rank(done: Any) -> None:
        size = sum(sizes.get(Path(f), 0) for f in done.files)
        what = f"failed: {done.error}" if done.error else f"{size / 1e6:,.0f} MB in {done.seconds:.1f} s"
        console.print(f"Parsed {done.done}/{done.total}: {done.files[0].name} ({what})", highlight=False)

    return on_rank


def say_job_cached(dataset: Path) -> None:
    """``load_job``'s ``on_cache_write``: the dataset is a hidden folder beside the user's traces, so it is
    never written without a word."""
    print(f"tracer: note: cached the parsed job at {dataset}; --no-cache to skip", file=sys.stderr)


def say_skipped(exc: TracerError) -> None:
    """``load_job``'s ``on_skip``: a rank left out of the job (--skip-bad-ranks), in one line."""
    print(f"tracer: warning: {exc}; the job is opened without it (--skip-bad-ranks)", file=sys.stderr)


def say_fixes(fixes: dict[int, int | None]) -> None:
    """What ``--clock-fix`` does to each rank (``RankSkew.clock_fix_ns`` by rank), on stderr."""
    for rank, fix in sorted(fixes.items()):
        if fix is None:
            print(f"tracer: note: rank {rank}: the matched collectives contradict one another; its clock is left "
                  "as it is", file=sys.stderr)
        elif fix:
            print(f"tracer: note: rank {rank}: clock moved by {fix / 1e3:,.1f} µs (--clock-fix)", file=sys.stderr)


def read_timeline(paths: list[Path], *, no_cache: bool, clock_fix: bool, job: dict[str, Any]) -> tuple[Path, Any]:
    """The timeline to explain and the path that names it: one trace or run directory as it is; several traces,
    or a folder of traces that is not a run directory, as one job (:func:`tracer.job.load.load_job`, the ranks on
    the Unix clock, moved by the collectives' fix with ``clock_fix``); ``job``: ``load_job``'s ``scheduler``,
    ``skip_bad_ranks`` and ``ranks``, where given (a job's run directory is then read from its rank traces)."""
    given = {option: value for option, value in job.items() if value not in (None, False)}
    found = job_traces(paths, on_skip=say_skipped_file) if len(paths) > 1 or paths[0].is_dir() else list(paths)
    if len(paths) == 1 and is_run_dir(paths[0]) and not (given and len(found) > 1):
        found = list(paths)  # (a run directory, of one trace or of a job: it holds its timeline already)
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
