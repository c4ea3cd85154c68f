"""The trace formats tracer reads, in one table: how each is told from its content, the names its files have,
its reader, and the exporter that writes it.

Every place that needs to know the formats reads :data:`FORMATS`: detection and dispatch
(:func:`tracer.parsers.detect_format` / :func:`tracer.parsers.load_trace`), the file names a folder scan takes
(:mod:`tracer.files.discover`), the names a run directory's trace may have (:mod:`tracer.files.rundir`) and the run
names the dashboard shows. Adding a format is adding a row here and a reader (docs/formats.md, "How to add a trace
format").

Importing this module imports nothing heavy: a reader's module is imported when its format is read, an
exporter's when it is asked for.
"""

from __future__ import annotations

import errno
import importlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # (not at run time: the timeline imports pandas)
    from tracer.timeline import Timeline

GZIP_MAGIC = b"\x1f\x8b"

_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"))


def not_a_regular_file(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it is neither a regular file nor a directory ("a named pipe (FIFO)", "a character
    device", "a broken symbolic link" ...), else None. Reading a pipe blocks until a writer comes and a device
    may never end: a trace must be a file (links followed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if os.path.islink(path) else None  # (missing: the caller says so)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # (a link to itself, or a cycle of links: "no such file" said it wrongly)
            return "a loop of symbolic links"
        return None  # (unreadable: opening it says why)
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((what for test, what in _SPECIAL if test(mode)), "not a file")
GZIP_SUFFIX = ".gz"

#: ``reader(path, *, cache, on_cache_write) -> Timeline``: every reader has this shape (``cache`` and
#: ``on_cache_write`` matter only to formats that keep a Parquet cache; the others ignore them).
Reader = Callable[..., "Timeline"]


@dataclass(frozen=True)
class TraceFormat:
    """One input format: what :func:`tracer.parsers.detect_format` returns for it, and everything else the code
    knows about it."""

    #: what detection returns and the timeline's ``meta.format`` family ("kineto", "nsys-sqlite", ...)
    name: str
    #: the format in a few words, as messages name it ("an nsys SQLite export")
    noun: str
    #: file names that look like this format when a folder is scanned (lower case, ``.gz`` variants listed)
    suffixes: tuple[str, ...]
    #: ``module:function`` of the reader (:data:`Reader`), imported on first use
    reader: str
    #: how the content starts, after gzip is looked through and :attr:`skip` is skipped; () = told by its
    #: suffix alone, after every format with a magic has been tried
    magic: tuple[bytes, ...] = ()
    #: bytes that may come before the magic (JSON: a UTF-8 byte-order mark and white space)
    skip: bytes = b""
    #: names a file of this format has in a run directory (``tracer record``), in order of preference
    run_files: tuple[str, ...] = ()
    #: name of the exporter (:data:`tracer.exporters.EXPORTERS`) that writes this format, if one does
    exporter: str | None = None

    def matches(self, head: bytes) -> bool:
        """Whether content starting with ``head`` (gzip already looked through) is this format."""
        rest = head.lstrip(self.skip) if self.skip else head
        return bool(self.magic) and rest.startswith(self.magic)

    def named(self, name: str) -> bool:
        """Whether a file called ``name`` looks like this format."""
        return name.lower().endswith(self.suffixes)

    def read(self, path: str | os.PathLike[str], *, cache: bool = True,
             on_cache_write: Callable[[Path], None] | None = None) -> Timeline:
        """Parse ``path`` (already known to be this format) with this format's reader; no detection, and none
        of :func:`tracer.parsers.load_trace`'s common checks."""
        return self.load_reader()(Path(path), cache=cache, on_cache_write=on_cache_write)

    def load_reader(self) -> Reader:
        module, function = self.reader.split(":")
        return cast(Reader, getattr(importlib.import_module(module), function))


#: JSON may start with these before its first ``{`` or ``[``.
JSON_SKIP = b"\xef\xbb\xbf \t\r\n"

#: Every format tracer reads, in the order messages list them. Detection tries the formats with a magic first
#: (their magics exclude each other), then the suffix-only ones.
FORMATS: dict[str, TraceFormat] = {
    f.name: f
    for f in (
        TraceFormat(
            "kineto",
            "a Kineto/Chrome JSON trace",
            suffixes=(".json", ".json.gz"),
            reader="tracer.parsers.kineto:read_kineto",
            magic=(b"{", b"["),
            skip=JSON_SKIP,
            run_files=("trace.json.gz", "trace.json"),
            exporter="chrome",
        ),
        TraceFormat(
            "nsys-sqlite",
            "an nsys SQLite export",
            suffixes=(".sqlite", ".sqlite.gz"),
            reader="tracer.parsers.nsys:read_nsys_sqlite",
            magic=(b"SQLite format 3\x00",),
            run_files=("report.sqlite.gz", "report.sqlite"),
            exporter="nsys-sqlite",
        ),
        TraceFormat(
            "nsys-rep",
            "a .nsys-rep",
            # .qdrep: the older name of Nsight Systems' report files; nsys export reads both
            suffixes=(".nsys-rep", ".qdrep"),
            reader="tracer.parsers.nsys:read_nsys_rep",
            run_files=("report.nsys-rep",),
        ),
        TraceFormat(
            "parquet",
            "Parquet",
            suffixes=(".parquet",),
            reader="tracer.parsers.parquet:read_parquet",
            magic=(b"PAR1",),
            run_files=("timeline.parquet",),
            exporter="parquet",
        ),
    )
}


def by_content(head: bytes) -> TraceFormat | None:
    """The format whose magic ``head`` (the first bytes, gzip looked through) starts with, if any."""
    return next((f for f in FORMATS.values() if f.matches(head)), None)


def by_name(name: str) -> TraceFormat | None:
    """The suffix-only format a file called ``name`` is (they have no magic to be told by), if any."""
    return next((f for f in FORMATS.values() if not f.magic and f.named(name)), None)


def format_of_exporter(exporter: str) -> TraceFormat | None:
    """The format an exporter's output is read back as (None: tracer does not read it, e.g. NVTXT)."""
    return next((f for f in FORMATS.values() if f.exporter == exporter), None)


def trace_suffixes() -> tuple[str, ...]:
    """Every file suffix a folder scan takes as a trace."""
    return tuple(s for f in FORMATS.values() for s in f.suffixes)


def suffix_patterns() -> str:
    """The scanned suffixes for a message: ``*.json[.gz], *.sqlite[.gz], *.nsys-rep, *.qdrep, *.parquet``."""
    out: list[str] = []
    for s in trace_suffixes():
        if s.endswith(GZIP_SUFFIX) and s[: -len(GZIP_SUFFIX)] in trace_suffixes():
            continue
        out.append(f"*{s}[{GZIP_SUFFIX}]" if s + GZIP_SUFFIX in trace_suffixes() else f"*{s}")
    return ", ".join(out)


def nouns() -> str:
    """The formats for a message: "a Kineto/Chrome JSON trace, an nsys SQLite export, a .nsys-rep or Parquet"."""
    words = [f.noun for f in FORMATS.values()]
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]


def stem(name: str) -> str:
    """``name`` without its gzip and format suffixes (``step.json.gz`` -> ``step``): a trace's short name."""
    out = name
    for s in (GZIP_SUFFIX, *dict.fromkeys(s.removesuffix(GZIP_SUFFIX) for s in trace_suffixes())):
        out = out.removesuffix(s)
    return out

