"""Write a :class:`~tracer.timeline.Timeline` in another tool's format: Nsight Systems, Perfetto, Parquet.

One module per format; this registry, keyed by format name and by file suffix, is how the CLI and library
callers find them. The input formats' table (:data:`tracer.files.formats.FORMATS`) names, for each format tracer
reads, the exporter here that writes it (:attr:`Exporter.reads_back_as` is the other way round). Every
exporter has the same shape, ``write(timeline, dest, *, final, progress) ->
ExportResult``: it writes ``dest`` (a temporary file beside the final one; :func:`export_timeline` renames it
into place only when the whole file is written), and says what it wrote and what it could not represent.

Importing this package imports neither Dash nor Plotly, nor any exporter's dependencies: modules are loaded
when their format is asked for.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, cast

from tracer import __version__
from tracer.errors import UsageError
from tracer.files.atomic import atomic_path, file_destination, writing
from tracer.files.formats import format_of_exporter
from tracer.timeline import Timeline

#: ``progress(stage, done, total)``: called now and then while writing a big timeline; ``total`` may be 0.
ProgressFn = Callable[[str, int, int], None]


@dataclass
class ExportResult:
    """What an exporter wrote."""

    format: str
    path: Path
    #: rows (or events, or lines) written, by what they are: {"kernels": 50, "memcpys": 50, ...}
    counts: dict[str, int] = field(default_factory=dict)
    #: what the format could not hold and how it was handled, one sentence each
    notes: list[str] = field(default_factory=list)


class _Writer(Protocol):
    def __call__(
        self, timeline: Timeline, dest: Path, *, final: Path, progress: ProgressFn | None
    ) -> ExportResult: ...


@dataclass(frozen=True)
class Exporter:
    """One output format: its name, the suffixes that select it, and where its writer lives."""

    name: str
    suffixes: tuple[str, ...]
    description: str
    module: str  # tracer.exporters.<module>, imported on first use
    function: str = "write"

    def writer(self) -> _Writer:
        mod = importlib.import_module(f"tracer.exporters.{self.module}")
        return cast(_Writer, getattr(mod, self.function))

    @property
    def reads_back_as(self) -> str | None:
        """The input format (:data:`tracer.files.formats.FORMATS`) whose row names this exporter: what tracer reads
        its output as; None where tracer does not read it (NVTXT)."""
        found = format_of_exporter(self.name)
        return found.name if found else None


EXPORTERS: dict[str, Exporter] = {
    e.name: e
    for e in (
        Exporter(
            "nsys-sqlite",
            (".sqlite", ".sqlite.gz"),
            "SQLite in Nsight Systems' export schema; `nsys stats` reports run on it (gzip-compressed when OUT "
            "ends in .gz: gunzip it for nsys)",
            "nsys_sqlite",
        ),
        Exporter("nvtxt", (".nvtxt",), "Nsight Systems' NVTX text format, for its ImportNvtxt tool", "nvtxt"),
        Exporter(
            "chrome",
            (".json", ".json.gz"),
            "Chrome trace JSON (Perfetto, chrome://tracing), gzip-compressed when OUT ends in .gz",
            "chrome",
        ),
        Exporter("parquet", (".parquet",), "the timeline and its metadata (pandas, DuckDB, Spark)", "parquet"),
    )
}


def tracer_version() -> str:
    """tracer's version (``tracer.__version__``), for the provenance rows every export carries."""
    return __version__


def format_for_path(path: str | os.PathLike[str]) -> Exporter:
    """The exporter an output file name asks for, by its suffix (the longest matching one)."""
    name = Path(path).name.lower()
    matches = [(s, e) for e in EXPORTERS.values() for s in e.suffixes if name.endswith(s)]
    if not matches:
        known = ", ".join(f"{s} ({e.name})" for e in EXPORTERS.values() for s in e.suffixes)
        raise UsageError(path, f"cannot tell the export format from the file name; use --to, or end it in {known}")
    return max(matches, key=lambda m: len(m[0]))[1]


def get_exporter(fmt: str | None, out: str | os.PathLike[str]) -> Exporter:
    """The exporter named ``fmt``, or the one ``out``'s suffix selects when ``fmt`` is None."""
    if fmt is None:
        return format_for_path(out)
    try:
        return EXPORTERS[fmt]
    except KeyError:
        raise UsageError(fmt, f"unknown export format; choose one of {', '.join(EXPORTERS)}") from None


def check_output(out: str | os.PathLike[str], *, force: bool, parents: bool = True) -> Path:
    """Refuse to overwrite an existing file unless ``force``; refuse directories always; without ``parents``,
    refuse an output whose folder does not exist (a typo'd path would otherwise be created silently)."""
    p = Path(out)
    try:
        is_dir, exists = p.is_dir(), p.exists()
    except OSError as exc:  # a name longer than the file system allows (ENAMETOOLONG) ...: bad input, not a crash
        raise UsageError(p, f"cannot be an output file: {exc.strerror or exc}") from None
    if is_dir:
        raise UsageError(p, "is a directory; give a file name for the export")
    if exists and not force:
        raise UsageError(p, "already exists; pass --force to overwrite it")
    file_destination(p)  # (a device or a pipe: refused now, not after a long parse)
    # a file where a directory of OUT should be: say so now, not after a long parse
    nearest = next((a for a in p.parents if a.exists()), None)
    if nearest is not None and not nearest.is_dir():
        raise UsageError(nearest, "is a file, not a directory")
    if not parents and nearest != p.parent:
        missing = next(a for a in reversed(p.parents) if not a.exists())
        raise UsageError(missing, "does not exist: create it, or pass --parents to create the output's folders")
    return p


def export_timeline(
    timeline: Timeline,
    out: str | os.PathLike[str],
    fmt: str | None = None,
    *,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> ExportResult:
    """Write ``timeline`` to ``out`` in ``fmt`` (default: from ``out``'s suffix), atomically.

    Nothing appears at ``out`` unless the whole file was written; an existing ``out`` is replaced only with
    ``force``, and stays as it was when the export fails. A failed write (a full disk) is an
    :class:`~tracer.errors.OutputError`.
    """
    final = check_output(out, force=force)
    exporter = get_exporter(fmt, out)
    write = exporter.writer()
    with writing(final), atomic_path(final) as tmp:
        result = write(timeline, tmp, final=final, progress=progress)
        # The temporary file is created private (0600); an export is for sharing, so give it the mode a
        # newly created file gets (0666 less the umask).
        os.chmod(tmp, 0o666 & ~_umask())
    return replace(result, path=final)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


__all__ = [
    "EXPORTERS",
    "ExportResult",
    "Exporter",
    "ProgressFn",
    "check_output",
    "export_timeline",
    "format_for_path",
    "get_exporter",
    "tracer_version",
]
