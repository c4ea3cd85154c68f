"""Hostile and broken input (issue 14): every input is a correct parse or a one-line error, never a traceback,
never exit-0 nonsense (a negative or overflowing figure). Each test names what it guards against; each failed
before the change it came with."""

from __future__ import annotations

import gzip
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from tests.conftest import cli_main
from tracer import parsers
from tracer.analysis.summary import summarize
from tracer.errors import TraceFormatError, UsageError
from tracer.files import digests
from tracer.files.storage import write_timeline_parquet
from tracer.parsers import cache_path, load_trace
from tracer.parsers.kineto import parse_kineto_bytes
from tracer.parsers.kineto_scan import _CHUNK_BYTES
from tracer.parsers.load import without_impossible_rows
from tracer.timeline import Timeline, TraceMeta, build_events


def memcpy(ts: float | str, dur: float | str, nbytes: object, corr: int = 1) -> dict:
    return {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
            "ts": ts, "dur": dur, "args": {"device": 0, "stream": 7, "bytes": nbytes, "correlation": corr}}


def kernel(ts: float | str, dur: float | str, corr: int = 1) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr}}


def trace(*events: dict, **top: object) -> bytes:
    # (json, not orjson: sizes beyond 64 bits must reach the file)
    return json.dumps({"traceEvents": list(events), **top}, separators=(",", ":")).encode()


def one_line_error(proc, path: Path, words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"tracer: error: {path}: ") and words in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


# 1. values outside what a trace can mean: skipped and counted, never summed -------------------------------


@pytest.mark.slow
def test_bytes_near_2_63_are_skipped_not_summed_into_a_negative_total(tmp_path: Path) -> None:
    """Regression: two copies of 2**63 - 10 bytes summed to -9.2e18 bytes (-5.9e12 GB/s), exit 0."""
    p = tmp_path / "wrap.json"
    p.write_bytes(trace(memcpy(10, 5, 2**63 - 10, 1), memcpy(20, 5, 2**63 - 10, 2), memcpy(30, 5, 1000, 3)))
    proc = cli_main("summary", "--json", str(p))
    assert proc.returncode == 0
    assert proc.stderr == f"tracer: warning: {p}: 2 events skipped: bytes over 256 TiB\n"
    (copy,) = orjson.loads(proc.stdout)["copies"]
    assert (copy["count"], copy["bytes"], copy["gb_per_s"]) == (1, 1000, 0.2)
    one_line_error(cli_main("summary", "--strict", str(p)), p, "bytes over 256 TiB (--strict)")


@pytest.mark.parametrize(
    "event, reason",
    [
        (memcpy(10, 5, -1000), "bytes negative"),
        (memcpy(10, -5, 100), "dur negative"),
        (memcpy(10, "-0.001", 100), "dur negative"),  # the exact-decimal path (a string) says the same
        (memcpy(10, 5, 2**64), "bytes over 256 TiB"),  # beyond int64: was read as "no size"
        (memcpy(10, 5, "99999999999999999999999"), "bytes over 256 TiB"),
        (memcpy(10, 5, 2**48 + 1), "bytes over 256 TiB"),
        (kernel(1e20, 5), "ts beyond int64 ns"),
        (kernel("-1e20", 5), "ts beyond int64 ns"),
        (kernel(10, 1e20), "ts + dur beyond int64 ns"),  # (was said as the ts's fault)
        (kernel(10, "1e20"), "ts + dur beyond int64 ns"),
    ],
)
def test_impossible_values_skip_their_event_with_a_reason(event: dict, reason: str) -> None:
    tl = parse_kineto_bytes(trace(event, kernel(1, 2, corr=9)), "t")
    assert tl.meta.extra["skipped"] == {reason: 1}
    assert tl.events["name"].astype(str).tolist() == ["k"]


def test_a_copy_of_256_tib_is_still_a_copy() -> None:
    tl = parse_kineto_bytes(trace(memcpy(10, 5, 2**48)), "t")
    assert "skipped" not in tl.meta.extra and tl.events["bytes"].tolist() == [2**48]


def _parquet(path: Path, rows: Sequence[tuple[int, int, object]]) -> Path:
    """A stored timeline of memcpys (start, end, bytes), written without any parser's checks."""
    n = len(rows)
    ev = build_events({
        "start_ns": np.array([r[0] for r in rows], dtype=np.int64),
        "end_ns": np.array([r[1] for r in rows], dtype=np.int64),
        "kind": ["memcpy"] * n, "copy_kind": ["HtoD"] * n, "name": ["m"] * n,
        "device": [0] * n, "stream": [1] * n,
        "bytes": pd.array([r[2] for r in rows], dtype="Int64"),
    })
    write_timeline_parquet(Timeline(ev, TraceMeta(format="kineto")), path)
    return path


@pytest.mark.slow
def test_the_loader_drops_impossible_rows_of_any_format_and_counts_them(tmp_path: Path) -> None:
    """Regression: a Parquet timeline (or an nsys export) with such rows was summed as it was, or refused whole
    ("timeline has intervals that end before they start")."""
    p = _parquet(tmp_path / "t.parquet", [
        (0, 1000, 100),  # the one good row
        (10, 5, 100),  # end before start
        (-(2**63), 0, 100), (5, 2**63 - 1, 100),  # times beyond ±2**62 ns
        (20, 30, -5),  # negative bytes
        (40, 50, 2**60),  # no copy is 1 EiB
    ])
    tl = load_trace(p)
    assert tl.meta.extra["skipped"] == {
        "bytes negative": 1, "bytes over 256 TiB": 1, "end before start": 1, "time beyond ±2**62 ns": 2,
    }
    assert tl.events[["start_ns", "end_ns"]].values.tolist() == [[0, 1000]]
    proc = cli_main("summary", "--json", str(p))
    assert proc.returncode == 0 and orjson.loads(proc.stdout)["copies"][0]["bytes"] == 100
    assert proc.stderr.startswith(f"tracer: warning: {p}: 5 events skipped: bytes negative (1), ")
    assert cli_main("summary", "--strict", str(p)).returncode == 2


def test_a_total_beyond_int64_is_refused_not_printed(tmp_path: Path) -> None:
    """Each copy is within range, but their sizes or durations sum past what int64 holds: the sum wrapped to
    a negative figure. Now the analysis refuses the figure, and the CLI says so in one line."""
    big = 2**62 - 1
    rows = [(-big, big, 2**48)] * 3
    with pytest.raises(TraceFormatError, match="beyond what any trace can mean"):
        summarize(load_trace(_parquet(tmp_path / "a.parquet", rows)))
    p = _parquet(tmp_path / "b.parquet", rows)
    one_line_error(cli_main("summary", str(p)), p, "copy time (ns) of 2.77e+19 is beyond what any trace can mean")


# 2. one rule for a duplicated "traceEvents", whatever the file's size ---------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("pad_events", [0, 3 * _CHUNK_BYTES // 100], ids=["small", "chunked"])
def test_two_trace_events_arrays_are_refused_by_both_decoders(tmp_path: Path, pad_events: int) -> None:
    """Regression: the chunked decoder (files over ~512 KB) kept the first array, the whole decoder the last."""
    first = [kernel(i, 1, corr=i) for i in range(1, pad_events + 2)]
    body = orjson.dumps({"traceEvents": first})[:-1] + b',"traceEvents":' + orjson.dumps([kernel(0, 1)]) + b"}"
    assert (len(body) > 2 * _CHUNK_BYTES) == bool(pad_events)
    many = orjson.dumps([kernel(i, 1, corr=i) for i in range(1, 3 * _CHUNK_BYTES // 100)])
    for other in (
        body,
        # a first key that is no array sat in the chunked decoder's head, unseen
        b'{"traceEvents":null,' + orjson.dumps({"traceEvents": first})[1:],
        body[:-1] + b',"traceEvents":' + many + b"}",  # a second array as long as the first
    ):
        with pytest.raises(TraceFormatError, match="two 'traceEvents' arrays"):
            parse_kineto_bytes(other, "t")
    p = tmp_path / "dup.json"
    p.write_bytes(body)
    one_line_error(cli_main("summary", str(p)), p, "two 'traceEvents' arrays at the top level")


def test_a_trace_events_key_nested_in_args_is_not_a_duplicate() -> None:
    ev = kernel(1, 2) | {"args": {"device": 0, "stream": 7, "traceEvents": [1, 2]}}
    big = [kernel(i, 1, corr=i) for i in range(2, 2 * _CHUNK_BYTES // 200)]
    for events in ([ev], [ev, *big], [*big, ev]):
        assert len(parse_kineto_bytes(trace(*events), "t").events) == len(events)


# 3. the Parquet cache follows the content, and says where it is -------------------------------------------


def _big_trace(path: Path, n_kernels: int) -> Path:
    """A trace over the cache's 4 MB threshold (padded with JSON whitespace)."""
    body = trace(*(kernel(10 * i, 5, corr=i) for i in range(1, n_kernels + 1)))
    path.write_bytes(body[:-1] + b" " * (parsers.CACHE_MIN_BYTES + 1 - len(body)) + b"}")
    return path


def test_a_trace_edited_in_place_with_its_mtime_restored_is_parsed_afresh(tmp_path: Path) -> None:
    """Regression: the cache was keyed on size and mtime, so `cp -p` / `rsync -t` of an edited trace of the
    same size served the old figures."""
    p = _big_trace(tmp_path / "t.json", 3)
    assert len(load_trace(p).events) == 3 and cache_path(p).exists()
    stat = p.stat()
    edited = p.read_bytes().replace(b'"ts":30,"dur":5', b'"ts":30,"dur":7')
    assert len(edited) == stat.st_size
    p.write_bytes(edited)
    os.utime(p, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    ev = load_trace(p).events
    assert (ev["end_ns"] - ev["start_ns"]).tolist() == [5000, 5000, 7000]
    os.utime(p, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a touch alone changes nothing a parse sees
    before = cache_path(p).stat().st_mtime_ns
    assert len(load_trace(p).events) == 3 and cache_path(p).stat().st_mtime_ns == before


def test_an_untouched_trace_is_served_from_the_cache_without_hashing_it(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # same inode and ctime as when the cache was written: no write happened since, so no hash is needed
    p = _big_trace(tmp_path / "t.json", 3)
    load_trace(p)
    monkeypatch.setattr(digests, "file_digest", lambda _: pytest.fail("hashed an untouched trace"))
    monkeypatch.setattr(parsers, "read_raw", lambda _: pytest.fail("parsed an untouched trace"))
    assert len(load_trace(p).events) == 3


@pytest.mark.slow
def test_summary_says_once_that_it_wrote_a_cache_and_no_cache_writes_none(tmp_path: Path) -> None:
    p = _big_trace(tmp_path / "t.json", 2)
    proc = cli_main("summary", "--no-cache", "--json", str(p))
    assert proc.returncode == 0 and proc.stderr == "" and not cache_path(p).exists()
    proc = cli_main("summary", "--json", str(p))
    assert proc.stderr == f"tracer: note: cached the parsed timeline at {cache_path(p)}; --no-cache to skip\n"
    proc = cli_main("summary", "--json", str(p))  # read from the cache: nothing more to say
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize("command", ["diff", "export"])
def test_diff_and_export_say_too_that_they_wrote_a_cache(tmp_path: Path, command: str) -> None:
    # Regression: only summary and sql passed the note; diff and export wrote the hidden file without a word.
    p = _big_trace(tmp_path / "t.json", 2)
    args = [str(p), str(p)] if command == "diff" else [str(p), "-o", str(tmp_path / "t.parquet")]
    proc = cli_main(command, *args)
    assert proc.returncode == 0, proc.stderr
    note = f"tracer: note: cached the parsed timeline at {cache_path(p)}; --no-cache to skip"
    assert proc.stderr.splitlines().count(note) == 1


def test_no_cache_where_the_directory_is_not_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the atomic writer words an unwritable directory as a UsageError, which escaped `except
    OSError` and failed the whole summary of a readable trace."""
    p = _big_trace(tmp_path / "t.json", 2)
    written: list[Path] = []
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # (the os module tracer.parsers.kineto uses)
    assert len(load_trace(p, on_cache_write=written.append).events) == 2
    assert not cache_path(p).exists() and written == []
    monkeypatch.undo()

    def refuse(*args: object, **kwargs: object) -> None:
        raise UsageError(tmp_path, "cannot write here: Read-only file system")

    monkeypatch.setattr("tracer.files.storage.write_timeline_parquet", refuse)
    assert len(load_trace(p, on_cache_write=written.append).events) == 2 and written == []


# 4.-5. nesting, byte-order marks, whitespace, warnings ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "body",
    [
        b'{"traceEvents":[{"ph":"X","ts":1,"dur":1,"args":{"x":' + b"[" * 1000 + b"]" * 1000 + b"}}]}",
        b"[" * 1000 + b"]" * 1000,
        b'{"distributedInfo":' + b"[" * 1000 + b"]" * 1000 + b',"traceEvents":[]}',
    ],
    ids=["in-an-event", "bare-array", "top-level-field"],
)
def test_json_nested_1000_deep_is_one_line_not_a_recursion_error(tmp_path: Path, body: bytes) -> None:
    p = tmp_path / "deep.json"
    p.write_bytes(body)
    one_line_error(cli_main("summary", str(p)), p, "nested too deeply")


@pytest.mark.parametrize("gz", [False, True])
def test_a_utf8_byte_order_mark_is_skipped(tmp_path: Path, gz: bool) -> None:
    """Regression: the BOM passed format detection, then msgspec refused byte 0 ("invalid character")."""
    body = b"\xef\xbb\xbf" + trace(kernel(1, 2))
    p = tmp_path / ("bom.json.gz" if gz else "bom.json")
    p.write_bytes(gzip.compress(body) if gz else body)
    assert load_trace(p).events["name"].astype(str).tolist() == ["k"]


@pytest.mark.slow
def test_whitespace_only_files_say_so(tmp_path: Path) -> None:
    """Regression: a .gz of whitespace said "unrecognised content" (or "holds no 'traceEvents'")."""
    for name, body in (("ws.json.gz", gzip.compress(b" \n" * 5_000_000)), ("ws.json", b"\xef\xbb\xbf  \n\t ")):
        p = tmp_path / name
        p.write_bytes(body)
        one_line_error(cli_main("summary", str(p)), p, "holds nothing but whitespace")


HOSTILE = [
    trace(memcpy(10, 5, 2**63 - 1), memcpy(20, 5, 2**63 - 1, 2)),
    trace(memcpy(10, -5, -1), kernel("1e400", 1), kernel(1, "nan")),
    trace(kernel(9.2e15, 9.2e15), kernel(-9.2e15, 1), kernel(1.5e-300, 1e308)),
    trace(kernel(1, 2), baseTimeNanoseconds=2**63 - 1),
    trace(kernel(0, 0), kernel(0, 0, corr=2), memcpy(0, 0, 0)),  # all zero-length: no 0/0
    trace({"ph": "B", "name": "r", "pid": 1, "tid": 1, "ts": 1e20}, {"ph": "E", "pid": 1, "tid": 1, "ts": -1e20}),
]


@pytest.mark.parametrize("body", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_values_give_a_figure_or_an_error_and_never_a_warning(body: bytes) -> None:
    """numpy's RuntimeWarnings (overflow in a cast, divide by zero) would be printed before any figure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            out = summarize(without_impossible_rows(parse_kineto_bytes(body, "t")))
        except TraceFormatError:
            return
    for figures in out["devices"].values():
        assert all(v >= 0 for v in figures.values())
    assert all(c["bytes"] >= 0 and c["gb_per_s"] >= 0 for c in out["copies"])


# issue 38.4: times a trace can hold but no run makes (an 11.6-day kernel, GPU rows at -1e15 µs: a span of 31.9
# years) are kept and said in one note, not summed in silence -----------------------------------------------


def test_a_kernel_of_days_and_rows_years_away_are_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tracer.cli import main

    base = 1.7e15  # µs: the Unix clock, as PyTorch >= 2.0 writes it
    rows = [kernel(base + 10 * i, 5, corr=i) for i in range(20)]
    rows += [kernel(-1e15, 5, corr=100), kernel(-1e15 + 10, 5, corr=101), kernel(base, 11.6 * 86_400e6, corr=102)]
    path = tmp_path / "odd.json"
    path.write_bytes(trace(*rows))
    assert main(["summary", "--json", "--no-cache", str(path)]) == 0
    out, err = capsys.readouterr()
    note = ("1 event lasts longer than a day (the longest 11.6 days) and 2 events start more than a day away from "
            "the trace's others (the farthest 85.6 years): times no profiler records (damaged, or another clock); "
            "the span and the figures over it include them")
    assert err == f"tracer: note: {path}: {note}\n"
    result = orjson.loads(out)
    assert result["meta"]["notes"] == [note] and result["events"] == 23  # kept: which rows are wrong is unknown
    meta = load_trace(path, cache=False).meta
    assert meta.extra["implausible"] == {"long": 1, "longest_ns": 1_002_240_000_000_000, "far": 2,
                                         "farthest_ns": pytest.approx(2.7e18)}  # (float: ±2**62 apart fits)
    # a real trace, and one of a few hours, say nothing
    path.write_bytes(trace(*rows[:20], kernel(base + 3 * 3_600e6, 5)))
    assert main(["summary", "--no-cache", str(path)]) == 0
    assert "note" not in capsys.readouterr().err
