"""Parquet export: the timeline and its metadata, read back by tracer, pandas and DuckDB."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tracer.analysis.summary import summarize
from tracer.exporters import export_timeline
from tracer.parsers import load_trace
from tracer.timeline import COLUMNS

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    timeline = load_trace(DATA / "copy_side_stream.json.gz", cache=False)
    out = export_timeline(timeline, tmp_path_factory.mktemp("pq") / "t.parquet").path
    return timeline, out


def test_tracer_reads_back_the_same_timeline_and_summary(exported) -> None:
    timeline, out = exported
    back = load_trace(out)
    pd.testing.assert_frame_equal(back.events, timeline.events)
    assert back.meta.gpu_names == timeline.meta.gpu_names
    assert back.meta.thread_names == timeline.meta.thread_names
    a, b = summarize(timeline), summarize(back)
    skip = ("format", "source")
    assert {k: v for k, v in b.items() if k not in skip} == {k: v for k, v in a.items() if k not in skip}


def test_summary_names_the_parquet_file_it_read_not_the_original_trace(exported) -> None:
    # `tracer summary t.parquet` used to head its table with the path of the trace the timeline was first
    # parsed from (another file, perhaps on another machine)
    timeline, out = exported
    back = load_trace(out)
    assert summarize(back)["source"] == back.meta.source == str(out)
    assert back.meta.extra["parsed_from"] == timeline.meta.source == str(DATA / "copy_side_stream.json.gz")


def test_pandas_reads_columns_and_metadata(exported) -> None:
    timeline, out = exported
    df = pd.read_parquet(out)
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == len(timeline.events)
    assert int((df.loc[df["kind"] == "memcpy", "bytes"]).sum()) == 50 * 64_000_000
    meta = json.loads(pq.read_schema(out).metadata[b"tracer"])
    assert meta["format"] == "kineto" and meta["gpu_names"] == {"0": "NVIDIA H200"}
    assert meta["schema_version"] >= 1 and meta["exported_by"].startswith("tracer ")


def test_duckdb_queries_it(exported) -> None:
    duckdb = pytest.importorskip("duckdb")
    _, out = exported
    rows = duckdb.sql(
        f"SELECT kind, count(*) AS n, sum(end_ns - start_ns) AS ns FROM read_parquet('{out}') "
        "WHERE kind IN ('kernel', 'memcpy') GROUP BY kind ORDER BY kind"
    ).fetchall()
    assert rows == [("kernel", 50, 130_922_833), ("memcpy", 50, 57_973_731)]


def test_time_and_lane_columns_carry_statistics_and_only_categories_a_dictionary(exported) -> None:
    # what a query filters by can skip row groups (DuckDB reads the min/max); a dictionary over start times or
    # correlation ids would be as long as the column and cost its encoding for nothing
    from tracer.files.storage import STATISTICS_COLUMNS

    _, out = exported
    group = pq.ParquetFile(out).metadata.row_group(0)
    columns = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    for name, col in columns.items():
        categorical = str(COLUMNS[name]) == "category" or name == "name"
        assert ("RLE_DICTIONARY" in col.encodings) == categorical, name
        assert col.is_stats_set == (name in STATISTICS_COLUMNS), name
    stats = columns["start_ns"].statistics
    timeline = load_trace(out)
    assert (stats.min, stats.max) == (int(timeline.events["start_ns"].min()), int(timeline.events["start_ns"].max()))


def _codecs(path: Path) -> set[str]:
    group = pq.ParquetFile(path).metadata.row_group(0)
    return {group.column(i).compression for i in range(group.num_columns)}


def test_what_a_user_keeps_is_zstd_and_a_cache_snappy(exported, tmp_path: Path, monkeypatch) -> None:
    """An export (and a run's timeline) is zstd, the smallest; a trace's cache and a job's partitions, written on
    every first open, are snappy, the fastest to write (docs/performance.md)."""
    import gzip

    import tracer.job.store as jobstore
    import tracer.parsers as parsers
    from tracer.job.load import load_job

    _, out = exported
    assert _codecs(out) == {"ZSTD"}
    trace = tmp_path / "t.json"
    trace.write_bytes(gzip.decompress((DATA / "copy_side_stream.json.gz").read_bytes()))
    monkeypatch.setattr(parsers, "CACHE_MIN_BYTES", 0)
    load_trace(trace)
    assert _codecs(parsers.cache_path(trace)) == {"SNAPPY"}
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        (job / f"rank-{r}.json").write_bytes(trace.read_bytes())
    monkeypatch.setattr(jobstore, "CACHE_MIN_BYTES", 0)
    written: list[Path] = []
    load_job(sorted(job.glob("rank-*.json")), scheduler="sync", on_cache_write=written.append)
    parts = sorted(written[0].rglob("*.parquet"))
    assert len(parts) == 2 and all(_codecs(p) == {"SNAPPY"} for p in parts)
