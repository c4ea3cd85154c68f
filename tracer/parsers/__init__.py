"""Open any trace tracer understands and return one canonical :class:`~tracer.timeline.Timeline`
(:func:`load_trace`, in :mod:`tracer.parsers.load`).

The format is told from the content, not the suffix: gzip is looked through, then the first bytes say
SQLite (an Nsight Systems export), Parquet (a stored timeline) or JSON (Kineto / Chrome). ``.nsys-rep``
reports are converted with ``nsys export`` when nsys is installed. Run directories written by
``tracer record`` are opened through their stored timeline. The formats, their magics and their readers (each
in its format's module: :mod:`tracer.parsers.kineto`, :mod:`tracer.parsers.nsys`, :mod:`tracer.parsers.parquet`)
are one table, :data:`tracer.files.formats.FORMATS`; the run directory's layout is :mod:`tracer.files.rundir`.

This package itself holds what needs no pandas: telling a file's format (:func:`detect_format`), reading its
bytes through gzip (:func:`iter_inflated`, with its bomb check), and naming a trace's Parquet cache. A job's
scan workers import it (and :mod:`tracer.parsers.kineto_scan`) before the job's process imports pandas, and so
does a command that only names :func:`load_trace`: the reading side, which builds timelines
(:mod:`tracer.parsers.load`), is imported where a trace is first read. Importing this package imports neither
pandas, Dash nor Plotly.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer.errors import InputNotFoundError, TraceFormatError, TracerError
from tracer.files import formats, rundir
from tracer.files.formats import FORMATS, GZIP_MAGIC
from tracer.files.memory import inflate_budget
from tracer.vocabulary import SCHEMA_VERSION

if TYPE_CHECKING:
    from tracer.timeline import Timeline

# (kept for callers of the names this module used to define: the format table and the run-directory module
# are where they live now)
PARQUET_MAGIC = FORMATS["parquet"].magic[0]
RUN_TIMELINE = rundir.TIMELINE

#: Parsed Kineto traces at least this large get a Parquet cache beside them (see :func:`cache_path`).
CACHE_MIN_BYTES = 4 * 1024 * 1024
#: Part of the cache key: raise it whenever the Kineto parser's output for a given file can change, so that a
#: cache written by an older tracer is parsed afresh instead of serving its old figures.
#: 2: exact decimal ts/dur, tolerant args, PyTorch 1.8 categories, B/E slices (2026-12-03).
#: 3: events with a negative dur or bytes, bytes over 256 TiB or ts beyond int64 ns are skipped and counted.
#: 4: meta.clock and meta.clock_offset_ns (issue 12).
#: 5: meta.extra["cuda_sync"]: what Kineto's cuda_sync rows wait on (issue 10); the collective columns from the
#:    trace's metadata (schema 3) and each row's rank in tracer's Chrome export of a job (issue 9).
#: 6: meta.extra["stream_flags"]: each CUDA stream's kind (null, blocking, non-blocking) from nsys'
#:    TARGET_INFO_CUDA_STREAM, for the legacy default stream's implicit synchronisation (issue 10).
#: 7: an event whose end (ts + dur) is past int64 ns is counted as "ts + dur beyond int64 ns", not as its ts.
#: 8: an nsys report's processes that ran GPU work are the ranks of one job (the rank column).
#: 9: python_function rows (torch.profiler's with_stack=True) are kind "python", no longer cpu_op (issue 37).
KINETO_PARSER_VERSION = 9


def detect_format(path: str | os.PathLike[str]) -> str:
    """The name of ``path``'s format in :data:`tracer.files.formats.FORMATS` ("kineto", "nsys-sqlite", "nsys-rep",
    "parquet"), told from its content (gzip looked through; a format without a magic by its suffix), or
    "run-dir" for a directory."""
    p = Path(path)
    if p.is_dir():
        return "run-dir"
    head = _read_head(p)
    if head[:2] == GZIP_MAGIC:
        try:
            with gzip.open(p, "rb") as f:
                head = f.read(64)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(p, f"damaged gzip file: {exc}") from None
        if not head:
            raise TraceFormatError(p, "gzip file holds nothing (empty trace)")
    found = formats.by_content(head)
    if found is None and not head.lstrip(_BOM_AND_SPACE):
        # nothing but white space so far: read on, for the formats that may start with any amount of it (JSON)
        rest = _first_content(p)
        found = next((f for f in FORMATS.values() if f.skip and f.matches(rest)), None)
    if found is None:
        found = formats.by_name(p.name)
    if found is None:
        raise TraceFormatError(p, f"unrecognised content: expected {formats.nouns()}")
    return found.name


_BOM_AND_SPACE = formats.JSON_SKIP


def _first_content(p: Path) -> bytes:
    """The first bytes after leading whitespace, read on as far as it goes (through gzip, with its bomb check);
    a file of nothing but whitespace is one clear error rather than "unrecognised content" or "holds no
    'traceEvents'"."""
    try:
        with open(p, "rb") as f:
            data = f.read(2)
            if data == GZIP_MAGIC:
                blocks = iter_inflated(p, data + f.read())
            else:
                blocks = iter(lambda: f.read(_INFLATE_BLOCK), b"")
                if data.lstrip(_BOM_AND_SPACE):
                    return data.lstrip(_BOM_AND_SPACE)
            for block in blocks:
                rest = block.lstrip(_BOM_AND_SPACE)
                if rest:
                    return rest[:64]
    except OSError as exc:
        raise InputNotFoundError(p, f"cannot read: {exc.strerror or exc}") from None
    raise TraceFormatError(p, "holds nothing but whitespace (an empty trace file)")


def _read_head(p: Path) -> bytes:
    special = formats.not_a_regular_file(p)
    if special is not None:
        raise InputNotFoundError(p, f"not a regular file but {special}: give a trace file")
    if not p.exists():
        raise InputNotFoundError(p, "no such file or directory")
    try:
        with open(p, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise InputNotFoundError(p, f"cannot read: {exc.strerror or exc}") from None
    if not head:
        raise TraceFormatError(p, "empty file")
    return head


#: A gzip member may inflate to at most this many times its compressed size (beyond a floor): real traces
#: compress 5-30× (the largest seen, a Kineto trace of PyTorch 1.8, 25×), while a decompression bomb of
#: whitespace inflates ~1000×. The check runs while inflating, so a bomb is refused after at most the floor
#: plus one block of output — not after filling memory or the disk. TRACER_GZIP_MAX_RATIO raises it.
GZIP_MAX_RATIO = 200
GZIP_RATIO_FLOOR = 64 * 1024 * 1024
_INFLATE_BLOCK = 4 * 1024 * 1024


def _max_ratio() -> float:
    try:
        return float(os.environ.get("TRACER_GZIP_MAX_RATIO", GZIP_MAX_RATIO))
    except ValueError:
        return GZIP_MAX_RATIO


def iter_inflated(p: Path, data: bytes) -> Iterator[bytes]:
    """The inflated bytes of gzip ``data`` (every member), a block at a time; a bomb is one clear error: one that
    inflates more than the ratio cap, or (below it) to more than the memory budget
    (:func:`tracer.files.memory.inflate_budget`), both checked while inflating."""
    ratio = _max_ratio()
    budget = inflate_budget()
    view = memoryview(data)
    produced = 0
    rest = view
    try:
        while True:  # one gzip member per turn
            d = zlib.decompressobj(wbits=31)
            buf: bytes | memoryview = rest
            while not d.eof:
                block = d.decompress(buf, _INFLATE_BLOCK)
                buf = d.unconsumed_tail
                if not block and not buf:
                    raise EOFError  # input used up before the member's end
                produced += len(block)
                # (at a member's end zlib leaves the input after it both in unused_data and in unconsumed_tail:
                # subtracting both made this negative, and a real multi-member file a "bomb" past the floor)
                consumed = len(data) - len(d.unused_data if d.eof else buf)
                if produced > GZIP_RATIO_FLOOR and produced > ratio * consumed:
                    raise TraceFormatError(
                        p,
                        f"refused: the gzip stream inflates more than {ratio:g}× its size ({produced / 1e6:,.0f} MB "
                        f"from {consumed / 1e6:,.2f} MB so far) — a decompression bomb, or set "
                        "TRACER_GZIP_MAX_RATIO higher if the trace is real",
                    )
                if budget is not None and produced > budget.bytes:
                    raise TraceFormatError(
                        p,
                        f"refused: the gzip stream inflates to more than {budget.bytes / 1e6:,.0f} MB, the memory "
                        f"budget of one trace ({budget.why}) — a decompression bomb, or set it higher if the "
                        "trace is real",
                    )
                if block:
                    yield block
            rest = view[len(data) - len(d.unused_data) :]
            if not bytes(rest[:4096]).strip(b"\x00"):  # zero padding after the last member, as gzip(1) allows
                return
            if bytes(rest[:2]) != GZIP_MAGIC:
                raise TraceFormatError(p, "damaged gzip file: trailing garbage after the compressed data")
    except EOFError:
        raise TraceFormatError(p, "truncated gzip file: it ends before the trace does") from None
    except zlib.error as exc:
        raise TraceFormatError(p, f"damaged gzip file: {exc}") from None


def cache_path(path: Path) -> Path:
    """Where the Parquet cache of a parsed trace lives: a hidden file beside it."""
    return path.with_name(f".{path.name}.tracer.parquet")


def cache_key(size: int, digest: str) -> dict[str, Any]:
    """What a cache must match to be served: the source's size and content hash, and the versions of the
    timeline schema and of the Kineto parser that wrote it. (Not the mtime: ``cp -p`` and ``rsync -t`` keep it
    across an edit, and a plain ``touch`` changes nothing a parse would see.)"""
    return {
        "source_size": size,
        "source_blake3": digest,
        "schema_version": SCHEMA_VERSION,
        "parser_version": KINETO_PARSER_VERSION,
    }


def load_trace(
    path: str | os.PathLike[str],
    *,
    cache: bool = True,
    on_cache_write: Callable[[Path], None] | None = None,
    on_raw: Callable[[bytes], None] | None = None,
) -> Timeline:
    """Parse ``path`` (trace file or run directory) into a :class:`Timeline`.

    With ``cache`` (the default), a Kineto trace of at least :data:`CACHE_MIN_BYTES` is stored as Parquet
    beside itself after the first parse and read from there while its content is unchanged (see
    :func:`cache_key`); ``on_cache_write`` is called with the cache's path when one is written, so that a
    command can say so. Rows no trace can mean are left out and counted (:func:`tracer.timeline.drop_impossible`)
    whatever the format.

    ``on_raw``: called with a Kineto file's bytes as read (gzipped if the file is), when they are read (not
    from a cache): a job's worker hashes them for its dataset's key without reading the file twice.
    """
    # (the package's one import of its reading side: it builds timelines, so brings pandas, which this package's
    # importers, a job's scan workers and the commands that name this function among them, start without)
    from tracer.parsers import load

    return load.load_trace(path, cache=cache, on_cache_write=on_cache_write, on_raw=on_raw)


def read_raw(p: Path) -> bytes:
    """The file's bytes as stored (still gzipped if it is); an unreadable file is an :class:`InputNotFoundError`."""
    try:
        return p.read_bytes()
    except OSError as exc:
        raise InputNotFoundError(p, f"cannot read: {exc.strerror or exc}") from None


@contextmanager
def unpacked_sqlite(p: Path) -> Iterator[Path]:
    """An SQLite file to open for ``p``: ``p`` itself, or, gzipped, a temporary copy unpacked a block at a time
    (SQLite needs a real file), removed on leaving. Raises :class:`TracerError` for a gzip stream that cannot be
    unpacked, :class:`OSError` where ``p`` cannot be opened."""
    with open(p, "rb") as f:
        gz = f.read(2) == GZIP_MAGIC
    if not gz:
        yield p
        return
    data = read_raw(p)
    with tempfile.TemporaryDirectory(prefix="tracer-") as tmp:
        out = Path(tmp) / "export.sqlite"
        try:
            with open(out, "wb") as f:
                for block in iter_inflated(p, data):
                    f.write(block)
        except OSError as exc:
            raise TracerError(p, f"cannot unpack to a temporary file ({tmp}): {exc.strerror or exc}") from None
        del data
        yield out

