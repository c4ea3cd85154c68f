"""Kineto JSON parsing on hand-made traces: what real traces hold, one quirk per test."""

from __future__ import annotations

import gzip
import subprocess
import sys

import orjson
import pandas as pd
import pytest

from tracer.parsers import detect_format, load_trace
from tracer.parsers.kineto import parse_kineto_bytes
from tracer.parsers.kineto_scan import copy_kind_from_name
from tracer.timeline import COLUMNS


def kernel(ts: float, dur: float, stream: int = 7, device: int = 0, corr: int = 1, name: str = "k") -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": stream, "correlation": corr}}


def trace(*events: dict, **top) -> bytes:
    return orjson.dumps({"schemaVersion": 1, "traceEvents": list(events), **top})


def test_columns_and_dtypes():
    tl = parse_kineto_bytes(trace(kernel(1.0, 2.0)), "t")
    assert list(tl.events.columns) == list(COLUMNS)
    assert tl.events["start_ns"].dtype == "int64"


def test_times_are_exact_integer_ns_with_base_time():
    base = 1_790_857_026_000_000_000
    tl = parse_kineto_bytes(trace(kernel(5364401446499.209, 2621.068), baseTimeNanoseconds=base), "t")
    row = tl.events.iloc[0]
    assert row["start_ns"] == base + 5364401446499209
    assert row["end_ns"] - row["start_ns"] == 2621068


def test_overlapping_and_zero_length_events_on_one_lane_are_kept():
    tl = parse_kineto_bytes(trace(kernel(0, 10), kernel(5, 10, corr=2), kernel(20, 0, corr=3)), "t")
    k = tl.events[tl.events["kind"] == "kernel"]
    assert len(k) == 3
    assert (k["end_ns"] - k["start_ns"]).tolist() == [10_000, 10_000, 0]


def test_missing_args_and_unknown_categories():
    events = [
        {"ph": "X", "cat": "kernel", "name": "noargs", "pid": 0, "tid": 9, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "brand_new_category", "name": "x", "pid": 1, "tid": 1, "ts": 2, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 3},  # no dur
        {"ph": "X", "name": "no category", "pid": 1, "tid": 1, "ts": 4, "dur": 1},
    ]
    ev = parse_kineto_bytes(trace(*events), "t").events.set_index("name")
    # a kernel without args still lands on its device and stream (Kineto's pid/tid)
    assert (ev.loc["noargs", "device"], ev.loc["noargs", "stream"]) == (0, 9)
    assert pd.isna(ev.loc["noargs", "correlation"])
    assert ev.loc["x", "kind"] == "other"
    assert ev.loc["aten::mm", "end_ns"] == ev.loc["aten::mm", "start_ns"]
    assert ev.loc["no category", "kind"] == "other"


def test_memcpy_direction_bytes_and_memset():
    events = [
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 21, "ts": 1,
         "dur": 1, "args": {"device": 0, "stream": 21, "correlation": 5, "bytes": 64000000}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP (Device -> Device)", "pid": 1, "tid": 3, "ts": 1,
         "dur": 1, "args": {"device": 1, "stream": 3, "correlation": 6, "bytes": 8}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 3, "dur": 1,
         "args": {"device": 0, "stream": 7, "correlation": 7, "bytes": 4}},
    ]
    ev = parse_kineto_bytes(trace(*events), "t").events
    copies = ev[ev["kind"] == "memcpy"].set_index("device")
    assert copies.loc[0, "copy_kind"] == "DtoH" and copies.loc[0, "bytes"] == 64000000
    assert copies.loc[1, "copy_kind"] == "PtoP"
    assert ev[ev["kind"] == "memset"]["bytes"].tolist() == [4]


def test_copy_kind_names():
    assert copy_kind_from_name("Memcpy HtoD (Pageable -> Device)") == "HtoD"
    assert copy_kind_from_name("Memcpy DtoD (Device -> Device)") == "DtoD"
    assert copy_kind_from_name("Memcpy AtoH") == "DtoH"
    assert copy_kind_from_name("Memcpy weird") == "Other"


def test_metadata_names_and_skipped_profiler_spans():
    events = [
        {"name": "process_name", "ph": "M", "pid": 424, "tid": 0, "args": {"name": "python3"}},
        {"name": "thread_name", "ph": "M", "pid": 424, "tid": 425, "args": {"name": "autograd"}},
        {"ph": "X", "cat": "Trace", "ts": 1, "dur": 100, "pid": "Spans", "tid": "PyTorch Profiler", "name": "P"},
        {"ph": "s", "id": 3146, "pid": 424, "tid": 424, "ts": 1, "cat": "ac2g", "name": "ac2g"},
        {"ph": "i", "s": "g", "pid": "Traces", "tid": "T", "ts": 1, "name": "Iteration Start"},
        kernel(1, 1),
    ]
    tl = parse_kineto_bytes(trace(*events, deviceProperties=[{"id": 0, "name": "NVIDIA H200"}]), "t")
    assert tl.meta.process_names == {424: "python3"}
    assert tl.meta.thread_names == {"424:425": "autograd"}
    assert tl.meta.gpu_names == {0: "NVIDIA H200"}
    assert tl.events["kind"].tolist() == ["kernel"]


def test_bare_array_chrome_trace(tmp_path):
    p = tmp_path / "array.json"
    p.write_bytes(orjson.dumps([kernel(1, 1), kernel(3, 1, corr=2)]))
    assert detect_format(p) == "kineto"
    assert len(load_trace(p).events) == 2


def test_format_is_detected_from_content_not_suffix(tmp_path, data_dir):
    odd = tmp_path / "trace.bin"
    odd.write_bytes((data_dir / "two_streams.json.gz").read_bytes())
    assert detect_format(odd) == "kineto"
    sqlite_named_json = tmp_path / "export.json"
    sqlite_named_json.write_bytes(gzip.decompress((data_dir / "nsys_compute_copy.sqlite.gz").read_bytes()))
    assert detect_format(sqlite_named_json) == "nsys-sqlite"
    assert load_trace(sqlite_named_json).meta.format == "nsys"


@pytest.mark.slow
def test_parquet_cache_beside_big_traces(tmp_path, data_dir, monkeypatch):
    import tracer.parsers as parsers

    src = tmp_path / "mlp.json.gz"
    src.write_bytes((data_dir / "mlp_train_200.json.gz").read_bytes())
    monkeypatch.setattr(parsers, "CACHE_MIN_BYTES", 0)
    fresh = load_trace(src)
    cache = parsers.cache_path(src)
    assert cache.exists()
    cached = load_trace(src)
    pd.testing.assert_frame_equal(fresh.events, cached.events)
    assert cached.meta.gpu_names == fresh.meta.gpu_names
    assert cached.meta.source == str(src)
    # a changed trace invalidates the cache: replace it with a smaller trace
    src.write_bytes((data_dir / "two_streams.json.gz").read_bytes())
    assert len(load_trace(src).events) == len(load_trace(data_dir / "two_streams.json.gz", cache=False).events)
    # cache=False neither reads nor writes it
    cache.unlink()
    load_trace(src, cache=False)
    assert not cache.exists()


def test_a_cache_written_by_an_older_parser_is_not_served(tmp_path, data_dir, monkeypatch):
    import tracer.parsers as parsers

    src = tmp_path / "two.json.gz"
    src.write_bytes((data_dir / "two_streams.json.gz").read_bytes())
    monkeypatch.setattr(parsers, "CACHE_MIN_BYTES", 0)
    right = load_trace(src)
    # an older tracer's cache: same file, same size and mtime, but other figures
    monkeypatch.setattr(parsers, "KINETO_PARSER_VERSION", parsers.KINETO_PARSER_VERSION - 1)
    stale = parsers.cache_path(src)
    stale.unlink()
    wrong = right.events.iloc[:10].reset_index(drop=True)
    monkeypatch.setattr("tracer.parsers.kineto.parse_kineto_bytes", lambda data, source="": type(right)(wrong, right.meta))
    assert len(load_trace(src).events) == 10  # written by the "old" parser
    monkeypatch.undo()
    monkeypatch.setattr(parsers, "CACHE_MIN_BYTES", 0)
    assert len(load_trace(src).events) == len(right.events)


@pytest.mark.slow
def test_importing_parsers_and_cli_does_not_import_dash():
    code = (
        "import sys, tracer.parsers, tracer.analysis.summary, tracer.cli; "
        "bad = [m for m in ('dash', 'plotly') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_ts_beyond_int64_ns_is_skipped_and_counted_not_a_wrong_number(tmp_path):
    """Regression: ts 1e20 µs used to become a garbage start and a 0-ns kernel that was still counted. Since
    issue 14 the event is left out and counted (the rest of the trace is still read); --strict refuses it."""
    from tests.conftest import cli_main

    p = tmp_path / "huge.json"
    p.write_bytes(trace(kernel(1e20, 5.0), kernel(1.0, 2.0, corr=2)))
    proc = cli_main("summary", "--json", str(p))
    assert proc.returncode == 0
    assert orjson.loads(proc.stdout)["devices"]["0"]["kernels"] == 1
    assert proc.stderr == f"tracer: warning: {p}: 1 event skipped: ts beyond int64 ns\n"
    proc = cli_main("summary", "--strict", str(p))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "ts beyond int64 ns (--strict)" in proc.stderr


def test_base_time_overflow_is_an_error(tmp_path):
    from tests.conftest import cli_main

    p = tmp_path / "base.json"
    p.write_bytes(trace(kernel(9e15 - 10, 1.0), baseTimeNanoseconds=9_000_000_000_000_000_000))
    proc = cli_main("summary", str(p))
    assert proc.returncode == 2 and "int64" in proc.stderr


def test_gpu_row_without_correlation_keeps_the_pid_the_chrome_export_kept():
    """Regression: rows with args.tracer_pid but no correlation id lost their pid (set to -1)."""
    ev = {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 1, "dur": 1,
          "args": {"device": 0, "stream": 7, "tracer_pid": 709}}
    out = parse_kineto_bytes(trace(ev), "t").events
    assert out["pid"].tolist() == [709]
