"""What every command says on stderr about how it read a trace: the cache it wrote, what it left out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracer.timeline import TraceExtra


def say_cached(cache: Path) -> None:
    """``load_trace``'s ``on_cache_write``: the cache is a hidden file written beside the user's trace, so it is
    never written without a word (once, when written)."""
    print(f"tracer: note: cached the parsed timeline at {cache}; --no-cache to skip", file=sys.stderr)


def say_skipped_file(path: Path, why: str) -> None:
    """:func:`tracer.files.discover.expand`'s ``on_skip``: a folder's entry named like a trace that is not read."""
    print(f"tracer: note: {path}: skipped: {why}", file=sys.stderr)


def left_out_text(skipped: dict[str, int], ignored: dict[str, str]) -> str:
    """What the parser left out of a trace, in one line: "3 events skipped: ts not a number"."""
    parts = []
    if skipped:
        n = sum(skipped.values())
        reasons = list(skipped.items())
        why = reasons[0][0] if len(reasons) == 1 else ", ".join(f"{k} ({v:,})" for k, v in reasons)
        parts.append(f"{n:,} event{'s' if n != 1 else ''} skipped: {why}")
    if ignored:
        parts.append("ignored: " + ", ".join(f"{k} ({v})" for k, v in ignored.items()))
    return "; ".join(parts)


def warn_left_out(path: Any, meta_extra: TraceExtra) -> None:
    """The warning line for what a timeline's parser left out (nothing when it left nothing out)."""
    text = left_out_text(meta_extra.get("skipped") or {}, meta_extra.get("ignored") or {})
    if text:
        print(f"tracer: warning: {path}: {text}", file=sys.stderr)


def run_failures(meta_extra: TraceExtra) -> list[str]:
    """What a recorded run's meta.json (``meta.extra["run"]``) says went wrong with its processes, one sentence
    each: a rank that failed, hung or was torn down, and the ranks with no trace (the figures are the others')."""
    run = meta_extra.get("run")
    if not isinstance(run, dict):
        return []
    out = []
    for p in run.get("processes") or []:
        if not isinstance(p, dict) or not (p.get("exit_code") or p.get("timed_out") or p.get("torn_down")):
            continue
        how = ("hung (ended at the timeout)" if p.get("timed_out") else "was torn down after another rank failed"
               if p.get("torn_down") else f"exited with {p.get('exit_code')}")
        last = f": {p['last_line']}" if p.get("last_line") else ""
        out.append(f"rank {p.get('rank')} {how}{last}")
    missing = [r for r in run.get("missing_ranks") or [] if isinstance(r, int)]
    if missing:
        out.append(f"no trace from rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}: the "
                   "figures are the other ranks'")
    return out
