"""What ``--job`` commands say while they read a job: per-rank progress, the dataset written, ranks left out;
the ``--ranks`` list they take, and what ``--clock-fix`` did."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tracer.errors import TracerError, UsageError

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
