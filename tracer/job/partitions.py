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

import pandas as pd
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
