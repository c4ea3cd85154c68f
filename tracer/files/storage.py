"""Timelines on disk as Parquet: the canonical columns plus the trace's metadata, schema-versioned.

The file is plain Parquet (pandas, pyarrow, DuckDB and Spark read it); tracer's own metadata rides in the
Arrow schema's key-value metadata under ``tracer``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracer.errors import TraceFormatError
from tracer.files.atomic import atomic_path
from tracer.files.nsys_enums import mem_kinds_from_name
from tracer.timeline import COLUMNS, KINDS, MEM_KINDS, SCHEMA_VERSION, Timeline, TraceMeta, validate
from tracer.timeline.comm import mark_by_name
from tracer.vocabulary import PYTHON_FRAME_NAME

META_KEY = b"tracer"

#: The columns whose Parquet statistics are written: what a query over stored timelines filters by (DuckDB skips
#: row groups outside a time range or on another rank, device or stream).
STATISTICS_COLUMNS = ("start_ns", "end_ns", "rank", "device", "stream", "pid", "tid")

#: Columns a later timeline schema added, and the version that did: a file written before has none, and they are
#: derived on reading (:func:`_added_columns`).
ADDED_COLUMNS: dict[str, int] = {"src_mem": 2, "dst_mem": 2, "collective": 3, "pg": 3, "seq": 3, "group_size": 3}


#: How a cache is compressed (a trace's cache, a job's partitions): written on every first open, read back on
#: every later one. Snappy writes a 102 MB rank's 234k rows in 0.029 s against zstd's 0.053 s (reads: 0.013 s
#: either way) for 3.3 MB against 1.5 MB (docs/performance.md); what a user keeps (a run, an export) is zstd.
CACHE_COMPRESSION = "snappy"


def write_timeline_parquet(
    timeline: Timeline, path: str | os.PathLike[str], extra_meta: dict[str, Any] | None = None,
    compression: str = "zstd",
) -> None:
    """Write ``timeline`` to ``path`` atomically (Parquet compressed with ``compression``, tracer's metadata in
    its schema)."""
    table = pa.Table.from_pandas(timeline.events, preserve_index=False)
    meta = timeline.meta.to_dict()
    if extra_meta:
        meta.update(extra_meta)
    md = dict(table.schema.metadata or {})
    md[META_KEY] = orjson.dumps(meta, default=str)
    table = table.replace_schema_metadata(md)
    categorical = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
    with atomic_path(path) as tmp:
        # Dictionary pages only for the categorical columns (a dictionary over start times or correlation ids is
        # as long as the column and costs its encoding for nothing), and statistics only on the columns a query
        # filters by (string min/max of names cost more than the rest of the write): on a 102 MB rank's 234k
        # rows, 0.071 → 0.045 s and 1.9 → 1.5 MB (docs/performance.md).
        pq.write_table(table, tmp, compression=compression, use_dictionary=categorical,
                       write_statistics=[c for c in STATISTICS_COLUMNS if c in table.column_names])


def read_parquet_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """tracer's metadata stored in a Parquet timeline (empty if the file has none)."""
    md = pq.read_schema(path).metadata or {}
    raw = md.get(META_KEY)
    return orjson.loads(raw) if raw else {}


def read_timeline_parquet(path: str | os.PathLike[str] | BinaryIO, *,
                          rows: Callable[[Any], Any] | None = None) -> Timeline:
    """Read a Parquet timeline written by :func:`write_timeline_parquet` (or any file with its columns; or such a
    file's bytes, in memory). ``rows``:
    given the file's table (pyarrow), the positions of the rows to keep, in order; their index in the timeline is
    their position in the file (default: every row, indexed from 0)."""
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
    missing = [c for c in COLUMNS if c not in table.column_names and c not in ADDED_COLUMNS]
    if missing:
        raise TraceFormatError(source, f"Parquet file is not a tracer timeline (missing columns {missing})")
    table = table.select([c for c in COLUMNS if c in table.column_names])
    kept = None
    if rows is not None:
        kept = np.asarray(rows(table), dtype=np.int64)
        table = table.take(pa.array(kept))
    # split_blocks: one array per column rather than 2-D blocks that pandas would copy into and out of.
    df = table.to_pandas(split_blocks=True)
    del table
    # Parquet keeps categories only as far as the data used them; restore the canonical dtypes. (copy=False:
    # columns whose dtype is already right are taken as they are, not copied once more.)
    columns = {c: df[c].astype(t) if c != "name" else df[c].astype("category") for c, t in COLUMNS.items()
               if c in df.columns}
    absent = [c for c in COLUMNS if c not in columns]
    if absent:
        columns.update(_added_columns(columns, absent))
        columns = {c: columns[c] for c in COLUMNS}
    df = pd.DataFrame(columns, copy=False)
    if kept is not None:
        df.index = pd.Index(kept)
    if "collective" in absent:
        df = mark_by_name(df)  # (schema < 3: communication from the names, as a parse of the trace would say)
    if version < 4:
        python_frames_of_cpu_ops(df)  # (schema < 4 filed torch.profiler's Python frames as cpu_op)
    meta = TraceMeta.from_dict(meta_dict)
    meta.extra.setdefault("stored_as", "parquet")
    # the footer's other top-level keys (a cache's cache_key, an export's exported_by ...) join extra
    meta.add_extra({k: v for k, v in meta_dict.items() if k not in _OWN_KEYS})
    return Timeline(validate(df, source), meta)


#: The top-level keys of the footer that TraceMeta reads itself; the others are copied into its extra. (clock and
#: clock_offset_ns came later and are copied too: ``TraceExtra.clock``.)
_OWN_KEYS = ("format", "source", "gpu_names", "process_names", "thread_names", "extra", "schema_version")


def python_frames_of_cpu_ops(events: pd.DataFrame) -> None:
    """Make ``kind`` python, in place, for the cpu_op rows of a timeline of schema < 4 named like a Python frame
    (:data:`tracer.vocabulary.PYTHON_FRAME_NAME`: the python_function rows a parse then filed as cpu_op), as a
    parse today would give them. One test per distinct name."""
    kinds = events["kind"]
    codes = kinds.cat.codes.to_numpy()
    ops = codes == KINDS.index("cpu_op")
    if not ops.any():
        return
    names = events["name"].cat
    frame_name = np.array([bool(PYTHON_FRAME_NAME.match(str(n))) for n in names.categories], dtype=bool)
    if not frame_name.any():
        return
    name_codes = names.codes.to_numpy()
    hit = ops & (name_codes >= 0) & frame_name[np.maximum(name_codes, 0)]  # (code -1: no name, not a frame)
    if hit.any():
        new = codes.copy()
        new[hit] = KINDS.index("python")
        events["kind"] = pd.Categorical.from_codes(new, dtype=kinds.dtype)


def _added_columns(columns: dict[str, pd.Series], absent: list[str]) -> dict[str, pd.Series]:
    """The ``absent`` columns of a file written before they existed (:data:`ADDED_COLUMNS`), as a parse today
    would give them: the memory kinds of copies and memsets from their names, which carried them until schema 2
    (Kineto's names, and the nsys parser's, which names copies as Kineto does)."""
    kinds = columns["kind"]
    n = len(kinds)
    out: dict[str, pd.Series] = {}
    for c in [c for c in absent if c not in ("src_mem", "dst_mem")]:
        # communication columns: empty here, filled from the names once the frame is whole (read_timeline_parquet)
        dtype = COLUMNS[c]
        if c == "pg":
            value: Any = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[""])
        elif isinstance(dtype, pd.CategoricalDtype):
            value = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), dtype=dtype)
        elif c == "seq":
            value = pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
        else:
            value = np.zeros(n, dtype=dtype)
        out[c] = pd.Series(value, index=kinds.index)
    absent = [c for c in absent if c in ("src_mem", "dst_mem")]
    codes = {c: np.zeros(n, dtype=np.int8) for c in absent}
    names = columns["name"]
    for kind in ("memcpy", "memset"):
        rows = np.flatnonzero((kinds == kind).to_numpy())
        if not rows.size:
            continue
        sub = names.iloc[rows].cat.remove_unused_categories()
        per_name = [mem_kinds_from_name(str(v), kind) for v in sub.cat.categories]
        for c, side in (("src_mem", 0), ("dst_mem", 1)):
            if c in codes:
                lookup = np.array([MEM_KINDS.index(p[side]) for p in per_name], dtype=np.int8)
                codes[c][rows] = lookup[sub.cat.codes.to_numpy()]
    out.update({c: pd.Series(pd.Categorical.from_codes(codes[c], dtype=COLUMNS[c]), index=kinds.index)
                for c in absent})
    return out
