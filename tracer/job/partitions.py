"""A stored job's rank timelines (:mod:`tracer.job.store`'s dataset) read and written as Parquet files: each
rank's partition, read whole or a few columns at a time, and each rank's file written by a worker into the
dataset being built.

Imports tracer.files.storage, so pandas and pyarrow: the dataset's layout and manifest, which a job's first open
reads before pandas is imported, are :mod:`tracer.job.store`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracer.files.storage import CACHE_COMPRESSION, read_timeline_parquet, write_timeline_parquet
from tracer.job.store import MANIFEST, RankEntry, part_file, partition_file, read_manifest
from tracer.timeline import Timeline


def read_ranks(dataset: Path, entries: Sequence[RankEntry]) -> list[Timeline]:
    """The stored timelines of ``entries``' ranks (each as parsed and aligned), reading only their files."""
    return [read_partition(partition_file(dataset, e.rank)) for e in entries]


def read_partition(path: Path) -> Timeline:
    """One rank's stored timeline (:func:`tracer.job.store.partition_file`), as parsed and aligned."""
    t = read_timeline_parquet(path)
    t.meta.extra.pop("stored_as", None)
    t.meta.extra.pop("job_rank", None)
    return t


def first_start(files: Sequence[Path]) -> int | None:
    """The earliest ``start_ns`` of the partitions ``files`` (a stored job's first interval); None where they hold
    no row."""
    found = [b[0] for b in map(bounds, files) if b is not None]
    return min(found) if found else None


def bounds(path: Path) -> tuple[int, int] | None:
    """A partition's (first start, last end), from its footer's statistics where it has them (nothing else read),
    else from the columns; None where it holds no row."""
    with pq.ParquetFile(path) as pf:
        md = pf.metadata
        if not md.num_rows:
            return None
        out = []
        for name, pick in (("start_ns", min), ("end_ns", max)):
            at = pf.schema_arrow.get_field_index(name)
            stats = [
                md.row_group(g).column(at).statistics for g in range(md.num_row_groups) if md.row_group(g).num_rows
            ]
            if all(st is not None and st.has_min_max for st in stats):
                out.append(int(pick(int(st.min if pick is min else st.max) for st in stats)))
            else:
                column = pf.read(columns=[name])[name]
                out.append(int((pc.min if pick is min else pc.max)(column).as_py()))
    return out[0], out[1]


def read_near(path: Path, lo_ns: int | None, hi_ns: int | None, margin_ns: int) -> Timeline:
    """One rank's stored rows that bear on the window [``lo_ns``, ``hi_ns``) (None: open), the partition's others
    dropped as it is read (one rank's table at a time is all this holds): the rows within ``margin_ns`` of the
    window stretched over the GPU work that runs in it or that a call in it launched (a queue may run long after
    its launch), and every row of a collective (a few per step: matched across the ranks by their order where the
    trace gives no sequence numbers, they are read whole)."""

    def near(table: Any) -> Any:
        start = table["start_ns"].to_numpy()
        end = table["end_ns"].to_numpy()
        lo = np.iinfo(np.int64).min if lo_ns is None else lo_ns
        hi = np.iinfo(np.int64).max if hi_ns is None else hi_ns
        gpu = _is(table["kind"], ("kernel", "memcpy", "memset")) & (table["device"].to_numpy() >= 0)
        reach = gpu & (start < hi) & (end > lo)
        calls = _is(table["kind"], ("runtime", "driver")) & (start >= lo) & (start <= hi)
        corr = table["correlation"].fill_null(-1).to_numpy()
        pid = table["pid"].to_numpy()
        if calls.any():  # (the GPU work a call in the window launched: same process and correlation id)
            launched = pd.MultiIndex.from_arrays([pid[calls], corr[calls]])
            reach |= gpu & (corr >= 0) & pd.MultiIndex.from_arrays([pid, corr]).isin(launched)
        if reach.any():
            lo = min(lo, int(start[reach].min()))
            hi = max(hi, int(end[reach].max()))
        lo = lo - margin_ns if lo_ns is not None else lo
        hi = hi + margin_ns if hi_ns is not None else hi
        keep = (end > lo) & (start < hi) | _is(table["collective"], ("",), negate=True)
        return np.flatnonzero(keep)

    t = read_timeline_parquet(path, rows=near)
    t.meta.extra.pop("stored_as", None)
    t.meta.extra.pop("job_rank", None)
    return t


def read_comm(path: Path) -> Timeline | None:
    """One rank's stored rows of its collectives (``collective`` set: its communication kernels and the host
    records of its collectives), the partition's other rows dropped as it is read: what matching a large job's
    collectives across its ranks needs (a few rows per step); None where it has none (only that column read)."""
    with pq.ParquetFile(path) as f:
        comm = _is(f.read(columns=["collective"])["collective"], ("",), negate=True)
    if not comm.any():
        return None
    t = read_timeline_parquet(path, rows=lambda _table: np.flatnonzero(comm))
    t.meta.extra.pop("stored_as", None)
    t.meta.extra.pop("job_rank", None)
    return t


def _is(column: Any, values: Sequence[str], *, negate: bool = False) -> Any:
    """Per row of a (dictionary-encoded) string column: whether it is one of ``values`` (``negate``: a value, and
    not one of them); tested once per distinct value, not per row."""
    out = []
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            words = np.array(chunk.dictionary.to_pylist(), dtype=object)
            hit = np.isin(words, list(values)) != negate
            idx = chunk.indices.fill_null(0).to_numpy()
            flags = hit[idx] if len(words) else np.zeros(len(chunk), bool)
        else:
            flags = np.isin(chunk.to_numpy(zero_copy_only=False), list(values)) != negate
        out.append(flags & chunk.is_valid().to_numpy(zero_copy_only=False))
    return np.concatenate(out) if out else np.zeros(0, bool)


def read_columns(dataset: Path, columns: Sequence[str], ranks: Sequence[int] | None = None) -> Any:
    """Some ``columns`` of a stored job as one pandas DataFrame with ``rank``, reading only the files of
    ``ranks`` (default all) and only those columns from each (Parquet is columnar: the others are not read)."""
    manifest = read_manifest(dataset)
    if manifest is None:
        raise FileNotFoundError(dataset / MANIFEST)
    wanted = [e.rank for e in manifest.entries] if ranks is None else list(ranks)
    cols = [c for c in columns if c != "rank"]
    frames = []
    for r in wanted:
        with pq.ParquetFile(partition_file(dataset, r)) as f:
            df = f.read(columns=cols).to_pandas()
        df.insert(0, "rank", pd.Series(r, index=df.index, dtype="int16"))
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def write_part(timeline: Timeline, tmp: Path, index: int) -> bool:
    """Write one rank's timeline into the dataset being built (on a worker); False where it could not be."""
    try:
        write_timeline_parquet(timeline, part_file(tmp, index), compression=CACHE_COMPRESSION)
    except Exception:  # noqa: BLE001 - a cache is never worth failing a job that was read
        return False
    return True


def read_part(tmp: Path, index: int) -> Timeline:
    """The timeline a worker wrote into the dataset being built (:func:`write_part`)."""
    t = read_timeline_parquet(part_file(tmp, index))
    t.meta.extra.pop("stored_as", None)
    return t
