"""Timelines on disk as Parquet: the canonical columns plus the trace's metadata, schema-versioned.

The file is plain Parquet (pandas, pyarrow, DuckDB and Spark read it); tracer's own metadata rides in the
Arrow schema's key-value metadata under ``tracer``.
"""

from __future__ import annotations

import os
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracer.errors import TraceFormatError
from tracer.io import atomic_path
from tracer.timeline import COLUMNS, SCHEMA_VERSION, Timeline, TraceMeta, validate

META_KEY = b"tracer"


def write_timeline_parquet(
    timeline: Timeline, path: str | os.PathLike[str], extra_meta: dict[str, Any] | None = None
) -> None:
    """Write ``timeline`` to ``path`` atomically (zstd-compressed Parquet with tracer metadata)."""
    table = pa.Table.from_pandas(timeline.events, preserve_index=False)
    meta = timeline.meta.to_dict()
    if extra_meta:
        meta.update(extra_meta)
    md = dict(table.schema.metadata or {})
    md[META_KEY] = orjson.dumps(meta, default=str)
    table = table.replace_schema_metadata(md)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_parquet_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """tracer's metadata stored in a Parquet timeline (empty if the file has none)."""
    md = pq.read_schema(path).metadata or {}
    raw = md.get(META_KEY)
    return orjson.loads(raw) if raw else {}


def read_timeline_parquet(path: str | os.PathLike[str]) -> Timeline:
    """Read a Parquet timeline written by :func:`write_timeline_parquet` (or any file with its columns)."""
    source = str(path)
    try:
        # ParquetFile rather than pq.read_table: the same read without importing pyarrow.dataset (cloud file
        # systems, Acero ...), which costs ~7 ms on every cold reload, a fifth of reloading a 100 MB trace.
        with pq.ParquetFile(path) as f:
            table = f.read()
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceFormatError(source, f"not a readable Parquet file: {exc}") from None
    md = table.schema.metadata or {}
    meta_dict = orjson.loads(md[META_KEY]) if META_KEY in md else {"format": "parquet"}
    version = int(meta_dict.get("schema_version", SCHEMA_VERSION))
    if version > SCHEMA_VERSION:
        raise TraceFormatError(
            source, f"written by a newer tracer (timeline schema {version} > {SCHEMA_VERSION}); upgrade tracer"
        )
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise TraceFormatError(source, f"Parquet file is not a tracer timeline (missing columns {missing})")
    # split_blocks: one array per column rather than 2-D blocks that pandas would copy into and out of.
    df = table.select(list(COLUMNS)).to_pandas(split_blocks=True)
    del table
    # Parquet keeps categories only as far as the data used them; restore the canonical dtypes. (copy=False:
    # columns whose dtype is already right are taken as they are, not copied once more.)
    columns = {c: df[c].astype(t) if c != "name" else df[c].astype("category") for c, t in COLUMNS.items()}
    df = pd.DataFrame(columns, copy=False)
    meta = TraceMeta.from_dict(meta_dict)
    meta.extra.setdefault("stored_as", "parquet")
    for k in meta_dict:
        if k not in ("format", "source", "gpu_names", "process_names", "thread_names", "extra", "schema_version"):
            meta.extra[k] = meta_dict[k]
    return Timeline(validate(df, source), meta)
