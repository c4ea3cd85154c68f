"""The format table (tracer.files.formats): every place that knows the formats reads it — detection, dispatch, the
folder scan, a run directory's trace names, the dashboard's run names, the exporters."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.conftest import DATA
from tracer.errors import TraceFormatError
from tracer.exporters import EXPORTERS, export_timeline
from tracer.files import formats, rundir
from tracer.files.discover import discover, is_trace_file
from tracer.files.formats import FORMATS, TraceFormat
from tracer.parsers import detect_format, load_trace
from tracer.timeline import Timeline, TraceMeta, build_events

KINETO = DATA / "copy_side_stream.json.gz"
NSYS = DATA / "nsys_compute_copy.sqlite.gz"


def test_the_table_holds_the_four_formats_in_the_order_messages_list_them() -> None:
    assert list(FORMATS) == ["kineto", "nsys-sqlite", "nsys-rep", "parquet"]
    assert formats.nouns() == "a Kineto/Chrome JSON trace, an nsys SQLite export, a .nsys-rep or Parquet"
    assert formats.suffix_patterns() == "*.json[.gz], *.sqlite[.gz], *.nsys-rep, *.qdrep, *.parquet"


def test_each_format_is_told_from_its_content_whatever_its_name(tmp_path: Path) -> None:
    tl = load_trace(KINETO, cache=False)
    files = {
        "kineto": KINETO,
        "nsys-sqlite": NSYS,
        "parquet": export_timeline(tl, tmp_path / "t.parquet").path,
    }
    for name, src in files.items():
        renamed = tmp_path / f"no-suffix-{name}"
        renamed.write_bytes(src.read_bytes())
        assert detect_format(src) == detect_format(renamed) == name
    plain = tmp_path / "plain.sqlite"
    plain.write_bytes(gzip.decompress(NSYS.read_bytes()))
    assert detect_format(plain) == "nsys-sqlite"
    # a format without a magic (.nsys-rep: nsys's own binary) is told by its suffix, after every magic was tried
    for suffix in FORMATS["nsys-rep"].suffixes:
        rep = tmp_path / f"report{suffix}"
        rep.write_bytes(b"\x00binary report")
        assert detect_format(rep) == "nsys-rep"
    assert detect_format(tmp_path) == "run-dir"


def test_unrecognised_content_names_every_format_of_the_table(tmp_path: Path) -> None:
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"not a trace")
    with pytest.raises(TraceFormatError) as err:
        detect_format(bad)
    assert err.value.problem == f"unrecognised content: expected {formats.nouns()}"


def test_a_magic_after_white_space_counts_only_for_a_format_that_allows_white_space(tmp_path: Path) -> None:
    p = tmp_path / "x.bin"
    p.write_bytes(b" " * 100 + b"SQLite format 3\x00" + b"\x00" * 100)
    with pytest.raises(TraceFormatError, match="unrecognised content"):
        detect_format(p)
    p.write_bytes(b" " * 100 + b'{"traceEvents": []}')
    assert detect_format(p) == "kineto"


def test_the_folder_scan_and_the_dashboard_names_take_every_suffix_of_the_table(tmp_path: Path) -> None:
    for suffix in formats.trace_suffixes():
        f = tmp_path / f"t{suffix}"
        f.write_bytes(b"x")
        assert is_trace_file(f), suffix
        assert formats.stem(f.name) == "t", suffix
    (tmp_path / "notes.txt").write_text("x")
    assert {p.name for p in discover(tmp_path)} == {f"t{s}" for s in formats.trace_suffixes()}


def test_a_run_directorys_trace_names_come_from_the_table() -> None:
    assert rundir.TRACE_CANDIDATES == (
        "trace.json.gz", "trace.json", "report.sqlite.gz", "report.sqlite", "report.nsys-rep"
    )
    assert rundir.TIMELINE == "timeline.parquet" and rundir.TRACE == "trace.json.gz"
    for name in rundir.TRACE_CANDIDATES:
        owner = [f for f in FORMATS.values() if name in f.run_files]
        assert len(owner) == 1 and owner[0].named(name), name


def test_each_exporter_named_in_the_table_writes_what_tracer_reads_back_as_that_format(tmp_path: Path) -> None:
    tl = load_trace(NSYS, cache=False)
    named = {f.exporter for f in FORMATS.values() if f.exporter}
    assert named <= set(EXPORTERS)
    for f in FORMATS.values():
        exporter = EXPORTERS[f.exporter] if f.exporter else None
        if exporter is None:
            assert f.name == "nsys-rep"  # nsys writes those; tracer does not
            continue
        assert exporter.reads_back_as == f.name
        out = export_timeline(tl, tmp_path / f"out{exporter.suffixes[0]}", exporter.name)
        assert detect_format(out.path) == f.name, f.name
        assert f.named(out.path.name)
        back = load_trace(out.path, cache=False)
        assert len(back.events) > 0
    assert EXPORTERS["nvtxt"].reads_back_as is None


def test_a_format_added_to_the_table_is_detected_read_and_scanned(tmp_path: Path, monkeypatch) -> None:
    """How to add a trace format (docs/formats.md): a row and a reader, nothing else."""
    fake = TraceFormat("fake", "a fake trace", suffixes=(".fake",), reader=f"{__name__}:read_fake", magic=(b"FAKE",))
    monkeypatch.setitem(FORMATS, "fake", fake)
    p = tmp_path / "one.fake"
    p.write_bytes(b"FAKE 3")
    assert detect_format(p) == "fake"
    assert discover(tmp_path) == [p]
    tl = load_trace(p)
    assert len(tl.events) == 3 and tl.meta.format == "fake"
    assert "a fake trace" in formats.nouns()


def read_fake(p: Path, **_: object) -> Timeline:
    n = int(p.read_bytes().split()[1])
    columns = {"start_ns": [10 * i for i in range(n)], "end_ns": [10 * i + 5 for i in range(n)],
               "kind": ["kernel"] * n, "name": ["k"] * n, "device": [0] * n, "stream": [7] * n}
    return Timeline(build_events(columns), TraceMeta(format="fake", source=str(p)))
