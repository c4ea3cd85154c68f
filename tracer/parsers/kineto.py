"""Kineto / Chrome trace JSON (what ``torch.profiler`` writes) → canonical timeline.

The events are scanned into column arrays by :mod:`tracer.parsers.kineto_scan` (numpy and msgspec alone: a job's
scan workers import it without this module) — a whole file (:func:`parse_kineto_bytes`) or a file's parts scanned
on several worker processes (:func:`merge_kineto_parts`) — and made a :class:`~tracer.timeline.Timeline` here,
with pandas. :func:`read_kineto`, this format's reader in :data:`tracer.files.formats.FORMATS`, keeps a large
trace's timeline in a Parquet cache beside it.
"""

from __future__ import annotations

import mmap
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import msgspec
import numpy as np
import pandas as pd

from tracer import parsers
from tracer.errors import InputNotFoundError, TraceFormatError
from tracer.files import digests, formats, storage
from tracer.files.formats import GZIP_MAGIC
from tracer.parsers import cache_key, cache_path, iter_inflated, kineto_fork
from tracer.parsers.kineto_scan import KinetoPart, Scan, TraceFields, merge_parts, scan_kineto_bytes, to_int
from tracer.parsers.load import load_trace, without_impossible_rows, worded
from tracer.timeline import COLUMNS, CudaSyncTable, Timeline, TraceMeta, build_events, validate
from tracer.timeline.comm import mark_by_name
from tracer.timeline.meta import FRAME_LINES_CURRENT
from tracer.vocabulary import CLOCK_UNIX


def parse_kineto_bytes(data: bytes, source: str = "") -> Timeline:
    """Parse the bytes of a Kineto / Chrome trace JSON into a :class:`Timeline`.

    Events that cannot be used (ts not a number, GPU work without a device, unpaired B/E ...) are left out
    and counted in ``meta.extra["skipped"]`` (reason → count); top-level fields of an unexpected type are
    ignored and named in ``meta.extra["ignored"]``.
    """
    try:
        return _parse_utf8(data, source)
    except (msgspec.DecodeError, TraceFormatError) as exc:
        if "UTF-8" not in str(exc):
            raise
    # Bytes that are not UTF-8: torch.profiler with with_stack=True can write the name of a Python frame whose
    # code object was freed before the trace was saved (pytorch/pytorch#136040, kineto#988): garbage bytes, in one
    # name. The bytes are read again with each bad sequence replaced by U+FFFD, and said; only then (the check
    # costs a decode of the whole file).
    text = str(data, "utf-8", "replace")  # (str(), not data.decode: data may be a mapped file)
    bad = text.count("\ufffd") - str(data, "utf-8", "ignore").count("\ufffd")
    timeline = _parse_utf8(text.encode("utf-8"), source)
    ignored = dict(timeline.meta.extra.get("ignored") or {})
    ignored["invalid UTF-8"] = (f"{bad:,} byte sequence(s) that are not UTF-8 (names of freed Python frames, a "
                                "torch.profiler with_stack bug) read as U+FFFD")
    timeline.meta.extra["ignored"] = ignored
    return timeline


def _parse_utf8(data: bytes, source: str) -> Timeline:
    """:func:`parse_kineto_bytes` of bytes that are UTF-8 (or said not to be, by the error)."""
    try:
        return _build(*scan_kineto_bytes(data, source), source)
    except RecursionError:
        # msgspec refuses JSON nested deeper than its limit with Python's RecursionError (a traceback, were it
        # left to the CLI); no trace nests more than a few levels.
        raise TraceFormatError(source, "JSON nested too deeply (hundreds of levels): not a Kineto/Chrome trace") \
            from None


def merge_kineto_parts(parts: list[KinetoPart], source: str = "", consume: bool = False) -> Timeline:
    """The timeline of a trace from all its parts (:func:`tracer.parsers.kineto_scan.scan_kineto_part`, in file
    order): the same as :func:`parse_kineto_bytes` of the whole file (:func:`tracer.parsers.kineto_scan.merge_parts`
    says how; ``consume``: the parts' columns are let go as they are merged)."""
    return _build(*merge_parts(parts, consume), source)


def load_kineto_parts(path: str | os.PathLike[str], parts: Sequence[Any]) -> Timeline:
    """``load_trace(path, cache=False)`` of a plain Kineto trace scanned in parts
    (:func:`tracer.parsers.kineto_scan.scan_kineto_part`, in file order): the parts merged, or the whole file
    parsed where a part gave None (it could not vouch for what it read): the same timeline, or the same one-line
    error, either way."""
    if any(part is None for part in parts):
        return load_trace(path, cache=False)
    p = Path(path)
    return worded(p, lambda: without_impossible_rows(merge_kineto_parts(list(parts), str(p))))


# ---------------------------------------------------------------------------------------------------------
# The reader, and its Parquet cache


def read_kineto(p: Path, *, cache: bool = True, on_cache_write: Callable[[Path], None] | None = None,
                on_raw: Callable[[bytes], None] | None = None) -> Timeline:
    """A Kineto / Chrome JSON trace (gzipped or not), through its Parquet cache when it is large
    (:func:`tracer.parsers.cache_path`)."""
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise InputNotFoundError(p, f"cannot read: {exc.strerror or exc}") from None
    # (the package's threshold and its read, looked up as the trace is read: tests change them)
    use_cache = cache and size >= parsers.CACHE_MIN_BYTES
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
    # Mapped, not read, unless the caller takes the bytes (on_raw): no copy of the file in this process's memory,
    # and the scan lets the pages it has read go (tracer.parsers.kineto_scan._let_go), so that a 1 GB trace's
    # parse never holds the whole file besides its columns.
    mapped = _mapped(p) if on_raw is None else None
    try:
        raw = cast(bytes, mapped) if mapped is not None else parsers.read_raw(p)
        if on_raw is not None:
            on_raw(raw)
        if use_cache and not digest:
            digest = digests.of_bytes(raw)
            _let_go_all(mapped)
        gzipped = raw[:2] == GZIP_MAGIC
        data = b"".join(iter_inflated(p, raw)) if gzipped else raw
        del raw
        timeline = None
        if mapped is not None and not gzipped and (n := kineto_fork.processes_for(len(mapped))) > 1:
            parts = kineto_fork.scan_forked(mapped, n)
            if all(part is not None for part in parts):  # (else the whole file here: the same timeline, or why not)
                timeline = merge_kineto_parts(cast(list[KinetoPart], parts), str(p), consume=True)
            del parts
        if timeline is None:
            timeline = parse_kineto_bytes(data, str(p))
        del data
    finally:
        if mapped is not None:
            _unmap(mapped)
    key = {**cache_key(size, digest), "source_stat": stat} if use_cache else {}
    if use_cache and _write_cache(p, timeline, key) and on_cache_write is not None:
        on_cache_write(cache_path(p))
    return timeline


def _mapped(p: Path) -> mmap.mmap | None:
    """The file mapped read-only; None where it cannot be (an empty file, a file system without mmap): then it is
    read. (A file truncated by another process while it is mapped would end this one with SIGBUS where a read
    would see short content: the price of not copying a trace of a GB, as a job's scans already pay it.)"""
    try:
        with open(p, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None


def _let_go_all(mapped: mmap.mmap | None) -> None:
    """A mapped file's pages dropped from this process's resident set (after hashing it: the scan maps in only
    the part it is at)."""
    dontneed = getattr(mmap, "MADV_DONTNEED", None)
    if mapped is not None and dontneed is not None and len(mapped):
        mapped.madvise(dontneed)


def _unmap(mapped: mmap.mmap) -> None:
    try:
        mapped.close()
    except BufferError:  # (a view still held somewhere, in an error's traceback say: the map closes when it goes)
        pass


def _stored_key(p: Path) -> dict[str, Any] | None:
    """The key a cache beside ``p`` was written with (None: no readable cache)."""
    cp = cache_path(p)
    if not cp.exists() or formats.not_a_regular_file(cp) is not None:
        return None
    try:
        key = storage.read_parquet_meta(cp).get("cache_key")  # (one read of the footer)
    except Exception:  # noqa: BLE001 - a damaged cache is never worth an error: parse afresh
        return None
    return key if isinstance(key, dict) else None


def _read_cache(p: Path, key: dict[str, Any], stored: dict[str, Any]) -> Timeline | None:
    if {k: stored.get(k) for k in key} != key:
        return None
    try:
        timeline = storage.read_timeline_parquet(cache_path(p))
    except Exception:  # noqa: BLE001 - a stale or damaged cache is never worth an error: parse afresh
        return None
    timeline.meta.source = str(p)
    timeline.meta.extra.pop("stored_as", None)
    timeline.meta.extra.pop("cache_key", None)
    return timeline


def _write_cache(p: Path, timeline: Timeline, key: dict[str, Any]) -> bool:
    """Store the cache beside ``p``; False (and nothing written) where it cannot be written, for any reason."""
    if not os.access(p.parent, os.W_OK):
        return False  # a read-only directory (a shared data set) just means no cache
    try:
        storage.write_timeline_parquet(timeline, cache_path(p), extra_meta={"cache_key": key},
                                       compression=storage.CACHE_COMPRESSION)
    except Exception:  # noqa: BLE001 - a cache is never worth failing the load of a trace that was read
        # Not only OSError and the atomic writer's UsageError for an unwritable place: metadata the trace holds
        # that the writer cannot store (orjson refuses an integer beyond 64 bits, say) once failed the whole
        # load with "unexpected content". (The atomic writer removes its temporary file on any error.)
        return False
    return True


# ---------------------------------------------------------------------------------------------------------
# The timeline from a scan


def _build(scan: Scan, trace: TraceFields, skipped: Counter[str], source: str) -> Timeline:
    """The timeline from a trace's scanned events and its top-level fields."""
    cols = scan.cols
    scan.pair_slices(skipped)
    meta = TraceMeta(format="kineto", source=source)
    meta.process_names, meta.thread_names = scan.process_names, scan.thread_names
    ignored: dict[str, str] = {}
    base_ns = 0
    if trace.baseTimeNanoseconds is not None:
        base = to_int(trace.baseTimeNanoseconds)
        if base is None:
            ignored["baseTimeNanoseconds"] = "not an integer"
        else:
            base_ns = base
    col, names = cols.arrays(base_ns)
    columns = _frame_columns(col, names, list(cols.pgs))
    row_rank = columns.pop("row_rank")
    ev = mark_by_name(build_events(columns, copy=False))  # (the scan's own arrays, held by nothing else)

    props = trace.deviceProperties
    for prop in props if type(props) is list else ():
        gpu = to_int(prop.get("id")) if type(prop) is dict else None
        if gpu is not None and 0 <= gpu < 2**15:
            meta.gpu_names[gpu] = str(prop.get("name", ""))
        else:
            ignored["deviceProperties"] = "an entry without a GPU index"
    # (in this order, each only where there is one: the order they are stored in)
    if trace.baseTimeNanoseconds is not None and base_ns:
        meta.extra["base_time_ns"] = base_ns
    if trace.cuda_driver_version is not None:
        meta.extra["cuda_driver_version"] = trace.cuda_driver_version
    if trace.cuda_runtime_version is not None:
        meta.extra["cuda_runtime_version"] = trace.cuda_runtime_version
    if trace.distributedInfo is not None:
        meta.extra["distributed_info"] = trace.distributedInfo
    # (a Chrome trace tracer exported from an nsys one: its frames name the line each was at)
    if type(trace.tracer) is dict and trace.tracer.get("frame_lines") == FRAME_LINES_CURRENT:
        meta.extra["frame_lines"] = FRAME_LINES_CURRENT
    if skipped:
        meta.extra["skipped"] = dict(sorted(skipped.items()))
    if ignored:
        meta.extra["ignored"] = ignored
    if cols.syncs:
        meta.extra["cuda_sync"] = cuda_sync_table(cols.syncs)
    # Kineto's times are Unix ns once its base time is added; without one, stamps past 2001 are epoch stamps
    # (HTA's and older traces), smaller ones count from an unknown point (the host's monotonic clock)
    if base_ns or (len(ev) and int(ev["start_ns"].iat[0]) > 10**18):
        meta.clock, meta.clock_offset_ns = CLOCK_UNIX, 0
    info = trace.distributedInfo
    if type(info) is dict and isinstance(info.get("rank"), int):
        ev["rank"] = np.int16(info["rank"])
    if len(row_rank) == len(ev) and (row_rank >= 0).any():  # tracer's Chrome export of a job: each row's own rank
        # (build_events kept the rows in the order arrays() gave them: both sort by start, then end, stably)
        ev["rank"] = np.where(row_rank >= 0, row_rank, ev["rank"].to_numpy()).astype(np.int16)
    return Timeline(validate(ev, source), meta)


def _frame_columns(col: dict[str, np.ndarray], names: list[str], pgs: list[str]) -> dict[str, Any]:
    """The scan's arrays (its columns' ``arrays``: codes and numbers, rows in time order) as the timeline's
    columns: codes made categoricals, nullable integers masked."""
    return {
        "start_ns": col["start"],
        "end_ns": col["end"],
        "kind": pd.Categorical.from_codes(col["kind"], dtype=COLUMNS["kind"]),
        "copy_kind": pd.Categorical.from_codes(col["copy"], dtype=COLUMNS["copy_kind"]),
        "name": pd.Categorical.from_codes(col["name"], categories=pd.Index(names)),
        "device": col["device"],
        "stream": col["stream"],
        "pid": col["pid"],
        "tid": col["tid"],
        "bytes": pd.arrays.IntegerArray(col["bytes"], col["bytes_na"]),
        "correlation": pd.arrays.IntegerArray(col["correlation"], col["correlation_na"]),
        "src_mem": pd.Categorical.from_codes(col["src_mem"], dtype=COLUMNS["src_mem"]),
        "dst_mem": pd.Categorical.from_codes(col["dst_mem"], dtype=COLUMNS["dst_mem"]),
        "collective": pd.Categorical.from_codes(col["collective"], dtype=COLUMNS["collective"]),
        "pg": pd.Categorical.from_codes(col["pg"], categories=pd.Index(pgs)),
        "seq": pd.arrays.IntegerArray(col["seq"], col["seq_na"]),
        "group_size": col["group_size"],
        "row_rank": col["rank"],
    }


def cuda_sync_table(entries: list[tuple[int, str, int, int, int, int]]) -> CudaSyncTable:
    """What Kineto's cuda_sync rows say beyond the timeline's columns, as columns of lists (JSON, so the Parquet
    cache keeps it): the sync's ``correlation`` (its runtime call's), its ``name`` ("Stream Wait Event",
    "Event Sync", "Stream Sync", "Context Sync"), ``device``, the ``stream`` that waits (-1: the host),
    ``wait_stream`` and ``wait_correlation``: the stream and the correlation id of the cudaEventRecord waited on.
    """
    return {
        "correlation": [e[0] for e in entries],
        "name": [e[1] for e in entries],
        "device": [e[2] for e in entries],
        "stream": [e[3] for e in entries],
        "wait_stream": [e[4] for e in entries],
        "wait_correlation": [e[5] for e in entries],
    }
