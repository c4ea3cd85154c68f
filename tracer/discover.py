"""Finding runs and traces in a folder: what ``tracer summary FOLDER`` and the dashboard list.

A *run directory* (what ``tracer record`` writes) counts as one run and is not looked into; elsewhere, files
whose names look like traces are taken (the content decides the format once they are opened).
"""

from __future__ import annotations

from pathlib import Path

from tracer.parsers import RUN_META, RUN_TIMELINE, RUN_TRACE_CANDIDATES

#: Files that look like traces when a folder is scanned.
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.gz", ".nsys-rep", ".parquet")
#: How deep a folder is scanned (runs/<experiment>/<run>/ is three levels).
SCAN_DEPTH = 4


def is_run_dir(p: Path) -> bool:
    """A directory holding a run's metadata, timeline or trace under their standard names."""
    return p.is_dir() and any((p / n).exists() for n in (RUN_META, RUN_TIMELINE, *RUN_TRACE_CANDIDATES))


def is_trace_file(p: Path) -> bool:
    """A visible file whose name ends like a trace tracer reads."""
    n = p.name.lower()
    return p.is_file() and not n.startswith(".") and n.endswith(TRACE_SUFFIXES)


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
                    p, "not a tracer run, and a folder with no run directories or traces (*.json[.gz], "
                    "*.sqlite[.gz], *.nsys-rep, *.parquet) under it"
                )
            out += inside
        else:
            out.append(p)
    return out
