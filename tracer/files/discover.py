"""Finding runs and traces in a folder: what ``tracer summary FOLDER`` and the dashboard list.

A *run directory* (what ``tracer record`` writes: :mod:`tracer.files.rundir`) counts as one run and is not looked
into; elsewhere, files whose names look like traces are taken (:data:`tracer.files.formats.FORMATS`' suffixes; the
content decides the format once they are opened).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tracer.errors import InputNotFoundError
from tracer.files.formats import not_a_regular_file, suffix_patterns, trace_suffixes
from tracer.files.rundir import find_rank_traces, find_trace, is_run_dir

__all__ = ["SCAN_DEPTH", "TRACE_SUFFIXES", "discover", "expand", "is_run_dir", "is_trace_file", "job_label",
           "job_traces"]

#: Files that look like traces when a folder is scanned: every format's suffixes (the scan reads the table,
#: tracer.files.formats.FORMATS, each time; this is the table's as imported).
TRACE_SUFFIXES = trace_suffixes()
#: How deep a folder is scanned (runs/<experiment>/<run>/ is three levels).
SCAN_DEPTH = 4


def is_trace_file(p: Path) -> bool:
    """A visible file whose name ends like a trace tracer reads."""
    n = p.name.lower()
    return p.is_file() and not n.startswith(".") and n.endswith(trace_suffixes())


#: ``on_skip(path, why)``: told of each entry a scan leaves out that a user may have meant to be read.
OnSkip = Callable[[Path, str], None]


def discover(path: Path, depth: int = SCAN_DEPTH, on_skip: OnSkip | None = None) -> list[Path]:
    """Run directories and trace files at or under ``path``, sorted by path (hidden entries skipped).
    ``on_skip`` hears of what is named like a trace but cannot be one (a pipe, a device, a broken link) and of
    folders that cannot be listed; other files are not traces and pass unsaid."""
    if is_run_dir(path) or path.is_file():
        return [path]
    if not path.is_dir() or depth <= 0:
        return []
    found: list[Path] = []
    try:
        children = sorted(path.iterdir())
    except OSError as exc:
        if on_skip is not None:
            on_skip(path, f"cannot list the folder: {exc.strerror or exc}")
        return []
    for child in children:
        if child.name.startswith("."):
            continue
        if child.is_dir():
            found += discover(child, depth - 1, on_skip)
        elif is_trace_file(child):
            found.append(child)
        elif on_skip is not None and child.name.lower().endswith(trace_suffixes()):
            special = not_a_regular_file(child)
            if special is not None:
                on_skip(child, f"not a regular file but {special}")
    return found


def expand(paths: list[Path], on_skip: OnSkip | None = None) -> list[Path]:
    """Each path as given, except a folder that is not a run directory: the runs and traces under it (an
    :class:`InputNotFoundError` when it holds none); ``on_skip`` as for :func:`discover`."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir() and not is_run_dir(p):
            inside = discover(p, on_skip=on_skip)
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


def job_traces(paths: list[Path], on_skip: OnSkip | None = None) -> list[Path]:
    """The traces of a job given as ``paths`` (what ``--job`` reads, one per rank): :func:`expand`'s, with a job's
    run directory (``tracer record`` of several ranks) standing for its rank traces
    (:data:`tracer.files.rundir.TRACES_DIR`), not for one rank."""
    out: list[Path] = []
    for p in expand(paths, on_skip=on_skip):
        ranks = find_rank_traces(p) if p.is_dir() and find_trace(p) is None else []
        out += ranks or [p]
    return out


def job_label(traces: list[Path]) -> Path:
    """The path that names a job read from ``traces`` in messages and output: the folder they share, or the one
    trace."""
    import os

    return Path(os.path.commonpath([str(p) for p in traces])) if len(traces) > 1 else traces[0]
