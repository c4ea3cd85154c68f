"""Finding runs and traces in a folder: what ``tracer summary FOLDER`` and the dashboard list.

A *run directory* (what ``tracer record`` writes: :mod:`tracer.rundir`) counts as one run and is not looked
into; elsewhere, files whose names look like traces are taken (:data:`tracer.formats.FORMATS`' suffixes; the
content decides the format once they are opened).
"""

from __future__ import annotations

from pathlib import Path

from tracer.formats import suffix_patterns, trace_suffixes
from tracer.rundir import is_run_dir

__all__ = ["SCAN_DEPTH", "TRACE_SUFFIXES", "discover", "expand", "is_run_dir", "is_trace_file"]

#: Files that look like traces when a folder is scanned: every format's suffixes (the scan reads the table,
#: tracer.formats.FORMATS, each time; this is the table's as imported).
TRACE_SUFFIXES = trace_suffixes()
#: How deep a folder is scanned (runs/<experiment>/<run>/ is three levels).
SCAN_DEPTH = 4


def is_trace_file(p: Path) -> bool:
    """A visible file whose name ends like a trace tracer reads."""
    n = p.name.lower()
    return p.is_file() and not n.startswith(".") and n.endswith(trace_suffixes())


def discover(path: Path, depth: int = SCAN_DEPTH) -> list[Path]:
    """Run directories and trace files at or under ``path``, sorted by path (hidden entries skipped)."""
    if is_run_dir(path) or path.is_file():
        return [path]
    if not path.is_dir() or depth <= 0:
        return []
    found: list[Path] = []
    try:
        children = sorted(path.iterdir())
    except OSError:
        return []
    for child in children:
        if child.name.startswith("."):
            continue
        if child.is_dir():
            found += discover(child, depth - 1)
        elif is_trace_file(child):
            found.append(child)
    return found


def expand(paths: list[Path]) -> list[Path]:
    """Each path as given, except a folder that is not a run directory: the runs and traces under it (an
    :class:`InputNotFoundError` when it holds none)."""
    from tracer.errors import InputNotFoundError

    out: list[Path] = []
    for p in paths:
        if p.is_dir() and not is_run_dir(p):
            inside = discover(p)
            if not inside:
                raise InputNotFoundError(
                    p,
                    f"not a tracer run, and a folder with no run directories or traces ({suffix_patterns()}) "
                    "under it",
                )
            out += inside
        else:
            out.append(p)
    return out
