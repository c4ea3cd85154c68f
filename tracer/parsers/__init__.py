"""Open any trace tracer understands and return one canonical :class:`~tracer.timeline.Timeline`.

The format is told from the content, not the suffix: gzip is looked through, then the first bytes say
SQLite (an Nsight Systems export), Parquet (a stored timeline) or JSON (Kineto / Chrome). ``.nsys-rep``
reports are converted with ``nsys export`` when nsys is installed. Run directories written by
``tracer record`` are opened through their stored timeline. The formats, their magics and their readers
(:func:`read_kineto` here, the others in their format's module: :mod:`tracer.parsers.nsys`,
:mod:`tracer.parsers.parquet`) are one table, :data:`tracer.files.formats.FORMATS`; the run directory's layout is
:mod:`tracer.files.rundir`.

Importing this package imports neither Dash nor Plotly.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer.errors import InputNotFoundError, TraceFormatError, TracerError
from tracer.files import digests, formats, rundir
from tracer.files.formats import FORMATS, GZIP_MAGIC
from tracer.vocabulary import SCHEMA_VERSION

if TYPE_CHECKING:
    # (imported where a timeline is built: tracer.timeline brings pandas, which a job's scan workers, importing
    # this package for tracer.parsers.kineto's scan, start without; tracer.job.parallel's early scans)
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
    """The inflated bytes of gzip ``data`` (every member), a block at a time; a bomb is one clear error."""
    ratio = _max_ratio()
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
                consumed = len(data) - len(buf) - len(d.unused_data)
                if produced > GZIP_RATIO_FLOOR and produced > ratio * consumed:
                    raise TraceFormatError(
                        p,
                        f"refused: the gzip stream inflates more than {ratio:g}× its size ({produced / 1e6:,.0f} MB "
                        f"from {consumed / 1e6:,.2f} MB so far) — a decompression bomb, or set "
                        "TRACER_GZIP_MAX_RATIO higher if the trace is real",
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
    p = Path(path)
    fmt = detect_format(p)
    if fmt == "run-dir":
        return _worded(p, lambda: _load_run_dir(p, cache=cache, on_cache_write=on_cache_write))
    if fmt == "kineto" and on_raw is not None:
        return _worded(p, lambda: _without_impossible_rows(
            read_kineto(p, cache=cache, on_cache_write=on_cache_write, on_raw=on_raw)))
    return _worded(p, lambda: _without_impossible_rows(
        FORMATS[fmt].read(p, cache=cache, on_cache_write=on_cache_write)))


def load_kineto_parts(path: str | os.PathLike[str], parts: Sequence[Any]) -> Timeline:
    """``load_trace(path, cache=False)`` of a plain Kineto trace scanned in parts
    (:func:`tracer.parsers.kineto.scan_kineto_part`, in file order): the parts merged, or the whole file parsed
    where a part gave None (it could not vouch for what it read): the same timeline, or the same one-line error,
    either way."""
    if any(part is None for part in parts):
        return load_trace(path, cache=False)
    from tracer.parsers.kineto import merge_kineto_parts  # (as in read_kineto)

    p = Path(path)
    return _worded(p, lambda: _without_impossible_rows(merge_kineto_parts(list(parts), str(p))))


def _worded(p: Path, read: Callable[[], Timeline]) -> Timeline:
    """``read()``, its errors one line naming ``p``."""
    try:
        return read()
    except TracerError as exc:
        if exc.subject:
            raise
        # raised where the file is not known (tracer.timeline.build_events): name it here
        raise type(exc)(p, exc.problem) from None
    except RecursionError:
        raise TraceFormatError(p, "nested too deeply (hundreds of levels) to be a trace") from None
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
        # Content no parser check foresaw (deviceProperties id "x", distributedInfo rank 70000 ...): still bad
        # input, so one line naming the file; the exception's own words say what the parser tripped on.
        raise TraceFormatError(p, f"could not be read: unexpected content ({type(exc).__name__}: {exc})") from None


def _without_impossible_rows(timeline: Timeline) -> Timeline:
    """The last line of defence for every format: drop what no trace can mean, and count it with the parser's
    own skipped events (``meta.extra["skipped"]``, which ``tracer summary`` reports and ``--strict`` refuses)."""
    from tracer.timeline import drop_impossible  # (pandas: see the TYPE_CHECKING import above)

    events, dropped = drop_impossible(timeline.events)
    if dropped:
        skipped = dict(timeline.meta.extra.get("skipped") or {})
        for reason, n in dropped.items():
            skipped[reason] = skipped.get(reason, 0) + n
        timeline.meta.extra["skipped"] = dict(sorted(skipped.items()))
        timeline.events = events
    return timeline


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


def read_kineto(p: Path, *, cache: bool = True, on_cache_write: Callable[[Path], None] | None = None,
                on_raw: Callable[[bytes], None] | None = None) -> Timeline:
    """A Kineto / Chrome JSON trace (gzipped or not), through its Parquet cache when it is large
    (:func:`cache_path`)."""
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise InputNotFoundError(p, f"cannot read: {exc.strerror or exc}") from None
    use_cache = cache and size >= CACHE_MIN_BYTES
    stored = _stored_key(p) if use_cache else None
    stat = digests.stat_key(p) if use_cache else []  # (before the read: a write during the parse must not go unseen)
    digest = ""
    if stored is not None and stored.get("source_size") == size:
        # Unchanged inode and ctime: the bytes are those the cache was written from, with no need to hash them
        # (ctime moves on every write and no tool can set it back, unlike the mtime that cp -p / rsync -t
        # restore). Anything else (a copy, a touch, an edit) is decided by the content hash.
        if stored.get("source_stat") == stat:
            digest = str(stored.get("source_blake3", ""))
        else:
            digest = digests.file_digest(p)
        cached = _read_cache(p, cache_key(size, digest), stored)
        if cached is not None:
            return cached
    # (the parser's own import, ~30 ms, is not paid at all when the cache answers, nor for the other formats)
    from tracer.parsers.kineto import parse_kineto_bytes

    raw = _read_raw(p)
    if on_raw is not None:
        on_raw(raw)
    if use_cache and not digest:
        digest = digests.of_bytes(raw)
    data = b"".join(iter_inflated(p, raw)) if raw[:2] == GZIP_MAGIC else raw
    del raw
    timeline = parse_kineto_bytes(data, str(p))
    key = {**cache_key(size, digest), "source_stat": stat} if use_cache else {}
    if use_cache and _write_cache(p, timeline, key) and on_cache_write is not None:
        on_cache_write(cache_path(p))
    return timeline


def _read_raw(p: Path) -> bytes:
    """The file's bytes as stored (still gzipped if it is); an unreadable file is an :class:`InputNotFoundError`."""
    try:
        return p.read_bytes()
    except OSError as exc:
        raise InputNotFoundError(p, f"cannot read: {exc.strerror or exc}") from None


def _stored_key(p: Path) -> dict[str, Any] | None:
    """The key a cache beside ``p`` was written with (None: no readable cache)."""
    # (here, not at the top: this package is imported without pandas, by a job's scan workers too, and
    # tracer.files.storage brings it and pyarrow.parquet, ~55 ms more: only for a trace big enough to be cached)
    from tracer.files.storage import read_parquet_meta

    cp = cache_path(p)
    if not cp.exists() or formats.not_a_regular_file(cp) is not None:
        return None
    try:
        key = read_parquet_meta(cp).get("cache_key")  # (one read of the footer)
    except Exception:  # noqa: BLE001 - a damaged cache is never worth an error: parse afresh
        return None
    return key if isinstance(key, dict) else None


def _read_cache(p: Path, key: dict[str, Any], stored: dict[str, Any]) -> Timeline | None:
    from tracer.files.storage import read_timeline_parquet  # (as in _stored_key)

    if {k: stored.get(k) for k in key} != key:
        return None
    try:
        timeline = read_timeline_parquet(cache_path(p))
    except Exception:  # noqa: BLE001 - a stale or damaged cache is never worth an error: parse afresh
        return None
    timeline.meta.source = str(p)
    timeline.meta.extra.pop("stored_as", None)
    timeline.meta.extra.pop("cache_key", None)
    return timeline


def _write_cache(p: Path, timeline: Timeline, key: dict[str, Any]) -> bool:
    """Store the cache beside ``p``; False (and nothing written) where it cannot be written, for any reason."""
    from tracer.files.storage import CACHE_COMPRESSION, write_timeline_parquet  # (as in _stored_key)

    if not os.access(p.parent, os.W_OK):
        return False  # a read-only directory (a shared data set) just means no cache
    try:
        write_timeline_parquet(timeline, cache_path(p), extra_meta={"cache_key": key}, compression=CACHE_COMPRESSION)
    except Exception:  # noqa: BLE001 - a cache is never worth failing the load of a trace that was read
        # Not only OSError and the atomic writer's UsageError for an unwritable place: metadata the trace holds
        # that the writer cannot store (orjson refuses an integer beyond 64 bits, say) once failed the whole
        # load with "unexpected content". (The atomic writer removes its temporary file on any error.)
        return False
    return True


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
    data = _read_raw(p)
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


def _load_run_dir(p: Path, *, cache: bool, on_cache_write: Callable[[Path], None] | None = None) -> Timeline:
    """A run directory (:mod:`tracer.files.rundir`): its stored timeline, else its trace, with its meta.json as read
    (``meta.extra["run"]``)."""
    run_meta = rundir.load_meta_json(p)
    source = rundir.timeline_source(p)
    if source is None:
        names = (rundir.TIMELINE, *rundir.TRACE_CANDIDATES)
        raise TraceFormatError(p, f"directory is not a tracer run: none of {', '.join(names)} is in it")
    timeline = load_trace(source, cache=cache, on_cache_write=on_cache_write)
    timeline.meta.extra["run"] = run_meta
    timeline.meta.extra["run_dir"] = str(p)
    timeline.meta.extra["run_file"] = source.name
    timeline.meta.source = str(p)
    return timeline
