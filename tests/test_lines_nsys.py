"""Issue 37's "done when" under the nsys back end: tests/data/planted_train.py recorded on an NVIDIA H100 under
``nsys profile -t cuda,nvtx --cpuctxsw=none --python-backtrace=cuda --cudabacktrace=all --sample=process-tree``
(what `tracer record --backend nsys --stacks` runs; nsys 2025.3.1, torch 2.11.0+cu130), exported with
``nsys export --type sqlite --include-json=true``; the sampling and native-callchain tables dropped to keep the file
small (tests/data/planted_nsys_h100.sqlite.gz). nsys' Python backtraces name each call's own line: every planted
line must be the source of a finding of its kind, with the fix written for its call."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_lines_gpu import assert_planted_findings
from tracer.analysis.source_code import SourceFiles
from tracer.explain import Explanation, explain, explain_lines
from tracer.explain.lines import line_summary, read_sources
from tracer.parsers import load_trace
from tracer.timeline import Timeline

DATA = Path(__file__).parent / "data"
TRACE = DATA / "planted_nsys_h100.sqlite.gz"


@pytest.fixture(scope="module")
def timeline() -> Timeline:
    return load_trace(TRACE, cache=False)


@pytest.fixture(scope="module")
def explained(timeline: Timeline) -> Explanation:
    return explain(timeline, sources=read_sources(timeline, files=SourceFiles([DATA])))


def test_the_backtraces_become_frames_and_are_no_nvtx_ranges(timeline: Timeline) -> None:
    ev = timeline.events
    assert timeline.meta.extra.get("frame_lines") == "current"
    assert (ev["kind"] == "python").sum() > 300 and not (ev["kind"] == "range").any()  # (850 marks: no ranges)
    # (the backtrace records are no calls: 1,211 runtime calls, as the export holds of event class 0)
    assert (ev["kind"] == "runtime").sum() == 1211
    files = {str(n).split("(")[0] for n in ev.loc[ev["kind"] == "python", "name"].unique()}
    assert any(f.endswith("tests/data/planted_train.py") for f in files)


def test_each_planted_line_is_the_source_of_a_finding_of_its_kind_with_its_fix(explained: Explanation) -> None:
    assert_planted_findings(explained)
    # a line with no fix of its own says its kind's (it said "fix: nan")
    assert not any("fix: nan" in line_summary(r) for r in explained.by_line().itertuples())


def test_the_lines_table_ranks_the_large_cpu_copy_first(timeline: Timeline) -> None:
    table = explain_lines(timeline, read_sources(timeline, files=SourceFiles([DATA]))).table
    ours = table[table["file"].str.endswith("planted_train.py")].set_index("line")
    assert ours.index[0] == 33 and ours.loc[33, "exposed_copy_ns"] > 0.5 * ours["gpu_ns"].sum()
    assert ours.loc[29, "exposed_copy_ns"] > 0 and ours.loc[34, "sync_ns"] > 0 and ours.loc[28, "sync_ns"] >= 0
    assert ours.loc[31, "gpu_ns"] > 0 and ours.loc[31, "calls"] >= 40 * 12  # the loop's 40 tiny kernels a step


def test_an_export_without_the_payloads_says_how_to_keep_them(tmp_path: Path) -> None:
    """`nsys export` leaves the backtraces' payloads out unless asked (--include-json): the marks are still no
    ranges, and one note says how to export them."""
    import gzip
    import sqlite3

    path = tmp_path / "bare.sqlite"
    path.write_bytes(gzip.open(TRACE).read())
    with sqlite3.connect(path) as con:
        con.execute("UPDATE NVTX_EVENTS SET jsonText = NULL")
    t = load_trace(path, cache=False)
    assert not (t.events["kind"].isin(["python", "range"])).any() and "frame_lines" not in t.meta.extra
    (note,) = [n for n in t.meta.extra.get("notes", []) if "Python backtraces" in n]
    assert note.startswith("850 Python backtraces") and "--include-json=true" in note
    assert read_sources(t).note == note  # (`tracer lines` says that, not "record with --stacks")


def test_only_the_unexported_note_stands_for_missing_stacks() -> None:
    """Where no call has a user frame, the sources' note is the parser's "exported without their payloads" one
    where the export had it, else the plain "record with stacks" one: another note on Python backtraces (marks
    matched to no call, frames cut) was taken for it when any note naming Python backtraces was."""
    from tracer.analysis.source import NO_STACKS
    from tracer.timeline.meta import is_unexported_note, unexported_note

    t = load_trace(TRACE, cache=False)
    t.events = t.events[t.events["kind"] != "python"].reset_index(drop=True)
    other = "3 Python backtraces matched no CUDA call of their thread and were left out"
    t.meta.extra["notes"] = [other]
    assert read_sources(t).note == NO_STACKS
    t.meta.extra["notes"] = [other, unexported_note(1234)]
    assert read_sources(t).note == unexported_note(1234) and unexported_note(1234).startswith("1,234 Python")
    assert is_unexported_note(unexported_note(1)) and not is_unexported_note(other)
